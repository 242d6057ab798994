//! Partitions: OpenSM's partition configuration (`partitions.conf`, the
//! `-P` file), a subset of it, and which P_Keys each end port holds.
//!
//! A definition is `Name=PKey[,flag]... : member[=full|limited|both], ... ;`
//! (`#` starts a comment; a definition may span lines). Flags: `ipoib`
//! (the partition's IPoIB broadcast group is created at start), `mtu=N`,
//! `rate=N`, `sl=N` (of that group) and `defmember=full|limited|both` (the
//! membership of members that name none; `limited` unless given).
//! Members: port GUIDs (`0x...`) and `ALL`, `ALL_CAS`, `ALL_SWITCHES`
//! (each switch's port 0) and `SELF` (the SM's port). Anything else is an
//! error naming its line.
//!
//! The default partition (P_Key 0x7fff) always exists, as in OpenSM:
//! without a file every end port is a full member of it; with a file that
//! does not name it, every end port is a limited member; and the SM's port
//! is a full member of it in any case.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::subnet::{NodeKind, Topology};

/// The default partition's P_Key (without the membership bit).
pub const DEFAULT_PKEY: u16 = 0x7fff;
/// The membership bit of a P_Key: set for a full member.
pub const FULL: u16 = 0x8000;

/// A port's membership of a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Membership {
    /// Full: talks to every member.
    Full,
    /// Limited: talks to full members only.
    Limited,
    /// Both a full and a limited entry in the port's P_Key table.
    Both,
}

/// Who a member entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    /// A port, by its GUID.
    Guid(u64),
    /// Every end port (CA ports and switch ports 0).
    All,
    /// Every CA port.
    AllCas,
    /// Every switch's port 0.
    AllSwitches,
    /// The SM's own port.
    SelfPort,
}

/// One partition of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Its name.
    pub name: String,
    /// Its P_Key, without the membership bit.
    pub pkey: u16,
    /// The IPoIB broadcast group is created at start.
    pub ipoib: bool,
    /// The broadcast group's MTU code (default 4: 2048).
    pub mtu: u8,
    /// The broadcast group's rate code (default 3: 10 Gb/s).
    pub rate: u8,
    /// The broadcast group's SL.
    pub sl: u8,
    /// The members and how each is one.
    pub members: Vec<(Member, Membership)>,
}

/// What is wrong with a partitions file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A definition has no `:` between its name and its members.
    NoColon,
    /// The text after the last `;` is not a whole definition.
    NoSemicolon,
    /// The name is empty or not `Name=PKey`.
    BadName(String),
    /// The P_Key is not a number, is above 0xffff, or is 0 (or 0x8000).
    BadPKey(String),
    /// A flag this SM does not know.
    UnknownFlag(String),
    /// A flag's value is missing or out of its range.
    BadFlagValue(String, String),
    /// A member this SM does not know (not a GUID nor a keyword).
    BadMember(String),
    /// A membership other than full, limited or both.
    BadMembership(String),
    /// Two definitions of the same P_Key or name.
    Duplicate(String),
}

/// A partitions file's error: its line (from 1) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The line of the definition (where the wrong part starts).
    pub line: usize,
    /// What is wrong.
    pub kind: ErrorKind,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        match &self.kind {
            ErrorKind::NoColon => write!(f, "a partition needs ':' before its members"),
            ErrorKind::NoSemicolon => write!(f, "a partition needs ';' at its end"),
            ErrorKind::BadName(s) => write!(f, "{s:?} is not Name=PKey"),
            ErrorKind::BadPKey(s) => write!(f, "{s:?} is not a P_Key (1 to 0x7fff)"),
            ErrorKind::UnknownFlag(s) => write!(f, "unknown flag {s:?}"),
            ErrorKind::BadFlagValue(k, v) => write!(f, "{v:?} is not a value of {k}"),
            ErrorKind::BadMember(s) => write!(f, "unknown member {s:?}"),
            ErrorKind::BadMembership(s) => {
                write!(f, "{s:?} is not full, limited or both")
            }
            ErrorKind::Duplicate(s) => write!(f, "{s} is defined twice"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The partitions of the subnet: a file's, or the default one alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partitions {
    /// In the file's order.
    pub list: Vec<Partition>,
    /// From a file (the default partition's members are then limited
    /// unless the file names it).
    pub configured: bool,
}

impl Default for Partitions {
    /// No file: the default partition, every end port a full member, with
    /// its IPoIB broadcast group.
    fn default() -> Partitions {
        Partitions {
            list: vec![Partition {
                name: "Default".into(),
                pkey: DEFAULT_PKEY,
                ipoib: true,
                mtu: 4,
                rate: 3,
                sl: 0,
                members: vec![(Member::All, Membership::Full)],
            }],
            configured: false,
        }
    }
}

/// A number as OpenSM's strtoul(.., 0) reads it: `0x` hexadecimal,
/// else decimal.
fn number(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) if !h.is_empty() => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None => s.parse().ok(),
    }
}

