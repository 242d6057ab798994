//! Fabric tests: `rdma::umad` and the examples on a simulated InfiniBand
//! fabric (ibsim, with OpenSM as subnet manager and SA), run by
//! `ci/fabric.sh --suite` on each CI topology, with umad2sim preloaded.
//!
//! `cargo test -p rdma-tests --test fabric` outside `ci/fabric.sh` reports
//! every test as skipped. Each module lists its tests in a `TESTS` table.

mod mads;
mod sa_client;
mod sm;
mod tools;

fn main() -> std::process::ExitCode {
    let all: Vec<rdma_tests::fabric::FabricTest> =
        [mads::TESTS, sa_client::TESTS, sm::TESTS, tools::TESTS].concat();
    rdma_tests::fabric::run(&all)
}
