//! Memory regions: memory registered with a device.
//!
//! # The memory model of posted buffers
//! Registered memory is shared with the device. The device reads it when a
//! send is executed and writes it when a receive completes, an RDMA READ
//! returns, or a remote peer RDMA-WRITEs into it through its rkey. None of
//! that is synchronised with Rust's borrows, so this crate never lets safe
//! code hold a Rust reference into registered memory:
//!
//! - A [`MemoryRegion`] owns its memory (whole pages, zeroed). Safe code
//!   reads and writes it only by copying ([`MemoryRegion::read`],
//!   [`MemoryRegion::write`], [`MemoryRegion::fill`]), and every copy is
//!   made of relaxed atomic loads and stores. So copies from several threads
//!   through one `&MemoryRegion` never race in Rust's sense, and a device or
//!   peer writing the same bytes at the same time (which Rust sees as another
//!   thread's atomic stores) leaves them unspecified, never undefined. A
//!   borrowed view is `unsafe` ([`MemoryRegion::as_slice`]), takes the
//!   region by `&mut` so that no copy runs while it lives, and has the
//!   contract that no device access overlaps it.
//! - Work requests name registered memory by [`Sge`]s, which are
//!   bounds-checked against their region when built and borrow it only for
//!   the post call.
//! - Dropping a region deregisters it (`ibv_dereg_mr`) *before* unmapping
//!   its memory. If deregistration fails (a memory window is still bound,
//!   say), the memory is leaked rather than unmapped.
//!
//! Owned memory is an anonymous mapping of whole pages made for the region
//! alone (the region's length stays what was asked), so no other allocation
//! shares a page with it: `ibv_fork_init` marks registered pages not to be
//! copied into a forked child, which must not take part of the heap with
//! them.
//!
//! ## What deregistration fences, provider by provider
//! After `ibv_dereg_mr` returns no new access through the region's keys
//! starts: a work request still outstanding on the region, or a peer's
//! access through its rkey, fails with an error completion. Whether an
//! access already under way can still land differs:
//!
//! - rxe removes the key and waits until no packet holds the region; mlx5
//!   destroys the key in firmware. Nothing the device does after
//!   deregistration reaches the memory.
//! - siw invalidates the key, so every later placement fails, but does not
//!   wait for one already past its check: a frame being placed into a region
//!   at the moment it is dropped (a receive, or a peer's RDMA WRITE) still
//!   lands. That placement holds a reference on the registration, which
//!   keeps its pages pinned until the placement ends.
//!
//! That is why a region's own memory is a mapping of its own, unmapped
//! (`munmap`) after deregistration, never heap memory handed back to the
//! allocator: unmapping takes the pages out of the process at once, the
//! pin keeps them alive in the kernel until the last placement into them
//! is over, and no later allocation can be given those pages (a new
//! anonymous mapping, even at the same address, starts with fresh zeroed
//! pages). So on every provider, whatever the order in which objects are
//! dropped, also when user code panics with work requests outstanding, no
//! safe call can make the device write memory the process can still reach
//! after its region is gone. Memory registered with the `unsafe`
//! [`MemoryRegion::from_raw_parts`] is the caller's: its contract says how
//! long it must stay valid. [`stream`](crate::stream)'s one-sided requests
//! keep their region (an `Arc`) until they complete.
//!
//! [`MemoryRegion::rereg`] with new memory is a deregistration of the old
//! pages as far as they are concerned: they are unmapped once the call
//! has moved the translation to the new ones, and pages a failed call was
//! given stay mapped until the region is dropped (the device may map them).
//! A [`DmaBufRegion`] has no memory of the process: the exporter's buffer
//! is kept alive by the kernel's reference until deregistration, and the
//! region offers no copies, only SGEs and remote descriptors.
//!
//! ## What the CPU writes: mlx5's scatter to CQE
//! The above is about the device's DMA, through the region's keys. Some
//! providers also write received data with the CPU. mlx5's "scatter to
//! CQE", on by default for RC and UC QPs, puts a small message (up to 32
//! or 64 bytes), and on RC the data of an RDMA READ or atomic response,
//! inside the completion, and libmlx5 copies it, when the completion is
//! polled, to the address in the work request's SGE
//! (`providers/mlx5/cq.c`, `mlx5_copy_to_recv_wqe` and its SRQ and send
//! twins). That copy passes no key and no deregistration fences it: the
//! address is the SGE's IOVA, which for a region registered at
//! [`MrBuilder::iova`] is a number safe code chose, and a receive whose
//! region was dropped before the poll would be written into memory that is
//! no longer the region's. So on mlx5 every QP this crate creates
//! ([`QpBuilder::build`](crate::QpBuilder::build), and so
//! [`CmId::create_qp`](crate::cm::CmId::create_qp) and the endpoints of
//! [`cm::Endpoint`](crate::cm::Endpoint); [`XrcRecvQp::new`](crate::XrcRecvQp::new))
//! is created through `mlx5dv_create_qp` with
//! `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`, or not at all: the data
//! always goes to the buffer by DMA. A QP only opened
//! ([`XrcRecvQp::open`](crate::XrcRecvQp::open)) is an XRC target, for
//! which the kernel never turns it on. The glue and what it cannot see
//! are described in the source of `rdma/src/mlx5.rs`.
//!
//! hns (HiSilicon) does the same with its "RQ inline" and "CQE inline",
//! which libhns asks of the kernel for every context (granted where the
//! device has them)
//! (`providers/hns/hns_roce_u.c`, `providers/hns/hns_roce_u_hw_v2.c`
//! `handle_recv_rq_inl`, `handle_recv_cqe_inl_from_rq`): this crate does
//! not turn those off, so on hns the model above does not hold for small
//! receives into a region registered at an IOVA or dropped before the
//! poll.
//!
//! This is the one statement of the model; the crate docs, the README and
//! the comments beside the code refer to it.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::RangeBounds;
use std::ptr::NonNull;
use std::sync::OnceLock;

