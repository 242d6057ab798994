//! Every `#[inline]` port of a data-path static inline behaves like its C
//! shim twin: both call the same provider op, with the same arguments, and
//! return what the op returned.
//!
//! The provider is faked: each op is a Rust function that records its name
//! and arguments and returns a distinctive value. No device is needed.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;

use ibverbs_sys as sys;
use sys::*;

type Call = (&'static str, Vec<u64>);

thread_local! {
    static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
}

fn record(op: &'static str, args: &[u64]) {
    CALLS.with(|c| c.borrow_mut().push((op, args.to_vec())));
}

/// Runs `f` and returns its result with the ops it called.
fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Call>) {
    CALLS.with(|c| c.borrow_mut().clear());
    let r = f();
    (r, CALLS.with(|c| c.borrow_mut().split_off(0)))
}

/// A zeroed C struct: every pointer NULL, every op `None`.
fn zeroed<T>() -> T {
    // SAFETY: only used for bindgen structs of integers, raw pointers, arrays
    // and `Option<extern fn>`, for all of which all-zero bytes are valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

trait Arg {
    fn bits(self) -> u64;
}
macro_rules! int_arg { ($($t:ty),*) => { $(impl Arg for $t { fn bits(self) -> u64 { self as u64 } })* } }
int_arg!(u8, u16, u32, u64, usize, i32);
impl<T> Arg for *mut T {
    fn bits(self) -> u64 {
        self as usize as u64
    }
}
impl<T> Arg for *const T {
    fn bits(self) -> u64 {
        self as usize as u64
    }
}

/// Compares a port and its twin that call one op of an `ibv_qp_ex`.
macro_rules! qp_ex_twin {
    ($func:ident => $field:ident ( $($arg:ident : $ty:ty = $val:expr),* ) $(-> $ret:ty = $rv:expr)?) => {
        #[test]
        fn $func() {
            unsafe extern "C" fn fake(qp: *mut ibv_qp_ex $(, $arg: $ty)*) $(-> $ret)? {
                record(stringify!($field), &[qp.bits() $(, $arg.bits())*]);
                $($rv)?
            }
            let mut qp: ibv_qp_ex = zeroed();
            qp.$field = Some(fake);
            let p: *mut ibv_qp_ex = &mut qp;
            // SAFETY: `p` is a live (fake) extended QP whose op is set; the
            // fake only records its arguments.
            let port = capture(|| unsafe { sys::$func(p $(, $val)*) });
            // SAFETY: as above, through the C shim.
            let twin = capture(|| unsafe { sys::shim::$func(p $(, $val)*) });
            assert_eq!(port, twin);
            assert_eq!(port.1, vec![(stringify!($field), vec![p.bits() $(, { let v: $ty = $val; v.bits() })*])]);
        }
    };
}

/// Compares a port and its twin that call one op of an `ibv_cq_ex`.
macro_rules! cq_ex_twin {
    ($func:ident => $field:ident ( $($arg:ident : $ty:ty = $val:expr),* ) $(-> $ret:ty = $rv:expr)?) => {
        #[test]
        fn $func() {
            unsafe extern "C" fn fake(cq: *mut ibv_cq_ex $(, $arg: $ty)*) $(-> $ret)? {
                record(stringify!($field), &[cq.bits() $(, $arg.bits())*]);
                $($rv)?
            }
            let mut cq: ibv_cq_ex = zeroed();
            cq.$field = Some(fake);
            let p: *mut ibv_cq_ex = &mut cq;
            // SAFETY: `p` is a live (fake) extended CQ whose op is set.
            let port = capture(|| unsafe { sys::$func(p $(, $val)*) });
            // SAFETY: as above, through the C shim.
            let twin = capture(|| unsafe { sys::shim::$func(p $(, $val)*) });
            assert_eq!(port, twin);
            assert_eq!(port.1, vec![(stringify!($field), vec![p.bits() $(, { let v: $ty = $val; v.bits() })*])]);
        }
    };
}

const RKEY: u32 = 0x1357_9bdf;
const ADDR: u64 = 0x0000_7f12_3456_7000;
const IMM: u32 = 0xcafe_f00d;

fn ptr<T>(v: usize) -> *mut T {
    v as *mut T
}

qp_ex_twin!(ibv_wr_start => wr_start());
qp_ex_twin!(ibv_wr_complete => wr_complete() -> c_int = 42);
qp_ex_twin!(ibv_wr_abort => wr_abort());
qp_ex_twin!(ibv_wr_atomic_cmp_swp => wr_atomic_cmp_swp(rkey: u32 = RKEY, remote_addr: u64 = ADDR, compare: u64 = 11, swap: u64 = 22));
qp_ex_twin!(ibv_wr_atomic_fetch_add => wr_atomic_fetch_add(rkey: u32 = RKEY, remote_addr: u64 = ADDR, add: u64 = 5));
qp_ex_twin!(ibv_wr_bind_mw => wr_bind_mw(mw: *mut ibv_mw = ptr(0x1000), rkey: u32 = RKEY, info: *const ibv_mw_bind_info = ptr::<ibv_mw_bind_info>(0x2000)));
qp_ex_twin!(ibv_wr_local_inv => wr_local_inv(rkey: u32 = RKEY));
qp_ex_twin!(ibv_wr_rdma_read => wr_rdma_read(rkey: u32 = RKEY, remote_addr: u64 = ADDR));
qp_ex_twin!(ibv_wr_rdma_write => wr_rdma_write(rkey: u32 = RKEY, remote_addr: u64 = ADDR));
qp_ex_twin!(ibv_wr_rdma_write_imm => wr_rdma_write_imm(rkey: u32 = RKEY, remote_addr: u64 = ADDR, imm: u32 = IMM));
qp_ex_twin!(ibv_wr_send => wr_send());
qp_ex_twin!(ibv_wr_send_imm => wr_send_imm(imm: u32 = IMM));
qp_ex_twin!(ibv_wr_send_inv => wr_send_inv(rkey: u32 = RKEY));
qp_ex_twin!(ibv_wr_send_tso => wr_send_tso(hdr: *mut c_void = ptr(0x3000), hdr_sz: u16 = 54, mss: u16 = 1460));
qp_ex_twin!(ibv_wr_set_ud_addr => wr_set_ud_addr(ah: *mut ibv_ah = ptr(0x4000), qpn: u32 = 0x11, qkey: u32 = 0x8001_0000));
qp_ex_twin!(ibv_wr_set_xrc_srqn => wr_set_xrc_srqn(srqn: u32 = 77));
qp_ex_twin!(ibv_wr_set_inline_data => wr_set_inline_data(addr: *mut c_void = ptr(0x5000), len: usize = 64));
qp_ex_twin!(ibv_wr_set_inline_data_list => wr_set_inline_data_list(n: usize = 3, bufs: *const ibv_data_buf = ptr::<ibv_data_buf>(0x6000)));
qp_ex_twin!(ibv_wr_set_sge => wr_set_sge(lkey: u32 = RKEY, addr: u64 = ADDR, len: u32 = 4096));
qp_ex_twin!(ibv_wr_set_sge_list => wr_set_sge_list(n: usize = 2, sges: *const ibv_sge = ptr::<ibv_sge>(0x7000)));
qp_ex_twin!(ibv_wr_atomic_write => wr_atomic_write(rkey: u32 = RKEY, remote_addr: u64 = ADDR, src: *const c_void = ptr::<c_void>(0x8000)));
// Only where verbs.h has it (the build script's cfg).
#[cfg(has_ibv_wr_flush)]
qp_ex_twin!(ibv_wr_flush => wr_flush(rkey: u32 = RKEY, remote_addr: u64 = ADDR, len: usize = 1 << 20, ty: u8 = IBV_FLUSH_PERSISTENT as u8, level: u8 = IBV_FLUSH_MR as u8));

cq_ex_twin!(ibv_start_poll => start_poll(attr: *mut ibv_poll_cq_attr = ptr(0x9000)) -> c_int = 2);
cq_ex_twin!(ibv_next_poll => next_poll() -> c_int = 2);
cq_ex_twin!(ibv_end_poll => end_poll());
cq_ex_twin!(ibv_wc_read_opcode => read_opcode() -> ibv_wc_opcode = IBV_WC_RDMA_WRITE);
cq_ex_twin!(ibv_wc_read_vendor_err => read_vendor_err() -> u32 = 0x51);
cq_ex_twin!(ibv_wc_read_byte_len => read_byte_len() -> u32 = 4096);
cq_ex_twin!(ibv_wc_read_imm_data => read_imm_data() -> __be32 = IMM);
cq_ex_twin!(ibv_wc_read_qp_num => read_qp_num() -> u32 = 0x12);
cq_ex_twin!(ibv_wc_read_src_qp => read_src_qp() -> u32 = 0x13);
cq_ex_twin!(ibv_wc_read_wc_flags => read_wc_flags() -> c_uint = IBV_WC_WITH_IMM);
cq_ex_twin!(ibv_wc_read_slid => read_slid() -> u32 = 0x14);
cq_ex_twin!(ibv_wc_read_sl => read_sl() -> u8 = 3);
cq_ex_twin!(ibv_wc_read_dlid_path_bits => read_dlid_path_bits() -> u8 = 5);
cq_ex_twin!(ibv_wc_read_completion_ts => read_completion_ts() -> u64 = 1 << 40);
cq_ex_twin!(ibv_wc_read_completion_wallclock_ns => read_completion_wallclock_ns() -> u64 = 1 << 50);
cq_ex_twin!(ibv_wc_read_cvlan => read_cvlan() -> u16 = 100);
cq_ex_twin!(ibv_wc_read_flow_tag => read_flow_tag() -> u32 = 0xabc);
cq_ex_twin!(ibv_wc_read_tm_info => read_tm_info(info: *mut ibv_wc_tm_info = ptr(0xa000)));
// The invalidated rkey shares the immediate-data slot: C reads it with read_imm_data.
cq_ex_twin!(ibv_wc_read_invalidated_rkey => read_imm_data() -> __be32 = RKEY);

/// A fake context whose op table records the classic data-path calls.
fn fake_context() -> ibv_context {
    unsafe extern "C" fn post_send(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
    ) -> c_int {
        record("post_send", &[qp.bits(), wr.bits(), bad.bits()]);
        -3
    }
    unsafe extern "C" fn post_recv(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        record("post_recv", &[qp.bits(), wr.bits(), bad.bits()]);
        12
    }
    unsafe extern "C" fn post_srq_recv(
        srq: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        record("post_srq_recv", &[srq.bits(), wr.bits(), bad.bits()]);
        22
    }
    unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        record("poll_cq", &[cq.bits(), n.bits(), wc.bits()]);
        n - 1
    }
    unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited: c_int) -> c_int {
        record("req_notify_cq", &[cq.bits(), solicited.bits()]);
        95
    }
    let mut ctx: ibv_context = zeroed();
    ctx.ops.post_send = Some(post_send);
    ctx.ops.post_recv = Some(post_recv);
    ctx.ops.post_srq_recv = Some(post_srq_recv);
    ctx.ops.poll_cq = Some(poll_cq);
    ctx.ops.req_notify_cq = Some(req_notify_cq);
    ctx
}

