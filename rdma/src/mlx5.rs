//! Queue pairs without mlx5's scatter to CQE.
//!
//! mlx5 turns "scatter to CQE" on by default for RC and UC QPs: a small
//! received message (up to 32 or 64 bytes, the CQE's size), and on an RC
//! QP the data of an RDMA READ or atomic response, arrives inside the
//! completion, and libmlx5 copies it with the CPU, when the completion is
//! polled, to the address in the work request's SGE
//! (`providers/mlx5/cq.c`: `mlx5_copy_to_recv_wqe`,
//! `mlx5_copy_to_recv_srq`, `mlx5_copy_to_send_wqe`). That copy breaks
//! the memory model of [`crate::mr`]: the SGE's address is an IOVA (a
//! region registered at [`MrBuilder::iova`](crate::mr::MrBuilder::iova)
//! makes it any number safe code chooses), and a receive whose region was
//! dropped (deregistered and unmapped) before the poll still gets its
//! bytes written, to memory that is no longer the region's. So on an mlx5
//! device every QP of this crate is created through `mlx5dv_create_qp`
//! with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`: the kernel then leaves
//! the QP's `cs_res` and `cs_req` off (`drivers/infiniband/hw/mlx5/qp.c`),
//! and the data always goes to the buffer by DMA, through the region's
//! key, which deregistration fences.
//!
//! # How libmlx5 is reached
//! Through the dynamic linker, not by linking: programs on machines
//! without libmlx5 (or without rdma-core's providers package) keep
//! working, and no program gets mlx5's provider registered at start-up
//! because it linked this crate. Which provider serves a context is asked
//! of the context itself: `ops.poll_cq` is the provider's poll function,
//! the very code that would do the copy, and the shared object that
//! defines it (`dladdr`, then `dlopen` of that object with `RTLD_NOLOAD`,
//! which loads nothing) is asked for `mlx5dv_is_supported` and
//! `mlx5dv_create_qp`. That finds libmlx5 whatever its path or file
//! name (a custom rdma-core under `RDMAV_DRIVERS`, say), and never a copy
//! of libmlx5 other than the one serving the context. The two structs and
//! the flag values this needs are written out below, checked against the
//! C compiler's (`tests/tests/verbs_layout.rs`). Binding `mlx5dv.h` with
//! bindgen in `ibverbs-sys` would have needed the header at build time and
//! the library at link time for every user, for a choice made at run
//! time.
//!
//! The answer is cached in the [`Context`] (shared by its clones, and so
//! by the PDs and CQs made from it): it is asked at the first QP created
//! in it. A CM id's `context()` is a new value each call, which asks
//! again at its first QP: a `dladdr`, a `dlopen` and three `dlsym`s, on
//! the creation path, never on the data path.
//!
//! # What is not covered
//! - A QP this process opens but did not create (`XrcRecvQp::open`,
//!   `ibv_open_qp`): an XRC receive QP. The kernel sets scatter to CQE only
//!   for RC and UC QPs (and DC, which this crate does not create), never
//!   for an XRC target, so none of its messages is copied at poll time.
//! - An mlx5 provider whose functions the dynamic linker cannot find: one
//!   linked statically into the program without exporting its symbols.
//!   This crate links rdma-core dynamically, as its providers are plugins.
//!   Where the context's provider is libmlx5 but cannot be asked or cannot
//!   make such a QP (a release before v22, which has no
//!   `mlx5dv_is_supported`; the flag came in v21), QP creation fails
//!   (`EOPNOTSUPP`) rather than make a QP with scatter to CQE on.
//! - Other providers that copy received data at poll time: hns (RQ inline
//!   and CQE inline, asked for every context by libhns) is one; see
//!   [`crate::mr`], "What the CPU writes".

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use crate::sys;
use crate::{Context, Error, Result};

/// The part of `<infiniband/mlx5dv.h>` this crate uses, written by hand
/// (see the module docs for why); `tests/tests/verbs_layout.rs` holds it
/// to the C compiler's layout and values. Public only for that test.
#[doc(hidden)]
#[allow(non_camel_case_types)]
pub mod abi {
    use crate::sys;

    /// `MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`: `create_flags` is valid.
    pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
    /// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`.
    pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;

    /// `struct mlx5dv_dc_init_attr`: its union (`dct_access_key`, or the
    /// two bytes of `dci_streams`) is the 8 bytes of `dct_access_key`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default)]
    pub struct mlx5dv_dc_init_attr {
        /// `enum mlx5dv_dc_type`.
        pub dc_type: u32,
        /// The union.
        pub dct_access_key: u64,
    }

