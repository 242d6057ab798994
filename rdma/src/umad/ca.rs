//! CAs and ports as libibumad sees them, like `ibstat`.

use std::ffi::{c_char, CString};

use super::{Error, Result};
use crate::mad::{PhysPortState, PortState};

/// A channel adapter with a umad device (`umad_get_ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ca {
    /// The device name (`rxe0`).
    pub name: String,
    /// The node type (1 CA, 2 switch, 3 router, 4 RNIC).
    pub node_type: u32,
    /// The firmware version.
    pub fw_ver: String,
    /// The CA type (the `hca_type` of sysfs).
    pub ca_type: String,
    /// The hardware version.
    pub hw_ver: String,
    /// The node GUID.
    pub node_guid: u64,
    /// The system image GUID.
    pub system_guid: u64,
    /// The highest port number (libibumad's `numports`, what `ibstat`
    /// prints as "Number of ports"): 0 for a switch, whose only umad port
    /// is its management port 0.
    pub num_ports: u32,
    /// The ports, in port-number order.
    pub ports: Vec<CaPort>,
}

/// One port of a [`Ca`] (`umad_port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPort {
    /// The CA's name.
    pub ca_name: String,
    /// The port number (from 1).
    pub port_num: u32,
    /// The base LID (0 on RoCE).
    pub base_lid: u32,
    /// The LID mask count.
    pub lmc: u32,
    /// The subnet manager's LID.
    pub sm_lid: u32,
    /// The subnet manager's service level.
    pub sm_sl: u32,
    /// The logical state (`ibstat` prints [`PortState::ibstat_name`]).
    pub state: PortState,
    /// The physical state (`ibstat` prints [`PhysPortState::ibstat_name`]).
    pub phys_state: PhysPortState,
    /// The rate in Gb/s.
    pub rate: u32,
    /// The capability mask (PortInfo:CapabilityMask).
    pub capability_mask: u32,
    /// The GID prefix.
    pub gid_prefix: u64,
    /// The port GUID.
    pub port_guid: u64,
    /// The P_Key table.
    pub pkeys: Vec<u16>,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
}

impl CaPort {
    /// The port's rate as sysfs words it (`40 Gb/sec (4X QDR)`, `40 Gb/sec
    /// (4X FDR10)`), read as libibumad reads sysfs: through the C library's
    /// `open` and `read`, which ibsim's umad2sim replaces with its fake
    /// sysfs (a file opened by Rust's std goes through `open64`, which the
    /// shim does not see). `None` when it cannot be read.
    pub fn rate_text(&self) -> Option<String> {
        let path = format!(
            "/sys/class/infiniband/{}/ports/{}/rate",
            self.ca_name, self.port_num
        );
        read_sysfs_with_libc_open(&path)
    }

    /// Whether the rate is FDR10 (`ibstat` prints `Rate: 40 (FDR10)`): the
    /// sysfs rate ends in `FDR10)`.
    pub fn is_fdr10(&self) -> bool {
        self.rate_text().is_some_and(|r| rate_is_fdr10(&r))
    }

    /// Whether the link layer is Ethernet: RoCE, where every MAD needs a GRH
    /// and only GSI (QP1) exists.
    pub fn is_ethernet(&self) -> bool {
        self.link_layer.eq_ignore_ascii_case("ethernet")
    }
}

/// The name of a logical port state, as ibstat prints it (`???` for 0,
/// NOP, and anything past Active, as its table has no more).
#[deprecated(note = "CaPort::state is a mad::PortState: use PortState::ibstat_name")]
pub fn port_state_name(state: u32) -> &'static str {
    state_byte::<PortState>(state).ibstat_name()
}

/// The name of a physical port state, as ibstat prints it (`???` past
/// PhyTest).
#[deprecated(note = "CaPort::phys_state is a mad::PhysPortState: use PhysPortState::ibstat_name")]
pub fn phys_state_name(state: u32) -> &'static str {
    state_byte::<PhysPortState>(state).ibstat_name()
}

/// A state libibumad read from sysfs as a number: the byte's value, or
/// `Other(255)` for a number past a byte (no state has one).
fn state_byte<S: From<u8>>(v: u32) -> S {
    S::from(u8::try_from(v).unwrap_or(u8::MAX))
}

