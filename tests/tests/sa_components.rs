//! The ComponentMask tables of `rdma::mad::sa` (`SaRecord::COMPONENTS`)
//! against libibmad's field tables, the C reference.
//!
//! For each record field libibmad describes (`IB_SA_NR_*`, `IB_SA_PR_*`,
//! `IB_SA_MCM_*`, `IB_SA_SR_*`, and PortInfo's `IB_PORT_*` 32 bits into a
//! PortInfoRecord), the components of the mask bits that name that field
//! lie exactly where libibmad's layout puts it: same first bit, same width
//! (one component, or for ServiceRecord's ServiceData, libibmad's single
//! 64-byte field, the 30 components of its elements end to end). The
//! components no libibmad field covers are named, record by record.
//!
//! libibmad has no LinkRecord, InformInfoRecord or PortInfoRecord header
//! fields; the unit tests of `rdma::mad::sa` check those tables against the
//! specification's layout (every table tiles its record).

#![cfg(has_libibmad)]

use rdma::mad::sa::{
    McMemberRecord, McMemberRecordMask as Mcm, NodeRecord, NodeRecordMask as Nr, PathRecord,
    PathRecordMask as Pr, PortInfoRecord, PortInfoRecordMask as Pir, SaRecord, ServiceRecord,
    ServiceRecordMask as Sr,
};
use rdma_tests::libibmad::{cached_layout, field_name, MAD_FIELDS as F};

/// Checks each (libibmad field, mask) of `fields` against `R`'s table, the
/// field `base` bits into the record; returns the names of the components
/// no field covers.
fn check<R: SaRecord>(fields: &[(F::Type, u64)], base: usize) -> Vec<&'static str> {
    let table = R::COMPONENTS;
    let mut covered = 0u64;
    for &(id, mask) in fields {
        let l = cached_layout(id);
        let comps: Vec<_> = (0..table.len())
            .filter(|i| mask >> i & 1 != 0)
            .map(|i| table[i])
            .collect();
        assert!(
            !comps.is_empty() && mask >> table.len() == 0,
            "{}: mask {mask:#x} of {} is not in its table of {}",
            R::NAME,
            field_name(id),
            table.len()
        );
        for w in comps.windows(2) {
            assert_eq!(
                w[1].offset as usize,
                w[0].end(),
                "{}: the components of {} are not end to end",
                R::NAME,
                field_name(id)
            );
        }
        let first = comps[0].offset as usize;
        let width = comps.last().map_or(0, |c| c.end()) - first;
        assert_eq!(
            (first, width),
            (base + l.bit_offset, l.bits),
            "{}: component(s) {:?} (bit offset, width) against libibmad's {}",
            R::NAME,
            comps.iter().map(|c| c.name).collect::<Vec<_>>(),
            field_name(id)
        );
        assert_eq!(
            covered & mask,
            0,
            "{}: {} overlaps",
            R::NAME,
            field_name(id)
        );
        covered |= mask;
    }
    table
        .iter()
        .enumerate()
        .filter(|(i, _)| covered >> i & 1 == 0)
        .map(|(_, c)| c.name)
        .collect()
}

/// Every libibmad field of `ids` is one of `fields`.
fn covers(what: &str, fields: &[(F::Type, u64)], ids: impl IntoIterator<Item = F::Type>) {
    for id in ids {
        assert!(
            fields.iter().any(|f| f.0 == id),
            "{what}: libibmad field {} has no mask bit in the test",
            field_name(id)
        );
    }
}

