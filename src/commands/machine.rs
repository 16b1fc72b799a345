//! `osmeter machine`: the machine description, live, recorded (--from) or recording
//! (--snapshot), as text or JSON.

use crate::error::{Error, Result};
use crate::machine::{facts, FactRoot, Machine};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Also copy every file the description reads into DIR (missing or empty), at its
    /// absolute path (DIR/proc/cpuinfo, DIR/sys/devices/system/cpu/...).
    #[arg(long, value_name = "DIR", conflicts_with = "from")]
    snapshot: Option<PathBuf>,
    /// Describe the machine recorded in DIR instead of this one.
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
}

pub(super) fn run(a: Args) -> ExitCode {
    crate::error::exit(describe(a))
}

fn describe(a: Args) -> Result<()> {
    if let Some(dir) = &a.from {
        facts::check_recorded_tree(dir)
            .map_err(|e| Error::usage(format!("--from {}: {e}", dir.display())))?;
    }
    if let Some(dir) = &a.snapshot {
        facts::check_snapshot_dir(dir)
            .map_err(|e| Error::usage(format!("--snapshot {}: {e}", dir.display())))?;
    }
    let root = match (&a.from, &a.snapshot) {
        (Some(d), _) => FactRoot::recorded(d),
        (None, Some(_)) => FactRoot::live_recording(),
        (None, None) => FactRoot::live(),
    };
    let mut m = Machine::gather_from(&root);
    if root.is_live() {
        // The time base belongs to the description: counter, its frequency, the core clock.
        let (_, clock) = crate::clock::detect();
        m.warnings.extend(clock.warnings.iter().cloned());
        m.clock = Some(clock);
        let core = crate::clock::measure_core_clock();
        m.cpu.core_clock_hz = core.as_ref().map(|c| c.hz);
        if let Some(c) = &core {
            let max_hz = m.cpu.max_mhz.map(|m| m * 1e6);
            m.warnings.extend(c.warnings(max_hz));
        }
    }
    if let Some(dir) = &a.snapshot {
        let n = facts::write_snapshot(dir, &root.recorded_facts())
            .map_err(|e| Error::runtime(format!("--snapshot {}: {e}", dir.display())))?;
        eprintln!(
            "osmeter: recorded {n} files in {} (describe it with `osmeter machine --from {}`)",
            dir.display(),
            dir.display()
        );
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
    } else {
        print!("{}", m.describe());
    }
    Ok(())
}
