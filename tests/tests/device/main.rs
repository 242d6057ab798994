//! Device tests at the -sys level, run on rxe and on siw inside the CI VM.
//!
//! `cargo test -p rdma-tests --test device` on a host without RDMA reports
//! every test as skipped; `ci/test.sh` runs them in the soft-RDMA VM.

mod cm;
mod enumerate;
mod extended;
mod rc;

use rdma_tests::{run, Test};

fn main() -> std::process::ExitCode {
    run(&[
        Test {
            name: "sys::enumerate::device_list_has_the_test_device",
            run: enumerate::device_list_has_the_test_device,
        },
        Test {
            name: "sys::enumerate::every_device_opens_and_answers_queries",
            run: enumerate::every_device_opens_and_answers_queries,
        },
        Test {
            name: "sys::enumerate::gid_table_holds_the_netdev_addresses",
            run: enumerate::gid_table_holds_the_netdev_addresses,
        },
        Test {
            name: "sys::rc::hand_connected_send_and_write_fast_path_matches_shim",
            run: rc::hand_connected_send_and_write_fast_path_matches_shim,
        },
        Test {
            name: "sys::extended::wr_and_poll_api_fast_path_matches_shim",
            run: extended::wr_and_poll_api_fast_path_matches_shim,
        },
        Test {
            name: "sys::cm::connected_send_and_write_fast_path_matches_shim",
            run: cm::connected_send_and_write_fast_path_matches_shim,
        },
    ])
}
