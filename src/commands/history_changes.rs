//! `osmeter history changes [--host H] [--metric PATTERN] [--alpha A] [--all] [--json]
//! [--html FILE]`: the runs where a metric's level shifted, per host, machine fingerprint
//! and profile.

use crate::error::{Error, Result};
use crate::history::changes::{self, Settings};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Only this host's runs (its name as `osmeter history` lists it).
    #[arg(long)]
    host: Option<String>,
    /// Only metrics matching this glob, against `experiment/metric` or the experiment id
    /// (e.g. 'mem.*', 'cpu.syscall/getppid').
    #[arg(long)]
    metric: Option<String>,
    /// Significance level of each permutation test.
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    alpha: f64,
    /// Also list every series examined, with or without a change.
    #[arg(long)]
    all: bool,
    /// Machine-readable output: every series examined with its changes.
    #[arg(long)]
    json: bool,
    /// Write the history page (each metric's history with its change points marked) to
    /// FILE, which must not exist yet.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

fn parse_alpha(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 1.0 => Ok(a),
        _ => Err(format!("'{s}' is not a significance level between 0 and 1")),
    }
}

pub(super) fn run(a: Args, json: bool) -> Result<()> {
    changes(a, json)
}

/// The method, in one sentence, for the output's head.
fn method(s: &Settings) -> String {
    format!(
        "A series is one metric on one host, machine fingerprint and profile. Method: E-divisive means (Matteson & James 2014), each split kept when a {}-permutation test gives p <= {}; at least {} runs on each side of a change; a change kept only when its step is at least {} times the series' own run-to-run noise; size = ratio of the two segments' medians, with a 95% bootstrap interval.",
        s.permutations, s.alpha, s.min_size, s.min_effect
    )
}

fn changes(a: Args, json: bool) -> Result<()> {
    let pattern = a
        .metric
        .as_deref()
        .map(|p| glob::Pattern::new(p).map_err(|e| Error::usage(format!("--metric '{p}': {e}"))))
        .transpose()?;
    if let Some(f) = a.html.as_ref().filter(|f| f.symlink_metadata().is_ok()) {
        return Err(Error::usage(format!(
            "--html: {} exists; osmeter does not overwrite it",
            f.display()
        )));
    }
    let (h, series) = open_series(&a, pattern.as_ref())?;
    let s = Settings {
        alpha: a.alpha,
        ..Settings::default()
    };
    let mut found = changes::analyse(series, &s);
    crate::history::why::annotate(&h, &mut found);
    if let Some(f) = &a.html {
        super::export::write_new(f, &crate::report::history_page::render(&found, &method(&s)))?;
        eprintln!("history page: {}", f.display());
    }
    if json || a.json {
        let s = serde_json::to_string_pretty(&found).map_err(Error::runtime)?;
        println!("{s}");
        return Ok(());
    }
    let n_changes: usize = found.iter().map(|s| s.changes.len()).sum();
    let t = table(&found, a.all);
    if n_changes > 0 || a.all {
        println!("{t}");
    }
    println!(
        "{n_changes} change(s) in {} series ({} with too few runs to split: fewer than {}). {}",
        found.len(),
        found
            .iter()
            .filter(|x| x.series.points.len() < 2 * s.min_size)
            .count(),
        2 * s.min_size,
        method(&s)
    );
    println!("history: {}", h.path.display());
    Ok(())
}

/// The history and its series that `a` selects (by host and `pattern`); a usage error
/// when none is left.
fn open_series(
    a: &Args,
    pattern: Option<&glob::Pattern>,
) -> Result<(crate::history::History, Vec<crate::history::MetricSeries>)> {
    let h = crate::history::History::open_default()
        .map_err(|e| Error::runtime(format!("history: {e:#}")))?;
    let series = h
        .series(a.host.as_deref(), pattern)
        .map_err(|e| Error::runtime(format!("history {}: {e:#}", h.path.display())))?;
    if series.is_empty() {
        return Err(Error::usage(format!(
            "history {}: no recorded metric matches{}{}",
            h.path.display(),
            a.host
                .as_deref()
                .map(|h| format!(" host '{h}'"))
                .unwrap_or_default(),
            a.metric
                .as_deref()
                .map(|m| format!(" pattern '{m}'"))
                .unwrap_or_default()
        )));
    }
    Ok((h, series))
}

/// The changes as a table, one row per change (and with `all`, one per series without).
fn table(found: &[changes::SeriesChanges], all: bool) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(vec![
        "host",
        "machine",
        "profile",
        "metric",
        "runs",
        "change at run",
        "started (UTC)",
        "before",
        "after",
        "size [95% CI]",
        "p",
        "conditions that changed with it",
    ]);
    use crate::units::fmt_value;
    for sc in found {
        let ser = &sc.series;
        let row = |cells: Vec<String>| {
            let mut v = vec![
                ser.host.clone(),
                ser.fingerprint.clone(),
                ser.profile.clone(),
                format!("{}/{}", ser.experiment, ser.metric),
                ser.points.len().to_string(),
            ];
            v.extend(cells);
            v
        };
        for c in &sc.changes {
            t.add_row(row(vec![
                format!("{} (#{})", c.run, c.position),
                c.started_at.clone(),
                fmt_value(c.before, &ser.unit),
                fmt_value(c.after, &ser.unit),
                format!(
                    "{:+.1}% [{:+.1}%, {:+.1}%]",
                    100.0 * c.rel,
                    100.0 * c.rel_ci95[0],
                    100.0 * c.rel_ci95[1]
                ),
                format!("{:.3}", c.p),
                if c.conditions.is_empty() {
                    "none seen".to_string()
                } else {
                    c.conditions
                        .iter()
                        .map(|k| k.text.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            ]));
        }
        if sc.changes.is_empty() && all {
            t.add_row(row(vec!["none".into()]));
        }
    }
    t
}

/// The history section of the fleet page (`compare --html`): the compared hosts' series
/// from the local history with their change points; empty when the history has none or
/// cannot be read (the page is about the compared runs; their history is extra).
pub(super) fn fleet_section(runs: &[(String, crate::results::RunResults)]) -> String {
    let Ok(h) = crate::history::History::open_default() else {
        return String::new();
    };
    let mut hosts: Vec<&str> = runs.iter().map(|(_, r)| r.host_name()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut series = Vec::new();
    for host in hosts {
        series.extend(h.series(Some(host), None).unwrap_or_default());
    }
    let s = Settings::default();
    crate::report::history_page::fleet_section(&changes::analyse(series, &s), &method(&s))
}
