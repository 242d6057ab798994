//! Unit tests of reading a MAD past the largest read, over a stand-in
//! for the kernel's side of the read.

use super::*;
use crate::mad::{MadHeader, Method};
use crate::umad::addr::Address;
use crate::umad::port::tests::fake_port;
use crate::umad::wire::send_header;
use std::collections::VecDeque;

const CLIENT: u32 = 1;
const SERVER: u32 = 2;
/// An RMPP transfer's length past the largest read.
const HUGE: usize = 100 << 20;

/// A stand-in for ib_umad's side of a read: a queue of MADs of any
/// length, of which it holds the umad header and the first segment,
/// handed over as the kernel does (ENOSPC with the header and first
/// segment written, the MAD kept at the head, until a read's buffer
/// takes the whole MAD).
#[derive(Default)]
struct Kernel {
    /// The header and first segment of each MAD, and its whole read's
    /// length.
    queue: VecDeque<(Vec<u8>, usize)>,
    /// The buffer length of every read.
    reads: Vec<usize>,
}

impl Kernel {
    fn deliver(&mut self, agent: u32, method: Method, tid: u64, mad_len: usize) {
        let total = HDR_SIZE + mad_len;
        let mut b = send_header(agent, 0, 0, total, &Address::gsi_lid(1)).to_vec();
        b.extend_from_slice(Mad::new(&MadHeader::request(0x32, 1, method, tid, 0)).as_bytes());
        self.queue.push_back((b, total));
    }

