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
        m.add_time_base();
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
