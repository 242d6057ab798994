//! Helpers over the raw bindings for the -sys-level device tests.
//!
//! The helpers take the raw C objects that other helpers of this module
//! created (and that a [`Defer`] keeps alive for the test), never arbitrary
//! pointers; that is why they are not `unsafe fn`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::{c_int, CStr};
use std::ptr;
use std::time::{Duration, Instant};

use ibverbs_sys::*;

use crate::{fail, Defer, Failure};

/// The error type of the helpers.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Fails with the verb's name and errno when `p` is NULL.
pub fn non_null<T>(p: *mut T, verb: &str) -> Result<*mut T> {
    if p.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(Box::new(Failure(format!("{verb} failed: {e}"))));
    }
    Ok(p)
}

/// Fails with the verb's name when `rc` is not 0 (an errno value or -1 + errno).
pub fn ok(rc: c_int, verb: &str) -> Result<()> {
    match rc {
        0 => Ok(()),
        -1 => Err(Box::new(Failure(format!(
            "{verb} failed: {}",
            std::io::Error::last_os_error()
        )))),
        e => Err(Box::new(Failure(format!(
            "{verb} failed: {}",
            std::io::Error::from_raw_os_error(e.abs())
        )))),
    }
}

/// A page-aligned, zeroed buffer that a memory region can cover.
///
/// It hands out raw pointers only: while a device may write into it, no Rust
/// reference to its bytes exists.
pub struct Buf {
    ptr: *mut u8,
    len: usize,
}

impl Buf {
    const ALIGN: usize = 4096;

    /// Allocates `len` zeroed bytes.
    pub fn new(len: usize) -> Buf {
        let layout = Layout::from_size_align(len, Self::ALIGN).expect("valid layout");
        // SAFETY: `layout` has a non-zero size (callers pass len > 0).
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Buf { ptr, len }
    }

    /// The start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The address of byte `off`, as a device address.
    pub fn addr(&self, off: usize) -> u64 {
        assert!(off <= self.len);
        self.ptr as u64 + off as u64
    }

    /// Copies `src` to offset `off`.
    pub fn write(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len);
        // SAFETY: the range is inside the allocation; no reference to it exists.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// Copies `len` bytes from offset `off` out.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        let mut v = vec![0; len];
        // SAFETY: the range is inside the allocation; callers read only after
        // the completion that ends the device's access has been polled.
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(off), v.as_mut_ptr(), len) }
        v
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: `new` needs a length).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, Self::ALIGN).expect("valid layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, layout) }
    }
}

/// A byte pattern that differs per `seed` and per position.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Opens the verbs device called `name`; closes it when `defer` drops.
pub fn open_device(name: &str, defer: &mut Defer) -> Result<*mut ibv_context> {
    let mut n = 0;
    // SAFETY: `n` is writable; the list is freed below.
    let list = non_null(
        unsafe { ibv_get_device_list(&mut n) },
        "ibv_get_device_list",
    )?;
    let mut ctx = ptr::null_mut();
    for i in 0..n as usize {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is a valid device; its name is a C string it owns.
        let dev_name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
        if dev_name.to_bytes() == name.as_bytes() {
            // SAFETY: `dev` is valid while the list is alive.
            ctx = unsafe { ibv_open_device(dev) };
            break;
        }
    }
    // SAFETY: `list` came from ibv_get_device_list; the opened context keeps
    // its own reference to the device.
    unsafe { ibv_free_device_list(list) };
    let ctx = non_null(ctx, &format!("ibv_open_device({name})"))?;
    // SAFETY: the context is closed once, after everything created on it.
    defer.push("ibv_close_device", move || unsafe { ibv_close_device(ctx) });
    Ok(ctx)
}

/// Allocates a protection domain, freed when `defer` drops.
pub fn alloc_pd(ctx: *mut ibv_context, defer: &mut Defer) -> Result<*mut ibv_pd> {
    // SAFETY: `ctx` is an open context.
    let pd = non_null(unsafe { ibv_alloc_pd(ctx) }, "ibv_alloc_pd")?;
    // SAFETY: deallocated once, after its MRs and QPs (Defer runs in reverse).
    defer.push("ibv_dealloc_pd", move || unsafe { ibv_dealloc_pd(pd) });
    Ok(pd)
}

/// Creates a CQ of `depth` entries, destroyed when `defer` drops.
pub fn create_cq(ctx: *mut ibv_context, depth: c_int, defer: &mut Defer) -> Result<*mut ibv_cq> {
    // SAFETY: `ctx` is open; no channel, no context pointer.
    let cq = non_null(
        unsafe { ibv_create_cq(ctx, depth, ptr::null_mut(), ptr::null_mut(), 0) },
        "ibv_create_cq",
    )?;
    // SAFETY: destroyed once, after the QPs that use it.
    defer.push("ibv_destroy_cq", move || unsafe { ibv_destroy_cq(cq) });
    Ok(cq)
}

