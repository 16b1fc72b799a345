//! The results document: one versioned shape for `results.json` and `run --json`.
//! Units are canonical: times in ns, sizes in bytes, bandwidths in bytes/s, rates in 1/s.
//!
//! This layer is the document's one home: the model (here), reading any known schema
//! version back (`load`) and writing a new results folder (`save`). It sits on `machine`,
//! `stats` and `units` only, so everything after measuring (report, history, compare)
//! reads documents through it without reaching into the code that measures.

pub mod load;
mod record;
pub(crate) mod save;

pub(crate) use record::{PeerMachine, PeerRecord, RecordedOptions, RunRecord, Statistics};

use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub(crate) const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResults {
    pub schema_version: u32,
    pub tool: Tool,
    pub started_at: String,
    pub duration_s: f64,
    /// What the run was asked to do and the rules it was measured by.
    pub config: RunRecord,
    pub machine: crate::machine::Machine,
    /// Warnings about the conditions of the run (busy machine, governor, VM, ...).
    #[serde(default)]
    pub warnings: Vec<String>,
    pub experiments: Vec<ExperimentResult>,
    /// Findings that span experiments.
    #[serde(default)]
    pub findings: Vec<Finding>,
}

/// What measured: osmeter's version and, since documents name their build, the commit it
/// was built from, its target triple and the C library it ran on. Documents written
/// before then lack the three (None), and say nothing about their build.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
    /// The git commit of the source ("unknown" when built outside a git checkout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The target triple the binary was built for (e.g. x86_64-unknown-linux-gnu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The C library it ran on, asked at run time: "glibc 2.36", "musl", "libSystem".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libc: Option<String>,
}

impl Tool {
    /// This binary, running on the C library `libc`.
    pub(crate) fn this_build(libc: String) -> Tool {
        Tool {
            name: "osmeter".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            commit: Some(env!("OSMETER_COMMIT").into()),
            target: Some(env!("OSMETER_TARGET").into()),
            libc: Some(libc),
        }
    }

    /// "osmeter 0.1.0, commit 1a2b3c, target x86_64-unknown-linux-gnu, glibc 2.36"; None
    /// for a document that does not name its build.
    pub fn build_line(&self) -> Option<String> {
        if self.commit.is_none() && self.target.is_none() && self.libc.is_none() {
            return None;
        }
        let unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
        Some(format!(
            "{} {}, commit {}, target {}, {}",
            self.name,
            self.version,
            unknown(&self.commit),
            unknown(&self.target),
            self.libc
                .clone()
                .unwrap_or_else(|| "C library unknown".into())
        ))
    }

    /// What differs between this build and `other`'s, as (fact, "fact a -> b") pairs with
    /// fact one of "version", "commit", "target", "C library"; a fact one side does not
    /// record is not compared.
    pub fn build_differences(&self, other: &Tool) -> Vec<(&'static str, String)> {
        let version = (Some(&self.version), Some(&other.version));
        [
            ("version", version),
            ("commit", (self.commit.as_ref(), other.commit.as_ref())),
            ("target", (self.target.as_ref(), other.target.as_ref())),
            ("C library", (self.libc.as_ref(), other.libc.as_ref())),
        ]
        .into_iter()
        .filter_map(|(what, ab)| match ab {
            (Some(a), Some(b)) if a != b => Some((what, format!("{what} {a} -> {b}"))),
            _ => None,
        })
        .collect()
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Measured, but a premise could not be checked here (e.g. uncached reads on a file
    /// system with no device counter): between ok and invalid.
    Unverified,
    Skipped,
    Invalid,
    Failed,
}

impl Status {
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unverified => "unverified",
            Status::Skipped => "skipped",
            Status::Invalid => "invalid",
            Status::Failed => "failed",
        }
    }

