//! libibnetdisc's fabric cache file, as `ibnetdiscover --cache FILE`
//! writes it and `iblinkinfo --load-cache FILE` reads it (rdma-core's
//! `libibnetdisc/ibnetdisc_cache.c`), so that a fabric swept by either the
//! C tools or these can be shown by either later, without a sweep.
//!
//! Every integer is little-endian. A header of 28 bytes (magic
//! `0x8FE7832B`, version 1, the node and port counts, the GUID of the node
//! the sweep started from, the most hops it took), then each node (its
//! port 0's LID and LMC, EnhancedPort0, the SwitchInfo, NodeInfo and
//! NodeDescription SMP data of 64 bytes each, and the (GUID, number) of
//! each of its ports in the file), then each port (GUID, number, external
//! number, base LID, LMC, the PortInfo SMP data, its node's GUID, and the
//! (GUID, number) of the port at the other end of its link, if any).
//! Nodes are in the order the C tools list them (last found first).
//!
//! A file is untrusted input: every length is checked before it is read,
//! the counts cannot claim more records than the file's bytes hold, a port
//! no node claims and a link to a port not in the file are left out (as
//! libibnetdisc leaves them), and whatever else is wrong is a
//! [`CacheError`], never a panic.

use std::collections::HashMap;
use std::fmt;

use rdma::mad::{Attribute, NodeDescription, NodeInfo, PortInfo, SwitchInfo};

use crate::discover::{Fabric, NodeRec, PortRec, SWITCH};

/// The file's first four bytes.
pub const MAGIC: u32 = 0x8FE7_832B;
/// The only version there is.
pub const VERSION: u32 = 1;
const HEADER: usize = 28;
/// A node record without its port keys (its count of them included).
const NODE: usize = 15 + 3 * 64;
/// A port key: GUID and number.
const KEY: usize = 9;
const PORT: usize = 31 + 64;

/// Why a cache file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheError {
    /// The file ends inside `what`, which needs `need` bytes at `at`.
    Truncated {
        what: &'static str,
        at: usize,
        need: usize,
    },
    /// Not a fabric cache: the first word.
    Magic(u32),
    /// A version other than 1.
    Version(u32),
    /// More nodes or ports than the file's bytes can hold.
    Count {
        what: &'static str,
        count: u32,
        room: usize,
    },
    /// An SMP attribute that does not decode.
    Attribute {
        what: &'static str,
        guid: u64,
        why: String,
    },
    /// Two node records of one GUID.
    DuplicateNode(u64),
    /// Two nodes claim one port.
    PortClaimedTwice { guid: u64, num: u8 },
    /// The header's starting node is not in the file.
    NoStartNode(u64),
    /// A port record whose node is not in the file.
    PortWithoutNode { guid: u64, num: u8, node: u64 },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Truncated { what, at, need } => {
                write!(
                    f,
                    "the file ends inside {what} ({need} bytes at offset {at})"
                )
            }
            CacheError::Magic(m) => write!(f, "not a fabric cache (magic {m:#010x})"),
            CacheError::Version(v) => write!(f, "fabric cache version {v}, not {VERSION}"),
            CacheError::Count { what, count, room } => {
                write!(f, "{count} {what} records claimed, room for {room}")
            }
            CacheError::Attribute { what, guid, why } => {
                write!(f, "{what} of {guid:#018x}: {why}")
            }
            CacheError::DuplicateNode(g) => write!(f, "node {g:#018x} twice"),
            CacheError::PortClaimedTwice { guid, num } => {
                write!(f, "port {guid:#018x}:{num} claimed by two nodes")
            }
            CacheError::NoStartNode(g) => {
                write!(f, "the starting node {g:#018x} is not in the file")
            }
            CacheError::PortWithoutNode { guid, num, node } => {
                write!(
                    f,
                    "port {guid:#018x}:{num} of node {node:#018x}, which is not in the file"
                )
            }
        }
    }
}

impl std::error::Error for CacheError {}

