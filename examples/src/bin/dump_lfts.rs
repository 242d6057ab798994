//! infiniband-diags' `dump_lfts`, the script that `dump_fts` replaced:
//! runs `dump_fts` (the program of that name beside this one) with the
//! same arguments, then prints the script's warning. Its exit status is
//! the script's, 0.
//!
//! Usage: `dump_lfts [dump_fts's options]`

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let fts = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("dump_fts")))
        .unwrap_or_else(|| "dump_fts".into());
    if let Err(e) = Command::new(&fts)
        .args(std::env::args_os().skip(1))
        .status()
    {
        eprintln!("dump_lfts: {}: {e}", fts.display());
    }
    print!("\n*** WARNING ***: this command has been replaced by dump_fts\n\n\n");
    ExitCode::SUCCESS
}
