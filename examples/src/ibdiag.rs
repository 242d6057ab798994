//! What the InfiniBand diagnostic examples (`perfquery`, `smpquery`,
//! `sminfo`, `saquery`, `ibnetdiscover`, `ibping`) share: the local port
//! and its agents, SMP, PerfMgt and SA requests by LID or directed route,
//! and what they print beside the library's `Name:....value` lines
//! ([`rdma::mad::diag`]): destinations, GIDs and errors as
//! infiniband-diags writes them, so that their output compares equal with
//! the C tools' line by line.

use std::cell::OnceCell;
use std::fmt::Write as _;
use std::time::Duration;

use clap::Args;
use rdma::mad::{class, Attribute, DrHeader, Mad, MadHeader, Method, NodeInfo, PortInfo};
use rdma::umad::{self, Address, Agent, CaPort, Port, Received, Registration};

/// What went wrong, in words.
pub type Error = String;
/// The result type of the diagnostic tools.
pub type Result<T> = std::result::Result<T, Error>;

/// The options every infiniband-diags tool takes (those of
/// `ibdiag_common`): which local port, and how long to wait.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// The CA to use (default: the first with a umad device).
    #[arg(short = 'C', long = "Ca", value_name = "CA")]
    pub ca: Option<String>,
    /// The CA's port (default: its first port).
    #[arg(short = 'P', long = "Port", value_name = "PORT")]
    pub port: Option<u32>,
    /// Timeout of one try in milliseconds.
    #[arg(
        short = 't',
        long = "timeout",
        value_name = "MS",
        default_value_t = 1000
    )]
    pub timeout_ms: u64,
}

/// The addressing options of infiniband-diags (`-D`, `-G`, `-L`), the SM
/// to ask for GUIDs (`-s`), `-e` and `-v`, for the tools that take a
/// destination in any of its forms.
#[derive(Args, Debug, Clone, Default)]
pub struct Addressing {
    /// The destination is a directed route (0,1,3).
    #[arg(short = 'D', long = "Direct")]
    pub direct: bool,
    /// The destination is a port GUID (resolved to its LID by the SA).
    #[arg(short = 'G', long = "Guid")]
    pub guid: bool,
    /// The destination is a LID (the default).
    #[arg(short = 'L', long = "Lid")]
    pub lid: bool,
    /// The LID of the SM port that resolves GUIDs (default: the local
    /// port's SM).
    #[arg(short = 's', long = "sm_port", value_name = "LID")]
    pub sm_port: Option<String>,
    /// Show send and receive errors.
    #[arg(short = 'e', long = "errors")]
    pub errors: bool,
    /// More output (repeatable).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The subnet prefix of a port whose umad attributes have none.
pub const DEFAULT_SUBNET_PREFIX: u64 = 0xfe80_0000_0000_0000;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// LID routed.
    Lid(u16),
    /// Directed route, as `-D` takes it (`[0, 1, 3]`).
    Dr(Vec<u8>),
    /// LID routed to `lid`, then directed along `path` (`[0, 4]`: out of
    /// port 4), the answer LID routed back to `slid` (DrSLID).
    LidDr { lid: u16, slid: u16, path: Vec<u8> },
}

impl Dest {
    /// Parses a LID (decimal or `0x` hex) or, with `directed`, a
    /// directed route (`0,1,3`).
    pub fn parse(s: &str, directed: bool) -> Result<Dest> {
        if directed {
            return rdma::mad::parse_dr_path(s)
                .map(Dest::Dr)
                .map_err(|e| format!("can't resolve destination port {s}: {e}"));
        }
        parse_int(s)
            .and_then(|v| u16::try_from(v).ok())
            .filter(|&l| l > 0)
            .map(Dest::Lid)
            .ok_or_else(|| format!("can't resolve destination port {s}"))
    }

    /// The destination as libibmad's `portid2str` writes it: `Lid 3`, or
    /// `DR path slid 65535; dlid 65535; 0,1`.
    pub fn describe(&self) -> String {
        match self {
            Dest::Lid(l) => format!("Lid {l}"),
            Dest::Dr(p) => format!("DR path slid 65535; dlid 65535; {}", hops(p)),
            Dest::LidDr { lid, slid, path } => {
                format!("Lid {lid} DR path slid {slid}; dlid 65535; {}", hops(path))
            }
        }
    }

    /// The LID, for the classes that go LID routed only.
    pub fn lid(&self) -> Option<u16> {
        match self {
            Dest::Lid(l) => Some(*l),
            Dest::Dr(_) | Dest::LidDr { .. } => None,
        }
    }
}

