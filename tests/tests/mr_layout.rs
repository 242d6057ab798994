//! The C structures and constants the memory-region wrappers fill or read
//! (`ibv_sge` of SGEs and of `ibv_advise_mr`'s list, the `ibv_mr` fields,
//! `ibv_odp_caps` in `ibv_device_attr_ex`, the advice, re-registration and
//! ODP values) against what the C compiler makes of `<infiniband/verbs.h>`:
//! a small C program is compiled with `cc` against the headers the
//! bindings were generated from (`RDMA_CORE_INCLUDE_DIR` where set) and
//! prints each offset, size and value.

use std::collections::HashMap;
use std::mem::{offset_of, size_of, size_of_val};
use std::process::Command;

use rdma::sys;

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#define F(T, f) printf("%s.%s %zu %zu\n", #T, #f, offsetof(struct T, f), sizeof(((struct T *)0)->f));
#define S(T) printf("%s %zu 0\n", #T, sizeof(struct T));
#define V(c) printf("%s %lld 0\n", #c, (long long)(c));
int main(void) {
    S(ibv_sge) F(ibv_sge, addr) F(ibv_sge, length) F(ibv_sge, lkey)
    S(ibv_odp_caps) F(ibv_odp_caps, general_caps)
    F(ibv_odp_caps, per_transport_caps.rc_odp_caps)
    F(ibv_odp_caps, per_transport_caps.uc_odp_caps)
    F(ibv_odp_caps, per_transport_caps.ud_odp_caps)
    S(ibv_device_attr_ex) F(ibv_device_attr_ex, odp_caps)
    S(ibv_mr) F(ibv_mr, context) F(ibv_mr, pd) F(ibv_mr, addr) F(ibv_mr, length)
    F(ibv_mr, handle) F(ibv_mr, lkey) F(ibv_mr, rkey)
    V(IBV_ADVISE_MR_ADVICE_PREFETCH) V(IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE)
    V(IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) V(IBV_ADVISE_MR_FLAG_FLUSH)
    V(IBV_REREG_MR_CHANGE_TRANSLATION) V(IBV_REREG_MR_CHANGE_PD)
    V(IBV_REREG_MR_CHANGE_ACCESS) V(IBV_REREG_MR_ERR_INPUT)
    V(IBV_REREG_MR_ERR_DONT_FORK_NEW) V(IBV_REREG_MR_ERR_DO_FORK_OLD)
    V(IBV_ODP_SUPPORT) V(IBV_ODP_SUPPORT_IMPLICIT)
    V(IBV_ODP_SUPPORT_SEND) V(IBV_ODP_SUPPORT_RECV) V(IBV_ODP_SUPPORT_WRITE)
    V(IBV_ODP_SUPPORT_READ) V(IBV_ODP_SUPPORT_ATOMIC) V(IBV_ODP_SUPPORT_SRQ_RECV)
    V(IBV_ACCESS_ON_DEMAND)
    return 0;
}
"#;

/// Each line of the C program's output: name -> (offset or value, size);
/// compiled and run once for the tests of this file.
fn c_layout() -> &'static HashMap<String, (i64, usize)> {
    static C: std::sync::OnceLock<HashMap<String, (i64, usize)>> = std::sync::OnceLock::new();
    C.get_or_init(compile_and_run)
}

fn compile_and_run() -> HashMap<String, (i64, usize)> {
    let dir = std::env::temp_dir().join(format!("mr-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, PROGRAM).unwrap();
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    if let Ok(inc) = std::env::var("RDMA_CORE_INCLUDE_DIR") {
        cc.arg("-I").arg(inc);
    }
    let out = cc
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("the C compiler (cc) runs");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next().unwrap().to_string();
            let a = w.next().unwrap().parse().unwrap();
            let b = w.next().unwrap().parse().unwrap();
            (name, (a, b))
        })
        .collect()
}

macro_rules! field {
    ($t:ident, $($f:ident).+) => {{
        // SAFETY: plain C data, all-zero is a valid value.
        let v: sys::$t = unsafe { std::mem::zeroed() };
        (
            concat!(stringify!($t), ".", stringify!($($f).+)).replace(' ', ""),
            (offset_of!(sys::$t, $($f).+) as i64, size_of_val(&v.$($f).+)),
        )
    }};
}