fn membership(s: &str) -> Option<Membership> {
    match s.trim().to_ascii_lowercase().as_str() {
        "full" => Some(Membership::Full),
        "limited" => Some(Membership::Limited),
        "both" => Some(Membership::Both),
        _ => None,
    }
}

/// A small flag value within `range`.
fn flag_value(
    key: &str,
    v: Option<&str>,
    range: std::ops::RangeInclusive<u8>,
) -> Result<u8, ErrorKind> {
    let bad = || ErrorKind::BadFlagValue(key.into(), v.unwrap_or("").into());
    let n = v.and_then(number).ok_or_else(bad)?;
    u8::try_from(n)
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(bad)
}

/// Parses a partitions file.
pub fn parse(text: &str) -> Result<Partitions, ParseError> {
    // Comments out; each definition with the line it starts on.
    let mut defs: Vec<(usize, String)> = Vec::new();
    let mut cur = String::new();
    let mut start = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        for c in line.chars() {
            if c == ';' {
                defs.push((start.take().unwrap_or(i + 1), std::mem::take(&mut cur)));
                continue;
            }
            if start.is_none() && !c.is_whitespace() {
                start = Some(i + 1);
            }
            cur.push(c);
        }
        cur.push(' ');
    }
    if let Some(line) = start {
        return Err(ParseError {
            line,
            kind: ErrorKind::NoSemicolon,
        });
    }
    let mut list: Vec<Partition> = Vec::new();
    for (line, def) in defs {
        if def.trim().is_empty() {
            continue;
        }
        let p = definition(&def).map_err(|kind| ParseError { line, kind })?;
        if let Some(d) = list.iter().find(|q| q.pkey == p.pkey || q.name == p.name) {
            let what = if d.pkey == p.pkey {
                format!("P_Key {:#06x}", p.pkey)
            } else {
                format!("partition {:?}", p.name)
            };
            return Err(ParseError {
                line,
                kind: ErrorKind::Duplicate(what),
            });
        }
        list.push(p);
    }
    Ok(Partitions {
        list,
        configured: true,
    })
}

/// One definition, without its `;`.
fn definition(def: &str) -> Result<Partition, ErrorKind> {
    let (head, members) = def.split_once(':').ok_or(ErrorKind::NoColon)?;
    let mut fields = head.split(',');
    let name_pkey = fields.next().unwrap_or("").trim();
    let (name, pkey) = name_pkey
        .split_once('=')
        .ok_or_else(|| ErrorKind::BadName(name_pkey.into()))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(ErrorKind::BadName(name_pkey.into()));
    }
    let bad_pkey = || ErrorKind::BadPKey(pkey.trim().into());
    let pkey = number(pkey)
        .and_then(|n| u16::try_from(n).ok())
        .map(|n| n & !FULL)
        .filter(|&n| n != 0)
        .ok_or_else(bad_pkey)?;
    let mut p = Partition {
        name: name.into(),
        pkey,
        ipoib: false,
        mtu: 4,
        rate: 3,
        sl: 0,
        members: Vec::new(),
    };
    let mut default_membership = Membership::Limited;
    for flag in fields {
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (flag.trim(), None),
        };
        match (key.to_ascii_lowercase().as_str(), value) {
            ("ipoib", None) => p.ipoib = true,
            ("mtu", v) => p.mtu = flag_value(key, v, 1..=5)?,
            ("rate", v) => p.rate = flag_value(key, v, 2..=22)?,
            ("sl", v) => p.sl = flag_value(key, v, 0..=15)?,
            ("defmember", v) => {
                default_membership = v
                    .and_then(membership)
                    .ok_or_else(|| ErrorKind::BadFlagValue(key.into(), v.unwrap_or("").into()))?
            }
            ("ipoib", Some(v)) => return Err(ErrorKind::BadFlagValue(key.into(), v.into())),
            _ => return Err(ErrorKind::UnknownFlag(flag.trim().into())),
        }
    }
    for m in members.split(',') {
        let m = m.trim();
        if m.is_empty() {
            continue;
        }
        let (who, how) = match m.split_once('=') {
            Some((w, h)) => (
                w.trim(),
                membership(h).ok_or_else(|| ErrorKind::BadMembership(h.trim().into()))?,
            ),
            None => (m, default_membership),
        };
        let member = match who {
            "ALL" => Member::All,
            "ALL_CAS" => Member::AllCas,
            "ALL_SWITCHES" => Member::AllSwitches,
            "SELF" => Member::SelfPort,
            g if g.starts_with("0x") || g.starts_with("0X") => {
                Member::Guid(number(g).ok_or_else(|| ErrorKind::BadMember(g.into()))?)
            }
            other => return Err(ErrorKind::BadMember(other.into())),
        };
        p.members.push((member, how));
    }
    Ok(p)
}

/// The P_Key table entries of each end port, by port GUID: P_Keys with
/// the membership bit, the default partition's first (the IBA requires it
/// at index 0 for the management QPs), then by P_Key.
pub type Tables = BTreeMap<u64, Vec<u16>>;

