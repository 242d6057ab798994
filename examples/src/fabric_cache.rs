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
//! Nodes are in the order the C tools list them (last found first); a
//! port is in the file once its PortInfo came.
//!
//! A file is untrusted input: it must be a regular file of at most
//! [`MAX_FILE`] bytes with the header's magic and version before the rest
//! is read, every length is checked before it is read, and the counts
//! cannot claim more records than the file's bytes hold. What the file
//! says is taken as libibnetdisc takes it (`_rebuild_nodes`,
//! `_rebuild_ports`): of two port records of one (GUID, number) the later
//! one counts, a node's port key without a record or with a number past
//! the node's ports is left out, a link to a port no node holds is no
//! link, two nodes of one GUID are both kept; and what libibnetdisc
//! refuses is a [`CacheError`] (one record held by two nodes, a port
//! whose node is not in the file, no starting node). Nothing panics.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::Path;

use rdma::mad::{Attribute, NodeDescription, NodeInfo, PortInfo, SwitchInfo};

use crate::discover::{Fabric, NodeRec, PortRec, SWITCH};

/// The file's first four bytes.
pub const MAGIC: u32 = 0x8FE7_832B;
/// The only version there is.
pub const VERSION: u32 = 1;
/// The largest file read: a cache of 2,000 nodes is about 8 MB.
pub const MAX_FILE: u64 = 256 << 20;
const HEADER: usize = 28;
/// A node record without its port keys (its count of them included).
const NODE: usize = 15 + 3 * 64;
/// A port key: GUID and number.
const KEY: usize = 9;
const PORT: usize = 31 + 64;

/// Why a cache file could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheError {
    /// The file could not be opened, read or written.
    Io(String),
    /// Not a regular file, or larger than [`MAX_FILE`].
    NotACache(String),
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
    /// One port record placed by two nodes' keys.
    PortHeldTwice { guid: u64, num: u8 },
    /// The header's starting node is not in the file (or, to write, the
    /// fabric has none).
    NoStartNode(u64),
    /// A port record placed in a node whose own record names a node that
    /// is not in the file.
    PortWithoutNode { guid: u64, num: u8, node: u64 },
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Io(e) => write!(f, "{e}"),
            CacheError::NotACache(why) => write!(f, "not a fabric cache: {why}"),
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
            CacheError::PortHeldTwice { guid, num } => {
                write!(f, "port {guid:#018x}:{num} held by two nodes")
            }
            CacheError::NoStartNode(g) => {
                write!(f, "the starting node {g:#018x} is not in the file")
            }
            CacheError::PortWithoutNode { guid, num, node } => write!(
                f,
                "port {guid:#018x}:{num} of node {node:#018x}, which is not in the file"
            ),
        }
    }
}

impl std::error::Error for CacheError {}

/// The ports that go into the file: those whose PortInfo came.
fn cached(p: &PortRec) -> bool {
    p.info.is_some()
}

/// The file's bytes for `f`: its nodes last found first, as the C tools
/// write them, and of each node the ports whose PortInfo came (at most
/// 255: the count is a byte).
pub fn write(f: &Fabric) -> Result<Vec<u8>, CacheError> {
    let (from, _) = f.from.ok_or(CacheError::NoStartNode(0))?;
    let from = f.nodes[from].info.node_guid;
    // Each node's cached ports, in the file's order of nodes.
    let kept: Vec<(usize, Vec<&PortRec>)> = f
        .nodes
        .iter()
        .enumerate()
        .rev()
        .map(|(i, n)| {
            let ports = n.ports.iter().flatten().map(|p| &**p).filter(|p| cached(p));
            (i, ports.take(255).collect())
        })
        .collect();
    let port_count: usize = kept.iter().map(|(_, ports)| ports.len()).sum();
    let mut o = Vec::new();
    o.extend(MAGIC.to_le_bytes());
    o.extend(VERSION.to_le_bytes());
    o.extend((f.nodes.len() as u32).to_le_bytes());
    o.extend((port_count as u32).to_le_bytes());
    o.extend(from.to_le_bytes());
    o.extend(f.max_hops.to_le_bytes());
    for (i, ports) in &kept {
        let n = &f.nodes[*i];
        o.extend(n.smalid.to_le_bytes());
        o.push(n.smalmc);
        o.push(u8::from(n.enhsp0));
        o.extend(smp_data(n.switch_info.as_ref()));
        o.extend(n.info.node_guid.to_le_bytes());
        o.push(n.info.node_type);
        o.push(n.info.num_ports);
        o.extend(smp_data(Some(&n.info)));
        o.extend(n.description.0);
        o.push(ports.len() as u8);
        for p in ports {
            o.extend(p.guid.to_le_bytes());
            o.push(p.num);
        }
    }
    for (i, p) in kept
        .iter()
        .flat_map(|(i, ports)| ports.iter().map(move |p| (*i, p)))
    {
        o.extend(p.guid.to_le_bytes());
        o.push(p.num);
        o.push(0); // the external port number: no chassis here
        o.extend(p.base_lid.to_le_bytes());
        o.push(p.lmc);
        o.extend(smp_data(p.info.as_ref()));
        o.extend(f.nodes[i].info.node_guid.to_le_bytes());
        match p.remote.map(|r| f.port(r).1).filter(|r| cached(r)) {
            Some(r) => {
                o.push(1);
                o.extend(r.guid.to_le_bytes());
                o.push(r.num);
            }
            None => o.extend([0; 10]),
        }
    }
    Ok(o)
}