use bitflags::bitflags;

use crate::sys;
use crate::{Error, ProtectionDomain, Result};

mod advise;
#[cfg(has_ibv_alloc_buf)]
mod buf;
mod builder;
mod dmabuf;
mod null;
mod odp;
mod pages;
mod raw;
mod remote;
mod rereg;
mod shared;
pub use advise::{Advice, AdviseFlags};
#[cfg(has_ibv_alloc_buf)]
pub use buf::{BufMemoryRegion, LibBuffer};
pub use builder::MrBuilder;
pub use dmabuf::{DmaBuf, DmaBufRegion};
pub use null::NullMemoryRegion;
pub use odp::{OdpCaps, OdpGeneralCaps, OdpTransportCaps};
use pages::Pages;
use raw::bounds;
pub(crate) use raw::RawMr;
pub use remote::RemoteMemory;
pub use rereg::Rereg;
use shared::SharedBytes;

bitflags! {
    /// Access rights of a memory region or a queue pair (`IBV_ACCESS_*`).
    ///
    /// Without flags a region is readable by the local device only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local device may write (receives, RDMA READ results). Required
        /// by every remote-write or atomic right.
        const LOCAL_WRITE = sys::IBV_ACCESS_LOCAL_WRITE;
        /// Remote peers may RDMA WRITE.
        const REMOTE_WRITE = sys::IBV_ACCESS_REMOTE_WRITE;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = sys::IBV_ACCESS_REMOTE_READ;
        /// Remote peers may perform atomics.
        const REMOTE_ATOMIC = sys::IBV_ACCESS_REMOTE_ATOMIC;
        /// Memory windows may be bound to the region.
        const MW_BIND = sys::IBV_ACCESS_MW_BIND;
        /// Addresses in work requests are offsets from the region's start.
        const ZERO_BASED = sys::IBV_ACCESS_ZERO_BASED;
        /// On-demand paging (not pinned).
        const ON_DEMAND = sys::IBV_ACCESS_ON_DEMAND;
        /// The memory is backed by huge pages.
        const HUGETLB = sys::IBV_ACCESS_HUGETLB;
        /// The device may reorder writes (an optional flag: ignored where
        /// unsupported).
        const RELAXED_ORDERING = sys::IBV_ACCESS_RELAXED_ORDERING;
        /// Remote peers may flush the region to global visibility
        /// ([`WrBatch::flush`](crate::WrBatch::flush) with
        /// [`FlushType::Global`](crate::FlushType::Global)); devices with
        /// that flush only (else registration fails).
        #[cfg(has_ibv_wr_flush)]
        const FLUSH_GLOBAL = sys::IBV_ACCESS_FLUSH_GLOBAL;
        /// Remote peers may flush the region to persistence
        /// ([`FlushType::Persistent`](crate::FlushType::Persistent)):
        /// persistent memory only (rxe refuses it on other memory).
        #[cfg(has_ibv_wr_flush)]
        const FLUSH_PERSISTENT = sys::IBV_ACCESS_FLUSH_PERSISTENT;
    }
}