    /// Whether the figures stand to be shown and compared: ok, or measured with a
    /// premise that could not be checked (shown as unverified).
    pub(crate) fn measured(&self) -> bool {
        matches!(self, Status::Ok | Status::Unverified)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub id: String,
    pub area: String,
    pub title: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How the numbers were obtained, in brief.
    #[serde(default)]
    pub method: String,
    pub duration_s: f64,
    #[serde(default)]
    pub metrics: Vec<Metric>,
    #[serde(default)]
    pub series: Vec<Series>,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Harness notes (budget reached, calibration bound hit, ...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The environment sentinel measured just before and just after the experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<BeforeAfter>,
    /// How far the figures can be trusted, with the host conditions behind it
    /// (`grade::assess`). Absent in older results and for skipped or failed experiments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grade: Option<Grade>,
}

/// A trust grade: A (nothing known to distort the figures), B (a condition that can
/// distort them, not seen to during the experiment), C (a condition seen during the
/// experiment that distorts them). The rules are in docs/METHODOLOGY.md, "Trust grades
/// and host conditions"; `compare` reads `level`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    pub level: GradeLevel,
    /// Every condition found, worst first; empty for A.
    #[serde(default)]
    pub reasons: Vec<GradeReason>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum GradeLevel {
    A,
    B,
    C,
}

impl GradeLevel {
    pub fn as_str(&self) -> &'static str {
        match self {
            GradeLevel::A => "A",
            GradeLevel::B => "B",
            GradeLevel::C => "C",
        }
    }
}

/// One condition behind a grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeReason {
    /// A stable name for tools: `vm`, `steal`, `issue_rate`, `frequency`, `throttle`,
    /// `busy`, `smt_sibling_busy`, `governor`, `boost`, `cgroup_cpu`, `cgroup_memory`,
    /// `cgroup_io`, `clock_source`, `placement`, `efficiency_core`.
    pub code: String,
    /// The level this condition alone gives.
    pub level: GradeLevel,
    pub text: String,
}

impl ExperimentResult {
    /// An ok result of experiment `id` (its area the id's first part) with nothing in it
    /// yet: what a run starts from, and what tests fill in.
    pub fn new(id: &str, title: &str, method: &str) -> ExperimentResult {
        ExperimentResult {
            id: id.into(),
            area: id.split('.').next().unwrap_or("").into(),
            title: title.into(),
            status: Status::Ok,
            reason: None,
            method: method.into(),
            duration_s: 0.0,
            metrics: vec![],
            series: vec![],
            checks: vec![],
            findings: vec![],
            notes: vec![],
            sentinel: None,
            grade: None,
        }
    }

    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub summary: Summary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
    /// The median in cycles, saying which cycles: core (effective clock) and counter ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<Cycles>,
    /// Iterations per trial, where the harness calibrated them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Raw values (in `unit`) behind the summary: one per trial, or for per-operation
    /// distributions every timed operation, in the order taken (not subsampled).
    #[serde(default)]
    pub raw: Vec<f64>,
    /// What one raw value is, which decides the comparison test. Absent in files written
    /// before it existed; compare then uses the conservative per-trial rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<MetricKind>,
    /// With `run --repeat N`: the median of each repetition, in order (raw and summary
    /// pool all repetitions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
    /// The environment-sentinel component that shares this figure's bottleneck: compare
    /// discounts a difference by that component's move only. Absent in files written
    /// before it existed; compare then uses the largest move of any (cpu, mem) or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<Bottleneck>,
}

/// Which sentinel kernel is slowed by what slows a figure (see sentinel.rs): a lower core
/// clock slows a dependent chain, a busy SMT sibling the issue rate, a contended L1 or
/// load port the chase, a contended memory pipe the copy. Device and network figures
/// share none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// `chain_ns`: the core's clock (system calls, switches, creation, timer reads).
    Chain,
    /// `issue_ns`: the front end's issue rate (loops, calls).
    Issue,
    /// `chase_ns`: dependent loads (memory latency).
    Chase,
    /// `copy_ns_per_byte`: streaming loads and stores (bandwidths, cached file reads).
    Copy,
    /// No sentinel component: a disk, a link, a hypervisor's wake-up.
    None,
}

impl Bottleneck {
    pub const ALL: [Bottleneck; 4] = [
        Bottleneck::Chain,
        Bottleneck::Issue,
        Bottleneck::Chase,
        Bottleneck::Copy,
    ];

    /// The words reports use for it.
    pub fn describe(&self) -> &'static str {
        match self {
            Bottleneck::Chain => "dependent chain",
            Bottleneck::Issue => "issue rate",
            Bottleneck::Chase => "L1 chase",
            Bottleneck::Copy => "copy",
            Bottleneck::None => "none",
        }
    }
}

