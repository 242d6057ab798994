//! The protocol engine driven without a device: [`Core::complete`] fed
//! made-up completions and header words, checked against what it must do
//! with them (segments, credits, FIN, the send side's bookkeeping, whom to
//! wake) and refuse (hostile headers, a peer beyond its credits,
//! completions no device would give).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;

use crate::WcStatus;

use super::engine::{Core, Done, Mode, Segment, State, Step, Wake};
use super::handshake::Announce;
use super::layout::{Layout, CTRL_SLOTS, WR_CTRL, WR_FIN, WR_RECV, WR_RETIRES_SHIFT, WR_SEND};
use super::wire::{Header, FIN_BIT};
use super::{StreamConfig, HEADER_LEN};

/// A side of 4 receive and 3 send buffers of 256 bytes whose peer posts
/// `peer_recv` receive buffers of `peer_size` bytes.
fn side(peer_recv: usize, peer_size: usize) -> (Core, State, Layout) {
    let own = StreamConfig::new()
        .with_recv_buffers(4)
        .unwrap()
        .with_send_buffers(3)
        .unwrap()
        .with_buffer_size(256)
        .unwrap();
    let layout = Layout::new(
        &own,
        Announce {
            recv_buffers: peer_recv,
            buffer_size: peer_size,
        },
    );
    let core = Core::new(None, &layout, false, 0);
    (core, State::new(&layout), layout)
}

fn ok(status: WcStatus, wr_id: u64, byte_len: u32) -> Done {
    Done {
        wr_id,
        status,
        byte_len,
        vendor_err: 0,
    }
}

fn recv(slot: usize, data: usize) -> Done {
    ok(
        WcStatus::Success,
        WR_RECV | slot as u64,
        (HEADER_LEN + data) as u32,
    )
}

fn header(credits: u16, fin: bool, msg: bool) -> u64 {
    Header { credits, fin, msg }.to_word()
}

/// Feeds `wc` to the core of a stream, with `word` as the header in its
/// receive buffer.
fn feed(core: &mut Core, st: &mut State, layout: &Layout, wc: Done, word: u64) -> io::Result<Step> {
    feed_mode(core, st, layout, Mode::Stream, wc, word)
}

/// Feeds `wc` with a header that returns no credit and ends nothing (a
/// plain data message, or credit-only when empty), which the core accepts.
#[track_caller]
fn plain(core: &mut Core, st: &mut State, layout: &Layout, wc: Done) -> Step {
    feed(core, st, layout, wc, header(0, false, false)).unwrap()
}

fn feed_mode(
    core: &mut Core,
    st: &mut State,
    layout: &Layout,
    mode: Mode,
    wc: Done,
    word: u64,
) -> io::Result<Step> {
    let slot = (wc.wr_id & 0xffff) as usize;
    core.complete(st, mode, layout, &wc, |s| {
        assert_eq!(s, slot, "the header is read from the completed buffer");
        Ok(word)
    })
}

fn protocol_error(r: io::Result<Step>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains(what), "{e}");
}

#[test]
fn engine_layout_takes_the_peers_ring_and_the_smaller_buffer() {
    let (core, st, layout) = side(2, 4096);
    // Own buffers are the smaller: the payload is theirs less the header.
    assert_eq!(layout.payload, 256 - HEADER_LEN);
    assert_eq!((layout.recv_slots, layout.send_slots), (4, 3));
    assert_eq!(layout.recv_at(3), 3 * 256);
    assert_eq!(layout.send_at(0), 4 * 256);
    assert_eq!(layout.ctrl_at(1), 7 * 256 + 64);
    // Credits start at the peer's ring; a credit-only message is due
    // after half of this side's.
    assert_eq!(
        (core.credits.send, core.credits.ring, core.credits.due),
        (2, 2, 2)
    );
    assert_eq!(core.posted_recvs, 4);
    assert_eq!(st.free.len(), 3);
    assert!(st.all_sent() && !st.in_flight());
    let (_, _, layout) = side(9, 64);
    assert_eq!(layout.payload, 64 - HEADER_LEN);
}

