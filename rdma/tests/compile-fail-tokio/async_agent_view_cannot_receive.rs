// An AsyncAgent's responses and requests come from its port's reader task:
// the agent it shows has no blocking receive or request.
use rdma::mad::Mad;
use rdma::umad::{Address, AsyncAgent};
use std::time::Duration;

fn receive_beside_the_reader(agent: &AsyncAgent, mad: &Mad, addr: &Address) {
    let _ = agent.agent().recv(Some(Duration::from_secs(1)));
    let _ = agent.agent().request(mad, addr, Duration::from_secs(1), 0);
    let _ = agent.agent().send_request(mad, addr, Duration::from_secs(1), 0);
}

fn main() {}
