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

/// "≥ " or "≤ " before a bound prediction's value: the side the measurement agrees on.
pub(crate) fn bound_mark(p: &Prediction) -> &'static str {
    match p.bound {
        None => "",
        Some(Bound::Lower) => "≥ ",
        Some(Bound::Upper) => "≤ ",
    }
}

/// Whether any prediction of the run is a bound: the legends then say how bounds are flagged.
pub(crate) fn has_bounds(r: &RunResults) -> bool {
    r.experiments
        .iter()
        .flat_map(|e| &e.metrics)
        .any(|m| m.prediction.as_ref().is_some_and(|p| p.bound.is_some()))
}

/// What '!' marks, for the legends; `bounds` from `has_bounds`.
pub(crate) fn flag_legend(bounds: bool) -> &'static str {
    if bounds {
        "beyond 2x either way; for a bound (≥, ≤: the model leaves costs out, or caps the \
         figure) only when the 95% interval lies wholly on its wrong side"
    } else {
        "beyond 2x either way"
    }
}

pub fn metric_row(m: &Metric) -> MetricRow {
    let s = &m.summary;
    let pred = m.prediction.as_ref();
    let judged = judged_ratio(m);
    let ratio = judged.map(|j| j.0);
    MetricRow {
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
    }
}

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
mod tests {
    use super::*;
    use crate::machine::KindClock;

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
