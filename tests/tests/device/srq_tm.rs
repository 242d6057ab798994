//! Tag-matching SRQs (`IBV_SRQT_TM`) and their operations
//! (`ibv_post_srq_ops`): no soft device matches tags, so a tag-matching
//! SRQ is refused with the typed "not supported" error, directly and on a
//! CM id, with nothing left behind; tag operations on a basic SRQ are
//! refused before the provider.

use std::net::{IpAddr, SocketAddr};

use rdma::cm::{CmId, EventChannel, PortSpace};
use rdma::{
    CompletionQueue, MemoryRegion, ProtectionDomain, RecvWr, SharedReceiveQueue, SrqOp, TmCap,
};
use rdma_tests::{check, Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused, ACCESS};
use crate::unsupported::{no_leak, not_supported, said};

const CAP: TmCap = TmCap {
    max_num_tags: 64,
    max_ops: 8,
};

pub fn tag_matching_srq_is_not_supported_and_leaves_nothing(env: &TestEnv) -> TestResult {
    let errno = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        check!(
            ctx.query_device()?.as_raw().tm_caps.max_num_tags == 0,
            "{} reports tag matching",
            env.device
        );
        let errno = not_supported(
            env,
            SharedReceiveQueue::builder(&pd)
                .tag_matching(&cq, CAP)
                .build(),
            "ibv_create_srq_ex",
        )?;
        // Tag operations on a basic SRQ: refused before the provider (whose
        // own answer would be EOPNOTSUPP), and the SRQ still takes receives.
        let basic = SharedReceiveQueue::new(&pd, 8, 1)?;
        check!(!basic.is_tag_matching(), "a basic SRQ says tag matching");
        let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
        let s = [mr.sge(0..64)?];
        let mut ops = [
            SrqOp::add_tag(1, 2, &s, 0x1234, u64::MAX).signaled(),
            SrqOp::remove_tag(3, 0),
            SrqOp::sync(4, 0),
        ];
        refused(
            // SAFETY: refused before the provider (a basic SRQ): no handle
            // or buffer reaches it.
            unsafe { basic.post_srq_ops(&mut ops) },
            "ibv_post_srq_ops",
            libc::EINVAL,
            "tag-matching SRQ",
        )?;
        refused(
            // SAFETY: as above, and no operation at all.
            unsafe { basic.post_srq_ops(&mut []) },
            "ibv_post_srq_ops",
            libc::EINVAL,
            "tag-matching SRQ",
        )?;
        basic.post_recv(&mut [RecvWr::new(5, &s)])?;
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no tag matching on {}: {} (typed error checked, tag operations refused on a basic SRQ, no kernel object left)",
        env.device,
        said(env, "ibv_create_srq_ex", errno)
    )))
}

pub fn tag_matching_srq_on_a_cm_id_is_refused_and_the_id_takes_a_basic_one(
    env: &TestEnv,
) -> TestResult {
    crate::cm_srq::open_cm_device(env)?;
    let errno = no_leak(env, || {
        let ch = EventChannel::new()?;
        let mut id = CmId::new(&ch, PortSpace::Tcp)?;
        id.bind(SocketAddr::new(IpAddr::V4(env.ipv4), 0))?;
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let errno = not_supported(
            env,
            id.create_srq_ex(SharedReceiveQueue::builder(&pd).tag_matching(&cq, CAP)),
            "rdma_create_srq_ex",
        )?;
        check!(id.srq().is_none(), "a refused SRQ is on the id");
        id.create_srq_ex(SharedReceiveQueue::builder(&pd).max_wr(4))?;
        check!(
            id.srq().is_some_and(|s| !s.is_tag_matching()),
            "the id's SRQ"
        );
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no tag matching on {}: {} (typed error checked, the id took a basic SRQ after it, no kernel object left)",
        env.device,
        said(env, "rdma_create_srq_ex", errno)
    )))
}

rdma_tests::tests!(
    "srq_tm":
    tag_matching_srq_is_not_supported_and_leaves_nothing,
    tag_matching_srq_on_a_cm_id_is_refused_and_the_id_takes_a_basic_one,
);
