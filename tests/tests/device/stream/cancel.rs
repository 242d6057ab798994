//! Reads and writes cancelled mid-way, halves on two threads, inline writes
//! among queued ones, and the busy-poll driver.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma::stream::{MAX_PAYLOAD, RECV_SLOTS, SEND_SLOTS};
use rdma_tests::{check, TestEnv, TestResult};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    counts_back_to, current_thread_runtime, echo, fill, listen, pair, pattern, run, run_on,
    run_within, verify, word, PatternCheck, PatternReader, R, T,
};

/// Reads and writes raced against timers in `select!`, so that many are
/// cancelled while pending: every byte arrives once and in order (the
/// poll functions take nothing when they return `Pending`).
pub fn reads_and_writes_cancelled_in_select_lose_no_byte(env: &TestEnv) -> TestResult {
    const LEN: usize = 6 << 20;
    run(async {
        let (mut l, at) = listen(env)?;
        let (mut c, mut s) = pair(&mut l, at).await?;
        let data = Arc::new(pattern(11, LEN));
        let writer = {
            let data = Arc::clone(&data);
            tokio::spawn(async move {
                // Nothing comes for a while: the reader's first reads wait
                // (and poll the CQ themselves) until their sleeps win.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let (mut pos, mut cancelled, mut k) = (0, 0u32, 0u64);
                while pos < LEN {
                    k += 1;
                    let n = ((word(1, k) % 150_000) as usize + 1).min(LEN - pos);
                    tokio::select! {
                        biased;
                        r = c.write(&data[pos..pos + n]) => pos += r?,
                        _ = tokio::time::sleep(Duration::from_micros(word(2, k) % 700)) => cancelled += 1,
                    }
                    // Pauses, so that the reader waits too.
                    if k % 40 == 0 {
                        tokio::time::sleep(Duration::from_millis(15)).await;
                    }
                }
                c.shutdown().await?;
                Ok::<_, io::Error>((cancelled, c))
            })
        };
        let mut check = PatternCheck::new(11);
        let mut buf = vec![0; 200_000];
        let (mut cancelled, mut k) = (0u32, 0u64);
        loop {
            k += 1;
            let n = (word(3, k) % 65_536) as usize + 1;
            tokio::select! {
                biased;
                r = s.read(&mut buf[..n]) => match r? {
                    0 => break,
                    got => check.check(&buf[..got])?,
                },
                _ = tokio::time::sleep(Duration::from_micros(word(4, k) % 500)) => cancelled += 1,
            }
            // Pauses, so that the writer's buffers fill.
            if k % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }
        let (wcancelled, _c) = writer.await??;
        check!(check.pos == LEN as u64, "read {} bytes of {LEN}", check.pos);
        check!(
            cancelled > 0 && wcancelled > 0,
            "nothing was cancelled while pending: {cancelled} reads, {wcancelled} writes"
        );
        eprintln!("    {cancelled} reads and {wcancelled} writes cancelled, {LEN} bytes intact");
        Ok(())
    })
}

/// Both ends never sleep (a busy-poll time of `MAX`) on a two-worker
/// runtime, with each end's read half and write half in tasks of their
/// own: the halves poll the CQ and post from two threads at once, the
/// driver in between. 4 MiB each way, in writes of odd sizes, echoed and
/// checked; then both ends shut down and read EOF.
pub fn spinning_halves_on_two_threads_keep_every_byte(env: &TestEnv) -> TestResult {
    const LEN: u64 = 4 << 20;
    run(async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        client.set_busy_poll(Duration::MAX);
        server.set_busy_poll(Duration::MAX);
        let echo = tokio::spawn(async move {
            let (mut rd, mut wr) = server.into_split();
            let n = tokio::io::copy(&mut rd, &mut wr).await?;
            wr.shutdown().await?;
            Ok::<u64, io::Error>(n)
        });
        let (mut rd, mut wr) = client.into_split();
        let writer = tokio::spawn(async move {
            let mut source = PatternReader {
                seed: 23,
                pos: 0,
                len: LEN,
            };
            let mut k = 0u64;
            let mut buf = vec![0u8; 70_000];
            loop {
                k += 1;
                let n = (word(5, k) % 70_000) as usize + 1;
                let got = source.read(&mut buf[..n]).await?;
                if got == 0 {
                    break;
                }
                wr.write_all(&buf[..got]).await?;
            }
            wr.shutdown().await?;
            Ok::<(), io::Error>(())
        });
        let mut check = PatternCheck::new(23);
        let back = tokio::io::copy(&mut rd, &mut check).await?;
        writer.await??;
        let echoed = echo.await??;
        check!(
            back == LEN && echoed == LEN && check.pos == LEN,
            "sent {LEN}, echoed {echoed}, read back {back} ({} checked)",
            check.pos
        );
        Ok(())
    })
}