#[test]
fn engine_queues_received_data_returns_credits_and_wakes_the_reader() {
    let (mut core, mut st, layout) = side(4, 256);
    // Two of our messages took two of the peer's credits.
    core.credits.take();
    core.credits.take();
    let step = feed(
        &mut core,
        &mut st,
        &layout,
        recv(2, 100),
        header(2, false, false),
    )
    .unwrap();
    assert_eq!(
        step,
        Step {
            ended: false,
            wake: Wake::READER
        }
    );
    assert_eq!(st.rx.len(), 1);
    let Segment { slot, at, len } = st.rx[0];
    assert_eq!((slot, at, len), (2, layout.recv_at(2) + HEADER_LEN, 100));
    assert_eq!(core.credits.send, 4);
    assert_eq!(st.returned, 2);
    assert_eq!(core.posted_recvs, 3);
    // A credit-only message: no segment, its buffer goes back at once.
    let step = plain(&mut core, &mut st, &layout, recv(0, 0));
    assert!(!step.ended);
    assert_eq!(st.rx.len(), 1);
    assert_eq!(st.repost, [0]);
    // A read half gone: data is dropped, its buffer reposted.
    st.reader_gone = true;
    plain(&mut core, &mut st, &layout, recv(1, 8));
    assert_eq!(st.rx.len(), 1);
    assert_eq!(st.repost, [0, 1]);
    assert_eq!(core.posted_recvs, 1);
}

#[test]
fn engine_refuses_more_credits_than_the_peer_can_owe() {
    let (mut core, mut st, layout) = side(4, 256);
    core.credits.take();
    // One credit out, two returned.
    protocol_error(
        feed(
            &mut core,
            &mut st,
            &layout,
            recv(0, 0),
            header(2, false, false),
        ),
        "more credits returned than owed",
    );
    assert_eq!(core.credits.send, 3, "a refused return changes nothing");
    // u16::MAX credits in one header.
    let (mut core, mut st, layout) = side(2, 256);
    protocol_error(
        feed(
            &mut core,
            &mut st,
            &layout,
            recv(0, 0),
            header(u16::MAX, false, false),
        ),
        "more credits returned than owed",
    );
}

#[test]
fn engine_refuses_a_peer_that_sends_beyond_its_credits() {
    // This side posted 4 receives: a peer that sends a fifth message
    // before any credit came back overran its credits. (A device would
    // make it an RNR error at the sender; the engine refuses the
    // completion with a typed error rather than underflow its count.)
    let (mut core, mut st, layout) = side(4, 256);
    for slot in 0..4 {
        plain(&mut core, &mut st, &layout, recv(slot, 16));
    }
    assert_eq!(core.posted_recvs, 0);
    assert_eq!(st.rx.len(), 4);
    let e = feed(
        &mut core,
        &mut st,
        &layout,
        recv(0, 16),
        header(0, false, false),
    )
    .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("not posted"), "{e}");
    assert_eq!(st.rx.len(), 4, "nothing of the refused message is queued");
    // A message longer than the receive buffer (a peer that ignores the
    // size this side announced): the device reports a length error.
    let (mut core, mut st, layout) = side(4, 256);
    let wc = ok(WcStatus::LocalLengthError, WR_RECV, 0);
    protocol_error(
        feed(&mut core, &mut st, &layout, wc, 0),
        "longer than this side's receive buffers (256 bytes)",
    );
}

