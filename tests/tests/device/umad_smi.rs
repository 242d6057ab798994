//! Devices whose ports split subnet management from general services
//! (libibumad of rdma-core v56 and newer): the SMI/GSI pairs and the SMI
//! port. rxe's RoCE port pairs with itself and has no SMI classes; siw has
//! no umad port, so it is in no pair.

rdma_tests::tests!(
    "umad_smi":
    pairs_name_the_cas_with_umad_ports,
    pair_of_a_ca_and_port_or_enodev,
    smi_port_opens_but_a_roce_port_has_no_smi_classes,
);

#[cfg(all(
    has_umad_get_smi_gsi_pairs,
    has_umad_get_smi_gsi_pair_by_ca_name,
    has_umad_open_smi_port
))]
mod on {
    use rdma::mad::Method;
    use rdma::umad::{self, Error, Port, Registration};
    use rdma_tests::{check, fail, Outcome, Provider, TestEnv, TestResult};

    /// What libibumad reads of the device's port 1 (it pairs ports by
    /// their port GUID), for the reason of a skip.
    fn why_unpaired(env: &TestEnv) -> String {
        match umad::CaPort::get(&env.device, 1) {
            Ok(p) => format!(
                "port 1: GUID {:#018x}, link layer {}, state {:?}, capability mask {:#x}; Debian 13's libibumad 56 pairs this port with itself",
                p.port_guid, p.link_layer, p.state, p.capability_mask
            ),
            Err(e) => format!("its port 1 does not read: {e}"),
        }
    }

    pub fn pairs_name_the_cas_with_umad_ports(env: &TestEnv) -> TestResult {
        let names = umad::ca_names()?;
        let pairs = umad::smi_gsi_pairs()?;
        for p in &pairs {
            for n in [&p.smi_ca, &p.gsi_ca].into_iter().flatten() {
                check!(names.contains(n), "{n} of {p:?} is not among {names:?}");
            }
            check!(
                p.gsi_ca.is_some() || p.smi_ca.is_some(),
                "an empty pair: {p:?}"
            );
        }
        let mine = pairs
            .iter()
            .filter(|p| p.gsi_ca.as_deref() == Some(env.device.as_str()))
            .count();
        match env.provider {
            Provider::Rxe if mine == 0 => {
                return Ok(Outcome::Skipped(format!(
                    "libibumad lists no SMI/GSI pair for {} ({}): nothing to check in a pair",
                    env.device,
                    why_unpaired(env)
                )))
            }
            // One port, one port GUID: one pair, SMI and GSI on the same CA.
            Provider::Rxe => check!(mine == 1, "{} in {pairs:?}", env.device),
            Provider::Siw => check!(mine == 0, "siw has no umad port, yet {pairs:?}"),
        }
        Ok(Outcome::Passed)
    }

    pub fn pair_of_a_ca_and_port_or_enodev(env: &TestEnv) -> TestResult {
        // Past libibumad's per-CA port table: refused before the call.
        for port in [10u8, 255] {
            let e = umad::smi_gsi_pair(Some(&env.device), port, false).unwrap_err();
            check!(e.errno() == libc::EINVAL, "port {port}: {e}");
        }
        let e = umad::smi_gsi_pair(Some("no_such_ca0"), 1, false).unwrap_err();
        check!(e.errno() == libc::ENODEV, "{e}");
        let e = umad::smi_gsi_pair(Some("bad\0name"), 1, false).unwrap_err();
        check!(matches!(e, Error::NoDevice(_)), "{e}");
        let found = umad::smi_gsi_pair(Some(&env.device), 1, false);
        match env.provider {
            Provider::Rxe => {
                let listed = umad::smi_gsi_pairs()?
                    .iter()
                    .any(|p| p.gsi_ca.as_deref() == Some(env.device.as_str()));
                let p = match found {
                    Ok(p) => p,
                    // What the list lacks, the search does not find.
                    Err(e) if !listed => {
                        check!(e.errno() == libc::ENODEV, "{e}");
                        return Ok(Outcome::Skipped(format!(
                            "libibumad lists no SMI/GSI pair for {} ({}): the search by name answers ENODEV alike",
                            env.device,
                            why_unpaired(env)
                        )));
                    }
                    Err(e) => return Err(e.into()),
                };
                check!(
                    p.gsi_ca.as_deref() == Some(env.device.as_str()) && p.gsi_port == 1,
                    "{p:?}"
                );
                check!(p.smi_ca == p.gsi_ca && p.smi_port == 1, "{p:?}");
                // Without a name: the first pair, which has a GSI.
                let any = umad::smi_gsi_pair(None, 0, false)?;
                check!(any.gsi_ca.is_some(), "{any:?}");
            }
            Provider::Siw => match found {
                Err(e) => check!(e.errno() == libc::ENODEV, "{e}"),
                Ok(p) => fail!("siw0 has no umad port, yet {p:?}"),
            },
        }
        Ok(Outcome::Passed)
    }