/// The ports of a directed route, as `drpath2str` joins them (`0,1,3`).
fn hops(path: &[u8]) -> String {
    let v: Vec<String> = path.iter().map(u8::to_string).collect();
    v.join(",")
}

/// Parses an integer as C's `strtoul(s, NULL, 0)` does for the inputs the
/// tools take: decimal, `0x` hex, or octal with a leading 0.
pub fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// The local port and its agents (registered as first used).
pub struct Diag {
    port: Port,
    info: CaPort,
    timeout: Duration,
    retries: u32,
    smi: OnceCell<Agent>,
    dr: OnceCell<Agent>,
    perf: OnceCell<Agent>,
    sa: OnceCell<Agent>,
}

/// The tries of a request (libibmad's default: 3 retries).
pub const RETRIES: u32 = 3;

impl Diag {
    /// Opens the port the options name: `-C`/`-P`, or the first CA with a
    /// umad device and its first port.
    pub fn open(c: &Common) -> Result<Diag> {
        let ca = match &c.ca {
            Some(n) => n.clone(),
            None => umad::ca_names()
                .map_err(|e| e.to_string())?
                .into_iter()
                .next()
                .ok_or("no CA has a umad device")?,
        };
        let cainfo = umad::Ca::get(&ca).map_err(|e| format!("{ca}: {e}"))?;
        let info = match c.port {
            Some(p) => cainfo
                .port(p)
                .cloned()
                .ok_or_else(|| format!("Failed to open '{ca}' port '{p}'"))?,
            None => cainfo
                .ports
                .first()
                .cloned()
                .ok_or_else(|| format!("{ca} has no port"))?,
        };
        let port = Port::open(&ca, info.port_num)
            .map_err(|e| format!("Failed to open '{ca}' port '{}': {e}", info.port_num))?;
        Ok(Diag {
            port,
            info,
            timeout: Duration::from_millis(c.timeout_ms.max(1)),
            retries: RETRIES,
            smi: OnceCell::new(),
            dr: OnceCell::new(),
            perf: OnceCell::new(),
            sa: OnceCell::new(),
        })
    }

    /// The local port's attributes as umad reports them (LID, SM LID,
    /// port number).
    pub fn local(&self) -> &CaPort {
        &self.info
    }

    /// The port.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// Sets the timeout of one try.
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Sets how many times a request is resent.
    pub fn set_retries(&mut self, r: u32) {
        self.retries = r;
    }

    fn agent<'a>(&'a self, cell: &'a OnceCell<Agent>, class: u8, version: u8) -> Result<&'a Agent> {
        if let Some(a) = cell.get() {
            return Ok(a);
        }
        let a = self
            .port
            .register(&Registration::new(class, version))
            .map_err(|e| e.to_string())?;
        Ok(cell.get_or_init(|| a))
    }

    /// The agent of the LID-routed SMI class.
    pub fn smi_agent(&self) -> Result<&Agent> {
        self.agent(&self.smi, class::SUBN_LID_ROUTED, 1)
    }
    /// The agent of the directed-route SMI class.
    pub fn dr_agent(&self) -> Result<&Agent> {
        self.agent(&self.dr, class::SUBN_DIRECTED_ROUTE, 1)
    }
    /// The agent of PerfMgt.
    pub fn perf_agent(&self) -> Result<&Agent> {
        self.agent(&self.perf, class::PERF_MGT, 1)
    }
    /// The agent of SubnAdm (version 2).
    pub fn sa_agent(&self) -> Result<&Agent> {
        self.agent(&self.sa, class::SUBN_ADM, 2)
    }

    /// A request and its response; a response with a status other than 0
    /// (the D bit of a directed-route SMP aside) is an error.
    pub fn rpc(&self, agent: &Agent, mad: &Mad, addr: &Address) -> Result<Received> {
        let r = agent
            .request(mad, addr, self.timeout, self.retries)
            .map_err(|e| e.to_string())?;
        let st = r.mad.status_without_direction();
        if !st.is_ok() {
            return Err(format!("MAD status {:#06x}", st.0));
        }
        Ok(r)
    }