/// Exchanges in which the client writes a burst of one to four pieces
/// (most of up to 64 bytes, which go at once and inline when nothing
/// written is in flight; some larger, which take a send buffer; a few of
/// many buffers) and reads the peer's echo of the burst before the next:
/// a burst's first piece goes inline, and the pieces after it queue
/// behind it or join a queued buffer. Every echo is checked byte for byte
/// against the pattern, so an inline piece that overtook a queued one, or
/// was lost or sent twice, fails. The echo is a task of its own on a
/// two-worker runtime; once with both drivers busy-polling, once with
/// them asleep on the armed CQ between messages.
pub fn small_inline_writes_keep_their_place_among_queued_ones(env: &TestEnv) -> TestResult {
    const EXCHANGES: u64 = 600;
    run(async {
        let (mut l, at) = listen(env)?;
        let mut report = vec![];
        let drivers = [
            (31u64, Duration::MAX, "busy-polling"),
            (32, Duration::ZERO, "asleep"),
        ];
        for (seed, spin, drivers) in drivers {
            let (mut client, server) = pair(&mut l, at).await?;
            client.set_busy_poll(spin);
            server.set_busy_poll(spin);
            let echoed = tokio::spawn(echo(server));
            let size = |k: u64| match word(seed, k) % 100 {
                0..=74 => (word(seed + 100, k) % 64 + 1) as usize,
                75..=96 => (word(seed + 100, k) % 400 + 65) as usize,
                _ => (word(seed + 100, k) % 150_000 + 1) as usize,
            };
            let (mut pos, mut k, mut small) = (0u64, 0u64, 0u64);
            let (mut piece, mut back, mut scratch) = (vec![], vec![], vec![]);
            for x in 0..EXCHANGES {
                let start = pos;
                for _ in 0..word(seed + 200, x) % 4 + 1 {
                    k += 1;
                    let n = size(k);
                    small += u64::from(n <= 64);
                    piece.resize(n, 0);
                    fill(seed, pos, &mut piece);
                    client.write_all(&piece).await?;
                    pos += n as u64;
                }
                back.resize((pos - start) as usize, 0);
                client.read_exact(&mut back).await?;
                verify(seed, start, &back, &mut scratch)
                    .map_err(|e| format!("drivers {drivers}, exchange {x}: {e}"))?;
            }
            client.shutdown().await?;
            let mut rest = [0u8; 1];
            let n = client.read(&mut rest).await?;
            check!(n == 0, "{n} bytes after the echo's end");
            let echoed = echoed.await??;
            check!(echoed == pos, "wrote {pos} bytes, the peer echoed {echoed}");
            report.push(format!(
                "drivers {drivers}: {k} writes ({small} of up to 64 bytes), {pos} bytes"
            ));
        }
        eprintln!("    {}", report.join("; "));
        Ok(())
    })
}