/// The file's bytes for `f`: its nodes last found first, as the C tools
/// write them, and the most hops a node's route took.
pub fn write(f: &Fabric) -> Vec<u8> {
    let mut o = Vec::new();
    let from = f.from.map_or(0, |(n, _)| f.nodes[n].info.node_guid);
    let max_hops = f
        .nodes
        .iter()
        .map(|n| n.path.len().saturating_sub(1))
        .max()
        .unwrap_or(0);
    let ports: Vec<(usize, &PortRec)> = f
        .nodes
        .iter()
        .enumerate()
        .rev()
        .flat_map(|(i, n)| n.ports.iter().flatten().map(move |p| (i, p)))
        .collect();
    o.extend(MAGIC.to_le_bytes());
    o.extend(VERSION.to_le_bytes());
    o.extend((f.nodes.len() as u32).to_le_bytes());
    o.extend((ports.len() as u32).to_le_bytes());
    o.extend(from.to_le_bytes());
    o.extend((max_hops as u32).to_le_bytes());
    for n in f.nodes.iter().rev() {
        o.extend(n.smalid.to_le_bytes());
        o.push(n.smalmc);
        o.push(u8::from(n.enhsp0));
        o.extend(smp_data(n.switch_info.as_ref()));
        o.extend(n.info.node_guid.to_le_bytes());
        o.push(n.info.node_type);
        o.push(n.info.num_ports);
        o.extend(smp_data(Some(&n.info)));
        let desc = NodeDescription::new(&n.desc).unwrap_or(NodeDescription([0; 64]));
        o.extend(desc.0);
        let stored: Vec<&PortRec> = n.ports.iter().flatten().collect();
        o.push(stored.len() as u8);
        for p in stored {
            o.extend(p.guid.to_le_bytes());
            o.push(p.num);
        }
    }
    for (i, p) in ports {
        o.extend(p.guid.to_le_bytes());
        o.push(p.num);
        o.push(0); // the external port number: no chassis here
        o.extend(p.base_lid.to_le_bytes());
        o.push(p.lmc);
        o.extend(smp_data(p.info.as_ref()));
        o.extend(f.nodes[i].info.node_guid.to_le_bytes());
        match p.remote.map(|r| f.port(r).1) {
            Some(r) => {
                o.push(1);
                o.extend(r.guid.to_le_bytes());
                o.push(r.num);
            }
            None => o.extend([0; 10]),
        }
    }
    o
}

/// An attribute's 64 bytes of SMP data (zeros for none).
fn smp_data<A: Attribute>(a: Option<&A>) -> [u8; 64] {
    let mut b = [0; 64];
    if let Some(a) = a {
        // Every SMP attribute fits the 64 bytes of SMP data.
        let _ = a.encode_into(&mut b);
    }
    b
}