#[test]
fn engine_refuses_truncated_and_hostile_headers() {
    let good = header(0, false, false);
    let v1 = good & 0xff00_0000;
    let cases: &[(Done, u64, &str)] = &[
        (recv(0, 0), good, ""),
        // Shorter than the header.
        (
            ok(WcStatus::Success, WR_RECV, 0),
            good,
            "shorter than its header",
        ),
        (
            ok(WcStatus::Success, WR_RECV, 7),
            good,
            "shorter than its header",
        ),
        // Another wire format version, the 4-byte header's words.
        (recv(0, 10), 3, "wire format version"),
        (
            recv(0, 10),
            u64::from_le(u64::from(FIN_BIT | 2)),
            "wire format version",
        ),
        (recv(0, 10), u64::MAX, "wire format version"),
        // Reserved bits.
        (recv(0, 10), u64::from_le(v1.to_le() | 1 << 20), "reserved"),
        (recv(0, 10), u64::from_le(v1.to_le() | 1 << 40), "reserved"),
        // A message on a stream.
        (
            recv(0, 10),
            header(0, false, true),
            "a message on a stream connection",
        ),
    ];
    for (wc, word, what) in cases {
        let (mut core, mut st, layout) = side(4, 256);
        let r = feed(&mut core, &mut st, &layout, *wc, *word);
        if what.is_empty() {
            r.unwrap();
            continue;
        }
        protocol_error(r, what);
        assert!(st.rx.is_empty() && !st.fin_received, "{what}");
    }
    // A buffer number or length no posted receive has.
    let (mut core, mut st, layout) = side(4, 256);
    for wc in [recv(4, 0), recv(0xffff, 0), recv(0, 256 - HEADER_LEN + 1)] {
        let e = feed(&mut core, &mut st, &layout, wc, good).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
    assert!(st.rx.is_empty());
    // Stream data on a message connection; an empty message is one.
    let (mut core, mut st, layout) = side(4, 256);
    let r = feed_mode(&mut core, &mut st, &layout, Mode::Message, recv(0, 4), good);
    protocol_error(r, "stream data on a message connection");
    let (mut core, mut st, layout) = side(4, 256);
    let msg = header(0, false, true);
    feed_mode(&mut core, &mut st, &layout, Mode::Message, recv(1, 0), msg).unwrap();
    assert_eq!(st.rx.len(), 1);
    assert_eq!(st.rx[0].len, 0);
}

#[test]
fn engine_handles_fin_after_data_and_refuses_data_after_fin() {
    let (mut core, mut st, layout) = side(4, 256);
    plain(&mut core, &mut st, &layout, recv(0, 5));
    // Data and FIN in one message: the data is read before EOF.
    let step = feed(
        &mut core,
        &mut st,
        &layout,
        recv(1, 3),
        header(0, true, false),
    )
    .unwrap();
    assert_eq!(step.wake, Wake::READER);
    assert!(st.fin_received);
    assert_eq!(st.rx.iter().map(|s| s.len).collect::<Vec<_>>(), [5, 3]);
    // Credits may still come after the FIN; data, a message or a second
    // FIN may not.
    plain(&mut core, &mut st, &layout, recv(2, 0));
    for (data, fin) in [(1, false), (0, true)] {
        let (mut c, mut s) = (Core::new(None, &layout, false, 0), State::new(&layout));
        s.fin_received = true;
        protocol_error(
            feed(
                &mut c,
                &mut s,
                &layout,
                recv(0, data),
                header(0, fin, false),
            ),
            "data after FIN",
        );
    }
    // Data after our own FIN is noted, for the close's last credits.
    let (mut core, mut st, layout) = side(4, 256);
    core.fin_posted = true;
    plain(&mut core, &mut st, &layout, recv(0, 0));
    assert!(!core.data_after_fin);
    plain(&mut core, &mut st, &layout, recv(1, 9));
    assert!(core.data_after_fin);
}

#[test]
fn engine_send_completions_free_buffers_and_refuse_what_was_not_posted() {
    let (mut core, mut st, layout) = side(4, 256);
    // A data SEND from buffer 2, signalled.
    st.free.retain(|&s| s != 2);
    assert_eq!(core.signalling.post(false), Some(0));
    core.posted_sends += 1;
    assert!(st.in_flight());
    let step = feed(
        &mut core,
        &mut st,
        &layout,
        ok(WcStatus::Success, WR_SEND | 2, 0),
        0,
    )
    .unwrap();
    assert_eq!(
        step,
        Step {
            ended: false,
            wake: Wake::WRITER
        }
    );
    assert!(st.free.contains(&2) && st.free.len() == 3);
    assert_eq!((core.signalling.out, core.posted_sends), (0, 0));
    // The same completion again: nothing is posted.
    let e = feed(
        &mut core,
        &mut st,
        &layout,
        ok(WcStatus::Success, WR_SEND | 2, 0),
        0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not posted"), "{e}");
    // A signalled SEND that claims to retire more than was posted.
    core.signalling.post(false);
    core.posted_sends += 1;
    let wr = WR_SEND | 1 | 5 << WR_RETIRES_SHIFT;
    let e = feed(&mut core, &mut st, &layout, ok(WcStatus::Success, wr, 0), 0).unwrap_err();
    assert!(e.to_string().contains("not posted"), "{e}");
    // The FIN's SEND: its control buffer comes back and the writer wakes;
    // a control buffer that is free already, or out of range, is refused.
    let (mut core, mut st, layout) = side(4, 256);
    let slot = core.ctrl_free.pop().unwrap();
    core.posted_sends += 1;
    let wc = ok(WcStatus::Success, WR_FIN | slot as u64, 0);
    let step = feed(&mut core, &mut st, &layout, wc, 0).unwrap();
    assert_eq!(step.wake, Wake::WRITER);
    assert!(st.fin_done);
    assert_eq!(core.ctrl_free.len(), CTRL_SLOTS);
    for wr in [WR_FIN | slot as u64, WR_CTRL | CTRL_SLOTS as u64] {
        core.posted_sends += 1;
        let e = feed(&mut core, &mut st, &layout, ok(WcStatus::Success, wr, 0), 0).unwrap_err();
        assert!(e.to_string().contains("not posted"), "{e}");
    }
}

#[test]
fn engine_reports_a_flushed_request_as_the_end_and_a_failed_one_as_an_error() {
    let (mut core, mut st, layout) = side(4, 256);
    let wc = ok(WcStatus::WorkRequestFlushed, WR_RECV | 1, 0);
    let step = feed(&mut core, &mut st, &layout, wc, 0).unwrap();
    assert_eq!(
        step,
        Step {
            ended: true,
            wake: Wake::NONE
        }
    );
    assert_eq!(core.posted_recvs, 3);
    let wc = ok(WcStatus::RemoteAccessError, WR_RECV | 2, 0);
    let e = feed(&mut core, &mut st, &layout, wc, 0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
}

/// A waker that counts its wake-ups.
struct Count(AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn engine_wake_set_wakes_exactly_the_named_sides() {
    let (_, mut st, _) = side(4, 256);
    let (r, w) = (
        Arc::new(Count(AtomicUsize::new(0))),
        Arc::new(Count(AtomicUsize::new(0))),
    );
    let register = |st: &mut State| {
        st.reader.register(&Waker::from(Arc::clone(&r)));
        st.writer.register(&Waker::from(Arc::clone(&w)));
    };
    register(&mut st);
    assert_eq!(st.wake(Wake::NONE), 0);
    assert_eq!(st.wake(Wake::READER), 1);
    assert_eq!(
        (r.0.load(Ordering::Relaxed), w.0.load(Ordering::Relaxed)),
        (1, 0)
    );
    // Woken once: the reader's waker is gone. Only it is registered again
    // (the writer's still is: whether a second registration of the same
    // task is told apart, `Waker::will_wake`, is best effort).
    assert_eq!(st.wake(Wake::READER), 0);
    st.reader.register(&Waker::from(Arc::clone(&r)));
    assert_eq!(st.wake(Wake::READER | Wake::WRITER | Wake::ANSWERED), 3);
    assert_eq!(
        (r.0.load(Ordering::Relaxed), w.0.load(Ordering::Relaxed)),
        (2, 1)
    );
    let mut set = Wake::NONE;
    set |= Wake::WRITER;
    assert!(set.contains(Wake::WRITER) && !set.contains(Wake::READER));
}
