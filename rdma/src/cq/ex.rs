//! The extended poll of an extended CQ (`ibv_start_poll`, `ibv_next_poll`,
//! `ibv_end_poll`) and the fields its completions carry.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::{busy_cq, busy_error, CompletionQueue};
use crate::sys;
use crate::{Error, Result, WcOpcode, WcStatus};

bitflags::bitflags! {
    /// The fields an extended CQ's completions carry (`IBV_WC_EX_WITH_*`,
    /// [`CqBuilder::wc_flags`]); the provider reads out only these.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct WcFlags: u64 {
        /// [`ExCompletion::byte_len`].
        const BYTE_LEN = sys::IBV_WC_EX_WITH_BYTE_LEN as u64;
        /// [`ExCompletion::imm_data`].
        const IMM = sys::IBV_WC_EX_WITH_IMM as u64;
        /// [`ExCompletion::qp_num`].
        const QP_NUM = sys::IBV_WC_EX_WITH_QP_NUM as u64;
        /// [`ExCompletion::src_qp`].
        const SRC_QP = sys::IBV_WC_EX_WITH_SRC_QP as u64;
        /// [`ExCompletion::slid`].
        const SLID = sys::IBV_WC_EX_WITH_SLID as u64;
        /// [`ExCompletion::sl`].
        const SL = sys::IBV_WC_EX_WITH_SL as u64;
        /// [`ExCompletion::dlid_path_bits`].
        const DLID_PATH_BITS = sys::IBV_WC_EX_WITH_DLID_PATH_BITS as u64;
        /// [`ExCompletion::completion_ts`] (the device's clock).
        const COMPLETION_TIMESTAMP = sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64;
        /// [`ExCompletion::completion_wallclock_ns`].
        const COMPLETION_TIMESTAMP_WALLCLOCK =
            sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK as u64;
        /// [`ExCompletion::cvlan`].
        const CVLAN = sys::IBV_WC_EX_WITH_CVLAN as u64;
        /// [`ExCompletion::flow_tag`].
        const FLOW_TAG = sys::IBV_WC_EX_WITH_FLOW_TAG as u64;
        /// [`ExCompletion::tm_info`] (tag matching).
        const TM_INFO = sys::IBV_WC_EX_WITH_TM_INFO as u64;
    }
}

impl WcFlags {
    /// The fields of a classic completion (`IBV_WC_STANDARD_FLAGS`): the
    /// default.
    pub const STANDARD: WcFlags = WcFlags::from_bits_truncate(sys::IBV_WC_STANDARD_FLAGS as u64);
}

impl CompletionQueue {
    /// Starts an extended poll: `Ok(None)` when the queue is empty, else a
    /// lending iterator over the completions, which ends the poll when
    /// dropped. Fails with `EOPNOTSUPP` on a classic queue.
    ///
    /// The poll starts at the first completion, which the first
    /// [`next`](ExPoll::next) yields: dropping the poll consumes the
    /// completions it started at or yielded, and no others, so drop it only
    /// after `next`. One poll of a queue at a time: while it lives,
    /// `start_poll`, [`poll`](Self::poll) and [`req_notify`](Self::req_notify)
    /// on the queue (any clone, any thread) fail with `EBUSY` instead of
    /// waiting for the lock the provider holds for the poll.
    ///
    /// On rxe of rdma-core before v61 (the libibverbs loaded at run time)
    /// each poll yields one completion: that provider unlocks the queue
    /// when `ibv_next_poll` finds it empty; see
    /// [`one_per_poll`](Self::one_per_poll).
    pub fn start_poll(&self) -> Result<Option<ExPoll<'_>>> {
        let ex = self.inner.ex.ok_or_else(|| {
            Error::new("ibv_start_poll", libc::EOPNOTSUPP).with_hint("the CQ is not extended")
        })?;
        let busy = &self.inner.poll_raw;
        let raw = self.inner.raw.as_ptr();
        if busy
            .compare_exchange(raw, busy_cq(), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(busy_error("ibv_start_poll"));
        }
        // SAFETY: plain data.
        let mut attr: sys::ibv_poll_cq_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live extended CQ, not inside a poll: `poll_raw` was not
        // the stand-in, and only a live ExPoll (which restores it on drop, after
        // ibv_end_poll) leaves the stand-in there.
        let rc = unsafe { sys::ibv_start_poll(ex.as_ptr(), &mut attr) };
        match rc {
            0 => Ok(Some(ExPoll {
                cq: ex,
                busy,
                raw,
                pending: true,
                one_per_poll: self.inner.one_per_poll,
                flags: self.inner.wc_flags,
            })),
            e => {
                // No poll began (the provider unlocked before returning).
                busy.store(raw, Ordering::Release);
                match e {
                    libc::ENOENT => Ok(None),
                    e => Err(Error::new("ibv_start_poll", e)),
                }
            }
        }
    }

    /// Whether each extended poll yields at most one completion, avoiding
    /// `ibv_next_poll`: on rxe of an rdma-core before v61, or of one whose
    /// release cannot be told, as loaded at run time. Always false on a
    /// classic queue.
    pub fn one_per_poll(&self) -> bool {
        self.inner.one_per_poll
    }
}

