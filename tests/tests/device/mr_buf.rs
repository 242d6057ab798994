//! Buffers the provider allocates (`rdma::LibBuffer`, rdma-core v65 and
//! newer) and their one region. rxe and siw have no allocator of their
//! own: libibverbs allocates page-aligned memory, `ibv_reg_buf_mr`
//! registers it through `ibv_reg_mr_ex`'s fallback to the provider's
//! `reg_mr`, and the DMA-BUF export answers `ENODATA`.

use rdma_tests::{Outcome, TestEnv, TestResult};

rdma_tests::tests!(
    "mr_buf":
    library_buffer_region_is_written_by_the_peer,
    library_buffer_has_one_region_inside_it_and_no_dmabuf,
);

#[cfg(has_ibv_alloc_buf)]
pub fn library_buffer_region_is_written_by_the_peer(env: &TestEnv) -> TestResult {
    use rdma::LibBuffer;
    use rdma_tests::check;

    use crate::fixtures::rc::{write_to, RcPair};
    use crate::fixtures::ACCESS;
    use crate::unsupported::no_leak;

    no_leak(env, || {
        let p = RcPair::new(env)?;
        let buf = LibBuffer::new(&p.pd, 3 * 4096)?;
        check!(buf.len() == 3 * 4096 && !buf.is_empty());
        check!(
            buf.as_ptr() as usize % 4096 == 0,
            "{:p} is not page-aligned",
            buf.as_ptr()
        );
        let mr = buf.reg_mr(4096..8192, ACCESS)?;
        check!(mr.len() == 4096, "{mr:?}");
        check!(
            mr.addr() == buf.as_ptr().wrapping_add(4096),
            "{:p}",
            mr.addr()
        );
        // The region keeps the buffer: the handle may go first.
        drop(buf);
        // libibverbs' allocation is not zeroed: a pattern of the test's own
        // around the write.
        mr.write(0, &[0xa5; 32])?;
        p.mr_a.write(0, b"lib-buf!")?;
        let wc = write_to(&p, mr.remote(16..24)?, 7)?;
        check!(wc.is_success(), "{wc:?}");
        check!(mr.to_vec(16..24)? == b"lib-buf!", "{:?}", mr.to_vec(0..32)?);
        check!(
            mr.to_vec(0..16)? == [0xa5; 16] && mr.to_vec(24..32)? == [0xa5; 8],
            "bytes around the write changed: {:?}",
            mr.to_vec(0..32)?
        );
        // Local copies through the same region.
        mr.write(4000, b"tail")?;
        check!(mr.to_vec(4000..4004)? == b"tail");
        Ok(())
    })?;
    Ok(Outcome::Passed)
}

#[cfg(has_ibv_alloc_buf)]
pub fn library_buffer_has_one_region_inside_it_and_no_dmabuf(env: &TestEnv) -> TestResult {
    use rdma::{LibBuffer, ProtectionDomain};
    use rdma_tests::check;

    use crate::fixtures::{open, refused, ACCESS};
    use crate::unsupported::no_leak;

    no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        refused(
            LibBuffer::new(&pd, 0),
            "ibv_alloc_buf",
            libc::EINVAL,
            "0 bytes",
        )?;
        let buf = LibBuffer::new(&pd, 4096)?;
        for (range, what) in [
            (0..0, "empty"),
            (4000..5000, "past the end"),
            (4096..4097, "at the end"),
        ] {
            let e = refused(
                buf.reg_mr(range.clone(), ACCESS),
                "ibv_reg_buf_mr",
                libc::EINVAL,
                "outside",
            )?;
            check!(e.hint().is_some(), "{what}: {e}");
        }
        let mr = buf.reg_mr(.., ACCESS)?;
        refused(
            buf.reg_mr(0..8, ACCESS),
            "ibv_reg_buf_mr",
            libc::EBUSY,
            "has a region already",
        )?;
        // From another thread too: one region at a time.
        let b2 = &buf;
        let other = std::thread::scope(|s| {
            s.spawn(|| b2.reg_mr(..8, ACCESS).err().map(|e| e.errno()))
                .join()
        });
        check!(
            matches!(other, Ok(Some(libc::EBUSY))),
            "a second region from another thread: {other:?}"
        );
        drop(mr);
        let again = buf.reg_mr(..8, ACCESS)?;
        check!(again.len() == 8);
        // rxe and siw: libibverbs' own allocation, no DMA-BUF behind it.
        refused(
            buf.export_dmabuf_fd(),
            "ibv_export_buf_dmabuf_fd",
            libc::ENODATA,
            "no DMA-BUF",
        )?;
        Ok(())
    })?;
    Ok(Outcome::Passed)
}

#[cfg(not(has_ibv_alloc_buf))]
pub fn library_buffer_region_is_written_by_the_peer(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_alloc_buf",
        65,
    )))
}

#[cfg(not(has_ibv_alloc_buf))]
pub fn library_buffer_has_one_region_inside_it_and_no_dmabuf(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_alloc_buf",
        65,
    )))
}
