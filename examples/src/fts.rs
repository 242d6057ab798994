//! What `ibroute` and `dump_fts` share: a switch's linear forwarding table
//! (each LID's output port and the port behind the LID) and its multicast
//! forwarding table (each MLID's port mask), read by SMPs and printed as
//! infiniband-diags prints them. Where the port behind a LID comes from
//! (SMPs to the LID for `ibroute`, the fabric swept for `dump_fts`) and
//! what a failed read does are the caller's.

use std::fmt::Write as _;

use rdma::mad::diag::{Hex, NodeType};
use rdma::mad::{LinearForwardingTable, MulticastForwardingTable, SwitchInfo};

use crate::ibdiag::{self, Dest, Diag};

/// The highest unicast LID.
pub const MAX_UCAST_LID: u32 = 0xbfff;
/// The first multicast LID.
pub const MIN_MCAST_LID: u32 = 0xc000;
/// The highest multicast LID.
pub const MAX_MCAST_LID: u32 = 0xfffe;

/// The switch whose tables are dumped.
pub struct Switch {
    /// NodeInfo:NumPorts.
    pub nports: u32,
    /// NodeInfo:NodeGUID.
    pub guid: u64,
    /// Its NodeDescription, as printed.
    pub desc: String,
    /// Its SwitchInfo (the tables' tops and capacity).
    pub info: SwitchInfo,
    /// Where SMPs to it go.
    pub dest: Dest,
    /// `dest` as the header line names it (`Lid 3`, `DR path slid 0;
    /// dlid 0; 0,3`).
    pub at: String,
}

/// The options of both tools.
#[derive(Clone, Copy, Default)]
pub struct Options {
    /// `-a`: every entry, even those with an invalid port or no port.
    pub all: bool,
    /// `-n`: no destination column (LFT), masks in hex (MFT).
    pub brief: bool,
    /// `-v`: the multicast capacity and top.
    pub verbose: bool,
}

/// The port behind a LID.
pub struct LidPort {
    pub node_type: u8,
    pub port_guid: u64,
    pub base_lid: u16,
    pub lmc: u8,
    pub desc: String,
}

/// A failed read of a table block: `Err` stops the dump (after printing
/// nothing more), `Ok` goes on with the block as it was.
pub type OnError<'a> = &'a dyn Fn(&Switch, &str, u32, &ibdiag::Error) -> Result<(), ()>;

/// What `dump_lid` remembers between LIDs: the LMC range of the last port
/// resolved and its GUID.
#[derive(Default)]
struct LidCache {
    base: u32,
    last: u32,
    port_guid: u64,
}

impl LidCache {
    /// The destination column of `lid` (`dump_lid`); `unknown` when
    /// `find` knows no port of the LID.
    fn describe(
        &mut self,
        lid: u32,
        valid: bool,
        find: &mut dyn FnMut(u32) -> Option<LidPort>,
        unknown: &str,
    ) -> String {
        if lid <= self.last {
            let (nth, of) = (lid - self.base + 1, self.last - self.base + 1);
            return if !valid {
                format!(": (path #{} - illegal port)", lid - self.base)
            } else if self.port_guid == 0 {
                format!(": (path #{nth} out of {of})")
            } else {
                format!(
                    ": (path #{nth} out of {of}: portguid {})",
                    Hex(self.port_guid, 8)
                )
            };
        }
        if !valid {
            return ": (illegal port)".into();
        }
        self.port_guid = 0;
        let Some(p) = find(lid) else {
            return unknown.into();
        };
        self.port_guid = p.port_guid;
        if p.lmc > 0 {
            self.base = u32::from(p.base_lid);
            self.last = self.base + (1 << p.lmc) - 1;
        }
        format!(
            ": ({} portguid {}: '{}')",
            NodeType(p.node_type),
            Hex(p.port_guid, 8),
            p.desc
        )
    }
}

/// The first line of a table: `Unicast lids [0x1-0x6] of switch Lid 3 guid
/// 0x... (Switch2):` (`kind` its first words).
fn table_header(kind: &str, start: u32, end: u32, sw: &Switch) {
    println!(
        "{kind} [0x{start:x}-0x{end:x}] of switch {} guid {} ({}):",
        sw.at,
        Hex(sw.guid, 8),
        sw.desc
    );
}

