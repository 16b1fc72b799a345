//! `compare A B --gate`: a verdict per metric for CI. Each metric's change B/A gets an
//! interval (its within-run 95% interval, no narrower than the within-run spread and the
//! run-to-run noise allow), widened by the environment's allowances (the move of the
//! sentinel component that shares its bottleneck, a change of steal time), and is judged
//! against a practical-effect floor in the direction that is worse for that metric:
//!
//! - `regressed`: the whole interval is worse than the floor;
//! - `improved`: the whole interval is better than the floor;
//! - `same`: the whole interval lies inside the floor;
//! - `inconclusive`: the interval crosses the floor, or the environment moved (the runs
//!   are of different machines, a trust grade differs, or the allowances make it cross),
//!   or a CPU-bound figure would change but its run-to-run noise is known only from
//!   repetitions within one process (no history of the host).
//!
//! Exit codes: 0 no regression, `EXIT_REGRESSION` a regression, `EXIT_INCONCLUSIVE` no
//! regression but no verdict where one was required.

use super::{ComparedMetric, Comparison, Versus, MIN_HISTORY, MIN_TRIALS};
use crate::results::{Bottleneck, ExperimentResult, RunResults, Status};
use serde::{Deserialize, Serialize};

pub use crate::error::{EXIT_INCONCLUSIVE, EXIT_REGRESSION};
/// The floor when neither the history, `--floor` nor a floors file gives one.
pub const DEFAULT_FLOOR: f64 = 0.05;
/// The least floor the history's noise can set.
pub const MIN_FLOOR: f64 = 0.01;
/// A floor from history is this many run-to-run standard deviations of the log medians.
pub const HISTORY_SDS: f64 = 2.0;

/// Which direction of a metric is worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Times: up is a regression.
    Lower,
    /// Bandwidths and rates: down is a regression.
    Higher,
}

impl Better {
    /// What the unit says: times (ns) are better lower, rates (bytes/s, bits/s, 1/s)
    /// higher; sizes, counts and ratios say nothing (such a metric is not gated unless a
    /// floors file names its direction).
    pub fn of_unit(unit: &str) -> Option<Better> {
        match unit {
            "ns" => Some(Better::Lower),
            "bytes/s" | "bits/s" | "1/s" => Some(Better::Higher),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regressed,
    Improved,
    Same,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::Same => "same",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// The floors file (`--floors FILE`, TOML):
///
/// ```toml
/// default = "5%"                      # every metric not named below
/// [floor]
/// "cpu.syscall.getppid" = "3%"        # experiment.metric, or a glob over it
/// "mem.latency.*" = "10%"
/// [better]
/// "fs.remote-read.ratio_*" = "lower"  # for metrics whose unit does not say
/// ```
///
/// Percentages are strings ("5%") or numbers (5 = 5%).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloorsFile {
    #[serde(default, deserialize_with = "percent_opt")]
    pub default: Option<f64>,
    #[serde(default, deserialize_with = "percent_map")]
    pub floor: Vec<(String, f64)>,
    #[serde(default)]
    pub better: std::collections::BTreeMap<String, Better>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Percent {
    Text(String),
    Number(f64),
}

/// A percentage as a fraction: "5%", "5" or 5 are 0.05; from 0 to below 100%.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v: f64 = t
        .strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (such as 5%)"))?;
    percent(v)
}

fn percent(v: f64) -> Result<f64, String> {
    if v.is_finite() && (0.0..100.0).contains(&v) {
        Ok(v / 100.0)
    } else {
        Err(format!("{v}% is not a floor from 0 to below 100%"))
    }
}

impl Percent {
    fn fraction(self) -> Result<f64, String> {
        match self {
            Percent::Text(s) => parse_percent(&s),
            Percent::Number(v) => percent(v),
        }
    }
}

fn percent_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let p = Percent::deserialize(d)?;
    p.fraction().map(Some).map_err(serde::de::Error::custom)
}

fn percent_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, f64)>, D::Error> {
    let m = std::collections::BTreeMap::<String, Percent>::deserialize(d)?;
    m.into_iter()
        .map(|(k, p)| {
            p.fraction()
                .map(|f| (k.clone(), f))
                .map_err(|e| serde::de::Error::custom(format!("floor.{k:?}: {e}")))
        })
        .collect()
}

impl FloorsFile {
    pub fn parse(text: &str) -> Result<FloorsFile, String> {
        let f: FloorsFile = toml::from_str(text).map_err(|e| {
            // toml's messages span lines (a caret under the spot): keep the first.
            e.to_string()
                .lines()
                .next()
                .unwrap_or("bad TOML")
                .to_string()
        })?;
        for p in f.floor.iter().map(|x| &x.0).chain(f.better.keys()) {
            glob::Pattern::new(p).map_err(|e| format!("pattern {p:?}: {e}"))?;
        }
        Ok(f)
    }
}

/// Whether `pattern` (a glob) names metric `metric` of experiment `exp`: it matches
/// `exp.metric`, or the experiment id alone (all its metrics).
pub fn names(pattern: &str, exp: &str, metric: &str) -> bool {
    let Ok(p) = glob::Pattern::new(pattern) else {
        return false;
    };
    p.matches(&format!("{exp}.{metric}")) || p.matches(exp)
}

/// The most specific entry for a metric: an exact name, else the longest matching pattern.
fn most_specific<'a, T>(
    entries: impl Iterator<Item = (&'a String, T)>,
    exp: &str,
    metric: &str,
) -> Option<T> {
    let key = format!("{exp}.{metric}");
    entries
        .filter(|(p, _)| names(p, exp, metric))
        .max_by_key(|(p, _)| (**p == key, p.len()))
        .map(|(_, v)| v)
}

/// What decides the floor and the verdicts.
#[derive(Debug, Clone, Default)]
pub struct GateConfig {
    /// `--floor`: every metric's floor (a floors file entry for the metric still wins).
    pub floor: Option<f64>,
    pub file: Option<FloorsFile>,
    /// `--require`: metrics (globs over `experiment.metric` or experiment ids) that need a
    /// verdict; without any, a gate with no verdict at all is inconclusive.
    pub require: Vec<String>,
}

