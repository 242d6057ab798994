//! Prints the attributes of RDMA devices, as rdma-core's `ibv_devinfo` does:
//! the same fields, values and layout, so the two outputs can be diffed.
//!
//! ```text
//! devinfo [-d DEV] [-i PORT] [-l] [-v]
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv6Addr;
use std::process::ExitCode;

use clap::Parser;
use rdma::sys;
use rdma::{Context, Device, DeviceAttr, DeviceList, Gid, GidType, PortAttr, TransportType};

/// Print the attributes of RDMA devices (like ibv_devinfo).
#[derive(Parser, Debug)]
#[command(name = "devinfo")]
struct Args {
    /// Use IB device DEV (default: every device).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    ib_dev: Option<String>,
    /// Use port PORT of the device (default: every port).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = clap::value_parser!(u8).range(1..))]
    ib_port: Option<u8>,
    /// Print only the device names.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// Print every attribute of the device(s).
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let list = DeviceList::new().map_err(|e| format!("Failed to get IB devices list: {e}"))?;
    if args.list {
        let mut out = format!(
            "{} HCA{} found:\n",
            list.len(),
            if list.len() != 1 { "s" } else { "" }
        );
        for dev in list.iter() {
            let _ = writeln!(out, "\t{}", dev.name());
        }
        out.push('\n');
        return emit(&out);
    }
    let devices: Vec<Device<'_>> = match &args.ib_dev {
        Some(name) => vec![list
            .find(name)
            .ok_or_else(|| format!("IB device '{name}' wasn't found"))?],
        None if list.is_empty() => return Err("No IB devices found".into()),
        None => list.iter().collect(),
    };
    let mut failed = None;
    for dev in devices {
        // Like the C tool: a failing device does not stop the others.
        let mut out = String::new();
        let r = print_device(&mut out, dev, args.ib_port, args.verbose);
        emit(&out)?;
        if let Err(e) = r {
            eprintln!("{e}");
            failed = Some(format!("{}: {e}", dev.name()));
        }
    }
    match failed {
        Some(e) => Err(format!("devinfo failed: {e}")),
        None => Ok(()),
    }
}

/// Writes to stdout; a closed pipe is an error, not a panic.
fn emit(s: &str) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(s.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing the output failed: {e}"))
}

fn print_device(
    out: &mut String,
    dev: Device<'_>,
    only_port: Option<u8>,
    verbose: bool,
) -> Result<(), String> {
    let ctx = dev
        .open()
        .map_err(|e| format!("Failed to open device: {e}"))?;
    let attr = ctx
        .query_device()
        .map_err(|e| format!("Failed to query device props: {e}"))?;
    let a = &attr.as_raw().orig_attr;
    if only_port.is_some_and(|p| p > a.phys_port_cnt) {
        return Err("Invalid port requested for device".into());
    }
    let transport = dev.transport_type();
    let _ = writeln!(out, "hca_id:\t{}", dev.name());
    let _ = writeln!(
        out,
        "\ttransport:\t\t\t{} ({})",
        transport_str(transport),
        transport_code(transport)
    );
    let fw = attr.fw_ver();
    if !fw.is_empty() {
        let _ = writeln!(out, "\tfw_ver:\t\t\t\t{fw}");
    }
    let _ = writeln!(out, "\tnode_guid:\t\t\t{}", guid_str(attr.node_guid()));
    let _ = writeln!(
        out,
        "\tsys_image_guid:\t\t\t{}",
        guid_str(attr.sys_image_guid())
    );
    let _ = writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    let _ = writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    if let Some(board) = board_id(&ctx) {
        let _ = writeln!(out, "\tboard_id:\t\t\t{board}");
    }
    let _ = writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if verbose {
        print_device_verbose(out, &ctx, &attr);
    }
    for port in 1..=a.phys_port_cnt {
        if only_port.is_some_and(|p| p != port) {
            continue;
        }
        let pa = ctx
            .query_port(port)
            .map_err(|e| format!("Failed to query port {port} props: {e}"))?;
        print_port(out, &ctx, port, &pa, transport, verbose)?;
        out.push('\n');
    }
    Ok(())
}

