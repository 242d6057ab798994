//! Memory regions: copies while the device writes, odd lengths, the local
//! write right remote writes need.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rdma::{AccessFlags, MemoryRegion, RecvWr, SendWr, WcOpcode};
use rdma_tests::{check, fail, Outcome, TestEnv, TestResult};

use crate::fixtures::{self, wait, write_to, RcPair, ACCESS, R, TIMEOUT};

pub fn remote_writes_need_local_write(env: &TestEnv) -> TestResult {
    let ctx = fixtures::open(env)?;
    let pd = rdma::ProtectionDomain::new(&ctx)?;
    for access in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    ] {
        match MemoryRegion::new(&pd, 4096, access) {
            Ok(_) => fail!("{access:?} without LOCAL_WRITE was registered"),
            Err(e) => {
                check!(e.errno() == libc::EINVAL, "{access:?}: {e}");
                check!(
                    e.to_string().contains("need LOCAL_WRITE"),
                    "{access:?}: no hint in {e}"
                );
            }
        }
    }
    // Relaxed ordering is an optional flag: taken, and traffic flows.
    let p = RcPair::new(env)?;
    let relaxed = MemoryRegion::new(&p.pd, 4096, ACCESS | AccessFlags::RELAXED_ORDERING)?;
    p.mr_a.write(0, b"relaxed!")?;
    let wc = write_to(&p, relaxed.remote(100..108)?, 1)?;
    check!(wc.is_success(), "a write into a relaxed region: {wc:?}");
    check!(
        relaxed.to_vec(100..108)? == b"relaxed!",
        "the write differs"
    );
    let _ = &ctx;
    Ok(Outcome::Passed)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Two connected RC queue pairs of one device, each with a CQ of 16
/// entries (the tests register the regions they prove).
fn pair(env: &TestEnv) -> R<RcPair> {
    RcPair::options().cqe(16).build(env)
}