/// One metric's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct GateRow {
    pub experiment: String,
    pub metric: String,
    pub unit: String,
    /// Which direction is worse; null when the unit does not say (not gated).
    pub better: Option<Better>,
    /// Null when the metric is not gated (no direction, or not in the baseline).
    pub verdict: Option<Verdict>,
    /// B over A, minus 1 (NaN when there is no ratio).
    pub change: f64,
    /// The change's interval (relative, 95%), with the within-run and run-to-run noise.
    pub interval: [f64; 2],
    /// The same, widened by the environment's allowances (what the verdict judged).
    pub judged: [f64; 2],
    /// The practical-effect floor (relative) and where it came from.
    pub floor: f64,
    pub floor_source: String,
    /// The sentinel component the metric is held to (null: any, undeclared) and its move.
    pub component: Option<Bottleneck>,
    pub sentinel_move: Option<f64>,
    /// Matched by `--require`.
    pub required: bool,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub rule: String,
    /// The run judged against the baseline (A).
    pub run: String,
    /// What moved for the whole run: machine fingerprint, steal time.
    pub environment: Vec<String>,
    /// Regressions first, then improvements, inconclusive, same and not gated.
    pub rows: Vec<GateRow>,
    pub regressed: usize,
    pub improved: usize,
    pub same: usize,
    pub inconclusive: usize,
    pub not_gated: usize,
    /// `--require` patterns that named no metric of the baseline.
    pub unmatched: Vec<String>,
    /// 0, `EXIT_REGRESSION` or `EXIT_INCONCLUSIVE`, and why.
    pub exit_code: u8,
    pub outcome: String,
}

pub fn rule_text() -> String {
    format!(
        "regressed/improved = the change's 95% interval (within-run interval, no narrower \
         than the trials' spread or the run-to-run noise allow, widened by the move of \
         the sentinel component that shares the metric's bottleneck and by a change of \
         steal time) lies wholly beyond the floor on the worse/better side; same = wholly \
         inside the floor; inconclusive = it crosses the floor, the runs are of different \
         machines or trust grades (for a figure no sentinel component shares, leaving out \
         the core's clock and issue rate), or a CPU-bound metric (one a sentinel \
         component shares), a cross-CPU wake-up or a loopback network figure would change \
         while its run-to-run noise is known only within each run (no history of at least \
         {MIN_HISTORY} runs of this host). Floor: a floors-file entry, else --floor, else \
         the file's default, else {HISTORY_SDS} run-to-run SDs of the metric in this \
         host's history (at least {MIN_HISTORY} runs; no less than {:.0}%), else {:.0}%",
        MIN_FLOOR * 100.0,
        DEFAULT_FLOOR * 100.0
    )
}

/// Grade reasons about the core's own speed (its clock, issue rate and the loop overhead
/// measured with them). A figure no sentinel component shares (`Bottleneck::None`: a
/// link's, a device's, the kernel's paths) is by its declaration not bound by them.
const CORE_SPEED: &[&str] = &[
    "issue_rate",
    "frequency",
    "throttle",
    "loop_overhead",
    "governor",
    "boost",
    "efficiency_core",
    "smt_sibling_busy",
];

/// The experiment's trust grade as it bears on a metric held to `component`, where the
/// document carries one: the worst level of the reasons that can move that metric. Two
/// runs of different grades are not comparable: their verdicts are inconclusive.
fn grade(e: &ExperimentResult, component: Option<Bottleneck>) -> Option<&'static str> {
    let g = e.grade.as_ref()?;
    let bears = |code: &str| component != Some(Bottleneck::None) || !CORE_SPEED.contains(&code);
    Some(
        g.reasons
            .iter()
            .filter(|r| bears(&r.code))
            .map(|r| r.level)
            .max()
            // A grade without reasons (or written before reasons) stands as it is.
            .unwrap_or(if g.reasons.is_empty() {
                g.level
            } else {
                crate::results::GradeLevel::A
            })
            .as_str(),
    )
}

/// The share of wall time the hypervisor stole during a run, as the factor it can inflate
/// a CPU-bound time by minus 1: s / (1 - s).
fn steal_inflation(r: &RunResults) -> Option<f64> {
    let s = r.machine.virtualization.steal_during_run?.steal_fraction;
    (s.is_finite() && (0.0..1.0).contains(&s)).then(|| s / (1.0 - s))
}

/// The verdict of an interval of the worse-direction log change against log floor `f`.
fn verdict_of(lo: f64, hi: f64, f: f64) -> Verdict {
    if lo > f {
        Verdict::Regressed
    } else if hi < -f {
        Verdict::Improved
    } else if lo >= -f && hi <= f {
        Verdict::Same
    } else {
        Verdict::Inconclusive
    }
}

fn ln1p(x: f64) -> f64 {
    if x > -1.0 {
        x.ln_1p()
    } else {
        f64::NEG_INFINITY
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.1}%", x * 100.0)
    } else if x > 0.0 {
        "+inf".into()
    } else {
        "-100%".into()
    }
}

/// The floor for a metric and where it came from.
fn floor_for(cfg: &GateConfig, exp: &str, metric: &str, hist: &[f64]) -> (f64, String) {
    if let Some(f) = cfg
        .file
        .as_ref()
        .and_then(|file| most_specific(file.floor.iter().map(|(p, v)| (p, *v)), exp, metric))
    {
        return (f, "floors file".into());
    }
    if let Some(f) = cfg.floor {
        return (f, "--floor".into());
    }
    if let Some(f) = cfg.file.as_ref().and_then(|f| f.default) {
        return (f, "floors file default".into());
    }
    let logs: Vec<f64> = hist
        .iter()
        .filter(|x| x.is_finite() && **x > 0.0)
        .map(|x| x.ln())
        .collect();
    if logs.len() >= MIN_HISTORY {
        let n = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / n;
        let sd = (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let f = ((HISTORY_SDS * sd).exp() - 1.0).max(MIN_FLOOR);
        return (
            f,
            format!("{HISTORY_SDS} SDs of {} earlier runs here", logs.len()),
        );
    }
    (DEFAULT_FLOOR, "default".into())
}

/// The gate of run `i` of `c` (built from `runs`) against the baseline; `history` are the
/// earlier runs `c` used for run-to-run noise (they set the floors).
pub fn gate(
    c: &Comparison,
    runs: &[(String, RunResults)],
    i: usize,
    history: &[RunResults],
    cfg: &GateConfig,
) -> Gate {
    let label = c.runs[i].label.clone();
    let (environment, around) = surroundings(c, &runs[0].1, &runs[i].1, &label);
    let mut rows: Vec<GateRow> = c
        .metrics
        .iter()
        .map(|cm| row(cm, runs, i, history, cfg, around))
        .collect();
    let order = |r: &GateRow| match r.verdict {
        Some(Verdict::Regressed) => 0,
        Some(Verdict::Improved) => 1,
        Some(Verdict::Inconclusive) => 2,
        Some(Verdict::Same) => 3,
        None => 4,
    };
    // Stable: within a verdict, the comparison's order (experiment by experiment).
    rows.sort_by_key(order);
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == Some(v)).count();
    let (regressed, improved, same, inconclusive) = (
        count(Verdict::Regressed),
        count(Verdict::Improved),
        count(Verdict::Same),
        count(Verdict::Inconclusive),
    );
    let not_gated = rows.iter().filter(|r| r.verdict.is_none()).count();
    let unmatched: Vec<String> = cfg
        .require
        .iter()
        .filter(|p| !rows.iter().any(|r| names(p, &r.experiment, &r.metric)))
        .cloned()
        .collect();
    let (exit_code, outcome) = exit(&rows, &unmatched, cfg, [regressed, improved, same]);
    Gate {
        rule: rule_text(),
        run: label,
        environment,
        rows,
        regressed,
        improved,
        same,
        inconclusive,
        not_gated,
        unmatched,
        exit_code,
        outcome,
    }
}