/// The name of a node type, as ibstat prints it (`???` for others).
pub fn node_type_name(node_type: u32) -> &'static str {
    match node_type {
        1 => "CA",
        2 => "Switch",
        3 => "Router",
        4 => "iWARP RNIC",
        _ => "???",
    }
}

pub(super) fn c_string(s: &[c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn rc_errno(rc: i32) -> i32 {
    if rc == -1 {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        rc.abs()
    }
}

/// The names of the CAs that have umad devices (`umad_get_cas_names`).
pub fn ca_names() -> Result<Vec<String>> {
    const MAX: usize = umad_sys::UMAD_MAX_DEVICES as usize;
    let mut names = [[0 as c_char; umad_sys::UMAD_CA_NAME_LEN as usize]; MAX];
    // SAFETY: `names` has room for MAX names of UMAD_CA_NAME_LEN bytes, as
    // the function's array parameter requires; it writes no more than `max`.
    let n = unsafe { umad_sys::umad_get_cas_names(names.as_mut_ptr(), MAX as i32) };
    if n < 0 {
        return Err(Error::io("umad_get_cas_names", rc_errno(n)));
    }
    Ok(names
        .iter()
        .take((n as usize).min(MAX))
        .map(|n| c_string(n))
        .collect())
}

/// The names of the CAs of InfiniBand node types (CA, switch, router: not
/// iWARP's RNICs), sorted by name (`umad_get_ca_device_list`, then
/// `umad_sort_ca_device_list`). Unlike [`ca_names`] it has no limit of
/// `UMAD_MAX_DEVICES` names and no made-up default name when sysfs has no
/// `infiniband` class: it is empty then.
pub fn ca_device_names() -> Result<Vec<String>> {
    /// The list libibumad allocated; `umad_free_ca_device_list` on drop.
    struct List(*mut umad_sys::umad_device_node);
    impl Drop for List {
        fn drop(&mut self) {
            // SAFETY: the head of the list umad_get_ca_device_list returned
            // (re-linked by the sort, which keeps every node), freed once.
            unsafe { umad_sys::umad_free_ca_device_list(self.0) };
        }
    }
    // SAFETY: errno is this thread's; cleared so that a NULL return tells
    // "no CA" (errno 0) from a failure.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: no arguments; the list returned is freed by `List`.
    let mut list = List(unsafe { umad_sys::umad_get_ca_device_list() });
    if list.0.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return if errno == 0 {
            Ok(Vec::new())
        } else {
            Err(Error::io("umad_get_ca_device_list", errno))
        };
    }
    // SAFETY: `list.0` is the head of a well-formed list; size 0 makes the
    // sort count the nodes itself. It relinks the nodes and writes the new
    // head back.
    let rc = unsafe { umad_sys::umad_sort_ca_device_list(&mut list.0, 0) };
    if rc != 0 {
        return Err(Error::io("umad_sort_ca_device_list", rc));
    }
    let mut names = Vec::new();
    let mut node = list.0;
    while !node.is_null() {
        // SAFETY: a node of the live list; its name is a NUL-terminated
        // string allocated with it.
        let (name, next) = unsafe { (std::ffi::CStr::from_ptr((*node).ca_name), (*node).next) };
        names.push(name.to_string_lossy().into_owned());
        node = next;
    }
    Ok(names)
}

/// The port GUIDs of the CA named `name` (`umad_get_ca_portguids`),
/// indexed by port number: entry 0 is port 0 (a switch's management port;
/// 0 on a CA, which has none), then ports 1 to [`Ca::num_ports`], 0 for a
/// port libibumad could not read. The same GUIDs as the
/// [`CaPort::port_guid`]s of [`Ca::get`], in one call.
pub fn ca_port_guids(name: &str) -> Result<Vec<u64>> {
    let cname = ca_cstring(name)?;
    // libibumad reads at most UMAD_CA_MAX_PORTS ports (0 to 9) and wants
    // room for one more than the highest port number.
    let mut guids = [0u64; umad_sys::UMAD_CA_MAX_PORTS as usize + 1];
    // SAFETY: `cname` is NUL-terminated; `guids` has room for the `max`
    // entries the call is told of, and it writes no more (it fails with
    // ENOMEM instead).
    let n = unsafe {
        umad_sys::umad_get_ca_portguids(cname.as_ptr(), guids.as_mut_ptr(), guids.len() as i32)
    };
    if n < 0 {
        return Err(match rc_errno(n) {
            libc::ENODEV => Error::NoDevice(name.to_string()),
            errno => Error::io("umad_get_ca_portguids", errno),
        });
    }
    Ok(guids[..(n as usize).min(guids.len())]
        .iter()
        .map(|&g| u64::from_be(g))
        .collect())
}

/// Every CA with a umad device, with its ports.
pub fn cas() -> Result<Vec<Ca>> {
    ca_names()?.iter().map(|n| Ca::get(n)).collect()
}

impl Ca {
    /// The CA named `name` (`umad_get_ca`).
    pub fn get(name: &str) -> Result<Ca> {
        let cname = CString::new(name).map_err(|_| Error::NoDevice(name.to_string()))?;
        // SAFETY: umad_ca is plain data (arrays, integers, null pointers).
        let mut raw: umad_sys::umad_ca = unsafe { std::mem::zeroed() };
        // SAFETY: `cname` is NUL-terminated and `raw` writable; on success the
        // ports it allocates are released by umad_release_ca below.
        let rc = unsafe { umad_sys::umad_get_ca(cname.as_ptr(), &mut raw) };
        if rc != 0 {
            return Err(Error::io("umad_get_ca", rc_errno(rc)));
        }
        let mut ports = Vec::new();
        for &p in raw.ports.iter() {
            if p.is_null() {
                continue;
            }
            // SAFETY: a non-null entry points to a port umad_get_ca filled,
            // valid until umad_release_ca.
            ports.push(unsafe { CaPort::from_raw(&*p) });
        }
        let ca = Ca {
            name: c_string(&raw.ca_name),
            node_type: raw.node_type,
            fw_ver: c_string(&raw.fw_ver),
            ca_type: c_string(&raw.ca_type),
            hw_ver: c_string(&raw.hw_ver),
            node_guid: u64::from_be(raw.node_guid),
            system_guid: u64::from_be(raw.system_guid),
            num_ports: raw.numports.max(0) as u32,
            ports,
        };
        // SAFETY: `raw` was filled by umad_get_ca and is released once.
        unsafe { umad_sys::umad_release_ca(&mut raw) };
        Ok(ca)
    }

    /// The port numbered `port_num`.
    pub fn port(&self, port_num: u32) -> Option<&CaPort> {
        self.ports.iter().find(|p| p.port_num == port_num)
    }
}

impl CaPort {
    /// One port of a CA (`umad_get_port`).
    pub fn get(ca: &str, port_num: u32) -> Result<CaPort> {
        let cname = CString::new(ca).map_err(|_| Error::NoDevice(ca.to_string()))?;
        // SAFETY: umad_port is plain data.
        let mut raw: umad_sys::umad_port = unsafe { std::mem::zeroed() };
        // SAFETY: `cname` is NUL-terminated and `raw` writable; the P_Key
        // table it allocates is freed by umad_release_port below.
        let rc = unsafe { umad_sys::umad_get_port(cname.as_ptr(), port_num as i32, &mut raw) };
        if rc != 0 {
            return Err(Error::io("umad_get_port", rc_errno(rc)));
        }
        // SAFETY: `raw` was just filled by umad_get_port.
        let port = unsafe { CaPort::from_raw(&raw) };
        // SAFETY: released once; `port` owns copies of everything.
        unsafe { umad_sys::umad_release_port(&mut raw) };
        Ok(port)
    }

    /// Copies a port that libibumad filled.
    ///
    /// # Safety
    /// `p.pkeys` is null or points to `p.pkeys_size` P_Keys.
    unsafe fn from_raw(p: &umad_sys::umad_port) -> CaPort {
        let pkeys = if p.pkeys.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller guarantees `pkeys_size` entries at `pkeys`.
            unsafe { std::slice::from_raw_parts(p.pkeys, p.pkeys_size as usize) }
                .iter()
                .map(|&k| u16::from_be(k))
                .collect()
        };
        CaPort {
            ca_name: c_string(&p.ca_name),
            port_num: p.portnum as u32,
            base_lid: p.base_lid,
            lmc: p.lmc,
            sm_lid: p.sm_lid,
            sm_sl: p.sm_sl,
            state: state_byte(p.state),
            phys_state: state_byte(p.phys_state),
            rate: p.rate,
            capability_mask: u32::from_be(p.capmask),
            gid_prefix: u64::from_be(p.gid_prefix),
            port_guid: u64::from_be(p.port_guid),
            pkeys,
            link_layer: c_string(&p.link_layer),
        }
    }
}