/// Entries of struct `$t`: its size (as the C program's `S` prints it),
/// then each field (`a` or `a.b` for a member of a nested struct).
macro_rules! layout {
    ($t:ident: $($($f:ident).+),+ $(,)?) => {
        [
            (stringify!($t).to_string(), (size_of::<sys::$t>() as i64, 0)),
            $(field!($t, $($f).+)),+
        ]
    };
}

/// Each C constant `NAME` with the Rust value that stands for it.
macro_rules! constants {
    ($($name:ident => $v:expr),+ $(,)?) => {
        vec![$((stringify!($name), ($v) as i64)),+]
    };
}

#[test]
fn memory_region_structs_and_constants_match_the_c_compilers() {
    let c = c_layout();
    let mut rust: Vec<(String, (i64, usize))> = Vec::new();
    rust.extend(layout!(ibv_sge: addr, length, lkey));
    rust.extend(layout!(
        ibv_odp_caps: general_caps,
        per_transport_caps.rc_odp_caps,
        per_transport_caps.uc_odp_caps,
        per_transport_caps.ud_odp_caps,
    ));
    rust.extend(layout!(ibv_device_attr_ex: odp_caps));
    rust.extend(layout!(ibv_mr: context, pd, addr, length, handle, lkey, rkey));
    let consts = constants![
        IBV_ADVISE_MR_ADVICE_PREFETCH => rdma::Advice::Prefetch.to_raw(),
        IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => rdma::Advice::PrefetchWrite.to_raw(),
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => rdma::Advice::PrefetchNoFault.to_raw(),
        IBV_ADVISE_MR_FLAG_FLUSH => rdma::AdviseFlags::FLUSH.bits(),
        IBV_REREG_MR_CHANGE_TRANSLATION => sys::IBV_REREG_MR_CHANGE_TRANSLATION,
        IBV_REREG_MR_CHANGE_PD => sys::IBV_REREG_MR_CHANGE_PD,
        IBV_REREG_MR_CHANGE_ACCESS => sys::IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_ERR_INPUT => sys::IBV_REREG_MR_ERR_INPUT,
        IBV_REREG_MR_ERR_DONT_FORK_NEW => sys::IBV_REREG_MR_ERR_DONT_FORK_NEW,
        IBV_REREG_MR_ERR_DO_FORK_OLD => sys::IBV_REREG_MR_ERR_DO_FORK_OLD,
        IBV_ODP_SUPPORT => rdma::OdpGeneralCaps::SUPPORT.bits(),
        IBV_ODP_SUPPORT_IMPLICIT => rdma::OdpGeneralCaps::IMPLICIT.bits(),
        IBV_ODP_SUPPORT_SEND => rdma::OdpTransportCaps::SEND.bits(),
        IBV_ODP_SUPPORT_RECV => rdma::OdpTransportCaps::RECV.bits(),
        IBV_ODP_SUPPORT_WRITE => rdma::OdpTransportCaps::WRITE.bits(),
        IBV_ODP_SUPPORT_READ => rdma::OdpTransportCaps::READ.bits(),
        IBV_ODP_SUPPORT_ATOMIC => rdma::OdpTransportCaps::ATOMIC.bits(),
        IBV_ODP_SUPPORT_SRQ_RECV => rdma::OdpTransportCaps::SRQ_RECV.bits(),
        IBV_ACCESS_ON_DEMAND => rdma::AccessFlags::ON_DEMAND.bits(),
    ];
    let mut checked = 0;
    for (name, want) in rust {
        assert_eq!(
            c.get(&name),
            Some(&want),
            "{name}: C (offset, size) vs Rust"
        );
        checked += 1;
    }
    for (name, v) in consts {
        assert_eq!(c.get(name).map(|x| x.0), Some(v), "{name}: C vs Rust");
        checked += 1;
    }
    assert_eq!(checked, c.len(), "every line of the C program was compared");
}

/// An SGE of the crate is an `ibv_sge` as C lays it out: a region's entry
/// (here the null region's, which needs no memory) fills the C fields.
#[test]
fn an_sge_is_laid_out_as_the_c_ibv_sge() {
    let c = c_layout();
    assert_eq!(size_of::<rdma::Sge<'_>>() as i64, c["ibv_sge"].0);
    assert_eq!(
        std::mem::align_of::<rdma::Sge<'_>>(),
        std::mem::align_of::<sys::ibv_sge>()
    );
}
