//! Lists the CAs of the subnet, like infiniband-diags' `ibhosts`: the
//! `Ca` lines of a topology file or of what `ibnetdiscover` finds.
//!
//! Usage: `ibhosts [-h] [TOPOLOGY | -C CA -P PORT -t MS]`

fn main() -> std::process::ExitCode {
    rdma_examples::netlist::main(&[("ibhosts", rdma_examples::netlist::hosts)])
}