    /// `struct mlx5dv_qp_init_attr`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default)]
    pub struct mlx5dv_qp_init_attr {
        /// `enum mlx5dv_qp_init_attr_mask`: which fields are valid.
        pub comp_mask: u64,
        /// `enum mlx5dv_qp_create_flags`.
        pub create_flags: u32,
        /// DC QPs only.
        pub dc_init_attr: mlx5dv_dc_init_attr,
        /// `enum mlx5dv_qp_create_send_ops_flags`.
        pub send_ops_flags: u64,
    }

    /// `bool mlx5dv_is_supported(struct ibv_device *)`.
    pub type IsSupported = unsafe extern "C" fn(*mut sys::ibv_device) -> bool;
    /// `struct ibv_qp *mlx5dv_create_qp(struct ibv_context *, struct
    /// ibv_qp_init_attr_ex *, struct mlx5dv_qp_init_attr *)`.
    pub type CreateQp = unsafe extern "C" fn(
        *mut sys::ibv_context,
        *mut sys::ibv_qp_init_attr_ex,
        *mut mlx5dv_qp_init_attr,
    ) -> *mut sys::ibv_qp;
}

/// How a context's QPs are created.
#[derive(Debug, Clone, Copy)]
pub(crate) enum QpCreator {
    /// By libibverbs (`ibv_create_qp_ex`, `ibv_create_qp`): not mlx5.
    Verbs,
    /// By libmlx5's `mlx5dv_create_qp`, with scatter to CQE off.
    Mlx5(abi::CreateQp),
    /// Not at all: the context is served by libmlx5, which cannot make a
    /// QP with scatter to CQE off (the reason).
    Refused(&'static str),
}

/// What the dynamic linker tells of a context's provider.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    /// The shared object of the context's poll function exports an
    /// `mlx5dv_` function: it is libmlx5.
    provider_is_libmlx5: bool,
    /// `mlx5dv_is_supported(device)`, where the provider has it.
    device_is_mlx5: Option<bool>,
    /// `mlx5dv_create_qp`, where the provider has it.
    create_qp: Option<abi::CreateQp>,
}

/// The creation path of a probed provider: libmlx5 must make the QP, with
/// scatter to CQE off, or no one does; anything else is libibverbs'.
fn choose(p: Probe) -> QpCreator {
    match (p.device_is_mlx5, p.create_qp) {
        (Some(true), Some(create)) => QpCreator::Mlx5(create),
        (Some(true), None) => {
            QpCreator::Refused("libmlx5 serves the device but has no mlx5dv_create_qp")
        }
        _ if p.provider_is_libmlx5 => QpCreator::Refused(
            "the device's provider is libmlx5, which does not claim the device (no mlx5dv_is_supported, or it answers no)",
        ),
        _ => QpCreator::Verbs,
    }
}

/// The functions of the shared object that defines `addr`, looked up in
/// that object alone; `None` when the dynamic linker does not know it.
struct Object(NonNull<c_void>);

impl Object {
    fn defining(addr: *const c_void) -> Option<Object> {
        // SAFETY: plain data, filled by dladdr.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the address; `info` is writable.
        if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dli_fname is a NUL-terminated path, valid while the
        // object is loaded, which it is (it defines `addr`). RTLD_NOLOAD
        // loads nothing: it returns the loaded object, with a reference
        // this value never gives back, so the functions looked up in it
        // stay valid for the life of the process.
        let handle = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        NonNull::new(handle).map(Object)
    }

    fn symbol(&self, name: &CStr) -> Option<NonNull<c_void>> {
        // SAFETY: a live handle (never closed); a NUL-terminated name.
        NonNull::new(unsafe { libc::dlsym(self.0.as_ptr(), name.as_ptr()) })
    }
}