#[test]
fn node_record_components_are_libibmads_fields() {
    let f = [
        (F::IB_SA_NR_LID_F, Nr::LID),
        (F::IB_SA_NR_BASEVER_F, Nr::BASE_VERSION),
        (F::IB_SA_NR_CLASSVER_F, Nr::CLASS_VERSION),
        (F::IB_SA_NR_TYPE_F, Nr::NODE_TYPE),
        (F::IB_SA_NR_NPORTS_F, Nr::NUM_PORTS),
        (F::IB_SA_NR_SYSTEM_GUID_F, Nr::SYSTEM_IMAGE_GUID),
        (F::IB_SA_NR_GUID_F, Nr::NODE_GUID),
        (F::IB_SA_NR_PORT_GUID_F, Nr::PORT_GUID),
        (F::IB_SA_NR_PARTITION_CAP_F, Nr::PARTITION_CAP),
        (F::IB_SA_NR_DEVID_F, Nr::DEVICE_ID),
        (F::IB_SA_NR_REVISION_F, Nr::REVISION),
        (F::IB_SA_NR_LOCAL_PORT_F, Nr::LOCAL_PORT_NUM),
        (F::IB_SA_NR_VENDORID_F, Nr::VENDOR_ID),
        (F::IB_SA_NR_NODEDESC_F, Nr::NODE_DESCRIPTION),
    ]
    .map(|(id, m)| (id, m.bits()));
    covers("NodeRecord", &f, F::IB_SA_NR_FIRST_F..F::IB_SA_NR_LAST_F);
    assert_eq!(check::<NodeRecord>(&f, 0), ["Reserved"]);
}

#[test]
fn path_record_components_are_libibmads_fields() {
    let f = [
        (F::IB_SA_PR_DGID_F, Pr::DGID),
        (F::IB_SA_PR_SGID_F, Pr::SGID),
        (F::IB_SA_PR_DLID_F, Pr::DLID),
        (F::IB_SA_PR_SLID_F, Pr::SLID),
        (F::IB_SA_PR_NPATH_F, Pr::NUMB_PATH),
        (F::IB_SA_PR_SL_F, Pr::SL),
    ]
    .map(|(id, m)| (id, m.bits()));
    covers("PathRecord", &f, F::IB_SA_PR_DGID_F..=F::IB_SA_PR_SL_F);
    assert_eq!(
        check::<PathRecord>(&f, 0),
        [
            "ServiceID (upper 32 bits)",
            "ServiceID (lower 32 bits)",
            "RawTraffic",
            "Reserved",
            "FlowLabel",
            "HopLimit",
            "TClass",
            "Reversible",
            "P_Key",
            "QoSClass",
            "MtuSelector",
            "MTU",
            "RateSelector",
            "Rate",
            "PacketLifeTimeSelector",
            "PacketLifeTime",
            "Preference",
        ]
    );
}

#[test]
fn mc_member_record_components_are_libibmads_fields() {
    let f = [
        (F::IB_SA_MCM_MGID_F, Mcm::MGID),
        (F::IB_SA_MCM_PORTGID_F, Mcm::PORT_GID),
        (F::IB_SA_MCM_QKEY_F, Mcm::QKEY),
        (F::IB_SA_MCM_MLID_F, Mcm::MLID),
        (F::IB_SA_MCM_MTU_F, Mcm::MTU),
        (F::IB_SA_MCM_TCLASS_F, Mcm::TCLASS),
        (F::IB_SA_MCM_PKEY_F, Mcm::PKEY),
        (F::IB_SA_MCM_RATE_F, Mcm::RATE),
        (F::IB_SA_MCM_SL_F, Mcm::SL),
        (F::IB_SA_MCM_FLOW_LABEL_F, Mcm::FLOW_LABEL),
        (F::IB_SA_MCM_JOIN_STATE_F, Mcm::JOIN_STATE),
        (F::IB_SA_MCM_PROXY_JOIN_F, Mcm::PROXY_JOIN),
    ]
    .map(|(id, m)| (id, m.bits()));
    covers(
        "MCMemberRecord",
        &f,
        F::IB_SA_MCM_MGID_F..=F::IB_SA_MCM_PROXY_JOIN_F,
    );
    assert_eq!(
        check::<McMemberRecord>(&f, 0),
        [
            "MTUSelector",
            "RateSelector",
            "PacketLifeTimeSelector",
            "PacketLifeTime",
            "HopLimit",
            "Scope",
        ]
    );
}

