//! Enumerate devices; open each; query device, port and GID table.

use std::ffi::CStr;
use std::net::Ipv6Addr;

use ibverbs_sys::*;
use rdma_tests::sys::{non_null, ok, Result};
use rdma_tests::{check, fail, Defer, Outcome, Provider, TestEnv, TestResult};

/// Every device of the system: (name, node type, transport type).
fn devices() -> Result<Vec<(String, ibv_node_type, ibv_transport_type)>> {
    let mut n = 0;
    // SAFETY: `n` is writable; the list is freed below.
    let list = non_null(
        unsafe { ibv_get_device_list(&mut n) },
        "ibv_get_device_list",
    )?;
    let mut out = Vec::new();
    for i in 0..n as usize {
        // SAFETY: the list holds `n` valid device pointers until freed.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is valid; its name is a NUL-terminated array it owns.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) };
        // SAFETY: `dev` is valid; these read fields of the device.
        let (node, transport) = unsafe { ((*dev).node_type, (*dev).transport_type) };
        out.push((name.to_string_lossy().into_owned(), node, transport));
    }
    // SAFETY: freed once; nothing refers to the list afterwards.
    unsafe { ibv_free_device_list(list) };
    Ok(out)
}

pub fn device_list_has_the_test_device(env: &TestEnv) -> TestResult {
    let devs = devices()?;
    let Some((_, node, transport)) = devs.iter().find(|(n, _, _)| *n == env.device) else {
        fail!("{} is not in the device list {devs:?}", env.device);
    };
    let (want_node, want_transport) = match env.provider {
        Provider::Rxe => (IBV_NODE_CA, IBV_TRANSPORT_IB),
        Provider::Siw => (IBV_NODE_RNIC, IBV_TRANSPORT_IWARP),
    };
    check!(*node == want_node, "node type {node}, expected {want_node}");
    check!(
        *transport == want_transport,
        "transport {transport}, expected {want_transport}"
    );
    Ok(Outcome::Passed)
}

pub fn every_device_opens_and_answers_queries(_env: &TestEnv) -> TestResult {
    // No scratch device of the other suite comes or goes while each listed
    // device is opened and its ports are required ACTIVE.
    let _set = rdma_tests::DeviceSet::lock(false)?;
    let devs = devices()?;
    check!(!devs.is_empty(), "no devices");
    for (name, _, _) in &devs {
        let mut defer = Defer::new();
        let ctx = rdma_tests::sys::open_device(name, &mut defer)?;
        // SAFETY: plain data, filled by the query.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; `attr` is writable.
        ok(
            unsafe { ibv_query_device(ctx, &mut attr) },
            "ibv_query_device",
        )?;
        check!(attr.phys_port_cnt >= 1, "{name}: no ports");
        check!(
            attr.max_qp > 0 && attr.max_cq > 0 && attr.max_mr > 0,
            "{name}: zero limits"
        );
        check!(attr.max_sge >= 1, "{name}: max_sge {}", attr.max_sge);

        // SAFETY: plain data, filled by the query.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open; NULL input means no extended input.
        let rc = unsafe { ibv_query_device_ex(ctx, std::ptr::null(), &mut ex) };
        ok(rc, "ibv_query_device_ex")?;
        check!(
            ex.orig_attr.max_qp == attr.max_qp,
            "{name}: query_device_ex disagrees on max_qp"
        );
        check!(
            ex.orig_attr.fw_ver == attr.fw_ver,
            "{name}: query_device_ex disagrees on fw_ver"
        );

        for port in 1..=attr.phys_port_cnt {
            // SAFETY: plain data, filled by the query.
            let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
            // SAFETY: `ctx` is open; `pa` is a full ibv_port_attr, as the
            // macro-bound ibv_query_port expects.
            ok(
                unsafe { ibv_query_port(ctx, port, &mut pa) },
                "ibv_query_port",
            )?;
            check!(
                pa.state == IBV_PORT_ACTIVE,
                "{name} port {port}: state {} (not ACTIVE)",
                pa.state
            );
            check!(pa.gid_tbl_len > 0, "{name} port {port}: empty GID table");
            check!(
                (1..=5).contains(&pa.active_mtu),
                "{name} port {port}: active_mtu {}",
                pa.active_mtu
            );
        }
    }
    // A port past the last one is refused.
    let mut defer = Defer::new();
    let ctx = rdma_tests::sys::open_device(&devs[0].0, &mut defer)?;
    // SAFETY: plain data.
    let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is open; an invalid port number is an error return.
    let rc = unsafe { ibv_query_port(ctx, 200, &mut pa) };
    check!(rc != 0, "ibv_query_port(200) succeeded");
    Ok(Outcome::Passed)
}

