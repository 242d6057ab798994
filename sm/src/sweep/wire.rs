//! The sweep's SMPs on the wire: directed-route Gets and Sets, at most
//! [`Wire::limit`] outstanding at once however many tasks send them
//! (OpenSM's `max_wire_smps`: VL15 has no flow control, and a switch drops
//! what it cannot take), with the peak outstanding and the failures counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdma::mad::{Attribute, Mad, Method};
use rdma::umad::{Address, AsyncAgent};
use tokio::sync::Semaphore;

use crate::Error;

/// Per attempt.
const SMP_TIMEOUT: Duration = Duration::from_millis(200);
const SMP_RETRIES: u32 = 3;
/// Tasks of one batch of [`all`] at once (their SMPs wait for the wire's
/// permits).
const TASKS: usize = 64;

/// An SMA in memory for the tests: the answer's attribute bytes to
/// (method, attribute, modifier, path, data), `None` when lost.
#[cfg(test)]
pub(crate) type Fake =
    Box<dyn Fn(Method, u16, u32, &[u8], Option<&[u8]>) -> Option<Vec<u8>> + Send + Sync>;

/// Where the SMPs go.
enum Transport {
    Agent(Arc<AsyncAgent>),
    #[cfg(test)]
    Fake(Fake),
}

/// The SMI agent the sweep sends through, and the limit on its SMPs.
pub(crate) struct Wire {
    transport: Transport,
    limit: Limit,
    failed: AtomicUsize,
}

/// At most so many at once: a semaphore, and the count and peak of those
/// holding it.
struct Limit {
    permits: Semaphore,
    outstanding: AtomicUsize,
    peak: AtomicUsize,
}

/// Holds one place; counts it out when dropped.
struct Place<'a> {
    limit: &'a Limit,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.limit.outstanding.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limit {
    /// `n` at once; 0: no limit.
    fn new(n: usize) -> Limit {
        let n = if n == 0 {
            Semaphore::MAX_PERMITS
        } else {
            n.min(Semaphore::MAX_PERMITS)
        };
        Limit {
            permits: Semaphore::new(n),
            outstanding: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Waits for a place.
    async fn enter(&self) -> Place<'_> {
        let permit = self
            .permits
            .acquire()
            .await
            .unwrap_or_else(|_| unreachable!("the semaphore is never closed"));
        let now = self.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        Place {
            limit: self,
            _permit: permit,
        }
    }

    /// The peak since the last call (then the count of now).
    fn take_peak(&self) -> usize {
        let now = self.outstanding.load(Ordering::SeqCst);
        self.peak.swap(now, Ordering::SeqCst)
    }
}

impl Wire {
    /// `limit` SMPs outstanding at once; 0: no limit (OpenSM's
    /// `--maxsmps 0`).
    pub(crate) fn new(agent: Arc<AsyncAgent>, limit: usize) -> Wire {
        Wire {
            transport: Transport::Agent(agent),
            limit: Limit::new(limit),
            failed: AtomicUsize::new(0),
        }
    }

    /// SMPs answered by `fake`, `limit` outstanding at once.
    #[cfg(test)]
    pub(crate) fn fake(fake: Fake, limit: usize) -> Wire {
        Wire {
            transport: Transport::Fake(fake),
            limit: Limit::new(limit),
            failed: AtomicUsize::new(0),
        }
    }

    /// The peak of SMPs outstanding since the last call, and the SMPs that
    /// failed (no answer after the retries, or an error status); both
    /// start again from the count of now.
    pub(crate) fn take_counts(&self) -> (usize, usize) {
        (
            self.limit.take_peak(),
            self.failed.swap(0, Ordering::SeqCst),
        )
    }