/// What moved for the whole run between A (`ra`) and run `label` (`rb`): the lines the
/// gate reports and what they bring to every row.
fn surroundings(
    c: &Comparison,
    ra: &RunResults,
    rb: &RunResults,
    label: &str,
) -> (Vec<String>, Around) {
    let mut environment = Vec::new();
    let (fa, fb) = (ra.machine_fingerprint(), rb.machine_fingerprint());
    let other_machine = fa != fb;
    if other_machine {
        environment.push(format!(
            "different machines: A is {fa}, {label} is {fb}; no verdict can separate the machine from the change"
        ));
    }
    // A commit is what a gate compares; another target or C library is the environment's.
    let built: Vec<String> = ra
        .tool
        .build_differences(&rb.tool)
        .into_iter()
        .filter(|(what, _)| matches!(*what, "target" | "C library"))
        .map(|(_, d)| d)
        .collect();
    if !built.is_empty() {
        environment.push(format!(
            "different builds: {} between A and {label}; thread creation, fork and copies go through the C library, so their figures move with it",
            built.join(", ")
        ));
    }
    let steal = match (steal_inflation(ra), steal_inflation(rb)) {
        (Some(a), Some(b)) => {
            let d = (b - a).abs();
            if d >= 0.005 {
                environment.push(format!(
                    "steal time: the hypervisor took {:.1}% of run A's CPU time and {:.1}% of run {label}'s: every interval is widened by {:.1}%",
                    a / (1.0 + a) * 100.0,
                    b / (1.0 + b) * 100.0,
                    d * 100.0
                ));
            }
            d
        }
        _ => 0.0,
    };
    if c.history_runs < MIN_HISTORY {
        environment.push(format!(
            "no history of this host ({} earlier runs, {MIN_HISTORY} needed): a CPU-bound metric \
             (one a sentinel component shares), a cross-CPU wake-up or a loopback network figure \
             can be same or inconclusive, not regressed or improved; back-to-back runs of one \
             build moved cpu.call and cpu.timer 24-36% here with the sentinel still",
            c.history_runs
        ));
    }
    // Network figures measured without a peer ran over loopback in either run.
    let loopback = ra.peer_name().is_none() || rb.peer_name().is_none();
    let around = Around {
        other_machine,
        steal,
        loopback,
    };
    (environment, around)
}

/// The exit code and its reason, from the rows and the counts of regressed, improved and
/// same verdicts.
fn exit(
    rows: &[GateRow],
    unmatched: &[String],
    cfg: &GateConfig,
    [regressed, improved, same]: [usize; 3],
) -> (u8, String) {
    let open_required = rows
        .iter()
        .filter(|r| r.required && r.verdict == Some(Verdict::Inconclusive))
        .count();
    if regressed > 0 {
        (
            EXIT_REGRESSION,
            format!("{regressed} regressed: exit {EXIT_REGRESSION}"),
        )
    } else if !cfg.require.is_empty() && (open_required > 0 || !unmatched.is_empty()) {
        let mut why = Vec::new();
        if open_required > 0 {
            why.push(format!("{open_required} required metric(s) inconclusive"));
        }
        if !unmatched.is_empty() {
            why.push(format!(
                "--require {} named no metric",
                unmatched.join(", ")
            ));
        }
        (
            EXIT_INCONCLUSIVE,
            format!(
                "no regression, but {}: exit {EXIT_INCONCLUSIVE}",
                why.join("; ")
            ),
        )
    } else if cfg.require.is_empty() && regressed + improved + same == 0 {
        (
            EXIT_INCONCLUSIVE,
            format!("no metric reached a verdict: exit {EXIT_INCONCLUSIVE}"),
        )
    } else {
        (0, "no regression: exit 0".into())
    }
}

/// What the runs' circumstances bring to every row.
#[derive(Clone, Copy)]
struct Around {
    other_machine: bool,
    /// The change of steal time between the runs.
    steal: f64,
    /// The network figures ran over loopback in at least one run.
    loopback: bool,
}

/// The verdict for one metric.
fn row(
    cm: &ComparedMetric,
    runs: &[(String, RunResults)],
    i: usize,
    history: &[RunResults],
    cfg: &GateConfig,
    around: Around,
) -> GateRow {
    let mut r = new_row(cm, i, history, cfg);
    let Some(pair) = comparable(&mut r, cm, runs, i) else {
        return r;
    };
    let Some((plain, judged)) = judge(&mut r, &pair, around.steal) else {
        return r;
    };
    settle(&mut r, &pair, around, plain, judged);
    r
}

/// A row before its verdict: the metric's floor, direction and change, inconclusive.
fn new_row(cm: &ComparedMetric, i: usize, history: &[RunResults], cfg: &GateConfig) -> GateRow {
    let (exp, metric) = (cm.experiment.as_str(), cm.metric.as_str());
    let hist: Vec<f64> = history
        .iter()
        .filter_map(|h| {
            let e = h.experiment(exp)?;
            let m = e.metric(metric).filter(|m| m.unit == cm.unit)?;
            (e.status == Status::Ok).then_some(m.summary.median)
        })
        .collect();
    let (floor, floor_source) = floor_for(cfg, exp, metric, &hist);
    let better = cfg
        .file
        .as_ref()
        .and_then(|f| most_specific(f.better.iter().map(|(p, b)| (p, *b)), exp, metric))
        .or_else(|| Better::of_unit(&cm.unit));
    let required = cfg.require.iter().any(|p| names(p, exp, metric));
    let v: Option<&Versus> = cm.versus.get(i).and_then(|v| v.as_ref());
    GateRow {
        experiment: cm.experiment.clone(),
        metric: cm.metric.clone(),
        unit: cm.unit.clone(),
        better,
        verdict: Some(Verdict::Inconclusive),
        change: v.map_or(f64::NAN, |v| v.ratio - 1.0),
        interval: [f64::NAN; 2],
        judged: [f64::NAN; 2],
        floor,
        floor_source,
        component: v.and_then(|v| v.component),
        sentinel_move: v.and_then(|v| v.environment),
        required,
        reason: String::new(),
    }
}

