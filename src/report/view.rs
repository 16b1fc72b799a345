//! What the Markdown and HTML reports say, computed once from the results document so
//! the two formats cannot drift apart. Values here are already formatted for people.

use crate::clock::ClockInfo;
use crate::machine::{Cache, Cpu, Disk, Machine, Memory, Nic, Topology, Virtualization};
use crate::results::{
    Bound, ExperimentResult, GradeReason, Metric, Prediction, RunResults, Status,
};
use crate::units::{fmt_bytes, fmt_value};
use serde_json::Value;

/// Ratio beyond which a prediction is flagged as off.
pub(crate) const FLAG_RATIO: f64 = 2.0;

/// What the trust grades mean, where a report shows them.
pub(crate) const GRADE_LEGEND: &str = "A: nothing known distorts the figures; B: a condition \
    that can distort them, not seen to during the experiment; C: a condition seen during the \
    experiment (docs/METHODOLOGY.md, \"Trust grades and host conditions\")";

/// An experiment's id with its grade, where it has one: "cpu.loop (grade C)".
pub(crate) fn id_with_grade(e: &ExperimentResult, id: String) -> String {
    match &e.grade {
        Some(g) => format!("{id} (grade {})", g.level.as_str()),
        None => id,
    }
}

/// An experiment and the reasons of its grade that not every experiment shares.
pub(crate) type OwnReasons<'a> = (&'a ExperimentResult, Vec<&'a GradeReason>);

/// The reasons that every graded experiment of the run shares, and each experiment's
/// grade with the reasons of its own (so a report says a VM once, not per experiment).
pub(crate) fn grades(r: &RunResults) -> Option<(Vec<&GradeReason>, Vec<OwnReasons<'_>>)> {
    let graded: Vec<&ExperimentResult> =
        r.experiments.iter().filter(|e| e.grade.is_some()).collect();
    let first = graded.first()?.grade.as_ref()?;
    let common: Vec<&GradeReason> = first
        .reasons
        .iter()
        .filter(|x| {
            graded
                .iter()
                .all(|e| e.grade.as_ref().is_some_and(|g| g.reasons.contains(x)))
        })
        .collect();
    let own = graded
        .iter()
        .map(|e| {
            let g = e.grade.as_ref().expect("graded");
            (
                *e,
                g.reasons.iter().filter(|x| !common.contains(x)).collect(),
            )
        })
        .collect();
    Some((common, own))
}

/// One row of the predicted-vs-measured table.
pub struct MetricRow {
    pub metric: String,
    pub description: String,
    pub predicted: String,
    pub formula: String,
    /// "name = value unit (source)" per input.
    pub inputs: Vec<String>,
    pub measured: String,
    pub ci: String,
    pub n: usize,
    pub cov: String,
    pub outliers: usize,
    pub cycles: String,
    pub ratio: String,
    /// Measured/predicted beyond 2x either way.
    pub flagged: bool,
    pub percentiles: String,
}

/// Measured/predicted, and whether it is flagged: a point prediction beyond `FLAG_RATIO`
/// either way; a bound only when the measurement's whole 95% interval lies on its wrong
/// side (a model that leaves costs out makes no claim of how many it leaves out).
pub(crate) fn judged_ratio(m: &Metric) -> Option<(f64, bool)> {
    let s = &m.summary;
    let p = m.prediction.as_ref()?;
    let v = p.value;
    if !(v.is_finite() && v != 0.0 && s.median.is_finite()) {
        return None;
    }
    let r = s.median / v;
    let flagged = match p.bound {
        None => !(1.0 / FLAG_RATIO..=FLAG_RATIO).contains(&r),
        Some(Bound::Lower) => s.ci95[1] < v,
        Some(Bound::Upper) => s.ci95[0] > v,
    };
    Some((r, flagged))
}

/// "≥ " or "≤ " before a bound prediction's value: the side the measurement agrees on;
/// "≈ " before a consistency check (the same quantity measured another way).
pub(crate) fn bound_mark(p: &Prediction) -> &'static str {
    match p.bound {
        None if p.consistency => "≈ ",
        None => "",
        Some(Bound::Lower) => "≥ ",
        Some(Bound::Upper) => "≤ ",
    }
}

/// Whether any prediction of the run is a bound or a consistency check: the legends then
/// say how they are read.
pub(crate) fn has_bounds(r: &RunResults) -> bool {
    r.experiments.iter().flat_map(|e| &e.metrics).any(|m| {
        m.prediction
            .as_ref()
            .is_some_and(|p| p.bound.is_some() || p.consistency)
    })
}

/// What '!' marks, for the legends; `bounds` from `has_bounds`.
pub(crate) fn flag_legend(bounds: bool) -> &'static str {
    if bounds {
        "beyond 2x either way; for a bound (≥, ≤: the model leaves costs out, or caps the \
         figure) only when the 95% interval lies wholly on its wrong side; ≈ marks a \
         consistency check, the same quantity measured another way, not a prediction"
    } else {
        "beyond 2x either way"
    }
}