/// A read cancelled while it polls, then a busy-poll time of zero (the
/// driver sleeps on the armed CQ): the receive buffers that the next read
/// empties still go back to the peer at once, though this side then reads
/// no more. The peer writes more than its credits and send buffers hold,
/// so its last write ends only once credits come back.
///
/// The read must take everything the peer's credits let it send: data
/// arriving after it would wake the driver, whose pump would return the
/// credits whatever the read did. So the read waits until the peer's
/// writes show that data sent (its SENDs completed: their send buffers
/// took the writes after the first `SEND_SLOTS`; on rxe an RC SEND
/// completes once the receiver has its data), then a settling time for
/// this side's driver to take it from the CQ. A read that still finds
/// less (the driver had not run yet) proves nothing either way: the round
/// is tried again on a new connection, with a longer settling time, and
/// the test fails only when every round's read finds less.
pub fn buffers_read_after_a_cancelled_poll_go_back_to_the_peer(env: &TestEnv) -> TestResult {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // One credit is kept for a credit-only message.
    const SENT: usize = RECV_SLOTS - 1;
    // Writes that returned once the SENDs of the first `SENT` completed.
    const WRITTEN: usize = SENT + SEND_SLOTS;
    const SETTLE: [Duration; 4] = [
        Duration::from_millis(100),
        Duration::from_millis(500),
        Duration::from_secs(2),
        Duration::from_secs(5),
    ];
    // Upper bounds that prove a wait ends; each returns once it holds.
    const BOUND: Duration = Duration::from_secs(30);
    run_within(SETTLE.len() as u32 * 3 * BOUND, async {
        let (mut l, at) = listen(env)?;
        let mut short = vec![];
        for (round, settle) in SETTLE.into_iter().enumerate() {
            let (client, server) = pair(&mut l, at).await?;
            client.set_busy_poll(Duration::MAX);
            let (mut rd, _wr) = client.into_split();
            let mut small = [0u8; 64];
            let r = tokio::time::timeout(Duration::from_millis(20), rd.read(&mut small)).await;
            check!(r.is_err(), "a read with nothing sent ended: {r:?}");
            rd.set_busy_poll(Duration::ZERO);
            let written = Arc::new(AtomicUsize::new(0));
            let writer = tokio::spawn({
                let written = Arc::clone(&written);
                async move {
                    let (_srd, mut swr) = server.into_split();
                    let chunk = vec![7u8; MAX_PAYLOAD];
                    for _ in 0..RECV_SLOTS + SEND_SLOTS + 1 {
                        swr.write_all(&chunk).await?;
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, io::Error>(swr)
                }
            });
            let deadline = Instant::now() + BOUND;
            while written.load(Ordering::Relaxed) < WRITTEN {
                let w = written.load(Ordering::Relaxed);
                check!(
                    Instant::now() < deadline,
                    "the peer wrote {w} pieces of {MAX_PAYLOAD} bytes in {BOUND:?}, not the \
                     {WRITTEN} its credits and send buffers take"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(settle).await;
            let mut buf = vec![0u8; SENT * MAX_PAYLOAD];
            let n = rd.read(&mut buf).await?;
            if n < buf.len() && round + 1 < SETTLE.len() {
                short.push(format!("{n} bytes after {settle:?}"));
                writer.abort();
                continue;
            }
            check!(
                n == buf.len(),
                "one read took {n} bytes, not the {} that had arrived (the rounds \
                 before: {})",
                buf.len(),
                short.join(", ")
            );
            let done = tokio::time::timeout(BOUND, writer).await;
            check!(
                matches!(done, Ok(Ok(Ok(_)))),
                "the peer's writes did not end once this side had read: {done:?}"
            );
            if !short.is_empty() {
                eprintln!("    rounds whose read found less: {}", short.join(", "));
            }
            return Ok(());
        }
        unreachable!("the last round returns")
    })
}

/// A read cancelled while it polls the CQ itself (a busy-poll time of
/// `MAX`, so it never stops on its own), on one current-thread runtime
/// with the driver: the driver takes the CQ back. With nobody reading,
/// the shutdown's wait for its FIN's completion is the driver's to end;
/// then the echo is read whole.
pub fn a_read_cancelled_while_it_polls_hands_the_cq_back(env: &TestEnv) -> TestResult {
    let rt = current_thread_runtime()?;
    run_on(rt, T, async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        let srv = tokio::spawn(echo(server));
        client.set_busy_poll(Duration::MAX);
        let (mut rd, mut wr) = client.into_split();
        let mut buf = [0u8; 64];
        // Nothing was written: nothing comes, and the read polls on.
        let r = tokio::time::timeout(Duration::from_millis(20), rd.read(&mut buf)).await;
        check!(r.is_err(), "a read with nothing sent ended: {r:?}");
        let start = Instant::now();
        wr.write_all(b"after a cancelled read").await?;
        wr.shutdown().await?;
        let took = start.elapsed();
        check!(
            took < Duration::from_secs(10),
            "the shutdown took {took:?}: the CQ was left to a read that was gone"
        );
        let mut back = Vec::new();
        rd.read_to_end(&mut back).await?;
        check!(back == b"after a cancelled read", "the echo: {back:?}");
        let n = srv.await??;
        check!(n == 22, "the server echoed {n} bytes");
        eprintln!("    write and shutdown after the cancelled read: {took:?}");
        Ok(())
    })
}

/// What the calling thread did while it waited `wait` on the runtime (a
/// current-thread runtime: its tasks run on this thread).
struct ThreadTime {
    /// Time on a CPU.
    cpu: Duration,
    /// Time on a CPU or in the run queue, waiting for one: all of `wait`
    /// for a thread that never sleeps, however busy the machine's other
    /// threads keep its CPUs.
    runnable: Duration,
    /// Times the thread gave up its CPU of its own accord (slept):
    /// `voluntary_ctxt_switches` of `/proc/thread-self/status`.
    slept: u64,
}

/// The calling thread's times over a sleep of `wait` on the runtime,
/// from `/proc/thread-self/schedstat` (the nanoseconds on a CPU, then
/// waiting in a run queue).
async fn thread_time_over(wait: Duration) -> R<ThreadTime> {
    fn now() -> R<(u64, u64)> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat")?;
        let mut f = s.split_ascii_whitespace().map(str::parse::<u64>);
        match (f.next(), f.next()) {
            (Some(Ok(run)), Some(Ok(queued))) => Ok((run, queued)),
            _ => Err(format!("/proc/thread-self/schedstat reads {s:?}").into()),
        }
    }
    fn voluntary() -> R<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/status")?;
        s.lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                format!("/proc/thread-self/status has no voluntary_ctxt_switches: {s:?}").into()
            })
    }
    let (run0, queued0) = now()?;
    let slept0 = voluntary()?;
    tokio::time::sleep(wait).await;
    let (run1, queued1) = now()?;
    let slept1 = voluntary()?;
    let cpu = Duration::from_nanos(run1.saturating_sub(run0));
    Ok(ThreadTime {
        cpu,
        runnable: cpu + Duration::from_nanos(queued1.saturating_sub(queued0)),
        slept: slept1.saturating_sub(slept0),
    })
}

