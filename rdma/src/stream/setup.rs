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
    ProtectionDomain, QpCaps, QpType,
};

use super::busy_poll::{busy_poll_micros, default_busy_poll};
use super::driver::{Driver, EndGuard};
use super::engine::{Core, Link, Mode, State};
use super::error::io_err;
use super::handshake::Announce;
use super::layout::{Layout, CTRL_SLOTS, INLINE};
use super::pump::post_recv;
use super::shared::Shared;
use super::{StreamConfig, CONNECT_TIMEOUT, ONE_SIDED_SLOTS};

/// Send-queue requests besides the data SENDs: the control messages, and
/// the one-sided requests (two each on iWARP: a WRITE and its fence).
const EXTRA_SEND_WR: usize = CTRL_SLOTS + 2 * ONE_SIDED_SLOTS;

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
    /// Makes the PD, CQ, QP and region of `config` on `id`'s device and
    /// posts every receive buffer; `InvalidInput` with a
    /// [`StreamConfigError`](super::StreamConfigError) when the device
    /// cannot hold `config`.
    pub(super) fn new(id: &mut CmId, config: &StreamConfig) -> io::Result<Resources> {
        let ctx = id.context().map_err(io_err)?;
        let dev = ctx.query_device().map_err(io_err)?;
        let max_msg_sz = ctx
            .query_port(id.port_num())
            .map_or(u32::MAX, |p| p.max_msg_sz());
        config
            .check_device(
                dev.max_mr_size(),
                max_msg_sz,
                dev.max_qp_wr(),
                dev.max_cqe(),
                EXTRA_SEND_WR,
                EXTRA_SEND_WR,
            )
            .map_err(|e| e.into_io())?;
        Resources::make(id, config).map_err(io_err)
    }

    fn make(id: &mut CmId, config: &StreamConfig) -> crate::Result<Resources> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let channel = CompletionChannel::new(&ctx)?;
        let (recv, send) = (config.recv_buffers, config.send_buffers);
        // The setters bound the buffers to 4096 each: these fit.
        let cq = CompletionQueue::builder(&ctx)
            .cqe((recv + send + EXTRA_SEND_WR) as i32)
            .channel(&channel)
            .build()?;
        let caps = QpCaps {
            max_send_wr: (send + EXTRA_SEND_WR) as u32,
            max_recv_wr: recv as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: INLINE as u32,
        };
        let mr = MemoryRegion::new(&pd, config.region_len(), AccessFlags::LOCAL_WRITE)?;
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
        // The peer's part of the layout is not known yet; only this
        // side's receive buffers are posted here.
        let own = Layout::new(config, Announce::of(config));
        for slot in 0..recv {
            post_recv(qp, &mr, &own, slot)?;
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

/// The parameters a side of `config` connects (or accepts) with: its
/// receive buffers in the private data ([`Announce`]), and no RNR
/// retries, since credits make them unnecessary (a violation shows as an
/// error).
pub(super) fn conn_param(config: &StreamConfig) -> ConnParam {
    let mut p = ConnParam::new().with_private_data(&Announce::of(config).to_bytes());
    p.rnr_retry_count = 0;
    p
}

/// Starts the driver of a connected id, made with `config`, whose peer
/// announced `peer`, and returns what it shares.
pub(super) fn start(
    id: AsyncCmId,
    res: Resources,
    mode: Mode,
    config: &StreamConfig,
    peer: Announce,
) -> io::Result<Arc<Shared>> {
    let Resources {
        cq,
        mr,
        pd,
        iwarp,
        inline,
    } = res;
    let cq = AsyncCompletionQueue::new(cq).map_err(io_err)?;
    let layout = Layout::new(config, peer);
    let core = Core::new(Some(id), &layout, iwarp, inline);
    let (local, peer) = match &core.id {
        Some(id) => (id.id().local_addr(), id.id().peer_addr()),
        None => (None, None),
    };
    let state = State {
        core: Some(Box::new(core)),
        ..State::new(&layout)
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(state),
        link: Link {
            cq,
            mr,
            mode,
            layout,
            wakes: AtomicU64::new(0),
        },
        notify: Notify::new(),
        pd,
        local,
        peer,
        busy_poll: AtomicU64::new(
            config
                .busy_poll
                .map_or_else(default_busy_poll, busy_poll_micros),
        ),
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

/// Connects to `addr` with `config` and starts the driver. The peer's
/// accept must carry its receive buffers ([`Announce`]): else the
/// connection is dropped and the error is `InvalidData` with a
/// [`StreamConfigError`](super::StreamConfigError).
pub(super) async fn connect(
    addr: SocketAddr,
    mode: Mode,
    config: &StreamConfig,
) -> io::Result<Arc<Shared>> {
    let cm = AsyncCm::new().map_err(io_err)?;
    let (id, est, res) = cm
        .connect(addr, CONNECT_TIMEOUT, &conn_param(config), |id| {
            Resources::new(id, config).map_err(SetupError)
        })
        .await
        .map_err(|e| e.0)?;
    let peer = Announce::from_bytes(est.private_data()).map_err(|e| e.into_io())?;
    start(id, res, mode, config, peer)
}

/// The error of a connect's set-up: the `io::Error` of a step.
struct SetupError(io::Error);

impl From<crate::Error> for SetupError {
    fn from(e: crate::Error) -> SetupError {
        SetupError(io_err(e))
    }
}