/// Asks the provider that serves `ctx` whether it is libmlx5 and the
/// device one of its own.
///
/// # Safety
/// `ctx` is an open context.
unsafe fn probe(ctx: *mut sys::ibv_context) -> Probe {
    // SAFETY: an open context (the caller's promise); `ops` is set by
    // its provider when the context is opened, and never changes.
    let (poll, device) = unsafe { ((*ctx).ops.poll_cq, (*ctx).device) };
    let Some(object) = poll.and_then(|f| Object::defining(f as *const c_void)) else {
        return Probe::default();
    };
    let (is_supported, create_qp) = object.functions();
    let provider_is_libmlx5 = is_supported.is_some()
        || create_qp.is_some()
        || object.symbol(c"mlx5dv_query_device").is_some();
    Probe {
        provider_is_libmlx5,
        // SAFETY: libmlx5's mlx5dv_is_supported reads the device's
        // provider ops; `device` is the open context's, alive with it.
        device_is_mlx5: is_supported.map(|f| unsafe { f(device) }),
        create_qp,
    }
}

impl Object {
    /// `mlx5dv_is_supported` and `mlx5dv_create_qp`, where the object has
    /// them.
    fn functions(&self) -> (Option<abi::IsSupported>, Option<abi::CreateQp>) {
        // SAFETY: the symbols of these names are libmlx5's functions of
        // these C signatures (`mlx5dv.h`); the object is never unloaded.
        unsafe {
            (
                self.symbol(c"mlx5dv_is_supported")
                    .map(|p| std::mem::transmute::<*mut c_void, abi::IsSupported>(p.as_ptr())),
                self.symbol(c"mlx5dv_create_qp")
                    .map(|p| std::mem::transmute::<*mut c_void, abi::CreateQp>(p.as_ptr())),
            )
        }
    }
}

/// The creation path of `ctx`'s QPs, asked of its provider.
///
/// # Safety
/// `ctx` is an open context.
pub(crate) unsafe fn qp_creator_of(ctx: *mut sys::ibv_context) -> QpCreator {
    // SAFETY: the caller's promise.
    choose(unsafe { probe(ctx) })
}

/// The vendor attributes of every QP made through `mlx5dv_create_qp`:
/// scatter to CQE off, nothing else.
fn scatter_off() -> abi::mlx5dv_qp_init_attr {
    abi::mlx5dv_qp_init_attr {
        comp_mask: abi::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
        create_flags: abi::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
        ..Default::default()
    }
}

/// The hint of a QP that libmlx5 refused with scatter to CQE off.
const HINT: &str = "mlx5: every QP of this crate is made with scatter to CQE off (MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE), so that received data never reaches memory by a CPU copy at poll time; none is made without it";

/// Creates a QP from `attr` (complete for its `comp_mask`) in `ctx`: on
/// mlx5 through `mlx5dv_create_qp` with scatter to CQE off, elsewhere
/// `ibv_create_qp_ex`. The error names the function that failed.
///
/// # Safety
/// As `ibv_create_qp_ex`: the objects `attr` names (PD, CQs, SRQ, XRC
/// domain) are live and of `ctx`.
pub(crate) unsafe fn create_qp_ex(
    ctx: &Context,
    attr: &mut sys::ibv_qp_init_attr_ex,
) -> Result<NonNull<sys::ibv_qp>> {
    match ctx.qp_creator() {
        QpCreator::Verbs => {
            // SAFETY: the caller's promise.
            let raw = unsafe { sys::ibv_create_qp_ex(ctx.as_raw(), attr) };
            NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_qp_ex"))
        }
        // SAFETY: the caller's promise.
        QpCreator::Mlx5(create) => unsafe { create_mlx5(ctx.as_raw(), create, attr) },
        QpCreator::Refused(why) => Err(refused(why)),
    }
}

/// Creates a classic QP (`ibv_create_qp`) in `pd`'s context, through
/// `mlx5dv_create_qp` with scatter to CQE off on mlx5, as an extended
/// request naming the PD alone (which is what libmlx5's `ibv_create_qp`
/// makes of it). On success `attr.cap` holds the granted sizes.
///
/// # Safety
/// As `ibv_create_qp`: `pd` is live, the CQs and SRQ `attr` names are
/// live and of its context.
pub(crate) unsafe fn create_qp(
    ctx: &Context,
    pd: *mut sys::ibv_pd,
    attr: &mut sys::ibv_qp_init_attr,
) -> Result<NonNull<sys::ibv_qp>> {
    let create = match ctx.qp_creator() {
        QpCreator::Verbs => {
            // SAFETY: the caller's promise.
            let raw = unsafe { sys::ibv_create_qp(pd, attr) };
            return NonNull::new(raw).ok_or_else(|| Error::last("ibv_create_qp"));
        }
        QpCreator::Mlx5(create) => create,
        QpCreator::Refused(why) => return Err(refused(why)),
    };
    let mut ex = ex_of_classic(pd, attr);
    // SAFETY: the caller's promise, for the same objects.
    let raw = unsafe { create_mlx5(ctx.as_raw(), create, &mut ex) }?;
    attr.cap = ex.cap;
    Ok(raw)
}