    /// An SMP request (Get or Set) of `attr` with modifier `modifier` to
    /// `dest`, the attribute's bytes in `data` for a Set.
    pub fn smp(
        &self,
        method: Method,
        attr: u16,
        modifier: u32,
        dest: &Dest,
        data: Option<&[u8]>,
    ) -> Result<Mad> {
        let (agent, mut mad, addr) = match dest {
            Dest::Lid(lid) => {
                let a = self.smi_agent()?;
                let m = Mad::smp(method, attr, modifier, a.next_tid(), 0);
                (a, m, smi_address(*lid))
            }
            Dest::Dr(path) => {
                let a = self.dr_agent()?;
                let m = Mad::smp_directed(method, attr, modifier, a.next_tid(), 0, path)
                    .map_err(|e| e.to_string())?;
                (a, m, smi_address(rdma::mad::PERMISSIVE_LID))
            }
            Dest::LidDr { lid, slid, path } => {
                let a = self.dr_agent()?;
                let mut m = Mad::smp_directed(method, attr, modifier, a.next_tid(), 0, path)
                    .map_err(|e| e.to_string())?;
                let mut h = dr_along(path)?;
                h.dr_slid = *slid;
                m.set_dr_header(&h).map_err(|e| e.to_string())?;
                (a, m, smi_address(*lid))
            }
        };
        if let Some(d) = data {
            let out = mad.data_mut();
            let n = d.len().min(out.len());
            out[..n].copy_from_slice(&d[..n]);
        }
        Ok(self.rpc(agent, &mad, &addr)?.mad)
    }

    /// An SMP Get of a typed attribute.
    pub fn smp_get<A: Attribute>(&self, modifier: u32, dest: &Dest) -> Result<A> {
        let m = self.smp(Method::GET, A::ID, modifier, dest, None)?;
        A::decode(m.data()).map_err(|e| e.to_string())
    }

    /// NodeInfo of `dest`.
    pub fn node_info(&self, dest: &Dest) -> Result<NodeInfo> {
        self.smp_get::<NodeInfo>(0, dest)
    }

    /// PortInfo of `dest`'s port `port`.
    pub fn port_info(&self, dest: &Dest, port: u8) -> Result<PortInfo> {
        self.smp_get::<PortInfo>(u32::from(port), dest)
    }

    /// A PerfMgt request to the GSI of `lid`: the data (from byte 64)
    /// given, the response's MAD back.
    pub fn perf(&self, method: Method, attr: u16, lid: u16, data: &[u8]) -> Result<Mad> {
        let a = self.perf_agent()?;
        let mut m = Mad::new(&MadHeader::request(
            class::PERF_MGT,
            1,
            method,
            a.next_tid(),
            attr,
        ));
        let out = m.data_mut();
        let n = data.len().min(out.len());
        out[..n].copy_from_slice(&data[..n]);
        Ok(self.rpc(a, &m, &Address::gsi_lid(lid))?.mad)
    }

    /// The destination that `s` names under `a`'s addressing, as
    /// libibmad's `resolve_portid_str` finds it: a LID, a directed route,
    /// or a port GUID whose LID the SA's PathRecord from this port gives.
    pub fn resolve(&self, s: &str, a: &Addressing) -> Result<Dest> {
        let bad = || format!("can't resolve destination port {s}");
        if a.direct {
            return Dest::parse(s, true);
        }
        if !a.guid {
            return Dest::parse(s, false);
        }
        let guid = parse_int(s).filter(|&g| g != 0).ok_or_else(bad)?;
        let sm = match &a.sm_port {
            Some(l) => Dest::parse(l, false)?.lid().ok_or_else(bad)?,
            None => self.info.sm_lid as u16,
        };
        self.path_to_guid(guid, sm)
            .map(Dest::Lid)
            .map_err(|_| bad())
    }

    /// The DLID of the SA's PathRecord from this port to the port of GUID
    /// `guid` (in this port's subnet), asked of the SA at `sm`.
    pub fn path_to_guid(&self, guid: u64, sm: u16) -> Result<u16> {
        use rdma::mad::sa::{response, PathRecord, PathRecordMask, SaRequest};
        let prefix = match self.info.gid_prefix {
            0 => DEFAULT_SUBNET_PREFIX,
            p => p,
        };
        let q = PathRecord {
            sgid: rdma::Gid::from_parts(prefix, self.info.port_guid),
            dgid: rdma::Gid::from_parts(prefix, guid),
            ..PathRecord::default()
        };
        let a = self.sa_agent()?;
        let m = SaRequest::get(a.next_tid())
            .record(&q, PathRecordMask::SGID | PathRecordMask::DGID)
            .map_err(|e| e.to_string())?;
        let r = a
            .request(&m, &Address::gsi_lid(sm), self.timeout, self.retries)
            .map_err(|e| e.to_string())?;
        let p = response::<PathRecord>(r.mad.as_bytes()).map_err(|e| e.to_string())?;
        Ok(p.dlid)
    }

