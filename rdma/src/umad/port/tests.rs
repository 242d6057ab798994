//! Unit tests of the port and its receive queue, over a socket pair that
//! stands in for a umad fd.

use super::recv::Pending;
use super::*;
use crate::mad::{Mad, MadHeader, Method};
use crate::os::lock;
use crate::umad::addr::Address;
use crate::umad::wire::send_header;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Instant;

const CLIENT: u32 = 1;
const SERVER: u32 = 2;

/// A PortInner over one end of a SOCK_SEQPACKET socket pair (one read,
/// one message, as on a umad fd), and the other end to write MADs into.
pub(crate) fn fake_port() -> (Arc<PortInner>, OwnedFd) {
    fake_port_blocking(false)
}

/// A fake port whose fd stays blocking when `blocking`, as umad2sim's
/// fds do.
fn fake_port_blocking(blocking: bool) -> (Arc<PortInner>, OwnedFd) {
    let mut sv = [0; 2];
    // SAFETY: `sv` has room for the two fds.
    let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, sv.as_mut_ptr()) };
    assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just created and are owned once: sv[0] by
    // the PortInner (closed in its Drop), sv[1] by the OwnedFd.
    unsafe {
        if !blocking {
            let fl = libc::fcntl(sv[0], libc::F_GETFL);
            libc::fcntl(sv[0], libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        (
            Arc::new(PortInner::new(sv[0], "fake0".into(), 1, false)),
            OwnedFd::from_raw_fd(sv[1]),
        )
    }
}

/// Writes what the kernel would hand `agent`: a MAD of `method` with
/// `tid`, with `seq` in its first data byte.
pub(crate) fn deliver(w: &OwnedFd, agent: u32, method: Method, tid: u64, seq: u8) {
    let mut mad = Mad::new(&MadHeader::request(0x32, 1, method, tid, 0));
    mad.data_mut()[0] = seq;
    let mut b = send_header(agent, 0, 0, Mad::SIZE, &Address::gsi_lid(1)).to_vec();
    b.extend_from_slice(mad.as_bytes());
    use std::os::fd::AsRawFd;
    // SAFETY: `b` is readable for its length; the fd is open.
    let n = unsafe { libc::write(w.as_raw_fd(), b.as_ptr().cast(), b.len()) };
    assert_eq!(n, b.len() as isize, "{}", std::io::Error::last_os_error());
}

/// Writes what the kernel would hand `agent` as a MAD that does not
/// decode (base version 2).
fn deliver_malformed(w: &OwnedFd, agent: u32) {
    let mut mad = Mad::new(&MadHeader::request(0x32, 1, Method::GET, 1, 0))
        .as_bytes()
        .to_vec();
    mad[0] = 2;
    let mut b = send_header(agent, 0, 0, mad.len(), &Address::gsi_lid(1)).to_vec();
    b.extend_from_slice(&mad);
    use std::os::fd::AsRawFd;
    // SAFETY: `b` is readable for its length; the fd is open.
    let n = unsafe { libc::write(w.as_raw_fd(), b.as_ptr().cast(), b.len()) };
    assert_eq!(n, b.len() as isize, "{}", std::io::Error::last_os_error());
}

fn for_agent(agent: u32) -> impl Fn(&Received) -> bool {
    move |r| r.agent_id == agent
}

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> i64 {
    // SAFETY: rusage is plain data, written by getrusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is writable; RUSAGE_THREAD is the calling thread.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
    u.ru_nvcsw
}

pub(crate) fn received(agent: u32, status: i32, method: Method, tid: u64) -> Received {
    Received {
        agent_id: agent,
        status,
        addr: Address::gsi_lid(1),
        len: Mad::SIZE,
        mad: Mad::new(&MadHeader::request(0x32, 1, method, tid, 0)),
    }
}

#[test]
fn pending_drops_the_newest_unsolicited_mad_past_its_capacity() {
    let mut q = Pending::new(2);
    assert!(q.push(received(SERVER, 0, Method::GET, 1), false));
    assert!(q.push(received(SERVER, 0, Method::GET, 2), false));
    assert!(!q.push(received(SERVER, 0, Method::GET, 3), false));
    // A response to a tracked request is kept past the bound.
    assert!(q.push(received(CLIENT, 0, Method::GET_RESP, 9), true));
    assert_eq!(q.len(), 3);
    assert_eq!(q.take(for_agent(SERVER)).map(|r| r.tid()), Some(1));
    assert!(q.push(received(SERVER, 0, Method::GET, 4), false));
    assert!(!q.push(received(SERVER, 0, Method::GET, 5), false));
    q.purge(SERVER);
    assert_eq!(q.len(), 1);
    assert!(q.push(received(SERVER, 0, Method::GET, 6), false));
    assert!(q.push(received(SERVER, 0, Method::GET, 7), false));
    assert_eq!(q.take(for_agent(CLIENT)).map(|r| r.tid()), Some(9));
    let mut none = Pending::new(0);
    assert!(!none.push(received(SERVER, 0, Method::GET, 1), false));
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_flood_of_unsolicited_mads_is_bounded_and_the_response_still_arrives() {
    let (port, w) = fake_port();
    lock(&port.recv).pending.capacity = 4;
    for seq in 0..20 {
        deliver(&w, SERVER, Method::GET, 0x100 + u64::from(seq), seq);
    }
    assert!(port.add_outstanding(CLIENT, 0x42));
    deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
    let r = port
        .recv_matching(Some(Duration::from_secs(5)), for_agent(CLIENT))
        .unwrap();
    assert_eq!((r.agent_id, r.tid()), (CLIENT, 0x42));
    assert_eq!(lock(&port.recv).pending.len(), 4);
    assert_eq!(port.dropped.load(Ordering::Relaxed), 16);
    // The oldest were kept, in order.
    for seq in 0..4 {
        let r = port
            .recv_matching(Some(Duration::ZERO), for_agent(SERVER))
            .unwrap();
        assert_eq!(r.mad.data()[0], seq);
    }
    assert!(matches!(
        port.recv_matching(Some(Duration::ZERO), for_agent(SERVER)),
        Err(Error::RecvTimeout(_))
    ));
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn responses_of_tracked_requests_are_kept_when_the_queue_is_full() {
    let (port, w) = fake_port();
    lock(&port.recv).pending.capacity = 1;
    assert!(port.add_outstanding(CLIENT, 7));
    deliver(&w, SERVER, Method::GET, 1, 0);
    deliver(&w, SERVER, Method::GET, 2, 1);
    deliver(&w, CLIENT, Method::GET_RESP, 7, 0);
    deliver(&w, SERVER, Method::GET, 3, 2);
    // The server's receive reads the client's response and queues it.
    let mut seen = Vec::new();
    while let Ok(r) = port.recv_matching(Some(Duration::from_millis(50)), for_agent(SERVER)) {
        seen.push(r.tid());
    }
    assert_eq!(seen, [1, 2, 3]);
    let r = port
        .recv_matching(Some(Duration::ZERO), for_agent(CLIENT))
        .unwrap();
    assert_eq!(r.tid(), 7);
    // Reading the response settled the request.
    assert!(port.add_outstanding(CLIENT, 7));
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair, poll(2) and getrusage(2)
fn recv_sleeps_in_poll_until_its_timeout() {
    let (port, _w) = fake_port();
    let before = voluntary_switches();
    let start = Instant::now();
    let r = port.recv_matching(Some(Duration::from_millis(600)), |_| true);
    let took = start.elapsed();
    let switches = voluntary_switches() - before;
    assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(3),
        "returned after {took:?}"
    );
    // Waking every 20 ms would be some 30 switches.
    assert!(switches <= 5, "{switches} wake-ups while waiting");
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair, poll(2) and getrusage(2)
fn a_mad_read_by_another_thread_reaches_its_receiver_at_once() {
    let (port, w) = fake_port();
    std::thread::scope(|s| {
        let client = s.spawn(|| {
            let r = port.recv_matching(Some(Duration::from_secs(10)), for_agent(CLIENT));
            (r.map(|r| r.tid()), Instant::now())
        });
        let server = s.spawn(|| {
            let before = voluntary_switches();
            let r = port.recv_matching(Some(Duration::from_secs(10)), for_agent(SERVER));
            (
                r.map(|r| r.tid()),
                Instant::now(),
                voluntary_switches() - before,
            )
        });
        std::thread::sleep(Duration::from_millis(700));
        let sent = Instant::now();
        deliver(&w, SERVER, Method::GET, 2, 0);
        let (got, at, switches) = server.join().unwrap();
        assert_eq!(got.unwrap(), 2);
        assert!(at - sent < Duration::from_secs(2), "after {:?}", at - sent);
        // Whichever thread read the fd, the server slept while waiting.
        assert!(switches <= 8, "{switches} wake-ups while waiting");
        std::thread::sleep(Duration::from_millis(100));
        let sent = Instant::now();
        deliver(&w, CLIENT, Method::GET, 1, 0);
        let (got, at) = client.join().unwrap();
        assert_eq!(got.unwrap(), 1);
        assert!(at - sent < Duration::from_secs(2), "after {:?}", at - sent);
    });
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_waiting_receiver_times_out_on_its_own_deadline() {
    let (port, w) = fake_port();
    std::thread::scope(|s| {
        let reader =
            s.spawn(|| port.recv_matching(Some(Duration::from_secs(10)), for_agent(CLIENT)));
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let r = port.recv_matching(Some(Duration::from_millis(300)), for_agent(SERVER));
        let took = start.elapsed();
        assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "after {took:?}"
        );
        deliver(&w, CLIENT, Method::GET, 1, 0);
        assert_eq!(reader.join().unwrap().unwrap().tid(), 1);
    });
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_timeout_too_long_for_an_instant_waits_for_the_mad() {
    let (port, w) = fake_port();
    deliver(&w, CLIENT, Method::GET, 5, 0);
    let r = port.recv_matching(Some(Duration::MAX), for_agent(CLIENT));
    assert_eq!(r.unwrap().tid(), 5);
}

#[test]
fn negative_returns_other_than_minus_one_are_the_errno() {
    assert_eq!(failed_errno(-(libc::EWOULDBLOCK as isize)), libc::EAGAIN);
    assert_eq!(failed_errno(-(libc::EINTR as isize)), libc::EINTR);
    assert_eq!(failed_errno(isize::MIN), libc::EIO);
    // SAFETY: writing errno of the calling thread.
    unsafe { *libc::__errno_location() = libc::ENOSPC };
    assert_eq!(failed_errno(-1), libc::ENOSPC);
}

#[test]
fn only_umad2sim_fds_may_stay_blocking() {
    assert!(umad2sim_fcntl_failure(1024, libc::EBADF));
    assert!(!umad2sim_fcntl_failure(7, libc::EBADF));
    assert!(!umad2sim_fcntl_failure(1024, libc::EINVAL));
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn try_recv_leaves_the_fd_to_the_thread_holding_the_reader_role() {
    // Blocking, as under umad2sim: a MAD the reader's poll announced
    // must still be there for its read.
    let (port, w) = fake_port_blocking(true);
    deliver(&w, SERVER, Method::GET, 1, 0);
    lock(&port.recv).reading = true;
    assert!(port.try_recv().unwrap().is_none());
    // The MAD is still in the fd for the reader.
    assert_eq!(
        port.read_one(Some(Duration::ZERO))
            .ok()
            .map(|r| matches!(r, Read::Mad(..))),
        Some(true)
    );
    deliver(&w, SERVER, Method::GET, 2, 0);
    lock(&port.recv).reading = false;
    // With no reader, try_recv takes the role for its read, and gives it
    // back.
    assert_eq!(port.try_recv().unwrap().map(|r| r.tid()), Some(2));
    assert!(!lock(&port.recv).reading);
    assert!(port.try_recv().unwrap().is_none());
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_receive_returns_at_its_deadline_while_mads_for_others_keep_coming() {
    let (port, w) = fake_port();
    // More MADs for the server than the client's receive can read
    // before its deadline (5 ms each): the fd is never empty.
    for seq in 0..60 {
        deliver(&w, SERVER, Method::GET, 0x100 + u64::from(seq), seq);
    }
    deliver(&w, CLIENT, Method::GET, 0x42, 0);
    let start = Instant::now();
    let r = port.recv_matching(Some(Duration::from_millis(50)), |r| {
        std::thread::sleep(Duration::from_millis(5));
        r.agent_id == CLIENT
    });
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::RecvTimeout(_))), "{r:?}");
    assert!(took < Duration::from_millis(250), "returned after {took:?}");
    // What it read is queued, and the rest is still there to read.
    assert!(lock(&port.recv).pending.len() > 0);
    let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(CLIENT));
    assert_eq!(r.unwrap().tid(), 0x42);
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_timed_out_request_forgets_its_late_response() {
    let (port, w) = fake_port();
    lock(&port.recv).pending.capacity = 0;
    assert!(port.add_outstanding(CLIENT, 0x42));
    let r = port.await_response(CLIENT, 0x42, Duration::from_millis(50));
    assert!(matches!(r, Err(Error::Timeout { tid: 0x42 })), "{r:?}");
    // The request is forgotten: its TID may be tracked again...
    assert!(port.add_outstanding(CLIENT, 0x42));
    port.remove_outstanding(CLIENT, 0x42);
    // ...and its late response, read by another receive, is unsolicited:
    // under the bound (0 here), not kept for no one.
    deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
    deliver(&w, SERVER, Method::GET, 1, 0);
    let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(SERVER));
    assert_eq!(r.unwrap().tid(), 1);
    assert_eq!(lock(&port.recv).pending.len(), 0);
    assert_eq!(port.dropped.load(Ordering::Relaxed), 1);
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn abandoning_a_request_drops_its_response_already_queued() {
    let (port, w) = fake_port();
    assert!(port.add_outstanding(CLIENT, 0x42));
    deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
    deliver(&w, CLIENT, Method::GET, 0x42, 1);
    deliver(&w, SERVER, Method::GET, 1, 0);
    // Another receive queues the response (solicited) and a request.
    let r = port.recv_matching(Some(Duration::from_secs(5)), for_agent(SERVER));
    assert_eq!(r.unwrap().tid(), 1);
    assert_eq!(lock(&port.recv).pending.len(), 2);
    // The requester gave up just as it was queued.
    port.abandon(CLIENT, 0x42);
    let mut q = lock(&port.recv);
    assert_eq!(q.pending.len(), 1);
    let left = q.pending.take(|_| true).unwrap();
    assert_eq!((left.mad.method(), left.mad.data()[0]), (Method::GET, 1));
    assert_eq!(q.pending.unsolicited, 0);
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn a_malformed_mad_is_dropped_and_counted_not_failed_on_its_reader() {
    let (port, w) = fake_port();
    assert!(port.add_outstanding(CLIENT, 0x42));
    deliver_malformed(&w, SERVER);
    deliver(&w, CLIENT, Method::GET_RESP, 0x42, 0);
    let r = port.await_response(CLIENT, 0x42, Duration::from_secs(5));
    assert_eq!(r.unwrap().tid(), 0x42);
    assert_eq!(port.malformed.load(Ordering::Relaxed), 1);
    // The response settled the request.
    assert!(port.add_outstanding(CLIENT, 0x42));
    // try_recv skips one too.
    deliver_malformed(&w, CLIENT);
    deliver(&w, SERVER, Method::GET, 7, 0);
    assert_eq!(port.try_recv().unwrap().map(|r| r.tid()), Some(7));
    assert_eq!(port.malformed.load(Ordering::Relaxed), 2);
    let view = PortView { inner: port };
    assert_eq!(view.malformed_mads(), 2);
    assert_eq!(view.dropped_mads(), 0);
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and poll(2)
fn an_fd_at_its_end_is_an_error_not_a_stream_of_malformed_mads() {
    let (port, w) = fake_port();
    drop(w);
    let r = port.try_recv();
    assert_eq!(r.as_ref().err().map(Error::errno), Some(libc::EIO), "{r:?}");
    assert_eq!(port.malformed.load(Ordering::Relaxed), 0);
    assert!(!lock(&port.recv).reading);
}

#[test]
fn enospc_with_a_bogus_length_grows_the_buffer_geometrically() {
    let start = HDR_SIZE + Mad::SIZE;
    // A sane length is taken as is.
    assert_eq!(grown_read_len(start, 4096), Some(HDR_SIZE + 4096));
    // A length that would not grow the buffer, or is past the cap,
    // doubles it: the cap is reached in a few reads, then refused.
    for need in [0, Mad::SIZE, usize::MAX, MAX_READ] {
        let (mut len, mut reads) = (start, 0);
        while let Some(next) = grown_read_len(len, need) {
            assert!(next > len && next <= MAX_READ);
            len = next;
            reads += 1;
        }
        assert_eq!(len, MAX_READ);
        assert!(reads <= 20, "{reads} reads to reach the cap with {need}");
    }
}