#[test]
fn service_record_components_are_libibmads_fields() {
    let f = [
        (F::IB_SA_SR_ID_F, Sr::SERVICE_ID),
        (F::IB_SA_SR_GID_F, Sr::SERVICE_GID),
        (F::IB_SA_SR_PKEY_F, Sr::SERVICE_PKEY),
        (F::IB_SA_SR_LEASE_F, Sr::SERVICE_LEASE),
        (F::IB_SA_SR_KEY_F, Sr::SERVICE_KEY),
        (F::IB_SA_SR_NAME_F, Sr::SERVICE_NAME),
        // One libibmad field for the four arrays, 30 components.
        (
            F::IB_SA_SR_DATA_F,
            Sr::SERVICE_DATA8 | Sr::SERVICE_DATA16 | Sr::SERVICE_DATA32 | Sr::SERVICE_DATA64,
        ),
    ]
    .map(|(id, m)| (id, m.bits()));
    covers("ServiceRecord", &f, F::IB_SA_SR_ID_F..=F::IB_SA_SR_DATA_F);
    assert_eq!(check::<ServiceRecord>(&f, 0), ["Reserved"]);
    // Elements of each array, relative to libibmad's ServiceData: 8-bit
    // element 0 and 15, 16-bit 0, 32-bit 3, 64-bit 1.
    let c = ServiceRecord::COMPONENTS;
    let data = cached_layout(F::IB_SA_SR_DATA_F).bit_offset;
    for (bit, off, w) in [
        (7, 0, 8),
        (22, 120, 8),
        (23, 128, 16),
        (34, 352, 32),
        (36, 448, 64),
    ] {
        assert_eq!(
            (c[bit].offset as usize, c[bit].width as usize),
            (data + off, w),
            "{}",
            c[bit].name
        );
    }
}