/// Registers all of `buf` with local and remote read/write access.
pub fn reg_mr(pd: *mut ibv_pd, buf: &Buf, defer: &mut Defer) -> Result<*mut ibv_mr> {
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    // SAFETY: `buf` outlives the registration: callers declare buffers before
    // the Defer that deregisters.
    let mr = non_null(
        unsafe { ibv_reg_mr(pd, buf.as_ptr().cast(), buf.len(), access as c_int) },
        "ibv_reg_mr",
    )?;
    // SAFETY: deregistered once.
    defer.push("ibv_dereg_mr", move || unsafe { ibv_dereg_mr(mr) });
    Ok(mr)
}

/// The classic data-path calls, either through the Rust ports or the C shims.
#[derive(Clone, Copy)]
pub struct DataPath {
    /// `fast` or `shim`.
    pub name: &'static str,
    /// `ibv_post_send`.
    pub post_send: unsafe fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int,
    /// `ibv_post_recv`.
    pub post_recv: unsafe fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    /// `ibv_poll_cq`.
    pub poll_cq: unsafe fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int,
}

/// The `#[inline]` Rust ports at the root of ibverbs-sys.
pub const FAST: DataPath = DataPath {
    name: "fast",
    post_send: ibverbs_sys::ibv_post_send,
    post_recv: ibverbs_sys::ibv_post_recv,
    poll_cq: ibverbs_sys::ibv_poll_cq,
};

unsafe fn shim_post_send(q: *mut ibv_qp, w: *mut ibv_send_wr, b: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: same contract as the caller's.
    unsafe { ibverbs_sys::shim::ibv_post_send(q, w, b) }
}
unsafe fn shim_post_recv(q: *mut ibv_qp, w: *mut ibv_recv_wr, b: *mut *mut ibv_recv_wr) -> c_int {
    // SAFETY: same contract as the caller's.
    unsafe { ibverbs_sys::shim::ibv_post_recv(q, w, b) }
}
unsafe fn shim_poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: same contract as the caller's.
    unsafe { ibverbs_sys::shim::ibv_poll_cq(cq, n, wc) }
}

/// The C shim twins in `ibverbs_sys::shim`.
pub const SHIM: DataPath = DataPath {
    name: "shim",
    post_send: shim_post_send,
    post_recv: shim_post_recv,
    poll_cq: shim_poll_cq,
};

/// How long a test waits for one completion before it fails.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(20);

/// What a completion reported, minus what differs between runs by design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WcRecord {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub byte_len: u32,
    pub qp_num: u32,
}

/// Polls `cq` until one completion arrives, or fails after the timeout.
pub fn poll_one(path: &DataPath, cq: *mut ibv_cq) -> Result<WcRecord> {
    let start = Instant::now();
    loop {
        // SAFETY: ibv_wc is plain data; the provider fills it.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: `cq` is live and `wc` has room for one entry.
        let n = unsafe { (path.poll_cq)(cq, 1, &mut wc) };
        if n < 0 {
            fail!("ibv_poll_cq ({}) failed: {n}", path.name);
        }
        if n == 1 {
            if wc.status != IBV_WC_SUCCESS {
                // SAFETY: ibv_wc_status_str returns a static string for any value.
                let s = unsafe { CStr::from_ptr(ibv_wc_status_str(wc.status)) };
                fail!(
                    "completion wr_id {:#x} failed: {} (vendor error {:#x})",
                    wc.wr_id,
                    s.to_string_lossy(),
                    wc.vendor_err
                );
            }
            return Ok(WcRecord {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                qp_num: wc.qp_num,
            });
        }
        if start.elapsed() > COMPLETION_TIMEOUT {
            fail!(
                "no completion within {COMPLETION_TIMEOUT:?} ({})",
                path.name
            );
        }
        std::thread::yield_now();
    }
}

/// One side of a reliable connection: its QP, its CQ (send and receive) and
/// a registered buffer.
pub struct Endpoint<'a> {
    pub qp: *mut ibv_qp,
    pub cq: *mut ibv_cq,
    pub buf: &'a Buf,
    pub mr: *mut ibv_mr,
}

/// Offsets and sizes of the exchange.
const SEND_LEN: usize = 64;
const WRITE_OFF: usize = 1024;
const WRITE_LEN: usize = 512;

