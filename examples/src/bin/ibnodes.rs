//! Lists the CAs and then the switches of the subnet, like
//! infiniband-diags' `ibnodes` (`ibhosts`, then `ibswitches`).
//!
//! Usage: `ibnodes [-h] [TOPOLOGY | -C CA -P PORT -t MS]`

use rdma_examples::netlist;

fn main() -> std::process::ExitCode {
    netlist::main(&[
        ("ibhosts", netlist::hosts),
        ("ibswitches", netlist::switches),
    ])
}
