//! Address handles dropped while a UD send queue may still name them: kept
//! by their protection domain until no send queue can.
//!
//! # Why
//!
//! Some providers find a UD request's address handle by its number when
//! they send the datagram, after `ibv_post_send` returned. rxe does
//! (rdma-core `providers/rxe`: the request carries the kernel's `ah_num`;
//! the kernel's requester looks it up with `rxe_get_av` when it builds the
//! packet, which may be after the post returned: when another thread's
//! doorbell runs it, or after `rxe_xmit_packet` said `EAGAIN`), and so do
//! hardware providers that post an AH index (bnxt_re's `avid`, irdma's
//! `ah_id`); mthca (Tavor mode) even posts the address of the address
//! vector in the handle's own memory, which the HCA reads by DMA. A handle
//! destroyed before that fails the request and errors the QP; and rxe gives
//! numbers out again (cyclically over 1..32767, from one pool of the
//! device: `xa_alloc_cyclic` in `rxe_pool.c`), so a newer handle of the
//! same PD could take the number and the datagram would go to its address.
//! mlx4, mlx5 and vmw_pvrdma copy the address vector into the request, siw
//! has no UD: there a handle is free after the post.
//!
//! # The rule
//!
//! An [`AddressHandle`](crate::AddressHandle) that was given to a UD send
//! (`SendWr::ud`, `WrBatch::send_ud`) is not destroyed at its drop if a UD
//! QP of its PD exists: it is *retired* to the PD with, for each such QP, a
//! threshold of that QP's `posted` count. It is destroyed when, for every
//! one of those QPs, the QP is destroyed or its count reached the
//! threshold; at the latest when the PD goes (every QP of the PD holds the
//! PD, so by then each was destroyed). Retired handles are looked at when a
//! handle of the PD is dropped and when a UD QP of it is destroyed, never
//! on the data path.
//!
//! # Proof
//!
//! Each UD QP counts, in [`UdSendCount`], the requests it hands to the
//! provider: `started` (by the list's length, before the provider call),
//! then `posted` (after it took them all) or `refused` (otherwise, a
//! cold path; requests taken before a refused one are counted as refused,
//! which only delays a release). Number each request by its place in
//! `started` (its *ticket*). `C` is the QP's `max_send_wr` as
//! `ibv_create_qp` wrote it back: the number of requests the send queue
//! holds, which verbs defines as the most outstanding requests; a post
//! while `C` are outstanding fails (rxe: the queue has `C + 1` slots,
//! `rxe_queue_init`, and the library refuses a post into a full ring, whose
//! consumer index the kernel advances only once it is done with a
//! request: completed or flushed).
//!
//! 1. Every request that names handle `X` was posted before `X`'s drop:
//!    `SendWr::ud` borrows `X` for as long as the request (so for its
//!    post), and `WrBatch::send_ud` for as long as the batch (so until its
//!    `complete`, which queues the requests; a compile-fail test holds
//!    this), so the post returned, and its counts were made, before the
//!    drop began.
//! 2. At the drop, for each UD QP `q` of the PD, `mark` loads `refused`
//!    (`f`), then `started` (`s`), and sets the threshold `T = s - f + C`.
//! 3. Tickets `>= s` are of posts that entered the provider after every
//!    request naming `X` had left it: had such a post entered the
//!    provider's critical section (its send-queue lock) first, its
//!    `started` increment would happen before `X`'s post, hence before the
//!    load of `s`, which would then include that ticket. So their requests
//!    sit in the queue after every request naming `X`.
//! 4. Every refusal counted in `f` has a ticket `< s` (its `started`
//!    increment happens before its `refused` increment, which the acquire
//!    load of `f` saw, which is before the load of `s`). So at most `s - f`
//!    tickets `< s` are ever counted in `posted`.
//! 5. When `posted >= T`, at least `C` posted requests have tickets `>= s`.
//!    They occupy `C` distinct places in the queue after every request
//!    naming `X`; the last of them was taken while fewer than `C` requests
//!    were outstanding, so every request at least `C` places before it,
//!    among them all those naming `X`, was done with: none will be read.
//!    (The release increment of `posted` and the acquire load at the check
//!    order that post before the destroy.)
//! 6. A QP that is destroyed reads none of its requests again; `QueuePair`
//!    drops its count only after `ibv_destroy_qp` returned (a QP whose
//!    destroy failed keeps its count forever, and its handles are never
//!    destroyed).
//! 7. A UD QP created after the drop holds no request naming `X` (1.), nor
//!    does one whose `started` is 0 at the drop (a post naming `X` counted
//!    its start before the drop); and a safe post refuses a handle of
//!    another PD than the QP's. So only the UD QPs of `X`'s PD that started
//!    a post need a threshold.
//!
//! Requests posted through [`PreparedSend`](crate::PreparedSend) or
//! [`QueuePair::post_send_raw`](crate::QueuePair::post_send_raw) are not
//! counted: a request that is not counted only takes a place in the queue,
//! which steps 3 to 5 do not rely on; it delays a release, never hastens one.
//! But step 7 does rely on `started`: so a UD QP that prepared a list
//! (`prepare_send`, which every post of a `PreparedSend` follows) is marked
//! as one that may hold requests, `started` or not; its threshold is then
//! reached only by counted posts, or at its destruction. (`post_send_raw`
//! is `unsafe`: its caller keeps the handle alive until the completion.)

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::sys;