    /// The address of the SA: the SM's LID as the local port knows it.
    pub fn sa_address(&self) -> Address {
        Address::gsi_lid(self.info.sm_lid as u16)
    }
}

/// The address of a node's SMI (QP0) by LID.
pub fn smi_address(lid: u16) -> Address {
    Address {
        qpn: 0,
        qkey: 0,
        ..Address::gsi_lid(lid)
    }
}

/// A directed-route header along `path`, for callers that build SMPs
/// themselves.
pub fn dr_along(path: &[u8]) -> Result<DrHeader> {
    DrHeader::along(path).map_err(|e| e.to_string())
}

// ---- libibmad's field formats ----

/// A GID as glibc's `inet_ntop(AF_INET6)` writes it: lower-case groups
/// without leading zeros, the longest run of two or more zero groups (the
/// first of equal runs) as `::`, and the last 32 bits as a dotted IPv4
/// address when the first 96 bits are zero (other than `::` and `::1`) or
/// the address is IPv4-mapped.
pub fn inet6(g: &[u8; 16]) -> String {
    let w: Vec<u16> = g
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    let (mut best, mut best_len, mut cur, mut cur_len) = (usize::MAX, 0, 0, 0);
    for (i, &x) in w.iter().enumerate() {
        if x == 0 {
            if cur_len == 0 {
                cur = i;
            }
            cur_len += 1;
            if cur_len > best_len {
                best = cur;
                best_len = cur_len;
            }
        } else {
            cur_len = 0;
        }
    }
    if best_len < 2 {
        best = usize::MAX;
    }
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if i == best {
            if i == 0 {
                s.push(':');
            }
            s.push(':');
            i += best_len;
            continue;
        }
        if i == 6 && best == 0 && (best_len == 6 || (best_len == 5 && w[5] == 0xffff)) {
            let _ = write!(s, "{}.{}.{}.{}", g[12], g[13], g[14], g[15]);
            break;
        }
        let _ = write!(s, "{:x}", w[i]);
        if i < 7 {
            s.push(':');
        }
        i += 1;
    }
    s
}

/// A NodeDescription as `remap_node_name` (without a map) gives it: up to
/// its first NUL, each byte that is not printable ASCII as a space.
pub fn node_desc(nd: &rdma::mad::NodeDescription) -> String {
    nd.0.iter()
        .take_while(|&&b| b != 0)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                ' '
            }
        })
        .collect()
}

/// Prints an error the way infiniband-diags' `IBEXIT` does
/// (`TOOL: iberror: failed: WHAT`, on stdout with 255 as exit status,
/// as v44 does) and exits.
pub fn exit_error(tool: &str, what: &str) -> ! {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{tool}: iberror: failed: {what}");
    let _ = out.flush();
    std::process::exit(255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse_and_describe_as_portid2str() {
        assert_eq!(Dest::parse("0x10", false), Ok(Dest::Lid(16)));
        assert!(Dest::parse("0", false).is_err());
        let d = Dest::parse("0,1,3", true).unwrap();
        assert_eq!(d.describe(), "DR path slid 65535; dlid 65535; 0,1,3");
        assert_eq!(parse_int("010"), Some(8));
        let mixed = Dest::LidDr {
            lid: 3,
            slid: 2,
            path: vec![0, 4],
        };
        assert_eq!(mixed.describe(), "Lid 3 DR path slid 2; dlid 65535; 0,4");
        assert_eq!(mixed.lid(), None);
    }

    #[test]
    fn gids_print_as_inet_ntop_does() {
        let g = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(inet6(&g("fe80::20:0")), "fe80::20:0");
        assert_eq!(inet6(&g("::")), "::");
        assert_eq!(inet6(&g("::1")), "::1");
        assert_eq!(
            inet6(&g("ff12:401b:ffff::ffff:ffff")),
            "ff12:401b:ffff::ffff:ffff"
        );
        assert_eq!(inet6(&g("1:0:2::3")), "1:0:2::3");
        assert_eq!(inet6(&g("::ffff:1.2.3.4")), "::ffff:1.2.3.4");
        assert_eq!(inet6(&g("::1.2.3.4")), "::1.2.3.4");
        assert_eq!(inet6(&g("fe80::1:0:0:1")), "fe80::1:0:0:1");
    }
}
