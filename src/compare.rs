//! Side-by-side comparison of runs. The first run is the baseline; every other run's
//! medians are given as ratios to it, with the shift, its 95% interval, the test used and
//! the noise it was judged against. The test depends on what a metric's raw values are
//! (declared where the metric is made):
//! - per trial (each a mean over many operations): the two medians' 95% intervals do not
//!   overlap, and the medians differ by more than the trials' own spread (the larger CoV);
//! - per operation (a distribution): the Hodges-Lehmann shift's Mann-Whitney 95% interval
//!   excludes zero, and the shift exceeds the range of the medians of 8 consecutive
//!   batches within each run (how far the level moved during a run);
//! - derived (subtracted, divided): as per trial, with each median's interval widened by
//!   the intervals of its inputs.
//!
//! In every case the shift must also reach `min_rel_diff` and exceed the run-to-run noise
//! when there is an estimate of it (the repetitions of `run --repeat`, or at least
//! `MIN_HISTORY` earlier runs of the same host, profile and version), and exceed how far
//! the environment sentinel's component that shares the metric's bottleneck
//! (`Metric::bottleneck`) moved between or during the runs.
//!
//! `gate` turns one comparison of two runs into a verdict per metric (regressed, improved,
//! same, inconclusive) against a practical-effect floor, for `compare --gate`.

pub mod gate;

use crate::results::{
    Bottleneck, ExperimentResult, Metric, MetricKind, Reading, RunResults, Status,
};
use serde::Serialize;

/// Default minimum relative difference of the medians for a significant difference.
pub const MIN_REL_DIFF: f64 = 0.05;
/// Fewer trials than this give no usable noise estimate: never significant.
pub const MIN_TRIALS: usize = 3;
/// Per-operation distributions need this many samples per run for the shift test.
pub const MIN_SAMPLES: usize = 20;
/// Earlier runs of the same host, profile and version needed for a run-to-run estimate.
pub const MIN_HISTORY: usize = 3;
/// Batches for the within-run drift of a per-operation series.
pub const BATCHES: usize = 8;
/// A sentinel move at least this large is reported.
pub const ENV_NOTICE: f64 = 0.03;

pub fn rule_text(min_rel_diff: f64) -> String {
    format!(
        "significant = the shift reaches {:.0}% and its 95% interval excludes zero (per-trial and derived metrics: the medians' confidence intervals do not overlap, at least {MIN_TRIALS} trials each, beyond the larger CoV of the trials; per-operation distributions: Hodges-Lehmann shift with its Mann-Whitney interval, beyond the range of batch medians within each run), beyond the run-to-run noise where known (a history of at least {MIN_HISTORY} runs of the host, else repeats: t-test on log medians; a CPU-bound figure, a cross-CPU wake-up or a loopback network figure needs the history), and beyond the move of the environment sentinel's component that shares the metric's bottleneck (dependent chain, issue rate, L1 chase or copy; none for device and network figures)",
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
    /// Repetitions in the run (`run --repeat`).
    pub repeat: usize,
    /// The build that measured it (`Tool::build_line`); None when the document predates
    /// build names.
    pub build: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Value {
    pub median: f64,
    pub ci95: [f64; 2],
    pub n: usize,
    pub status: Status,
    /// Medians of the repetitions (empty without --repeat).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
}

/// The test a metric was judged with.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// Confidence intervals of the trial medians.
    PerTrial,
    /// As per trial, for a result file that does not say what its values are.
    PerTrialInferred,
    /// Hodges-Lehmann shift with its Mann-Whitney interval.
    PerOperation,
    /// As per trial with the inputs' uncertainty added.
    Derived,
}

/// Which run-to-run noise a difference was judged against.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Noise {
    /// "within-run only", "repeats of N runs" or "history of N runs".
    pub source: String,
    /// Runs behind the estimate (0 for within-run only).
    pub runs: usize,
    /// Relative difference the run-to-run noise alone reaches at 95% (0 when unknown).
    pub threshold: f64,
}

/// One run against the baseline, for one metric.
#[derive(Debug, Clone, Serialize)]
pub struct Versus {
    pub ratio: f64,
    pub test: Test,
    /// Estimated shift (run minus baseline, in the metric's unit) and its 95% interval.
    pub shift: f64,
    pub shift_ci95: [f64; 2],
    pub noise: Noise,
    /// The within-run level noise the shift had to exceed (relative): the larger CoV of
    /// the trials (per trial, derived) or the range of batch medians (per operation).
    pub spread: f64,
    /// The sentinel component the metric is held to (its declared bottleneck; `none` for
    /// device and network figures); null for a file from before declarations, where the
    /// largest move of any component counts (cpu and mem experiments).
    pub component: Option<Bottleneck>,
    /// How far that component moved for this experiment (largest of between the runs and
    /// during either), null without sentinel readings or for component `none`.
    pub environment: Option<f64>,
    pub significant: bool,
    /// Why the row is or is not significant, in words.
    pub reason: String,
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
    /// Per run: the test against the baseline (null for the baseline and where absent).
    pub versus: Vec<Option<Versus>>,
    /// Per run: differs significantly from the baseline (false for the baseline itself).
    pub significant_vs_baseline: Vec<bool>,
    /// Any run differs significantly from the baseline.
    pub significant: bool,
}