/// Threads copy into and out of one region through `&MemoryRegion` while
/// the device RDMA-WRITEs into another part of it and a third thread polls
/// the written bytes (as a write-latency test polls its last byte).
/// Disjoint copies, adjacent inside one 8-byte word, keep each other's
/// bytes; overlapping ones leave one of the values written in each byte.
pub fn copies_from_threads_while_the_device_writes(env: &TestEnv) -> TestResult {
    let p = pair(env)?;
    const SPLIT: usize = 4099; // not a multiple of 8: the two halves share a word
    const LEN: usize = 8195;
    const DMA: usize = 12288; // the device writes 12288..12288 + 4093
    let mr = MemoryRegion::new(&p.pd, 16387, ACCESS)?;
    let src = MemoryRegion::new(&p.pd, 4093, ACCESS)?;
    let payload: Vec<u8> = (0..4093u32).map(|i| (i % 253) as u8 + 1).collect();
    src.write(0, &payload)?;
    let sge = [src.sge(..)?];

    let done = AtomicBool::new(false);
    let result: R<()> = std::thread::scope(|s| {
        let copier = |range: std::ops::Range<usize>, byte: u8| {
            let mr = &mr;
            let done = &done;
            move || -> Result<(), String> {
                let mut rounds = 0u32;
                let mut seen = vec![0; range.len()];
                while rounds < 200 || !done.load(Ordering::Relaxed) {
                    let v = byte.wrapping_add(rounds as u8);
                    mr.write(range.start, &vec![v; range.len()])
                        .map_err(|e| e.to_string())?;
                    mr.read(range.start, &mut seen).map_err(|e| e.to_string())?;
                    if seen.iter().any(|&b| b != v) {
                        return Err(format!(
                            "{range:?}: a copy lost bytes of this thread's write"
                        ));
                    }
                    rounds += 1;
                }
                Ok(())
            }
        };
        let a = s.spawn(copier(0..SPLIT, 0x10));
        let b = s.spawn(copier(SPLIT..LEN, 0x80));
        let poller = s.spawn(|| -> Result<(), String> {
            let start = Instant::now();
            let mut last = [0u8];
            while last[0] != payload[4092] {
                mr.read(DMA + 4092, &mut last).map_err(|e| e.to_string())?;
                if start.elapsed() > TIMEOUT {
                    return Err("the RDMA WRITE's last byte never arrived".into());
                }
            }
            Ok(())
        });
        let posted = (|| -> R<()> {
            p.qp_a.post_send(&mut [
                SendWr::rdma_write(1, &sge, mr.remote(DMA..DMA + 4093)?).signaled()
            ])?;
            check!(wait(&p.cq_a, 1)?[0].opcode() == WcOpcode::RdmaWrite);
            Ok(())
        })();
        done.store(true, Ordering::Relaxed);
        posted?;
        for (name, t) in [
            ("first copier", a),
            ("second copier", b),
            ("poller", poller),
        ] {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => fail!("{name}: {e}"),
                Err(_) => fail!("{name} panicked"),
            }
        }
        Ok(())
    });
    result?;
    check!(
        mr.to_vec(DMA..DMA + 4093)? == payload,
        "the RDMA WRITE's data differs"
    );

    // Overlapping copies: every byte holds one of the two values written.
    let filled = std::thread::scope(|s| {
        let fillers: Vec<_> = [0x5a, 0xa5]
            .map(|v| {
                let mr = &mr;
                s.spawn(move || (0..50).try_for_each(|_| mr.fill(3..LEN - 3, v)))
            })
            .into_iter()
            .collect();
        fillers.into_iter().map(|t| t.join()).collect::<Vec<_>>()
    });
    for r in filled {
        match r {
            Ok(r) => r?,
            Err(_) => fail!("a filler panicked"),
        }
    }
    let all = mr.to_vec(3..LEN - 3)?;
    check!(
        all.iter().all(|b| [0x5a, 0xa5].contains(b)),
        "overlapping copies left a byte neither wrote"
    );
    check!(
        mr.to_vec(DMA..DMA + 4093)? == payload,
        "copies elsewhere changed the RDMA WRITE's data"
    );
    Ok(Outcome::Passed)
}

/// A region of an odd length is allocated on whole pages of its own (no
/// heap object lands on its last page), keeps the length asked for, and
/// works up to its last byte: a SEND from and an RDMA WRITE into its end.
pub fn odd_length_region_on_whole_pages(env: &TestEnv) -> TestResult {
    let p = pair(env)?;
    let page = page_size();
    let len = 3 * page + 13;
    let mr = MemoryRegion::new(&p.pd, len, ACCESS)?;
    // Small allocations made now would come from the rest of the region's
    // last page if the region did not own it whole.
    let heap: Vec<Box<[u8; 32]>> = (0..256).map(|_| Box::new([0; 32])).collect();
    let addr = mr.addr() as usize;
    let pages = addr..addr + 4 * page;
    check!(mr.len() == len, "length {} instead of {len}", mr.len());
    check!(
        addr % page == 0,
        "start {addr:#x} is not on a {page}-byte page"
    );
    if let Some(b) = heap.iter().find(|b| pages.contains(&(b.as_ptr() as usize))) {
        fail!(
            "a heap object at {:p} shares the region's pages {pages:x?}",
            b.as_ptr()
        );
    }
    check!(
        mr.write(len - 1, &[1, 2]).is_err(),
        "a copy past the asked length"
    );
    check!(
        mr.sge(len - 4..len + 1).is_err(),
        "an SGE past the asked length"
    );

    let tail: Vec<u8> = (0..13u8).map(|i| i + 0x40).collect();
    mr.write(len - 13, &tail)?;
    let peer = MemoryRegion::new(&p.pd, 4097, ACCESS)?;
    let recv = [peer.sge(0..100)?];
    p.qp_b.post_recv(&mut [RecvWr::new(1, &recv)])?;
    let send = [mr.sge(len - 13..)?];
    p.qp_a.post_send(&mut [SendWr::send(2, &send).signaled()])?;
    wait(&p.cq_a, 1)?;
    let wc = wait(&p.cq_b, 1)?[0];
    check!(wc.byte_len() == 13, "{wc:?}");
    check!(
        peer.to_vec(0..13)? == tail,
        "the SEND from the region's end differs"
    );

    peer.write(4000, b"into the last bytes")?;
    let w = [peer.sge(4000..4019)?];
    p.qp_b
        .post_send(&mut [SendWr::rdma_write(3, &w, mr.remote(len - 19..)?).signaled()])?;
    wait(&p.cq_b, 1)?;
    check!(
        mr.to_vec(len - 19..)? == b"into the last bytes",
        "the RDMA WRITE into the region's end differs"
    );
    Ok(Outcome::Passed)
}

