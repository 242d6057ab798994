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
mod fabric_cache;
mod ipoib;
mod lmc;
mod mads;
mod multicast;
mod partitions;
mod sa_client;
mod sa_paths;
mod sa_records;
mod sa_server;
mod sm;
mod sm_election;
mod sm_faults;
mod sm_groups;
mod tools;

fn main() -> std::process::ExitCode {
    let mut all: Vec<rdma_tests::fabric::FabricTest> =
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
                sa_paths::TESTS,
                sm::TESTS,
                sm_faults::TESTS,
                sm_groups::TESTS,
                multicast::TESTS,
                sm_election::TESTS,
                partitions::TESTS,
                lmc::TESTS,
                tools::TESTS,
                diags::TESTS,
                fabric_cache::TESTS,
                ipoib::TESTS,
                compare::TESTS,
            ]
            .concat()
        };
    gate_diags(&mut all);
    rdma_tests::fabric::run(&all)
}

/// Whether `fabric` (a run's name: the topology, then `-ours-sm` and the
/// like) is on one of the topologies of `nets` (space-separated, or `all`).
pub(crate) fn on_topology(nets: &str, fabric: &str) -> bool {
    nets.split_whitespace().any(|n| {
        n == "all"
            || fabric
                .strip_prefix(n)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    })
}

/// Under our SM, on a topology not of `RDMA_FABRIC_OURS_DIAGS_NETS` (when
/// set: `ci/fabric.sh --suite` sets `fattree`), the `diags::` tests report
/// skipped. They hold each diagnostic against its C tool on the same
/// answers of the switches and ports, whichever SM set them; under OpenSM
/// they run on every topology.
fn gate_diags(all: &mut [rdma_tests::fabric::FabricTest]) {
    let ours = std::env::var("RDMA_FABRIC_SM").as_deref() == Ok("ours");
    let here = std::env::var("RDMA_FABRIC_NAME").unwrap_or_default();
    if let Ok(nets) = std::env::var("RDMA_FABRIC_OURS_DIAGS_NETS") {
        if ours && !on_topology(&nets, &here) {
            for t in all.iter_mut().filter(|t| t.name.starts_with("diags::")) {
                t.run = diags_elsewhere;
            }
        }
    }
}

fn diags_elsewhere(_: &rdma_tests::fabric::Fabric) -> rdma_tests::TestResult {
    let nets = std::env::var("RDMA_FABRIC_OURS_DIAGS_NETS").unwrap_or_default();
    Ok(rdma_tests::Outcome::Skipped(format!(
        "under our SM the diagnostics run on {nets} (RDMA_FABRIC_OURS_DIAGS_NETS), under OpenSM everywhere"
    )))
}