/// A memory region (`ibv_mr`) and the memory it covers.
pub struct MemoryRegion {
    raw: RawMr,
    /// The registered bytes for the atomic copies, made once (see
    /// [`shared`](Self::shared)).
    bytes: SharedBytes,
    memory: Memory,
    access: AccessFlags,
    /// The address work requests and peers name the first byte by: the
    /// process address, unless registered at another IOVA.
    iova: u64,
    /// Pages a failed [`rereg`](Self::rereg) was given: the device may map
    /// them, so they are unmapped only after deregistration.
    retired: Vec<Pages>,
    pd: ProtectionDomain,
}

/// Who frees the memory of a region.
enum Memory {
    /// Allocated by the region; freed after deregistration.
    Owned(ManuallyDrop<Pages>),
    /// Provided by the caller of `from_raw_parts`, who frees it.
    Borrowed,
    /// Another owner's memory, kept allocated by this hold (a
    /// `LibBuffer`'s, rdma-core v65 and newer), released after
    /// deregistration.
    #[cfg_attr(not(has_ibv_alloc_buf), allow(dead_code))]
    Kept(ManuallyDrop<Box<dyn std::any::Any + Send + Sync>>),
}

// SAFETY: the region's memory is reached only through atomic copies or
// unsafe views, so it has no thread affinity; libibverbs allows
// `ibv_dereg_mr` (in `Drop`) from any thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&MemoryRegion` allows only atomic copies in and out of the
// memory (race-free with each other, see `shared`), reads of the `ibv_mr`
// fields (written by `ibv_reg_mr`, and by `ibv_rereg_mr` only through
// `&mut self`), and building SGEs and remote descriptors from them. The
// views that create references take `&mut self`.
unsafe impl Sync for MemoryRegion {}

/// The system's page size (`sysconf(_SC_PAGESIZE)`), read once.
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// The error of a range outside a region (kept out of line: the copies
/// that check their bounds stay small enough to inline).
#[cold]
#[inline(never)]
fn outside(verb: &'static str, start: usize, end: usize, len: usize) -> Error {
    Error::invalid(
        verb,
        format!("range {start}..{end} is outside the {len}-byte memory region"),
    )
}

/// A failed registration with its likely cause as the hint.
#[cold]
#[inline(never)]
fn registration_error(mut e: Error, len: usize, access: AccessFlags) -> Error {
    let remote_writes = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if e.errno() == libc::EINVAL && len == 0 {
        e = e.with_hint("a memory region cannot be empty");
    } else if e.errno() == libc::EINVAL
        && access.intersects(remote_writes)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        e = e.with_hint(
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE: the device writes the memory for the peer",
        );
    } else if access.contains(AccessFlags::ON_DEMAND)
        && matches!(e.errno(), libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
    {
        e = e.with_hint(
            "ON_DEMAND needs on-demand paging in the device (DeviceAttr::odp_caps) and a kernel built with it",
        );
    }
    e
}

impl MemoryRegion {
    /// Allocates `len` zeroed bytes on whole pages of their own and
    /// registers them; the region is `len` bytes long.
    ///
    /// [`builder`](Self::builder) registers at a chosen IOVA.
    pub fn new(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        Self::builder(pd, len).access(access).build()
    }