/// The valid GID entries of port 1.
pub fn gid_table(ctx: *mut ibv_context) -> Result<Vec<ibv_gid_entry>> {
    // SAFETY: plain data.
    let mut entries: Vec<ibv_gid_entry> = vec![unsafe { std::mem::zeroed() }; 256];
    // SAFETY: `entries` has room for 256 entries.
    let n = unsafe { ibv_query_gid_table(ctx, entries.as_mut_ptr(), entries.len(), 0) };
    if n < 0 {
        fail!(
            "ibv_query_gid_table failed: {}",
            std::io::Error::from_raw_os_error((-n) as i32)
        );
    }
    entries.truncate(n as usize);
    Ok(entries.into_iter().filter(|e| e.port_num == 1).collect())
}

/// The GID of an entry as an IPv6 address (IPv4-mapped for IPv4).
pub fn gid_addr(e: &ibv_gid_entry) -> Ipv6Addr {
    // SAFETY: every bit pattern of the 16-byte union is a valid `raw`.
    Ipv6Addr::from(unsafe { e.gid.raw })
}

/// The index of the RoCEv2 GID that carries `addr`.
pub fn roce_v2_gid_index(ctx: *mut ibv_context, addr: Ipv6Addr) -> Result<u32> {
    let table = gid_table(ctx)?;
    match table
        .iter()
        .find(|e| e.gid_type == IBV_GID_TYPE_ROCE_V2 && gid_addr(e) == addr)
    {
        Some(e) => Ok(e.gid_index),
        None => fail!(
            "no RoCEv2 GID {addr} in {:?}",
            table
                .iter()
                .map(|e| (e.gid_index, e.gid_type, gid_addr(e)))
                .collect::<Vec<_>>()
        ),
    }
}

pub fn gid_table_holds_the_netdev_addresses(env: &TestEnv) -> TestResult {
    let mut defer = Defer::new();
    let ctx = rdma_tests::sys::open_device(&env.device, &mut defer)?;
    let table = gid_table(ctx)?;
    check!(!table.is_empty(), "empty GID table");
    // Each entry agrees with ibv_query_gid and ibv_query_gid_ex.
    for e in &table {
        // SAFETY: plain data.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open, the index is from the table.
        ok(
            unsafe { ibv_query_gid(ctx, 1, e.gid_index as i32, &mut gid) },
            "ibv_query_gid",
        )?;
        // SAFETY: any bit pattern is a valid `raw`.
        check!(
            unsafe { gid.raw == e.gid.raw },
            "ibv_query_gid({}) disagrees",
            e.gid_index
        );
        // SAFETY: plain data.
        let mut ex: ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        ok(
            unsafe { ibv_query_gid_ex(ctx, 1, e.gid_index, &mut ex, 0) },
            "ibv_query_gid_ex",
        )?;
        check!(
            ex.gid_type == e.gid_type,
            "ibv_query_gid_ex({}) type disagrees",
            e.gid_index
        );
    }
    match env.provider {
        Provider::Rxe => {
            // RoCE: the IPv4-mapped and the IPv6 address both appear as RoCEv2 GIDs.
            roce_v2_gid_index(ctx, env.ipv4.to_ipv6_mapped())?;
            roce_v2_gid_index(ctx, env.ipv6)?;
        }
        Provider::Siw => {
            // iWARP: one GID derived from the netdev's MAC address.
            check!(
                gid_addr(&table[0]) != Ipv6Addr::UNSPECIFIED,
                "siw GID 0 is zero"
            );
        }
    }
    Ok(Outcome::Passed)
}