pub fn metric_row(m: &Metric) -> MetricRow {
    let s = &m.summary;
    let pred = m.prediction.as_ref();
    let out_of_range = out_of_range(m);
    let judged = judged_ratio(m).filter(|_| out_of_range.is_none());
    let ratio = judged.map(|j| j.0);
    let row = MetricRow {
        metric: m.name.clone(),
        description: m.description.clone(),
        predicted: pred
            .map(|p| format!("{}{}", bound_mark(p), fmt_value(p.value, &m.unit)))
            .unwrap_or_else(|| "-".into()),
        formula: pred.map(|p| p.formula.clone()).unwrap_or_default(),
        inputs: pred
            .map(|p| {
                p.inputs
                    .iter()
                    .map(|(k, v)| {
                        let cited = v
                            .reference
                            .as_deref()
                            .map(|r| format!("; reference: {r}"))
                            .unwrap_or_default();
                        format!(
                            "{k} = {} ({}{cited})",
                            fmt_value(v.value, &v.unit),
                            v.source
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        measured: fmt_value(s.median, &m.unit),
        ci: format!(
            "{} .. {}",
            fmt_value(s.ci95[0], &m.unit),
            fmt_value(s.ci95[1], &m.unit)
        ),
        n: s.n,
        cov: if s.cov.is_finite() {
            format!("{:.1}%", s.cov * 100.0)
        } else {
            "-".into()
        },
        outliers: s.outliers,
        cycles: m
            .cycles
            .as_ref()
            .and_then(|c| c.core)
            .map(|c| format!("{c:.1}"))
            .unwrap_or_default(),
        ratio: ratio
            .map(|r| format!("{r:.2}"))
            .unwrap_or_else(|| "-".into()),
        flagged: judged.is_some_and(|j| j.1),
        percentiles: s
            .percentiles
            .as_ref()
            .map(|p| {
                format!(
                    "p50 {}, p90 {}, p99 {}",
                    fmt_value(p.p50, &m.unit),
                    fmt_value(p.p90, &m.unit),
                    fmt_value(p.p99, &m.unit)
                )
            })
            .unwrap_or_default(),
    };
    // A figure below its physical range is not printed as a result; the note says why.
    match out_of_range {
        Some(_) => MetricRow {
            measured: OUT_OF_RANGE.into(),
            ci: "-".into(),
            ..row
        },
        None => row,
    }
}

/// What a table prints in place of a figure outside its physical range.
pub(crate) const OUT_OF_RANGE: &str = "out of range (see note)";

/// What a figure in `unit` is, where it cannot be negative: every unit osmeter records a
/// metric in is a duration, a rate, a size or a count (docs/METHODOLOGY.md, "Figures
/// outside their physical range"); None for a unit not declared here.
pub(crate) fn non_negative(unit: &str) -> Option<&'static str> {
    match unit {
        "ns" | "us" | "µs" | "ms" | "s" | "cycles" => Some("a duration"),
        "ns/B" | "ns/byte" => Some("a time per byte"),
        "bytes/s" | "bits/s" | "1/s" => Some("a rate"),
        "bytes" => Some("a size"),
        "lines" | "processes" | "pages" | "calls" => Some("a count"),
        _ => None,
    }
}

/// Why `m`'s median is no result: below zero in a unit that cannot be negative (a
/// least-squares slope or a difference of two figures can come out so, from noise around
/// a cost too small to resolve).
pub(crate) fn out_of_range(m: &Metric) -> Option<String> {
    let s = &m.summary;
    let what = non_negative(&m.unit)?;
    if !(s.median.is_finite() && s.median < 0.0) {
        return None;
    }
    Some(format!(
        "the median {} (95% interval {} .. {}) is below zero, and {what} cannot be: \
         it is noise around a figure too small for this measurement to resolve, not a result",
        fmt_value(s.median, &m.unit),
        fmt_value(s.ci95[0], &m.unit),
        fmt_value(s.ci95[1], &m.unit)
    ))
}

/// Runs of consecutive metrics of one experiment whose predictions share one formula:
/// for each metric, the name of the first metric of its run when it is not the first,
/// and for the first of a run of several, the names of all of it.
pub(crate) fn formula_groups(e: &ExperimentResult) -> Vec<FormulaGroup> {
    fn formula(m: &Metric) -> Option<&str> {
        m.prediction.as_ref().map(|p| p.formula.as_str())
    }
    let mut out: Vec<FormulaGroup> = Vec::with_capacity(e.metrics.len());
    let mut start = 0;
    for (i, m) in e.metrics.iter().enumerate() {
        let f = formula(m).filter(|f| !f.is_empty());
        if i > 0 && f.is_some() && f == formula(&e.metrics[i - 1]) {
            out.push(FormulaGroup::SameAs(e.metrics[start].name.clone()));
            if let FormulaGroup::First(names) = &mut out[start] {
                names.push(m.name.clone());
            }
        } else {
            start = i;
            out.push(FormulaGroup::First(vec![m.name.clone()]));
        }
    }
    out
}

/// A metric's place in `formula_groups`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FormulaGroup {
    /// The first metric of a run: the names of the run (one when the formula is its own).
    First(Vec<String>),
    /// Not the first: the first metric's name.
    SameAs(String),
}

impl FormulaGroup {
    /// The first metric's name, for a metric that is not the first of its run.
    pub(crate) fn same_as(&self) -> Option<&str> {
        match self {
            FormulaGroup::SameAs(f) => Some(f),
            FormulaGroup::First(_) => None,
        }
    }

    /// The formula cell: the formula itself for a metric of its own, the formula and the
    /// rows it serves for the first of several, a pointer back for the rest.
    pub(crate) fn cell(&self, formula: &str) -> String {
        match self {
            FormulaGroup::First(names) if names.len() > 1 => format!(
                "{formula} (one formula for the {} rows {} .. {})",
                names.len(),
                names[0],
                names[names.len() - 1]
            ),
            FormulaGroup::First(_) => formula.to_string(),
            FormulaGroup::SameAs(first) => format!("as for {first}"),
        }
    }
}

/// Which side of the course's split a prediction input is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Hardware,
    Software,
}

/// Experiments that time the hardware with no kernel call in the timed path: a figure one
/// of them measured is a hardware input of a later prediction; one measured by any other
/// experiment (the kernel is in its path) is a software input.
pub(crate) const HARDWARE_EXPERIMENTS: &[&str] = &[
    "cpu.timer",
    "cpu.loop",
    "cpu.call",
    "cpu.core-to-core",
    "mem.latency",
    "mem.bandwidth",
    "mem.loaded-latency",
];

/// Units of figures that are costs or what a cost is made of (times, cycles, clocks,
/// sizes, rates); an input in any other unit is a count.
fn is_cost_unit(unit: &str) -> bool {
    matches!(
        unit,
        "ns" | "us"
            | "µs"
            | "ms"
            | "s"
            | "cycles"
            | "Hz"
            | "bytes"
            | "bytes/s"
            | "bits/s"
            | "1/s"
            | "ns/B"
            | "ns/byte"
    )
}

/// How a prediction divides into base hardware and software overhead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Split {
    /// Every input that is a cost is a hardware one: the whole is base hardware.
    Hardware,
    /// Every input that is a cost is a software one: the whole is software overhead.
    Software,
    /// Not divided, and why.
    Unsplit(String),
}

/// The side of input `name` of a prediction of `e`, None for a count (`method`), or why
/// it has none; `depth` bounds the chase through `prediction` inputs.
fn input_side(
    e: &ExperimentResult,
    name: &str,
    i: &crate::results::PredictionInput,
    depth: usize,
) -> Result<Option<Side>, String> {
    use crate::results::InputKind;
    match i.kind {
        None => Err("its inputs carry no kinds (the document predates them)".into()),
        // A count (pages, mappings, cores) scales a cost whatever its origin; it is none.
        Some(_) if !is_cost_unit(&i.unit) => Ok(None),
        Some(InputKind::Table | InputKind::Machine) => Ok(Some(Side::Hardware)),
        Some(InputKind::Method) => Ok(None),
        Some(InputKind::Measured) => {
            // "measured: EXPERIMENT METRIC ...", as predict.rs writes it.
            let exp = i
                .source
                .strip_prefix("measured: ")
                .and_then(|s| s.split_whitespace().next())
                .ok_or_else(|| {
                    format!("its input {name} does not name the experiment it was measured by")
                })?;
            Ok(Some(if HARDWARE_EXPERIMENTS.contains(&exp) {
                Side::Hardware
            } else {
                Side::Software
            }))
        }
        Some(InputKind::Prediction) => {
            let other = e
                .metrics
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.prediction.as_ref())
                .filter(|_| depth < 4)
                .ok_or_else(|| {
                    format!("its input {name} is a prediction not found in the results")
                })?;
            match split_at(e, other, depth + 1) {
                Split::Hardware => Ok(Some(Side::Hardware)),
                Split::Software => Ok(Some(Side::Software)),
                Split::Unsplit(why) => Err(format!("its input {name} is not split: {why}")),
            }
        }
    }
}