/// Writes `f` to `path` as the C library does: a file already there is
/// removed first, the new one created (mode 0644, never through a link
/// left in its place), and removed again if it cannot be written whole.
pub fn save(path: &Path, f: &Fabric) -> Result<(), CacheError> {
    let bytes = write(f)?;
    let io = |e: std::io::Error| CacheError::Io(format!("{}: {e}", path.display()));
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(io)?
    };
    if let Err(e) = file.write_all(&bytes).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(io(e));
    }
    Ok(())
}

/// Reads the fabric of the cache file at `path`: a regular file of at
/// most [`MAX_FILE`] bytes whose header is checked before the rest is
/// read.
pub fn load(path: &Path) -> Result<Fabric, CacheError> {
    let io = |e: std::io::Error| CacheError::Io(format!("{}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(CacheError::NotACache(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > MAX_FILE {
        return Err(CacheError::NotACache(format!(
            "{} has {} bytes, more than {MAX_FILE}",
            path.display(),
            meta.len()
        )));
    }
    let mut b = Vec::new();
    (&mut file)
        .take(HEADER as u64)
        .read_to_end(&mut b)
        .map_err(io)?;
    header(&b)?;
    (&mut file)
        .take(MAX_FILE - HEADER as u64)
        .read_to_end(&mut b)
        .map_err(io)?;
    read(&b)
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
    /// Whether the bytes left can hold `count` records of at least
    /// `size` bytes each (checked before anything is allocated for them).
    fn room_for(&self, what: &'static str, count: u32, size: usize) -> Result<(), CacheError> {
        let room = self.b.len().saturating_sub(self.at) / size;
        if count as usize > room {
            return Err(CacheError::Count { what, count, room });
        }
        Ok(())
    }
}

fn attr<A: Attribute>(b: &[u8], what: &'static str, guid: u64) -> Result<A, CacheError> {
    A::decode(b).map_err(|e| CacheError::Attribute {
        what,
        guid,
        why: e.to_string(),
    })
}

/// The header: node count, port count, starting node, hops.
fn header(b: &[u8]) -> Result<(u32, u32, u64, u32), CacheError> {
    let mut r = In { b, at: 0 };
    let magic = r.u32("the header")?;
    if magic != MAGIC {
        return Err(CacheError::Magic(magic));
    }
    let version = r.u32("the header")?;
    if version != VERSION {
        return Err(CacheError::Version(version));
    }
    Ok((
        r.u32("the header")?,
        r.u32("the header")?,
        r.u64("the header")?,
        r.u32("the header")?,
    ))
}

/// A port record: the port, its node's GUID, and its link's far end.
struct PortEntry {
    key: (u64, u8),
    port: Option<PortRec>,
    node: u64,
    remote: Option<(u64, u8)>,
    /// Where it was placed: (node, port number).
    placed: Option<(usize, u8)>,
}

/// The fabric a cache file's bytes hold.
pub fn read(b: &[u8]) -> Result<Fabric, CacheError> {
    let (node_count, port_count, from_guid, max_hops) = header(b)?;
    let mut r = In { b, at: HEADER };
    r.room_for("node", node_count, NODE)?;
    // Nodes in the file's order (the C tools' listing order), each with
    // its port keys.
    let mut listed = Vec::with_capacity(node_count as usize);
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
        let description: NodeDescription = attr(r.take("a node", 64)?, "NodeDescription", guid)?;
        let stored = r.u8("a node")?;
        let mut keys = Vec::with_capacity(usize::from(stored));
        for _ in 0..stored {
            let k = r.take("a node's port keys", KEY)?;
            let mut g = [0; 8];
            g.copy_from_slice(&k[..8]);
            keys.push((u64::from_le_bytes(g), k[8]));
        }
        let switch_info = if node_type == SWITCH {
            Some(attr::<SwitchInfo>(si, "SwitchInfo", guid)?)
        } else {
            None
        };
        listed.push((
            NodeRec {
                info,
                desc: description.text(),
                description,
                smalid,
                smalmc,
                enhsp0,
                switch_info,
                path: Vec::new(),
                ports: vec![None; usize::from(num_ports) + 1],
            },
            keys,
        ));
    }
    r.room_for("port", port_count, PORT)?;
    let mut entries = Vec::with_capacity(port_count as usize);
    // The record of each key: the last one of the file (libibnetdisc's
    // hash chains hold the newest first).
    let mut by_key: HashMap<(u64, u8), usize> = HashMap::new();
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
        by_key.insert((guid, num), entries.len());
        entries.push(PortEntry {
            key: (guid, num),
            port: Some(PortRec {
                num,
                guid,
                base_lid,
                lmc,
                info: Some(info),
                remote: None,
            }),
            node,
            remote: (flag != 0).then_some((rg, rn)),
            placed: None,
        });
    }
    // The nodes in the order they were found: the file's reversed. Of two
    // nodes of one GUID, the one later in the file is the one a GUID
    // names (the newest of libibnetdisc's hash chain).
    let mut nodes: Vec<NodeRec> = Vec::with_capacity(listed.len());
    let mut keys_of = Vec::with_capacity(listed.len());
    for (n, keys) in listed.into_iter().rev() {
        nodes.push(n);
        keys_of.push(keys);
    }
    let mut by_guid: HashMap<u64, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate().rev() {
        by_guid.insert(n.info.node_guid, i);
    }
    // Each node's keys, nodes in found order (libibnetdisc's
    // `_rebuild_nodes`): a key without a record or past the node's ports
    // is skipped, a record placed twice refuses the file, a later key of
    // the same number takes the slot.
    for (n, keys) in keys_of.iter().enumerate() {
        for key in keys {
            let Some(&e) = by_key.get(key) else {
                continue;
            };
            if entries[e].placed.is_some() {
                return Err(CacheError::PortHeldTwice {
                    guid: key.0,
                    num: key.1,
                });
            }
            if usize::from(key.1) >= nodes[n].ports.len() {
                continue;
            }
            let port = entries[e].port.take();
            nodes[n].ports[usize::from(key.1)] = port.map(Box::new);
            entries[e].placed = Some((n, key.1));
        }
    }
    // The placed records' nodes must be there; links only to ports placed
    // (`_rebuild_ports`). A port whose slot a later key took is no longer
    // where it was placed: its links go with it.
    for e in &entries {
        if e.placed.is_some() && !by_guid.contains_key(&e.node) {
            return Err(CacheError::PortWithoutNode {
                guid: e.key.0,
                num: e.key.1,
                node: e.node,
            });
        }
    }
    let held = |n: usize, num: u8, guid: u64| {
        nodes[n].ports[usize::from(num)]
            .as_ref()
            .is_some_and(|p| p.guid == guid && p.num == num)
    };
    let mut links = Vec::new();
    for entry in &entries {
        let (Some((n, num)), Some(far)) = (entry.placed, entry.remote) else {
            continue;
        };
        let Some(&fe) = by_key.get(&far) else {
            continue;
        };
        let Some((fnode, fnum)) = entries[fe].placed else {
            continue;
        };
        if held(fnode, fnum, far.0) {
            links.push(((n, num), (fnode, fnum)));
        }
    }
    for (here, there) in links {
        if let Some(Some(p)) = nodes[here.0].ports.get_mut(usize::from(here.1)) {
            p.remote = Some(there);
        }
    }
    let from = *by_guid
        .get(&from_guid)
        .ok_or(CacheError::NoStartNode(from_guid))?;
    Ok(Fabric {
        nodes,
        from: Some((from, 0)),
        max_hops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma::mad::{PhysPortState, PortState};

    fn port(num: u8, guid: u64, lid: u16) -> Option<Box<PortRec>> {
        Some(Box::new(PortRec {
            num,
            guid,
            base_lid: lid,
            lmc: 0,
            info: Some(PortInfo {
                lid,
                local_port_num: num,
                port_state: PortState::Active,
                port_physical_state: PhysPortState::LinkUp,
                ..PortInfo::default()
            }),
            remote: None,
        }))
    }

    fn ca(guid: u64, lid: u16, desc: &str) -> NodeRec {
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
            description: NodeDescription::new(desc).unwrap(),
            smalid: 0,
            smalmc: 0,
            enhsp0: false,
            switch_info: None,
            path: vec![0],
            ports: vec![None, port(1, guid + 1, lid)],
        }
    }

    /// A switch (3 ports, 1 and 2 linked to two CAs) and two CAs, in the
    /// order a sweep from the first CA finds them.
    fn fabric() -> Fabric {
        let mut sw = NodeRec {
            info: NodeInfo {
                node_type: SWITCH,
                num_ports: 3,
                node_guid: 0x100,
                port_guid: 0x100,
                ..NodeInfo::default()
            },
            desc: "switch".into(),
            description: NodeDescription::new("switch").unwrap(),
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
            sw.ports[usize::from(p)] = port(p, 0x100, 3);
        }
        let mut f = Fabric {
            nodes: vec![ca(0x10, 1, "host a"), sw, ca(0x20, 2, "host b")],
            from: Some((0, 1)),
            max_hops: 2,
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
        assert_eq!(a.max_hops, b.max_hops);
        assert_eq!(a.from.map(|f| f.0), b.from.map(|f| f.0));
        assert_eq!(a.nodes.len(), b.nodes.len());
        for (x, y) in a.nodes.iter().zip(&b.nodes) {
            assert_eq!(x.info, y.info);
            assert_eq!((&x.desc, x.description.0), (&y.desc, y.description.0));
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
                    _ => panic!("a port on one side only"),
                }
            }
        }
    }

    /// Where the port records start in `write(&fabric())`.
    const PORTS_AT: usize = HEADER + 3 * NODE + 6 * KEY;

    #[test]
    fn a_fabric_comes_back_as_it_was_written() {
        let f = fabric();
        let b = write(&f).unwrap();
        assert_eq!(b.len(), PORTS_AT + 6 * PORT);
        same(&read(&b).unwrap(), &f);
    }

    /// The bytes of the C library's layout, built field by field from its
    /// `_cache_node`/`_cache_port`, against `write` (so that a field
    /// written in the wrong place or order, which a round trip through
    /// `read` would not see, fails here).
    #[test]
    fn the_bytes_are_laid_out_as_libibnetdisc_lays_them_out() {
        let mut f = Fabric {
            nodes: vec![ca(0x1122_3344_5566_7788, 0x0abc, "hostname mlx5_0")],
            from: Some((0, 1)),
            max_hops: 7,
        };
        f.nodes[0].ports[1].as_mut().unwrap().lmc = 2;
        let mut want = Vec::new();
        want.extend([0x2b, 0x83, 0xe7, 0x8f, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
        want.extend([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 7, 0, 0, 0]);
        // The node: smalid, smalmc, enhsp0, SwitchInfo, GUID, type, ports,
        // NodeInfo, NodeDescription, one key.
        want.extend([0, 0, 0, 0]);
        want.extend([0; 64]);
        want.extend([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 1, 1]);
        let mut smp = [0u8; 64];
        let ni = f.nodes[0].info.to_bytes().unwrap();
        smp[..ni.len()].copy_from_slice(&ni);
        want.extend(smp);
        let mut desc = [0u8; 64];
        desc[..15].copy_from_slice(b"hostname mlx5_0");
        want.extend(desc);
        want.push(1);
        want.extend([0x89, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 1]);
        // The port: GUID, number, external number, base LID, LMC,
        // PortInfo, node GUID, no link.
        want.extend([
            0x89, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 1, 0, 0xbc, 0x0a, 2,
        ]);
        let mut smp = [0u8; 64];
        let pi = f.nodes[0].ports[1]
            .as_ref()
            .unwrap()
            .info
            .unwrap()
            .to_bytes()
            .unwrap();
        smp[..pi.len()].copy_from_slice(&pi);
        want.extend(smp);
        want.extend([0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        want.extend([0; 10]);
        assert_eq!(write(&f).unwrap(), want);
    }

    #[test]
    fn a_port_whose_portinfo_never_came_is_not_cached_nor_linked_to() {
        let mut f = fabric();
        // The switch's port 2 (linked to host b) never answered.
        f.nodes[1].ports[2].as_mut().unwrap().info = None;
        let g = read(&write(&f).unwrap()).unwrap();
        assert!(g.nodes[1].ports[2].is_none());
        assert_eq!(g.nodes[2].ports[1].as_ref().unwrap().remote, None);
        assert_eq!(g.nodes[0].ports[1].as_ref().unwrap().remote, Some((1, 1)));
        // Without a start there is no file.
        f.from = None;
        assert!(matches!(write(&f), Err(CacheError::NoStartNode(_))));
    }

    // Exhaustive, of safe code only: thousands of reads, minutes under
    // Miri; run natively.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn every_cut_of_a_file_is_an_error_and_never_a_panic() {
        let b = write(&fabric()).unwrap();
        for n in 0..b.len() {
            assert!(read(&b[..n]).is_err(), "{n} bytes read as a fabric");
        }
    }

    // Its loop over every byte flipped: as above.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn hostile_headers_are_typed_errors() {
        let good = write(&fabric()).unwrap();
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

    /// The port records of `write(&fabric())`, in the file's order: host
    /// b's port 1, the switch's ports 0 to 3, host a's port 1.
    fn record(b: &[u8], i: usize) -> std::ops::Range<usize> {
        let at = PORTS_AT + i * PORT;
        assert!(b.len() >= at + PORT);
        at..at + PORT
    }

    #[test]
    fn records_are_taken_as_libibnetdisc_takes_them() {
        let good = write(&fabric()).unwrap();
        // A port number past its node's ports (host b's key and record
        // both say 9): left out, and the switch's link to it with it.
        let mut b = good.clone();
        let key = HEADER + NODE; // host b's only key
        assert_eq!(b[key + 8], 1);
        b[key + 8] = 9;
        let r = record(&b, 0).start;
        b[r + 8] = 9;
        let g = read(&b).unwrap();
        assert!(g.nodes[2].ports[1].is_none());
        assert_eq!(g.nodes[1].ports[2].as_ref().unwrap().remote, None);
        // Two records of one port: the later one counts. The file gets
        // host a's record twice, the second with LID 9.
        let mut b = good.clone();
        let a = b[record(&good, 5)].to_vec();
        let mut a9 = a.clone();
        a9[10..12].copy_from_slice(&9u16.to_le_bytes());
        b.extend(&a9);
        let n = u32::from_le_bytes(b[12..16].try_into().unwrap()) + 1;
        b[12..16].copy_from_slice(&n.to_le_bytes());
        let g = read(&b).unwrap();
        assert_eq!(g.nodes[0].ports[1].as_ref().unwrap().base_lid, 9);
        // A key that no record has is skipped: host a's key names a GUID
        // that no port record has.
        let mut b = good.clone();
        let a_key = HEADER + 3 * NODE + 5 * KEY; // after b's and the switch's keys
        assert_eq!(b[a_key + 8], 1);
        b[a_key..a_key + 8].copy_from_slice(&0x77u64.to_le_bytes());
        let g = read(&b).unwrap();
        assert!(g.nodes[0].ports[1].is_none());
        // One record under two nodes' keys refuses the file.
        let mut b = good.clone();
        let r = b[a_key..a_key + KEY].to_vec();
        b[key..key + KEY].copy_from_slice(&r);
        assert!(matches!(read(&b), Err(CacheError::PortHeldTwice { .. })));
        // A placed record whose node is not in the file refuses it.
        let mut b = good.clone();
        let r = record(&b, 5).start;
        b[r + 77..r + 85].copy_from_slice(&0x99u64.to_le_bytes());
        assert!(matches!(
            read(&b),
            Err(CacheError::PortWithoutNode { node: 0x99, .. })
        ));
        // Two nodes of one GUID are both kept (host b's record named
        // host a's GUID: the later one in the file, host a, is the start).
        let mut b = good.clone();
        let g_at = HEADER + 68;
        b[g_at..g_at + 8].copy_from_slice(&0x10u64.to_le_bytes());
        let r = record(&b, 0).start;
        b[r + 77..r + 85].copy_from_slice(&0x10u64.to_le_bytes());
        let g = read(&b).unwrap();
        assert_eq!(g.nodes.len(), 3);
        assert_eq!(g.from, Some((0, 0)));
    }

    // Files: Miri isolates the file system.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn load_reads_only_regular_files_and_checks_the_header_first() {
        let dir = std::env::temp_dir().join(format!("fabric-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.cache");
        save(&path, &fabric()).unwrap();
        same(&load(&path).unwrap(), &fabric());
        // Saved again over the old one.
        save(&path, &fabric()).unwrap();
        assert!(matches!(load(&dir), Err(CacheError::NotACache(_))));
        assert!(matches!(
            load(Path::new("/dev/zero")),
            Err(CacheError::NotACache(_))
        ));
        assert!(matches!(load(&dir.join("absent")), Err(CacheError::Io(_))));
        std::fs::write(
            &path,
            b"not a cache at all, but long enough to hold a header",
        )
        .unwrap();
        assert!(matches!(load(&path), Err(CacheError::Magic(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