    pub fn smi_port_opens_but_a_roce_port_has_no_smi_classes(env: &TestEnv) -> TestResult {
        if env.provider == Provider::Siw {
            let r = Port::open_smi(&env.device, 1);
            check!(r.is_err(), "siw0 has no umad port, yet {r:?}");
            return Ok(Outcome::Skipped(
                "siw has no MADs: iWARP devices have no umad port (open_smi refused)".into(),
            ));
        }
        let port = Port::open_smi(&env.device, 1)?;
        check!(port.ca_name() == env.device && port.port_num() == 1);
        check!(port.is_ethernet(), "rxe's port is RoCE");
        for class in [0x01u8, 0x81] {
            match port.register(&Registration::new(class, 1).method(Method::GET)) {
                Err(e @ Error::ClassRefused { .. }) => {
                    check!(e.errno() == libc::EPROTONOSUPPORT, "class {class:#x}: {e}");
                }
                other => fail!("SMI class {class:#x} was not refused: {other:?}"),
            }
        }
        // A GSI class registers on it as on any umad port.
        port.register(&Registration::new(rdma::mad::class::PERF_MGT, 1))?;
        // libibumad takes a CA name with a port number as it is: the port's
        // sysfs files of a CA that does not exist fail to read (EIO).
        let e = Port::open_smi("no_such_ca0", 1).unwrap_err();
        check!(
            matches!(e.errno(), libc::ENODEV | libc::EIO),
            "open_smi of a CA that does not exist: {e}"
        );
        Ok(Outcome::Passed)
    }
}

#[cfg(all(
    has_umad_get_smi_gsi_pairs,
    has_umad_get_smi_gsi_pair_by_ca_name,
    has_umad_open_smi_port
))]
pub use on::*;

#[cfg(not(all(
    has_umad_get_smi_gsi_pairs,
    has_umad_get_smi_gsi_pair_by_ca_name,
    has_umad_open_smi_port
)))]
mod off {
    use rdma_tests::{Outcome, TestEnv, TestResult};

    fn lack() -> TestResult {
        Ok(Outcome::Skipped(crate::unsupported::headers_lack(
            "umad_get_smi_gsi_pairs",
            56,
        )))
    }

    pub fn pairs_name_the_cas_with_umad_ports(_env: &TestEnv) -> TestResult {
        lack()
    }

    pub fn pair_of_a_ca_and_port_or_enodev(_env: &TestEnv) -> TestResult {
        lack()
    }

    pub fn smi_port_opens_but_a_roce_port_has_no_smi_classes(_env: &TestEnv) -> TestResult {
        lack()
    }
}

#[cfg(not(all(
    has_umad_get_smi_gsi_pairs,
    has_umad_get_smi_gsi_pair_by_ca_name,
    has_umad_open_smi_port
)))]
pub use off::*;