/// How `p`, a prediction of `e`, divides (docs/METHODOLOGY.md, "Base hardware and
/// software overhead").
pub(crate) fn split(e: &ExperimentResult, p: &Prediction) -> Split {
    split_at(e, p, 0)
}

fn split_at(e: &ExperimentResult, p: &Prediction, depth: usize) -> Split {
    let (mut hw, mut sw) = (Vec::new(), Vec::new());
    for (name, i) in &p.inputs {
        match input_side(e, name, i, depth) {
            Err(why) => return Split::Unsplit(why),
            Ok(Some(Side::Hardware)) => hw.push(name.as_str()),
            Ok(Some(Side::Software)) => sw.push(name.as_str()),
            Ok(None) => {}
        }
    }
    match (hw.is_empty(), sw.is_empty()) {
        (false, true) => Split::Hardware,
        (true, false) => Split::Software,
        (true, true) => Split::Unsplit("it has no input that is a cost, only counts".into()),
        (false, false) => Split::Unsplit(format!(
            "it combines hardware inputs ({}) with software ones ({}), and results.json \
             records the inputs and the total, not the value of each term",
            hw.join(", "),
            sw.join(", ")
        )),
    }
}

/// One row of the closing table, in the course's columns.
#[derive(Debug, Clone)]
pub struct ClosingRow {
    pub operation: String,
    pub hardware: String,
    pub software: String,
    pub predicted: String,
    /// "mean ± SD" of the samples, or why there is no SD.
    pub mean_sd: String,
    /// "median [low, high]" (the 95% interval), or the out-of-range mark.
    pub median_ci: String,
    /// The row's footnotes (1-based, into `Closing::notes`).
    pub notes: Vec<usize>,
}

