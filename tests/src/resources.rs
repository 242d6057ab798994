//! The kernel's objects on a device, counted from the `rdma` tool's
//! listing, leaving out those of other live processes (the other
//! provider's suite runs at the same time), and the CM ids it lists.

use std::error::Error;
use std::io::Write;

use crate::Failure;

/// The kernel's resource counts of `device`: pd, cq, qp, cm_id, mr, ctx,
/// srq (the kinds of `rdma resource show`), less the objects of other live
/// processes that this one did not start. Used to prove that objects are
/// released.
///
/// The device tests of two providers may run at the same time (ci/test.sh),
/// and the other provider's process reaches this device too: a wildcard
/// listener puts a listening CM id on every device, and opening every
/// device (`ibv_devinfo`, enumeration) puts a context on it. Each object is
/// listed with the thread that made it (`rdma resource show KIND`); an
/// object counts unless that thread is alive and belongs to a process that
/// is neither this one nor one it started (a child's objects count: a test
/// checks that they go when the child dies). An object of a thread that has
/// exited counts, whoever made it (nothing tells any more); the kernel's own
/// objects (no thread) count.
pub fn resource_counts(
    device: &str,
) -> Result<std::collections::BTreeMap<String, u64>, Box<dyn Error>> {
    use std::collections::HashMap;
    // One `rdma` run: the summary (its line for the device gives the kinds),
    // then the objects of each kind.
    let mut batch = String::from("resource show\n");
    for (kind, _) in RESOURCE_KINDS {
        batch += &format!("resource show {kind}\n");
    }
    // A summary that disagrees with the listing (objects gone between the
    // two dumps) is read again, twice at most.
    let mut attempt = 0;
    loop {
        let out = run_rdma(&["-b", "-"], Some(&batch))?;
        if !out.status.success() {
            return Err(Box::new(Failure(format!(
                "`rdma -b -` ({}) failed: {}",
                batch.trim().replace('\n', "; "),
                String::from_utf8_lossy(&out.stderr)
            ))));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut memo: HashMap<u32, bool> = HashMap::new();
        match count_resources(&text, device, |pid| {
            *memo.entry(pid).or_insert_with(|| foreign(pid))
        }) {
            Ok(counts) => return Ok(counts),
            Err(e) if attempt == 2 => {
                return Err(Box::new(Failure(format!(
                    "`rdma resource show`: {e}: {text}"
                ))))
            }
            Err(_) => attempt += 1,
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The object kinds of `rdma resource show KIND` and the key that follows
/// the device in each object's line.
const RESOURCE_KINDS: [(&str, &str); 7] = [
    ("pd", "pdn"),
    ("cq", "cqn"),
    ("qp", "lqpn"),
    ("cm_id", "cm-idn"),
    ("mr", "mrn"),
    ("ctx", "ctxn"),
    ("srq", "srqn"),
];

/// Counts the objects of `device` in the output of `rdma resource show`
/// followed by `rdma resource show KIND` for each kind, leaving out those
/// made by a thread that `foreign` says is another process's. An error when
/// the summary has no line for the device, or when it counts objects of a
/// kind of which no line was read (the listing's form is not the one parsed
/// here, or the objects went between the two dumps): the counts would then
/// be too low, and a leak could go unseen.
fn count_resources(
    text: &str,
    device: &str,
    mut foreign: impl FnMut(u32) -> bool,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut summary: Option<BTreeMap<String, u64>> = None;
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    // The kinds of which a line was read, whoever made the object.
    let mut listed: BTreeSet<&str> = BTreeSet::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(first), Some(name)) = (words.first(), words.get(1)) else {
            continue;
        };
        if first.ends_with(':') {
            // Summary: `0: rxe0: pd 1 cq 2 qp 2 cm_id 0 mr 1 ctx 1 srq 0`.
            if name.trim_end_matches(':') == device {
                summary = Some(
                    words[2..]
                        .chunks(2)
                        .filter_map(|kv| Some((kv[0].to_string(), kv.get(1)?.parse().ok()?)))
                        .collect(),
                );
            }
            continue;
        }
        // An object: `dev rxe0 cqn 0 ...` or `link rxe0/1 lqpn 1 ...`, with
        // `pid N` unless the kernel owns it.
        if name.split('/').next() != Some(device) {
            continue;
        }
        let Some(&(kind, _)) = RESOURCE_KINDS
            .iter()
            .find(|(_, key)| words.get(2) == Some(key))
        else {
            continue;
        };
        listed.insert(kind);
        let pid = words
            .windows(2)
            .find(|w| w[0] == "pid")
            .and_then(|w| w[1].parse::<u32>().ok());
        if !pid.is_some_and(&mut foreign) {
            *counts.entry(kind).or_insert(0) += 1;
        }
    }
    let summary = summary.ok_or_else(|| format!("no summary line for {device}"))?;
    for (kind, n) in &summary {
        if *n > 0 && !listed.contains(kind.as_str()) {
            return Err(format!(
                "the summary counts {n} {kind} on {device}, and no line of them was read"
            ));
        }
    }
    // Every kind of the summary, 0 where none counted.
    Ok(summary
        .into_keys()
        .map(|k| {
            let n = counts.get(k.as_str()).copied().unwrap_or(0);
            (k, n)
        })
        .collect())
}

/// Whether thread `tid` is alive in a process that is neither this one nor
/// one it started (directly or further down).
fn foreign(tid: u32) -> bool {
    // A status field of a thread or process: `Tgid:` (its process), `PPid:`.
    fn field(pid: u32, name: &str) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    }
    let me = std::process::id();
    let Some(mut p) = field(tid, "Tgid:") else {
        return false; // exited: counted
    };
    // Up the parents: this process, or the top (0, 1) first.
    for _ in 0..64 {
        if p == me {
            return false;
        }
        match field(p, "PPid:") {
            Some(pp) if pp > 1 => p = pp,
            _ => return true,
        }
    }
    true
}

/// Runs the `rdma` tool with `args` (and `input` on its standard input),
/// again, twice at most, when it fails: it lists the devices once, then
/// stops at the first query that fails, as for a device removed in between
/// (a scratch device of the other provider's suite, which runs at the same
/// time). The last run's output, whatever its status.
fn run_rdma(args: &[&str], input: Option<&str>) -> std::io::Result<std::process::Output> {
    use std::process::{Command, Stdio};
    let mut attempt = 0;
    loop {
        let mut child = Command::new("rdma")
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if out.status.success() || attempt == 2 {
            return Ok(out);
        }
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The kinds of kernel object whose count is higher in `after` than in
/// `before` (two readings of [`resource_counts`]), each with both counts:
/// objects made between the readings and not released. Only growth
/// tells: objects of exited threads count, so the other provider's suite,
/// running at the same time, may release some between the readings.
pub fn grown_counts(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> Vec<(String, u64, u64)> {
    after
        .iter()
        .map(|(kind, &n)| (kind.clone(), before.get(kind).copied().unwrap_or(0), n))
        .filter(|&(_, was, now)| now > was)
        .collect()
}

/// The CM ids of the system, as `rdma resource show cm_id` lists them.
pub fn cm_ids() -> Result<String, String> {
    let out = run_rdma(&["resource", "show", "cm_id"], None)
        .map_err(|e| format!("cannot run `rdma resource show cm_id`: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{count_resources, foreign};

    #[test]
    fn resources_of_other_live_processes_are_left_out() {
        // The summary, then the objects of each kind, as `rdma -b -` prints
        // them: a wildcard listener of process 300 has a CM id on both
        // devices; 400 is this process (or one it started), 500 has exited.
        let text = "\
0: rxe0: pd 2 cq 1 qp 1 cm_id 3 mr 0 ctx 1 srq 0
1: siw0: pd 0 cq 0 qp 0 cm_id 1 mr 0 ctx 0 srq 0
dev rxe0 pdn 0 local_dma_lkey 0x198 users 1 comm [ib_core]
dev rxe0 pdn 1 users 0 pid 400 comm device
dev rxe0 cqn 0 cqe 1023 users 2 poll-ctx WORKQUEUE adaptive-moderation off comm [ib_core]
link rxe0/1 lqpn 1 type GSI state RTS sq-psn 0 comm [ib_core]
link rxe0/- cm-idn 0 state LISTEN ps TCP pid 300 comm rping src-addr 0.0.0.0:7999
link siw0/- cm-idn 0 state LISTEN ps TCP pid 300 comm rping src-addr 0.0.0.0:7999
link rxe0/1 cm-idn 1 state CONNECT ps TCP pid 400 comm device src-addr 192.0.2.1:1
link rxe0/1 cm-idn 2 state CONNECT ps TCP pid 500 comm gone src-addr 192.0.2.1:2
dev rxe0 ctxn 0 pid 300 comm ibv_devinfo
";
        let live_other = |pid| pid == 300;
        let rxe = count_resources(text, "rxe0", live_other).expect("rxe0");
        let want: Vec<(&str, u64)> = vec![
            ("cm_id", 2),
            ("cq", 1),
            ("ctx", 0),
            ("mr", 0),
            ("pd", 2),
            ("qp", 1),
            ("srq", 0),
        ];
        assert_eq!(
            rxe.iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect::<Vec<_>>(),
            want
        );
        let siw = count_resources(text, "siw0", live_other).expect("siw0");
        assert_eq!(siw["cm_id"], 0);
        // Nothing foreign: the summary's counts.
        let all = count_resources(text, "rxe0", |_| false).expect("rxe0");
        assert_eq!((all["cm_id"], all["ctx"], all["pd"]), (3, 1, 2));
        assert!(count_resources(text, "mlx5_0", |_| false).is_err());
        // Objects the summary counts and the listing lacks (another form of
        // listing): an error, not counts too low.
        let drifted = text.replace("cm-idn", "cm_idn");
        let e = count_resources(&drifted, "rxe0", |_| false).unwrap_err();
        assert!(e.contains("3 cm_id"), "{e}");
        // This process, and a live thread of it, are not foreign; a pid that
        // does not exist is not either; this process's parent is.
        assert!(!foreign(std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        assert_ne!(tid, std::process::id());
        assert!(!foreign(tid));
        drop(done_tx);
        t.join().unwrap();
        assert!(!foreign(u32::MAX - 1));
        assert!(foreign(std::os::unix::process::parent_id()));
    }
}
