//! A port's effective bandwidth (`Context::port_speed`, rdma-core v65 and
//! newer). Neither soft device's provider answers it: port 0 is refused
//! before the call, port 1 is the typed "not supported" error.

use rdma_tests::{Outcome, TestEnv, TestResult};

rdma_tests::tests!("port_speed": port_speed_is_the_ports_or_refused_typed);

#[cfg(has_ibv_query_port_speed)]
pub fn port_speed_is_the_ports_or_refused_typed(env: &TestEnv) -> TestResult {
    use crate::fixtures::{open, refused};
    use crate::unsupported::{not_supported, said};

    let ctx = open(env)?;
    refused(
        ctx.port_speed(0),
        "ibv_query_port_speed",
        libc::EINVAL,
        "numbered from 1",
    )?;
    match ctx.port_speed(1) {
        Ok(bw) => {
            rdma_tests::check!(bw.raw() > 0, "{} port 1: {bw}", env.device);
            Ok(Outcome::Passed)
        }
        Err(e) => {
            let errno = not_supported(env, Err::<(), _>(e), "ibv_query_port_speed")?;
            Ok(Outcome::Skipped(format!(
                "no port speed query: {} (port 0 refused before it; typed error checked)",
                said(env, "ibv_query_port_speed", errno)
            )))
        }
    }
}

#[cfg(not(has_ibv_query_port_speed))]
pub fn port_speed_is_the_ports_or_refused_typed(_env: &TestEnv) -> TestResult {
    Ok(Outcome::Skipped(crate::unsupported::headers_lack(
        "ibv_query_port_speed",
        65,
    )))
}