/// The closing table and its numbered footnotes.
pub struct Closing {
    pub rows: Vec<ClosingRow>,
    pub notes: Vec<String>,
}

/// A standard deviation as `fmt_value` shows it, or with two significant digits where
/// that would read as zero (a spread of 1.6 ps is not none).
pub(crate) fn fmt_spread(sd: f64, unit: &str) -> String {
    let f = fmt_value(sd, unit);
    let shown = f.split('(').next().unwrap_or("");
    if sd.is_nan() || sd <= 0.0 || shown.chars().any(|c| ('1'..='9').contains(&c)) {
        return f;
    }
    let digits = (1 - sd.log10().floor() as i32).max(0) as usize;
    if digits <= 6 {
        format!("{sd:.digits$} {unit}")
    } else {
        format!("{sd:.1e} {unit}")
    }
}

/// What the split columns say of a side the formula has no input on.
pub(crate) const NO_INPUT: &str = "—";

/// One row per metric with a prediction, in the order of the report.
pub fn closing(r: &RunResults) -> Closing {
    let mut notes: Vec<String> = Vec::new();
    let mut note = |t: String| -> usize {
        match notes.iter().position(|n| *n == t) {
            Some(i) => i + 1,
            None => {
                notes.push(t);
                notes.len()
            }
        }
    };
    let mut rows = Vec::new();
    for e in &r.experiments {
        for m in &e.metrics {
            let Some(p) = m.prediction.as_ref().filter(|p| p.value.is_finite()) else {
                continue;
            };
            let s = &m.summary;
            let predicted = format!("{}{}", bound_mark(p), fmt_value(p.value, &m.unit));
            let mut n_id = Vec::new();
            let (hardware, software) = match split(e, p) {
                Split::Hardware => (predicted.clone(), NO_INPUT.to_string()),
                Split::Software => (NO_INPUT.to_string(), predicted.clone()),
                Split::Unsplit(why) => {
                    n_id.push(note(format!("Not split: {why}.")));
                    ("not split".to_string(), "not split".to_string())
                }
            };
            let mean_sd = if !s.mean.is_finite() {
                "-".to_string()
            } else if non_negative(&m.unit).is_some() && s.mean < 0.0 {
                "out of range".to_string()
            } else if s.n < 2 || !s.stddev.is_finite() {
                format!("{} (n = {}: no SD)", fmt_value(s.mean, &m.unit), s.n)
            } else {
                format!(
                    "{} ± {}",
                    fmt_value(s.mean, &m.unit),
                    fmt_spread(s.stddev, &m.unit)
                )
            };
            let median_ci = match out_of_range(m) {
                Some(why) => {
                    n_id.push(note(format!("{} {}: {why}.", e.id, m.name)));
                    OUT_OF_RANGE.to_string()
                }
                None => format!(
                    "{} [{}, {}]",
                    fmt_value(s.median, &m.unit),
                    fmt_value(s.ci95[0], &m.unit),
                    fmt_value(s.ci95[1], &m.unit)
                ),
            };
            let operation = if e.status == Status::Ok {
                format!("{} {}", e.id, m.name)
            } else {
                format!("{} {} ({})", e.id, m.name, e.status.as_str())
            };
            rows.push(ClosingRow {
                operation,
                hardware,
                software,
                predicted,
                mean_sd,
                median_ci,
                notes: n_id,
            });
        }
    }
    Closing { rows, notes }
}

/// What the closing table's columns mean, for both reports.
pub(crate) const CLOSING_LEGEND: &str = "Every metric with a prediction, in the columns of a \
    systems-course report. Base hardware and software overhead: the prediction under the side \
    its inputs are on (table entries, machine facts and figures of experiments that time the \
    hardware with no kernel call are hardware; figures of experiments with the kernel in their \
    path are software; counts fixed by the method are neither); — where the formula has no \
    input of that side; a formula combining both is not split (footnote). Measured: the mean \
    ± sample standard deviation of the recorded samples, then the median with its 95% \
    interval (docs/METHODOLOGY.md, \"Base hardware and software overhead\").";

/// The headline of the report.
pub fn title(r: &RunResults) -> String {
    format!(
        "osmeter report: {} ({})",
        if r.machine.hostname.is_empty() {
            "unknown host"
        } else {
            &r.machine.hostname
        },
        r.started_at
    )
}

pub fn run_line(r: &RunResults) -> String {
    let ok = r
        .experiments
        .iter()
        .filter(|e| e.status == Status::Ok)
        .count();
    let unverified = r
        .experiments
        .iter()
        .filter(|e| e.status == Status::Unverified)
        .count();
    let not_ok = r.experiments.len() - ok - unverified;
    format!(
        "osmeter {}, profile {}, started {}, took {:.1} s; {} experiments, {} ok{}{}. Results schema version {}.",
        r.tool.version,
        r.config.profile_name(),
        r.started_at,
        r.duration_s,
        r.experiments.len(),
        ok,
        if unverified > 0 {
            format!(", {unverified} unverified (measured; a premise could not be checked here)")
        } else {
            String::new()
        },
        if not_ok > 0 {
            format!(", {not_ok} skipped, invalid or failed (reasons below)")
        } else {
            String::new()
        },
        r.schema_version
    )
}