/// How the environment sentinel moved for one experiment of one run.
#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentMove {
    pub experiment: String,
    pub run: String,
    /// Sentinel of this run over the baseline's, minus 1 (positive = slower): the largest
    /// change of any component.
    pub between: f64,
    /// After over before within the baseline and within this run, minus 1.
    pub during_baseline: f64,
    pub during: f64,
    /// Each component's move (largest over the before/after pairings, and between).
    pub components: Vec<ComponentMove>,
    /// The components this experiment's metrics are held to (null: any, undeclared).
    pub held_to: Vec<Option<Bottleneck>>,
    pub text: String,
}

/// One sentinel component's move for one experiment of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentMove {
    pub component: Bottleneck,
    /// Largest |change| over every before/after pairing across the runs and during either.
    pub largest: f64,
    /// Geometric means of each run's two readings, this run over the baseline, minus 1.
    pub between: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub rule: String,
    pub min_rel_diff: f64,
    pub runs: Vec<RunInfo>,
    /// Earlier runs of the baseline's host, profile and version used for run-to-run noise.
    pub history_runs: usize,
    pub metrics: Vec<ComparedMetric>,
    /// Experiments where the sentinel moved by at least `ENV_NOTICE`.
    pub environment: Vec<EnvironmentMove>,
    /// One sentence per run measured by another build than the baseline's (version,
    /// commit, target or C library), which can move figures as a machine change does.
    pub builds: Vec<String>,
    /// Metrics present in the baseline and at least one other run.
    pub compared: usize,
    pub significant: usize,
    /// Verdicts per metric against a practical-effect floor (`compare --gate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<gate::Gate>,
}

/// The run-to-run noise of a metric: log medians of earlier runs (history) and the
/// repetitions within the two runs; the estimate with more degrees of freedom is used.
fn run_to_run(a: &Metric, b: &Metric, history: &[f64]) -> Noise {
    let logs = |v: &[f64]| -> Vec<f64> {
        v.iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect()
    };
    let ss = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
    };
    let (la, lb, lh) = (logs(&a.runs), logs(&b.runs), logs(history));
    let na = la.len().max(1) as f64;
    let nb = lb.len().max(1) as f64;
    let mut rep_ss = 0.0;
    let mut rep_df = 0;
    for v in [&la, &lb] {
        if v.len() >= 2 {
            rep_ss += ss(v);
            rep_df += v.len() - 1;
        }
    }
    let hist_df = if lh.len() >= MIN_HISTORY {
        lh.len() - 1
    } else {
        0
    };
    // The history first whenever it is long enough: its runs are separate processes, which
    // is the noise a CPU-bound figure has and its repetitions within one process miss.
    let (source, runs, var, df) = if hist_df > 0 {
        (
            format!("history of {} runs", lh.len()),
            lh.len(),
            ss(&lh) / hist_df as f64,
            hist_df,
        )
    } else if rep_df >= 2 {
        (
            format!("repeats of {} runs", la.len() + lb.len()),
            la.len() + lb.len(),
            rep_ss / rep_df as f64,
            rep_df,
        )
    } else {
        return Noise {
            source: "within-run only".into(),
            runs: 0,
            threshold: 0.0,
        };
    };
    let log_limit = crate::stats::t975(df) * (var * (1.0 / na + 1.0 / nb)).sqrt();
    Noise {
        source,
        runs,
        threshold: log_limit.exp() - 1.0,
    }
}

/// The within-run test of b against a for one metric.
struct Within {
    test: Test,
    shift: f64,
    ci: [f64; 2],
    /// The within-run level noise the shift must exceed (relative).
    spread: f64,
    ok: bool,
    why: String,
}

/// The within-run test of b against a for one metric.
fn within(
    ea: &ExperimentResult,
    a: &Metric,
    eb: &ExperimentResult,
    b: &Metric,
    min_rel_diff: f64,
) -> Within {
    let base = a.summary.median.abs();
    let kind = a.kind.as_ref().or(b.kind.as_ref());
    let per_op = matches!(a.kind, Some(MetricKind::PerOperation))
        && matches!(b.kind, Some(MetricKind::PerOperation));
    if per_op && a.raw.len() >= MIN_SAMPLES && b.raw.len() >= MIN_SAMPLES {
        if let Some(h) = crate::stats::hodges_lehmann(&a.raw, &b.raw) {
            let rel = h.estimate.abs() / base;
            let drift = crate::stats::batch_median_range(&a.raw, BATCHES)
                .max(crate::stats::batch_median_range(&b.raw, BATCHES));
            let drift = if drift.is_finite() { drift } else { 0.0 };
            let excludes = h.ci95[0] > 0.0 || h.ci95[1] < 0.0;
            let (ok, why) = if !excludes {
                (false, "shift interval contains zero".to_string())
            } else if rel < min_rel_diff {
                (
                    false,
                    format!("shift {:.1}% below the minimum", rel * 100.0),
                )
            } else if rel <= drift {
                (
                    false,
                    format!(
                        "shift {:.1}% within the drift of batch medians (range {:.1}%)",
                        rel * 100.0,
                        drift * 100.0
                    ),
                )
            } else {
                (true, format!("shift {:+.1}%", h.estimate / base * 100.0))
            };
            return Within {
                test: Test::PerOperation,
                shift: h.estimate,
                ci: h.ci95,
                spread: drift,
                ok,
                why,
            };
        }
    }
    let test = match kind {
        Some(MetricKind::Derived { .. }) => Test::Derived,
        Some(_) => Test::PerTrial,
        None => Test::PerTrialInferred,
    };
    let ca = a.interval(|n| ea.metric(n));
    let cb = b.interval(|n| eb.metric(n));
    let shift = b.summary.median - a.summary.median;
    let ci = [cb[0] - ca[1], cb[1] - ca[0]];
    let rel = shift.abs() / base;
    let spread = a.summary.cov.max(b.summary.cov);
    let spread = if spread.is_finite() { spread } else { 0.0 };
    let (ok, why) = if a.summary.n < MIN_TRIALS || b.summary.n < MIN_TRIALS {
        (false, format!("fewer than {MIN_TRIALS} trials"))
    } else if ci[0] <= 0.0 && ci[1] >= 0.0 {
        (false, "confidence intervals overlap".to_string())
    } else if rel < min_rel_diff {
        (
            false,
            format!("shift {:.1}% below the minimum", rel * 100.0),
        )
    } else if rel <= spread {
        (
            false,
            format!(
                "shift {:.1}% within the trials' CoV ({:.1}%)",
                rel * 100.0,
                spread * 100.0
            ),
        )
    } else {
        (true, format!("shift {:+.1}%", shift / base * 100.0))
    };
    Within {
        test,
        shift,
        ci,
        spread,
        ok,
        why,
    }
}

