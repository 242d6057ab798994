//! Interop: each Rust `*_pingpong` example against rdma-core's C twin
//! (`ibv_*_pingpong`), in both directions (Rust server with C client, C
//! server with Rust client), on rxe.
//!
//! The example binaries are found next to this test binary's directory
//! (`target/debug/deps/device-*` -> `target/debug/rc_pingpong`); ci/test.sh
//! builds them with the device binary. Every run is bounded: on timeout both
//! children are killed and the test fails.

use std::net::Ipv6Addr;
use std::process::Command;
use std::time::{Duration, Instant};

use rdma_tests::{fail, Outcome, Provider, Running, TestEnv, TestResult};

rdma_tests::tests!(
    "interop":
    devinfo_prints_what_ibv_devinfo_prints,
    rc_pingpong_rust_server_c_client,
    rc_pingpong_c_server_rust_client,
    rc_pingpong_events_chk_rust_server_c_client,
    rc_pingpong_events_chk_c_server_rust_client,
    uc_pingpong_rust_server_c_client,
    uc_pingpong_c_server_rust_client,
    ud_pingpong_rust_server_c_client,
    ud_pingpong_c_server_rust_client,
    srq_pingpong_rust_server_c_client,
    srq_pingpong_c_server_rust_client,
);

/// How long one pair may run, from the server's start to both exits.
const TIMEOUT: Duration = Duration::from_secs(90);
/// Exchanges per run: enough to cycle the receive queue refill, short under TCG.
const ITERS: &str = "200";

/// Which side runs the Rust example.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RustSide {
    Server,
    Client,
}

fn rc_pingpong_rust_server_c_client(env: &TestEnv) -> TestResult {
    pair(env, "rc_pingpong", &[], RustSide::Server, 18611)
}
fn rc_pingpong_c_server_rust_client(env: &TestEnv) -> TestResult {
    pair(env, "rc_pingpong", &[], RustSide::Client, 18612)
}
fn rc_pingpong_events_chk_rust_server_c_client(env: &TestEnv) -> TestResult {
    pair(
        env,
        "rc_pingpong",
        &["-e", "-c", "-s", "8192"],
        RustSide::Server,
        18613,
    )
}
fn rc_pingpong_events_chk_c_server_rust_client(env: &TestEnv) -> TestResult {
    pair(
        env,
        "rc_pingpong",
        &["-e", "-c", "-s", "8192"],
        RustSide::Client,
        18614,
    )
}
fn uc_pingpong_rust_server_c_client(env: &TestEnv) -> TestResult {
    pair(env, "uc_pingpong", &[], RustSide::Server, 18621)
}
fn uc_pingpong_c_server_rust_client(env: &TestEnv) -> TestResult {
    pair(env, "uc_pingpong", &[], RustSide::Client, 18622)
}
fn ud_pingpong_rust_server_c_client(env: &TestEnv) -> TestResult {
    pair(env, "ud_pingpong", &["-c"], RustSide::Server, 18631)
}
fn ud_pingpong_c_server_rust_client(env: &TestEnv) -> TestResult {
    pair(env, "ud_pingpong", &["-c"], RustSide::Client, 18632)
}
fn srq_pingpong_rust_server_c_client(env: &TestEnv) -> TestResult {
    pair(env, "srq_pingpong", &["-q", "4"], RustSide::Server, 18641)
}
fn srq_pingpong_c_server_rust_client(env: &TestEnv) -> TestResult {
    pair(env, "srq_pingpong", &["-q", "4"], RustSide::Client, 18642)
}

