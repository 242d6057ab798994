//! What `ibhosts`, `ibswitches` and `ibnodes` share: as infiniband-diags'
//! scripts of those names, they read a topology (a file, or what
//! `ibnetdiscover` prints) and list its CAs or switches one a line, GUID,
//! port count and description, their awk programs rewritten here.

use std::process::{Command, ExitCode};

/// The usage line of the scripts (printed on stdout; exit status 255).
pub fn usage(tool: &str) -> String {
    format!("Usage: {tool} [-h] [<topology-file> | -y mkey -C ca_name -P ca_port -t timeout_ms]\n")
}

/// The command line of the scripts: a topology file, or the options
/// passed on to ibnetdiscover (`-C`, `-P`, `-t` with a value each, `-y`
/// the M_Key).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The topology file.
    pub file: Option<String>,
    /// The options for ibnetdiscover.
    pub pass: Vec<String>,
    /// `-y`: the M_Key (0 unless given).
    pub m_key: String,
}

impl Options {
    /// Parses the arguments after the program name as the scripts do;
    /// `None` where they print their usage.
    pub fn parse(args: &[String]) -> Option<Options> {
        let mut o = Options {
            m_key: "0".into(),
            ..Options::default()
        };
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            let value = || {
                args.get(i + 1)
                    .filter(|v| !v.is_empty() && !v.starts_with('-'))
                    .cloned()
            };
            match a {
                "-h" | "--help" => return None,
                "-y" | "--m_key" => {
                    o.m_key = value()?;
                    i += 1;
                }
                "-P" | "--Port" | "-C" | "--Ca" | "-t" | "--timeout" => {
                    o.pass.extend([a.to_string(), value()?]);
                    i += 1;
                }
                _ if a.starts_with('-') => return None,
                _ => {
                    if o.file.is_some() {
                        return None;
                    }
                    o.file = Some(a.to_string());
                }
            }
            i += 1;
        }
        Some(o)
    }
}

/// The topology's text (the file's, or the `ibnetdiscover` beside this
/// program's) and the exit status to end with (ibnetdiscover's).
pub fn topology(o: &Options) -> Result<(String, u8), String> {
    if let Some(f) = &o.file {
        return match std::fs::read(f) {
            Ok(b) => Ok((String::from_utf8_lossy(&b).into_owned(), 0)),
            Err(e) => {
                eprintln!("cat: {f}: {e}");
                Ok((String::new(), 1))
            }
        };
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let disc = exe.with_file_name("ibnetdiscover");
    let mut c = Command::new(&disc);
    if o.m_key != "0" {
        c.args(["-y", &o.m_key]);
    }
    c.args(&o.pass);
    let out = c
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", disc.display()))?;
    let status = out.status.code().unwrap_or(255) as u8;
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), status))
}

/// awk's `$n` (1-based, blank-separated), empty past the last.
fn field(line: &str, n: usize) -> &str {
    line.split_whitespace().nth(n - 1).unwrap_or("")
}

/// awk's `substr(s, from, len)` on bytes (1-based, clipped).
fn substr(s: &str, from: usize, len: usize) -> &str {
    let b = s.len();
    let start = from.saturating_sub(1).min(b);
    let end = (from.saturating_sub(1) + len).min(b);
    s.get(start..end).unwrap_or("")
}

/// The text after the first `#` and the blanks after it
/// (`substr($0, match($0, "#[ \t]*")+RLENGTH)`; the whole line without a
/// `#`).
fn comment(line: &str) -> &str {
    match line.find('#') {
        Some(i) => line[i + 1..].trim_start_matches([' ', '\t']),
        None => line,
    }
}

/// The lines every script passes on: those that start with `ib` and
/// those with `ibpanic:`, `ibwarn:` or `iberror:`.
fn passed(line: &str) -> bool {
    line.starts_with("ib")
        || ["ibpanic:", "ibwarn:", "iberror:"]
            .iter()
            .any(|k| line.contains(k))
}

/// The GUID of `"H-0000000000100000"` (`substr($3, 4, 16)`).
fn guid(line: &str) -> &str {
    substr(field(line, 3), 4, 16)
}