/// The machine in a few labelled lines; only facts that were read appear.
pub fn machine_facts(r: &RunResults) -> Vec<(String, String)> {
    let m = &r.machine;
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| {
        if !v.trim().is_empty() {
            out.push((k.to_string(), v));
        }
    };
    add("host", m.hostname.clone());
    if let Some(b) = r.tool.build_line() {
        add("measured by", b);
    }
    add("CPU", cpu_line(&m.cpu));
    if !m.topology.is_unknown() {
        topology_facts(&m.topology, r, &mut add);
    }
    if m.cpu.core_kinds.len() > 1 {
        add("core clock", kind_clocks(&m.cpu.core_kinds));
    } else if let Some(hz) = m.cpu.core_clock_hz {
        add(
            "core clock",
            format!(
                "{:.2} GHz effective, measured with a chain of dependent adds; \"core cycles\" below are at this clock",
                hz / 1e9
            ),
        );
    }
    if let Some(c) = &m.clock {
        add("time base", clock_line(c));
    }
    if let Some(g) = nonempty(&m.cpu.governor) {
        let turbo = match m.cpu.turbo {
            Some(true) => ", turbo on",
            Some(false) => ", turbo off",
            None => "",
        };
        add("frequency", format!("governor {g}{turbo}"));
    }
    add("caches (sysfs)", caches_line(&m.cpu.caches));
    add("memory", memory_line(&m.memory));
    let os: Vec<&str> = [
        m.os.distribution.as_deref().unwrap_or(""),
        &m.os.kernel,
        &m.os.arch,
    ]
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect();
    add("OS", os.join(", "));
    add("virtualisation", virtualisation_line(&m.virtualization));
    let mut cg = Vec::new();
    if let Some(c) = m.cgroup.cpu_limit {
        cg.push(format!("CPU limit {c:.2} CPUs"));
    }
    if let Some(b) = m.cgroup.memory_limit_bytes {
        cg.push(format!("memory limit {}", fmt_bytes(b as f64)));
    }
    add("cgroup", cg.join(", "));
    add("disks", disks_line(&m.storage.disks));
    if let Some(fs) = &m.storage.cwd_filesystem {
        add(
            "current directory",
            format!(
                "{} on {}{}",
                fs.fstype,
                fs.source,
                if fs.in_memory {
                    " (in memory: never touches a disk)"
                } else {
                    ""
                }
            ),
        );
    }
    add("network", network_line(&m.network));
    if let Some(l) = m.load_average {
        let v: Vec<String> = l.iter().map(|x| format!("{x:.2}")).collect();
        add("load average at start", v.join(" "));
    }
    let mi = &m.cpu.mitigations;
    if !mi.is_empty() {
        let active = mi.values().filter(|s| s.starts_with("Mitigation")).count();
        add(
            "CPU vulnerabilities",
            format!(
                "{} listed, {active} mitigated in software (these change system call costs)",
                mi.len()
            ),
        );
    }
    out
}

/// A string fact that was read (empty counts as not read, as in older renderings).
fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

fn cpu_line(c: &Cpu) -> String {
    let mut cpu = if c.model.is_empty() {
        "unknown model".to_string()
    } else {
        c.model.clone()
    };
    cpu.push_str(&format!(", {} logical CPUs", c.logical_cpus));
    if let Some(n) = c.physical_cores {
        cpu.push_str(&format!(", {n} physical cores"));
    }
    if let Some(n) = c.sockets {
        cpu.push_str(&format!(", {n} socket(s)"));
    }
    if let Some(b) = c.smt {
        cpu.push_str(if b { ", SMT on" } else { ", SMT off" });
    }
    cpu.push_str(&format!(", {} allowed to this run", c.allowed_cpus.len()));
    cpu
}

fn clock_line(c: &ClockInfo) -> String {
    let inv = match c.invariant {
        Some(true) => "invariant",
        Some(false) => "NOT invariant",
        None => "invariance unknown",
    };
    let or_unknown = |s: &str| {
        if s.is_empty() {
            "?".to_string()
        } else {
            s.to_string()
        }
    };
    // A counter that advances several ticks at once resolves only its step.
    let step = c.step_text().map(|t| format!(", {t}")).unwrap_or_default();
    format!(
        "{} at {:.1} MHz ({}), {inv}{step}; read overhead {} (subtracted)",
        or_unknown(&c.counter),
        c.frequency_hz / 1e6,
        or_unknown(&c.frequency_source),
        fmt_value(c.overhead_ns, "ns")
    )
}

fn caches_line(caches: &[Cache]) -> String {
    let v: Vec<String> = caches
        .iter()
        .map(|c| {
            let k = match c.kind.as_str() {
                "Data" => "d",
                "Instruction" => "i",
                _ => "",
            };
            let mut s = format!("L{}{k} {}", c.level, fmt_bytes(c.size_bytes as f64));
            if let Some(w) = c.ways {
                s.push_str(&format!(" {w}-way"));
            }
            if c.shared_cpus > 1 {
                s.push_str(&format!(" shared by {} CPUs", c.shared_cpus));
            }
            s
        })
        .collect();
    if v.is_empty() {
        return String::new();
    }
    let line = caches
        .first()
        .map(|c| format!("; line {}", fmt_bytes(c.line_bytes as f64)))
        .unwrap_or_default();
    format!("{}{line}", v.join(", "))
}

