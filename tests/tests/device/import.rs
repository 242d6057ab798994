//! Importing a context, PD, MR and device memory on the soft devices:
//! neither provider imports. Each refusal is the typed error, the
//! duplicated command file is neither leaked nor closed twice, and the
//! objects named by the refused imports are untouched.

use std::os::fd::AsFd;

use rdma::{Context, DeviceMemory, ImportedMr, MemoryRegion, ProtectionDomain};
use rdma_tests::{check, Outcome, TestEnv, TestResult};

use crate::fixtures::{open, refused, ACCESS};
use crate::unsupported::{no_leak, not_supported, open_fds, said};

pub fn import_is_not_supported_and_keeps_files_and_objects(env: &TestEnv) -> TestResult {
    let out = no_leak(env, || {
        let ctx = open(env)?;
        let pd = ProtectionDomain::new(&ctx)?;
        let mr = MemoryRegion::new(&pd, 4096, ACCESS)?;
        // The context's own command file, duplicated as a second process
        // would receive it. Neither provider imports; libibverbs had the
        // file, so it stays open (never closed twice): exactly one more
        // file, the duplicate, which the test closes itself.
        let before = fd_set()?;
        let dup = ctx.command_fd().try_clone_to_owned()?;
        let e = not_supported_import(env, Context::import(dup))?;
        let after = fd_set()?;
        let new: Vec<_> = after.difference(&before).copied().collect();
        check!(
            new.len() == 1 && after.len() == before.len() + 1,
            "after the refused import ({e}): files {before:?} -> {after:?}"
        );
        // SAFETY: the duplicate this test made and the refused import left
        // open; nothing else in this process uses that number.
        check!(
            unsafe { libc::close(new[0]) } == 0,
            "the left duplicate is not open"
        );
        // Files refused before libibverbs sees them are closed.
        let before = open_fds()?;
        let null = std::fs::File::open("/dev/null")?;
        refused(
            Context::import(null.as_fd().try_clone_to_owned()?),
            "ibv_import_device",
            libc::ENODEV,
            "character device",
        )?;
        let file = std::fs::File::open("/proc/self/status")?;
        refused(
            Context::import(file.as_fd().try_clone_to_owned()?),
            "ibv_import_device",
            libc::EINVAL,
            "not a character device",
        )?;
        drop((null, file));
        check!(open_fds()? == before, "a refused import leaked its file");
        // PD, MR and DM imports on the context itself.
        let handle = pd.handle();
        let p = not_supported(env, ProtectionDomain::import(&ctx, handle), "ibv_import_pd")?;
        // SAFETY: the handle is of no device memory and the import fails.
        let d = not_supported(
            env,
            unsafe { DeviceMemory::import(&ctx, 0, 4096) },
            "ibv_import_dm",
        )?;
        let m = not_supported(
            env,
            // SAFETY: reads the MR's handle, a plain field of a live MR.
            ImportedMr::import(&pd, unsafe { (*mr.as_raw()).handle }),
            "ibv_import_mr",
        )?;
        // The objects the imports named are untouched.
        mr.write(0, b"still")?;
        check!(mr.to_vec(0..5)? == b"still");
        Ok([p, m, d])
    })?;
    Ok(Outcome::Skipped(format!(
        "no imports: ibv_import_device EOPNOTSUPP; {}, {}, {} (typed errors checked, no file or kernel object left)",
        said(env, "ibv_import_pd", out[0]),
        said(env, "ibv_import_mr", out[1]),
        said(env, "ibv_import_dm", out[2])
    )))
}

rdma_tests::tests!("import": import_is_not_supported_and_keeps_files_and_objects);

/// The open file descriptors of this process (less the one that lists
/// them, closed by the time they are checked).
fn fd_set() -> crate::fixtures::R<std::collections::BTreeSet<i32>> {
    let listed: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // SAFETY: F_GETFD only reads the descriptor's flags.
    Ok(listed
        .into_iter()
        .filter(|&n| unsafe { libc::fcntl(n, libc::F_GETFD) } != -1)
        .collect())
}

/// Checks that `ibv_import_device` was refused as "not supported"
/// (`EOPNOTSUPP`: the provider has no `import_context`).
fn not_supported_import(env: &TestEnv, r: rdma::Result<Context>) -> crate::fixtures::R<String> {
    match r {
        Ok(c) => rdma_tests::fail!("{} imported: {}", env.device, c.name()),
        Err(e) => {
            check!(
                e.verb() == "ibv_import_device"
                    && e.is_unsupported()
                    && e.hint().unwrap_or("").contains("EOPNOTSUPP"),
                "ibv_import_device on {}: {e}",
                env.device
            );
            Ok(e.to_string())
        }
    }
}