/// ibhosts' awk program over a topology: its `Ca` lines.
pub fn hosts(text: &str) -> String {
    listing(text, |line| {
        line.starts_with("Ca").then(|| {
            format!(
                "{}\t: 0x{} ports {} {}\n",
                field(line, 1),
                guid(line),
                field(line, 2),
                comment(line)
            )
        })
    })
}

/// What both awk programs do with each line: `node` turns a node's line
/// into the listing's line; the lines of `ib...` and those [`passed`] on
/// are copied.
fn listing(text: &str, node: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if let Some(l) = node(line) {
            out.push_str(&l);
        }
        if line.starts_with("ib") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        if passed(line) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// ibswitches' awk program over a topology: its `Switch` lines, the
/// description and the port 0 information (from the first `port 0`).
pub fn switches(text: &str) -> String {
    listing(text, |line| {
        if !line.starts_with("Switch") {
            return None;
        }
        let mut desc = comment(line);
        let pinfo = match desc.find("port 0") {
            Some(pi) => {
                let p = &desc[pi..];
                desc = substr(desc, 1, pi.saturating_sub(1));
                p
            }
            // awk: match fails (0), substr(desc, 0) is all of it and
            // substr(desc, 1, -2) nothing.
            None => std::mem::take(&mut desc),
        };
        // The script then looks for "base port 0" and "enhanced port
        // 0" in what is left of the description, cut before the first
        // "port 0": never there.
        Some(format!(
            "{}\t: 0x{} ports {} {desc} {pinfo}\n",
            field(line, 1),
            guid(line),
            field(line, 2)
        ))
    })
}

/// A listing: the script's name and its awk program.
pub type Listing = (&'static str, fn(&str) -> String);

/// Runs the scripts of `list` one after the other (`ibnodes` is `ibhosts`
/// then `ibswitches`), each with this program's arguments: the exit status
/// of the last.
pub fn main(list: &[Listing]) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut status = 0;
    for (tool, f) in list {
        let Some(o) = Options::parse(&args) else {
            print!("{}", usage(tool));
            status = 255;
            continue;
        };
        match topology(&o) {
            Ok((text, s)) => {
                print!("{}", f(&text));
                status = s;
            }
            Err(e) => {
                eprintln!("{tool}: {e}");
                status = 255;
            }
        }
    }
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPO: &str = "Switch\t8 \"S-0000000000200000\"\t\t# \"Switch1\" base port 0 lid 1 lmc 0\n\
                        [1]\t\"H-0000000000100000\"[1](100001) \t\t# \"Hca1\" lid 2 4xQDR\n\
                        \n\
                        Ca\t2 \"H-0000000000100000\"\t\t# \"Hca1\"\n\
                        [1](100001) \t\"S-0000000000200000\"[1]\t\t# lid 2 lmc 0 \"Switch1\" lid 1 4xQDR\n";

    #[test]
    fn hosts_and_switches_are_the_scripts_lines() {
        assert_eq!(hosts(TOPO), "Ca\t: 0x0000000000100000 ports 2 \"Hca1\"\n");
        assert_eq!(
            switches(TOPO),
            "Switch\t: 0x0000000000200000 ports 8 \"Switch1\" base port 0 lid 1 lmc 0\n"
        );
        // Without "port 0", the script's substr(desc, 0) and substr(desc,
        // 1, -2): nothing, then all of the description.
        let odd = "Switch\t8 \"S-0000000000200000\"\t\t# \"sw\" lid 1\n";
        assert_eq!(
            switches(odd),
            "Switch\t: 0x0000000000200000 ports 8  \"sw\" lid 1\n"
        );
        assert_eq!(hosts("ibwarn: x\n"), "ibwarn: x\n");
    }

    #[test]
    fn options_are_the_scripts() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let o = Options::parse(&v(&["-C", "ibsim0", "-t", "100"])).unwrap();
        assert_eq!(o.pass, v(&["-C", "ibsim0", "-t", "100"]));
        assert_eq!(Options::parse(&v(&["-C"])), None);
        assert_eq!(Options::parse(&v(&["-C", "-P"])), None);
        assert_eq!(Options::parse(&v(&["-Z"])), None);
        assert_eq!(Options::parse(&v(&["a", "b"])), None);
        assert_eq!(
            Options::parse(&v(&["f"])).unwrap().file.as_deref(),
            Some("f")
        );
    }
}