    /// A directed-route SMP Get or Set along `path`; the answer (after a
    /// status check).
    pub(crate) async fn smp(
        &self,
        method: Method,
        attr: u16,
        attr_mod: u32,
        path: &[u8],
        data: Option<&[u8]>,
    ) -> Result<Mad, Error> {
        let tid = match &self.transport {
            Transport::Agent(a) => a.agent().next_tid(),
            #[cfg(test)]
            Transport::Fake(_) => 1,
        };
        let mut m = Mad::smp_directed(method, attr, attr_mod, tid, 0, path)?;
        if let Some(d) = data {
            let dst = m.data_mut();
            let n = d.len().min(dst.len());
            dst[..n].copy_from_slice(&d[..n]);
        }
        tracing::trace!("SMP {method:?} {attr:#06x}/{attr_mod} along {path:?}");
        let r: Result<Mad, Error> = {
            let _on = self.limit.enter().await;
            match &self.transport {
                Transport::Agent(a) => a
                    .request(&m, &Address::smi_lid(0xffff), SMP_TIMEOUT, SMP_RETRIES)
                    .await
                    .map(|r| r.mad)
                    .map_err(Into::into),
                #[cfg(test)]
                Transport::Fake(fake) => {
                    // Other SMPs go out while this one is on the wire.
                    tokio::task::yield_now().await;
                    let answer = fake(method, attr, attr_mod, path, data);
                    tokio::task::yield_now().await;
                    answer
                        .map(|b| {
                            let mut r = m.clone();
                            let dst = r.data_mut();
                            let n = b.len().min(dst.len());
                            dst[..n].copy_from_slice(&b[..n]);
                            r
                        })
                        .ok_or_else(|| "no answer".into())
                }
            }
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.failed.fetch_add(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        let st = r.status_without_direction();
        if !st.is_ok() {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(format!(
                "SMP {method:?} {attr:#06x}/{attr_mod} along {path:?}: status {st:?}"
            )
            .into());
        }
        Ok(r)
    }
}

pub(crate) async fn get<A: Attribute>(wire: &Wire, attr_mod: u32, path: &[u8]) -> Result<A, Error> {
    Ok(wire
        .smp(Method::GET, A::ID, attr_mod, path, None)
        .await?
        .attribute::<A>()?)
}

pub(crate) async fn set<A: Attribute>(
    wire: &Wire,
    attr_mod: u32,
    path: &[u8],
    value: &A,
) -> Result<A, Error> {
    let mut buf = vec![0u8; A::SIZE];
    value.encode_into(&mut buf)?;
    Ok(wire
        .smp(Method::SET, A::ID, attr_mod, path, Some(&buf))
        .await?
        .attribute::<A>()?)
}

/// Gets of attribute `A`, one per (attribute modifier, path) of `jobs`,
/// through [`all`]: the answers in the order of `jobs`.
pub(crate) async fn get_all<A: Attribute + Send + 'static>(
    wire: &Arc<Wire>,
    jobs: Vec<(u32, Vec<u8>)>,
) -> Vec<Result<A, Error>> {
    let wire = wire.clone();
    all(jobs, move |(am, path): (u32, Vec<u8>)| {
        let wire = wire.clone();
        async move { get::<A>(&wire, am, &path).await }
    })
    .await
    .into_iter()
    .map(|r| r.and_then(|x| x))
    .collect()
}

/// Sets of attribute `A`, one per (attribute modifier, path, value) of
/// `jobs`: the answers in the order of `jobs`.
pub(crate) async fn set_all<A: Attribute + Send + Sync + 'static>(
    wire: &Arc<Wire>,
    jobs: Vec<(u32, Vec<u8>, A)>,
) -> Vec<Result<A, Error>> {
    let wire = wire.clone();
    all(jobs, move |(am, path, value): (u32, Vec<u8>, A)| {
        let wire = wire.clone();
        async move { set::<A>(&wire, am, &path, &value).await }
    })
    .await
    .into_iter()
    .map(|r| r.and_then(|x| x))
    .collect()
}

/// Runs the futures that `make` makes of `items`, at most [`TASKS`] at
/// once (a new one starts as each ends; their SMPs wait for the wire), and
/// returns their results in the order of `items`.
pub(crate) async fn all<T, F, Fut>(items: Vec<T>, make: F) -> Vec<Result<Fut::Output, Error>>
where
    T: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let n = items.len();
    let mut out: Vec<Option<Result<Fut::Output, Error>>> = (0..n).map(|_| None).collect();
    let mut it = items.into_iter().enumerate();
    let mut set = tokio::task::JoinSet::new();
    // Which item each running task is, for a task that panics.
    let mut running = HashMap::new();
    loop {
        while set.len() < TASKS {
            let Some((i, item)) = it.next() else { break };
            let fut = make(item);
            let h = set.spawn(async move { (i, fut.await) });
            running.insert(h.id(), i);
        }
        match set.join_next_with_id().await {
            Some(Ok((id, (i, v)))) => {
                running.remove(&id);
                out[i] = Some(Ok(v));
            }
            Some(Err(e)) => {
                if let Some(i) = running.remove(&e.id()) {
                    out[i] = Some(Err(e.to_string().into()));
                }
            }
            None => break,
        }
    }
    out.into_iter()
        .map(|c| c.unwrap_or_else(|| Err("lost".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many tasks, each holding a place across await points: never more
    /// than the limit at once, and the limit reached; no limit (0) lets
    /// every task in at once.
    #[test]
    fn the_limit_holds_and_is_reached() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (n, tasks, want) in [(4, 50, 4), (1, 10, 1), (0, 20, 20)] {
            let limit = Arc::new(Limit::new(n));
            let seen = Arc::new(AtomicUsize::new(0));
            rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for _ in 0..tasks {
                    let limit = limit.clone();
                    let seen = seen.clone();
                    set.spawn(async move {
                        let _p = limit.enter().await;
                        let now = limit.outstanding.load(Ordering::SeqCst);
                        seen.fetch_max(now, Ordering::SeqCst);
                        for _ in 0..5 {
                            tokio::task::yield_now().await;
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            });
            assert_eq!(seen.load(Ordering::SeqCst), want, "limit {n}");
            assert_eq!(limit.take_peak(), want, "limit {n}");
            // Counted out: the next peak starts from none outstanding.
            assert_eq!(limit.take_peak(), 0, "limit {n}");
        }
    }
}
