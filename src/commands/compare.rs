//! `osmeter compare A B [...] [--min-diff PCT] [--json] [--html FILE]`: runs named by
//! results file, folder or history id, compared by crate::compare and rendered as the
//! terminal table (report::compare_text), JSON, or the fleet page (report::fleet).

use crate::compare;
use crate::error::{Error, Result};
use crate::history::History;
use crate::results::RunResults;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(super) const EXAMPLES: &str = "Examples:
  osmeter compare 3 7                        two runs from `osmeter history`
  osmeter compare before/results.json after/ a file and a folder
  osmeter compare 3 7 9 --min-diff 10 --json";

#[derive(clap::Args)]
pub(super) struct Args {
    /// Two or more runs: results.json paths, results folders or history ids.
    #[arg(required = true, num_args = 2..)]
    runs: Vec<String>,
    /// Minimum relative difference of the medians for a significant difference, in percent.
    #[arg(long, default_value_t = compare::MIN_REL_DIFF * 100.0)]
    min_diff: f64,
    /// Machine-readable output: every compared metric carries a boolean `significant`.
    #[arg(long)]
    json: bool,
    /// Also write the fleet page (one column per host, ratios, network matrix) to this
    /// new HTML file; an existing file is never overwritten.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

pub(super) fn run(a: Args) -> ExitCode {
    crate::error::exit(compare_runs(a))
}

fn compare_runs(a: Args) -> Result<()> {
    if !(a.min_diff.is_finite() && (0.0..100.0).contains(&a.min_diff)) {
        return Err(Error::usage(
            "--min-diff must be a percentage from 0 to below 100",
        ));
    }
    // Checked before the work, so a typo costs nothing; create_new below closes the race.
    if let Some(f) = a.html.as_deref().filter(|f| f.exists()) {
        return Err(Error::usage(format!(
            "{} exists; --html writes a new file and never overwrites one",
            f.display()
        )));
    }
    let mut runs = Vec::new();
    for s in &a.runs {
        let r = resolve(s).map_err(Error::usage)?;
        runs.push((s.clone(), r));
    }
    // Run-to-run noise from earlier runs of the baseline's host, profile and version; a
    // history that cannot be read leaves within-run noise only.
    let history = match (&runs.first(), History::open_default()) {
        (Some((_, first)), Ok(h)) => {
            let started: Vec<&str> = runs.iter().map(|(_, r)| r.started_at.as_str()).collect();
            h.earlier_runs(
                &compare::host_of(first),
                &compare::profile_of(first),
                &first.tool.version,
                &started,
                20,
            )
            .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let history = if history.len() >= compare::MIN_HISTORY {
        history
    } else {
        Vec::new()
    };
    let c = compare::compare_with_history(&runs, a.min_diff / 100.0, &history);
    if let Some(f) = &a.html {
        let history = super::history_changes::fleet_section(&runs);
        write_new(f, &crate::report::fleet::render_with(&c, &runs, &history))?;
        // On stderr, so that --json output stays one document.
        eprintln!("fleet page: {}", f.display());
    }
    if a.json {
        let s = serde_json::to_string_pretty(&c).map_err(|e| Error::runtime(e.to_string()))?;
        println!("{s}");
    } else {
        print!("{}", crate::report::compare_text::render(&c));
    }
    Ok(())
}

/// Writes `text` to a file that must not exist yet; a half-written file is removed.
fn write_new(f: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(f)
        .map_err(|e| Error::runtime(format!("{}: {e}", f.display())))?;
    if let Err(e) = file.write_all(text.as_bytes()) {
        // Ours, and incomplete: remove it rather than leave half a page.
        let _ = std::fs::remove_file(f);
        return Err(Error::runtime(format!("{}: {e}", f.display())));
    }
    Ok(())
}

/// A run named on the command line: a results file or folder, or a history id.
fn resolve(spec: &str) -> std::result::Result<RunResults, String> {
    let p = Path::new(spec);
    if p.exists() {
        return crate::results::load::load(p);
    }
    match spec.parse::<i64>() {
        Ok(id) => {
            let h = History::open_default().map_err(|e| format!("history: {e:#}"))?;
            match h.get(id) {
                Ok(Some(r)) => Ok(r),
                Ok(None) => Err(format!(
                    "no run with id {id} in the history ({}); see `osmeter history`",
                    h.path.display()
                )),
                Err(e) => Err(format!("{e:#}")),
            }
        }
        Err(_) => Err(format!(
            "{spec}: no such results file or folder, and not a history id"
        )),
    }
}