/// What a gated metric's verdict is judged from: both runs' experiments, the change and
/// the worse direction.
struct Pair<'a> {
    exp: &'a str,
    ea: &'a ExperimentResult,
    eb: &'a ExperimentResult,
    v: &'a Versus,
    /// The baseline's median.
    ma: f64,
    better: Better,
}

/// The pair to judge, or None with the row's reason set when the metric is not gated or
/// cannot be judged (missing, failed, too few trials).
fn comparable<'a>(
    r: &mut GateRow,
    cm: &'a ComparedMetric,
    runs: &'a [(String, RunResults)],
    i: usize,
) -> Option<Pair<'a>> {
    let exp = cm.experiment.as_str();
    let (Some(va), vb) = (cm.values[0].as_ref(), cm.values[i].as_ref()) else {
        r.verdict = None;
        r.reason = "not in the baseline".into();
        return None;
    };
    let Some(better) = r.better else {
        r.verdict = None;
        r.reason = format!(
            "not gated: a figure in {} has no worse direction (name one under [better] in a floors file)",
            cm.unit
        );
        return None;
    };
    let Some(vb) = vb else {
        r.reason = format!("missing from run {}", super::label(i));
        return None;
    };
    let found = |k: usize| {
        runs[k]
            .1
            .experiment(exp)
            .expect("a value has its experiment")
    };
    let (ea, eb) = (found(0), found(i));
    if va.status != Status::Ok || vb.status != Status::Ok {
        r.reason = format!(
            "{exp} was {} in run A and {} in run {}",
            va.status.as_str(),
            vb.status.as_str(),
            super::label(i)
        );
        return None;
    }
    let Some(v) = cm.versus.get(i).and_then(|v| v.as_ref()) else {
        r.reason = "no comparable median (a zero or non-finite baseline)".into();
        return None;
    };
    if va.n < MIN_TRIALS || vb.n < MIN_TRIALS {
        r.reason = format!("fewer than {MIN_TRIALS} trials in a run: no interval");
        return None;
    }
    Some(Pair {
        exp,
        ea,
        eb,
        v,
        ma: va.median,
        better,
    })
}

/// Sets the row's intervals and returns the verdicts of the plain and of the judged
/// (allowance-widened) interval, or None with the reason set when there is no interval.
fn judge(r: &mut GateRow, p: &Pair, steal: f64) -> Option<(Verdict, Verdict)> {
    let v = p.v;
    let l = v.ratio.ln();
    let lo = ln1p(v.shift_ci95[0] / p.ma);
    let hi = ln1p(v.shift_ci95[1] / p.ma);
    if !(l.is_finite() && !lo.is_nan() && !hi.is_nan()) {
        r.reason = "no finite interval".into();
        return None;
    }
    // No narrower than the within-run spread and the run-to-run noise allow.
    let h = v
        .spread
        .max(0.0)
        .ln_1p()
        .max(v.noise.threshold.max(0.0).ln_1p());
    let (lo, hi) = (lo.min(l - h), hi.max(l + h));
    let e = v.environment.unwrap_or(0.0).abs().ln_1p() + steal.ln_1p();
    let (jlo, jhi) = (lo - e, hi + e);
    r.interval = [lo.exp() - 1.0, hi.exp() - 1.0];
    r.judged = [jlo.exp() - 1.0, jhi.exp() - 1.0];
    let f = r.floor.ln_1p();
    let worse = |a: f64, b: f64| match p.better {
        Better::Lower => (a, b),
        Better::Higher => (-b, -a),
    };
    let (wlo, whi) = worse(lo, hi);
    let (wjlo, wjhi) = worse(jlo, jhi);
    Some((verdict_of(wlo, whi, f), verdict_of(wjlo, wjhi, f)))
}

/// The row's verdict and reason from its interval's verdicts, unless the runs' machines,
/// grades or missing history leave it inconclusive.
fn settle(r: &mut GateRow, p: &Pair, around: Around, plain: Verdict, judged: Verdict) {
    let (v, better, steal) = (p.v, p.better, around.steal);
    let interval = format!(
        "change {} [{}, {}]",
        pct(r.change),
        pct(r.interval[0]),
        pct(r.interval[1])
    );
    let component = match r.component {
        Some(b) => b.describe().to_string(),
        None => "any component (undeclared)".into(),
    };
    let floor_text = format!("{:.1}% floor ({})", r.floor * 100.0, r.floor_source);
    let side = |v: Verdict| match (v, better) {
        (Verdict::Regressed, Better::Lower) | (Verdict::Improved, Better::Higher) => "higher",
        _ => "lower",
    };
    if around.other_machine {
        r.reason = format!("{interval}: the runs are of different machines");
        return;
    }
    if let (Some(ga), Some(gb)) = (grade(p.ea, r.component), grade(p.eb, r.component)) {
        if ga != gb {
            let which = if r.component == Some(Bottleneck::None) {
                " (leaving out the core's clock and issue rate, which it does not share)"
            } else {
                ""
            };
            r.reason = format!("{interval}: trust grade {ga} in run A, {gb} in the other{which}");
            return;
        }
    }
    // A CPU-bound figure can settle in a different state in each process (code and stack
    // placement, the host core under the vCPU) that its repetitions within the process
    // share: only independent runs (the history) measure that noise. So can a figure
    // that rides this machine's scheduler though no sentinel kernel shares it.
    // Unprefixed net.* figures are loopback ones even in a --peer run (`remote_` is the peer).
    let loopback = around.loopback || !r.metric.starts_with("remote_");
    if let Some(kind) = process_bound(r.component, p.exp, loopback)
        .filter(|_| !v.noise.source.starts_with("history"))
        .filter(|_| matches!(judged, Verdict::Regressed | Verdict::Improved))
    {
        r.reason = format!(
            "{interval} would be {} against the {floor_text}, but its run-to-run noise is known only within each run ({}), whose repetitions share one process's state ({kind}); a history of at least {MIN_HISTORY} runs of this host decides",
            judged.as_str(),
            v.noise.source
        );
        return;
    }
    r.verdict = Some(judged);
    r.reason = match judged {
        Verdict::Regressed | Verdict::Improved => format!(
            "{interval}, wholly {} than the {floor_text}{}",
            side(judged),
            allowance_text(r, &component, steal)
        ),
        Verdict::Same => format!(
            "{interval}, inside the {floor_text}{}",
            allowance_text(r, &component, steal)
        ),
        Verdict::Inconclusive if plain != Verdict::Inconclusive => format!(
            "{interval} would be {} against the {floor_text}, but the environment moved: {}",
            plain.as_str(),
            allowance_text(r, &component, steal).trim_start_matches(", ")
        ),
        Verdict::Inconclusive => format!("{interval} crosses the {floor_text}"),
    };
}

