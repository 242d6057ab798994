// An AsyncPort's reader task reads every MAD of the port: the port it shows
// has no receive, nor a registration whose agent could receive.
use rdma::umad::{AsyncPort, Registration};
use std::time::Duration;

fn receive_beside_the_reader(port: &AsyncPort) {
    let _ = port.port().recv(Some(Duration::from_secs(1)));
    let _ = port.port().try_recv();
    let _ = port.port().register(&Registration::new(0x32, 1));
}

fn main() {}