impl Partitions {
    /// Whether these are the default partition alone, every end port a
    /// full member: the ports' P_Key tables as a port comes up, which the
    /// SM then leaves as they are.
    pub fn is_default(&self) -> bool {
        !self.configured
    }

    /// The P_Key table of every end port of `topo` (CA ports, and switch
    /// ports 0), with `sm_port` the SM's port GUID.
    pub fn tables(&self, topo: &Topology, sm_port: Option<u64>) -> Tables {
        let mut out = Tables::new();
        for (_, n) in topo.nodes() {
            let switch = n.kind == NodeKind::Switch;
            for p in n.end_ports() {
                let g = n.port_guid(p);
                if g != 0 {
                    out.insert(g, self.table_of(g, switch, sm_port));
                }
            }
        }
        out
    }

    /// The P_Key table of the end port of GUID `guid` (`switch`: a
    /// switch's port 0), with `sm_port` the SM's port GUID: the default
    /// partition first, then by P_Key, a full entry before a limited one.
    pub fn table_of(&self, guid: u64, switch: bool, sm_port: Option<u64>) -> Vec<u16> {
        // P_Key to (full, limited).
        let mut keys: BTreeMap<u16, (bool, bool)> = BTreeMap::new();
        for p in &self.list {
            for &(m, how) in &p.members {
                let hit = match m {
                    Member::Guid(x) => x == guid,
                    Member::All => true,
                    Member::AllCas => !switch,
                    Member::AllSwitches => switch,
                    Member::SelfPort => Some(guid) == sm_port,
                };
                if !hit {
                    continue;
                }
                let e = keys.entry(p.pkey).or_default();
                match how {
                    Membership::Full => e.0 = true,
                    Membership::Limited => e.1 = true,
                    Membership::Both => *e = (true, true),
                }
            }
        }
        let names_default = self.list.iter().any(|p| p.pkey == DEFAULT_PKEY);
        let d = keys.entry(DEFAULT_PKEY).or_default();
        if Some(guid) == sm_port {
            d.0 = true;
        } else if !names_default && !d.0 {
            d.1 = true;
        }
        if *d == (false, false) {
            // A file that names the default partition without this port.
            keys.remove(&DEFAULT_PKEY);
        }
        let order = keys
            .get_key_value(&DEFAULT_PKEY)
            .into_iter()
            .chain(keys.iter().filter(|(p, _)| **p != DEFAULT_PKEY));
        let mut v = Vec::new();
        for (&pkey, &(full, limited)) in order {
            if full {
                v.push(pkey | FULL);
            }
            if limited {
                v.push(pkey);
            }
        }
        v
    }
}

/// The P_Key two ports share, as the first port's table has it (with its
/// membership bit): `want`'s (compared without the membership bit) if
/// given, else the first of `a`'s that `b` has too; shared means both hold
/// it and at least one of them as a full member.
pub fn shared_pkey(a: &[u16], b: &[u16], want: Option<u16>) -> Option<u16> {
    a.iter().copied().find(|&ka| {
        want.is_none_or(|w| w & !FULL == ka & !FULL)
            && b.iter()
                .any(|&kb| kb & !FULL == ka & !FULL && (ka | kb) & FULL != 0)
    })
}

/// Whether a port with table `t` holds P_Key `pkey` (either membership).
pub fn holds(t: &[u16], pkey: u16) -> bool {
    t.iter()
        .any(|&k| k & !FULL == pkey & !FULL && k & !FULL != 0)
}

/// The MGID of the IPoIB IPv4 broadcast group of partition `pkey`:
/// ff12:401b:PKEY::ffff:ffff, the P_Key with its membership bit set.
pub fn ipoib_broadcast_mgid(pkey: u16) -> [u8; 16] {
    let k = (pkey | FULL).to_be_bytes();
    [
        0xff, 0x12, 0x40, 0x1b, k[0], k[1], 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    ]
}

/// The blocks of 32 entries of a table (the rest 0), at least one.
pub fn blocks(t: &[u16]) -> Vec<[u16; 32]> {
    let n = t.len().div_ceil(32).max(1);
    (0..n)
        .map(|b| {
            let mut out = [0; 32];
            for (o, k) in out.iter_mut().zip(t.iter().skip(b * 32)) {
                *o = *k;
            }
            out
        })
        .collect()
}

/// The entries of `t` that fit `cap` entries (a port's PartitionCap; 0:
/// the one block every port has); the rest are dropped, the default
/// partition kept first.
pub fn fit(t: &[u16], cap: u16) -> (&[u16], usize) {
    let cap = usize::from(cap.max(1));
    let n = t.len().min(cap);
    (&t[..n], t.len() - n)
}

/// The partitions a P_Key table's entries name, without the membership
/// bit.
pub fn pkeys_of(t: &[u16]) -> BTreeSet<u16> {
    t.iter().map(|k| k & !FULL).filter(|&k| k != 0).collect()
}

#[cfg(test)]
mod tests;
