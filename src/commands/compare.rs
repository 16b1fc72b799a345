//! `osmeter compare A B [...] [--min-diff PCT] [--json] [--html FILE]`: runs named by
//! results file, folder or history id, compared by crate::compare and rendered as the
//! terminal table (report::compare_text), JSON, or the fleet page (report::fleet).
//! `--gate [--floor PCT] [--floors FILE] [--require PATTERN]` adds a verdict per metric
//! (crate::compare::gate) and exits 3 on a regression, 4 when inconclusive.

use crate::compare;
use crate::error::{Error, Result};
use crate::history::History;
use crate::results::RunResults;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(super) const EXAMPLES: &str = "Examples:
  osmeter compare 3 7                        two runs from `osmeter history`
  osmeter compare before/results.json after/ a file and a folder
  osmeter compare 3 7 9 --min-diff 10 --json
  osmeter compare base/ new/ --gate          CI: exit 3 on a regression
  osmeter compare base/ new/ --gate --floor 10% --require 'net.bandwidth'

Exit codes: 0 done (with --gate: no regression); 1 error; 2 bad usage;
with --gate: 3 a metric regressed, 4 no regression but no verdict where one
was required (every metric inconclusive, or a --require'd one).";

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
    /// Give each metric of the second run a verdict against the first: regressed,
    /// improved, same or inconclusive; exit 3 on a regression, 4 when inconclusive.
    #[arg(long)]
    gate: bool,
    /// With --gate: the practical-effect floor of every metric (a floors file entry for a
    /// metric still wins), e.g. 5%. Default: from the metric's noise in this host's
    /// history, else 5%.
    #[arg(long, value_name = "PCT", requires = "gate")]
    floor: Option<String>,
    /// With --gate: a TOML file of floors per metric (`[floor]` "exp.metric" or a glob =
    /// "3%"), a `default`, and `[better]` directions for metrics whose unit says none.
    #[arg(long, value_name = "FILE", requires = "gate")]
    floors: Option<PathBuf>,
    /// With --gate: metrics that need a verdict (globs over experiment.metric, or
    /// experiment ids; repeat or comma-separate): exit 4 when one is inconclusive.
    #[arg(long, value_name = "PATTERN", value_delimiter = ',', requires = "gate")]
    require: Vec<String>,
}

pub(super) fn run(a: Args) -> ExitCode {
    match compare_runs(a) {
        Ok(code) => ExitCode::from(code),
        Err(e) => e.report(),
    }
}

/// The gate's settings from the flags, checked before any work.
fn gate_config(a: &Args) -> Result<Option<compare::gate::GateConfig>> {
    if !a.gate {
        return Ok(None);
    }
    if a.runs.len() != 2 {
        return Err(Error::usage(
            "--gate judges exactly two runs: the baseline and the candidate",
        ));
    }
    let floor = match &a.floor {
        Some(s) => Some(
            compare::gate::parse_percent(s).map_err(|e| Error::usage(format!("--floor: {e}")))?,
        ),
        None => None,
    };
    let file = match &a.floors {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| crate::error::os_err(p, "cannot read the floors file", e))?;
            Some(
                compare::gate::FloorsFile::parse(&text)
                    .map_err(|e| Error::usage(format!("{}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    for p in &a.require {
        glob::Pattern::new(p).map_err(|e| Error::usage(format!("--require {p:?}: {e}")))?;
    }
    Ok(Some(compare::gate::GateConfig {
        floor,
        file,
        require: a.require.clone(),
    }))
}

/// The exit code: 0, or with --gate the gate's (3 a regression, 4 inconclusive).
fn compare_runs(a: Args) -> Result<u8> {
    if !(a.min_diff.is_finite() && (0.0..100.0).contains(&a.min_diff)) {
        return Err(Error::usage(
            "--min-diff must be a percentage from 0 to below 100",
        ));
    }
    let gate = gate_config(&a)?;
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
    let mut c = compare::compare_with_history(&runs, a.min_diff / 100.0, &history);
    if let Some(cfg) = &gate {
        c.gate = Some(compare::gate::gate(&c, &runs, 1, &history, cfg));
    }
    if let Some(f) = &a.html {
        let history = super::history_changes::fleet_section(&runs);
        super::export::write_new(f, &crate::report::fleet::render_with(&c, &runs, &history))?;
        // On stderr, so that --json output stays one document.
        eprintln!("fleet page: {}", f.display());
    }
    if a.json {
        let s = serde_json::to_string_pretty(&c).map_err(|e| Error::runtime(e.to_string()))?;
        println!("{s}");
    } else {
        print!("{}", crate::report::compare_text::render(&c));
    }
    Ok(c.gate.as_ref().map_or(0, |g| g.exit_code))
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