    /// A region of `len` bytes of its own memory, with its options: the
    /// access rights and the IOVA (`ibv_reg_mr_iova2`).
    ///
    /// ```no_run
    /// # fn f(pd: &rdma::ProtectionDomain) -> rdma::Result<()> {
    /// use rdma::{AccessFlags, MemoryRegion};
    /// let mr = MemoryRegion::builder(pd, 8192)
    ///     .access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
    ///     .iova(0x1_0000_0000)
    ///     .build()?;
    /// assert_eq!(mr.remote(..)?.addr, 0x1_0000_0000);
    /// # Ok(()) }
    /// ```
    pub fn builder(pd: &ProtectionDomain, len: usize) -> MrBuilder<'_> {
        MrBuilder::new(pd, len)
    }

    /// Registers `len` bytes of new pages of its own, at `iova` (the
    /// process address where `None`).
    fn own(
        pd: &ProtectionDomain,
        len: usize,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<MemoryRegion> {
        let pages = Pages::new(len, page_size())?;
        let ptr = pages.ptr();
        // SAFETY: `ptr` is at least `len` valid bytes (whole pages) that the
        // region will own and unmap only after deregistration (`Drop`); no
        // Rust reference to them exists.
        match unsafe { Self::register(pd, ptr.as_ptr(), len, access, iova) } {
            Ok(raw) => Ok(Self::assemble(
                raw,
                Memory::Owned(ManuallyDrop::new(pages)),
                access,
                iova,
                pd,
            )),
            // Never registered: `pages` is unmapped as it goes.
            Err(e) => Err(e),
        }
    }

    /// Registers memory the caller owns.
    ///
    /// # Safety
    /// - `addr..addr + len` must be valid, writable memory that stays
    ///   allocated until the returned region is dropped;
    /// - while the region exists, Rust code must not hold references into
    ///   the memory (the device may write it at any time; see the module
    ///   docs), nor access it other than through this region, except where
    ///   the access happens-before or after every copy through the region;
    /// - copies through two regions whose memory overlaps must not run at
    ///   the same time (each region chooses the size of its atomic
    ///   accesses from its own bounds, and atomics of different sizes must
    ///   not race).
    pub unsafe fn from_raw_parts(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        // SAFETY: the caller guarantees the memory for the region's life
        // (contract above).
        let raw = unsafe { Self::register(pd, addr, len, access, None)? };
        Ok(Self::assemble(raw, Memory::Borrowed, access, None, pd))
    }

    /// The region of a registration just made over `memory`.
    fn assemble(
        raw: NonNull<sys::ibv_mr>,
        memory: Memory,
        access: AccessFlags,
        iova: Option<u64>,
        pd: &ProtectionDomain,
    ) -> MemoryRegion {
        // SAFETY: `raw` is the live registration ibv_reg_mr just returned;
        // its `addr` and `length` are written once, by that call.
        let mr = unsafe { raw.as_ref() };
        // SAFETY: `addr..addr + length` is the registered memory, valid
        // while the region lives (owned: freed only after deregistration in
        // `Drop`; borrowed: `from_raw_parts`' contract), and the
        // `SharedBytes` lives in the region and is used only through `&self`
        // methods, so never after. Rust code reaches the memory only through
        // its copies, always with these same bounds, or through the views,
        // which take `&mut self` and so exclude the copies; other accesses
        // and other regions over the same memory are excluded by
        // `from_raw_parts`' contract.
        let bytes = unsafe { SharedBytes::new(mr.addr.cast(), mr.length) };
        MemoryRegion {
            // SAFETY: live until `Drop` deregisters it, after the last
            // `&self` read; its fields are written again only by
            // `ibv_rereg_mr`, under `&mut self` (`rereg`).
            raw: unsafe { RawMr::new(raw) },
            bytes,
            memory,
            access,
            iova: iova.unwrap_or(mr.addr as u64),
            retired: Vec::new(),
            pd: pd.clone(),
        }
    }

    /// # Safety
    /// `addr..addr + len` must stay valid until the registration is
    /// deregistered.
    unsafe fn register(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<NonNull<sys::ibv_mr>> {
        // SAFETY: `pd` is live (it holds its context); the memory is valid
        // per the caller. ibv_reg_mr and ibv_reg_mr_iova are the macro
        // forms, which handle optional access flags.
        let (raw, verb) = unsafe {
            match iova {
                None => (
                    sys::ibv_reg_mr(pd.as_raw(), addr.cast(), len, access.bits() as i32),
                    "ibv_reg_mr",
                ),
                Some(iova) => (
                    sys::ibv_reg_mr_iova(pd.as_raw(), addr.cast(), len, iova, access.bits() as i32),
                    "ibv_reg_mr_iova",
                ),
            }
        };
        NonNull::new(raw).ok_or_else(|| registration_error(Error::last(verb), len, access))
    }

    /// The protection domain of the region.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The start address of the memory.
    pub fn addr(&self) -> *mut u8 {
        self.raw.addr()
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The local key, used in SGEs.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey()
    }

    /// The remote key, which a peer needs for RDMA READ, WRITE and atomics.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey()
    }

    /// The address work requests and peers use for the first byte: the
    /// IOVA the region was registered at ([`MrBuilder::iova`]), else the
    /// process address [`addr`](Self::addr). Both [`sge`](Self::sge) and
    /// [`remote`](Self::remote) give addresses from it: a device
    /// translates the addresses of local (lkey) and remote (rkey) accesses
    /// alike.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The raw region, valid while this value lives.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }

    /// Checks `range` against the region; returns (offset, length).
    #[inline]
    fn bounds(&self, range: impl RangeBounds<usize>, verb: &'static str) -> Result<(usize, usize)> {
        bounds(range, self.bytes.len(), verb)
    }

    /// The region's memory, for the atomic copies (made once, in
    /// [`assemble`](Self::assemble), whose proof covers every use).
    #[inline]
    fn shared(&self) -> &SharedBytes {
        &self.bytes
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// Copies from several threads may run at once; where they, the device
    /// or a remote peer write the same bytes at the same time, each byte
    /// ends up with one of the values written (8-byte aligned words as a
    /// whole), never undefined behaviour: see the module docs.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let (off, _) = self.bounds(
            offset..offset.saturating_add(data.len()),
            "MemoryRegion::write",
        )?;
        self.shared().store(off, data);
        Ok(())
    }

    /// Copies bytes of the region at `offset` into `out`.
    ///
    /// A byte written at the same time (by another thread, the device or a
    /// peer) reads as its old or its new value.
    #[inline]
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let (off, _) = self.bounds(
            offset..offset.saturating_add(out.len()),
            "MemoryRegion::read",
        )?;
        self.shared().load(off, out);
        Ok(())
    }

    /// The 8 bytes at `offset` as a native-endian word: what
    /// [`read`](Self::read) into an 8-byte array and `u64::from_ne_bytes`
    /// give, in one load where the bytes are an aligned word.
    ///
    /// For the header words of the stream (feature `stream`).
    #[cfg(feature = "stream")]
    #[inline]
    pub(crate) fn read_word(&self, offset: usize) -> Result<u64> {
        let (off, _) = self.bounds(offset..offset.saturating_add(8), "MemoryRegion::read")?;
        Ok(self.shared().load_word(off))
    }

    /// Writes `v` as the 8 bytes at `offset` (native-endian): what
    /// [`write`](Self::write) of `v.to_ne_bytes()` does, in one store where
    /// the bytes are an aligned word.
    ///
    /// For the header words of the stream (feature `stream`).
    #[cfg(feature = "stream")]
    #[inline]
    pub(crate) fn write_word(&self, offset: usize, v: u64) -> Result<()> {
        let (off, _) = self.bounds(offset..offset.saturating_add(8), "MemoryRegion::write")?;
        self.shared().store_word(off, v);
        Ok(())
    }

    /// Copies `range` of the region into a new vector.
    pub fn to_vec(&self, range: impl RangeBounds<usize>) -> Result<Vec<u8>> {
        let (off, n) = self.bounds(range, "MemoryRegion::to_vec")?;
        let mut v = vec![0; n];
        self.shared().load(off, &mut v);
        Ok(v)
    }

    /// Fills `range` of the region with `byte` (a copy, as [`write`](Self::write)).
    pub fn fill(&self, range: impl RangeBounds<usize>, byte: u8) -> Result<()> {
        let (off, n) = self.bounds(range, "MemoryRegion::fill")?;
        self.shared().fill(off, n, byte);
        Ok(())
    }

    /// The whole region as a slice.
    ///
    /// It borrows the region mutably, so no copy through it (from this or
    /// another thread) runs while the slice lives:
    ///
    /// ```compile_fail,E0502
    /// # fn f(mr: &mut rdma::MemoryRegion) -> rdma::Result<()> {
    /// let view = unsafe { mr.as_slice() };
    /// mr.write(0, b"x")?; // refused: `mr` is borrowed by `view`
    /// # let _ = view[0]; Ok(()) }
    /// ```
    ///
    /// # Safety
    /// While the slice lives, nothing outside Rust may write the region: no
    /// receive, RDMA READ or atomic into it outstanding, no remote peer
    /// writing it through its rkey, and no access through another region
    /// over the same memory.
    pub unsafe fn as_slice(&mut self) -> &[u8] {
        // SAFETY: `len` bytes of valid memory (as in `shared`); `&mut self`
        // excludes the copies through this region, the caller every other
        // writer.
        unsafe { std::slice::from_raw_parts(self.addr(), self.len()) }
    }

    /// The whole region as a mutable slice.
    ///
    /// # Safety
    /// As [`as_slice`](Self::as_slice), and nothing outside Rust may read the
    /// region either: no send, RDMA WRITE source or remote RDMA READ of it
    /// outstanding.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: valid memory; `&mut self` excludes the copies and other
        // views through this region, the caller every device access.
        unsafe { std::slice::from_raw_parts_mut(self.addr(), self.len()) }
    }

    /// A scatter/gather entry for `range` of the region, for a work request.
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge<'_>> {
        let (off, n) = self.bounds(range, "MemoryRegion::sge")?;
        Sge::of(self.iova, off, n, self.lkey(), "MemoryRegion::sge")
    }

    /// What a peer needs to access `range` of the region remotely.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteMemory> {
        let (off, n) = self.bounds(range, "MemoryRegion::remote")?;
        Ok(RemoteMemory::of(self.iova, off, n, self.rkey()))
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: deregistered once. After it no new access through the
        // region's keys starts; an access already under way (a siw
        // placement past its key check) holds the pinned pages, not the
        // mapping, so unmapping them below takes them out of the process
        // whatever the device still writes (module docs, "What
        // deregistration fences").
        let rc = unsafe { sys::ibv_dereg_mr(self.raw.as_ptr()) };
        let retired = std::mem::take(&mut self.retired);
        if rc == 0 {
            drop(retired);
        } else {
            std::mem::forget(retired);
        }
        // If deregistration failed the device may still reach the memory:
        // it is leaked rather than unmapped or released.
        match &mut self.memory {
            Memory::Owned(pages) if rc == 0 => {
                // SAFETY: taken once, here, and the field is never used
                // again: the region is being dropped.
                drop(unsafe { ManuallyDrop::take(pages) });
            }
            Memory::Kept(hold) if rc == 0 => {
                // SAFETY: as above.
                drop(unsafe { ManuallyDrop::take(hold) });
            }
            _ => {}
        }
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.addr())
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("access", &self.access)
            .finish()
    }
}