/// The extended attributes of a classic request: its fields and the PD,
/// as libibverbs' `ibv_create_qp_ex` and libmlx5's `ibv_create_qp` make
/// of it (`comp_mask` the PD alone).
fn ex_of_classic(pd: *mut sys::ibv_pd, attr: &sys::ibv_qp_init_attr) -> sys::ibv_qp_init_attr_ex {
    // SAFETY: plain data.
    let mut ex: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    ex.qp_context = attr.qp_context;
    ex.send_cq = attr.send_cq;
    ex.recv_cq = attr.recv_cq;
    ex.srq = attr.srq;
    ex.cap = attr.cap;
    ex.qp_type = attr.qp_type;
    ex.sq_sig_all = attr.sq_sig_all;
    ex.comp_mask = sys::IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ex
}

/// The error of a context whose QPs libmlx5 must make but cannot.
fn refused(why: &'static str) -> Error {
    Error::new("mlx5dv_create_qp", libc::EOPNOTSUPP).with_hint(format!("{why}; {HINT}"))
}

/// `mlx5dv_create_qp` with scatter to CQE off.
///
/// # Safety
/// As [`create_qp_ex`]; `create` is the `mlx5dv_create_qp` of the
/// libmlx5 that serves `ctx` and claims its device (`QpCreator::Mlx5`).
unsafe fn create_mlx5(
    ctx: *mut sys::ibv_context,
    create: abi::CreateQp,
    attr: &mut sys::ibv_qp_init_attr_ex,
) -> Result<NonNull<sys::ibv_qp>> {
    let mut dv = scatter_off();
    // SAFETY: libmlx5's mlx5dv_create_qp on a context it serves (the
    // probe found mlx5dv_is_supported true for its device); `attr` as the
    // caller promised; `dv` is complete for its mask. Both are read during
    // the call only (the provider writes the granted sizes to `attr.cap`).
    let raw = unsafe { create(ctx, attr, &mut dv) };
    NonNull::new(raw).ok_or_else(|| Error::last("mlx5dv_create_qp").with_hint(HINT))
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn fake_create(
        _: *mut sys::ibv_context,
        _: *mut sys::ibv_qp_init_attr_ex,
        _: *mut abi::mlx5dv_qp_init_attr,
    ) -> *mut sys::ibv_qp {
        std::ptr::null_mut()
    }

    #[test]
    fn an_mlx5_device_gets_the_mlx5_path_and_nothing_else_does() {
        let mlx5 = Probe {
            provider_is_libmlx5: true,
            device_is_mlx5: Some(true),
            create_qp: Some(fake_create),
        };
        assert!(matches!(choose(mlx5), QpCreator::Mlx5(_)));
        // rxe, siw, any provider that is not libmlx5.
        assert!(matches!(choose(Probe::default()), QpCreator::Verbs));
    }

    #[test]
    fn libmlx5_that_cannot_turn_scatter_off_refuses_the_qp() {
        // libmlx5 serving the context, without mlx5dv_create_qp.
        let no_create = Probe {
            provider_is_libmlx5: true,
            device_is_mlx5: Some(true),
            create_qp: None,
        };
        assert!(matches!(choose(no_create), QpCreator::Refused(_)));
        // libmlx5 before mlx5dv_is_supported (v22): cannot be asked.
        let old = Probe {
            provider_is_libmlx5: true,
            device_is_mlx5: None,
            create_qp: Some(fake_create),
        };
        assert!(matches!(choose(old), QpCreator::Refused(_)));
        // libmlx5 serving a context whose device it disowns.
        let disowned = Probe {
            provider_is_libmlx5: true,
            device_is_mlx5: Some(false),
            create_qp: Some(fake_create),
        };
        assert!(matches!(choose(disowned), QpCreator::Refused(_)));
    }

    thread_local! {
        /// What `recording_create` was handed: the context, the comp_mask
        /// and PD of the verbs attributes, the vendor attributes.
        static SEEN: std::cell::Cell<Option<(usize, u32, usize, abi::mlx5dv_qp_init_attr)>> =
            const { std::cell::Cell::new(None) };
    }

    /// A stand-in for libmlx5's `mlx5dv_create_qp`: records its arguments,
    /// grants one more receive request than asked, and returns a
    /// non-null QP pointer (never used as a QP).
    unsafe extern "C" fn recording_create(
        ctx: *mut sys::ibv_context,
        attr: *mut sys::ibv_qp_init_attr_ex,
        dv: *mut abi::mlx5dv_qp_init_attr,
    ) -> *mut sys::ibv_qp {
        // SAFETY: the test hands valid pointers, as libibverbs' callers do.
        let (a, d) = unsafe { (&mut *attr, *dv) };
        SEEN.set(Some((ctx as usize, a.comp_mask, a.pd as usize, d)));
        a.cap.max_recv_wr += 1;
        std::ptr::NonNull::dangling().as_ptr()
    }

    #[test]
    fn a_classic_qp_on_mlx5_is_made_by_mlx5dv_with_scatter_off() {
        let pd = 0x1000 as *mut sys::ibv_pd;
        let ctx = 0x2000 as *mut sys::ibv_context;
        // SAFETY: plain data.
        let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.qp_type = sys::IBV_QPT_RC;
        attr.sq_sig_all = 1;
        attr.cap.max_recv_wr = 7;
        let mut ex = ex_of_classic(pd, &attr);
        assert_eq!((ex.qp_type, ex.sq_sig_all), (sys::IBV_QPT_RC, 1));
        // SAFETY: the stand-in reads and writes the two structs only.
        let raw = unsafe { create_mlx5(ctx, recording_create, &mut ex) }.unwrap();
        assert_eq!(raw, std::ptr::NonNull::dangling());
        let (c, mask, p, dv) = SEEN.take().expect("mlx5dv_create_qp was called");
        assert_eq!(
            (c, mask, p),
            (ctx as usize, sys::IBV_QP_INIT_ATTR_PD, pd as usize)
        );
        assert_eq!(dv.comp_mask, abi::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
        assert_eq!(
            dv.create_flags,
            abi::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
        );
        // The granted sizes come back through the attributes.
        assert_eq!(ex.cap.max_recv_wr, 8);
    }

    #[test]
    fn a_refused_qp_is_an_unsupported_error_of_mlx5dv_create_qp() {
        let e = refused("why");
        assert_eq!(
            (e.verb(), e.errno()),
            ("mlx5dv_create_qp", libc::EOPNOTSUPP)
        );
        assert!(e.is_unsupported());
        assert!(e.to_string().contains("scatter to CQE"), "{e}");
    }

    #[test]
    fn the_vendor_attributes_turn_scatter_off_and_nothing_else() {
        let dv = scatter_off();
        assert_eq!(dv.comp_mask, abi::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
        assert_eq!(
            dv.create_flags,
            abi::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
        );
        assert_eq!((dv.dc_init_attr.dc_type, dv.send_ops_flags), (0, 0));
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls dladdr and dlopen")]
    fn libibverbs_is_not_libmlx5_to_the_probe() {
        // The object that defines a libibverbs function exports no
        // mlx5dv_ function.
        let f: unsafe extern "C" fn(*mut i32) -> *mut *mut sys::ibv_device =
            sys::ibv_get_device_list;
        let object = Object::defining(f as *const c_void).expect("libibverbs is loaded");
        assert!(matches!(object.functions(), (None, None)));
        assert!(object.symbol(c"mlx5dv_query_device").is_none());
    }

    #[test]
    #[cfg_attr(miri, ignore = "calls dlopen, dlsym and dladdr")]
    fn the_probe_finds_libmlx5s_functions_in_libmlx5() {
        // Where the provider is installed (Debian's ibverbs-providers),
        // load it as libibverbs would, and probe it from the address of
        // one of its functions, as a context's poll_cq is probed.
        // SAFETY: a NUL-terminated name; loading runs libmlx5's
        // constructor, which registers its driver with libibverbs.
        let handle = unsafe { libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            eprintln!("skipped: libmlx5.so.1 is not installed");
            return;
        }
        // SAFETY: a live handle (never closed); a NUL-terminated name.
        let query = unsafe { libc::dlsym(handle, c"mlx5dv_query_device".as_ptr()) };
        assert!(!query.is_null());
        let object = Object::defining(query).expect("libmlx5 is loaded");
        let (is_supported, create_qp) = object.functions();
        assert!(is_supported.is_some() && create_qp.is_some());
    }
}
