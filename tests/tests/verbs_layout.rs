//! The verbs structs that the rdma crate's XRC, thread- and parent-domain,
//! device-memory, WQ, flow, ESP action, counter and import wrappers fill or
//! read, and those of tag-matching SRQs, packet pacing and the CM's
//! InfiniBand paths (`ibv_path_data`, of `<infiniband/sa.h>`), and
//! `mlx5dv_qp_init_attr` with the two `<infiniband/mlx5dv.h>` constants
//! that the mlx5 glue writes out by hand (`rdma/src/mlx5.rs`),
//! checked against the C compiler's layout (`tests/c/verbs_layout.c`,
//! built by the build script against the installed `<infiniband/verbs.h>`):
//! each struct's size, each field's offset and size. No soft device runs
//! these wrappers, so this is what makes the first user on real hardware
//! meet structs built right.

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::mem::{offset_of, size_of};

use ibverbs_sys as sys;

#[repr(C)]
struct Entry {
    ty: *const c_char,
    field: *const c_char,
    offset: usize,
    size: usize,
}

#[repr(C)]
struct Value {
    name: *const c_char,
    value: u64,
}

#[link(name = "verbs_layout", kind = "static")]
extern "C" {
    static verbs_layout: [Entry; 0];
    static verbs_layout_len: usize;
    static mlx5dv_values: [Value; 0];
    static mlx5dv_values_len: usize;
}

/// (struct, field) -> (offset, size); field "" is the struct's size.
type Table = BTreeMap<(String, String), (usize, usize)>;

fn c_table() -> Table {
    // SAFETY: `verbs_layout` is an array of `verbs_layout_len` entries of
    // string literals and sizes (c/verbs_layout.c), alive for the program.
    let entries = unsafe { std::slice::from_raw_parts(verbs_layout.as_ptr(), verbs_layout_len) };
    let table: Table = entries
        .iter()
        .map(|e| {
            // SAFETY: NUL-terminated string literals.
            let (ty, field) = unsafe { (CStr::from_ptr(e.ty), CStr::from_ptr(e.field)) };
            (
                (ty.to_str().unwrap().into(), field.to_str().unwrap().into()),
                (e.offset, e.size),
            )
        })
        .collect();
    assert_eq!(
        table.len(),
        entries.len(),
        "the C table names an entry twice"
    );
    table
}

/// The size of the field `f` picks out.
fn field_size<T, F>(_f: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// Entries of struct `$t`: its size, then each field (`rust_name` or
/// `rust_name as "c_name"` where bindgen renamed a C keyword).
macro_rules! layout {
    ($table:ident, $t:ident: $($f:ident $(as $c:literal)?),+ $(,)?) => {
        $table.insert((stringify!($t).into(), String::new()), (0, size_of::<sys::$t>()));
        $(
            let name: &str = layout!(@name $f $(, $c)?);
            $table.insert(
                (stringify!($t).into(), name.into()),
                (offset_of!(sys::$t, $f), field_size(|s: &sys::$t| &s.$f)),
            );
        )+
    };
    // A struct of rdmacm-sys (`<infiniband/sa.h>`), under the C name.
    ($table:ident, cm :: $t:ident: $($f:ident),+ $(,)?) => {
        $table.insert((stringify!($t).into(), String::new()), (0, size_of::<rdmacm_sys::$t>()));
        $(
            $table.insert(
                (stringify!($t).into(), stringify!($f).into()),
                (offset_of!(rdmacm_sys::$t, $f), field_size(|s: &rdmacm_sys::$t| &s.$f)),
            );
        )+
    };
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident, $c:literal) => { $c };
}