/// The `board_id` sysfs attribute, without its newline, if it has one.
fn board_id(ctx: &Context) -> Option<String> {
    let s = std::fs::read(ctx.ibdev_path().join("board_id")).ok()?;
    let s = String::from_utf8_lossy(&s);
    let s = s.strip_suffix('\n').unwrap_or(&s);
    (!s.is_empty()).then(|| s.to_string())
}

fn print_device_verbose(out: &mut String, ctx: &Context, attr: &DeviceAttr) {
    let x = attr.as_raw();
    let a = &x.orig_attr;
    let mut line = |name: &str, tabs: &str, v: String| {
        let _ = writeln!(out, "\t{name}:{tabs}{v}");
    };
    line("max_mr_size", "\t\t\t", format!("0x{:x}", a.max_mr_size));
    line(
        "page_size_cap",
        "\t\t\t",
        format!("0x{:x}", a.page_size_cap),
    );
    line("max_qp", "\t\t\t\t", a.max_qp.to_string());
    line("max_qp_wr", "\t\t\t", a.max_qp_wr.to_string());
    line(
        "device_cap_flags",
        "\t\t",
        format!("0x{:08x}", a.device_cap_flags),
    );
    flag_lines(
        out,
        u64::from(a.device_cap_flags),
        DEVICE_CAP_FLAGS,
        u64::from(u32::MAX),
    );
    let mut line = |name: &str, tabs: &str, v: String| {
        let _ = writeln!(out, "\t{name}:{tabs}{v}");
    };
    line("max_sge", "\t\t\t", a.max_sge.to_string());
    line("max_sge_rd", "\t\t\t", a.max_sge_rd.to_string());
    line("max_cq", "\t\t\t\t", a.max_cq.to_string());
    line("max_cqe", "\t\t\t", a.max_cqe.to_string());
    line("max_mr", "\t\t\t\t", a.max_mr.to_string());
    line("max_pd", "\t\t\t\t", a.max_pd.to_string());
    line("max_qp_rd_atom", "\t\t\t", a.max_qp_rd_atom.to_string());
    line("max_ee_rd_atom", "\t\t\t", a.max_ee_rd_atom.to_string());
    line("max_res_rd_atom", "\t\t", a.max_res_rd_atom.to_string());
    line(
        "max_qp_init_rd_atom",
        "\t\t",
        a.max_qp_init_rd_atom.to_string(),
    );
    line(
        "max_ee_init_rd_atom",
        "\t\t",
        a.max_ee_init_rd_atom.to_string(),
    );
    line(
        "atomic_cap",
        "\t\t\t",
        format!("{} ({})", atomic_cap_str(a.atomic_cap), a.atomic_cap),
    );
    line("max_ee", "\t\t\t\t", a.max_ee.to_string());
    line("max_rdd", "\t\t\t", a.max_rdd.to_string());
    line("max_mw", "\t\t\t\t", a.max_mw.to_string());
    line("max_raw_ipv6_qp", "\t\t", a.max_raw_ipv6_qp.to_string());
    line("max_raw_ethy_qp", "\t\t", a.max_raw_ethy_qp.to_string());
    line("max_mcast_grp", "\t\t\t", a.max_mcast_grp.to_string());
    line(
        "max_mcast_qp_attach",
        "\t\t",
        a.max_mcast_qp_attach.to_string(),
    );
    line(
        "max_total_mcast_qp_attach",
        "\t",
        a.max_total_mcast_qp_attach.to_string(),
    );
    line("max_ah", "\t\t\t\t", a.max_ah.to_string());
    line("max_fmr", "\t\t\t", a.max_fmr.to_string());
    if a.max_fmr != 0 {
        line("max_map_per_fmr", "\t\t", a.max_map_per_fmr.to_string());
    }
    line("max_srq", "\t\t\t", a.max_srq.to_string());
    if a.max_srq != 0 {
        line("max_srq_wr", "\t\t\t", a.max_srq_wr.to_string());
        line("max_srq_sge", "\t\t\t", a.max_srq_sge.to_string());
    }
    line("max_pkeys", "\t\t\t", a.max_pkeys.to_string());
    line(
        "local_ca_ack_delay",
        "\t\t",
        a.local_ca_ack_delay.to_string(),
    );

    // On-demand paging.
    let odp = &x.odp_caps;
    out.push_str("\tgeneral_odp_caps:\n");
    flag_lines(out, odp.general_caps, ODP_GENERAL_CAPS, u64::MAX);
    for (name, caps) in [
        ("rc", odp.per_transport_caps.rc_odp_caps),
        ("uc", odp.per_transport_caps.uc_odp_caps),
        ("ud", odp.per_transport_caps.ud_odp_caps),
        ("xrc", x.xrc_odp_caps),
    ] {
        let _ = writeln!(out, "\t{name}_odp_caps:");
        if caps == 0 {
            out.push_str("\t\t\t\t\tNO SUPPORT\n");
        } else {
            let mut names = ODP_TRANSPORT_CAPS.to_vec();
            if loaded_release().is_some_and(|r| r >= ODP_FLUSH_RELEASE) {
                names.extend_from_slice(ODP_TRANSPORT_CAPS_61);
            }
            flag_lines(out, u64::from(caps), &names, u64::from(u32::MAX));
        }
    }
    if x.completion_timestamp_mask != 0 {
        let _ = writeln!(
            out,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            x.completion_timestamp_mask
        );
    } else {
        out.push_str("\tcompletion_timestamp_mask not supported\n");
    }
    if x.hca_core_clock != 0 {
        let _ = writeln!(out, "\thca_core_clock:\t\t\t{}kHZ", x.hca_core_clock);
    } else {
        out.push_str("\tcore clock not supported\n");
    }
    if x.raw_packet_caps != 0 {
        out.push_str("\traw packet caps:\n");
        // Only the known bits, without an "Unknown flags" line, as in C.
        for (bit, name) in RAW_PACKET_CAPS {
            if u64::from(x.raw_packet_caps) & bit != 0 {
                let _ = writeln!(out, "\t\t\t\t\t{name}");
            }
        }
    }
    let _ = writeln!(
        out,
        "\tdevice_cap_flags_ex:\t\t0x{:X}",
        x.device_cap_flags_ex
    );
    // The extended flags are the upper 32 bits; the lower ones were printed above.
    flag_lines(
        out,
        x.device_cap_flags_ex & 0xffff_ffff_0000_0000,
        DEVICE_CAP_FLAGS_EX,
        u64::MAX,
    );

    out.push_str("\ttso_caps:\n");
    let _ = writeln!(out, "\t\tmax_tso:\t\t\t{}", x.tso_caps.max_tso as i32);
    if x.tso_caps.max_tso != 0 {
        supported_qpts(out, x.tso_caps.supported_qpts);
    }
    let rss = &x.rss_caps;
    out.push_str("\trss_caps:\n");
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        rss.max_rwq_indirection_tables
    );
    let _ = writeln!(
        out,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        rss.max_rwq_indirection_table_size
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_function:\t\t\t\t0x{:x}",
        rss.rx_hash_function
    );
    let _ = writeln!(
        out,
        "\t\trx_hash_fields_mask:\t\t\t\t0x{:X}",
        rss.rx_hash_fields_mask
    );
    if rss.supported_qpts != 0 {
        supported_qpts(out, rss.supported_qpts);
    }
    let _ = writeln!(out, "\tmax_wq_type_rq:\t\t\t{}", x.max_wq_type_rq);
    let pp = &x.packet_pacing_caps;
    out.push_str("\tpacket_pacing_caps:\n");
    let _ = writeln!(out, "\t\tqp_rate_limit_min:\t{}kbps", pp.qp_rate_limit_min);
    let _ = writeln!(out, "\t\tqp_rate_limit_max:\t{}kbps", pp.qp_rate_limit_max);
    if pp.qp_rate_limit_max != 0 {
        supported_qpts(out, pp.supported_qpts);
    }
    let tm = &x.tm_caps;
    if tm.max_num_tags != 0 {
        let _ = writeln!(out, "\tmax_rndv_hdr_size:\t\t{}", tm.max_rndv_hdr_size);
        let _ = writeln!(out, "\tmax_num_tags:\t\t\t{}", tm.max_num_tags);
        let _ = writeln!(out, "\tmax_ops:\t\t\t{}", tm.max_ops);
        let _ = writeln!(out, "\tmax_sge:\t\t\t{}", tm.max_sge);
        out.push_str("\tflags:\n");
        if tm.flags & sys::IBV_TM_CAP_RC != 0 {
            out.push_str("\t\t\t\t\tIBV_TM_CAP_RC\n");
        }
    } else {
        out.push_str("\ttag matching not supported\n");
    }
    let cqm = &x.cq_mod_caps;
    if cqm.max_cq_count != 0 && cqm.max_cq_period != 0 {
        out.push_str("\n\tcq moderation caps:\n");
        let _ = writeln!(out, "\t\tmax_cq_count:\t{}", cqm.max_cq_count);
        let _ = writeln!(out, "\t\tmax_cq_period:\t{} us\n", cqm.max_cq_period);
    }
    if x.max_dm_size != 0 {
        let _ = writeln!(
            out,
            "\tmaximum available device memory:\t{}Bytes\n",
            x.max_dm_size
        );
    }
    let _ = writeln!(out, "\tnum_comp_vectors:\t\t{}", ctx.num_comp_vectors());
}