/// A SEND from `a` to `b`, then an RDMA WRITE from `a` into `b`'s buffer,
/// through `path`; verifies the data and returns the completions in order.
pub fn send_and_write(
    path: &DataPath,
    a: &Endpoint,
    b: &Endpoint,
    seed: u8,
) -> Result<Vec<WcRecord>> {
    let mut out = Vec::new();
    // SAFETY (for the MR reads below): the MRs are live registrations.
    let (a_lkey, b_lkey, b_rkey) = unsafe { ((*a.mr).lkey, (*b.mr).lkey, (*b.mr).rkey) };

    // SEND.
    let msg = pattern(seed, SEND_LEN);
    a.buf.write(0, &msg);
    b.buf.write(0, &[0; SEND_LEN]);
    let mut rsge = ibv_sge {
        addr: b.buf.addr(0),
        length: 256,
        lkey: b_lkey,
    };
    let mut rwr = ibv_recv_wr {
        wr_id: 0x100,
        next: ptr::null_mut(),
        sg_list: &mut rsge,
        num_sge: 1,
    };
    let mut bad_r = ptr::null_mut();
    // SAFETY: `b.qp` is live; the SGE covers registered memory that outlives
    // the completion polled below.
    ok(
        unsafe { (path.post_recv)(b.qp, &mut rwr, &mut bad_r) },
        "ibv_post_recv",
    )?;
    let mut ssge = ibv_sge {
        addr: a.buf.addr(0),
        length: SEND_LEN as u32,
        lkey: a_lkey,
    };
    // SAFETY: ibv_send_wr is plain data (unions of integers and pointers).
    let mut swr: ibv_send_wr = unsafe { std::mem::zeroed() };
    swr.wr_id = 0x200;
    swr.sg_list = &mut ssge;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    let mut bad_s = ptr::null_mut();
    // SAFETY: as for the receive.
    ok(
        unsafe { (path.post_send)(a.qp, &mut swr, &mut bad_s) },
        "ibv_post_send(SEND)",
    )?;
    out.push(poll_one(path, a.cq)?);
    out.push(poll_one(path, b.cq)?);
    let got = b.buf.read(0, SEND_LEN);
    if got != msg {
        fail!(
            "SEND ({}): receiver's buffer holds other bytes than were sent",
            path.name
        );
    }

    // RDMA WRITE.
    let data = pattern(seed.wrapping_add(101), WRITE_LEN);
    a.buf.write(WRITE_OFF, &data);
    b.buf.write(WRITE_OFF, &[0; WRITE_LEN]);
    let mut wsge = ibv_sge {
        addr: a.buf.addr(WRITE_OFF),
        length: WRITE_LEN as u32,
        lkey: a_lkey,
    };
    // SAFETY: as above.
    let mut wwr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wwr.wr_id = 0x300;
    wwr.sg_list = &mut wsge;
    wwr.num_sge = 1;
    wwr.opcode = IBV_WR_RDMA_WRITE;
    wwr.send_flags = IBV_SEND_SIGNALED;
    wwr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: b.buf.addr(WRITE_OFF),
        rkey: b_rkey,
    };
    // SAFETY: as above; the remote range is inside `b`'s MR.
    ok(
        unsafe { (path.post_send)(a.qp, &mut wwr, &mut bad_s) },
        "ibv_post_send(RDMA_WRITE)",
    )?;
    out.push(poll_one(path, a.cq)?);
    let got = b.buf.read(WRITE_OFF, WRITE_LEN);
    if got != data {
        fail!(
            "RDMA WRITE ({}): target buffer holds other bytes than were written",
            path.name
        );
    }
    Ok(out)
}

/// Runs [`send_and_write`] through the Rust ports and then the C shims on the
/// same connection, and checks that both report the same completions.
pub fn fast_matches_shim(a: &Endpoint, b: &Endpoint) -> Result<()> {
    let fast = send_and_write(&FAST, a, b, 1)?;
    let shim = send_and_write(&SHIM, a, b, 2)?;
    let expect = [IBV_WC_SEND, IBV_WC_RECV, IBV_WC_RDMA_WRITE];
    let got: Vec<_> = fast.iter().map(|r| r.opcode).collect();
    if got != expect {
        fail!("completion opcodes {got:?}, expected {expect:?}");
    }
    if fast[1].byte_len != SEND_LEN as u32 {
        fail!(
            "receive completion byte_len {} != {SEND_LEN}",
            fast[1].byte_len
        );
    }
    if fast != shim {
        fail!("fast path and C shim differ:\n fast {fast:?}\n shim {shim:?}");
    }
    Ok(())
}
