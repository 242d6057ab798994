//! Queries a node's subnet management attributes with SMPs, like
//! infiniband-diags' `smpquery`: NodeInfo, NodeDesc, PortInfo,
//! SwitchInfo, PKeyTable, SL2VLTable, VLArbitration and GUIDInfo, by LID
//! or by directed route (`-D 0,1,3`).
//!
//! Usage: `smpquery [-D] OP DEST [PORT]`

use std::process::ExitCode;

use clap::Parser;
use rdma::mad::diag::{SlToVlHeader, VlArbPriority};
use rdma::mad::{
    GuidInfo, NodeDescription, PKeyTable, PortInfo, SlToVlMappingTable, SwitchInfo,
    VlArbitrationTable,
};
use rdma_examples::ibdiag::{self, Common, Dest, Diag};

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
        print!("{}", nd.diag());
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
        print!("# Switch info: {}\n{}", self.dest.describe(), s.diag());
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
        let blocks = (0..n.div_ceil(PKeyTable::ENTRIES as u16))
            .map(|i| {
                self.diag
                    .smp_get::<PKeyTable>(PKeyTable::attr_mod(i, self.port), &self.dest)
                    .map_err(|_| "pkey table query failed")
            })
            .collect::<Result<Vec<_>, _>>()?;
        print!("{}", PKeyTable::diag(&blocks, n));
        Ok(())
    }

    fn sl2vl_entry(&self, input: u8, output: u8) -> OpResult {
        let t = self
            .diag
            .smp_get::<SlToVlMappingTable>(SlToVlMappingTable::attr_mod(input, output), &self.dest)
            .map_err(|_| "slvl query failed")?;
        print!("{}", t.diag(input, output));
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
        print!("# SL2VL table: {}\n{SlToVlHeader}", self.dest.describe());
        if ni.node_type != 2 {
            return self.sl2vl_entry(0, 0);
        }
        for i in 0..=ni.num_ports {
            self.sl2vl_entry(i, self.port)?;
        }
        Ok(())
    }

    fn vlarb_table(&self, priority: VlArbPriority, first: u16, cap: u8) -> OpResult {
        let blocks = (0..u16::from(cap).div_ceil(32))
            .map(|i| {
                self.diag
                    .smp_get::<VlArbitrationTable>(
                        VlArbitrationTable::attr_mod(first + i, self.port),
                        &self.dest,
                    )
                    .map_err(|_| "vl arb query failed")
            })
            .collect::<Result<Vec<_>, _>>()?;
        print!("{}", VlArbitrationTable::diag(priority, &blocks, cap));
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
            self.vlarb_table(VlArbPriority::Low, VlArbitrationTable::LOW_0_31, low)?;
        }
        if high > 0 {
            self.vlarb_table(VlArbPriority::High, VlArbitrationTable::HIGH_0_31, high)?;
        }
        Ok(())
    }

    fn guids(&self) -> OpResult {
        let p = self
            .diag
            .port_info(&self.dest, 0)
            .map_err(|_| "port info failed")?;
        let blocks = (0..u32::from(p.guid_cap).div_ceil(GuidInfo::ENTRIES as u32))
            .map(|i| {
                self.diag
                    .smp_get::<GuidInfo>(GuidInfo::attr_mod(i), &self.dest)
                    .map_err(|_| "guid info query failed")
            })
            .collect::<Result<Vec<_>, _>>()?;
        print!("{}", GuidInfo::diag(&blocks, p.guid_cap));
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
