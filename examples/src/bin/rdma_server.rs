//! rdma_server: rdma-core's `rdma_server` (librdmacm/examples) on
//! `rdma::cm::Endpoint`, the blocking CM: it takes one connection, receives
//! a 16-byte message, answers with 16 bytes of its own and disconnects. Its
//! flags and output are the C tool's, and either side may be the C one.
//!
//! ```text
//! rdma_server [-s server_address] [-p port_number]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rdma::cm::{AddrHints, AddrInfo, ConnParam, Endpoint};
use rdma_examples::ep_msg::{inline_or_say, main_of, send_msg, ATTR, MSG};

/// How long the server waits for the client and for each completion.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One message each way through the blocking CM (like rdma-core's rdma_server).
#[derive(Parser, Debug)]
#[command(name = "rdma_server")]
struct Args {
    /// Address to listen on (default: every address).
    #[arg(short = 's')]
    server: Option<String>,
    /// Port.
    #[arg(short = 'p', default_value = "7471")]
    port: String,
}

fn run(a: &Args) -> rdma::Result<()> {
    let info = AddrInfo::resolve(a.server.as_deref(), Some(&a.port), &AddrHints::passive())?;
    let listener = Endpoint::create(&info, Some(ATTR))?;
    listener.listen(0)?;
    let ep = listener.get_request(TIMEOUT)?.ep;
    let inline = inline_or_say("rdma_server", &ep);
    let recv = ep.reg_msgs(MSG)?;
    let send = ep.reg_msgs(MSG)?;
    ep.post_recv(0, &recv.sge(0..MSG)?)?;
    ep.accept(&ConnParam::new(), TIMEOUT)?;
    ep.get_recv_comp(TIMEOUT)?.result()?;
    send_msg(&ep, inline, &send)?;
    ep.get_send_comp(TIMEOUT)?.result()?;
    ep.disconnect()
}

fn main() -> ExitCode {
    let a = Args::parse();
    main_of("rdma_server", || run(&a))
}