/// Dumps the linear forwarding table from `start` to `end` (0: the top),
/// the port behind each LID from `find` (`unknown` when it has none).
pub fn dump_unicast(
    diag: &Diag,
    o: Options,
    sw: &Switch,
    (start, end): (u32, u32),
    find: &mut dyn FnMut(u32) -> Option<LidPort>,
    unknown: &str,
    on_error: OnError<'_>,
) {
    let top = u32::from(sw.info.linear_fdb_top);
    let mut end = if end == 0 || end > top { top } else { end };
    if end > MAX_UCAST_LID {
        eprintln!("ibwarn: illegal lft top {end}, truncate to {MAX_UCAST_LID}");
        end = MAX_UCAST_LID;
    }
    table_header("Unicast lids", start, end, sw);
    println!("  Lid  Out   Destination");
    println!("       Port     Info ");
    let mut cache = LidCache::default();
    let mut n = 0;
    let mut lft = LinearForwardingTable { ports: [0; 64] };
    // The blocks up to endlid rounded up to a block, so an endlid on a
    // block's first LID leaves that block out (as the C tools).
    for block in start / 64..end.div_ceil(64) {
        match diag.smp_get::<LinearForwardingTable>(block, &sw.dest) {
            Ok(t) => lft = t,
            Err(e) => {
                if on_error(sw, "LFT", block, &e).is_err() {
                    return;
                }
            }
        }
        let first = (block * 64).max(start);
        let last = (block * 64 + 64).min(end + 1);
        for lid in first..last {
            let out = u32::from(lft.ports[(lid % 64) as usize]);
            let valid = out <= sw.nports;
            if !valid && !o.all {
                continue;
            }
            let info = if o.brief {
                String::new()
            } else {
                cache.describe(lid, valid, find, unknown)
            };
            println!("0x{lid:04x} {out:03} {info}");
            n += 1;
        }
    }
    println!("{n} {}lids dumped ", if o.all { "" } else { "valid " });
}

/// The port-mask column of an MLID (`dump_mlid`): `None` when every mask
/// is empty and not `-a`.
fn mlid_line(o: Options, nports: u32, masks: &[u16]) -> Option<String> {
    let nonzero = masks.iter().any(|&m| m != 0);
    if !nonzero && !o.all {
        return None;
    }
    let mut s = String::new();
    if o.brief {
        for m in masks {
            let _ = write!(s, "{m:04x}");
        }
    } else {
        for i in 0..=nports as usize {
            s.push(if masks[i / 16] & (1 << (i % 16)) != 0 {
                'x'
            } else {
                ' '
            });
            s.push(' ');
        }
    }
    Some(s)
}

/// The column heads of the port masks.
fn ports_header(o: Options, nports: u32) {
    if o.brief {
        println!(" MLid       Port Mask");
        return;
    }
    if nports > 9 {
        let tens: String = (0..=nports)
            .map(|i| {
                if i % 10 != 0 {
                    "  ".to_string()
                } else {
                    format!("{} ", char::from(b'0' + (i / 10) as u8))
                }
            })
            .collect();
        println!("            {tens}");
    }
    let ones: String = (0..=nports).map(|i| format!("{} ", i % 10)).collect();
    println!("     Ports: {ones}");
    println!(" MLid");
}

/// Dumps the multicast forwarding table from `start` to `end` (0: the
/// first MLID, and the top or the capacity).
pub fn dump_multicast(
    diag: &Diag,
    o: Options,
    sw: &Switch,
    (start, end): (u32, u32),
    on_error: OnError<'_>,
) {
    let cap = u32::from(sw.info.multicast_fdb_cap);
    let top = u32::from(sw.info.multicast_fdb_top);
    let mut end = if end == 0 || end > MIN_MCAST_LID + cap - 1 {
        (MIN_MCAST_LID + cap).wrapping_sub(1)
    } else {
        end
    };
    if !o.all && top != 0 && top < end {
        if top < MIN_MCAST_LID - 1 {
            eprintln!("ibwarn: illegal top mlid {top:x}");
        } else {
            end = top;
        }
    }
    let start = if start == 0 {
        MIN_MCAST_LID
    } else if start < MIN_MCAST_LID {
        eprintln!("ibwarn: illegal start mlid {start:x}, set to {MIN_MCAST_LID:x}");
        MIN_MCAST_LID
    } else {
        start
    };
    if end > MAX_MCAST_LID {
        eprintln!("ibwarn: illegal end mlid {end:x}, truncate to {MAX_MCAST_LID:x}");
        end = MAX_MCAST_LID;
    }
    table_header("Multicast mlids", start, end, sw);
    ports_header(o, sw.nports);
    if o.verbose {
        println!("Switch multicast mlid capability is {cap} top is 0x{top:x}");
    }
    let chunks = (sw.nports + 1).div_ceil(16) as usize;
    let per = MulticastForwardingTable::ENTRIES as u32;
    let mut tables = vec![MulticastForwardingTable::default(); chunks];
    let mut n = 0;
    for block in start / per..=end / per {
        for (j, t) in tables.iter_mut().enumerate() {
            let modifier = (block - MIN_MCAST_LID / per) | ((j as u32) << 28);
            match diag.smp_get::<MulticastForwardingTable>(modifier, &sw.dest) {
                Ok(got) => *t = got,
                Err(e) => {
                    if on_error(sw, "MFT", modifier, &e).is_err() {
                        return;
                    }
                }
            }
        }
        let first = (block * per).max(start);
        let last = (block * per + per).min(end + 1);
        for mlid in first..last {
            let i = (mlid % per) as usize;
            let masks: Vec<u16> = tables.iter().map(|t| t.port_masks[i]).collect();
            if let Some(s) = mlid_line(o, sw.nports, &masks) {
                println!("0x{mlid:04x}      {s}");
                n += 1;
            }
        }
    }
    println!("{n} {}mlids dumped ", if o.all { "" } else { "valid " });
}