fn memory_line(m: &Memory) -> String {
    let mut mem = String::new();
    if m.total_bytes > 0 {
        mem.push_str(&format!("{} total", fmt_bytes(m.total_bytes as f64)));
    }
    if m.available_bytes > 0 {
        mem.push_str(&format!(
            ", {} available at start",
            fmt_bytes(m.available_bytes as f64)
        ));
    }
    if let Some(t) = nonempty(&m.memory_type) {
        mem.push_str(&format!(", {t}"));
    }
    if let Some(s) = m.speed_mts {
        mem.push_str(&format!(" {s} MT/s"));
    }
    if let Some(c) = m.channels {
        mem.push_str(&format!(", {c} channel(s)"));
    }
    if let Some(p) = m.peak_bandwidth_bytes_per_s {
        mem.push_str(&format!(", theoretical peak {}", fmt_value(p, "bytes/s")));
    }
    if let Some(n) = m.numa_nodes {
        mem.push_str(&format!(", {n} NUMA node(s)"));
    }
    mem.trim_start_matches(", ").to_string()
}

fn virtualisation_line(v: &Virtualization) -> String {
    let mut s = if v.is_vm {
        format!(
            "virtual machine ({})",
            nonempty(&v.hypervisor).unwrap_or("hypervisor flag set")
        )
    } else {
        "no hypervisor detected".into()
    };
    if let Some(c) = nonempty(&v.container) {
        s.push_str(&format!(", container: {c}"));
    }
    if let Some(st) = &v.steal_during_run {
        s.push_str(&format!(
            ", steal time during the run {:.1}%",
            st.steal_fraction * 100.0
        ));
    }
    s
}

fn disks_line(disks: &[Disk]) -> String {
    let v: Vec<String> = disks
        .iter()
        .map(|d| {
            let mut s = d.name.clone();
            if let Some(x) = nonempty(&d.model) {
                s.push_str(&format!(" {x}"));
            }
            match d.rotational {
                Some(true) => s.push_str(" (rotational"),
                Some(false) => s.push_str(" (solid state"),
                None => s.push_str(" ("),
            }
            if let Some(x) = nonempty(&d.scheduler) {
                s.push_str(&format!(", scheduler {x}"));
            }
            s.push(')');
            s.replace(" ()", "").replace("(, ", "(")
        })
        .collect();
    v.join("; ")
}

fn network_line(nics: &[Nic]) -> String {
    let v: Vec<String> = nics
        .iter()
        .filter(|n| !n.loopback)
        .map(|n| {
            let mut s = n.name.clone();
            if let Some(sp) = n.speed_mbit_s {
                s.push_str(&format!(" {sp} Mbit/s"));
            }
            if n.virtual_device {
                s.push_str(" (virtual)");
            }
            s
        })
        .collect();
    v.join(", ")
}

/// The clock of each kind of core a run measured per-kind figures on: which CPU, which
/// metric names, and that the cycles of each are at its own clock.
pub(crate) fn kind_clocks(kinds: &[crate::machine::KindClock]) -> String {
    let each: Vec<String> = kinds
        .iter()
        .map(|k| {
            let hz = k
                .core_clock_hz
                .map(|h| format!("{:.2} GHz", h / 1e9))
                .unwrap_or_else(|| "unknown".into());
            let names = if k.suffix.is_empty() {
                "metrics without a kind suffix".to_string()
            } else {
                format!("metrics ending in {}", k.suffix)
            };
            format!("{hz} on CPU {} ({} core; {names})", k.cpu, k.kind)
        })
        .collect();
    format!(
        "{}, each measured on its own core with a chain of dependent adds; a metric's \
         \"core cycles\" are at its own kind's clock",
        each.join(", ")
    )
}

