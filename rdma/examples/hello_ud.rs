//! UD hello through the connection manager (RoCE and InfiniBand; iWARP has
//! no UD): the client resolves the server's QP number and QKey (an IB SIDR
//! exchange) and sends it one datagram. `hello_ud server ADDR:PORT`, then
//! `hello_ud client ADDR:PORT`.
use rdma::cm::{CmEventKind::*, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{AccessFlags, AddressHandle, CompletionQueue, MemoryRegion, ProtectionDomain};
use rdma::{QpCaps, QpType, RecvWr, SendWr};
use std::time::Duration;

/// Every UD receive starts with a 40-byte GRH, counted in its `byte_len`.
const GRH: usize = 40;
const T: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(role), Some(addr)) = (args.get(1), args.get(2)) else {
        return Err("usage: hello_ud server|client ADDR:PORT".into());
    };
    let (ch, addr) = (EventChannel::new()?, addr.parse()?);
    let listener = CmId::new(&ch, PortSpace::Udp)?;
    let mut id = if role == "server" {
        listener.bind(addr)?;
        listener.listen(1)?;
        let mut req = ch.expect(&listener, ConnectRequest, Duration::from_secs(60))?;
        req.take_new_id().ok_or("a request without an id")?
    } else {
        let id = CmId::new(&ch, PortSpace::Udp)?;
        id.resolve_addr(None, addr, T)?;
        ch.expect(&id, AddrResolved, T)?;
        id.resolve_route(T)?;
        ch.expect(&id, RouteResolved, T)?;
        id
    };
    let ctx = id.context()?;
    let (pd, cq) = (ProtectionDomain::new(&ctx)?, CompletionQueue::new(&ctx, 4)?);
    id.create_qp(&pd, QpType::Ud, &cq, &cq, QpCaps::default())?;
    let mr = MemoryRegion::new(&pd, GRH + 64, AccessFlags::LOCAL_WRITE)?;
    let qp = id.qp().ok_or("no QP")?;
    if role == "server" {
        qp.post_recv(&mut [RecvWr::new(1, &[mr.sge(..)?])])?;
        id.accept(&ConnParam::new())?; // answers with the QP number and QKey
        let wc = cq.wait_one(Duration::from_secs(60))?.result()?;
        let len = (wc.byte_len() as usize).saturating_sub(GRH);
        let text = mr.to_vec(GRH..GRH + len)?;
        println!("{}", String::from_utf8_lossy(&text));
    } else {
        id.connect(&ConnParam::new())?;
        let est = ch.expect(&id, Established, T)?;
        let ud = est.ud.ok_or("no UD parameters")?;
        let ah = AddressHandle::new(&pd, &ud.path)?;
        mr.write(0, b"hello over UD")?;
        let sge = [mr.sge(0..13)?];
        qp.post_send(&mut [SendWr::send(2, &sge).ud(&ah, ud.qp_num, ud.qkey).signaled()])?;
        cq.wait_one(T)?.result()?;
    }
    Ok(())
}
