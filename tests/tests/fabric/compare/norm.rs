//! What the comparisons normalise in both outputs: only values that change
//! between runs, each case naming its own.

use std::fmt::Write as _;

/// One normalisation of an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// The traffic counters (`PortXmitData`, `PortRcvPkts`, their extended
    /// and unicast/multicast forms) of ports that the queries themselves
    /// cross: every MAD of both tools increments them.
    Traffic,
    /// The same counters as `ibqueryerrors --data`/`--counters` print them,
    /// ` [PortXmitData == N (SCALED)]`: both numbers (the unicast and
    /// multicast ones, which ibsim never moves, stay).
    InlineTraffic,
    /// sminfo's `activity count` (the SM increments it as it sweeps).
    Activity,
    /// ibnetdiscover's `# Topology file: generated on DATE` line.
    Generated,
    /// ibping's round-trip times.
    PingTime,
    /// The third PathRecord of a GetTable answer that filled the MAD:
    /// umad2sim hands over 256 bytes of which the last 16 (from byte 240:
    /// that record's PacketLifeTime, Preference and Reserved) are not what
    /// the SA sent but whatever its buffer held (different in every run,
    /// for the C tool as for ours).
    PathTail,
    /// The same for LinkRecords (8 bytes each): the 24th and 25th of a full
    /// MAD lie in those last 16 bytes.
    LinkTail,
}

/// `text` with every normalisation of `norms` applied.
pub fn apply(norms: &[Norm], text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut paths, mut links) = (0, 0);
    for line in text.lines() {
        let mut l = line.to_string();
        if line.starts_with("PathRecord dump:") {
            paths += 1;
        }
        if line.starts_with("LinkRecord dump:") {
            links += 1;
        }
        for n in norms {
            l = match n {
                Norm::Traffic => traffic(&l),
                Norm::InlineTraffic => inline_traffic(&l),
                Norm::Activity => activity(&l),
                Norm::Generated => {
                    if l.starts_with("# Topology file: generated on ") {
                        "# Topology file: generated on DATE".into()
                    } else {
                        l
                    }
                }
                Norm::PingTime => ping_time(&l),
                Norm::PathTail if paths == 3 => {
                    let field = l.strip_prefix("\t\t").unwrap_or("");
                    if ["pkt_life.", "preference.", "resv2."]
                        .iter()
                        .any(|p| field.starts_with(p))
                    {
                        tail_value(&l, |c| c.is_ascii_hexdigit() || c == 'x')
                    } else {
                        l
                    }
                }
                Norm::LinkTail if links >= 24 => {
                    let field = l.strip_prefix("\t\t").unwrap_or("");
                    let name = field.trim_start_matches(|c: char| c.is_ascii_alphabetic());
                    if name.len() < field.len() && name.starts_with('.') {
                        tail_value(&l, |c| c.is_ascii_digit())
                    } else {
                        l
                    }
                }
                Norm::PathTail | Norm::LinkTail => l,
            };
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// `name:....N` for the traffic counters.
fn traffic(l: &str) -> String {
    let Some((name, value)) = l.split_once(':') else {
        return l.into();
    };
    let counter = name.strip_prefix("Port").is_some_and(|rest| {
        let rest = rest
            .strip_prefix("Unicast")
            .or_else(|| rest.strip_prefix("Multicast"))
            .unwrap_or(rest);
        ["XmitData", "RcvData", "XmitPkts", "RcvPkts"].contains(&rest)
    });
    let digits = value.trim_start_matches('.');
    if counter && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        format!("{name}:{}N", &value[..value.len() - digits.len()])
    } else {
        l.into()
    }
}

/// ` [NAME == N (S)]` for the flow counters among a line's ` [NAME ==
/// VALUE (SCALED)]` items.
fn inline_traffic(l: &str) -> String {
    const FLOW: [&str; 4] = ["PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts"];
    let mut out = String::with_capacity(l.len());
    let mut rest = l;
    while let Some(i) = rest.find(" [") {
        out.push_str(&rest[..i]);
        let item = &rest[i..];
        let end = item.find(']').map_or(item.len(), |e| e + 1);
        let (head, tail) = item[2..end].split_once(" == ").unwrap_or(("", ""));
        if FLOW.contains(&head) && tail.ends_with(")]") && tail.contains(" (") {
            let _ = write!(out, " [{head} == N (S)]");
        } else {
            out.push_str(&item[..end]);
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// `activity count N`.
fn activity(l: &str) -> String {
    const KEY: &str = "activity count ";
    match l.find(KEY) {
        Some(i) => {
            let rest = &l[i + KEY.len()..];
            let n = rest.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return l.into();
            }
            format!("{}{KEY}N{}", &l[..i], &rest[n..])
        }
        None => l.into(),
    }
}

/// ibping's `time 0.123 ms` (or `time 12 ms` at a line's end) as `time T
/// ms`, and its `rtt min/avg/max = ...` line as `= T`.
fn ping_time(l: &str) -> String {
    if l.starts_with("rtt min/avg/max = ") {
        return "rtt min/avg/max = T".into();
    }
    let Some(i) = l.find("time ") else {
        return l.into();
    };
    let rest = &l[i + 5..];
    let int = rest.bytes().take_while(u8::is_ascii_digit).count();
    let mut end = int;
    if rest[int..].starts_with('.') {
        let frac = rest[int + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if frac != 3 {
            return l.into();
        }
        end += 1 + frac;
    } else if !rest[int..].ends_with(" ms") || rest[int..].len() != 3 {
        return l.into();
    }
    if int == 0 || !rest[end..].starts_with(" ms") {
        return l.into();
    }
    format!("{}time T{}", &l[..i], &rest[end..])
}

/// The value after a line's last `.` (`.value` at its end, of characters
/// that `is_value` takes) as `X`.
fn tail_value(l: &str, is_value: impl Fn(char) -> bool) -> String {
    let v = l.len() - l.trim_end_matches(&is_value).len();
    if v > 0 && l[..l.len() - v].ends_with('.') {
        format!("{}X", &l[..l.len() - v])
    } else {
        l.into()
    }
}

/// The lines that differ between the C tool's output and ours: each
/// differing line number with both lines, at most 20, and the line counts.
pub fn diff(c: &str, ours: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (c.lines().collect(), ours.lines().collect());
    let mut out = String::new();
    let mut shown = 0;
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i), b.get(i));
        if x != y {
            if shown == 20 {
                out.push_str("    ...\n");
                break;
            }
            let _ = writeln!(
                out,
                "    line {}:\n      C:    {x:?}\n      ours: {y:?}",
                i + 1
            );
            shown += 1;
        }
    }
    let _ = write!(out, "    (C {} lines, ours {})", a.len(), b.len());
    out
}
