//! Side-by-side comparison of runs. The first run is the baseline; every other run's
//! medians are given as ratios to it. A difference is significant only when it exceeds
//! the measured noise: both runs have at least `MIN_TRIALS` trials (a single value has no
//! noise estimate), the two medians' 95% confidence intervals do not overlap, AND the
//! medians differ by more than both a minimum relative amount (default 5%) and the larger
//! coefficient of variation of the two runs' trials. Trials within one run share
//! conditions (frequency, memory placement, the host's other tenants) that change between
//! runs, so within-run intervals understate run-to-run noise; a shift smaller than the
//! spread of single trials is not called a difference.

use crate::history::History;
use crate::results::{RunResults, Status};
use crate::stats::Summary;
use crate::units::fmt_value;
use serde::Serialize;
use std::path::Path;

/// Default minimum relative difference of the medians for a significant difference.
pub const MIN_REL_DIFF: f64 = 0.05;
/// Fewer trials than this give no usable noise estimate: never significant.
pub const MIN_TRIALS: usize = 3;

pub fn rule_text(min_rel_diff: f64) -> String {
    format!(
        "significant = both runs have at least {MIN_TRIALS} trials, the 95% confidence intervals of the two medians do not overlap, and the medians differ by at least {:.0}% and by more than the larger coefficient of variation of the trials",
        min_rel_diff * 100.0
    )
}

#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub label: String,
    pub source: String,
    pub host: String,
    pub started_at: String,
    pub profile: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Value {
    pub median: f64,
    pub ci95: [f64; 2],
    pub n: usize,
    pub status: Status,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComparedMetric {
    pub experiment: String,
    pub metric: String,
    pub unit: String,
    /// One per run, null where the run lacks the metric.
    pub values: Vec<Option<Value>>,
    /// Median of each run over the baseline's (the first run), null where not comparable.
    pub ratios: Vec<Option<f64>>,
    /// Per run: differs significantly from the baseline (false for the baseline itself).
    pub significant_vs_baseline: Vec<bool>,
    /// Any run differs significantly from the baseline.
    pub significant: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub rule: String,
    pub min_rel_diff: f64,
    pub runs: Vec<RunInfo>,
    pub metrics: Vec<ComparedMetric>,
    /// Metrics present in the baseline and at least one other run.
    pub compared: usize,
    pub significant: usize,
}

/// Whether b differs from a beyond the noise, by the rule above.
pub fn significant(a: &Summary, b: &Summary, min_rel_diff: f64) -> bool {
    if !(a.median.is_finite() && b.median.is_finite()) || a.median == 0.0 {
        return false;
    }
    if a.n < MIN_TRIALS || b.n < MIN_TRIALS {
        return false;
    }
    let rel = (b.median - a.median).abs() / a.median.abs();
    let spread = a.cov.max(b.cov);
    let spread = if spread.is_finite() { spread } else { 0.0 };
    !a.overlaps(b) && rel >= min_rel_diff && rel > spread
}

/// Compares labelled runs; the first is the baseline.
pub fn compare(runs: &[(String, RunResults)], min_rel_diff: f64) -> Comparison {
    let mut metrics: Vec<ComparedMetric> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (i, (_, r)) in runs.iter().enumerate() {
        for e in &r.experiments {
            for m in &e.metrics {
                let key = (e.id.clone(), m.name.clone());
                let k = *index.entry(key).or_insert_with(|| {
                    metrics.push(ComparedMetric {
                        experiment: e.id.clone(),
                        metric: m.name.clone(),
                        unit: m.unit.clone(),
                        values: vec![None; runs.len()],
                        ratios: vec![None; runs.len()],
                        significant_vs_baseline: vec![false; runs.len()],
                        significant: false,
                    });
                    metrics.len() - 1
                });
                // A metric whose unit changed between runs is not comparable.
                if metrics[k].unit == m.unit {
                    metrics[k].values[i] = Some(Value {
                        median: m.summary.median,
                        ci95: m.summary.ci95,
                        n: m.summary.n,
                        status: e.status,
                    });
                }
            }
        }
    }
    // Summaries are needed for the test; keep them by (metric, run).
    let summary = |run: usize, exp: &str, name: &str| -> Option<&Summary> {
        runs[run]
            .1
            .experiment(exp)?
            .metric(name)
            .map(|m| &m.summary)
    };
    let mut compared = 0;
    for cm in &mut metrics {
        let Some(base) = summary(0, &cm.experiment, &cm.metric).filter(|_| cm.values[0].is_some())
        else {
            continue;
        };
        let mut any_other = false;
        for i in 0..runs.len() {
            let Some(s) = summary(i, &cm.experiment, &cm.metric).filter(|_| cm.values[i].is_some())
            else {
                continue;
            };
            if base.median != 0.0 && base.median.is_finite() && s.median.is_finite() {
                cm.ratios[i] = Some(s.median / base.median);
            }
            if i > 0 {
                any_other = true;
                cm.significant_vs_baseline[i] = significant(base, s, min_rel_diff);
            }
        }
        cm.significant = cm.significant_vs_baseline.iter().any(|b| *b);
        if any_other {
            compared += 1;
        }
    }
    let significant = metrics.iter().filter(|m| m.significant).count();
    Comparison {
        rule: rule_text(min_rel_diff),
        min_rel_diff,
        runs: runs
            .iter()
            .enumerate()
            .map(|(i, (src, r))| RunInfo {
                label: label(i),
                source: src.clone(),
                host: r.host_name().into(),
                started_at: r.started_at.clone(),
                profile: r
                    .config
                    .get("profile")
                    .and_then(|v| v.as_str())
                    .unwrap_or("?")
                    .into(),
            })
            .collect(),
        metrics,
        compared,
        significant,
    }
}

/// Run labels A, B, ..., Z, R27, ...
fn label(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("R{}", i + 1)
    }
}

