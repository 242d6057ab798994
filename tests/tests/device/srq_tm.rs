//! Tag-matching SRQs (`IBV_SRQT_TM`) and their operations
//! (`ibv_post_srq_ops`, and the safe `TagMatchingSrq`): no soft device
//! matches tags, so a tag-matching SRQ is refused with the typed "not
//! supported" error, directly, through the safe API and on a CM id, with
//! nothing left behind (the CQ given to the safe API is released with the
//! refusal); tag operations on a basic SRQ, and a CQ the safe API would
//! not own alone, of another context, classic or without the tag fields
//! are refused before the provider.
//! What the safe API does with a live SRQ (handles removed twice, of
//! another SRQ, buffers given back only by the completion that releases
//! them, two threads) is proved on the host (`rdma::srq_tag_table` and
//! `rdma::srq_tm` unit tests).

use std::net::{IpAddr, SocketAddr};

use rdma::cm::{CmId, EventChannel, PortSpace};
use rdma::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, RecvWr, SharedReceiveQueue,
    SrqOp, TagBuffer, TmCap, WcFlags,
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
        // The safe API needs a CQ that carries a message's bytes and tag:
        // a CQ of the tag fields is refused by rxe ("not supported"), and
        // siw, with no extended CQ, makes a classic one, which the safe API
        // refuses before the provider; the CQs go with the refusals
        // (no_leak counts CQs).
        let tm_flags = WcFlags::STANDARD | WcFlags::TM_INFO;
        match CompletionQueue::builder(&ctx).wc_flags(tm_flags).build() {
            Err(e) => check!(
                e.verb() == "ibv_create_cq_ex" && e.errno() == libc::EOPNOTSUPP,
                "a CQ of the tag fields on {}: {e}",
                env.device
            ),
            Ok(cq) => {
                check!(
                    !cq.is_extended(),
                    "{} made an extended CQ of the tag fields",
                    env.device
                );
                refused(
                    SharedReceiveQueue::builder(&pd).build_tag_matching(cq, CAP),
                    "ibv_create_srq_ex",
                    libc::EINVAL,
                    "must be extended",
                )?;
            }
        }
        // An extended CQ of the standard fields (a classic one on siw):
        // refused before the provider, for the tag it does not carry.
        let ex = CompletionQueue::builder(&ctx).extended(true).build()?;
        let why = if ex.is_extended() {
            "TM_INFO"
        } else {
            "must be extended"
        };
        refused(
            SharedReceiveQueue::builder(&pd).build_tag_matching(ex, CAP),
            "ibv_create_srq_ex",
            libc::EINVAL,
            why,
        )?;
        Ok(errno)
    })?;
    Ok(Outcome::Skipped(format!(
        "no tag matching on {}: {} (typed error checked; TagMatchingSrq refuses the CQs this device makes; tag operations refused on a basic SRQ; no kernel object left)",
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

pub fn safe_tag_matching_refuses_a_shared_or_foreign_cq_before_the_provider(
    env: &TestEnv,
) -> TestResult {
    no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        // A CQ with a second handle: its holder could poll the SRQ's
        // completions past the tag table.
        let cq = CompletionQueue::builder(&ctx).extended(true).build()?;
        let other_handle = cq.clone();
        refused(
            SharedReceiveQueue::builder(&pd).build_tag_matching(cq, CAP),
            "ibv_create_srq_ex",
            libc::EINVAL,
            "must be its alone",
        )?;
        // The refusal dropped its handle: the one left is alone now, and
        // passes that check to be refused for the fields it lacks.
        let why = if other_handle.is_extended() {
            "TM_INFO"
        } else {
            "must be extended"
        };
        refused(
            SharedReceiveQueue::builder(&pd).build_tag_matching(other_handle, CAP),
            "ibv_create_srq_ex",
            libc::EINVAL,
            why,
        )?;
        // A CQ of another context (another open of the device).
        let ctx2 = open(env)?;
        let foreign = CompletionQueue::builder(&ctx2).extended(true).build()?;
        refused(
            SharedReceiveQueue::builder(&pd).build_tag_matching(foreign, CAP),
            "ibv_create_srq_ex",
            libc::EINVAL,
            "different contexts",
        )?;
        // A tag buffer is a range of its region, bounds checked; the
        // region comes back whole.
        let mr = MemoryRegion::new(&pd, 4096, ACCESS | AccessFlags::LOCAL_WRITE)?;
        let outside = match TagBuffer::new(mr, 4000..4100) {
            Ok(b) => return Err(format!("a range past the region was taken: {b:?}").into()),
            Err(e) => e,
        };
        check!(
            outside.errno() == libc::EINVAL,
            "a range past the region: {outside}"
        );
        let mr = MemoryRegion::new(&pd, 4096, ACCESS | AccessFlags::LOCAL_WRITE)?;
        refused(
            TagBuffer::new(mr, 64..64),
            "ibv_post_srq_ops",
            libc::EINVAL,
            "cannot be empty",
        )?;
        let mr = MemoryRegion::new(&pd, 4096, ACCESS | AccessFlags::LOCAL_WRITE)?;
        let b = TagBuffer::new(mr, 64..128)?;
        check!(
            b.range() == (64..128),
            "the buffer's range: {:?}",
            b.range()
        );
        let whole = TagBuffer::whole(b.into_region())?;
        check!(
            whole.range() == (0..4096),
            "the whole region: {:?}",
            whole.range()
        );
        Ok(())
    })?;
    Ok(Outcome::Passed)
}

rdma_tests::tests!(
    "srq_tm":
    tag_matching_srq_is_not_supported_and_leaves_nothing,
    safe_tag_matching_refuses_a_shared_or_foreign_cq_before_the_provider,
    tag_matching_srq_on_a_cm_id_is_refused_and_the_id_takes_a_basic_one,
);
