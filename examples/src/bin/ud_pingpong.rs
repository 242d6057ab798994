//! A ping-pong over unreliable datagram (UD) queue pairs, on the wire the
//! same as rdma-core's `ibv_ud_pingpong`: either side may be the C tool.
//!
//! ```text
//! ud_pingpong [-d DEV] [-g GIDX] ...          # server
//! ud_pingpong [-d DEV] [-g GIDX] ... HOST     # client
//! ```
//!
//! Each receive lands after the 40-byte GRH slot that UD receives start
//! with, so the buffer is `size + 40` bytes and sends read its tail.

use std::process::ExitCode;

use clap::Parser;
use rdma::{
    AccessFlags, AddressHandle, CompletionChannel, CompletionQueue, InitAttr, MemoryRegion,
    ProtectionDomain, QpCaps, QpType, QueuePair, RtsAttr,
};
use rdma_examples::pingpong::{
    self, client_exchange, local_address, random_psn, server_exchange, CommonArgs, Dest, Pingpong,
    RecvQueue, Result, UdDest,
};

/// The QKey both sides use, as the C tool.
const QKEY: u32 = 0x1111_1111;
/// The room for the GRH at the start of every UD receive.
const GRH: usize = 40;

/// Ping-pong over UD queue pairs (like ibv_ud_pingpong).
#[derive(Parser, Debug)]
#[command(name = "ud_pingpong")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Size of message to exchange (at most the port's active MTU).
    #[arg(short = 's', long = "size", default_value_t = 1024, value_parser = pingpong::size)]
    size: usize,
}

fn main() -> ExitCode {
    let a = Args::parse();
    pingpong::main_with("ud_pingpong", || run(&a))
}

fn run(a: &Args) -> Result<()> {
    let c = &a.common;
    let ctx = pingpong::open_device(c.ib_dev.as_deref())?;
    let port = ctx
        .query_port(c.ib_port)
        .map_err(|e| format!("Unable to query port info for port {}: {e}", c.ib_port))?;
    let mtu = port.active_mtu() as usize;
    if a.size > mtu {
        return Err(format!("Requested size larger than port MTU ({mtu})"));
    }
    let channel = if c.events {
        Some(
            CompletionChannel::new(&ctx)
                .map_err(|e| format!("Couldn't create completion channel: {e}"))?,
        )
    } else {
        None
    };
    let pd = ProtectionDomain::new(&ctx).map_err(|e| format!("Couldn't allocate PD: {e}"))?;
    let mr = MemoryRegion::new(&pd, a.size + GRH, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    mr.fill(.., 0x7b).map_err(|e| e.to_string())?;
    let mut cq = CompletionQueue::builder(&ctx).cqe(c.rx_depth as i32 + 1);
    if let Some(ch) = &channel {
        cq = cq.channel(ch);
    }
    let cq = cq.build().map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let caps = QpCaps {
        max_send_wr: 1,
        max_recv_wr: c.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = QueuePair::builder(&pd, QpType::Ud, &cq)
        .caps(caps)
        .build()
        .map_err(|e| format!("Couldn't create QP: {e}"))?;
    let mut init = InitAttr::new(c.ib_port);
    init.qkey = QKEY;
    qp.to_init(&init)
        .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    let mut pp = Pingpong::new(
        vec![qp],
        RecvQueue::Qp,
        mr,
        0..a.size + GRH,
        GRH..GRH + a.size,
        c.rx_depth,
        1,
    );
    pp.post_initial_recvs()?;
    if c.events {
        cq.req_notify(false)
            .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
    }
    let (lid, gid) = local_address(&ctx, c.ib_port, c.gid_idx)?;
    let mine = Dest {
        lid,
        qpn: pp.qps[0].qp_num(),
        psn: random_psn(),
        gid,
    };
    // ibv_ud_pingpong separates the GID with a colon on this line only.
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}: GID {}",
        mine.lid,
        mine.qpn,
        mine.psn,
        std::net::Ipv6Addr::from(mine.gid.0)
    );
    let connect = |pp: &mut Pingpong, remote: &Dest| -> Result<()> {
        let qp = &pp.qps[0];
        qp.to_rtr(None)
            .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        let rts = RtsAttr {
            sq_psn: mine.psn,
            ..RtsAttr::default()
        };
        qp.to_rts(&rts)
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        let ah = AddressHandle::new(&pd, &remote.path(c.ib_port, c.sl, c.gid_idx))
            .map_err(|e| format!("Failed to create AH: {e}"))?;
        pp.ud = Some(UdDest {
            ah,
            qpn: remote.qpn,
            qkey: QKEY,
        });
        Ok(())
    };
    let client = c.servername.is_some();
    let remote = match &c.servername {
        Some(server) => {
            let remote = client_exchange(server, c.port, &[mine])?[0];
            remote.print("remote address:");
            connect(&mut pp, &remote)?;
            remote
        }
        None => {
            let remote = server_exchange(c.port, &[mine], |r| connect(&mut pp, &r[0]))?[0];
            remote.print("remote address:");
            remote
        }
    };
    let _ = remote;
    if client && c.chk {
        pp.mark_pages()?;
    }
    let elapsed = pp.run(&cq, c.events, c.iters, client)?;
    pingpong::report(a.size, c.iters, elapsed);
    if !client && c.chk {
        pp.check_pages()?;
    }
    Ok(())
}