/// Topology, the CPU the run used and why, and the partners (absent in runs recorded
/// before the topology was described).
fn topology_facts(t: &Topology, r: &RunResults, add: &mut dyn FnMut(&str, String)) {
    let count = |n: Option<usize>, what: &str| {
        n.map(|n| format!("{n} {what}{}", if n == 1 { "" } else { "s" }))
    };
    let mut parts: Vec<String> = [
        count(t.packages, "package"),
        count(t.cores, "core"),
        count(t.llc_groups, "last-level cache group"),
        count(t.numa_nodes, "NUMA node"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let of = |k: &str| {
        let v: Vec<usize> = t
            .cpus
            .iter()
            .filter(|c| c.kind.as_deref() == Some(k))
            .map(|c| c.cpu)
            .collect();
        crate::machine::format_list(&v)
    };
    let (p, e) = (of("performance"), of("efficiency"));
    if !p.is_empty() && !e.is_empty() {
        parts.push(format!("performance CPUs {p}, efficiency CPUs {e}"));
    }
    add("topology", parts.join(", "));
    // The CPU the run pinned to is in the config; the topology says why.
    let used = r.config.cpu.or(t.chosen_cpu);
    if let Some(c) = used {
        let why = &t.chosen_reason;
        add(
            "chosen CPU",
            if why.is_empty() {
                c.to_string()
            } else {
                format!("{c}: {why}")
            },
        );
    }
    let p = &t.partners;
    let v: Vec<String> = [
        ("smt_sibling", p.smt_sibling),
        ("same_llc", p.same_llc),
        ("other_node", p.other_node),
        ("other_llc", p.other_llc),
        ("other_package", p.other_package),
    ]
    .iter()
    // A node inside a package exists only where nodes outnumber packages.
    .filter(|(k, _)| *k != "other_node" || t.numa_nodes > t.packages)
    .map(|(k, c)| match c {
        Some(c) => format!("{k} {c}"),
        None => format!("{k} none"),
    })
    .collect();
    add("partner CPUs", v.join(", "));
}

/// Every machine fact as `path = value`, for the full listing (from the machine as it is
/// written to results.json, so the listing names the document's keys).
pub fn machine_listing(m: &Machine) -> Vec<(String, String)> {
    flatten(&serde_json::to_value(m).unwrap_or(Value::Null))
}

/// Every fact of a JSON value as `path = value`.
pub fn flatten(v: &Value) -> Vec<(String, String)> {
    fn go(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    go(&p, x, out);
                }
            }
            Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
                let s: Vec<String> = a.iter().map(scalar).collect();
                out.push((prefix.to_string(), s.join(", ")));
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    go(&format!("{prefix}[{i}]"), x, out);
                }
            }
            Value::Null => {}
            x => out.push((prefix.to_string(), scalar(x))),
        }
    }
    let mut out = Vec::new();
    go("", v, &mut out);
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        x => x.to_string(),
    }
}

