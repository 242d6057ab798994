//! Helpers of the tests of features no soft device offers (XRC, thread and
//! parent domains, device memory, WQs, flows, counters, import): the typed
//! "not supported" error, and the kernel's objects counted around it.

use rdma_tests::{check, fail, TestEnv};

use crate::fixtures::R;

/// Checks that `r` failed from `verb` as "not supported"
/// ([`rdma::Error::is_unsupported`]) with a hint naming the device and
/// the errno; returns the errno's name (`EOPNOTSUPP`, `ENOSYS`).
pub fn not_supported<T: std::fmt::Debug>(
    env: &TestEnv,
    r: rdma::Result<T>,
    verb: &str,
) -> R<&'static str> {
    let e = match r {
        Ok(v) => fail!(
            "{verb} on {}: created ({v:?}), but the provider has no such verb here",
            env.device
        ),
        Err(e) => e,
    };
    check!(
        e.verb() == verb && e.is_unsupported(),
        "{verb} on {}: expected a \"not supported\" error, got {e}",
        env.device
    );
    let name = match e.errno() {
        libc::ENOSYS => "ENOSYS",
        _ => "EOPNOTSUPP",
    };
    let hint = e.hint().unwrap_or("");
    check!(
        hint.contains(&format!("not supported by {}", env.device)) && hint.contains(name),
        "{verb}: the hint of {e} names neither the device nor {name}"
    );
    Ok(name)
}

/// The errno `verb` answered with on `env`'s device, as a test reports it.
pub fn said(env: &TestEnv, verb: &str, errno: &str) -> String {
    format!("{verb} on {}: {errno}", env.device)
}

/// Runs `body`, then checks that the device's kernel objects (PDs, CQs,
/// QPs, MRs, contexts, SRQs) are no more than they were before it: what it
/// made and the failed creations left nothing behind. (Fewer is not ours:
/// the other provider's suite, running at the same time, may release an
/// object that counts here, one made by a thread that has exited; see
/// `rdma_tests::resource_counts`.)
pub fn no_leak<T>(env: &TestEnv, body: impl FnOnce() -> R<T>) -> R<T> {
    let before = rdma_tests::resource_counts(&env.device)?;
    let out = body()?;
    let after = rdma_tests::resource_counts(&env.device)?;
    let grown = rdma_tests::grown_counts(&before, &after);
    check!(
        grown.is_empty(),
        "kernel objects of {} leaked (kind, before, after): {grown:?}",
        env.device
    );
    Ok(out)
}

/// The number of open file descriptors of this process.
pub fn open_fds() -> R<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count())
}

/// The reason of a test of a function the rdma-core headers of this build
/// do not declare (`since`: the first release that has it): the API over
/// it is not built, so the test reports a skip instead of vanishing.
#[allow(dead_code)] // used by the tests of whichever functions the build lacks
pub fn headers_lack(function: &str, since: u32) -> String {
    format!(
        "the rdma-core headers of this build lack {function} (rdma-core v{since} and newer): its API is not built"
    )
}
