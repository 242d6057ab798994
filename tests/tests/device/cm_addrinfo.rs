//! Address resolution through a CM id's channel and the program's own CM
//! events (librdmacm of rdma-core v65 and newer), on rxe and siw alike:
//! neither involves the device, only librdmacm and the kernel's rdma_ucm.

rdma_tests::tests!(
    "cm_addrinfo":
    resolution_is_reported_on_the_channel_and_taken_once,
    resolution_of_a_bad_name_starts_nothing,
    user_event_wakes_a_reader_of_the_channel_with_its_value,
);

#[cfg(has_rdma_resolve_addrinfo)]
mod on {
    use std::net::{IpAddr, SocketAddr};
    use std::time::Duration;

    use rdma::cm::{AddrHints, CmEventKind, CmId, EventChannel, PortSpace};
    use rdma_tests::{check, Outcome, TestEnv, TestResult};

    use crate::fixtures::{refused, R, T};

    pub fn resolution_is_reported_on_the_channel_and_taken_once(env: &TestEnv) -> TestResult {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp)?;
        refused(
            id.query_addrinfo(),
            "rdma_query_addrinfo",
            libc::ENOENT,
            "resolve_addrinfo",
        )?;
        let hints = AddrHints {
            numeric_host: true,
            ..AddrHints::default()
        };
        let node = env.ipv4.to_string();
        id.resolve_addrinfo(Some(&node), Some("7471"), &hints)?;
        // A second resolution before the first's result is taken.
        refused(
            id.resolve_addrinfo(Some(&node), Some("7471"), &hints),
            "rdma_resolve_addrinfo",
            libc::EBUSY,
            "in progress",
        )?;
        let ev = ch.expect(&id, CmEventKind::AddrInfoResolved, T)?;
        check!(ev.status == 0 && ev.is_for(&id), "{ev:?}");
        check!(
            ev.private_data().is_empty() && ev.user_arg().is_none(),
            "{ev:?}"
        );
        let info = id.query_addrinfo()?;
        let want = SocketAddr::new(IpAddr::V4(env.ipv4), 7471);
        let entries = info.entries();
        check!(
            entries.iter().any(|e| e.dst == Some(want) && !e.passive),
            "{want} not among {entries:?}"
        );
        // Taken: a second query finds nothing.
        refused(
            id.query_addrinfo(),
            "rdma_query_addrinfo",
            libc::ENOENT,
            "resolve_addrinfo",
        )?;
        // The id resolves again, a passive IPv6 wildcard this time.
        let passive = AddrHints {
            passive: true,
            family: Some(rdma::IpFamily::V6),
            ..AddrHints::default()
        };
        id.resolve_addrinfo(None, Some("7472"), &passive)?;
        ch.expect(&id, CmEventKind::AddrInfoResolved, T)?;
        let entries = id.query_addrinfo()?.entries();
        check!(
            !entries.is_empty()
                && entries
                    .iter()
                    .all(|e| e.passive && e.src.is_some_and(|s| s.is_ipv6() && s.port() == 7472)),
            "{entries:?}"
        );
        // A list taken outlives the id that resolved it.
        let before = info.entries();
        drop(id);
        check!(info.entries() == before);
        Ok(Outcome::Passed)
    }

    pub fn resolution_of_a_bad_name_starts_nothing(env: &TestEnv) -> TestResult {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp)?;
        let numeric = AddrHints {
            numeric_host: true,
            ..AddrHints::default()
        };
        refused(
            id.resolve_addrinfo(Some("not-an-address"), Some("7471"), &numeric),
            "rdma_resolve_addrinfo",
            libc::EADDRNOTAVAIL,
            "not-an-address",
        )?;
        refused(
            id.resolve_addrinfo(Some("192.0.2.1\0x"), None, &numeric),
            "rdma_resolve_addrinfo",
            libc::EINVAL,
            "NUL byte",
        )?;
        // No event came of either, and the id is free to resolve.
        check!(
            ch.wait_event(Duration::from_millis(200))?.is_none(),
            "an event came"
        );
        refused(id.query_addrinfo(), "rdma_query_addrinfo", libc::ENOENT, "")?;
        id.resolve_addrinfo(Some(&env.ipv4.to_string()), Some("1"), &numeric)?;
        ch.expect(&id, CmEventKind::AddrInfoResolved, T)?;
        check!(!id.query_addrinfo()?.entries().is_empty());
        Ok(Outcome::Passed)
    }

    pub fn user_event_wakes_a_reader_of_the_channel_with_its_value(_env: &TestEnv) -> TestResult {
        let ch = EventChannel::new()?;
        let id = CmId::new(&ch, PortSpace::Tcp)?;
        let other = CmId::new(&ch, PortSpace::Udp)?;
        let ev = std::thread::scope(|s| -> R<Option<rdma::cm::CmEvent>> {
            let reader = s.spawn(|| ch.wait_event(T));
            // Most likely the reader waits in poll(2) by now; either way
            // the event is there for it.
            std::thread::sleep(Duration::from_millis(50));
            id.write_user_event(-7, 0xdead_beef_0000_0001)?;
            Ok(reader.join().map_err(|_| "the reader panicked")??)
        })?;
        let ev = ev.ok_or("no event within the timeout")?;
        check!(
            ev.kind == CmEventKind::User && ev.is_for(&id) && !ev.is_for(&other),
            "{ev:?}"
        );
        check!(
            ev.status == -7 && ev.user_arg() == Some(0xdead_beef_0000_0001),
            "{ev:?}"
        );
        // librdmacm 65's rdma_event_str has no name for it: Display prints
        // its "UNKNOWN EVENT", the value is the kind's.
        check!(
            ev.kind.raw() == rdmacm_sys::RDMA_CM_EVENT_USER,
            "{:?}",
            ev.kind
        );
        // One per write, in order, on a UDP id too (whose events carry UD
        // parameters otherwise).
        for arg in [1u64, u64::MAX] {
            other.write_user_event(0, arg)?;
        }
        for arg in [1u64, u64::MAX] {
            let ev = ch.expect(&other, CmEventKind::User, T)?;
            check!(
                ev.user_arg() == Some(arg) && ev.ud.is_none() && ev.conn.is_none(),
                "{ev:?}"
            );
        }
        check!(ch.wait_event(Duration::from_millis(100))?.is_none());
        Ok(Outcome::Passed)
    }
}

#[cfg(has_rdma_resolve_addrinfo)]
pub use on::*;

#[cfg(not(has_rdma_resolve_addrinfo))]
mod off {
    use rdma_tests::{Outcome, TestEnv, TestResult};

    fn lack() -> TestResult {
        Ok(Outcome::Skipped(crate::unsupported::headers_lack(
            "rdma_resolve_addrinfo",
            65,
        )))
    }

    pub fn resolution_is_reported_on_the_channel_and_taken_once(_env: &TestEnv) -> TestResult {
        lack()
    }

    pub fn resolution_of_a_bad_name_starts_nothing(_env: &TestEnv) -> TestResult {
        lack()
    }

    pub fn user_event_wakes_a_reader_of_the_channel_with_its_value(_env: &TestEnv) -> TestResult {
        lack()
    }
}

#[cfg(not(has_rdma_resolve_addrinfo))]
pub use off::*;