/// A scatter/gather entry: a bounds-checked range of a [`MemoryRegion`].
///
/// Layout-identical to `ibv_sge`, so a slice of them is passed to the device
/// as is. It borrows its region, which therefore outlives the post call.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge<'mr> {
    raw: sys::ibv_sge,
    _mr: std::marker::PhantomData<&'mr ()>,
}

impl Sge<'_> {
    /// The entry of `n` bytes at `off` of a registration whose first byte
    /// the device knows as `iova` (the range checked by the caller).
    #[inline]
    pub(crate) fn of(
        iova: u64,
        off: usize,
        n: usize,
        lkey: u32,
        verb: &'static str,
    ) -> Result<Self> {
        let Ok(length) = u32::try_from(n) else {
            return Err(Error::invalid(
                verb,
                format!("an SGE of {n} bytes exceeds 4 GiB"),
            ));
        };
        Ok(Sge {
            raw: sys::ibv_sge {
                addr: iova.wrapping_add(off as u64),
                length,
                lkey,
            },
            _mr: std::marker::PhantomData,
        })
    }

    /// The device address.
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }
    /// The length in bytes.
    pub fn len(&self) -> u32 {
        self.raw.length
    }
    /// Whether the entry is empty.
    pub fn is_empty(&self) -> bool {
        self.raw.length == 0
    }
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
    /// The raw entry.
    pub fn as_raw(&self) -> &sys::ibv_sge {
        &self.raw
    }
}

