//! Device tests, run on rxe and on siw inside the CI VM.
//!
//! `cargo test -p rdma-tests --test device` on a host without RDMA reports
//! every test as skipped; `ci/test.sh` runs them in the soft-RDMA VM. Each
//! module lists its tests in a `TESTS` table.

mod bad_input;
mod cm;
mod cm_async;
mod cm_ep;
mod cm_examples;
mod cm_options;
mod cm_ud;
mod cmid;
mod enumerate;
mod extended;
mod faults;
mod interop;
mod load;
mod rc;
mod sound_cm;
mod sound_cq;
mod sound_mr;
mod sound_post;
mod sound_umad;
mod stream;
mod stream_msg;
mod umad;
mod usability;
mod verbs;
mod verbs_edge;
mod verbs_more;

fn main() -> std::process::ExitCode {
    let all: Vec<rdma_tests::Test> = [
        enumerate::TESTS,
        rc::TESTS,
        extended::TESTS,
        cm::TESTS,
        cmid::TESTS,
        cm_async::TESTS,
        cm_ep::TESTS,
        cm_ud::TESTS,
        cm_examples::TESTS,
        cm_options::TESTS,
        umad::TESTS,
        verbs::TESTS,
        verbs_more::TESTS,
        verbs_edge::TESTS,
        faults::TESTS,
        bad_input::TESTS,
        load::TESTS,
        interop::TESTS,
        sound_post::TESTS,
        sound_cq::TESTS,
        sound_mr::TESTS,
        sound_cm::TESTS,
        sound_umad::TESTS,
        usability::TESTS,
        stream::TESTS,
        stream_msg::TESTS,
    ]
    .concat();
    rdma_tests::run(&all)
}