/// libibumad's CA list, sorted by `umad_sort_ca_device_list`: in name
/// order, the same names `umad_get_cas_names` gives, rxe's device among them
/// and siw's (an iWARP RNIC, no InfiniBand node type) not.
pub fn umad_ca_list_is_sorted_and_holds_the_ib_devices(env: &TestEnv) -> TestResult {
    let sorted = rdma::umad::ca_device_names()?;
    check!(
        sorted.windows(2).all(|w| w[0] < w[1]),
        "not sorted, or a name twice: {sorted:?}"
    );
    let names = rdma::umad::ca_names()?;
    check!(
        sorted == names,
        "umad_get_ca_device_list (sorted) gives {sorted:?}, umad_get_cas_names {names:?}"
    );
    let listed = sorted.contains(&env.device);
    match env.provider {
        Provider::Rxe => check!(listed, "{} missing from {sorted:?}", env.device),
        Provider::Siw => check!(!listed, "the RNIC {} in {sorted:?}", env.device),
    }
    Ok(Outcome::Passed)
}

/// `umad_get_ca_portguids` gives, for every CA of libibumad's list, the
/// port GUIDs `umad_get_ca` gives, by port number (entry 0: port 0, which
/// only a switch has); rxe's device is among the CAs, with a port GUID.
/// siw's RNIC answers both calls alike. A CA that does not exist and a name
/// with a NUL byte are errors.
pub fn umad_port_guids_are_those_of_the_ca(env: &TestEnv) -> TestResult {
    use rdma::umad::{ca_device_names, ca_port_guids, Ca};
    let mut seen = false;
    for name in ca_device_names()? {
        let (ca, guids) = (Ca::get(&name)?, ca_port_guids(&name)?);
        check!(
            guids == by_port(&ca),
            "{name}: umad_get_ca_portguids {guids:x?}, umad_get_ca's ports {:x?}",
            by_port(&ca)
        );
        if name == env.device {
            check!(guids.get(1).is_some_and(|&g| g != 0), "{name}: {guids:x?}");
            seen = true;
        }
    }
    match env.provider {
        Provider::Rxe => check!(seen, "{} is no umad CA", env.device),
        Provider::Siw => match (Ca::get(&env.device), ca_port_guids(&env.device)) {
            (Ok(ca), Ok(guids)) => check!(guids == by_port(&ca), "{ca:?}: {guids:x?}"),
            (Err(_), Err(_)) => {}
            (ca, guids) => fail!(
                "{}: umad_get_ca {ca:?}, umad_get_ca_portguids {guids:?}",
                env.device
            ),
        },
    }
    for bad in ["no-such-ca0", "rxe\0"] {
        check!(ca_port_guids(bad).is_err(), "{bad:?} has port GUIDs");
    }
    Ok(Outcome::Passed)
}

/// The port GUIDs of `ca` by port number, from 0 to its highest port (0
/// where it has no such port).
fn by_port(ca: &rdma::umad::Ca) -> Vec<u64> {
    let mut guids = vec![0u64; ca.num_ports as usize + 1];
    for p in &ca.ports {
        if let Some(g) = guids.get_mut(p.port_num as usize) {
            *g = p.port_guid;
        }
    }
    guids
}

rdma_tests::tests!(
    "sys::enumerate":
    device_list_has_the_test_device,
    every_device_opens_and_answers_queries,
    gid_table_holds_the_netdev_addresses,
    umad_ca_list_is_sorted_and_holds_the_ib_devices,
    umad_port_guids_are_those_of_the_ca,
);
