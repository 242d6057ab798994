//! Fabric tests: `rdma::umad` and the examples on a simulated InfiniBand
//! fabric (ibsim, with OpenSM as subnet manager and SA), run by
//! `ci/fabric.sh --suite` on each CI topology, with umad2sim preloaded;
//! the examples against the C tools of infiniband-diags in `compare`.
//!
//! `cargo test -p rdma-tests --test fabric` outside `ci/fabric.sh` reports
//! every test as skipped. Each module lists its tests in a `TESTS` table.
//! With `RDMA_FABRIC_ROUNDTRIP` set (the suite's fabric of a topology as
//! our ibnetdiscover wrote it) only the round trip's tests run; with
//! `RDMA_FABRIC_SPEED` (`ci/fabric.sh --speed`) only the timing of
//! ibnetdiscover against the C tool's.

mod compare;
mod diags;
mod mads;
mod sa_client;
mod sa_records;
mod sa_server;
mod sm;
mod sm_election;
mod sm_faults;
mod tools;

fn main() -> std::process::ExitCode {
    let all: Vec<rdma_tests::fabric::FabricTest> =
        if std::env::var_os("RDMA_FABRIC_ROUNDTRIP").is_some() {
            compare::roundtrip::TESTS.to_vec()
        } else if std::env::var_os("RDMA_FABRIC_SPEED").is_some() {
            compare::speed::TESTS.to_vec()
        } else {
            [
                mads::TESTS,
                sa_client::TESTS,
                sa_server::TESTS,
                sa_records::TESTS,
                sm::TESTS,
                sm_faults::TESTS,
                sm_election::TESTS,
                tools::TESTS,
                diags::TESTS,
                compare::TESTS,
            ]
            .concat()
        };
    rdma_tests::fabric::run(&all)
}
