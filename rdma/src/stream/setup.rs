//! Connection set-up: the verbs objects of a connection, the parameters
//! both sides connect with, and the start of its driver.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::cm::{AsyncCm, AsyncCmId, CmId, ConnParam};
use crate::{
    AccessFlags, AsyncCompletionQueue, CompletionChannel, CompletionQueue, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, WorkCompletion,
};

use super::busy_poll::default_busy_poll;
use super::credits::Credits;
use super::driver::{Driver, EndGuard};
use super::engine::{Core, Link, Mode, State, POLL_BATCH};
use super::error::io_err;
use super::layout::{CTRL_SLOTS, INLINE, REGION_LEN};
use super::pump::post_recv;
use super::shared::Shared;
use super::signalling::Signalling;
use super::{CONNECT_TIMEOUT, ONE_SIDED_SLOTS, RECV_SLOTS, SEND_SLOTS};

// ------------------------------------------------------------ set-up

/// The verbs objects of a stream, made on its CM id before it connects.
pub(super) struct Resources {
    pub(super) cq: CompletionQueue,
    pub(super) mr: MemoryRegion,
    pub(super) pd: ProtectionDomain,
    /// The device is iWARP (siw): an RDMA WRITE completes once sent, not
    /// once placed.
    pub(super) iwarp: bool,
    /// The most bytes a SEND carries inline on this QP (0: none).
    pub(super) inline: usize,
}

impl Resources {
    /// Makes the PD, CQ, QP and region on `id`'s device and posts every
    /// receive buffer.
    pub(super) fn new(id: &mut CmId) -> crate::Result<Resources> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let channel = CompletionChannel::new(&ctx)?;
        let cq = CompletionQueue::builder(&ctx)
            .cqe((RECV_SLOTS + SEND_SLOTS + CTRL_SLOTS + 2 * ONE_SIDED_SLOTS) as i32)
            .channel(&channel)
            .build()?;
        let caps = QpCaps {
            // A one-sided request takes two on iWARP (a WRITE and its fence).
            max_send_wr: (SEND_SLOTS + CTRL_SLOTS + 2 * ONE_SIDED_SLOTS) as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: INLINE as u32,
        };
        let mr = MemoryRegion::new(&pd, REGION_LEN, AccessFlags::LOCAL_WRITE)?;
        // A device that takes no inline data gets a QP without (the
        // stream then sends every message from its buffer).
        if id.create_qp(&pd, QpType::Rc, &cq, &cq, caps).is_err() {
            let caps = QpCaps {
                max_inline_data: 0,
                ..caps
            };
            id.create_qp(&pd, QpType::Rc, &cq, &cq, caps)?;
        }
        let qp = id
            .qp()
            .ok_or_else(|| crate::Error::invalid("RdmaStream", "the CM id has no QP"))?;
        let inline = (qp.caps().max_inline_data as usize).min(INLINE);
        for slot in 0..RECV_SLOTS {
            post_recv(qp, &mr, slot)?;
        }
        let iwarp = crate::DeviceList::new()
            .ok()
            .and_then(|l| {
                l.find(ctx.name())
                    .map(|d| d.transport_type() == crate::TransportType::Iwarp)
            })
            .unwrap_or(false);
        Ok(Resources {
            cq,
            mr,
            pd,
            iwarp,
            inline,
        })
    }
}

/// The parameters both sides connect with: no RNR retries, since credits
/// make them unnecessary (a violation shows as an error).
pub(super) fn conn_param() -> ConnParam {
    let mut p = ConnParam::new();
    p.rnr_retry_count = 0;
    p
}

/// Starts the driver of a connected id and returns what it shares.
pub(super) fn start(id: AsyncCmId, res: Resources, mode: Mode) -> io::Result<Arc<Shared>> {
    let Resources {
        cq,
        mr,
        pd,
        iwarp,
        inline,
    } = res;
    let cq = AsyncCompletionQueue::new(cq).map_err(io_err)?;
    let core = Core {
        id,
        credits: Credits::new(RECV_SLOTS as u32),
        posted_recvs: RECV_SLOTS,
        posted_sends: 0,
        signalling: Signalling::default(),
        ctrl_free: (0..CTRL_SLOTS).collect(),
        fin_posted: false,
        data_after_fin: false,
        last_credits_sent: false,
        in_flight: (0..ONE_SIDED_SLOTS).map(|_| None).collect(),
        iwarp,
        inline,
        halves_gone: false,
        gone: false,
        failed: None,
        wcs: [WorkCompletion::ZERO; POLL_BATCH],
    };
    let local = core.id.id().local_addr();
    let peer = core.id.id().peer_addr();
    let state = State {
        free: (0..SEND_SLOTS).rev().collect(),
        core: Some(Box::new(core)),
        ..State::default()
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        link: Link {
            cq,
            mr,
            mode,
            wakes: AtomicU64::new(0),
        },
        notify: Notify::new(),
        pd,
        local,
        peer,
        busy_poll: AtomicU64::new(default_busy_poll()),
        turns: AtomicU64::new(0),
        spinning: AtomicBool::new(false),
        standby: AtomicBool::new(false),
        changed: AtomicBool::new(false),
        half_polling: AtomicU8::new(0),
        writer_waits: AtomicBool::new(false),
    });
    let driver = Driver {
        guard: EndGuard(Arc::clone(&shared)),
    };
    tokio::spawn(driver.run());
    Ok(shared)
}

/// Connects to `addr` and starts the driver.
pub(super) async fn connect(addr: SocketAddr, mode: Mode) -> io::Result<Arc<Shared>> {
    let cm = AsyncCm::new().map_err(io_err)?;
    let (id, _, res) = cm
        .connect(addr, CONNECT_TIMEOUT, &conn_param(), Resources::new)
        .await
        .map_err(io_err)?;
    start(id, res, mode)
}
