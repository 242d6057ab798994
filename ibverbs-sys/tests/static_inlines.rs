//! The static inlines outside the data path are callable, with C semantics,
//! and the macro-redirected names are bound to the macro, not the legacy
//! symbol.

use std::ffi::{c_int, c_void};

use ibverbs_sys::*;

#[test]
fn ibv_inc_rkey_bumps_the_low_byte_only() {
    // SAFETY: a pure function of its argument.
    unsafe {
        assert_eq!(ibv_inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(ibv_inc_rkey(0x1234_56ff), 0x1234_5600);
    }
}

/// `ibv_query_port` takes the full `ibv_port_attr` (the macro form), not the
/// legacy `_compat_ibv_port_attr` of the exported symbol of the same name.
#[test]
fn ibv_query_port_is_the_macro_form() {
    type QueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    let f: QueryPort = ibv_query_port;
    assert_ne!(f as usize, 0);
}

/// `ibv_reg_mr` is the macro form, which handles optional access flags
/// through `ibv_reg_mr_iova2`.
#[test]
fn ibv_reg_mr_is_the_macro_form() {
    type RegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    let f: RegMr = ibv_reg_mr;
    assert_ne!(f as usize, ibv_reg_mr_iova2 as *const () as usize);
    assert_ne!(IBV_ACCESS_OPTIONAL_RANGE, 0);
}

/// Unions are usable: the immediate data of a completion, the GID bytes, the
/// work request's RDMA fields.
#[test]
fn unions_are_usable() {
    let mut gid = ibv_gid { raw: [0; 16] };
    gid.global = ibv_gid__bindgen_ty_1 {
        subnet_prefix: 0x80fe_u64,
        interface_id: 0x0100_0000_0000_0000,
    };
    // SAFETY: both views cover the same 16 bytes of plain data.
    let raw = unsafe { gid.raw };
    assert_eq!(raw[0..2], [0xfe, 0x80]);
    assert_eq!(raw[15], 1);

    // SAFETY: all-zero bytes are a valid ibv_wc / ibv_send_wr.
    let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
    wc.__bindgen_anon_1.imm_data = 0xdead_beef;
    // SAFETY: both members are 32-bit integers.
    assert_eq!(unsafe { wc.__bindgen_anon_1.invalidated_rkey }, 0xdead_beef);

    // SAFETY: as above.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr.rdma.remote_addr = 0x1000;
    wr.wr.rdma.rkey = 7;
    // SAFETY: the atomic view overlays remote_addr at offset 0.
    assert_eq!(unsafe { wr.wr.atomic.remote_addr }, 0x1000);

    // SAFETY: all-zero bytes are a valid ibv_async_event.
    let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
    ev.element.port_num = 1;
    ev.event_type = IBV_EVENT_PORT_ACTIVE;
    // SAFETY: port_num is an int inside the union.
    assert_eq!(unsafe { ev.element.port_num }, 1);
}