#[test]
fn port_info_record_components_are_libibmads_port_info_fields() {
    let f = [
        (F::IB_PORT_MKEY_F, Pir::M_KEY),
        (F::IB_PORT_GID_PREFIX_F, Pir::GID_PREFIX),
        (F::IB_PORT_LID_F, Pir::BASE_LID),
        (F::IB_PORT_SMLID_F, Pir::MASTER_SM_LID),
        (F::IB_PORT_CAPMASK_F, Pir::CAPABILITY_MASK),
        (F::IB_PORT_DIAG_F, Pir::DIAG_CODE),
        (F::IB_PORT_MKEY_LEASE_F, Pir::M_KEY_LEASE_PERIOD),
        (F::IB_PORT_LOCAL_PORT_F, Pir::LOCAL_PORT_NUM),
        (F::IB_PORT_LINK_WIDTH_ENABLED_F, Pir::LINK_WIDTH_ENABLED),
        (F::IB_PORT_LINK_WIDTH_SUPPORTED_F, Pir::LINK_WIDTH_SUPPORTED),
        (F::IB_PORT_LINK_WIDTH_ACTIVE_F, Pir::LINK_WIDTH_ACTIVE),
        (F::IB_PORT_LINK_SPEED_SUPPORTED_F, Pir::LINK_SPEED_SUPPORTED),
        (F::IB_PORT_STATE_F, Pir::PORT_STATE),
        (F::IB_PORT_PHYS_STATE_F, Pir::PORT_PHYSICAL_STATE),
        (F::IB_PORT_LINK_DOWN_DEF_F, Pir::LINK_DOWN_DEFAULT_STATE),
        (F::IB_PORT_MKEY_PROT_BITS_F, Pir::M_KEY_PROTECT_BITS),
        (F::IB_PORT_LMC_F, Pir::LMC),
        (F::IB_PORT_LINK_SPEED_ACTIVE_F, Pir::LINK_SPEED_ACTIVE),
        (F::IB_PORT_LINK_SPEED_ENABLED_F, Pir::LINK_SPEED_ENABLED),
        (F::IB_PORT_NEIGHBOR_MTU_F, Pir::NEIGHBOR_MTU),
        (F::IB_PORT_SMSL_F, Pir::MASTER_SM_SL),
        (F::IB_PORT_VL_CAP_F, Pir::VL_CAP),
        (F::IB_PORT_INIT_TYPE_F, Pir::INIT_TYPE),
        (F::IB_PORT_VL_HIGH_LIMIT_F, Pir::VL_HIGH_LIMIT),
        (
            F::IB_PORT_VL_ARBITRATION_HIGH_CAP_F,
            Pir::VL_ARBITRATION_HIGH_CAP,
        ),
        (
            F::IB_PORT_VL_ARBITRATION_LOW_CAP_F,
            Pir::VL_ARBITRATION_LOW_CAP,
        ),
        (F::IB_PORT_INIT_TYPE_REPLY_F, Pir::INIT_TYPE_REPLY),
        (F::IB_PORT_MTU_CAP_F, Pir::MTU_CAP),
        (F::IB_PORT_VL_STALL_COUNT_F, Pir::VL_STALL_COUNT),
        (F::IB_PORT_HOQ_LIFE_F, Pir::HOQ_LIFE),
        (F::IB_PORT_OPER_VLS_F, Pir::OPERATIONAL_VLS),
        (F::IB_PORT_PART_EN_INB_F, Pir::PARTITION_ENFORCEMENT_INBOUND),
        (
            F::IB_PORT_PART_EN_OUTB_F,
            Pir::PARTITION_ENFORCEMENT_OUTBOUND,
        ),
        (F::IB_PORT_FILTER_RAW_INB_F, Pir::FILTER_RAW_INBOUND),
        (F::IB_PORT_FILTER_RAW_OUTB_F, Pir::FILTER_RAW_OUTBOUND),
        (F::IB_PORT_MKEY_VIOL_F, Pir::M_KEY_VIOLATIONS),
        (F::IB_PORT_PKEY_VIOL_F, Pir::P_KEY_VIOLATIONS),
        (F::IB_PORT_QKEY_VIOL_F, Pir::Q_KEY_VIOLATIONS),
        (F::IB_PORT_GUID_CAP_F, Pir::GUID_CAP),
        (F::IB_PORT_CLIENT_REREG_F, Pir::CLIENT_REREGISTER),
        (
            F::IB_PORT_MCAST_PKEY_SUPR_ENAB_F,
            Pir::MULTICAST_PKEY_TRAP_SUPPRESSION,
        ),
        (F::IB_PORT_SUBN_TIMEOUT_F, Pir::SUBNET_TIMEOUT),
        (F::IB_PORT_RESP_TIME_VAL_F, Pir::RESP_TIME_VALUE),
        (F::IB_PORT_LOCAL_PHYS_ERR_F, Pir::LOCAL_PHY_ERRORS),
        (F::IB_PORT_OVERRUN_ERR_F, Pir::OVERRUN_ERRORS),
        (F::IB_PORT_MAX_CREDIT_HINT_F, Pir::MAX_CREDIT_HINT),
        (F::IB_PORT_LINK_ROUND_TRIP_F, Pir::LINK_ROUND_TRIP_LATENCY),
        (F::IB_PORT_CAPMASK2_F, Pir::CAPABILITY_MASK2),
        (
            F::IB_PORT_LINK_SPEED_EXT_ACTIVE_F,
            Pir::LINK_SPEED_EXT_ACTIVE,
        ),
        (
            F::IB_PORT_LINK_SPEED_EXT_SUPPORTED_F,
            Pir::LINK_SPEED_EXT_SUPPORTED,
        ),
        (
            F::IB_PORT_LINK_SPEED_EXT_ENABLED_F,
            Pir::LINK_SPEED_EXT_ENABLED,
        ),
    ]
    .map(|(id, m)| (id, m.bits()));
    covers(
        "PortInfoRecord",
        &f,
        (F::IB_PORT_FIRST_F..F::IB_PORT_LAST_F)
            .chain(F::IB_PORT_CAPMASK2_F..F::IB_PORT_LINK_SPEED_EXT_LAST_F),
    );
    // PortInfo begins at byte 4 of the record.
    assert_eq!(
        check::<PortInfoRecord>(&f, 32),
        [
            "EndportLID",
            "PortNum",
            "Options",
            "Reserved",
            "Reserved",
            "Reserved",
            "Reserved"
        ]
    );
    // The reserved components are exactly PortInfo's bits no libibmad
    // field covers.
    let mut libibmad = vec![false; 512];
    for &(id, _) in &f {
        let l = cached_layout(id);
        for b in &mut libibmad[l.bit_offset..l.bit_offset + l.bits] {
            *b = true;
        }
    }
    let uncovered: Vec<usize> = (0..512).filter(|&b| !libibmad[b]).collect();
    let reserved: Vec<usize> = PortInfoRecord::COMPONENTS
        .iter()
        .filter(|c| c.name == "Reserved")
        .flat_map(|c| c.offset as usize - 32..c.end() - 32)
        .collect();
    assert_eq!(uncovered, reserved);
    assert_eq!(reserved.len(), 3 + 3 + 8 + 3);
}