#[test]
fn ibv_post_send_and_ibv_post_recv() {
    let mut ctx = fake_context();
    let mut qp: ibv_qp = zeroed();
    qp.context = &mut ctx;
    let q: *mut ibv_qp = &mut qp;
    let (swr, sbad) = (ptr::<ibv_send_wr>(0x100), ptr::<*mut ibv_send_wr>(0x200));
    // SAFETY: `q` is a fake QP whose context's op table is set.
    let port = capture(|| unsafe { sys::ibv_post_send(q, swr, sbad) });
    // SAFETY: as above, through the C shim.
    let twin = capture(|| unsafe { sys::shim::ibv_post_send(q, swr, sbad) });
    assert_eq!(port, twin);
    assert_eq!(
        port,
        (
            -3,
            vec![("post_send", vec![q.bits(), swr.bits(), sbad.bits()])]
        )
    );

    let (rwr, rbad) = (ptr::<ibv_recv_wr>(0x300), ptr::<*mut ibv_recv_wr>(0x400));
    // SAFETY: as above.
    let port = capture(|| unsafe { sys::ibv_post_recv(q, rwr, rbad) });
    // SAFETY: as above, through the C shim.
    let twin = capture(|| unsafe { sys::shim::ibv_post_recv(q, rwr, rbad) });
    assert_eq!(port, twin);
    assert_eq!(
        port,
        (
            12,
            vec![("post_recv", vec![q.bits(), rwr.bits(), rbad.bits()])]
        )
    );
}

