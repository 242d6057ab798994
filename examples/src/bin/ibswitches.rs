//! Lists the switches of the subnet, like infiniband-diags' `ibswitches`:
//! the `Switch` lines of a topology file or of what `ibnetdiscover`
//! finds, with their port 0 LID.
//!
//! Usage: `ibswitches [-h] [TOPOLOGY | -C CA -P PORT -t MS]`

fn main() -> std::process::ExitCode {
    rdma_examples::netlist::main(&[("ibswitches", rdma_examples::netlist::switches)])
}