/// Compares labelled runs; the first is the baseline. Within-run noise only.
#[cfg(test)]
pub fn compare(runs: &[(String, RunResults)], min_rel_diff: f64) -> Comparison {
    compare_with_history(runs, min_rel_diff, &[])
}

/// Compares labelled runs against the first, with earlier runs of the baseline's host,
/// profile and version (`history`, see `History::earlier_runs`) as run-to-run noise.
pub fn compare_with_history(
    runs: &[(String, RunResults)],
    min_rel_diff: f64,
    history: &[RunResults],
) -> Comparison {
    let mut metrics = rows(runs);
    let mut compared = 0;
    for cm in &mut metrics {
        if judge_row(cm, runs, min_rel_diff, history) {
            compared += 1;
        }
    }
    let significant = metrics.iter().filter(|m| m.significant).count();
    Comparison {
        rule: rule_text(min_rel_diff),
        min_rel_diff,
        history_runs: history.len(),
        runs: runs
            .iter()
            .enumerate()
            .map(|(i, (src, r))| RunInfo {
                label: label(i),
                source: src.clone(),
                host: host_of(r),
                started_at: r.started_at.clone(),
                profile: profile_of(r),
                repeat: r.config.repeats(),
                build: r.tool.build_line(),
            })
            .collect(),
        metrics,
        environment: environment_moves(runs),
        builds: build_moves(runs),
        compared,
        significant,
        gate: None,
    }
}

/// One row per (experiment, metric) seen in any run, in first-seen order, with each
/// run's value (a metric whose unit changed between runs is not comparable: no value).
fn rows(runs: &[(String, RunResults)]) -> Vec<ComparedMetric> {
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
                        versus: vec![None; runs.len()],
                        significant_vs_baseline: vec![false; runs.len()],
                        significant: false,
                    });
                    metrics.len() - 1
                });
                if metrics[k].unit == m.unit {
                    metrics[k].values[i] = Some(Value {
                        median: m.summary.median,
                        ci95: m.summary.ci95,
                        n: m.summary.n,
                        status: e.status,
                        runs: m.runs.clone(),
                    });
                }
            }
        }
    }
    metrics
}

/// The sentinel component a metric is held to: its declaration; for a file from before
/// declarations, any component (`None`: the largest move) in the CPU-bound areas cpu and
/// mem, and no component elsewhere (a shaped link or a disk is not slowed by a slower
/// vCPU in proportion).
pub(crate) fn component_of(area: &str, declared: Option<Bottleneck>) -> Option<Bottleneck> {
    declared.or_else(|| (!matches!(area, "cpu" | "mem")).then_some(Bottleneck::None))
}

/// The change from `x` to `y` of one component, or of the one that moved most (`None`).
fn change(x: &Reading, y: &Reading, c: Option<Bottleneck>) -> f64 {
    match c {
        Some(b) => x.change_in(y, b),
        None => x.change_to(y),
    }
}

/// How the sentinel's component `c` (`None`: any) moved for `exp` between the baseline and
/// run `i`: (largest move, between, during the baseline, during run i). "Between" is the
/// geometric mean of each run's two readings; the largest move is over every before/after
/// pairing across the runs: during an experiment the environment may have been anywhere
/// between its two readings. `None` for component `none`.
fn sentinel_move(
    runs: &[(String, RunResults)],
    exp: &str,
    i: usize,
    c: Option<Bottleneck>,
) -> Option<(f64, f64, f64, f64)> {
    if c == Some(Bottleneck::None) {
        return None;
    }
    let sa = runs[0].1.experiment(exp)?.sentinel?;
    let sb = runs[i].1.experiment(exp)?.sentinel?;
    let between = change(&sa.mid(), &sb.mid(), c);
    let (da, db) = (
        change(&sa.before, &sa.after, c),
        change(&sb.before, &sb.after, c),
    );
    let cross = [sa.before, sa.after]
        .iter()
        .flat_map(|x| [sb.before, sb.after].map(|y| change(x, &y, c).abs()))
        .fold(0.0, f64::max);
    Some((cross.max(da.abs()).max(db.abs()), between, da, db))
}