/// The counts of one UD QP's send queue (see the module's proof).
#[derive(Debug)]
pub(crate) struct UdSendCount {
    started: AtomicU64,
    posted: AtomicU64,
    refused: AtomicU64,
    /// Whether a list was prepared on the QP (`prepare_send`): its posts
    /// are not counted, so `started` may be 0 with requests queued.
    prepared: AtomicBool,
    /// `max_send_wr` as the provider granted it.
    depth: u64,
}

impl UdSendCount {
    pub(crate) fn new(depth: u32) -> UdSendCount {
        UdSendCount {
            started: AtomicU64::new(0),
            posted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            prepared: AtomicBool::new(false),
            depth: u64::from(depth),
        }
    }

    /// Before `n` requests are handed to the provider. Relaxed: the
    /// provider's lock release, after this in program order, is what
    /// orders it before a later post (proof, step 3).
    #[inline]
    pub(crate) fn start(&self, n: usize) {
        self.started.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// After the provider took the `n` requests counted by `start`.
    #[inline]
    pub(crate) fn posted(&self, n: usize) {
        self.posted.fetch_add(n as u64, Ordering::Release);
    }

    /// After the provider refused a list of `n` requests counted by `start`
    /// (some of it may have been taken).
    #[cold]
    pub(crate) fn refused(&self, n: usize) {
        self.refused.fetch_add(n as u64, Ordering::Release);
    }

    /// A list was prepared on the QP: its posts, uncounted, may leave
    /// requests queued with `started` at 0 (see the module's docs). Release:
    /// the prepared posts, and the drop of a handle they name, come after.
    pub(crate) fn prepared(&self) {
        self.prepared.store(true, Ordering::Release);
    }

    /// The `posted` count after which no request posted so far is read
    /// (proof, step 2); `None` when the QP never started a post nor
    /// prepared a list, so holds no request (a receive-only QP never keeps
    /// a handle).
    fn mark(&self) -> Option<u64> {
        let f = self.refused.load(Ordering::Acquire);
        let s = self.started.load(Ordering::Acquire);
        let prepared = self.prepared.load(Ordering::Acquire);
        (s != 0 || prepared).then(|| (s - f).saturating_add(self.depth))
    }

    /// Whether the count passed a `mark`.
    fn passed(&self, threshold: u64) -> bool {
        self.posted.load(Ordering::Acquire) >= threshold
    }
}

/// A dropped address handle and what it waits for.
struct Retired {
    ah: NonNull<sys::ibv_ah>,
    waits: Vec<(Weak<UdSendCount>, u64)>,
}

impl Retired {
    /// Forgets the waits that are over; true when none is left.
    fn sweep(&mut self) -> bool {
        self.waits
            .retain(|(qp, t)| qp.upgrade().is_some_and(|c| !c.passed(*t)));
        self.waits.is_empty()
    }
}

/// The UD QPs of a PD and its retired address handles.
#[derive(Default)]
pub(crate) struct UdRegistry {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    qps: Vec<Weak<UdSendCount>>,
    retired: Vec<Retired>,
}

// SAFETY: the raw handles are only destroyed (once, under the lock) and
// libibverbs allows that from any thread.
unsafe impl Send for Registry {}

impl UdRegistry {
    /// A new UD QP's counts, registered.
    pub(crate) fn add_qp(&self, depth: u32) -> Arc<UdSendCount> {
        let count = Arc::new(UdSendCount::new(depth));
        let mut r = self.lock();
        r.qps.retain(|q| q.strong_count() > 0);
        r.qps.push(Arc::downgrade(&count));
        count
    }

