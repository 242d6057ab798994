//! The queue pair of a CM id: created or attached, moved by the CM, and
//! detached before it goes.

use std::ffi::CStr;
use std::ptr;
use std::sync::PoisonError;

use rdmacm_sys as cm;

use super::super::addr::RawAddr;
use super::super::channel::ack_events_of;
use super::{rc, CmId};
use crate::{CompletionQueue, Error, ProtectionDomain, QpCaps, QpType, QueuePair, Result};

impl CmId {
    /// Creates a queue pair for the id, on its device, and attaches it, as
    /// `rdma_create_qp` does: a connected QP is moved to INIT, a UD QP to RTS.
    /// The id owns the QP from now on; [`qp`](Self::qp) reaches it. When
    /// the id has an SRQ ([`create_srq`](Self::create_srq)), the QP takes
    /// its receives from it, as `rdma_create_qp` gives it `id->srq`.
    pub fn create_qp(
        &mut self,
        pd: &ProtectionDomain,
        qp_type: QpType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<&QueuePair> {
        self.check_qp_target(pd.context().name())?;
        let mut builder = QueuePair::builder(pd, qp_type, send_cq)
            .recv_cq(recv_cq)
            .caps(caps);
        if let Some(srq) = &self.srq {
            builder = builder.srq(srq);
        }
        let qp = builder.build()?;
        self.attach_qp(qp)
    }

    /// Attaches `qp`, built by the caller on the id's device (with an SRQ,
    /// say, or signalling every send), as [`create_qp`](Self::create_qp)
    /// attaches the QP it builds: a connected QP is moved to INIT with the
    /// CM's attributes, a UD QP to RTS. The id owns the QP from now on.
    ///
    /// `qp` must be new (in RESET; siw reports INIT from kernel 6.12 on):
    /// the kernel refuses the move to INIT otherwise (`EINVAL`), and a QP of
    /// another device, or on an id that has one, is refused before that
    /// (`EINVAL`). A QP whose type does not fit the id's port space (a UD QP
    /// on a TCP id) is refused by the kernel. On a refusal the QP is
    /// dropped.
    pub fn attach_qp(&mut self, qp: QueuePair) -> Result<&QueuePair> {
        self.check_qp_target(qp.context().name())?;
        let qp_type = qp.qp_type();
        let (mut attr, mask) = self.init_qp_attr(crate::sys::IBV_QPS_INIT)?;
        // RESET -> INIT with the CM's attributes, as rdma_create_qp does: one
        // ibv_modify_qp with the attributes librdmacm chose.
        // SAFETY: a live QP; `attr` is complete for `mask`.
        let rc = unsafe { crate::sys::ibv_modify_qp(qp.as_raw(), &mut attr, mask as i32) };
        if rc != 0 {
            return Err(Error::from_rc("ibv_modify_qp", rc).with_hint(
                "RESET -> INIT with the CM's attributes: the QP must be new, of a type that fits the id's port space",
            ));
        }
        if qp_type == QpType::Ud {
            qp.set_state(crate::QpState::Rtr)?;
            qp.to_rts(&crate::RtsAttr::default())?;
        }
        // SAFETY: a live id; the lock keeps this write from overlapping
        // librdmacm's reads of the field (event processing, calls on the
        // id). The QP lives as long as the id holds it: `detach_qp` clears
        // the field, under the lock, before the QP goes.
        self.locked(|| unsafe { (*self.as_raw()).qp = qp.as_raw() });
        Ok(self.qp.insert(qp))
    }

    /// Whether a QP of device `name` may be attached to the id: it has none
    /// yet, and has a device, of that name.
    fn check_qp_target(&self, name_of_qp: &str) -> Result<()> {
        if self.qp.is_some() {
            return Err(Error::invalid("rdma_create_qp", "the id already has a QP"));
        }
        let verbs = self.verbs();
        if verbs.is_null() {
            return Err(Error::invalid(
                "rdma_create_qp",
                "the id is not bound to a device yet",
            ));
        }
        // SAFETY: the id's context, kept open by the id; its device holds
        // its name.
        let name = unsafe { CStr::from_ptr(crate::sys::ibv_get_device_name((*verbs).device)) };
        let name = name.to_str().unwrap_or("?");
        if name != name_of_qp {
            return Err(Error::invalid(
                "rdma_create_qp",
                format!("the QP's device is {name_of_qp}, the id's {name}"),
            ));
        }
        Ok(())
    }

    /// The attributes the CM prescribes for moving the id's QP to `state`.
    pub fn init_qp_attr(
        &self,
        state: crate::sys::ibv_qp_state,
    ) -> Result<(crate::sys::ibv_qp_attr, u32)> {
        // SAFETY: plain data.
        let mut attr: crate::sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = state;
        let mut mask = 0;
        // SAFETY: a live id; writable out-parameters; the lock is held.
        rc(
            "rdma_init_qp_attr",
            self.locked(|| unsafe { cm::rdma_init_qp_attr(self.as_raw(), &mut attr, &mut mask) }),
        )?;
        Ok((attr, mask as u32))
    }

    /// The id's queue pair.
    pub fn qp(&self) -> Option<&QueuePair> {
        self.qp.as_ref()
    }

    /// Detaches the id's queue pair and destroys it, as `rdma_destroy_qp`
    /// does (after [`disconnect`](Self::disconnect), say); the id lives on.
    /// The multicast groups the id joined are left first (a QP attached to
    /// a group cannot be destroyed). Its CQs and PD go when nothing else
    /// holds them. Nothing happens when the id has no QP.
    pub fn destroy_qp(&mut self) {
        drop(self.detach_qp());
    }

    /// Leaves the id's groups and clears its `qp` field, with the lock
    /// held: librdmacm touches the QP no more (its event processing and the
    /// calls on the id read the field under the same lock), and the caller
    /// may destroy it.
    pub(super) fn detach_qp(&mut self) -> Option<QueuePair> {
        let raw = self.as_raw();
        let groups = std::mem::take(
            self.groups
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let qp = self.qp.take();
        self.channel.inner.locked(|| {
            if !groups.is_empty() {
                // rdma_leave_multicast waits for the group's events, one of
                // which this thread may be handing to a callback.
                ack_events_of(raw);
            }
            for addr in groups {
                let mut a = RawAddr::new(addr);
                // SAFETY: a live id; a complete address; the lock is held.
                // Detaches the QP from the group (when its join was
                // processed, which happens under the lock too) and waits for
                // the group's events to be acknowledged, which every read
                // does before it lets go of the lock. A failure leaves
                // nothing to undo.
                unsafe { cm::rdma_leave_multicast(raw, a.as_mut_ptr()) };
            }
            if qp.is_some() {
                // SAFETY: a live id; the lock is held.
                unsafe { (*raw).qp = ptr::null_mut() };
            }
        });
        qp
    }
}
