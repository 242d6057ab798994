//! Queries a node's subnet management attributes with SMPs, like
//! infiniband-diags' `smpquery`: NodeInfo, NodeDesc, PortInfo,
//! SwitchInfo, PKeyTable, SL2VLTable, VLArbitration and GUIDInfo, by LID
//! or by directed route (`-D 0,1,3`).
//!
//! Usage: `smpquery [-D] OP DEST [PORT]`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::diag::Hex;
use rdma::mad::{
    GuidInfo, NodeDescription, PKeyTable, PortInfo, SlToVlMappingTable, SwitchInfo,
    VlArbitrationTable,
};
use rdma_examples::ibdiag::{self, field, Common, Dest, Diag};

/// Query a node's SMA attributes (like smpquery).
#[derive(Parser, Debug)]
#[command(name = "smpquery")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// The destination is a directed route (0,1,3), not a LID.
    #[arg(short = 'D', long = "Direct")]
    direct: bool,
    /// Ask for the extended speeds (bit 31 of PortInfo's modifier).
    #[arg(short = 'x', long = "extended")]
    extended: bool,
    /// The operation: NodeInfo (NI), NodeDesc (ND), PortInfo (PI),
    /// SwitchInfo (SI), PKeyTable (PKeys), SL2VLTable (SL2VL),
    /// VLArbitration (VLArb), GUIDInfo (GI); case does not matter.
    op: String,
    /// The LID, or with -D the directed route.
    dest: String,
    /// The operation's port number, where it takes one.
    params: Vec<String>,
}

type OpResult = Result<(), &'static str>;

struct Ctx<'a> {
    diag: &'a Diag,
    dest: Dest,
    port: u8,
    extended: bool,
}

const OPS: [(&str, &str); 8] = [
    ("NodeInfo", "NI"),
    ("NodeDesc", "ND"),
    ("PortInfo", "PI"),
    ("SwitchInfo", "SI"),
    ("PKeyTable", "PKeys"),
    ("SL2VLTable", "SL2VL"),
    ("VLArbitration", "VLArb"),
    ("GUIDInfo", "GI"),
];