/// Reads through a file's bytes, each read checked.
struct In<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    fn take(&mut self, what: &'static str, need: usize) -> Result<&'a [u8], CacheError> {
        let s = self
            .b
            .get(self.at..)
            .and_then(|r| r.get(..need))
            .ok_or(CacheError::Truncated {
                what,
                at: self.at,
                need,
            })?;
        self.at += need;
        Ok(s)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, CacheError> {
        Ok(self.take(what, 1)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, CacheError> {
        let b = self.take(what, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, CacheError> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(what, 4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, CacheError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(what, 8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn room(&self) -> usize {
        self.b.len().saturating_sub(self.at)
    }
}

fn attr<A: Attribute>(b: &[u8], what: &'static str, guid: u64) -> Result<A, CacheError> {
    A::decode(b).map_err(|e| CacheError::Attribute {
        what,
        guid,
        why: e.to_string(),
    })
}

/// A port record: the port, its node's GUID, and its link's far end.
struct PortEntry {
    port: PortRec,
    node: u64,
    remote: Option<(u64, u8)>,
}

/// The fabric a cache file holds.
pub fn read(b: &[u8]) -> Result<Fabric, CacheError> {
    let mut r = In { b, at: 0 };
    let magic = r.u32("the header")?;
    if magic != MAGIC {
        return Err(CacheError::Magic(magic));
    }
    let version = r.u32("the header")?;
    if version != VERSION {
        return Err(CacheError::Version(version));
    }
    let node_count = r.u32("the header")?;
    let port_count = r.u32("the header")?;
    let from_guid = r.u64("the header")?;
    let _max_hops = r.u32("the header")?;
    debug_assert_eq!(r.at, HEADER);
    let room = r.room();
    if node_count as usize > room / NODE {
        return Err(CacheError::Count {
            what: "node",
            count: node_count,
            room: room / NODE,
        });
    }
    // Nodes in the file's order (the C tools' listing order).
    let mut listed = Vec::with_capacity(node_count as usize);
    let mut claimed: HashMap<(u64, u8), u64> = HashMap::new();
    let mut node_index: HashMap<u64, usize> = HashMap::new();
    for _ in 0..node_count {
        let smalid = r.u16("a node")?;
        let smalmc = r.u8("a node")?;
        let enhsp0 = r.u8("a node")? != 0;
        let si = r.take("a node", 64)?;
        let guid = r.u64("a node")?;
        let node_type = r.u8("a node")?;
        let num_ports = r.u8("a node")?;
        let mut info: NodeInfo = attr(r.take("a node", 64)?, "NodeInfo", guid)?;
        // The record's own type, GUID and port count are what libibnetdisc
        // uses; the NodeInfo bytes are only shown.
        info.node_guid = guid;
        info.node_type = node_type;
        info.num_ports = num_ports;
        let desc: NodeDescription = attr(r.take("a node", 64)?, "NodeDescription", guid)?;
        let stored = r.u8("a node")?;
        let mut keys = Vec::with_capacity(usize::from(stored));
        for _ in 0..stored {
            let k = r.take("a node's port keys", KEY)?;
            let mut g = [0; 8];
            g.copy_from_slice(&k[..8]);
            keys.push((u64::from_le_bytes(g), k[8]));
        }
        if node_index.insert(guid, listed.len()).is_some() {
            return Err(CacheError::DuplicateNode(guid));
        }
        for &k in &keys {
            if claimed.insert(k, guid).is_some() {
                return Err(CacheError::PortClaimedTwice {
                    guid: k.0,
                    num: k.1,
                });
            }
        }
        let switch_info = if node_type == SWITCH {
            Some(attr::<SwitchInfo>(si, "SwitchInfo", guid)?)
        } else {
            None
        };
        listed.push(NodeRec {
            info,
            desc: desc.text(),
            smalid,
            smalmc,
            enhsp0,
            switch_info,
            path: Vec::new(),
            ports: vec![None; usize::from(num_ports) + 1],
        });
    }
    let room = r.room();
    if port_count as usize > room / PORT {
        return Err(CacheError::Count {
            what: "port",
            count: port_count,
            room: room / PORT,
        });
    }
    let mut entries = Vec::with_capacity(port_count as usize);
    for _ in 0..port_count {
        let guid = r.u64("a port")?;
        let num = r.u8("a port")?;
        let _ext = r.u8("a port")?;
        let base_lid = r.u16("a port")?;
        let lmc = r.u8("a port")?;
        let info: PortInfo = attr(r.take("a port", 64)?, "PortInfo", guid)?;
        let node = r.u64("a port")?;
        let flag = r.u8("a port")?;
        let rg = r.u64("a port")?;
        let rn = r.u8("a port")?;
        entries.push(PortEntry {
            port: PortRec {
                num,
                guid,
                base_lid,
                lmc,
                info: Some(info),
                remote: None,
            },
            node,
            remote: (flag != 0).then_some((rg, rn)),
        });
    }
    // The nodes in the order they were found: the file's reversed.
    let count = listed.len();
    let mut nodes: Vec<NodeRec> = listed.into_iter().rev().collect();
    let at = |file_index: usize| count - 1 - file_index;
    // A port goes into its node if that node claimed it and the number
    // fits (libibnetdisc's `_fill_port`); the others are left out.
    let mut placed: HashMap<(u64, u8), (usize, u8)> = HashMap::new();
    let mut links = Vec::new();
    for e in entries {
        let key = (e.port.guid, e.port.num);
        // A port of a node not in the file: libibnetdisc refuses the file.
        let Some(&fi) = node_index.get(&e.node) else {
            return Err(CacheError::PortWithoutNode {
                guid: key.0,
                num: key.1,
                node: e.node,
            });
        };
        // Only the node that claimed it holds it.
        if claimed.get(&key) != Some(&e.node) {
            continue;
        }
        let n = at(fi);
        let slot = match nodes[n].ports.get_mut(usize::from(e.port.num)) {
            Some(s) if s.is_none() => s,
            _ => continue,
        };
        *slot = Some(e.port);
        placed.insert(key, (n, key.1));
        if let Some(far) = e.remote {
            links.push(((n, key.1), far));
        }
    }
    for (here, far) in links {
        // A link to a port not in the file is no link.
        if let Some(&there) = placed.get(&far) {
            if let Some(Some(p)) = nodes[here.0].ports.get_mut(usize::from(here.1)) {
                p.remote = Some(there);
            }
        }
    }
    let from = node_index
        .get(&from_guid)
        .map(|&fi| at(fi))
        .ok_or(CacheError::NoStartNode(from_guid))?;
    let port = nodes[from].info.local_port_num;
    Ok(Fabric {
        nodes,
        from: Some((from, port)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma::mad::{PhysPortState, PortState};

    /// A switch (3 ports, 1 and 2 linked to two CAs) and two CAs, in the
    /// order a sweep from the first CA finds them.
    fn fabric() -> Fabric {
        let ca = |guid: u64, lid: u16, desc: &str| {
            let mut pi = PortInfo {
                lid,
                port_state: PortState::Active,
                port_physical_state: PhysPortState::LinkUp,
                ..PortInfo::default()
            };
            pi.local_port_num = 1;
            NodeRec {
                info: NodeInfo {
                    node_type: 1,
                    num_ports: 1,
                    node_guid: guid,
                    port_guid: guid + 1,
                    local_port_num: 1,
                    ..NodeInfo::default()
                },
                desc: desc.into(),
                smalid: 0,
                smalmc: 0,
                enhsp0: false,
                switch_info: None,
                path: vec![0],
                ports: vec![
                    None,
                    Some(PortRec {
                        num: 1,
                        guid: guid + 1,
                        base_lid: lid,
                        lmc: 0,
                        info: Some(pi),
                        remote: None,
                    }),
                ],
            }
        };
        let mut sw = NodeRec {
            info: NodeInfo {
                node_type: SWITCH,
                num_ports: 3,
                node_guid: 0x100,
                port_guid: 0x100,
                ..NodeInfo::default()
            },
            desc: "switch".into(),
            smalid: 3,
            smalmc: 0,
            enhsp0: true,
            switch_info: Some(SwitchInfo {
                linear_fdb_cap: 48 * 1024,
                linear_fdb_top: 3,
                ..SwitchInfo::default()
            }),
            path: vec![0, 1],
            ports: vec![None; 4],
        };
        for p in 0..=3u8 {
            sw.ports[usize::from(p)] = Some(PortRec {
                num: p,
                guid: 0x100,
                base_lid: 3,
                lmc: 0,
                info: Some(PortInfo {
                    lid: 3,
                    local_port_num: p,
                    ..PortInfo::default()
                }),
                remote: None,
            });
        }
        let mut f = Fabric {
            nodes: vec![ca(0x10, 1, "host a"), sw, ca(0x20, 2, "host b")],
            from: Some((0, 1)),
        };
        for (a, b) in [((0, 1), (1, 1)), ((1, 2), (2, 1))] {
            f.nodes[a.0].ports[usize::from(a.1)]
                .as_mut()
                .unwrap()
                .remote = Some(b);
            f.nodes[b.0].ports[usize::from(b.1)]
                .as_mut()
                .unwrap()
                .remote = Some(a);
        }
        f
    }

    fn same(a: &Fabric, b: &Fabric) {
        assert_eq!(a.from, b.from);
        assert_eq!(a.nodes.len(), b.nodes.len());
        for (x, y) in a.nodes.iter().zip(&b.nodes) {
            assert_eq!(x.info, y.info);
            assert_eq!(x.desc, y.desc);
            assert_eq!(
                (x.smalid, x.smalmc, x.enhsp0),
                (y.smalid, y.smalmc, y.enhsp0)
            );
            assert_eq!(x.switch_info, y.switch_info);
            assert_eq!(x.ports.len(), y.ports.len());
            for (p, q) in x.ports.iter().zip(&y.ports) {
                match (p, q) {
                    (None, None) => {}
                    (Some(p), Some(q)) => {
                        assert_eq!(
                            (p.num, p.guid, p.base_lid, p.lmc, p.remote),
                            (q.num, q.guid, q.base_lid, q.lmc, q.remote)
                        );
                        assert_eq!(p.info, q.info);
                    }
                    _ => panic!("port {p:?} against {q:?}", p = p.is_some(), q = q.is_some()),
                }
            }
        }
    }

    #[test]
    fn a_fabric_comes_back_as_it_was_written() {
        let f = fabric();
        let b = write(&f);
        // 28 + 3 nodes + 6 port keys + 6 ports.
        assert_eq!(b.len(), HEADER + 3 * NODE + 6 * KEY + 6 * PORT);
        assert_eq!(&b[..4], &MAGIC.to_le_bytes());
        assert_eq!(&b[8..16], &[3, 0, 0, 0, 6, 0, 0, 0]);
        // The first node in the file is the last found.
        assert_eq!(&b[HEADER + 68..HEADER + 76], &0x20u64.to_le_bytes());
        same(&read(&b).unwrap(), &f);
    }

    #[test]
    fn every_cut_of_a_file_is_an_error_and_never_a_panic() {
        let b = write(&fabric());
        for n in 0..b.len() {
            assert!(read(&b[..n]).is_err(), "{n} bytes read as a fabric");
        }
    }

    #[test]
    fn hostile_headers_and_records_are_typed_errors() {
        let good = write(&fabric());
        let mut b = good.clone();
        b[0] ^= 1;
        assert!(matches!(read(&b), Err(CacheError::Magic(_))));
        let mut b = good.clone();
        b[4] = 2;
        assert!(matches!(read(&b), Err(CacheError::Version(2))));
        // Counts beyond what the bytes hold: refused before any allocation.
        let mut b = good.clone();
        b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read(&b),
            Err(CacheError::Count { what: "node", .. })
        ));
        let mut b = good.clone();
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read(&b),
            Err(CacheError::Count { what: "port", .. })
        ));
        // A starting node that is not there.
        let mut b = good.clone();
        b[16..24].copy_from_slice(&0xdeadu64.to_le_bytes());
        assert!(matches!(read(&b), Err(CacheError::NoStartNode(0xdead))));
        // Every single byte flipped: a fabric or an error, never a panic.
        for i in 0..good.len() {
            for x in [0x01, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] ^= x;
                let _ = read(&b);
            }
        }
    }

    #[test]
    fn ports_and_links_that_lead_outside_the_file_are_left_out() {
        let f = fabric();
        let mut b = write(&f);
        let ports_at = HEADER + 3 * NODE + 6 * KEY;
        // The first port record names a port number beyond its node's
        // (a CA of one port): it is left out, and the link to it with it.
        let first = ports_at;
        let num = b[first + 8];
        assert_eq!(num, 1);
        b[first + 8] = 9;
        let g = read(&b).unwrap();
        let total = |f: &Fabric| {
            f.nodes
                .iter()
                .flat_map(|n| n.ports.iter().flatten())
                .count()
        };
        assert_eq!(total(&g), total(&f) - 1);
        let links = |f: &Fabric| {
            f.nodes
                .iter()
                .flat_map(|n| n.ports.iter().flatten())
                .filter(|p| p.remote.is_some())
                .count()
        };
        // Both ends of the link lose it: the switch's port 2 points at a
        // port that is not there.
        assert_eq!(links(&g), links(&f) - 2);
    }
}