fn rust_table() -> Table {
    let mut t = Table::new();
    layout!(t, ibv_xrcd_init_attr: comp_mask, fd, oflags);
    layout!(t, ibv_xrcd: context);
    layout!(t, ibv_srq_attr: max_wr, max_sge, srq_limit);
    layout!(t, ibv_srq_init_attr_ex: srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap);
    layout!(
        t,
        ibv_qp_init_attr_ex: send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
        comp_mask,
        pd,
        xrcd,
        send_ops_flags,
        max_tso_header
    );
    layout!(t, ibv_data_buf: addr, length);
    layout!(t, ibv_qp_open_attr: comp_mask, qp_num, xrcd, qp_context, qp_type);
    layout!(
        t,
        ibv_qp_attr: qp_state,
        path_mtu,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        ah_attr,
        pkey_index,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout
    );
    layout!(t, ibv_td_init_attr: comp_mask);
    layout!(t, ibv_td: context);
    layout!(t, ibv_parent_domain_init_attr: pd, td, comp_mask, alloc, free, pd_context);
    layout!(t, ibv_pd: context, handle);
    layout!(t, ibv_alloc_dm_attr: length, log_align_req, comp_mask);
    layout!(t, ibv_dm: context, memcpy_to_dm, memcpy_from_dm, comp_mask, handle);
    layout!(t, ibv_mr: context, pd, addr, length, handle, lkey, rkey);
    layout!(
        t,
        ibv_wq_init_attr: wq_context,
        wq_type,
        max_wr,
        max_sge,
        pd,
        cq,
        comp_mask,
        create_flags
    );
    layout!(t, ibv_wq_attr: attr_mask, wq_state, curr_wq_state, flags, flags_mask);
    layout!(t, ibv_wq: context, wq_num, post_recv);
    layout!(t, ibv_rwq_ind_table_init_attr: log_ind_tbl_size, ind_tbl, comp_mask);
    layout!(
        t,
        ibv_flow_attr: comp_mask,
        type_ as "type",
        size,
        priority,
        num_of_specs,
        port,
        flags
    );
    layout!(t, ibv_flow_eth_filter: dst_mac, src_mac, ether_type, vlan_tag);
    layout!(t, ibv_flow_spec_eth: type_ as "type", size, val, mask);
    layout!(t, ibv_flow_ipv4_filter: src_ip, dst_ip);
    layout!(t, ibv_flow_spec_ipv4: type_ as "type", size, val, mask);
    layout!(
        t,
        ibv_flow_ipv6_filter: src_ip,
        dst_ip,
        flow_label,
        next_hdr,
        traffic_class,
        hop_limit
    );
    layout!(t, ibv_flow_spec_ipv6: type_ as "type", size, val, mask);
    layout!(t, ibv_flow_tcp_udp_filter: dst_port, src_port);
    layout!(t, ibv_flow_spec_tcp_udp: type_ as "type", size, val, mask);
    layout!(t, ibv_flow_spec_counter_action: type_ as "type", size, counters);
    layout!(t, ibv_flow_spec_action_handle: type_ as "type", size, action);
    layout!(
        t,
        ibv_flow_action_esp_attr: esp_attr,
        keymat_proto,
        keymat_len,
        keymat_ptr,
        replay_proto,
        replay_len,
        replay_ptr,
        esp_encap,
        comp_mask,
        esn
    );
    layout!(t, ib_uverbs_flow_action_esp: spi, seq, tfc_pad, flags, hard_limit_pkts);
    layout!(
        t,
        ib_uverbs_flow_action_esp_keymat_aes_gcm: iv,
        iv_algo,
        salt,
        icv_len,
        key_len,
        aes_key
    );
    layout!(t, ib_uverbs_flow_action_esp_replay_bmp: size);
    layout!(t, ibv_flow: comp_mask, context, handle);
    layout!(t, ibv_counters_init_attr: comp_mask);
    layout!(t, ibv_counter_attach_attr: counter_desc, index, comp_mask);
    layout!(t, ibv_context: cmd_fd);
    layout!(t, ibv_tm_cap: max_num_tags, max_ops);
    layout!(t, ibv_ops_wr: wr_id, next, opcode, flags, tm);
    // The anonymous `tm` struct and its `add`, by path as C names them.
    for (name, offset, size) in [
        (
            "tm.unexpected_cnt",
            offset_of!(sys::ibv_ops_wr, tm.unexpected_cnt),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.unexpected_cnt),
        ),
        (
            "tm.handle",
            offset_of!(sys::ibv_ops_wr, tm.handle),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.handle),
        ),
        (
            "tm.add",
            offset_of!(sys::ibv_ops_wr, tm.add),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add),
        ),
        (
            "tm.add.recv_wr_id",
            offset_of!(sys::ibv_ops_wr, tm.add.recv_wr_id),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add.recv_wr_id),
        ),
        (
            "tm.add.sg_list",
            offset_of!(sys::ibv_ops_wr, tm.add.sg_list),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add.sg_list),
        ),
        (
            "tm.add.num_sge",
            offset_of!(sys::ibv_ops_wr, tm.add.num_sge),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add.num_sge),
        ),
        (
            "tm.add.tag",
            offset_of!(sys::ibv_ops_wr, tm.add.tag),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add.tag),
        ),
        (
            "tm.add.mask",
            offset_of!(sys::ibv_ops_wr, tm.add.mask),
            field_size(|s: &sys::ibv_ops_wr| &s.tm.add.mask),
        ),
    ] {
        t.insert(("ibv_ops_wr".into(), name.into()), (offset, size));
    }
    layout!(t, ibv_qp_rate_limit_attr: rate_limit, max_burst_sz, typical_pkt_sz, comp_mask);
    layout!(
        t,
        cm::ibv_path_record: service_id,
        dgid,
        sgid,
        dlid,
        slid,
        flowlabel_hoplimit,
        tclass,
        reversible_numpath,
        pkey,
        qosclass_sl,
        mtu,
        rate,
        packetlifetime,
        preference,
        reserved
    );
    layout!(t, cm::ibv_path_data: flags, reserved, path);
    #[cfg(has_ibv_reg_mr_ex)]
    {
        // rdma-core v65 and newer: extended registration, DMA handles,
        // completion counters.
        layout!(
            t,
            ibv_mr_init_attr: length,
            access,
            comp_mask,
            iova,
            addr,
            fd,
            fd_offset,
            dmah,
            buf
        );
        layout!(t, ibv_dmah_init_attr: comp_mask, cpu_id, ph, tph_mem_type);
        layout!(t, ibv_dmah: context);
        layout!(t, ibv_comp_cntr_caps: max_value, max_counters, supported_qp_attach_ops);
        layout!(t, ibv_comp_cntr: context, handle);
        layout!(t, ibv_comp_cntr_init_attr: comp_mask, type_ as "type", flags);
        layout!(t, ibv_qp_attach_comp_cntr_attr: comp_mask, op_mask);
    }
    #[cfg(has_umad_get_smi_gsi_pairs)]
    {
        // libibumad of rdma-core v56 and newer.
        use umad_sys as sys;
        layout!(t, umad_ca_pair: smi_name, smi_preferred_port, gsi_name, gsi_preferred_port);
    }
    // Tag matching: the device's capabilities and the completion's tag
    // info (`ExCompletion::tm_info`, `TmCompletion::Other`).
    layout!(t, ibv_tm_caps: max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge);
    t.insert(
        ("ibv_device_attr_ex".into(), "tm_caps".into()),
        (
            offset_of!(sys::ibv_device_attr_ex, tm_caps),
            field_size(|s: &sys::ibv_device_attr_ex| &s.tm_caps),
        ),
    );
    layout!(t, ibv_wc_tm_info: tag, priv_ as "priv");
    // mlx5dv_create_qp's vendor attributes (rdma/src/mlx5.rs, by hand).
    {
        use rdma::mlx5dv_abi as sys;
        layout!(t, mlx5dv_qp_init_attr: comp_mask, create_flags, dc_init_attr, send_ops_flags);
        layout!(t, mlx5dv_dc_init_attr: dc_type, dct_access_key);
    }
    t
}