fn print_port(
    out: &mut String,
    ctx: &Context,
    port: u8,
    pa: &PortAttr,
    transport: TransportType,
    verbose: bool,
) -> Result<(), String> {
    let p = pa.as_raw();
    let _ = writeln!(out, "\t\tport:\t{port}");
    let _ = writeln!(
        out,
        "\t\t\tstate:\t\t\t{} ({})",
        port_state_str(p.state),
        p.state
    );
    let _ = writeln!(
        out,
        "\t\t\tmax_mtu:\t\t{} ({})",
        mtu_str(p.max_mtu),
        p.max_mtu
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_mtu:\t\t{} ({})",
        mtu_str(p.active_mtu),
        p.active_mtu
    );
    let _ = writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(out, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(out, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
    let _ = writeln!(out, "\t\t\tlink_layer:\t\t{}", link_layer_str(p.link_layer));
    if !verbose {
        return Ok(());
    }
    let _ = writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
    let _ = writeln!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags);
    let _ = writeln!(out, "\t\t\tport_cap_flags2:\t0x{:04x}", p.port_cap_flags2);
    let _ = writeln!(
        out,
        "\t\t\tmax_vl_num:\t\t{} ({})",
        vl_str(p.max_vl_num),
        p.max_vl_num
    );
    let _ = writeln!(out, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", p.bad_pkey_cntr);
    let _ = writeln!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr);
    let _ = writeln!(out, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
    let _ = writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
    let _ = writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
    let _ = writeln!(out, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
    let _ = writeln!(out, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
    let _ = writeln!(
        out,
        "\t\t\tactive_width:\t\t{}X ({})",
        width_str(p.active_width),
        p.active_width
    );
    let _ = writeln!(
        out,
        "\t\t\tactive_speed:\t\t{} ({})",
        speed_str(p.active_speed),
        p.active_speed
    );
    if transport == TransportType::Ib {
        let _ = writeln!(
            out,
            "\t\t\tphys_state:\t\t{} ({})",
            phys_state_str(p.phys_state),
            p.phys_state
        );
    }
    let ethernet = u32::from(p.link_layer) == sys::IBV_LINK_LAYER_ETHERNET;
    for index in 0..p.gid_tbl_len.max(0) as u32 {
        let gid = ctx
            .query_gid(port, index)
            .map_err(|e| format!("Failed to query gid to port {port}, index {index}: {e}"))?;
        // ibv_devinfo asks for the type separately and skips the line when
        // that query fails.
        // (Past index 255 no entry can be named: as a failed query.)
        let Ok(index8) = u8::try_from(index) else {
            continue;
        };
        let v2 = match ctx.query_gid_entry(port, index8) {
            Ok(None) => false,
            Ok(Some(e)) => !matches!(e.gid_type, GidType::Ib | GidType::Iwarp | GidType::RoceV1),
            Err(_) => continue,
        };
        // An entry whose interface ID is zero is empty, for ibv_devinfo.
        if gid.interface_id() == 0 {
            continue;
        }
        let suffix = match (ethernet, v2) {
            (false, _) => "",
            (true, false) => ", RoCE v1",
            (true, true) => ", RoCE v2",
        };
        let text = if v2 { inet_ntop(gid) } else { gid.to_string() };
        let _ = writeln!(out, "\t\t\tGID[{index:3}]:\t\t{text}{suffix}");
    }
    Ok(())
}

/// A GID as glibc's `inet_ntop(AF_INET6)` prints it. Rust's `Ipv6Addr`
/// display agrees except for the deprecated IPv4-compatible form
/// (`::a.b.c.d`), which glibc still uses.
fn inet_ntop(gid: Gid) -> String {
    let b = gid.0;
    let words_zero = |n: usize| b[..2 * n].iter().all(|&x| x == 0);
    if words_zero(6) && (b[12] != 0 || b[13] != 0) {
        return format!("::{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
    }
    Ipv6Addr::from(b).to_string()
}

/// Prints one line per known flag set in `v`, then the unknown ones within `mask`.
fn flag_lines(out: &mut String, v: u64, names: &[(u64, &str)], mask: u64) {
    let mut known = 0;
    for &(bit, name) in names {
        known |= bit;
        if v & bit != 0 {
            let _ = writeln!(out, "\t\t\t\t\t{name}");
        }
    }
    let unknown = v & !known & mask;
    if unknown != 0 {
        let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{unknown:X}");
    }
}

fn supported_qpts(out: &mut String, qpts: u32) {
    out.push_str("\t\tsupported_qp:\n");
    let raw = 1u32 << sys::IBV_QPT_RAW_PACKET;
    let ud = 1u32 << sys::IBV_QPT_UD;
    if qpts & raw != 0 {
        out.push_str("\t\t\t\t\tSUPPORT_RAW_PACKET\n");
    }
    if qpts & ud != 0 {
        out.push_str("\t\t\t\t\tSUPPORT_UD\n");
    }
    if qpts & !(raw | ud) != 0 {
        let _ = writeln!(out, "\t\t\t\t\tUnknown flags: 0x{:X}", qpts & !(raw | ud));
    }
}

const DEVICE_CAP_FLAGS: &[(u64, &str)] = &[
    (sys::IBV_DEVICE_RESIZE_MAX_WR as u64, "RESIZE_MAX_WR"),
    (sys::IBV_DEVICE_BAD_PKEY_CNTR as u64, "BAD_PKEY_CNTR"),
    (sys::IBV_DEVICE_BAD_QKEY_CNTR as u64, "BAD_QKEY_CNTR"),
    (sys::IBV_DEVICE_RAW_MULTI as u64, "RAW_MULTI"),
    (sys::IBV_DEVICE_AUTO_PATH_MIG as u64, "AUTO_PATH_MIG"),
    (sys::IBV_DEVICE_CHANGE_PHY_PORT as u64, "CHANGE_PHY_PORT"),
    (
        sys::IBV_DEVICE_UD_AV_PORT_ENFORCE as u64,
        "UD_AV_PORT_ENFORCE",
    ),
    (
        sys::IBV_DEVICE_CURR_QP_STATE_MOD as u64,
        "CURR_QP_STATE_MOD",
    ),
    (sys::IBV_DEVICE_SHUTDOWN_PORT as u64, "SHUTDOWN_PORT"),
    (sys::IBV_DEVICE_INIT_TYPE as u64, "INIT_TYPE"),
    (
        sys::IBV_DEVICE_PORT_ACTIVE_EVENT as u64,
        "PORT_ACTIVE_EVENT",
    ),
    (sys::IBV_DEVICE_SYS_IMAGE_GUID as u64, "SYS_IMAGE_GUID"),
    (sys::IBV_DEVICE_RC_RNR_NAK_GEN as u64, "RC_RNR_NAK_GEN"),
    (sys::IBV_DEVICE_SRQ_RESIZE as u64, "SRQ_RESIZE"),
    (sys::IBV_DEVICE_N_NOTIFY_CQ as u64, "N_NOTIFY_CQ"),
    (sys::IBV_DEVICE_MEM_WINDOW as u64, "MEM_WINDOW"),
    (sys::IBV_DEVICE_UD_IP_CSUM as u64, "UD_IP_CSUM"),
    (sys::IBV_DEVICE_XRC as u64, "XRC"),
    (
        sys::IBV_DEVICE_MEM_MGT_EXTENSIONS as u64,
        "MEM_MGT_EXTENSIONS",
    ),
    (
        sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A as u64,
        "MEM_WINDOW_TYPE_2A",
    ),
    (
        sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B as u64,
        "MEM_WINDOW_TYPE_2B",
    ),
    (sys::IBV_DEVICE_RC_IP_CSUM as u64, "RC_IP_CSUM"),
    (sys::IBV_DEVICE_RAW_IP_CSUM as u64, "RAW_IP_CSUM"),
    (
        sys::IBV_DEVICE_MANAGED_FLOW_STEERING as u64,
        "MANAGED_FLOW_STEERING",
    ),
];

const DEVICE_CAP_FLAGS_EX: &[(u64, &str)] = &[
    (sys::IBV_DEVICE_RAW_SCATTER_FCS, "RAW_SCATTER_FCS"),
    (
        sys::IBV_DEVICE_PCI_WRITE_END_PADDING,
        "PCI_WRITE_END_PADDING",
    ),
];

const ODP_GENERAL_CAPS: &[(u64, &str)] = &[
    (sys::IBV_ODP_SUPPORT as u64, "ODP_SUPPORT"),
    (sys::IBV_ODP_SUPPORT_IMPLICIT as u64, "ODP_SUPPORT_IMPLICIT"),
];

const ODP_TRANSPORT_CAPS: &[(u64, &str)] = &[
    (sys::IBV_ODP_SUPPORT_SEND as u64, "SUPPORT_SEND"),
    (sys::IBV_ODP_SUPPORT_RECV as u64, "SUPPORT_RECV"),
    (sys::IBV_ODP_SUPPORT_WRITE as u64, "SUPPORT_WRITE"),
    (sys::IBV_ODP_SUPPORT_READ as u64, "SUPPORT_READ"),
    (sys::IBV_ODP_SUPPORT_ATOMIC as u64, "SUPPORT_ATOMIC"),
    (sys::IBV_ODP_SUPPORT_SRQ_RECV as u64, "SUPPORT_SRQ"),
];

/// The release whose `ibv_devinfo` first names the ODP transport bits of
/// RDMA FLUSH and ATOMIC WRITE; before it, it prints them as unknown flags.
const ODP_FLUSH_RELEASE: u32 = 61;

/// `IBV_ODP_SUPPORT_FLUSH` (1 << 6) and `IBV_ODP_SUPPORT_ATOMIC_WRITE`
/// (1 << 7), by value: the headers of older releases lack them.
const ODP_TRANSPORT_CAPS_61: &[(u64, &str)] =
    &[(1 << 6, "SUPPORT_FLUSH"), (1 << 7, "SUPPORT_ATOMIC_WRITE")];

/// The rdma-core release of the libibverbs this process has mapped, from
/// its file name in /proc/self/maps (`libibverbs.so.1.14.44.0`: soname 1,
/// ABI 14, release 44); `None` where it cannot be told.
fn loaded_release() -> Option<u32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let file = l.split_whitespace().last()?.rsplit('/').next()?;
        let mut parts = file.strip_prefix("libibverbs.so.")?.split('.');
        let (_soname, _abi) = (parts.next()?, parts.next()?);
        parts.next()?.parse().ok()
    })
}

const RAW_PACKET_CAPS: &[(u64, &str)] = &[
    (
        sys::IBV_RAW_PACKET_CAP_CVLAN_STRIPPING as u64,
        "C-VLAN stripping offload",
    ),
    (
        sys::IBV_RAW_PACKET_CAP_SCATTER_FCS as u64,
        "Scatter FCS offload",
    ),
    (sys::IBV_RAW_PACKET_CAP_IP_CSUM as u64, "IP csum offload"),
    (sys::IBV_RAW_PACKET_CAP_DELAY_DROP as u64, "Delay drop"),
];

/// A GUID as four groups of four hex digits.
fn guid_str(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn transport_code(t: TransportType) -> i32 {
    match t {
        TransportType::Ib => sys::IBV_TRANSPORT_IB,
        TransportType::Iwarp => sys::IBV_TRANSPORT_IWARP,
        TransportType::Usnic => sys::IBV_TRANSPORT_USNIC,
        TransportType::UsnicUdp => sys::IBV_TRANSPORT_USNIC_UDP,
        TransportType::Unspecified => sys::IBV_TRANSPORT_UNSPECIFIED,
        TransportType::Other(n) => n,
    }
}

fn transport_str(t: TransportType) -> &'static str {
    match t {
        TransportType::Ib => "InfiniBand",
        TransportType::Iwarp => "iWARP",
        TransportType::Usnic => "usNIC",
        TransportType::UsnicUdp => "usNIC UDP",
        TransportType::Unspecified => "unspecified",
        TransportType::Other(_) => "invalid transport",
    }
}

fn port_state_str(s: sys::ibv_port_state) -> &'static str {
    match s {
        sys::IBV_PORT_DOWN => "PORT_DOWN",
        sys::IBV_PORT_INIT => "PORT_INIT",
        sys::IBV_PORT_ARMED => "PORT_ARMED",
        sys::IBV_PORT_ACTIVE => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

fn atomic_cap_str(c: sys::ibv_atomic_cap) -> &'static str {
    match c {
        sys::IBV_ATOMIC_NONE => "ATOMIC_NONE",
        sys::IBV_ATOMIC_HCA => "ATOMIC_HCA",
        sys::IBV_ATOMIC_GLOB => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

fn mtu_str(m: sys::ibv_mtu) -> &'static str {
    match m {
        sys::IBV_MTU_256 => "256",
        sys::IBV_MTU_512 => "512",
        sys::IBV_MTU_1024 => "1024",
        sys::IBV_MTU_2048 => "2048",
        sys::IBV_MTU_4096 => "4096",
        _ => "invalid MTU",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn link_layer_str(l: u8) -> &'static str {
    match u32::from(l) {
        sys::IBV_LINK_LAYER_UNSPECIFIED => "Unspecified",
        sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_print_like_inet_ntop() {
        let g = |s: &str| Gid::from(s.parse::<Ipv6Addr>().unwrap());
        assert_eq!(inet_ntop(g("::ffff:192.0.2.1")), "::ffff:192.0.2.1");
        assert_eq!(inet_ntop(g("fd00:1::1")), "fd00:1::1");
        assert_eq!(inet_ntop(g("::c000:201")), "::192.0.2.1");
        assert_eq!(inet_ntop(g("::1")), "::1");
        assert_eq!(inet_ntop(g("fe80::1:0:0:2")), "fe80::1:0:0:2");
    }

    #[test]
    fn guids_print_in_four_groups() {
        assert_eq!(guid_str(0x0011_2233_4455_6677), "0011:2233:4455:6677");
    }
}
