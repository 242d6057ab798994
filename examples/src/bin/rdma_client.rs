//! rdma_client: rdma-core's `rdma_client` (librdmacm/examples) on
//! `rdma::cm::Endpoint`, the blocking CM: it connects, sends a 16-byte
//! message, receives the server's 16 bytes and disconnects. Its flags and
//! output are the C tool's, and either side may be the C one.
//!
//! ```text
//! rdma_client [-s server_address] [-p port_number]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::cm::{AddrHints, AddrInfo, ConnParam, Endpoint};
use rdma_examples::ep_msg::{inline_or_say, main_of, send_msg, ATTR, MSG};

/// How long the client waits for the connection and each completion.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One message each way through the blocking CM (like rdma-core's rdma_client).
#[derive(Parser, Debug)]
#[command(name = "rdma_client")]
struct Args {
    /// The server's address.
    #[arg(short = 's', default_value = "127.0.0.1")]
    server: String,
    /// Port.
    #[arg(short = 'p', default_value = "7471")]
    port: String,
}

fn run(a: &Args) -> rdma::Result<()> {
    let info = AddrInfo::resolve(Some(&a.server), Some(&a.port), &AddrHints::default())?;
    let ep = Endpoint::create(&info, Some(ATTR))?;
    let inline = inline_or_say("rdma_client", &ep);
    let recv = ep.reg_msgs(MSG)?;
    let send = ep.reg_msgs(MSG)?;
    ep.post_recv(0, &recv.sge(0..MSG)?)?;
    ep.connect(&ConnParam::new(), TIMEOUT)?;
    send_msg(&ep, inline, &send)?;
    ep.get_send_comp(TIMEOUT)?.result()?;
    ep.get_recv_comp(TIMEOUT)?.result()?;
    ep.disconnect()
}

fn main() -> ExitCode {
    let a = Args::parse();
    main_of("rdma_client", || run(&a))
}