/// Fills one row's ratios and verdicts against the baseline; whether it was compared
/// (present in the baseline and at least one other run).
fn judge_row(
    cm: &mut ComparedMetric,
    runs: &[(String, RunResults)],
    min_rel_diff: f64,
    history: &[RunResults],
) -> bool {
    let get = |run: usize| -> Option<(&ExperimentResult, &Metric)> {
        let e = runs[run].1.experiment(&cm.experiment)?;
        Some((e, e.metric(&cm.metric)?))
    };
    if cm.values[0].is_none() {
        return false;
    }
    let Some((ea, a)) = get(0) else {
        return false;
    };
    let hist: Vec<f64> = history
        .iter()
        .filter_map(|h| {
            let e = h.experiment(&cm.experiment)?;
            let m = e.metric(&cm.metric).filter(|m| m.unit == cm.unit)?;
            (e.status == Status::Ok).then_some(m.summary.median)
        })
        .collect();
    let mut any_other = false;
    for i in 0..runs.len() {
        if cm.values[i].is_none() {
            continue;
        }
        let Some((eb, b)) = get(i) else {
            continue;
        };
        let (ma, mb) = (a.summary.median, b.summary.median);
        if ma != 0.0 && ma.is_finite() && mb.is_finite() {
            cm.ratios[i] = Some(mb / ma);
        }
        if i == 0 {
            continue;
        }
        any_other = true;
        let Some(ratio) = cm.ratios[i] else {
            continue;
        };
        // Held to the sentinel component that shares the metric's bottleneck only: a DRAM
        // latency is not slowed by what slows an independent loop.
        let component = component_of(&ea.area, a.bottleneck.or(b.bottleneck));
        let moved = sentinel_move(runs, &cm.experiment, i, component).map(|m| m.0);
        // Network figures measured without a peer ran over loopback in either run. The
        // history that would measure a figure's noise between processes is one host's:
        // between two machines (a fleet) none can, and the within-run tests decide.
        // Unprefixed net.* figures are loopback ones even in a --peer run.
        let loopback = runs[0].1.peer_name().is_none()
            || runs[i].1.peer_name().is_none()
            || !cm.metric.starts_with("remote_");
        let one_host = runs[0].1.host_name() == runs[i].1.host_name()
            && runs[0].1.machine_fingerprint() == runs[i].1.machine_fingerprint();
        let v = versus(
            (ea, a),
            (eb, b),
            ratio,
            &hist,
            (component, moved, one_host.then_some(loopback)),
            min_rel_diff,
        );
        cm.significant_vs_baseline[i] = v.significant;
        cm.versus[i] = Some(v);
    }
    cm.significant = cm.significant_vs_baseline.iter().any(|b| *b);
    any_other
}

/// The verdict for b against a: the within-run test, then run-to-run noise, then the
/// sentinel's move, then a history for a figure whose noise across processes only a
/// history measures, then both experiments ok.
fn versus(
    (ea, a): (&ExperimentResult, &Metric),
    (eb, b): (&ExperimentResult, &Metric),
    ratio: f64,
    hist: &[f64],
    (component, moved, one_host): (Option<Bottleneck>, Option<f64>, Option<bool>),
    min_rel_diff: f64,
) -> Versus {
    let Within {
        test,
        shift,
        ci,
        spread,
        mut ok,
        why: mut reason,
    } = within(ea, a, eb, b, min_rel_diff);
    let noise = run_to_run(a, b, hist);
    let rel = (ratio - 1.0).abs();
    if ok && noise.threshold > 0.0 && rel <= noise.threshold {
        ok = false;
        reason = format!(
            "shift {:.1}% within the run-to-run noise ({}: {:.1}%)",
            rel * 100.0,
            noise.source,
            noise.threshold * 100.0
        );
    }
    if let Some(m) = moved {
        if ok && rel <= m {
            ok = false;
            reason = format!(
                "shift {:.1}% no larger than the environment sentinel's move ({}: {:.1}%)",
                rel * 100.0,
                component.map_or("any component", |c| c.describe()),
                m * 100.0
            );
        }
    }
    // As in the gate: a CPU-bound figure, a cross-CPU wake-up or a loopback network figure
    // can settle in a different state in each process, which repetitions within one
    // process share; only independent runs (the history) measure that noise.
    // `one_host`: whether the network ran over loopback, when both runs are of one host.
    if let Some(kind) = one_host
        .and_then(|loopback| gate::process_bound(component, &ea.id, loopback))
        .filter(|_| ok && !noise.source.starts_with("history"))
    {
        ok = false;
        reason = format!(
            "shift {:.1}% beyond the noise within each run ({}), but {kind} can move more between processes: a history of at least {MIN_HISTORY} runs of this host decides",
            rel * 100.0,
            noise.source
        );
    }
    if ea.status != Status::Ok || eb.status != Status::Ok {
        ok = false;
        reason = "an experiment was not ok".into();
    }
    Versus {
        ratio,
        test,
        shift,
        shift_ci95: ci,
        noise,
        spread,
        component,
        environment: moved,
        significant: ok,
        reason,
    }
}