    /// Destroys `ah` now if no UD QP of the PD exists, else retires it;
    /// then destroys the retired handles whose waits are over.
    ///
    /// # Safety
    /// `ah` is a live handle of this registry's PD that nothing else
    /// destroys, and every post that named it returned.
    pub(crate) unsafe fn retire(&self, ah: NonNull<sys::ibv_ah>) {
        let mut r = self.lock();
        let waits: Vec<_> = r
            .qps
            .iter()
            .filter_map(|q| {
                let c = q.upgrade()?;
                Some((Arc::downgrade(&c), c.mark()?))
            })
            .collect();
        let mut done = Vec::new();
        if waits.is_empty() {
            done.push(ah);
        } else {
            r.retired.push(Retired { ah, waits });
        }
        sweep(&mut r, &mut done);
        drop(r);
        // SAFETY: per this function's contract and `sweep`'s.
        unsafe { destroy(done) };
    }

    /// Destroys the retired handles whose waits are over (after a UD QP of
    /// the PD was destroyed).
    pub(crate) fn sweep(&self) {
        let mut done = Vec::new();
        sweep(&mut self.lock(), &mut done);
        // SAFETY: `sweep` returns handles no request can name any more.
        unsafe { destroy(done) };
    }

    /// The number of retired handles not yet destroyed.
    pub(crate) fn retired(&self) -> usize {
        self.lock().retired.len()
    }