/// An extended poll in progress: a lending iterator over completions.
///
/// Dropping it ends the poll (`ibv_end_poll`), which consumes the
/// completion it started at (the first [`next`](Self::next) yields it) and
/// those yielded, never one after. It is neither `Send` nor `Sync`: the
/// provider holds the CQ's lock for the poll's length, and the thread that
/// took it must release it.
#[must_use = "dropping the poll without `next` consumes the completion it started at"]
pub struct ExPoll<'cq> {
    /// The raw pointers keep it from being Send or Sync.
    cq: NonNull<sys::ibv_cq_ex>,
    /// The queue's `poll_raw`, the stand-in from `start_poll`, `raw` again
    /// on drop.
    busy: &'cq AtomicPtr<sys::ibv_cq>,
    raw: *mut sys::ibv_cq,
    /// Whether the current completion has not been yielded yet.
    pending: bool,
    one_per_poll: bool,
    flags: WcFlags,
}

impl ExPoll<'_> {
    /// The next completion, or `None` at the end of this poll.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<ExCompletion<'_>> {
        if !self.pending {
            if self.one_per_poll {
                return None;
            }
            // SAFETY: inside a successful poll on a live extended CQ that
            // has not ended (a failed next_poll sets `one_per_poll`), on a
            // provider whose next_poll is sound (else `one_per_poll` is set
            // from the start).
            if unsafe { sys::ibv_next_poll(self.cq.as_ptr()) } != 0 {
                self.one_per_poll = true; // ended: never call next_poll again
                return None;
            }
        }
        self.pending = false;
        Some(ExCompletion {
            cq: self.cq,
            flags: self.flags,
            _poll: PhantomData,
        })
    }
}

impl Drop for ExPoll<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the poll that a successful start_poll began, on the
        // thread that began it (ExPoll is not Send), once.
        unsafe { sys::ibv_end_poll(self.cq.as_ptr()) };
        // After end_poll: the lock is free, so the queue may be used again.
        self.busy.store(self.raw, Ordering::Release);
    }
}

/// The current completion of an [`ExPoll`]; valid until the next `next`.
pub struct ExCompletion<'p> {
    cq: NonNull<sys::ibv_cq_ex>,
    /// The fields the CQ carries: the provider filled only their readers.
    flags: WcFlags,
    _poll: PhantomData<&'p mut ()>,
}