impl Ctx<'_> {
    fn node_info(&self) -> OpResult {
        let n = self
            .diag
            .node_info(&self.dest)
            .map_err(|_| "node info query failed")?;
        print!("# Node info: {}\n{}", self.dest.describe(), n.diag());
        Ok(())
    }

    fn node_desc(&self) -> OpResult {
        self.diag
            .node_info(&self.dest)
            .map_err(|_| "node info query failed")?;
        let nd = self
            .diag
            .smp_get::<NodeDescription>(0, &self.dest)
            .map_err(|_| "node desc query failed")?;
        let name = nd.text();
        let dots = if name.len() < 32 { 32 - name.len() } else { 1 };
        println!("Node Description:{}{name}", ".".repeat(dots));
        Ok(())
    }

    fn port_info(&self) -> OpResult {
        let mut modifier = u32::from(self.port);
        if self.extended {
            modifier |= 1 << 31;
        }
        let p = self
            .diag
            .smp_get::<PortInfo>(modifier, &self.dest)
            .map_err(|_| "port info query failed")?;
        print!(
            "# Port info: {} port {}\n{}",
            self.dest.describe(),
            self.port,
            p.diag()
        );
        Ok(())
    }

    fn switch_info(&self) -> OpResult {
        let s = self
            .diag
            .smp_get::<SwitchInfo>(0, &self.dest)
            .map_err(|_| "switch info query failed")?;
        let mut o = String::new();
        field(&mut o, "LinearFdbCap", s.linear_fdb_cap);
        field(&mut o, "RandomFdbCap", s.random_fdb_cap);
        field(&mut o, "McastFdbCap", s.multicast_fdb_cap);
        field(&mut o, "LinearFdbTop", s.linear_fdb_top);
        field(&mut o, "DefPort", s.default_port);
        field(&mut o, "DefMcastPrimPort", s.default_multicast_primary_port);
        field(
            &mut o,
            "DefMcastNotPrimPort",
            s.default_multicast_not_primary_port,
        );
        field(&mut o, "LifeTime", s.life_time_value);
        field(&mut o, "StateChange", u8::from(s.port_state_change));
        field(
            &mut o,
            "OptSLtoVLMapping",
            s.optimized_sl_to_vl_mapping_programming,
        );
        field(&mut o, "LidsPerPort", s.lids_per_port);
        field(&mut o, "PartEnforceCap", s.partition_enforcement_cap);
        field(
            &mut o,
            "InboundPartEnf",
            u8::from(s.inbound_enforcement_cap),
        );
        field(
            &mut o,
            "OutboundPartEnf",
            u8::from(s.outbound_enforcement_cap),
        );
        field(
            &mut o,
            "FilterRawInbound",
            u8::from(s.filter_raw_inbound_cap),
        );
        field(
            &mut o,
            "FilterRawOutbound",
            u8::from(s.filter_raw_outbound_cap),
        );
        field(&mut o, "EnhancedPort0", u8::from(s.enhanced_port0));
        field(
            &mut o,
            "MulticastFDBTop",
            Hex(s.multicast_fdb_top.into(), 2),
        );
        print!("# Switch info: {}\n{o}", self.dest.describe());
        Ok(())
    }

    fn pkeys(&self) -> OpResult {
        let ni = self
            .diag
            .node_info(&self.dest)
            .map_err(|_| "node info query failed")?;
        if self.port > ni.num_ports {
            return Err("invalid port number");
        }
        let n = if ni.node_type == 2 && self.port != 0 {
            self.diag
                .smp_get::<SwitchInfo>(0, &self.dest)
                .map_err(|_| "switch info failed")?
                .partition_enforcement_cap
        } else {
            ni.partition_cap
        };
        let n = usize::from(n);
        let blocks = n.div_ceil(32);
        for i in 0..blocks {
            let t = self
                .diag
                .smp_get::<PKeyTable>(PKeyTable::attr_mod(i as u16, self.port), &self.dest)
                .map_err(|_| "pkey table query failed")?;
            let k = if i + 1 == blocks {
                ((n + 7 - i * 32) / 8) * 8
            } else {
                32
            };
            for j in (0..k.min(32)).step_by(8) {
                let p = &t.pkeys[j..j + 8];
                println!(
                    "{:4}: 0x{:04x} 0x{:04x} 0x{:04x} 0x{:04x} 0x{:04x} 0x{:04x} 0x{:04x} 0x{:04x}",
                    i * 32 + j,
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                    p[4],
                    p[5],
                    p[6],
                    p[7]
                );
            }
        }
        println!("{n} pkeys capacity for this port");
        Ok(())
    }

    fn sl2vl_entry(&self, input: u8, output: u8) -> OpResult {
        let t = self
            .diag
            .smp_get::<SlToVlMappingTable>(SlToVlMappingTable::attr_mod(input, output), &self.dest)
            .map_err(|_| "slvl query failed")?;
        let mut s = format!("ports: in {input:2}, out {output:2}: |");
        for vl in t.vl {
            s.push_str(&format!("{vl:2}|"));
        }
        println!("{s}");
        Ok(())
    }

    fn sl2vl(&self) -> OpResult {
        let ni = self
            .diag
            .node_info(&self.dest)
            .map_err(|_| "node info query failed")?;
        if self.port > ni.num_ports {
            return Err("invalid port number");
        }
        println!("# SL2VL table: {}", self.dest.describe());
        let mut head = String::from("#                 SL: |");
        for i in 0..16 {
            head.push_str(&format!("{i:2}|"));
        }
        println!("{head}");
        if ni.node_type != 2 {
            return self.sl2vl_entry(0, 0);
        }
        for i in 0..=ni.num_ports {
            self.sl2vl_entry(i, self.port)?;
        }
        Ok(())
    }

    fn vlarb_entry(&self, offset: u16, cap: usize) -> OpResult {
        let t = self
            .diag
            .smp_get::<VlArbitrationTable>(
                VlArbitrationTable::attr_mod(offset, self.port),
                &self.dest,
            )
            .map_err(|_| "vl arb query failed")?;
        let n = cap.min(32);
        let mut s = String::from("\nVL    : |");
        for e in &t.entries[..n] {
            s.push_str(&format!("0x{:<2X}|", e.vl & 0xf));
        }
        s.push_str("\nWEIGHT: |");
        for e in &t.entries[..n] {
            s.push_str(&format!("0x{:<2X}|", e.weight));
        }
        println!("{s}");
        Ok(())
    }

    fn vlarb_table(&self, name: &str, offset: u16, cap: usize) -> OpResult {
        print!("# {name} priority VL Arbitration Table:");
        self.vlarb_entry(offset, cap.min(32))?;
        if cap > 32 {
            self.vlarb_entry(offset + 1, cap - 32)?;
        }
        Ok(())
    }

    fn vlarb(&self) -> OpResult {
        if self.port == 0 {
            let ni = self
                .diag
                .node_info(&self.dest)
                .map_err(|_| "node info query failed")?;
            if ni.node_type == 2 {
                let si = self
                    .diag
                    .smp_get::<SwitchInfo>(0, &self.dest)
                    .map_err(|_| "switch info query failed")?;
                if !si.enhanced_port0 {
                    println!(
                        "# No VLArbitration tables (BSP0): {} port 0",
                        self.dest.describe()
                    );
                    return Ok(());
                }
            }
        }
        let p = self
            .diag
            .port_info(&self.dest, self.port)
            .map_err(|_| "port info query failed")?;
        let (low, high) = (p.vl_arbitration_low_cap, p.vl_arbitration_high_cap);
        println!(
            "# VLArbitration tables: {} port {} LowCap {low} HighCap {high}",
            self.dest.describe(),
            self.port
        );
        if low > 0 {
            self.vlarb_table("Low", 1, low.into())?;
        }
        if high > 0 {
            self.vlarb_table("High", 3, high.into())?;
        }
        Ok(())
    }

    fn guids(&self) -> OpResult {
        let p = self
            .diag
            .port_info(&self.dest, 0)
            .map_err(|_| "port info failed")?;
        let n = usize::from(p.guid_cap);
        let blocks = n.div_ceil(8);
        for i in 0..blocks {
            let g = self
                .diag
                .smp_get::<GuidInfo>(GuidInfo::attr_mod(i as u32), &self.dest)
                .map_err(|_| "guid info query failed")?;
            let k = if i + 1 == blocks {
                ((n + 1 - i * 8) / 2) * 2
            } else {
                8
            };
            for j in (0..k.min(8)).step_by(2) {
                println!(
                    "{:4}: 0x{:016x} 0x{:016x}",
                    i * 8 + j,
                    g.guids[j],
                    g.guids.get(j + 1).copied().unwrap_or(0)
                );
            }
        }
        println!("{n} guids capacity for this port");
        Ok(())
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let Some(op) = OPS.iter().position(|(name, alias)| {
        a.op.eq_ignore_ascii_case(name) || a.op.eq_ignore_ascii_case(alias)
    }) else {
        ibdiag::exit_error("smpquery", &format!("operation '{}' not supported", a.op))
    };
    let diag = Diag::open(&a.common).unwrap_or_else(|e| ibdiag::exit_error("smpquery", &e));
    let dest =
        Dest::parse(&a.dest, a.direct).unwrap_or_else(|e| ibdiag::exit_error("smpquery", &e));
    let port = a
        .params
        .first()
        .and_then(|p| ibdiag::parse_int(p))
        .unwrap_or(0) as u8;
    let ctx = Ctx {
        diag: &diag,
        dest,
        port,
        extended: a.extended,
    };
    let r = match op {
        0 => ctx.node_info(),
        1 => ctx.node_desc(),
        2 => ctx.port_info(),
        3 => ctx.switch_info(),
        4 => ctx.pkeys(),
        5 => ctx.sl2vl(),
        6 => ctx.vlarb(),
        _ => ctx.guids(),
    };
    if let Err(e) = r {
        ibdiag::exit_error("smpquery", &format!("operation {}: {e}", a.op));
    }
    ExitCode::SUCCESS
}