/// `WrBatch::send_inline_list` hands a slice of `IoSlice` (ABI-compatible
/// with `iovec`) to `ibv_wr_set_inline_data_list` as `ibv_data_buf`s: the
/// two structs have one layout (the C side of `ibv_data_buf` is checked
/// by the table).
#[test]
fn an_io_slice_is_an_ibv_data_buf() {
    assert_eq!(
        size_of::<std::io::IoSlice<'_>>(),
        size_of::<sys::ibv_data_buf>()
    );
    assert_eq!(size_of::<libc::iovec>(), size_of::<sys::ibv_data_buf>());
    assert_eq!(
        std::mem::align_of::<libc::iovec>(),
        std::mem::align_of::<sys::ibv_data_buf>()
    );
    assert_eq!(
        offset_of!(libc::iovec, iov_base),
        offset_of!(sys::ibv_data_buf, addr)
    );
    assert_eq!(
        offset_of!(libc::iovec, iov_len),
        offset_of!(sys::ibv_data_buf, length)
    );
    // And an IoSlice reads as the iovec of its bytes.
    let bytes = *b"layout";
    let s = [std::io::IoSlice::new(&bytes[1..4])];
    // SAFETY: IoSlice is documented ABI-compatible with iovec on Unix.
    let v: &libc::iovec = unsafe { &*s.as_ptr().cast::<libc::iovec>() };
    assert_eq!(
        (v.iov_base as *const u8, v.iov_len),
        (bytes[1..].as_ptr(), 3)
    );
}