impl ExCompletion<'_> {
    fn raw(&self) -> *mut sys::ibv_cq_ex {
        self.cq.as_ptr()
    }
    /// The work request ID.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        // SAFETY: inside a poll; wr_id is set by start/next_poll.
        unsafe { (*self.raw()).wr_id }
    }
    /// The status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        // SAFETY: as above.
        WcStatus::from_raw(unsafe { (*self.raw()).status })
    }
    /// Whether the work request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        // SAFETY: as above.
        unsafe { (*self.raw()).status == sys::IBV_WC_SUCCESS }
    }
    /// The opcode; meaningful only for successful completions.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        // SAFETY: inside a poll; read_opcode is always provided.
        WcOpcode::from_raw(unsafe { sys::ibv_wc_read_opcode(self.raw()) })
    }
    /// The bytes a receive received (with the 40-byte GRH of a UD
    /// receive) or an RDMA READ or atomic read; meaningful only for
    /// successful completions; 0 on a CQ without [`WcFlags::BYTE_LEN`].
    #[inline]
    pub fn byte_len(&self) -> u32 {
        if !self.flags.contains(WcFlags::BYTE_LEN) {
            return 0;
        }
        // SAFETY: inside a poll, on a CQ created with BYTE_LEN (checked
        // above), whose reader the provider filled.
        unsafe { sys::ibv_wc_read_byte_len(self.raw()) }
    }
    /// The local QP number; 0 on a CQ without [`WcFlags::QP_NUM`].
    #[inline]
    pub fn qp_num(&self) -> u32 {
        if !self.flags.contains(WcFlags::QP_NUM) {
            return 0;
        }
        // SAFETY: as above (QP_NUM).
        unsafe { sys::ibv_wc_read_qp_num(self.raw()) }
    }
    /// The source QP number; meaningful only for a successful UD receive;
    /// 0 on a CQ without [`WcFlags::SRC_QP`].
    #[inline]
    pub fn src_qp(&self) -> u32 {
        if !self.flags.contains(WcFlags::SRC_QP) {
            return 0;
        }
        // SAFETY: as above (SRC_QP).
        unsafe { sys::ibv_wc_read_src_qp(self.raw()) }
    }
    /// The source LID; meaningful only for a successful UD receive on
    /// InfiniBand (RoCE and iWARP have no LIDs); 0 on a CQ without
    /// [`WcFlags::SLID`].
    #[inline]
    pub fn slid(&self) -> u16 {
        if !self.flags.contains(WcFlags::SLID) {
            return 0;
        }
        // SAFETY: as above (SLID). A LID is 16 bits, in the low half of
        // what the reader returns (as `ibv_wc::slid`).
        unsafe { sys::ibv_wc_read_slid(self.raw()) as u16 }
    }
    /// The service level; meaningful only for a successful UD receive on
    /// InfiniBand; 0 on a CQ without [`WcFlags::SL`].
    #[inline]
    pub fn sl(&self) -> u8 {
        if !self.flags.contains(WcFlags::SL) {
            return 0;
        }
        // SAFETY: as above (SL).
        unsafe { sys::ibv_wc_read_sl(self.raw()) }
    }
    /// The destination LID path bits; meaningful only for a successful UD
    /// receive on InfiniBand; 0 on a CQ without
    /// [`WcFlags::DLID_PATH_BITS`].
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        if !self.flags.contains(WcFlags::DLID_PATH_BITS) {
            return 0;
        }
        // SAFETY: as above (DLID_PATH_BITS).
        unsafe { sys::ibv_wc_read_dlid_path_bits(self.raw()) }
    }
    /// The `IBV_WC_*` flags; meaningful only for successful completions.
    #[inline]
    pub fn wc_flags(&self) -> u32 {
        // SAFETY: inside a poll; read_wc_flags is always provided.
        unsafe { sys::ibv_wc_read_wc_flags(self.raw()) }
    }
    /// The immediate data, host byte order, if the completion succeeded
    /// and carries it (and the CQ has [`WcFlags::IMM`]).
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        if self.flags.contains(WcFlags::IMM)
            && self.is_success()
            && self.wc_flags() & sys::IBV_WC_WITH_IMM != 0
        {
            // SAFETY: inside a poll, on a CQ created with IMM (checked).
            Some(u32::from_be(unsafe {
                sys::ibv_wc_read_imm_data(self.raw())
            }))
        } else {
            None
        }
    }
    /// The rkey a SEND with invalidate invalidated at this receive, if
    /// the completion succeeded and carries one (`IBV_WC_WITH_INV`) and
    /// the CQ has [`WcFlags::IMM`] (the reader shares the immediate's
    /// field, `ibv_wc_read_invalidated_rkey`).
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        if self.flags.contains(WcFlags::IMM)
            && self.is_success()
            && self.wc_flags() & sys::IBV_WC_WITH_INV != 0
        {
            // SAFETY: inside a poll, on a CQ created with IMM (checked),
            // whose immediate reader the provider filled.
            Some(unsafe { sys::ibv_wc_read_invalidated_rkey(self.raw()) })
        } else {
            None
        }
    }
    /// The customer VLAN the packet carried (`ibv_wc_read_cvlan`), on a
    /// CQ with [`WcFlags::CVLAN`]; meaningful only for a successful
    /// receive of a RAW_PACKET or UD QP on Ethernet.
    #[inline]
    pub fn cvlan(&self) -> Option<u16> {
        if !self.flags.contains(WcFlags::CVLAN) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_cvlan(self.raw()) })
    }
    /// The flow tag of the steering rule that matched the packet
    /// (`ibv_wc_read_flow_tag`), on a CQ with [`WcFlags::FLOW_TAG`].
    #[inline]
    pub fn flow_tag(&self) -> Option<u32> {
        if !self.flags.contains(WcFlags::FLOW_TAG) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_flow_tag(self.raw()) })
    }
    /// The tag-matching tag and private value (`ibv_wc_read_tm_info`), on
    /// a CQ with [`WcFlags::TM_INFO`]; meaningful only for completions
    /// of a tag-matching SRQ (`IBV_WC_TM_*` in [`wc_flags`](Self::wc_flags)).
    #[inline]
    pub fn tm_info(&self) -> Option<(u64, u32)> {
        if !self.flags.contains(WcFlags::TM_INFO) {
            return None;
        }
        let mut tm = sys::ibv_wc_tm_info { tag: 0, priv_: 0 };
        // SAFETY: inside a poll, on a CQ created with the flag (checked);
        // `tm` is a local the reader fills.
        unsafe { sys::ibv_wc_read_tm_info(self.raw(), &mut tm) };
        Some((tm.tag, tm.priv_))
    }
    /// The completion's time on the device's clock, on a CQ with
    /// [`WcFlags::COMPLETION_TIMESTAMP`].
    #[inline]
    pub fn completion_ts(&self) -> Option<u64> {
        if !self.flags.contains(WcFlags::COMPLETION_TIMESTAMP) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_completion_ts(self.raw()) })
    }
    /// The completion's time in nanoseconds of the wall clock, on a CQ
    /// with [`WcFlags::COMPLETION_TIMESTAMP_WALLCLOCK`].
    #[inline]
    pub fn completion_wallclock_ns(&self) -> Option<u64> {
        if !self.flags.contains(WcFlags::COMPLETION_TIMESTAMP_WALLCLOCK) {
            return None;
        }
        // SAFETY: inside a poll, on a CQ created with the flag (checked).
        Some(unsafe { sys::ibv_wc_read_completion_wallclock_ns(self.raw()) })
    }
    /// The vendor error syndrome.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        // SAFETY: inside a poll; read_vendor_err is always provided.
        unsafe { sys::ibv_wc_read_vendor_err(self.raw()) }
    }
}