/// A sentence per experiment and run where the sentinel moved by at least `ENV_NOTICE`:
/// which components moved, and which of them the experiment's metrics are held to.
fn environment_moves(runs: &[(String, RunResults)]) -> Vec<EnvironmentMove> {
    let mut environment = Vec::new();
    for i in 1..runs.len() {
        for e in &runs[0].1.experiments {
            let Some((m, between, da, db)) = sentinel_move(runs, &e.id, i, None) else {
                continue;
            };
            if m < ENV_NOTICE {
                continue;
            }
            let l = label(i);
            let pct = |x: f64| {
                format!(
                    "{:.0}% {}",
                    x.abs() * 100.0,
                    if x > 0.0 { "slower" } else { "faster" }
                )
            };
            let components: Vec<ComponentMove> = Bottleneck::ALL
                .iter()
                .filter_map(|&c| {
                    let (largest, between, _, _) = sentinel_move(runs, &e.id, i, Some(c))?;
                    Some(ComponentMove {
                        component: c,
                        largest,
                        between,
                    })
                })
                .collect();
            let mut held_to: Vec<Option<Bottleneck>> = Vec::new();
            for mt in &e.metrics {
                let c = component_of(&e.area, mt.bottleneck);
                if !held_to.contains(&c) {
                    held_to.push(c);
                }
            }
            let moved: Vec<String> = components
                .iter()
                .filter(|c| c.largest >= ENV_NOTICE)
                .map(|c| {
                    let mut t = format!("{} {:.0}%", c.component.describe(), c.largest * 100.0);
                    if c.between.abs() >= ENV_NOTICE {
                        t.push_str(&format!(" (run {l} {} than run A)", pct(c.between)));
                    }
                    t
                })
                .collect();
            let mut parts = vec![moved.join(", ")];
            if da.abs() >= ENV_NOTICE {
                parts.push(format!("run A got {} during {}", pct(da), e.id));
            }
            if db.abs() >= ENV_NOTICE {
                parts.push(format!("run {l} got {} during {}", pct(db), e.id));
            }
            // The allowance of each component the metrics are held to.
            let allow = |c: &Option<Bottleneck>| match c {
                Some(Bottleneck::None) => 0.0,
                Some(b) => components
                    .iter()
                    .find(|x| x.component == *b)
                    .map_or(0.0, |x| x.largest),
                None => m,
            };
            let held: Vec<String> = held_to
                .iter()
                .map(|c| match c {
                    Some(Bottleneck::None) => "no component (not discounted)".to_string(),
                    Some(b) => format!("the {} ({:.0}%)", b.describe(), allow(c) * 100.0),
                    None => format!("any component, undeclared ({:.0}%)", m * 100.0),
                })
                .collect();
            let most = held_to.iter().map(allow).fold(0.0, f64::max);
            environment.push(EnvironmentMove {
                experiment: e.id.clone(),
                run: l,
                between,
                during_baseline: da,
                during: db,
                components,
                held_to,
                text: if held.is_empty() {
                    format!("environment sentinel moved: {}", parts.join("; "))
                } else {
                    format!(
                        "environment sentinel moved: {}; its metrics are held to {}: differences up to {:.0}% there are not called significant",
                        parts.join("; "),
                        held.join(", "),
                        most * 100.0
                    )
                },
            });
        }
    }
    environment
}

/// A sentence per run whose build differs from the baseline's. The C library and the
/// target change what thread creation, fork and memcpy cost, so such a difference is
/// part of the environment; a run that does not name its build is said to, once.
fn build_moves(runs: &[(String, RunResults)]) -> Vec<String> {
    let Some((_, a)) = runs.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, (_, r)) in runs.iter().enumerate().skip(1) {
        let l = label(i);
        let d: Vec<String> = a
            .tool
            .build_differences(&r.tool)
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        if !d.is_empty() {
            out.push(format!(
                "run {l} was measured by a different build than run A ({}): a difference may come from the build, not the machine",
                d.join(", ")
            ));
        }
    }
    let unnamed: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| r.tool.build_line().is_none())
        .map(|(i, _)| label(i))
        .collect();
    if !unnamed.is_empty() && unnamed.len() < runs.len() {
        out.push(format!(
            "run {} does not name its commit, target or C library (written by an older osmeter): builds compared by version only",
            unnamed.join(", ")
        ));
    }
    out
}

/// The host name the history keys runs by (`--host-name`, else the hostname).
pub fn host_of(r: &RunResults) -> String {
    r.host_name().into()
}

pub fn profile_of(r: &RunResults) -> String {
    r.config.profile_name().into()
}