#[test]
fn ibv_post_srq_recv() {
    let mut ctx = fake_context();
    let mut srq: ibv_srq = zeroed();
    srq.context = &mut ctx;
    let s: *mut ibv_srq = &mut srq;
    let (wr, bad) = (ptr::<ibv_recv_wr>(0x300), ptr::<*mut ibv_recv_wr>(0x400));
    // SAFETY: `s` is a fake SRQ whose context's op table is set.
    let port = capture(|| unsafe { sys::ibv_post_srq_recv(s, wr, bad) });
    // SAFETY: as above, through the C shim.
    let twin = capture(|| unsafe { sys::shim::ibv_post_srq_recv(s, wr, bad) });
    assert_eq!(port, twin);
    assert_eq!(
        port,
        (
            22,
            vec![("post_srq_recv", vec![s.bits(), wr.bits(), bad.bits()])]
        )
    );
}

#[test]
fn ibv_post_wq_recv() {
    unsafe extern "C" fn post_recv(
        wq: *mut ibv_wq,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> c_int {
        record("wq.post_recv", &[wq.bits(), wr.bits(), bad.bits()]);
        7
    }
    let mut wq: ibv_wq = zeroed();
    wq.post_recv = Some(post_recv);
    let w: *mut ibv_wq = &mut wq;
    let (wr, bad) = (ptr::<ibv_recv_wr>(0x300), ptr::<*mut ibv_recv_wr>(0x400));
    // SAFETY: `w` is a fake WQ whose post_recv is set.
    let port = capture(|| unsafe { sys::ibv_post_wq_recv(w, wr, bad) });
    // SAFETY: as above, through the C shim.
    let twin = capture(|| unsafe { sys::shim::ibv_post_wq_recv(w, wr, bad) });
    assert_eq!(port, twin);
    assert_eq!(
        port,
        (
            7,
            vec![("wq.post_recv", vec![w.bits(), wr.bits(), bad.bits()])]
        )
    );
}

#[test]
fn ibv_poll_cq_and_ibv_req_notify_cq() {
    let mut ctx = fake_context();
    let mut cq: ibv_cq = zeroed();
    cq.context = &mut ctx;
    let c: *mut ibv_cq = &mut cq;
    let wc = ptr::<ibv_wc>(0x500);
    // SAFETY: `c` is a fake CQ whose context's op table is set.
    let port = capture(|| unsafe { sys::ibv_poll_cq(c, 16, wc) });
    // SAFETY: as above, through the C shim.
    let twin = capture(|| unsafe { sys::shim::ibv_poll_cq(c, 16, wc) });
    assert_eq!(port, twin);
    assert_eq!(port, (15, vec![("poll_cq", vec![c.bits(), 16, wc.bits()])]));

    for solicited in [0, 1] {
        // SAFETY: as above.
        let port = capture(|| unsafe { sys::ibv_req_notify_cq(c, solicited) });
        // SAFETY: as above, through the C shim.
        let twin = capture(|| unsafe { sys::shim::ibv_req_notify_cq(c, solicited) });
        assert_eq!(port, twin);
        assert_eq!(
            port,
            (
                95,
                vec![("req_notify_cq", vec![c.bits(), solicited as u64])]
            )
        );
    }
}

#[test]
fn ibv_cq_ex_to_cq() {
    let mut cq: ibv_cq_ex = zeroed();
    let p: *mut ibv_cq_ex = &mut cq;
    // SAFETY: the shim only casts the pointer.
    let twin = unsafe { sys::shim::ibv_cq_ex_to_cq(p) };
    assert_eq!(sys::ibv_cq_ex_to_cq(p), twin);
    assert_eq!(twin as usize, p as usize);
}

/// Every data-path static inline of this system's verbs.h has a port, and
/// every port has a C twin. The port of an inline only some releases have is
/// built exactly where the headers have it: `has_ibv_wr_flush` is set by the
/// build script from what bindgen found. Fails on a newer rdma-core that adds a data-path
/// inline this crate does not port yet.
#[test]
fn every_data_path_inline_is_ported() {
    let shims: BTreeSet<&str> = sys::shim::SHIM_FUNCTIONS.iter().copied().collect();
    let ports: BTreeSet<&str> = sys::PORTED_FUNCTIONS.iter().copied().collect();
    let unported: Vec<_> = shims.difference(&ports).collect();
    let orphans: Vec<_> = ports.difference(&shims).collect();
    assert!(
        unported.is_empty(),
        "data-path inlines without a Rust port: {unported:?}"
    );
    assert!(
        orphans.is_empty(),
        "ports without a C twin in this verbs.h: {orphans:?}"
    );
    assert_eq!(
        cfg!(has_ibv_wr_flush),
        shims.contains("ibv_wr_flush"),
        "has_ibv_wr_flush disagrees with the headers"
    );
}

/// Functions the data-path pattern matches that are not data path are
/// bound with the rest of verbs.h, outside `shim`.
#[test]
fn not_data_path_names_are_ordinary_bindings() {
    assert!(!sys::shim::SHIM_FUNCTIONS.contains(&"ibv_wr_opcode_str"));
    assert!(!sys::PORTED_FUNCTIONS.contains(&"ibv_wr_opcode_str"));
    // Its declaration, checked at compile time only: libibverbs exports it
    // under a private symbol version (IBVERBS_PRIVATE_<n>), so a call would
    // tie this binary to exactly the libibverbs it was built against.
    #[cfg(has_ibv_wr_opcode_str)]
    const _: unsafe extern "C" fn(ibv_wr_opcode) -> *const std::ffi::c_char =
        sys::ibv_wr_opcode_str;
}
