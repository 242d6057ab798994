//! The cost of the data path without a device: each verb against a fake
//! provider whose ops return at once, through the `#[inline]` Rust port
//! (`rdma::sys::ibv_post_send`, what `rdma` calls) and through its C shim
//! twin (`rdma::sys::shim::*`, a real call into C, as an application built
//! without the ports would pay).
//!
//! The provider objects are zeroed C structs with function pointers set,
//! as in ibverbs-sys's `data_path_twins` test, with the recording removed.
//! `rdma`'s own types need a device to be created, so what this measures is
//! the call path underneath them; the device runs (ci/perf.sh) measure the
//! whole.
//!
//! Run with `cargo bench -p rdma --bench fast_path`.

use std::ffi::c_int;
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::ptr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rdma::sys::{self, ibv_context, ibv_cq, ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_wc};

/// A zeroed C struct: every pointer NULL, every op `None`.
fn zeroed<T>() -> T {
    // SAFETY: only used for bindgen structs of integers, raw pointers, arrays
    // and `Option<extern fn>`, for all of which all-zero bytes are valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

/// A provider's post_send that accepts the whole list.
unsafe extern "C" fn fake_post_send(
    _qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    _bad: *mut *mut ibv_send_wr,
) -> c_int {
    // Walk the list as a provider does, so a list costs per request.
    let mut n = 0;
    let mut p = wr;
    while !p.is_null() {
        n += 1;
        // SAFETY: the benchmark passes a valid NULL-terminated list.
        p = unsafe { (*p).next };
    }
    black_box(n);
    0
}

unsafe extern "C" fn fake_post_recv(
    _qp: *mut ibv_qp,
    _wr: *mut ibv_recv_wr,
    _bad: *mut *mut ibv_recv_wr,
) -> c_int {
    0
}

/// A provider's poll_cq on an empty queue.
unsafe extern "C" fn fake_poll_empty(_cq: *mut ibv_cq, _n: c_int, _wc: *mut ibv_wc) -> c_int {
    0
}

/// A provider's poll_cq that always finds `n` successful completions.
unsafe extern "C" fn fake_poll_full(_cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    for i in 0..n as usize {
        // SAFETY: the caller passes room for `n` completions.
        unsafe {
            let w = wc.add(i);
            ptr::addr_of_mut!((*w).wr_id).write(i as u64);
            ptr::addr_of_mut!((*w).status).write(sys::IBV_WC_SUCCESS);
            ptr::addr_of_mut!((*w).opcode).write(sys::IBV_WC_SEND);
            ptr::addr_of_mut!((*w).byte_len).write(64);
        }
    }
    n
}

/// A fake device context, QP and CQ pointing at it.
struct Fake {
    /// Owns the op table the QP and CQ point to.
    _ctx: Box<ibv_context>,
    qp: Box<ibv_qp>,
    cq: Box<ibv_cq>,
}

impl Fake {
    fn new(poll: unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int) -> Fake {
        let mut ctx: Box<ibv_context> = Box::new(zeroed());
        ctx.ops.post_send = Some(fake_post_send);
        ctx.ops.post_recv = Some(fake_post_recv);
        ctx.ops.poll_cq = Some(poll);
        let mut qp: Box<ibv_qp> = Box::new(zeroed());
        qp.context = &mut *ctx;
        let mut cq: Box<ibv_cq> = Box::new(zeroed());
        cq.context = &mut *ctx;
        Fake { _ctx: ctx, qp, cq }
    }
    fn qp(&mut self) -> *mut ibv_qp {
        &mut *self.qp
    }
    fn cq(&mut self) -> *mut ibv_cq {
        &mut *self.cq
    }
}

/// `n` send work requests, linked, each with one SGE.
fn send_list(n: usize, sge: &mut sys::ibv_sge) -> Vec<ibv_send_wr> {
    let mut wrs: Vec<ibv_send_wr> = (0..n)
        .map(|i| {
            let mut w: ibv_send_wr = zeroed();
            w.wr_id = i as u64;
            w.opcode = sys::IBV_WR_SEND;
            w.sg_list = sge;
            w.num_sge = 1;
            w
        })
        .collect();
    for i in (0..n.saturating_sub(1)).rev() {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    wrs
}

fn post(c: &mut Criterion) {
    let mut fake = Fake::new(fake_poll_empty);
    let qp = fake.qp();
    let mut sge = sys::ibv_sge {
        addr: 0x1000,
        length: 64,
        lkey: 1,
    };
    let mut g = c.benchmark_group("post_send");
    for n in [1usize, 16] {
        let mut wrs = send_list(n, &mut sge);
        let head: *mut ibv_send_wr = &mut wrs[0];
        g.bench_with_input(BenchmarkId::new("port", n), &n, |b, _| {
            let mut bad = ptr::null_mut();
            // SAFETY: a fake QP whose context has post_send; a valid list.
            b.iter(|| unsafe { sys::ibv_post_send(black_box(qp), black_box(head), &mut bad) })
        });
        g.bench_with_input(BenchmarkId::new("shim", n), &n, |b, _| {
            let mut bad = ptr::null_mut();
            // SAFETY: as above, through the C shim.
            b.iter(|| unsafe { sys::shim::ibv_post_send(black_box(qp), black_box(head), &mut bad) })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("post_recv");
    let mut rwr = ibv_recv_wr {
        wr_id: 1,
        next: ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let rhead: *mut ibv_recv_wr = &mut rwr;
    g.bench_function("port", |b| {
        let mut bad = ptr::null_mut();
        // SAFETY: a fake QP whose context has post_recv; one valid request.
        b.iter(|| unsafe { sys::ibv_post_recv(black_box(qp), black_box(rhead), &mut bad) })
    });
    g.bench_function("shim", |b| {
        let mut bad = ptr::null_mut();
        // SAFETY: as above, through the C shim.
        b.iter(|| unsafe { sys::shim::ibv_post_recv(black_box(qp), black_box(rhead), &mut bad) })
    });
    g.finish();
}

fn poll(c: &mut Criterion) {
    let mut empty = Fake::new(fake_poll_empty);
    let cq = empty.cq();
    let mut wcs: [MaybeUninit<ibv_wc>; 16] = [MaybeUninit::uninit(); 16];
    let mut g = c.benchmark_group("poll_cq_empty");
    g.bench_function("port", |b| {
        // SAFETY: a fake CQ whose context has poll_cq; room for 16.
        b.iter(|| unsafe { sys::ibv_poll_cq(black_box(cq), 16, wcs.as_mut_ptr().cast()) })
    });
    g.bench_function("shim", |b| {
        // SAFETY: as above, through the C shim.
        b.iter(|| unsafe { sys::shim::ibv_poll_cq(black_box(cq), 16, wcs.as_mut_ptr().cast()) })
    });
    g.finish();

    let mut full = Fake::new(fake_poll_full);
    let cq = full.cq();
    let mut g = c.benchmark_group("poll_cq_n");
    for n in [1i32, 16] {
        g.bench_with_input(BenchmarkId::new("port", n), &n, |b, &n| {
            b.iter(|| {
                // SAFETY: a fake CQ; room for 16 >= n.
                let got = unsafe { sys::ibv_poll_cq(black_box(cq), n, wcs.as_mut_ptr().cast()) };
                // Read what was polled, as a caller does.
                let mut sum = 0u64;
                for w in &wcs[..got as usize] {
                    // SAFETY: the fake wrote wr_id and status of the first `got`.
                    let w = unsafe { w.assume_init_ref() };
                    sum += w.wr_id + u64::from(w.status == sys::IBV_WC_SUCCESS);
                }
                sum
            })
        });
        g.bench_with_input(BenchmarkId::new("shim", n), &n, |b, &n| {
            b.iter(|| {
                // SAFETY: as above, through the C shim.
                let got =
                    unsafe { sys::shim::ibv_poll_cq(black_box(cq), n, wcs.as_mut_ptr().cast()) };
                let mut sum = 0u64;
                for w in &wcs[..got as usize] {
                    // SAFETY: as above.
                    let w = unsafe { w.assume_init_ref() };
                    sum += w.wr_id + u64::from(w.status == sys::IBV_WC_SUCCESS);
                }
                sum
            })
        });
    }
    g.finish();
}

criterion_group!(benches, post, poll);
criterion_main!(benches);