impl fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Sge({:#x}+{}, lkey {:#x})",
            self.raw.addr, self.raw.length, self.raw.lkey
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sges_and_remote_descriptors_name_the_iova() {
        let iova = 0x5a5a_0000_0000u64;
        let sge = Sge::of(iova, 4100, 96, 0x1234, "t").unwrap();
        // The bytes the device reads, at the C offsets of `ibv_sge`
        // (addr 0, length 8, lkey 12; checked against the C compiler by
        // tests/tests/mr_layout.rs).
        // SAFETY: `Sge` is `repr(transparent)` over the 16-byte `ibv_sge`.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(sge) };
        assert_eq!(bytes[0..8], (iova + 4100).to_ne_bytes());
        assert_eq!(bytes[8..12], 96u32.to_ne_bytes());
        assert_eq!(bytes[12..16], 0x1234u32.to_ne_bytes());
        let e = Sge::of(iova, 0, 1 << 32, 1, "MemoryRegion::sge").unwrap_err();
        assert_eq!((e.errno(), e.verb()), (libc::EINVAL, "MemoryRegion::sge"));
        let r = RemoteMemory::of(iova, 8, 16, 0x99);
        assert_eq!(
            r,
            RemoteMemory {
                addr: iova + 8,
                len: 16,
                rkey: 0x99
            }
        );
    }

    #[test]
    fn page_size_is_the_systems() {
        // SAFETY: sysconf has no preconditions.
        let sys = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        assert_eq!(page_size() as libc::c_long, sys);
        assert!(page_size().is_power_of_two());
    }
}