/// What the raw values of a metric are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum MetricKind {
    /// Each raw value is one trial: a mean over many operations.
    PerTrial,
    /// Each raw value is one operation (latencies timed one by one).
    PerOperation,
    /// Computed from other metrics of the same experiment; their uncertainty is added.
    Derived { inputs: Vec<DerivedInput> },
}

/// How a derived metric depends on another metric's median.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivedInput {
    pub metric: String,
    /// `sub`: value = own - coefficient x input median (absolute uncertainty adds);
    /// `div`: value = own / input median (relative uncertainty adds).
    pub op: String,
    #[serde(default = "one")]
    pub coefficient: f64,
}

fn one() -> f64 {
    1.0
}

#[cfg(test)]
impl Metric {
    /// A metric in ns of trials `raw` (percentiles too for a per-operation one), with
    /// nothing else set: what unit tests build their figures from.
    pub(crate) fn test_ns(name: &str, raw: Vec<f64>, kind: Option<MetricKind>) -> Metric {
        let summary = if kind == Some(MetricKind::PerOperation) {
            crate::stats::Summary::with_percentiles(&raw).unwrap()
        } else {
            crate::stats::Summary::of(&raw).unwrap()
        };
        Metric {
            name: name.into(),
            unit: "ns".into(),
            description: String::new(),
            summary,
            prediction: None,
            cycles: None,
            iterations: None,
            raw,
            kind,
            runs: vec![],
            bottleneck: None,
        }
    }
}

impl Metric {
    /// Declares the metric as derived from other metrics of the experiment.
    pub(crate) fn derived(&mut self, inputs: &[(&str, &str, f64)]) -> &mut Self {
        self.kind = Some(MetricKind::Derived {
            inputs: inputs
                .iter()
                .map(|(m, op, c)| DerivedInput {
                    metric: m.to_string(),
                    op: op.to_string(),
                    coefficient: *c,
                })
                .collect(),
        });
        self
    }