/// `devinfo -v -d DEV` prints exactly what `ibv_devinfo -v -d DEV` prints,
/// and so do the other forms (`-i 1`, plain, `-l`).
fn devinfo_prints_what_ibv_devinfo_prints(env: &TestEnv) -> TestResult {
    let ours = rdma_tests::example("devinfo")?;
    // `-l` lists every device: no scratch device of the other suite may come
    // or go between the two listings.
    let _set = rdma_tests::DeviceSet::lock(false)?;
    for args in [
        vec!["-v", "-d", env.device.as_str()],
        vec!["-d", env.device.as_str(), "-i", "1"],
        vec!["-l"],
    ] {
        let c = Command::new("ibv_devinfo").args(&args).output()?;
        let r = Command::new(&ours).args(&args).output()?;
        if !c.status.success() || !r.status.success() {
            fail!(
                "ibv_devinfo {args:?} exited with {}, devinfo with {}: {}",
                c.status,
                r.status,
                String::from_utf8_lossy(&r.stderr)
            );
        }
        if c.stdout != r.stdout {
            let (c, r) = (
                String::from_utf8_lossy(&c.stdout),
                String::from_utf8_lossy(&r.stdout),
            );
            let first = c
                .lines()
                .zip(r.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(c.lines().count().min(r.lines().count()));
            fail!(
                "devinfo {args:?} differs from ibv_devinfo at line {}:\n  ibv_devinfo: {:?}\n  devinfo:     {:?}",
                first + 1,
                c.lines().nth(first),
                r.lines().nth(first)
            );
        }
    }
    Ok(Outcome::Passed)
}

/// Runs the ping-pong `name` between the Rust example and `ibv_<name>`,
/// with the Rust one on `rust` side, on TCP port `port`.
fn pair(env: &TestEnv, name: &str, extra: &[&str], rust: RustSide, port: u16) -> TestResult {
    if env.provider == Provider::Siw {
        let why = if name == "ud_pingpong" {
            "iWARP has no UD queue pairs"
        } else {
            "it moves its QPs to RTS by hand, which iWARP does not allow \
             (iWARP connects only through rdma_cm)"
        };
        return Ok(Outcome::Skipped(format!("ibv_{name}: {why}")));
    }
    let rust_bin = rdma_tests::example(name)?;
    let c_bin = format!("ibv_{name}");
    let gidx = roce_v2_ipv4_gid_index(env)?.to_string();
    let port_s = port.to_string();
    let mut args: Vec<&str> = vec!["-d", &env.device, "-g", &gidx, "-p", &port_s, "-n", ITERS];
    args.extend_from_slice(extra);
    let server_ip = env.ipv4.to_string();
    let mut client_args = args.clone();
    client_args.push(&server_ip);
    let (server_prog, client_prog) = match rust {
        RustSide::Server => (rust_bin.display().to_string(), c_bin),
        RustSide::Client => (c_bin, rust_bin.display().to_string()),
    };

    let deadline = Instant::now() + TIMEOUT;
    let mut server = Running::spawn("server", &server_prog, &args)?;
    if let Err(e) = rdma_tests::wait_tcp_listening(port, &mut server, deadline) {
        let out = server.finish_killed();
        fail!("{e}\n{out}");
    }
    let mut client = Running::spawn("client", &client_prog, &client_args)?;
    let code = |s: Option<std::process::ExitStatus>| s.map(|s| s.code().unwrap_or(-1));
    let (sc, cc) = (
        code(server.wait_status(deadline)),
        code(client.wait_status(deadline)),
    );
    let timed_out = sc.is_none() || cc.is_none();
    let (so, co) = (server.finish_killed(), client.finish_killed());
    if timed_out {
        fail!(
            "timed out after {} s (children killed)\n{so}\n{co}",
            TIMEOUT.as_secs()
        );
    }
    if sc != Some(0) || cc != Some(0) {
        fail!("server exited with {sc:?}, client with {cc:?}\n{so}\n{co}");
    }
    for (who, out) in [("server", &so), ("client", &co)] {
        if !out.contains(&format!("{ITERS} iters in")) {
            fail!("the {who} did not report {ITERS} iterations\n{out}");
        }
    }
    Ok(Outcome::Passed)
}

/// The index of port 1's RoCE v2 GID that maps the device's IPv4 address,
/// from sysfs.
fn roce_v2_ipv4_gid_index(env: &TestEnv) -> rdma_tests::sys::Result<u32> {
    let want = env.ipv4.to_ipv6_mapped();
    let port = format!("/sys/class/infiniband/{}/ports/1", env.device);
    let dir = std::fs::read_dir(format!("{port}/gids"))?;
    let mut indices: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    indices.sort_unstable();
    for i in indices {
        let Ok(text) = std::fs::read_to_string(format!("{port}/gids/{i}")) else {
            continue;
        };
        let Ok(gid) = text.trim().parse::<Ipv6Addr>() else {
            continue;
        };
        let ty = std::fs::read_to_string(format!("{port}/gid_attrs/types/{i}")).unwrap_or_default();
        if gid == want && ty.trim() == "RoCE v2" {
            return Ok(i);
        }
    }
    Err(format!("{} has no RoCE v2 GID for {}", env.device, env.ipv4).into())
}