/// Busy polling: the setting's edges (rounding, `Duration::MAX`, shared
/// by the halves), ping-pongs checked byte by byte with the client never
/// sleeping and the server sleeping at once, both on one current-thread
/// runtime (a driver that polls forever must still let the other tasks
/// run), the setting's effect (the thread's time on a CPU or waiting for
/// one over an idle wait, polling and sleeping), and a stream that polls
/// forever released when dropped.
pub fn busy_poll_never_starves_the_runtime_and_stops_with_the_stream(env: &TestEnv) -> TestResult {
    let before = rdma_tests::resource_counts(&env.device)?;
    let rt = current_thread_runtime()?;
    run_on(rt, T, async {
        let (mut l, at) = listen(env)?;
        let (client, server) = pair(&mut l, at).await?;
        if std::env::var_os("RDMA_STREAM_SPIN_US").is_none() {
            check!(
                client.busy_poll() == rdma::stream::DEFAULT_BUSY_POLL,
                "default busy poll {:?}",
                client.busy_poll()
            );
        }
        client.set_busy_poll(Duration::from_nanos(1500));
        check!(
            client.busy_poll() == Duration::from_micros(2),
            "1.5 us kept as {:?}, not 2 us",
            client.busy_poll()
        );
        client.set_busy_poll(Duration::MAX);
        check!(
            client.busy_poll() == Duration::MAX,
            "MAX kept as {:?}",
            client.busy_poll()
        );
        server.set_busy_poll(Duration::ZERO);
        let (mut srd, mut swr) = server.into_split();
        check!(
            swr.busy_poll() == Duration::ZERO,
            "the write half sees {:?}, not the stream's 0",
            swr.busy_poll()
        );
        srd.set_busy_poll(Duration::ZERO);
        let echo = tokio::spawn(async move {
            let n = tokio::io::copy(&mut srd, &mut swr).await?;
            swr.shutdown().await?;
            Ok::<u64, io::Error>(n)
        });
        let (mut rd, mut wr) = client.into_split();
        let mut back = vec![0u8; 64];
        for i in 0..300u64 {
            let msg = pattern(i + 1, 64);
            wr.write_all(&msg).await?;
            rd.read_exact(&mut back).await?;
            if back != msg {
                return Err(format!("round trip {i}: the echo differs").into());
            }
            if i == 100 {
                // A third of the way with the client sleeping at once
                // too, set from a half; then never sleeping again.
                wr.set_busy_poll(Duration::ZERO);
                check!(
                    rd.busy_poll() == Duration::ZERO,
                    "the halves share the setting"
                );
            }
            if i == 200 {
                rd.set_busy_poll(Duration::MAX);
            }
        }
        // What the setting does, seen in the runtime thread's times over
        // an idle wait: the client's driver, never sleeping, polls
        // through it (the thread is on a CPU or waiting for one, which
        // the VM's other threads may hold); with both drivers sleeping at
        // once the thread sleeps.
        let idle = Duration::from_millis(400);
        let spun = thread_time_over(idle).await?;
        wr.set_busy_poll(Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let slept = thread_time_over(idle).await?;
        println!(
            "over an idle {idle:?}: busy-polling {:?} on a CPU, {:?} runnable, slept {} times; \
             sleeping {:?} on a CPU, {:?} runnable, slept {} times",
            spun.cpu, spun.runnable, spun.slept, slept.cpu, slept.runnable, slept.slept
        );
        // What each thread did, not how long the machine took to let it:
        // a thread that never sleeps is on a CPU or waiting for one the
        // whole time (its run-queue time counts, so a busy host cannot
        // shrink it); a thread that sleeps gives up its CPU of its own
        // accord and uses little of it. Its run-queue time is not
        // asserted: in an emulated guest a woken thread waits there for as
        // long as the host does not run the vCPU.
        check!(
            spun.runnable >= idle / 2,
            "a driver that never sleeps was runnable {:?} of an idle {idle:?}",
            spun.runnable
        );
        check!(
            slept.slept >= 1 && slept.cpu <= idle / 5,
            "drivers that sleep at once slept {} times and were on a CPU {:?} of an idle {idle:?}",
            slept.slept,
            slept.cpu
        );
        wr.shutdown().await?;
        let mut rest = Vec::new();
        rd.read_to_end(&mut rest).await?;
        check!(rest.is_empty(), "{} bytes after the echoes", rest.len());
        let echoed = echo.await??;
        check!(echoed == 300 * 64, "the server echoed {echoed} bytes");
        drop((rd, wr, l));
        // Both drivers stop (the client's polled forever): the device's
        // objects go.
        let took = counts_back_to(env, &before, Duration::from_secs(20)).await?;
        println!("resources released {took:?} after the streams were dropped");
        Ok(())
    })
}

rdma_tests::tests!(
    "stream":
    busy_poll_never_starves_the_runtime_and_stops_with_the_stream,
    reads_and_writes_cancelled_in_select_lose_no_byte,
    spinning_halves_on_two_threads_keep_every_byte,
    small_inline_writes_keep_their_place_among_queued_ones,
    buffers_read_after_a_cancelled_poll_go_back_to_the_peer,
    a_read_cancelled_while_it_polls_hands_the_cq_back,
);