    /// The 95% interval of the median; for a derived metric widened by each input's
    /// interval (`input` finds an input metric by name), so a difference carries the
    /// uncertainty of what was subtracted: `sub` adds coefficient x the input's half-width,
    /// `div` adds the input's relative half-width.
    pub(crate) fn interval<'a>(&self, input: impl Fn(&str) -> Option<&'a Metric>) -> [f64; 2] {
        let s = &self.summary;
        let mut ci = s.ci95;
        if let Some(MetricKind::Derived { inputs }) = &self.kind {
            for i in inputs {
                let Some(inp) = input(&i.metric) else {
                    continue;
                };
                let half = (inp.summary.ci95[1] - inp.summary.ci95[0]).abs() / 2.0;
                let extra = match i.op.as_str() {
                    "div" if inp.summary.median != 0.0 => {
                        s.median.abs() * half / inp.summary.median.abs()
                    }
                    _ => i.coefficient.abs() * half,
                };
                if extra.is_finite() {
                    ci = [ci[0] - extra, ci[1] + extra];
                }
            }
        }
        ci
    }

    /// Declares the raw values as single operations (a distribution).
    pub(crate) fn per_operation(&mut self) -> &mut Self {
        self.kind = Some(MetricKind::PerOperation);
        self
    }

    /// Declares the sentinel component that shares this figure's bottleneck, where it is
    /// not the experiment's (`Spec::bottleneck`).
    pub(crate) fn shares(&mut self, b: Bottleneck) -> &mut Self {
        self.bottleneck = Some(b);
        self
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cycles {
    /// Median in core cycles at the measured effective core clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<f64>,
    /// Median in ticks of the time-stamp counter (fixed rate, not core cycles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<f64>,
}

/// Which side of a bound prediction the measurement agrees on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The model leaves costs out: the measurement is at least the prediction.
    Lower,
    /// The prediction caps the measurement (a peak, a size the search may stop short of).
    Upper,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prediction {
    pub value: f64,
    pub formula: String,
    pub inputs: BTreeMap<String, PredictionInput>,
    /// Set when the prediction is a bound, not a point: the report then flags only a
    /// measurement on the wrong side of it (absent in documents written before bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
    /// Set when the "prediction" is the same quantity measured another way (an earlier
    /// experiment's figure, the run's own premise): it can confirm the measurement but not
    /// test a model, so the report shows it as a consistency check and the prediction
    /// count leaves it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub consistency: bool,
    /// Set when the metric gets no prediction, with the reason (e.g. the part is not in the
    /// table); the runner turns it into a note and attaches no prediction.
    #[serde(skip)]
    pub withheld: Option<String>,
}

/// What a prediction input is: never a constant without an origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    /// A fact of this machine (clock, cache size, page size, link speed, device class).
    Machine,
    /// A figure measured earlier in this run.
    Measured,
    /// An entry of the parts table (`experiments::parts`), with its key and reference.
    Table,
    /// A count the method itself fixes (two switches per round trip, P readers), or one
    /// traced from it (strace/perf counts, with the C library they hold for).
    Method,
    /// Another prediction of the same experiment, itself built from the kinds above.
    Prediction,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PredictionInput {
    pub value: f64,
    pub unit: String,
    /// Where the input comes from: a machine fact, an earlier measured metric, a table entry.
    pub source: String,
    /// The input's kind (absent in documents written before kinds existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<InputKind>,
    /// For `table` inputs: the table key that matched (e.g. "x86 AuthenticAMD family 25 model 1").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// For `table` inputs: the published source of the figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

impl Prediction {
    pub(crate) fn new(value: f64, formula: impl Into<String>) -> Self {
        Prediction {
            value,
            formula: formula.into(),
            inputs: BTreeMap::new(),
            bound: None,
            consistency: false,
            withheld: None,
        }
    }

    /// The same quantity measured another way: a consistency check, not a prediction.
    pub(crate) fn consistency(mut self) -> Self {
        self.consistency = true;
        self
    }

    /// The model leaves costs out: the measurement should be at least this.
    pub(crate) fn lower_bound(mut self) -> Self {
        self.bound = Some(Bound::Lower);
        self
    }

    /// The prediction caps the measurement.
    pub(crate) fn upper_bound(mut self) -> Self {
        self.bound = Some(Bound::Upper);
        self
    }

    /// No prediction for this metric, and why (the runner records the reason as a note).
    pub(crate) fn withheld(reason: impl Into<String>) -> Self {
        Prediction {
            value: f64::NAN,
            formula: String::new(),
            inputs: BTreeMap::new(),
            bound: None,
            consistency: false,
            withheld: Some(reason.into()),
        }
    }

    /// An input of any kind, with the table key and reference for `table` inputs.
    pub(crate) fn typed(
        mut self,
        name: &str,
        value: f64,
        unit: &str,
        source: String,
        kind: InputKind,
        cited: Option<(String, String)>,
    ) -> Self {
        let (key, reference) = match cited {
            Some((k, r)) => (Some(k), Some(r)),
            None => (None, None),
        };
        self.inputs.insert(
            name.to_string(),
            PredictionInput {
                value,
                unit: unit.to_string(),
                source,
                kind: Some(kind),
                key,
                reference,
            },
        );
        self
    }

    /// An input that is a fact of this machine.
    pub(crate) fn machine(
        self,
        name: &str,
        value: f64,
        unit: &str,
        source: impl Into<String>,
    ) -> Self {
        self.typed(name, value, unit, source.into(), InputKind::Machine, None)
    }

    /// A count the method fixes or traces (say which C library a traced count holds for).
    pub(crate) fn method(
        self,
        name: &str,
        value: f64,
        unit: &str,
        source: impl Into<String>,
    ) -> Self {
        self.typed(name, value, unit, source.into(), InputKind::Method, None)
    }

    /// Another prediction of this experiment.
    pub(crate) fn prediction(
        self,
        name: &str,
        value: f64,
        unit: &str,
        source: impl Into<String>,
    ) -> Self {
        self.typed(
            name,
            value,
            unit,
            source.into(),
            InputKind::Prediction,
            None,
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub x_unit: String,
    pub y_unit: String,
    pub points: Vec<[f64; 2]>,
}

impl Series {
    /// Labels a repetition's series: "random (run 1 of 2)".
    pub(crate) fn label_run(&mut self, k: usize, of: usize) {
        self.name = format!("{} (run {k} of {of})", self.name);
    }

    /// The name the experiment gave, without the label `label_run` added.
    pub fn base_name(&self) -> &str {
        self.name.split(" (run ").next().unwrap_or(&self.name)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
    /// A failed premise makes the experiment invalid; a failed sanity check is reported only.
    #[serde(default = "default_true")]
    pub premise: bool,
    /// A premise that could not be checked here (no counter, no way to ask): not passed,
    /// not failed; it makes the experiment `unverified` rather than invalid.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unverified: bool,
}

fn default_true() -> bool {
    true
}

impl Check {
    pub fn premise(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            passed,
            detail: detail.into(),
            premise: true,
            unverified: false,
        }
    }
    /// A premise this system cannot check (`detail` says why): the experiment's figures
    /// are reported with status `unverified`, never `ok`.
    pub fn unverified(name: &str, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            passed: false,
            detail: detail.into(),
            premise: true,
            unverified: true,
        }
    }
    pub fn sanity(name: &str, passed: bool, detail: impl Into<String>) -> Self {
        Check {
            name: name.into(),
            passed,
            detail: detail.into(),
            premise: false,
            unverified: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    pub text: String,
    pub from: Vec<String>,
    /// How surprising the finding is when no two-metric ratio says it (e.g. |ln| of a
    /// detected cache size over the sysfs one); see `findings::score`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salience: Option<f64>,
}

impl Finding {
    pub(crate) fn new(text: impl Into<String>, from: &[&str]) -> Self {
        Finding {
            text: text.into(),
            from: from.iter().map(|s| s.to_string()).collect(),
            salience: None,
        }
    }
}

/// One environment-sentinel measurement (`sentinel::measure`): the fastest of its
/// repetitions of each kernel.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Reading {
    /// ns per dependent register multiply-add (the core's clock).
    pub chain_ns: f64,
    /// ns per iteration of the harness's empty register loop (`opaque::repeat`: the
    /// front end's rate, which a busy SMT sibling on the host takes a share of; the most
    /// contention-sensitive code osmeter measures). Absent (0) in older results, and
    /// left out when writing such a reading back, so old documents round-trip unchanged.
    #[serde(default, skip_serializing_if = "not_measured")]
    pub issue_ns: f64,
    /// ns per load of an L1-resident pointer chase.
    pub chase_ns: f64,
    /// ns per byte of a small memcpy (L1 to L1).
    pub copy_ns_per_byte: f64,
    /// Spread of the repetitions, (median - min) / min, largest of the three kernels:
    /// large when the sentinel itself was disturbed.
    pub spread: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct BeforeAfter {
    pub before: Reading,
    pub after: Reading,
}

fn not_measured(v: &f64) -> bool {
    *v == 0.0
}

impl Reading {
    /// One kernel's reading (0 when not measured, as `issue_ns` in older results).
    pub(crate) fn component(&self, b: Bottleneck) -> f64 {
        match b {
            Bottleneck::Chain => self.chain_ns,
            Bottleneck::Issue => self.issue_ns,
            Bottleneck::Chase => self.chase_ns,
            Bottleneck::Copy => self.copy_ns_per_byte,
            Bottleneck::None => 0.0,
        }
    }

    fn values(&self) -> [f64; 4] {
        [
            self.chain_ns,
            self.issue_ns,
            self.chase_ns,
            self.copy_ns_per_byte,
        ]
    }

    /// Largest relative change of any kernel from `self` to `other` (signed: positive =
    /// `other` slower).
    pub(crate) fn change_to(&self, other: &Reading) -> f64 {
        self.values()
            .iter()
            .zip(other.values())
            .map(|(a, b)| {
                if *a > 0.0 && b > 0.0 {
                    b / a - 1.0
                } else {
                    0.0
                }
            })
            .fold(0.0, |m: f64, d| if d.abs() > m.abs() { d } else { m })
    }

    /// Relative change of one kernel from `self` to `other` (positive = `other` slower);
    /// 0 when either did not measure it.
    pub(crate) fn change_in(&self, other: &Reading, b: Bottleneck) -> f64 {
        let (x, y) = (self.component(b), other.component(b));
        if x > 0.0 && y > 0.0 {
            y / x - 1.0
        } else {
            0.0
        }
    }

    /// The geometric mean of two readings, kernel by kernel.
    pub(crate) fn mid(&self, other: &Reading) -> Reading {
        let g = |a: f64, b: f64| (a * b).sqrt();
        Reading {
            chain_ns: g(self.chain_ns, other.chain_ns),
            issue_ns: g(self.issue_ns, other.issue_ns),
            chase_ns: g(self.chase_ns, other.chase_ns),
            copy_ns_per_byte: g(self.copy_ns_per_byte, other.copy_ns_per_byte),
            spread: self.spread.max(other.spread),
        }
    }
}

impl BeforeAfter {
    pub(crate) fn mid(&self) -> Reading {
        self.before.mid(&self.after)
    }
}

/// A metric of an experiment, named where a finding reads it, so that a test can check
/// that the experiment emits it: a renamed metric fails that test instead of silently
/// dropping the finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricRef {
    pub experiment: &'static str,
    pub metric: &'static str,
}

impl MetricRef {
    pub(crate) const fn new(experiment: &'static str, metric: &'static str) -> MetricRef {
        MetricRef { experiment, metric }
    }
    /// `experiment/metric`, as findings' `from` lists name it.
    pub fn path(&self) -> String {
        format!("{}/{}", self.experiment, self.metric)
    }
}

impl RunResults {
    /// What the machine is, for telling a change of the machine from a change of its
    /// figures: CPU model, logical CPUs, memory (GiB). The kernel, its settings and the
    /// software are left out: they are what history and the gate are asked about.
    pub fn machine_fingerprint(&self) -> String {
        let m = &self.machine;
        format!(
            "{} | {} CPUs | {} GiB",
            if m.cpu.model.is_empty() {
                "?"
            } else {
                &m.cpu.model
            },
            m.cpu.logical_cpus,
            (m.memory.total_bytes as f64 / (1u64 << 30) as f64).round()
        )
    }

    /// The host's name: the one given with `run --host-name` (a fleet's inventory name),
    /// else the machine's hostname.
    pub fn host_name(&self) -> &str {
        self.config
            .host_name()
            .or(Some(self.machine.hostname.as_str()).filter(|h| !h.is_empty()))
            .unwrap_or("?")
    }

    /// The host the network experiments measured against (`config.peer.name`), if remote.
    pub fn peer_name(&self) -> Option<&str> {
        self.config.peer()?.name.as_deref()
    }

    /// The address the `--peer` host resolved to, when it did.
    pub fn peer_address(&self) -> Option<&str> {
        self.config.peer()?.address.as_ref()?.as_deref()
    }

    pub fn experiment(&self, id: &str) -> Option<&ExperimentResult> {
        self.experiments.iter().find(|e| e.id == id)
    }
}

/// RFC 3339 UTC timestamp of a SystemTime, without a date library.
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        let t = |s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(rfc3339(t(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(t(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(t(1_798_761_600 + 3661)), "2027-01-01T01:01:01Z");
    }

    #[test]
    fn change_is_the_largest_kernel_move() {
        let a = Reading {
            chain_ns: 1.0,
            issue_ns: 0.5,
            chase_ns: 4.0,
            copy_ns_per_byte: 0.1,
            spread: 0.0,
        };
        let mut b = a;
        b.chase_ns = 4.4;
        b.copy_ns_per_byte = 0.095;
        assert!((a.change_to(&b) - 0.1).abs() < 1e-9);
        assert!((b.change_to(&a) + 0.0909).abs() < 1e-3);
        assert_eq!(a.change_to(&a), 0.0);
        // A busy SMT sibling: the chain unchanged, the issue rate halved.
        let mut c = a;
        c.issue_ns = 1.0;
        assert!((a.change_to(&c) - 1.0).abs() < 1e-9);
        // Older readings without the issue kernel do not count as a move.
        let mut old = a;
        old.issue_ns = 0.0;
        assert_eq!(old.change_to(&c), 0.0);
    }
}