/// Whether a sysfs rate (`56 Gb/sec (4X FDR10)`) names FDR10: the five
/// characters before its `)`, in any case, as ibstat checks.
fn rate_is_fdr10(rate: &str) -> bool {
    rate.find(')')
        .and_then(|i| rate.get(i.checked_sub(5)?..i))
        .is_some_and(|s| s.eq_ignore_ascii_case("fdr10"))
}

/// Reads a small sysfs file with libc's `open` and `read` (see
/// [`CaPort::rate_text`]), up to its first newline.
fn read_sysfs_with_libc_open(path: &str) -> Option<String> {
    let c = CString::new(path).ok()?;
    // SAFETY: `c` is NUL-terminated; the fd is closed below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 128];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    let n = usize::try_from(n).ok()?;
    let text = String::from_utf8_lossy(&buf[..n.min(buf.len())]);
    Some(text.split('\n').next().unwrap_or_default().to_string())
}

/// The C string of a CA name, for functions that take one.
pub(crate) fn ca_cstring(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::NoDevice(name.to_string()))
}

/// The index of `gid` in the GID table of `ca`'s port, found through the
/// verbs GID table query; `None` when the port has no such GID.
pub fn gid_index(ca: &str, port_num: u8, gid: crate::Gid) -> Result<Option<u8>> {
    let list = crate::DeviceList::new().map_err(Error::Verbs)?;
    let Some(dev) = list.iter().find(|d| d.name() == ca) else {
        return Err(Error::NoDevice(ca.to_string()));
    };
    let ctx = dev.open().map_err(Error::Verbs)?;
    let table = ctx.gid_table().map_err(Error::Verbs)?;
    Ok(table
        .iter()
        .find(|e| e.port == port_num && e.gid == gid)
        .map(|e| e.index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(deprecated)]
    fn state_names_match_ibstat() {
        // The deprecated names are the typed states' ibstat names (whose
        // own test holds them against ibstat's tables), for every number
        // libibumad may report, past a byte too.
        for v in (0..=300u32).chain([u32::MAX]) {
            let byte = u8::try_from(v).unwrap_or(u8::MAX);
            assert_eq!(port_state_name(v), PortState::from(byte).ibstat_name());
            assert_eq!(phys_state_name(v), PhysPortState::from(byte).ibstat_name());
        }
        // ibstat's table (infiniband-diags' ibstat.c).
        let nodes = ["???", "CA", "Switch", "Router", "iWARP RNIC", "???"];
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(node_type_name(i as u32), *n);
        }
    }

    #[test]
    fn fdr10_is_told_by_the_words_before_the_parenthesis() {
        assert!(rate_is_fdr10("40 Gb/sec (4X FDR10)"));
        assert!(rate_is_fdr10("40 Gb/sec (4x fdr10)"));
        assert!(!rate_is_fdr10("56 Gb/sec (4X FDR)"));
        assert!(!rate_is_fdr10("10 Gb/sec (4X)"));
        assert!(!rate_is_fdr10("(x)"));
        assert!(!rate_is_fdr10("no parenthesis FDR10"));
        assert!(!rate_is_fdr10(""));
    }

    #[test]
    #[cfg_attr(miri, ignore)] // open(2)
    fn sysfs_reads_stop_at_the_newline_and_missing_files_are_none() {
        let dir = std::env::temp_dir().join(format!("umad-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("rate");
        std::fs::write(&f, "40 Gb/sec (4X FDR10)\n").unwrap();
        let got = read_sysfs_with_libc_open(f.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.as_deref(), Some("40 Gb/sec (4X FDR10)"));
        assert_eq!(read_sysfs_with_libc_open("/nonexistent/rate"), None);
    }

    #[test]
    fn c_strings_stop_at_nul() {
        let raw: [c_char; 6] = [
            b'r' as c_char,
            b'x' as c_char,
            b'e' as c_char,
            0,
            b'z' as c_char,
            0,
        ];
        assert_eq!(c_string(&raw), "rxe");
        let full: [c_char; 2] = [b'a' as c_char, b'b' as c_char];
        assert_eq!(c_string(&full), "ab");
    }
}