    fn read(&mut self, buf: &mut [u8]) -> isize {
        self.reads.push(buf.len());
        let Some((first, total)) = self.queue.front() else {
            return -(libc::EAGAIN as isize);
        };
        if buf.len() < first.len() {
            return -(libc::EINVAL as isize);
        }
        buf[..first.len()].copy_from_slice(first);
        if buf.len() < *total {
            return -(libc::ENOSPC as isize);
        }
        // The rest of the transfer would be copied here.
        let n = *total as isize;
        self.queue.pop_front();
        n
    }
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and mmap(2)
fn a_mad_past_the_largest_read_is_dropped_and_the_next_one_served() {
    let (port, _w) = fake_port();
    let mut k = Kernel::default();
    k.deliver(SERVER, Method::GET, 1, HUGE);
    k.deliver(SERVER, Method::GET, 2, Mad::SIZE);
    let r = port.try_recv_with(|_| port.read_mad(false, |b| k.read(b)));
    assert_eq!(r.unwrap().map(|r| r.tid()), Some(2));
    // One read learnt the length, one into the scratch mapping dequeued
    // it (no heap buffer on the way), one read the next MAD.
    let small = HDR_SIZE + Mad::SIZE;
    assert_eq!(k.reads, [small, HDR_SIZE + HUGE, small]);
    let view = PortView {
        inner: port.clone(),
    };
    assert_eq!(view.too_long_mads(), 1);
    assert_eq!((view.malformed_mads(), view.dropped_mads()), (0, 0));
    // The queue is served: empty now, not wedged.
    let r = port.try_recv_with(|_| port.read_mad(false, |b| k.read(b)));
    assert!(r.unwrap().is_none());
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and mmap(2)
fn a_receive_waiting_for_a_mad_past_the_largest_read_gets_mad_too_long() {
    let (port, _w) = fake_port();
    let mut k = Kernel::default();
    assert!(port.add_outstanding(CLIENT, 0x42));
    k.deliver(CLIENT, Method::GET_RESP, 0x42, HUGE);
    k.deliver(CLIENT, Method::GET_RESP, 0x43, Mad::SIZE);
    let response = |tid: u32| move |r: &Received| r.agent_id == CLIENT && r.tid() as u32 == tid;
    let wait = Some(Duration::from_secs(5));
    let r = port.recv_matching_with(wait, response(0x42), |_| {
        port.read_mad(false, |b| k.read(b))
    });
    assert!(
        matches!(r, Err(Error::MadTooLong { len: HUGE, .. })),
        "{r:?}"
    );
    // Reading it settled the request.
    assert!(port.add_outstanding(CLIENT, 0x42));
    let r = port.recv_matching_with(wait, response(0x43), |_| {
        port.read_mad(false, |b| k.read(b))
    });
    assert_eq!(r.unwrap().tid(), 0x43);
    // One for another receive is dropped, not queued for it.
    k.deliver(CLIENT, Method::GET, 7, HUGE);
    k.deliver(SERVER, Method::GET, 8, Mad::SIZE);
    let r = port.recv_matching_with(
        wait,
        |r| r.agent_id == SERVER,
        |_| port.read_mad(false, |b| k.read(b)),
    );
    assert_eq!(r.unwrap().tid(), 8);
    assert_eq!(lock(&port.recv).pending.len(), 0);
    assert_eq!(port.too_long.load(Ordering::Relaxed), 2);
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and mmap(2)
fn a_too_long_response_read_by_another_receive_reaches_its_waiter() {
    let (port, _w) = fake_port();
    let mut k = Kernel::default();
    assert!(port.add_outstanding(CLIENT, 0x42));
    // The response the client waits for, too long to keep, an unsolicited
    // one as long, then a request the server waits for: the server's
    // receive reads all three.
    k.deliver(CLIENT, Method::GET_RESP, 0x42, HUGE);
    k.deliver(CLIENT, Method::GET, 0x50, HUGE);
    k.deliver(SERVER, Method::GET, 8, Mad::SIZE);
    let wait = Some(Duration::from_secs(5));
    let r = port.recv_matching_with(
        wait,
        |r| r.agent_id == SERVER,
        |_| port.read_mad(false, |b| k.read(b)),
    );
    assert_eq!(r.unwrap().tid(), 8);
    assert_eq!(port.too_long.load(Ordering::Relaxed), 2);
    // The client's wait gets the error from the queue at once, with
    // nothing left to read; the unsolicited one was kept for no one.
    let mut reads = 0;
    let r = port.await_response_with(CLIENT, 0x42, Duration::from_secs(5), |_| {
        reads += 1;
        Ok(Read::Nothing)
    });
    assert!(
        matches!(r, Err(Error::MadTooLong { len: HUGE, .. })),
        "{r:?}"
    );
    assert_eq!(reads, 0);
    let st = lock(&port.recv);
    assert_eq!((st.pending.len(), st.pending.too_long.len()), (0, 0));
}

#[test]
#[cfg_attr(miri, ignore)] // a socket pair and mmap(2)
fn a_too_long_response_whose_waiter_gave_up_is_not_kept() {
    let (port, _w) = fake_port();
    let mut k = Kernel::default();
    // Given up before its response came: the response is unsolicited.
    assert!(port.add_outstanding(CLIENT, 0x42));
    port.abandon(CLIENT, 0x42);
    k.deliver(CLIENT, Method::GET_RESP, 0x42, HUGE);
    // Given up after another receive read its response: the kept headers
    // go with it.
    assert!(port.add_outstanding(CLIENT, 0x43));
    k.deliver(CLIENT, Method::GET_RESP, 0x43, HUGE);
    k.deliver(SERVER, Method::GET, 8, Mad::SIZE);
    let r = port.recv_matching_with(
        Some(Duration::from_secs(5)),
        |r| r.agent_id == SERVER,
        |_| port.read_mad(false, |b| k.read(b)),
    );
    assert_eq!(r.unwrap().tid(), 8);
    assert_eq!(lock(&port.recv).pending.too_long.len(), 1);
    port.abandon(CLIENT, 0x43);
    assert_eq!(lock(&port.recv).pending.too_long.len(), 0);
}

#[test]
fn enospc_past_the_largest_read_discards_up_to_what_ib_umad_can_report() {
    let small = HDR_SIZE + Mad::SIZE;
    assert!(matches!(
        retry_after_enospc(small, HDR_SIZE + 4096),
        Retry::Grow(n) if (HDR_SIZE + 4096..=MAX_READ).contains(&n)
    ));
    assert_eq!(retry_after_enospc(small, MAX_READ), Retry::Grow(MAX_READ));
    assert_eq!(
        retry_after_enospc(small, MAX_READ + 1),
        Retry::Discard(MAX_READ + 1)
    );
    assert_eq!(
        retry_after_enospc(small, DISCARD_MAX),
        Retry::Discard(DISCARD_MAX)
    );
    // Past what ib_umad's int length can be: not a umad read's.
    assert_eq!(retry_after_enospc(small, DISCARD_MAX + 1), Retry::Refuse);
    assert_eq!(retry_after_enospc(small, u32::MAX as usize), Retry::Refuse);
    // A length that would not grow a buffer at the bound.
    assert_eq!(retry_after_enospc(MAX_READ, 100), Retry::Refuse);
}

#[test]
#[cfg_attr(miri, ignore)] // mmap(2)
fn a_scratch_mapping_is_zeroed_and_writable_at_both_ends() {
    let mut s = Scratch::new(HUGE).unwrap();
    let b = s.as_mut_slice();
    assert_eq!((b.len(), b[0], b[HUGE - 1]), (HUGE, 0, 0));
    b[0] = 1;
    b[HUGE - 1] = 1;
}