/// A run named on the command line: a results file or folder, or a history id.
pub fn resolve(
    spec: &str,
    history: impl FnOnce() -> anyhow::Result<History>,
) -> Result<RunResults, String> {
    let p = Path::new(spec);
    if p.exists() {
        return crate::report::load::load(p);
    }
    match spec.parse::<i64>() {
        Ok(id) => {
            let h = history().map_err(|e| format!("history: {e:#}"))?;
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

/// The comparison as a terminal table.
pub fn render(c: &Comparison) -> String {
    use comfy_table::{
        presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table,
    };
    let mut s = String::new();
    for r in &c.runs {
        s.push_str(&format!(
            "{} = {} ({}, {}, profile {})\n",
            r.label, r.source, r.host, r.started_at, r.profile
        ));
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    let mut header = vec!["experiment".to_string(), "metric".to_string()];
    for (i, r) in c.runs.iter().enumerate() {
        header.push(if i == 0 {
            format!("{} (median)", r.label)
        } else {
            format!("{} (ratio to A)", r.label)
        });
    }
    t.set_header(header);
    let mut last = String::new();
    for m in &c.metrics {
        let mut row = vec![
            Cell::new(if m.experiment == last {
                String::new()
            } else {
                m.experiment.clone()
            }),
            Cell::new(&m.metric),
        ];
        last = m.experiment.clone();
        for i in 0..c.runs.len() {
            let txt = match (&m.values[i], m.ratios[i]) {
                (None, _) => "-".to_string(),
                (Some(v), Some(r)) if i > 0 => format!(
                    "{} ({r:.3}){}",
                    fmt_value(v.median, &m.unit),
                    if m.significant_vs_baseline[i] {
                        " *"
                    } else {
                        ""
                    }
                ),
                (Some(v), _) => fmt_value(v.median, &m.unit),
            };
            row.push(Cell::new(txt).set_alignment(CellAlignment::Right));
        }
        t.add_row(row);
    }
    s.push_str(&t.to_string());
    s.push('\n');
    s.push_str(&format!(
        "{} of {} compared metrics differ significantly (*: {}).\n",
        c.significant, c.compared, c.rule
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(median: f64, lo: f64, hi: f64) -> Summary {
        let mut s = Summary::of(&[median]).unwrap();
        s.ci95 = [lo, hi];
        s.n = 10;
        s.cov = 0.01;
        s
    }

    #[test]
    fn the_rule() {
        let a = sum(100.0, 98.0, 102.0);
        assert!(!significant(&a, &a, MIN_REL_DIFF));
        // Non-overlapping but tiny: not significant.
        assert!(!significant(&a, &sum(103.0, 102.5, 103.5), MIN_REL_DIFF));
        // Large but overlapping: not significant.
        assert!(!significant(&a, &sum(120.0, 90.0, 150.0), MIN_REL_DIFF));
        assert!(significant(&a, &sum(120.0, 118.0, 122.0), MIN_REL_DIFF));
        assert!(significant(&a, &sum(80.0, 78.0, 82.0), MIN_REL_DIFF));
        assert!(!significant(
            &sum(0.0, 0.0, 0.0),
            &sum(1.0, 1.0, 1.0),
            MIN_REL_DIFF
        ));
        // A single value has no noise estimate.
        let mut one = sum(200.0, 200.0, 200.0);
        one.n = 1;
        assert!(!significant(&a, &one, MIN_REL_DIFF));
        // A shift within the spread of single trials is noise.
        let mut wide = sum(120.0, 119.0, 121.0);
        wide.cov = 0.3;
        assert!(!significant(&a, &wide, MIN_REL_DIFF));
    }
}