impl fmt::Debug for ExCompletion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn slid(_: *mut sys::ibv_cq_ex) -> u32 {
        0x1234
    }
    unsafe extern "C" fn sl(_: *mut sys::ibv_cq_ex) -> u8 {
        5
    }
    unsafe extern "C" fn path_bits(_: *mut sys::ibv_cq_ex) -> u8 {
        3
    }

    /// A completion of an extended CQ whose LID, SL and path-bit readers
    /// are filled, read as a CQ created with `flags` reads it.
    fn read_with(flags: WcFlags) -> (u16, u8, u8) {
        // SAFETY: plain C data; all zero is every pointer NULL, every op
        // None.
        let mut cq: Box<sys::ibv_cq_ex> = Box::new(unsafe { std::mem::zeroed() });
        cq.read_slid = Some(slid);
        cq.read_sl = Some(sl);
        cq.read_dlid_path_bits = Some(path_bits);
        let wc = ExCompletion {
            cq: NonNull::from(&mut *cq),
            flags,
            _poll: PhantomData,
        };
        (wc.slid(), wc.sl(), wc.dlid_path_bits())
    }

    unsafe extern "C" fn cvlan(_: *mut sys::ibv_cq_ex) -> u16 {
        0x0123
    }
    unsafe extern "C" fn flow_tag(_: *mut sys::ibv_cq_ex) -> u32 {
        0xfeed
    }
    unsafe extern "C" fn tm_info(_: *mut sys::ibv_cq_ex, tm: *mut sys::ibv_wc_tm_info) {
        // SAFETY: the reader's caller passes a live `ibv_wc_tm_info`.
        unsafe {
            (*tm).tag = 0x1111_2222_3333_4444;
            (*tm).priv_ = 77;
        }
    }

    /// The VLAN, flow tag and tag-matching info of a completion of a CQ
    /// created with `flags`, only the asked-for readers filled.
    fn read_ext_with(flags: WcFlags) -> (Option<u16>, Option<u32>, Option<(u64, u32)>) {
        // SAFETY: plain C data; all zero is every pointer NULL, every op
        // None.
        let mut cq: Box<sys::ibv_cq_ex> = Box::new(unsafe { std::mem::zeroed() });
        if flags.contains(WcFlags::CVLAN) {
            cq.read_cvlan = Some(cvlan);
        }
        if flags.contains(WcFlags::FLOW_TAG) {
            cq.read_flow_tag = Some(flow_tag);
        }
        if flags.contains(WcFlags::TM_INFO) {
            cq.read_tm_info = Some(tm_info);
        }
        let wc = ExCompletion {
            cq: NonNull::from(&mut *cq),
            flags,
            _poll: PhantomData,
        };
        (wc.cvlan(), wc.flow_tag(), wc.tm_info())
    }

    #[test]
    fn vlan_flow_tag_and_tag_matching_are_read_only_when_asked_for() {
        let tm = Some((0x1111_2222_3333_4444, 77));
        let all = WcFlags::CVLAN | WcFlags::FLOW_TAG | WcFlags::TM_INFO;
        assert_eq!(read_ext_with(all), (Some(0x0123), Some(0xfeed), tm));
        assert_eq!(read_ext_with(WcFlags::CVLAN), (Some(0x0123), None, None));
        assert_eq!(read_ext_with(WcFlags::FLOW_TAG), (None, Some(0xfeed), None));
        assert_eq!(read_ext_with(WcFlags::TM_INFO), (None, None, tm));
        // A reader never asked for is never called (they are all unset).
        assert_eq!(read_ext_with(WcFlags::STANDARD), (None, None, None));
    }

    #[test]
    fn lid_sl_and_path_bits_are_read_only_when_asked_for() {
        let all = WcFlags::SLID | WcFlags::SL | WcFlags::DLID_PATH_BITS;
        assert_eq!(read_with(WcFlags::STANDARD | all), (0x1234, 5, 3));
        assert_eq!(read_with(WcFlags::SLID), (0x1234, 0, 0));
        assert_eq!(read_with(WcFlags::SL), (0, 5, 0));
        assert_eq!(read_with(WcFlags::DLID_PATH_BITS), (0, 0, 3));
        // What was not asked for is not read: the provider left its
        // readers unset.
        assert_eq!(read_with(WcFlags::BYTE_LEN), (0, 0, 0));
    }
}