/// The run's statistics rules as recorded in its config.
pub fn statistics_rules(r: &RunResults) -> Vec<(String, String)> {
    let Some(s) = &r.config.statistics else {
        return Vec::new();
    };
    [
        (&s.outlier_rule, "outliers"),
        (&s.ci_method, "confidence interval"),
    ]
    .into_iter()
    .filter_map(|(rule, label)| Some((label.to_string(), rule.clone()?)))
    .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::machine::KindClock;

    /// A document with cpu.call-like rows sharing one formula, a negative slope, a
    /// hardware-only, a software-only, a mixed and a chained prediction, and one sample.
    pub(crate) fn doc() -> RunResults {
        let summary = |median: f64, n: usize| {
            serde_json::json!({"n": n, "median": median, "mean": median * 1.1, "stddev": median / 10.0,
              "min": median, "max": median, "ci95": [median - 0.08, median + 0.04], "cov": 0.1, "outliers": 0})
        };
        let input = |kind: &str, source: &str, v: f64| serde_json::json!({"value": v, "unit": "ns", "source": source, "kind": kind});
        let loop_in = input("measured", "measured: cpu.loop iteration", 0.22);
        let taken = input("method", "method: the call and its return", 2.0);
        let shared = "2 taken branches x cpu.loop's iteration";
        let mut call = Vec::new();
        for k in 0..3 {
            call.push(serde_json::json!({"name": format!("args_{k}"), "unit": "ns", "summary": summary(1.3, 30),
                "prediction": {"value": 0.44, "formula": shared, "inputs": {"iteration": loop_in, "taken": taken}}}));
        }
        call.push(serde_json::json!({"name": "per_argument", "unit": "ns", "summary": summary(-0.07, 30)}));
        let getppid = input("measured", "measured: cpu.syscall getppid", 100.0);
        let clock = input("machine", "machine: effective core clock", 3e9);
        let doc = serde_json::json!({"schema_version": 1, "tool": {"name": "osmeter", "version": "0.1"},
        "started_at": "2026-01-01T00:00:00Z", "duration_s": 1, "config": {"profile": "quick"},
        "machine": {"hostname": "h"}, "experiments": [
          {"id": "cpu.call", "area": "cpu", "title": "t", "status": "ok", "duration_s": 1, "metrics": call},
          {"id": "cpu.x", "area": "cpu", "title": "t", "status": "ok", "duration_s": 1, "metrics": [
            {"name": "hw", "unit": "ns", "summary": summary(1.0, 30),
             "prediction": {"value": 1.0, "formula": "3 cycles / f_core", "inputs": {"f_core": clock}}},
            {"name": "sw", "unit": "ns", "summary": summary(250.0, 1),
             "prediction": {"value": 200.0, "formula": "2 x getppid", "inputs": {"getppid": getppid}, "bound": "lower"}},
            {"name": "mixed", "unit": "ns", "summary": summary(300.0, 30),
             "prediction": {"value": 201.0, "formula": "2 x getppid + 3 cycles / f_core", "inputs": {"getppid": getppid, "f_core": clock}}},
            {"name": "chained", "unit": "ns", "summary": summary(400.0, 30),
             "prediction": {"value": 400.0, "formula": "2 x sw", "inputs": {"sw": input("prediction", "prediction: sw above", 200.0)}}},
            {"name": "old", "unit": "ns", "summary": summary(5.0, 30),
             "prediction": {"value": 5.0, "formula": "f", "inputs": {"x": {"value": 1.0, "unit": "ns", "source": "s"}}}}
          ]}]});
        crate::results::load::from_str(&doc.to_string()).unwrap()
    }

    #[test]
    fn inputs_decide_the_side_and_a_mixed_formula_is_not_split() {
        let r = doc();
        let split_of = |e: usize, m: &str| {
            let e = &r.experiments[e];
            let p = e.metrics.iter().find(|x| x.name == m).unwrap();
            split(e, p.prediction.as_ref().unwrap())
        };
        // A figure of cpu.loop (no kernel in its path) is hardware; method counts are neither.
        assert_eq!(split_of(0, "args_0"), Split::Hardware);
        assert_eq!(split_of(1, "hw"), Split::Hardware);
        assert_eq!(split_of(1, "sw"), Split::Software);
        // A prediction input takes the side of the prediction it names.
        assert_eq!(split_of(1, "chained"), Split::Software);
        match split_of(1, "mixed") {
            Split::Unsplit(why) => {
                assert!(why.contains("f_core") && why.contains("getppid"), "{why}")
            }
            s => panic!("{s:?}"),
        }
        match split_of(1, "old") {
            Split::Unsplit(why) => assert!(why.contains("no kinds"), "{why}"),
            s => panic!("{s:?}"),
        }
    }

    #[test]
    fn the_closing_table_has_one_full_row_per_prediction() {
        let c = closing(&doc());
        // Three cpu.call rows and five of cpu.x; per_argument has no prediction.
        assert_eq!(c.rows.len(), 8);
        let row = |op: &str| c.rows.iter().find(|r| r.operation == op).unwrap();
        let hw = row("cpu.x hw");
        assert_eq!(
            (hw.hardware.as_str(), hw.software.as_str()),
            ("1.00 ns", NO_INPUT)
        );
        assert_eq!(hw.mean_sd, "1.10 ns ± 0.10 ns");
        let sw = row("cpu.x sw");
        assert_eq!(
            (sw.hardware.as_str(), sw.software.as_str()),
            (NO_INPUT, "≥ 200.0 ns")
        );
        // One sample: no SD, and no 0 printed for it.
        assert!(sw.mean_sd.contains("n = 1: no SD"), "{}", sw.mean_sd);
        let mixed = row("cpu.x mixed");
        assert_eq!(mixed.hardware, "not split");
        assert_eq!(mixed.predicted, "201.0 ns");
        let n = mixed.notes[0];
        assert!(
            c.notes[n - 1].starts_with("Not split: it combines"),
            "{:?}",
            c.notes
        );
        for r in &c.rows {
            for cell in [
                &r.hardware,
                &r.software,
                &r.predicted,
                &r.mean_sd,
                &r.median_ci,
            ] {
                assert!(!cell.is_empty(), "{r:?}");
            }
        }
    }

    #[test]
    fn a_negative_cost_is_marked_and_not_printed() {
        let r = doc();
        let m = &r.experiments[0].metrics[3];
        let why = out_of_range(m).unwrap();
        assert!(
            why.contains("below zero") && why.contains("a duration"),
            "{why}"
        );
        let row = metric_row(m);
        assert_eq!(row.measured, OUT_OF_RANGE);
        assert!(!row.ci.contains("-0.07"), "{}", row.ci);
        assert!(out_of_range(&r.experiments[0].metrics[0]).is_none());
    }

    #[test]
    fn a_shared_formula_is_written_once_for_its_rows() {
        let r = doc();
        let g = formula_groups(&r.experiments[0]);
        let f = "2 taken branches x cpu.loop's iteration";
        let cells: Vec<String> = g[..3].iter().map(|g| g.cell(f)).collect();
        assert_eq!(
            cells.iter().filter(|c| c.contains(f)).count(),
            1,
            "{cells:?}"
        );
        assert!(cells[0].contains("3 rows args_0 .. args_2"), "{}", cells[0]);
        assert_eq!(cells[1], "as for args_0");
        assert_eq!(g[3], FormulaGroup::First(vec!["per_argument".into()]));
        // Different formulas stay apart.
        let g = formula_groups(&r.experiments[1]);
        assert!(g.iter().all(|g| g.same_as().is_none()), "{g:?}");
    }

    #[test]
    fn a_small_spread_is_not_shown_as_zero() {
        assert_eq!(fmt_spread(0.0016, "ns"), "0.0016 ns");
        assert_eq!(fmt_spread(132.3, "ns"), "132.3 ns");
        assert!(fmt_spread(1e-14, "ns").contains("e-14"));
    }

    #[test]
    fn each_kinds_clock_is_named_with_its_cpu_and_metric_names() {
        let k = |kind: &str, cpu, suffix: &str, ghz: f64| KindClock {
            kind: kind.into(),
            cpu,
            suffix: suffix.into(),
            core_clock_hz: Some(ghz * 1e9),
        };
        let t = kind_clocks(&[
            k("performance", 2, "", 4.5),
            k("efficiency", 12, "_efficiency", 3.3),
        ]);
        assert!(
            t.contains("4.50 GHz on CPU 2 (performance core; metrics without a kind suffix)"),
            "{t}"
        );
        assert!(
            t.contains("3.30 GHz on CPU 12 (efficiency core; metrics ending in _efficiency)"),
            "{t}"
        );
        assert!(t.contains("its own kind's clock"), "{t}");
    }
}