    /// At the PD's end: destroys every retired handle whose waits are
    /// over, which is all of them unless a QP could not be destroyed
    /// (those stay, as does the PD then).
    pub(crate) fn close(&mut self) {
        let r = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut done = Vec::new();
        sweep(r, &mut done);
        // SAFETY: as in `sweep`.
        unsafe { destroy(done) };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // The registry stays consistent across a panic (none is expected):
        // each step leaves it whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Moves the retired handles whose waits are over into `done`.
fn sweep(r: &mut Registry, done: &mut Vec<NonNull<sys::ibv_ah>>) {
    r.qps.retain(|q| q.strong_count() > 0);
    r.retired.retain_mut(|x| {
        if x.sweep() {
            done.push(x.ah);
            false
        } else {
            true
        }
    });
}

/// # Safety
/// Live handles, each destroyed once, that no queued request names.
unsafe fn destroy(done: Vec<NonNull<sys::ibv_ah>>) {
    for ah in done {
        // SAFETY: per the contract. A failure leaves the handle to the
        // context's close; it cannot be handled here.
        unsafe { sys::ibv_destroy_ah(ah.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A post of `n` requests on `c`, taken or refused.
    fn post(c: &UdSendCount, n: usize, taken: bool) {
        c.start(n);
        if taken {
            c.posted(n);
        } else {
            c.refused(n);
        }
    }

    #[test]
    fn a_mark_is_passed_after_depth_more_posted_requests() {
        let c = UdSendCount::new(4);
        post(&c, 3, true);
        let t = c.mark().unwrap();
        for _ in 0..3 {
            post(&c, 1, true);
            assert!(!c.passed(t));
        }
        post(&c, 1, true);
        assert!(c.passed(t));
    }

    #[test]
    fn refused_requests_never_count_toward_a_mark() {
        let c = UdSendCount::new(2);
        post(&c, 5, false);
        let t = c.mark().unwrap();
        post(&c, 8, false);
        assert!(!c.passed(t));
        post(&c, 1, true);
        assert!(!c.passed(t));
        post(&c, 1, true);
        assert!(c.passed(t));
    }

    #[test]
    fn requests_in_flight_at_the_mark_do_not_count_toward_it() {
        // A post started before the mark and counted after it: its
        // requests may sit before the dropped handle's in the queue.
        let c = UdSendCount::new(2);
        c.start(3);
        let t = c.mark().unwrap();
        c.posted(3);
        assert!(!c.passed(t));
        post(&c, 2, true);
        assert!(c.passed(t));
    }

    #[test]
    fn a_refusal_in_flight_at_the_mark_does_not_lower_it() {
        let c = UdSendCount::new(1);
        c.start(4);
        let t = c.mark().unwrap();
        c.refused(4);
        post(&c, 1, true);
        // 4 + 1 started, 4 refused, 1 posted: posted needs 4 - 0 + 1.
        assert!(!c.passed(t));
        post(&c, 4, true);
        assert!(c.passed(t));
    }

    #[test]
    fn a_qp_that_never_posted_holds_no_handle() {
        let c = UdSendCount::new(4);
        assert_eq!(c.mark(), None);
        post(&c, 1, false);
        assert_eq!(c.mark(), Some(4));
    }

    #[test]
    fn a_qp_that_prepared_a_list_may_hold_a_handle_without_a_counted_post() {
        // Posts of a prepared list are not counted: such a QP is marked at
        // depth, passed only by as many counted posts.
        let c = UdSendCount::new(3);
        c.prepared();
        let t = c.mark().expect("a QP that prepared a list is marked");
        assert_eq!(t, 3);
        post(&c, 2, true);
        assert!(!c.passed(t));
        post(&c, 1, true);
        assert!(c.passed(t));
    }

    #[test]
    fn a_retired_handle_waits_for_every_qp_and_forgets_destroyed_ones() {
        let a = Arc::new(UdSendCount::new(1));
        let b = Arc::new(UdSendCount::new(1));
        post(&a, 1, true);
        post(&b, 1, true);
        let mut r = Retired {
            ah: NonNull::dangling(),
            waits: vec![
                (Arc::downgrade(&a), a.mark().unwrap()),
                (Arc::downgrade(&b), b.mark().unwrap()),
            ],
        };
        assert!(!r.sweep());
        post(&a, 1, true);
        assert!(!r.sweep());
        assert_eq!(r.waits.len(), 1);
        drop(b);
        assert!(r.sweep());
    }

    #[test]
    fn counts_from_many_threads_add_up() {
        let c = Arc::new(UdSendCount::new(8));
        std::thread::scope(|s| {
            for k in 0..4 {
                let c = &c;
                s.spawn(move || {
                    for i in 0..1000 {
                        post(c, 1 + i % 3, (i + k) % 5 != 0);
                    }
                });
            }
        });
        let started = c.started.load(Ordering::Relaxed);
        let done = c.posted.load(Ordering::Relaxed) + c.refused.load(Ordering::Relaxed);
        assert_eq!(started, done);
        let t = c.mark().unwrap();
        assert_eq!(t, c.posted.load(Ordering::Relaxed) + 8);
    }
}