/// Run labels A, B, ..., Z, R27, ...
fn label(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("R{}", i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{BeforeAfter, Metric, MetricKind, Tool};

    use crate::stats::test_rng::Lcg;
    use crate::stats::Summary;

    trait Latency {
        fn latency(&mut self, med: f64) -> f64;
    }
    impl Latency for Lcg {
        /// Latency-like: log-normal with a spread of single operations near 0.5-1 CoV.
        fn latency(&mut self, med: f64) -> f64 {
            self.lognormal(med, 0.6)
        }
    }

    pub(super) fn metric(name: &str, raw: Vec<f64>, kind: Option<MetricKind>) -> Metric {
        Metric::test_ns(name, raw, kind)
    }

    pub(super) fn run(metrics: Vec<Metric>, sentinel: Option<BeforeAfter>) -> RunResults {
        RunResults {
            schema_version: 1,
            tool: Tool {
                name: "osmeter".into(),
                version: "0".into(),
                commit: None,
                target: None,
                libc: None,
            },
            started_at: "2026-01-01T00:00:00Z".into(),
            duration_s: 1.0,
            config: crate::results::RunRecord {
                profile: Some("quick".into()),
                ..Default::default()
            },
            machine: crate::machine::Machine {
                hostname: "h".into(),
                ..Default::default()
            },
            warnings: vec![],
            experiments: vec![ExperimentResult {
                duration_s: 1.0,
                metrics,
                sentinel,
                ..ExperimentResult::new("cpu.y", "t", "")
            }],
            findings: vec![],
        }
    }

    /// The run as a device-bound experiment's ("fs.y"), whose significance needs no
    /// history: the statistics' own tests.
    fn dev(mut r: RunResults) -> RunResults {
        r.experiments[0].id = "fs.y".into();
        r.experiments[0].area = "fs".into();
        r
    }

    fn pair(a: RunResults, b: RunResults, hist: &[RunResults]) -> Comparison {
        compare_with_history(&[("a".into(), a), ("b".into(), b)], MIN_REL_DIFF, hist)
    }

    pub(super) fn per_op(seed: u64, n: usize, med: f64) -> Metric {
        let mut r = Lcg(seed);
        let v = (0..n).map(|_| r.latency(med)).collect();
        metric("rtt", v, Some(MetricKind::PerOperation))
    }

    pub(super) fn trials(seed: u64, n: usize, med: f64, cov: f64) -> Vec<f64> {
        let mut r = Lcg(seed);
        (0..n).map(|_| med * (1.0 + cov * r.normal())).collect()
    }

    #[test]
    fn a_shift_of_a_per_operation_distribution_is_found() {
        // CoV of single operations ~0.6: the per-trial rule could never flag this.
        let a = per_op(1, 10_000, 1000.0);
        let b = per_op(2, 10_000, 1100.0);
        assert!(a.summary.cov > 0.5);
        let c = pair(
            dev(run(vec![a.clone()], None)),
            dev(run(vec![b], None)),
            &[],
        );
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert_eq!(v.test, Test::PerOperation);
        assert!(v.significant, "{v:?}");
        assert!(
            v.shift_ci95[0] > 0.0 && v.shift > 60.0 && v.shift < 140.0,
            "{v:?}"
        );
        // A 50% shift of a smaller sample too.
        let c = pair(
            dev(run(vec![per_op(3, 500, 100.0)], None)),
            dev(run(vec![per_op(4, 500, 150.0)], None)),
            &[],
        );
        assert!(c.metrics[0].significant);
    }

    #[test]
    fn a_noisier_tail_is_not_a_shift() {
        // Same median; B has 5% of operations 10x slower.
        let a = per_op(5, 10_000, 1000.0);
        let mut b = per_op(6, 10_000, 1000.0);
        for (i, x) in b.raw.iter_mut().enumerate() {
            if i % 20 == 0 {
                *x *= 10.0;
            }
        }
        b.summary = Summary::with_percentiles(&b.raw).unwrap();
        let c = pair(run(vec![a], None), run(vec![b], None), &[]);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(!v.significant, "{v:?}");
    }

    #[test]
    fn identical_distributions_false_positive_rate() {
        let draws = 300;
        let mut hits = 0;
        for seed in 0..draws {
            let c = pair(
                run(vec![per_op(10_000 + seed, 400, 200.0)], None),
                run(vec![per_op(20_000 + seed, 400, 200.0)], None),
                &[],
            );
            hits += c.significant;
            // Per-trial figures of equal truth, too.
            let t = |s| metric("t", trials(s, 15, 50.0, 0.05), Some(MetricKind::PerTrial));
            let c = pair(
                run(vec![t(30_000 + seed)], None),
                run(vec![t(40_000 + seed)], None),
                &[],
            );
            hits += c.significant;
        }
        let rate = hits as f64 / (2 * draws) as f64;
        assert!(rate <= 0.05, "false-positive rate {rate}");
    }

    #[test]
    fn a_drifting_run_is_not_a_shift() {
        // B drifts from 1.0x to 1.3x over the run: its median moves ~15%, but so do its
        // own batch medians.
        let a = per_op(7, 4000, 100.0);
        let mut b = per_op(8, 4000, 100.0);
        let n = b.raw.len() as f64;
        for (i, x) in b.raw.iter_mut().enumerate() {
            *x *= 1.0 + 0.3 * i as f64 / n;
        }
        b.summary = Summary::with_percentiles(&b.raw).unwrap();
        let c = pair(run(vec![a], None), run(vec![b], None), &[]);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(!v.significant && v.reason.contains("drift"), "{v:?}");
    }

    #[test]
    fn old_files_without_kind_use_the_per_trial_rule() {
        let a = metric("m", trials(1, 10, 100.0, 0.01), None);
        let b = metric("m", trials(2, 10, 120.0, 0.01), None);
        let c = pair(dev(run(vec![a], None)), dev(run(vec![b], None)), &[]);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert_eq!(v.test, Test::PerTrialInferred);
        assert!(v.significant);
        assert_eq!(v.noise.source, "within-run only");
    }

    #[test]
    fn derived_figures_carry_their_inputs_uncertainty() {
        // switch = round trip - cost; B's switch is 8% larger, but the subtracted cost
        // is itself uncertain by +-20.
        let derived = |seed, med| {
            let mut m = metric("switch", trials(seed, 12, med, 0.005), None);
            m.derived(&[("cost", "sub", 1.0)]);
            m
        };
        let cost = |seed| metric("cost", trials(seed, 12, 500.0, 0.1), None);
        let c = pair(
            dev(run(vec![cost(1), derived(2, 100.0)], None)),
            dev(run(vec![cost(3), derived(4, 108.0)], None)),
            &[],
        );
        let m = c.metrics.iter().find(|m| m.metric == "switch").unwrap();
        let v = m.versus[1].clone().unwrap();
        assert_eq!(v.test, Test::Derived);
        assert!(!v.significant, "{v:?}");
        // With a certain input the same shift is significant.
        let cost = |seed| metric("cost", trials(seed, 12, 500.0, 0.0001), None);
        let c = pair(
            dev(run(vec![cost(1), derived(2, 100.0)], None)),
            dev(run(vec![cost(3), derived(4, 108.0)], None)),
            &[],
        );
        let m = c.metrics.iter().find(|m| m.metric == "switch").unwrap();
        assert!(m.significant, "{:?}", m.versus[1]);
    }

    #[test]
    fn run_to_run_noise_from_history_and_repeats() {
        let t = |seed, med| {
            metric(
                "m",
                trials(seed, 10, med, 0.005),
                Some(MetricKind::PerTrial),
            )
        };
        let a = dev(run(vec![t(1, 100.0)], None));
        let b = dev(run(vec![t(2, 108.0)], None));
        // Within-run noise only: 8% is significant.
        assert!(pair(a.clone(), b.clone(), &[]).metrics[0].significant);
        // Earlier runs that scatter by ~5% make 8% ordinary.
        let hist: Vec<RunResults> = [100.0, 94.0, 105.0, 99.0]
            .iter()
            .enumerate()
            .map(|(i, m)| dev(run(vec![t(10 + i as u64, *m)], None)))
            .collect();
        let c = pair(a.clone(), b.clone(), &hist);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(!v.significant, "{v:?}");
        assert_eq!(v.noise.source, "history of 4 runs");
        // Two earlier runs are not enough for an estimate.
        let c = pair(a.clone(), b.clone(), &hist[..2]);
        assert_eq!(c.metrics[0].versus[1].as_ref().unwrap().noise.runs, 0);
        // Tight history: 8% stands.
        let tight: Vec<RunResults> = [100.0, 100.5, 99.6, 100.2]
            .iter()
            .enumerate()
            .map(|(i, m)| dev(run(vec![t(20 + i as u64, *m)], None)))
            .collect();
        assert!(pair(a.clone(), b.clone(), &tight).metrics[0].significant);
        // Repeats within the runs.
        let mut ra = a.clone();
        let mut rb = b.clone();
        ra.experiments[0].metrics[0].runs = vec![100.0, 93.0, 106.0];
        rb.experiments[0].metrics[0].runs = vec![108.0, 101.0, 114.0];
        let c = pair(ra.clone(), rb.clone(), &[]);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(
            !v.significant && v.noise.source == "repeats of 6 runs",
            "{v:?}"
        );
        // Three earlier runs outrank two repetitions in each run (README's count: the
        // gate decides a CPU-bound figure once the history holds 3).
        let mut r2a = a.clone();
        let mut r2b = b.clone();
        r2a.experiments[0].metrics[0].runs = vec![100.0, 93.0];
        r2b.experiments[0].metrics[0].runs = vec![108.0, 101.0];
        let c = pair(r2a, r2b, &hist[..3]);
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert_eq!(v.noise.source, "history of 3 runs", "{v:?}");
        rb.experiments[0].metrics[0].runs = vec![130.0, 131.0, 129.0];
        ra.experiments[0].metrics[0].runs = vec![100.0, 101.0, 99.0];
        rb.experiments[0].metrics[0].summary.median = 130.0;
        rb.experiments[0].metrics[0].summary.ci95 = [129.0, 131.0];
        assert!(pair(ra, rb, &[]).metrics[0].significant);
    }

    #[test]
    fn a_slower_vcpu_is_not_a_difference() {
        let r = |k: f64| Reading {
            chain_ns: 0.3 * k,
            issue_ns: 0.2 * k,
            chase_ns: 1.2 * k,
            copy_ns_per_byte: 0.02 * k,
            spread: 0.0,
        };
        let steady = BeforeAfter {
            before: r(1.0),
            after: r(1.0),
        };
        let slow = BeforeAfter {
            before: r(1.12),
            after: r(1.12),
        };
        let t = |seed, med| {
            metric(
                "m",
                trials(seed, 10, med, 0.005),
                Some(MetricKind::PerTrial),
            )
        };
        let c = pair(
            run(vec![t(1, 100.0)], Some(steady)),
            run(vec![t(2, 111.0)], Some(slow)),
            &[],
        );
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(!v.significant && v.reason.contains("sentinel"), "{v:?}");
        assert!((v.environment.unwrap() - 0.12).abs() < 1e-6);
        assert_eq!(c.environment.len(), 1);
        assert!(
            c.environment[0].text.contains("12% slower"),
            "{:?}",
            c.environment
        );
        // A change well beyond the sentinel's move is still found (with a history: a
        // CPU-bound figure's noise across processes is known only from one).
        let hist: Vec<RunResults> = [100.0, 100.5, 99.6, 100.2]
            .iter()
            .enumerate()
            .map(|(i, m)| run(vec![t(30 + i as u64, *m)], Some(steady)))
            .collect();
        let c = pair(
            run(vec![t(1, 100.0)], Some(steady)),
            run(vec![t(2, 150.0)], Some(slow)),
            &hist,
        );
        assert!(c.metrics[0].significant);
        // A move during a run counts as well.
        let during = BeforeAfter {
            before: r(1.0),
            after: r(1.15),
        };
        let c = pair(
            run(vec![t(1, 100.0)], Some(steady)),
            run(vec![t(2, 111.0)], Some(during)),
            &[],
        );
        assert!(!c.metrics[0].significant);
        assert!(c.environment[0].text.contains("during"));
        // The environment may have been anywhere between a run's two readings: a shift
        // beyond the means' move (sqrt(1.6 x 2.3) = 1.92x) but within the largest
        // before/after pairing (2.3x) is not a difference.
        let volatile = BeforeAfter {
            before: r(1.6),
            after: r(2.3),
        };
        let c = pair(
            run(vec![t(1, 100.0)], Some(steady)),
            run(vec![t(2, 210.0)], Some(volatile)),
            &[],
        );
        let v = c.metrics[0].versus[1].clone().unwrap();
        assert!(!v.significant && v.reason.contains("sentinel"), "{v:?}");
        assert!((v.environment.unwrap() - 1.3).abs() < 1e-6, "{v:?}");
        // Beyond every pairing it is found.
        let c = pair(
            run(vec![t(1, 100.0)], Some(steady)),
            run(vec![t(2, 260.0)], Some(volatile)),
            &hist,
        );
        assert!(c.metrics[0].significant);
    }

    #[test]
    fn a_cpu_bound_shift_needs_a_history_a_device_one_does_not() {
        // Tight trials, 20% apart: beyond any within-run noise. Between processes a
        // CPU-bound figure moves more than its repetitions show, so only a history decides.
        let t = |seed, med| {
            metric(
                "m",
                trials(seed, 10, med, 0.005),
                Some(MetricKind::PerTrial),
            )
        };
        let (a, b) = (run(vec![t(1, 100.0)], None), run(vec![t(2, 120.0)], None));
        let v = pair(a.clone(), b.clone(), &[]).metrics[0].versus[1]
            .clone()
            .unwrap();
        assert!(!v.significant && v.reason.contains("history"), "{v:?}");
        let hist: Vec<RunResults> = [100.0, 100.5, 99.6, 100.2]
            .iter()
            .enumerate()
            .map(|(i, m)| run(vec![t(10 + i as u64, *m)], None))
            .collect();
        assert!(pair(a.clone(), b.clone(), &hist).metrics[0].significant);
        assert!(pair(dev(a), dev(b), &[]).metrics[0].significant);
    }

    #[test]
    fn runs_of_different_builds_say_so() {
        let mut a = run(vec![metric("m", trials(1, 30, 100.0, 0.02), None)], None);
        let mut b = a.clone();
        assert!(
            compare(&[("a".into(), a.clone()), ("b".into(), b.clone())], 0.05)
                .builds
                .is_empty()
        );
        a.tool.commit = Some("aaaa".into());
        a.tool.libc = Some("glibc 2.36".into());
        b.tool.commit = Some("aaaa".into());
        b.tool.libc = Some("musl".into());
        let c = compare(&[("a".into(), a.clone()), ("b".into(), b.clone())], 0.05);
        assert_eq!(c.builds.len(), 1, "{:?}", c.builds);
        assert!(
            c.builds[0].contains("C library glibc 2.36 -> musl"),
            "{}",
            c.builds[0]
        );
        assert!(!c.builds[0].contains("commit"), "{}", c.builds[0]);
        // An old document names no build: said once, not taken for a difference.
        b.tool.commit = None;
        b.tool.libc = None;
        let c = compare(&[("a".into(), a), ("b".into(), b)], 0.05);
        assert_eq!(c.builds.len(), 1, "{:?}", c.builds);
        assert!(
            c.builds[0].starts_with("run B does not name"),
            "{}",
            c.builds[0]
        );
    }

    #[test]
    fn a_run_against_itself_flags_nothing() {
        let a = run(
            vec![
                per_op(1, 1000, 10.0),
                metric("t", trials(2, 10, 5.0, 0.02), Some(MetricKind::PerTrial)),
            ],
            None,
        );
        let c = pair(a.clone(), a, &[]);
        assert_eq!(c.significant, 0);
        assert_eq!(c.compared, 2);
    }
}