/// Why a figure's noise between processes is unknown without a history, or None when its
/// repetitions show it (a disk, a remote link): a CPU-bound figure; a cross-CPU wake-up
/// (an IPI, a vCPU the host must run: the scheduler's and hypervisor's state); a
/// loopback network figure (the network is this machine's CPUs and scheduler).
pub(crate) fn process_bound(
    component: Option<Bottleneck>,
    exp: &str,
    loopback: bool,
) -> Option<&'static str> {
    if component != Some(Bottleneck::None) {
        Some("a CPU-bound figure")
    } else if exp.starts_with("cpu.") {
        Some("a cross-CPU wake-up")
    } else if exp.starts_with("net.") && loopback {
        Some("a loopback network figure")
    } else {
        None
    }
}

/// ", allowing for ..." naming the environment's allowances, or nothing.
fn allowance_text(r: &GateRow, component: &str, steal: f64) -> String {
    let mut parts = Vec::new();
    if let Some(m) = r.sentinel_move.filter(|m| *m > 0.0) {
        parts.push(format!(
            "the sentinel's {component} moved {:.1}%",
            m * 100.0
        ));
    }
    if steal > 0.0 {
        parts.push(format!("steal time changed by {:.1}%", steal * 100.0));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", allowing for {}", parts.join(" and "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::compare_with_history;
    use crate::compare::tests::{metric, per_op, run as cpu_run, trials};

    /// A run of one experiment: "cpu.y", or "fs.y" when no metric shares a sentinel
    /// component (the tests' device figure: a disk, whose repetitions show its noise).
    fn run(metrics: Vec<Metric>, sentinel: Option<BeforeAfter>) -> RunResults {
        let device = metrics
            .iter()
            .all(|m| m.bottleneck == Some(Bottleneck::None));
        let mut r = cpu_run(metrics, sentinel);
        if device {
            r.experiments[0].id = "fs.y".into();
        }
        r
    }
    use crate::results::{BeforeAfter, Metric, MetricKind, Reading};

    /// A sentinel reading: each component scaled by its factor (chain, issue, chase, copy).
    fn reading(k: [f64; 4]) -> BeforeAfter {
        let r = Reading {
            chain_ns: 1.3 * k[0],
            issue_ns: 0.33 * k[1],
            chase_ns: 1.6 * k[2],
            copy_ns_per_byte: 0.012 * k[3],
            spread: 0.0,
        };
        BeforeAfter {
            before: r,
            after: r,
        }
    }

    const STILL: [f64; 4] = [1.0; 4];

    /// A per-trial time of median `med`, 15 trials with a 0.5% CoV, held to `b`.
    fn time(seed: u64, med: f64, b: Option<Bottleneck>) -> Metric {
        let mut m = metric(
            "t",
            trials(seed, 15, med, 0.005),
            Some(MetricKind::PerTrial),
        );
        m.bottleneck = b;
        m
    }

    fn judge(a: RunResults, b: RunResults, history: &[RunResults], cfg: &GateConfig) -> Gate {
        let runs = [("a".to_string(), a), ("b".to_string(), b)];
        let c = compare_with_history(&runs, super::super::MIN_REL_DIFF, history);
        gate(&c, &runs, 1, history, cfg)
    }

    /// Four earlier runs of the host whose `t` scatters by 0.1%: run-to-run noise from
    /// independent runs, which a CPU-bound verdict needs.
    fn quiet_history(b: Option<Bottleneck>) -> Vec<RunResults> {
        [100.0, 100.1, 99.9, 100.0]
            .iter()
            .enumerate()
            .map(|(i, m)| run(vec![time(50 + i as u64, *m, b)], None))
            .collect()
    }

    fn only(g: &Gate) -> &GateRow {
        assert_eq!(g.rows.len(), 1, "{g:?}");
        &g.rows[0]
    }

    #[test]
    fn a_still_bottleneck_gives_a_verdict_though_another_component_doubled() {
        let cfg = GateConfig::default();
        let hist = quiet_history(Some(Bottleneck::Chain));
        // +25% on a chain-bound figure; the issue rate halved (2x slower) meanwhile.
        let g = judge(
            run(
                vec![time(1, 100.0, Some(Bottleneck::Chain))],
                Some(reading(STILL)),
            ),
            run(
                vec![time(2, 125.0, Some(Bottleneck::Chain))],
                Some(reading([1.0, 2.0, 1.0, 1.0])),
            ),
            &hist,
            &cfg,
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Regressed), "{r:?}");
        assert_eq!(r.component, Some(Bottleneck::Chain));
        assert_eq!(r.sentinel_move, Some(0.0));
        assert_eq!(g.exit_code, EXIT_REGRESSION);
        assert!(r.reason.contains("wholly higher"), "{}", r.reason);

        // The same +25% with its own component moved 25%: the environment may explain it.
        let g = judge(
            run(
                vec![time(1, 100.0, Some(Bottleneck::Chain))],
                Some(reading(STILL)),
            ),
            run(
                vec![time(2, 125.0, Some(Bottleneck::Chain))],
                Some(reading([1.25, 1.0, 1.0, 1.0])),
            ),
            &hist,
            &cfg,
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Inconclusive), "{r:?}");
        assert!(
            r.reason.contains("would be regressed") && r.reason.contains("dependent chain"),
            "{}",
            r.reason
        );
        assert_eq!(g.exit_code, EXIT_INCONCLUSIVE);

        // Without a history, a CPU-bound +25% is no verdict: the repetitions within one
        // run share its process's state.
        let g = judge(
            run(
                vec![time(1, 100.0, Some(Bottleneck::Chain))],
                Some(reading(STILL)),
            ),
            run(
                vec![time(2, 125.0, Some(Bottleneck::Chain))],
                Some(reading(STILL)),
            ),
            &[],
            &cfg,
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Inconclusive), "{r:?}");
        assert!(r.reason.contains("known only within"), "{}", r.reason);
        assert!(g.environment[0].contains("no history"), "{g:?}");

        // compare's own significance follows the same declaration.
        let runs = |k: [f64; 4], b| {
            [
                (
                    "a".to_string(),
                    run(vec![time(1, 100.0, b)], Some(reading(STILL))),
                ),
                (
                    "b".to_string(),
                    run(vec![time(2, 125.0, b)], Some(reading(k))),
                ),
            ]
        };
        // With a history (a CPU-bound figure's noise across processes is known only
        // from one), tight here.
        let hist = |b| -> Vec<RunResults> {
            [100.0, 100.5, 99.6, 100.2]
                .iter()
                .enumerate()
                .map(|(i, m)| run(vec![time(30 + i as u64, *m, b)], Some(reading(STILL))))
                .collect()
        };
        let sig = |k, b| compare_with_history(&runs(k, b), 0.05, &hist(b)).metrics[0].significant;
        assert!(sig([1.0, 2.0, 1.0, 1.0], Some(Bottleneck::Chain)));
        assert!(!sig([1.3, 1.0, 1.0, 1.0], Some(Bottleneck::Chain)));
        // A copy-bound figure does not care about the issue rate either; a file from
        // before declarations is held to the largest move of any component, as it was.
        assert!(sig([1.0, 2.0, 1.0, 1.0], Some(Bottleneck::Copy)));
        assert!(!sig([1.0, 2.0, 1.0, 1.0], None));
        // A figure that shares no component is never discounted.
        assert!(sig([2.0, 2.0, 2.0, 2.0], Some(Bottleneck::None)));
    }

    #[test]
    fn worse_is_known_per_metric() {
        // A 5% floor: the quiet history alone would set 1%.
        let cfg = GateConfig {
            floor: Some(0.05),
            ..Default::default()
        };
        let rate = |seed, med| {
            let mut m = time(seed, med, Some(Bottleneck::None));
            m.unit = "bytes/s".into();
            m
        };
        let hist = quiet_history(None);
        let one = |a: Metric, b: Metric| {
            let g = judge(run(vec![a], None), run(vec![b], None), &hist, &cfg);
            (only(&g).verdict, g.exit_code)
        };
        // A bandwidth halved regresses; doubled improves.
        assert_eq!(
            one(rate(1, 400.0), rate(2, 200.0)),
            (Some(Verdict::Regressed), EXIT_REGRESSION)
        );
        assert_eq!(
            one(rate(1, 200.0), rate(2, 400.0)),
            (Some(Verdict::Improved), 0)
        );
        // A time down is an improvement, up a regression.
        assert_eq!(
            one(time(1, 100.0, None), time(2, 80.0, None)),
            (Some(Verdict::Improved), 0)
        );
        assert_eq!(
            one(time(1, 100.0, None), time(2, 120.0, None)).0,
            Some(Verdict::Regressed)
        );
        // Equal truth: same, exit 0.
        assert_eq!(
            one(time(1, 100.0, None), time(2, 100.0, None)),
            (Some(Verdict::Same), 0)
        );
        // A size has no worse side: not gated, and a gate of nothing is inconclusive.
        let size = |seed, med| {
            let mut m = time(seed, med, Some(Bottleneck::None));
            m.unit = "bytes".into();
            m
        };
        assert_eq!(
            one(size(1, 100.0), size(2, 50.0)),
            (None, EXIT_INCONCLUSIVE)
        );
        // ... unless a floors file names its direction.
        let cfg = GateConfig {
            file: Some(FloorsFile::parse("[better]\n\"fs.y.t\" = \"higher\"\n").unwrap()),
            ..Default::default()
        };
        let g = judge(
            run(vec![size(1, 100.0)], None),
            run(vec![size(2, 50.0)], None),
            &[],
            &cfg,
        );
        assert_eq!(only(&g).verdict, Some(Verdict::Regressed));
    }

    #[test]
    fn an_interval_across_the_floor_is_inconclusive() {
        // +6% with trials so noisy (20% CoV) that the interval spans the 5% floor.
        let noisy = |seed, med| metric("t", trials(seed, 15, med, 0.2), Some(MetricKind::PerTrial));
        let g = judge(
            run(vec![noisy(1, 100.0)], None),
            run(vec![noisy(2, 106.0)], None),
            &[],
            &GateConfig::default(),
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Inconclusive), "{r:?}");
        assert!(r.reason.contains("crosses"), "{}", r.reason);
        assert!(r.interval[0] < 0.05 && r.interval[1] > 0.05, "{r:?}");
        // Two trials give no interval at all.
        let few = |seed, med| metric("t", trials(seed, 2, med, 0.001), Some(MetricKind::PerTrial));
        let g = judge(
            run(vec![few(1, 100.0)], None),
            run(vec![few(2, 150.0)], None),
            &[],
            &GateConfig::default(),
        );
        assert_eq!(only(&g).verdict, Some(Verdict::Inconclusive));
    }

    #[test]
    fn a_per_operation_shift_is_judged_on_its_interval() {
        let op = |seed, med| {
            let mut m = per_op(seed, 4000, med);
            m.bottleneck = Some(Bottleneck::None);
            m
        };
        let g = judge(
            run(vec![op(1, 100.0)], None),
            run(vec![op(2, 130.0)], None),
            &[],
            &GateConfig::default(),
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Regressed), "{r:?}");
        assert!(r.interval[0] > 0.05 && r.interval[1] < 0.6, "{r:?}");
    }

    #[test]
    fn floors_come_from_the_file_the_flag_the_history_or_the_default() {
        // A figure no sentinel component shares (a link's): judged without a history too.
        let t = |seed, med| time(seed, med, Some(Bottleneck::None));
        let (a, b) = (run(vec![t(1, 100.0)], None), run(vec![t(2, 108.0)], None));
        let v = |cfg: &GateConfig, hist: &[RunResults]| {
            let g = judge(a.clone(), b.clone(), hist, cfg);
            let r = only(&g).clone();
            (r.verdict.unwrap(), r.floor, r.floor_source)
        };
        // Default 5%: +8% with a tight interval regressed.
        let (vd, f, src) = v(&GateConfig::default(), &[]);
        assert_eq!((vd, f, src.as_str()), (Verdict::Regressed, 0.05, "default"));
        // --floor 20%: inside, same.
        let flag = GateConfig {
            floor: Some(0.2),
            ..Default::default()
        };
        assert_eq!(v(&flag, &[]).0, Verdict::Same);
        // A file entry for the metric wins over the flag; the longest pattern wins.
        let file =
            FloorsFile::parse("default = 30\n[floor]\n\"fs.*\" = \"20%\"\n\"fs.y.t\" = \"2%\"\n")
                .unwrap();
        let both = GateConfig {
            floor: Some(0.2),
            file: Some(file),
            ..Default::default()
        };
        assert_eq!(v(&both, &[]).1, 0.02);
        // The file's default when nothing names the metric.
        let dflt = GateConfig {
            file: Some(FloorsFile::parse("default = \"30%\"").unwrap()),
            ..Default::default()
        };
        assert_eq!(v(&dflt, &[]).1, 0.3);
        // History that scatters by ~6% (SD of logs) sets a floor near 12%: +8% is then
        // inconclusive (run-to-run noise too) rather than regressed.
        let hist: Vec<RunResults> = [100.0, 94.0, 106.0, 99.0, 108.0, 92.0]
            .iter()
            .enumerate()
            .map(|(i, m)| run(vec![t(10 + i as u64, *m)], None))
            .collect();
        let (vh, fh, srch) = v(&GateConfig::default(), &hist);
        assert!(fh > 0.1 && fh < 0.2, "{fh}");
        assert!(srch.contains("6 earlier runs"), "{srch}");
        assert_ne!(vh, Verdict::Regressed);
        // A quiet history cannot push the floor below 1%.
        let quiet: Vec<RunResults> = [100.0, 100.1, 99.9, 100.0]
            .iter()
            .enumerate()
            .map(|(i, m)| run(vec![t(20 + i as u64, *m)], None))
            .collect();
        assert_eq!(v(&GateConfig::default(), &quiet).1, MIN_FLOOR);
    }

    #[test]
    fn bad_floors_files_and_percentages_are_refused() {
        assert_eq!(parse_percent("5%"), Ok(0.05));
        assert_eq!(parse_percent(" 12.5 "), Ok(0.125));
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("100%").is_err());
        assert!(parse_percent("five").is_err());
        assert!(FloorsFile::parse("default = \"x\"").is_err());
        assert!(FloorsFile::parse("[floor]\n\"a.b\" = 150\n").is_err());
        assert!(FloorsFile::parse("unknown = 1").is_err());
        assert!(FloorsFile::parse("[better]\n\"a.b\" = \"up\"\n").is_err());
        assert!(FloorsFile::parse("[floor]\n\"[\" = 5\n").is_err());
        assert!(FloorsFile::parse("default = ").is_err());
        let e = FloorsFile::parse("default = ").unwrap_err();
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn the_environment_makes_verdicts_inconclusive() {
        let t = |seed, med| time(seed, med, Some(Bottleneck::None));
        // Another machine: nothing can be told apart.
        let mut b = run(vec![t(2, 150.0)], None);
        b.machine.cpu.model = "Other CPU".into();
        let g = judge(run(vec![t(1, 100.0)], None), b, &[], &GateConfig::default());
        assert_eq!(only(&g).verdict, Some(Verdict::Inconclusive));
        assert!(g.environment[0].contains("different machines"), "{g:?}");
        assert_eq!(g.exit_code, EXIT_INCONCLUSIVE);
        // Steal: 0% in A, 20% in B (25% inflation) hides +20%; a clean pair finds it.
        let steal = |f: f64| crate::machine::virt::StealReport {
            wall_seconds: 10.0,
            steal_seconds: 20.0 * f,
            steal_fraction: f,
            cpus: 2,
        };
        let mut a = run(vec![t(1, 100.0)], None);
        let mut b = run(vec![t(2, 120.0)], None);
        a.machine.virtualization.steal_during_run = Some(steal(0.0));
        b.machine.virtualization.steal_during_run = Some(steal(0.2));
        let g = judge(a.clone(), b.clone(), &[], &GateConfig::default());
        assert_eq!(only(&g).verdict, Some(Verdict::Inconclusive), "{g:?}");
        assert!(g.environment[0].contains("steal"), "{g:?}");
        b.machine.virtualization.steal_during_run = Some(steal(0.0));
        let g = judge(a, b, &[], &GateConfig::default());
        assert_eq!(only(&g).verdict, Some(Verdict::Regressed), "{g:?}");
    }

    #[test]
    fn another_c_library_is_listed_and_another_commit_is_not() {
        let t = |seed, med| time(seed, med, Some(Bottleneck::None));
        let mut a = run(vec![t(1, 100.0)], None);
        let mut b = run(vec![t(2, 120.0)], None);
        (a.tool.commit, b.tool.commit) = (Some("aaaa".into()), Some("bbbb".into()));
        let g = judge(a.clone(), b.clone(), &[], &GateConfig::default());
        assert_eq!(only(&g).verdict, Some(Verdict::Regressed), "{g:?}");
        (a.tool.libc, b.tool.libc) = (Some("glibc 2.36".into()), Some("musl".into()));
        assert!(g.environment.iter().all(|e| !e.contains("builds")), "{g:?}");
        let g = judge(a, b, &[], &GateConfig::default());
        assert!(
            g.environment[0].contains("C library glibc 2.36 -> musl")
                && !g.environment[0].contains("commit"),
            "{g:?}"
        );
    }

    #[test]
    fn a_grade_differing_in_what_bears_on_the_metric_is_inconclusive() {
        use crate::results::{Grade, GradeLevel, GradeReason};
        let graded = |b: Option<Bottleneck>, seed, med, code: Option<&str>| {
            let mut r = run(vec![time(seed, med, b)], Some(reading(STILL)));
            let reasons: Vec<GradeReason> = code
                .map(|c| GradeReason {
                    code: c.into(),
                    level: GradeLevel::C,
                    text: "x".into(),
                })
                .into_iter()
                .collect();
            r.experiments[0].grade = Some(Grade {
                level: if reasons.is_empty() {
                    GradeLevel::A
                } else {
                    GradeLevel::C
                },
                reasons,
            });
            r
        };
        let cfg = GateConfig::default();
        let link = Some(Bottleneck::None);
        // A link's figure halved; the second run's core ran slow. The link does not
        // share the core's issue rate: the verdict stands.
        let g = judge(
            graded(link, 1, 100.0, None),
            graded(link, 2, 200.0, Some("issue_rate")),
            &[],
            &cfg,
        );
        assert_eq!(only(&g).verdict, Some(Verdict::Regressed), "{g:?}");
        // Preempted trials bear on any figure: inconclusive.
        let g = judge(
            graded(link, 1, 100.0, None),
            graded(link, 2, 200.0, Some("preempted")),
            &[],
            &cfg,
        );
        let r = only(&g);
        assert_eq!(r.verdict, Some(Verdict::Inconclusive), "{g:?}");
        assert!(r.reason.contains("trust grade A in run A, C"), "{r:?}");
        // A chain-bound figure with the issue rate disturbed: the whole grade counts.
        let hist = quiet_history(Some(Bottleneck::Chain));
        let chain = Some(Bottleneck::Chain);
        let g = judge(
            graded(chain, 1, 100.0, None),
            graded(chain, 2, 200.0, Some("issue_rate")),
            &hist,
            &cfg,
        );
        assert_eq!(only(&g).verdict, Some(Verdict::Inconclusive), "{g:?}");
        let g = judge(
            graded(chain, 1, 100.0, None),
            graded(chain, 2, 200.0, None),
            &hist,
            &cfg,
        );
        assert_eq!(only(&g).verdict, Some(Verdict::Regressed), "{g:?}");
    }

    #[test]
    fn required_metrics_need_a_verdict() {
        let t = |seed, med| time(seed, med, Some(Bottleneck::None));
        let noisy = |seed, med| {
            let mut m = metric("n", trials(seed, 15, med, 0.2), Some(MetricKind::PerTrial));
            m.bottleneck = Some(Bottleneck::None);
            m
        };
        let a = run(vec![t(1, 100.0), noisy(3, 100.0)], None);
        let b = run(vec![t(2, 100.0), noisy(4, 106.0)], None);
        // Without --require: one verdict (same) is enough.
        let g = judge(a.clone(), b.clone(), &[], &GateConfig::default());
        assert_eq!((g.same, g.inconclusive, g.exit_code), (1, 1, 0));
        let req = |p: &str| GateConfig {
            require: vec![p.into()],
            ..Default::default()
        };
        assert_eq!(
            judge(a.clone(), b.clone(), &[], &req("fs.y.t")).exit_code,
            0
        );
        assert_eq!(
            judge(a.clone(), b.clone(), &[], &req("fs.y")).exit_code,
            EXIT_INCONCLUSIVE
        );
        let g = judge(a.clone(), b.clone(), &[], &req("net.*"));
        assert_eq!((g.exit_code, g.unmatched.len()), (EXIT_INCONCLUSIVE, 1));
        // A regression decides, whatever else is open.
        let b = run(vec![t(2, 150.0), noisy(4, 106.0)], None);
        let g = judge(a, b, &[], &req("fs.y"));
        assert_eq!(g.exit_code, EXIT_REGRESSION);
        // Regressions lead the rows.
        assert_eq!(g.rows[0].verdict, Some(Verdict::Regressed));
    }

    #[test]
    fn a_missing_or_failed_metric_is_inconclusive() {
        let t = |seed, med| time(seed, med, Some(Bottleneck::Chain));
        let mut b = run(vec![t(2, 100.0)], None);
        b.experiments[0].status = Status::Invalid;
        let g = judge(run(vec![t(1, 100.0)], None), b, &[], &GateConfig::default());
        assert_eq!(only(&g).verdict, Some(Verdict::Inconclusive));
        assert!(only(&g).reason.contains("invalid"), "{g:?}");
        let b = run(vec![], None);
        let g = judge(run(vec![t(1, 100.0)], None), b, &[], &GateConfig::default());
        assert!(only(&g).reason.contains("missing"), "{g:?}");
    }

    /// A cross-CPU wake-up and a loopback network figure ride this machine's scheduler,
    /// whose state differs from process to process (back-to-back quick runs of one build
    /// moved a cross-CPU round trip +31% and loopback round trips -31 to -43%): without a
    /// history they get no verdict; a remote link's figure, or a history of the host, does.
    #[test]
    fn wake_ups_and_loopback_need_a_history_as_cpu_bound_figures_do() {
        let cfg = GateConfig::default();
        let t = |seed, med| time(seed, med, Some(Bottleneck::None));
        let pair = |exp: &str, peer: bool, hist: &[RunResults]| {
            let mk = |seed, med| {
                let mut r = cpu_run(vec![t(seed, med)], None);
                r.experiments[0].id = exp.into();
                if peer {
                    // A --peer run's figure of the peer; its unprefixed ones are loopback.
                    r.experiments[0].metrics[0].name =
                        format!("remote_{}", r.experiments[0].metrics[0].name);
                    r.config.peer = Some(Some(crate::results::PeerRecord {
                        name: Some("far".into()),
                        spec: Some("far:7777".into()),
                        address: Some(Some("192.0.2.1:7777".into())),
                        ..Default::default()
                    }));
                }
                r
            };
            let hist: Vec<RunResults> = hist
                .iter()
                .cloned()
                .map(|mut h| {
                    h.experiments[0].id = exp.into();
                    h
                })
                .collect();
            let g = judge(mk(1, 100.0), mk(2, 130.0), &hist, &cfg);
            only(&g).clone()
        };
        for (exp, kind) in [
            ("cpu.core-to-core", "a cross-CPU wake-up"),
            ("net.rtt", "a loopback network figure"),
        ] {
            let r = pair(exp, false, &[]);
            assert_eq!(r.verdict, Some(Verdict::Inconclusive), "{r:?}");
            assert!(
                r.reason.contains("would be regressed") && r.reason.contains(kind),
                "{}",
                r.reason
            );
            let r = pair(exp, false, &quiet_history(Some(Bottleneck::None)));
            assert_eq!(r.verdict, Some(Verdict::Regressed), "{r:?}");
        }
        // Against a remote peer the link is the bottleneck and the repetitions show it.
        let r = pair("net.rtt", true, &[]);
        assert_eq!(r.verdict, Some(Verdict::Regressed), "{r:?}");
        // A disk figure likewise.
        let r = pair("fs.read", false, &[]);
        assert_eq!(r.verdict, Some(Verdict::Regressed), "{r:?}");
    }
}