/// Whether the page at `addr` is mapped in this process (`mincore` fails
/// with ENOMEM on an unmapped range).
fn mapped(addr: usize) -> R<bool> {
    let mut v = 0u8;
    // SAFETY: `addr` is page-aligned and `v` holds the one page's byte;
    // mincore reads no memory of the range, it only looks it up.
    if unsafe { libc::mincore(addr as *mut libc::c_void, page_size(), &mut v) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    check!(e.raw_os_error() == Some(libc::ENOMEM), "mincore: {e}");
    Ok(false)
}

/// A region dropped while a peer's RDMA WRITEs into it are in flight: its
/// pages leave the process at once (so a placement still under way, which
/// siw does not wait for at deregistration, lands in pages no part of the
/// process can reach), every write completes (landed, refused or flushed),
/// and a region made right after the drop keeps what was written into it.
pub fn a_region_dropped_while_a_peer_writes_it_leaves_the_process(env: &TestEnv) -> TestResult {
    const LEN: usize = 16384;
    const WRITES: u64 = 12;
    // The look at the pages races with any other thread's mmap into the
    // hole they leave: a round counts once its pages were seen unmapped.
    for round in 0..3 {
        let p = pair(env)?;
        let src = MemoryRegion::new(&p.pd, LEN, ACCESS)?;
        src.fill(.., 0xc3)?;
        let sge = [src.sge(..)?];
        let target = MemoryRegion::new(&p.pd, LEN, ACCESS)?;
        let at = target.remote(..)?;
        let pages: Vec<usize> = (0..LEN)
            .step_by(page_size())
            .map(|o| target.addr() as usize + o)
            .collect();
        for i in 0..WRITES {
            p.qp_a
                .post_send(&mut [SendWr::rdma_write(i, &sge, at).signaled()])?;
        }
        drop(target);
        let mut unmapped = true;
        for &a in &pages {
            unmapped &= !mapped(a)?;
        }
        let fresh = MemoryRegion::new(&p.pd, LEN, ACCESS)?;
        fresh.fill(.., 0x5a)?;
        let mut statuses = Vec::new();
        let mut buf = vec![rdma::WorkCompletion::ZERO; 16];
        let start = Instant::now();
        while (statuses.len() as u64) < WRITES {
            check!(
                start.elapsed() < TIMEOUT,
                "{} of {WRITES} writes completed: {statuses:?}",
                statuses.len()
            );
            for wc in p.cq_a.wait(&mut buf[..], 1, TIMEOUT)? {
                statuses.push(wc.status());
            }
        }
        println!("    round {round}: the writes completed {statuses:?}");
        check!(
            fresh.to_vec(..)?.iter().all(|&b| b == 0x5a),
            "a write into the dropped region reached the region made after it"
        );
        if unmapped {
            return Ok(Outcome::Passed);
        }
        println!("    round {round}: a page of the dropped region was mapped again");
    }
    fail!("the dropped region's pages were found mapped after its drop in each of 3 rounds")
}

rdma_tests::tests!(
    "mr":
    remote_writes_need_local_write,
    copies_from_threads_while_the_device_writes,
    odd_length_region_on_whole_pages,
    a_region_dropped_while_a_peer_writes_it_leaves_the_process,
);
