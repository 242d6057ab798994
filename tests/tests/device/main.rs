//! Device tests, run on rxe and on siw inside the CI VM.
//!
//! `cargo test -p rdma-tests --test device` on a host without RDMA reports
//! every test as skipped; `ci/test.sh` runs them in the soft-RDMA VM. Each
//! module lists its tests in a `TESTS` table.

mod ah;
mod ah_reply;
mod bad_input;
mod cm;
mod cm_addrinfo;
mod cm_async;
mod cm_ep;
mod cm_examples;
mod cm_notify;
mod cm_options;
mod cm_srq;
mod cm_teardown;
mod cm_ud;
mod cmid;
mod comp_cntr;
mod context;
mod cq;
mod cq_ex;
mod cq_moderation;
mod cq_poll;
mod dm;
mod dmah;
mod ece;
mod enumerate;
mod extended;
mod fixtures;
mod flow;
mod import;
mod interop;
mod load;
mod mcast;
mod mr;
mod mr_buf;
mod mr_placement;
mod mw;
mod port_speed;
mod process_killed;
mod qp;
mod qp_errors;
mod qp_ext;
mod qp_post;
mod rc;
mod srq;
mod srq_tm;
mod stream;
mod stream_msg;
mod td;
mod ud;
mod umad;
mod umad_receive;
mod umad_smi;
mod unsupported;
mod wq;
mod wr_ext;
mod xrc;

fn main() -> std::process::ExitCode {
    let all: Vec<rdma_tests::Test> = [
        enumerate::TESTS,
        ah::TESTS,
        ah_reply::TESTS,
        rc::TESTS,
        extended::TESTS,
        context::TESTS,
        cq::TESTS,
        cq_ex::TESTS,
        cq_moderation::TESTS,
        cq_poll::TESTS,
        qp::TESTS,
        qp_post::TESTS,
        qp_errors::TESTS,
        qp_ext::TESTS,
        wr_ext::TESTS,
        mr::TESTS,
        mr_placement::TESTS,
        srq::TESTS,
        srq_tm::TESTS,
        mw::TESTS,
        ud::TESTS,
        mcast::TESTS,
        cm::TESTS,
        cmid::TESTS,
        ece::TESTS,
        cm_async::TESTS,
        cm_ep::TESTS,
        cm_ud::TESTS,
        cm_examples::TESTS,
        cm_notify::TESTS,
        cm_options::TESTS,
        cm_srq::TESTS,
        cm_teardown::TESTS,
        umad::TESTS,
        umad_receive::TESTS,
        bad_input::TESTS,
        process_killed::TESTS,
        load::TESTS,
        interop::TESTS,
        stream::DATA,
        stream::FRAMEWORKS,
        stream::PEER_GONE,
        stream::TEARDOWN,
        stream::CANCEL,
        stream::CONFIG,
        stream_msg::TESTS,
        xrc::TESTS,
        td::TESTS,
        dm::TESTS,
        wq::TESTS,
        flow::TESTS,
        import::TESTS,
        port_speed::TESTS,
        comp_cntr::TESTS,
        dmah::TESTS,
        mr_buf::TESTS,
        cm_addrinfo::TESTS,
        umad_smi::TESTS,
    ]
    .concat();
    rdma_tests::run(&all)
}
