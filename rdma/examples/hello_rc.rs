//! Blocking RC hello: the server advertises a buffer in its accept's private
//! data; the client RDMA WRITEs a greeting into it, then SENDs an empty message
//! to say it is there. `hello_rc server|client ADDR:PORT` (the server's address).
use rdma::cm::{CmEventKind::*, CmId, ConnParam, EventChannel, PortSpace};
use rdma::{AccessFlags as A, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpType};
use rdma::{RecvWr, RemoteMemory, SendWr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(role), Some(addr)) = (args.get(1), args.get(2)) else {
        return Err("usage: hello_rc server|client ADDR:PORT".into());
    };
    let (ch, addr) = (EventChannel::new()?, addr.parse()?);
    let listener = CmId::new(&ch, PortSpace::Tcp)?;
    let mut id = if role == "server" {
        listener.bind(addr)?;
        listener.listen(1)?;
        let mut req = ch.expect(&listener, ConnectRequest, Duration::from_secs(60))?;
        req.take_new_id().ok_or("a request without an id")?
    } else {
        let id = CmId::new(&ch, PortSpace::Tcp)?;
        id.resolve_addr(None, addr, T)?;
        ch.expect(&id, AddrResolved, T)?;
        id.resolve_route(T)?;
        ch.expect(&id, RouteResolved, T)?;
        id
    };
    let ctx = id.context()?;
    let (pd, cq) = (ProtectionDomain::new(&ctx)?, CompletionQueue::new(&ctx, 4)?);
    id.create_qp(&pd, QpType::Rc, &cq, &cq, QpCaps::default())?;
    let mr = MemoryRegion::new(&pd, 64, A::LOCAL_WRITE | A::REMOTE_WRITE)?;
    let qp = id.qp().ok_or("no QP")?;
    if role == "server" {
        qp.post_recv(&mut [RecvWr::new(1, &[mr.sge(..)?])])?; // before the accept
        let buf = mr.remote(..)?.to_bytes();
        id.accept(&ConnParam::new().with_private_data(&buf))?;
        ch.expect(&id, Established, T)?;
        cq.wait_one(Duration::from_secs(60))?.result()?; // the client's SEND
        let text = mr.to_vec(..)?;
        println!("{}", String::from_utf8_lossy(&text).trim_end_matches('\0'));
        ch.expect(&id, Disconnected, T)?;
    } else {
        id.connect(&ConnParam::new())?;
        let remote = RemoteMemory::from_bytes(ch.expect(&id, Established, T)?.private_data())?;
        mr.write(0, b"hello over RDMA WRITE")?;
        let sge = [mr.sge(0..21)?];
        // RC keeps order: the SEND lands after the WRITE.
        qp.post_send(&mut [
            SendWr::rdma_write(1, &sge, remote),
            SendWr::send(2, &[]).signaled(),
        ])?;
        cq.wait_one(T)?.result()?;
        id.disconnect()?;
    }
    Ok(())
}
