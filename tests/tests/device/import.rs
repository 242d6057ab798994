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
        let fds = open_fds()?;
        // The context's own command file, duplicated as a second process
        // would receive it.
        let dup = ctx.command_fd().try_clone_to_owned()?;
        let r = Context::import(dup);
        let e = match &r {
            Ok(_) => None,
            Err(e) => Some(e.errno()),
        };
        check!(
            r.as_ref().err().is_some_and(|e| e.is_unsupported()),
            "ibv_import_device on {}: {:?}",
            env.device,
            r.as_ref().map(|c| c.name().to_string())
        );
        drop(r);
        check!(
            open_fds()? == fds,
            "the refused import leaked its file ({e:?})"
        );
        // A file that is no verbs device: refused by libibverbs, closed.
        let null = std::fs::File::open("/dev/null")?;
        let before = open_fds()?;
        let r = Context::import(null.as_fd().try_clone_to_owned()?);
        check!(r.is_err(), "/dev/null imported");
        check!(
            open_fds()? == before,
            "the refused /dev/null import leaked its file"
        );
        let file = std::fs::File::open("/proc/self/status")?;
        refused(
            Context::import(file.as_fd().try_clone_to_owned()?),
            "ibv_import_device",
            libc::EINVAL,
            "not an RDMA device",
        )?;
        check!(
            open_fds()? == before,
            "the refused file import leaked its file"
        );
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