#[test]
fn every_struct_the_wrappers_fill_matches_the_c_compiler() {
    let c = c_table();
    let rust = rust_table();
    assert!(c.len() > 150, "the C table has {} entries", c.len());
    let mut wrong = Vec::new();
    for (key, want) in &c {
        match rust.get(key) {
            Some(got) if got == want => {}
            Some(got) => wrong.push(format!(
                "{}.{}: C (offset, size) {want:?}, Rust {got:?}",
                key.0, key.1
            )),
            None => wrong.push(format!("{}.{}: in the C table only", key.0, key.1)),
        }
    }
    for key in rust.keys().filter(|k| !c.contains_key(*k)) {
        wrong.push(format!("{}.{}: in the Rust table only", key.0, key.1));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_flow_spec_is_read_by_the_size_it_states() {
    // libibverbs walks a flow's specs by each one's `size`; the wrapper
    // writes size_of of the Rust struct, so it must be the C sizeof.
    let c = c_table();
    for ty in [
        "ibv_flow_spec_eth",
        "ibv_flow_spec_ipv4",
        "ibv_flow_spec_ipv6",
        "ibv_flow_spec_tcp_udp",
        "ibv_flow_spec_counter_action",
    ] {
        let (_, size) = c[&(ty.to_string(), String::new())];
        assert!(size > 0 && size < 256, "{ty}: {size}");
    }
    assert_eq!(
        c[&("ibv_flow_attr".into(), String::new())].1,
        size_of::<sys::ibv_flow_attr>()
    );
}

/// The mlx5dv.h constants that rdma/src/mlx5.rs writes out by hand (it
/// reaches libmlx5 through dlopen, without bindings) have the C values.
#[test]
fn the_mlx5dv_constants_have_the_c_values() {
    use rdma::mlx5dv_abi as dv;
    // SAFETY: `mlx5dv_values` is an array of `mlx5dv_values_len` entries
    // of string literals and values (c/verbs_layout.c).
    let entries = unsafe { std::slice::from_raw_parts(mlx5dv_values.as_ptr(), mlx5dv_values_len) };
    let c: BTreeMap<String, u64> = entries
        .iter()
        // SAFETY: NUL-terminated string literals.
        .map(|e| {
            (
                unsafe { CStr::from_ptr(e.name) }.to_str().unwrap().into(),
                e.value,
            )
        })
        .collect();
    let rust: BTreeMap<String, u64> = [
        (
            "MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
            dv::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
        ),
        (
            "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
            u64::from(dv::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(c, rust);
}
