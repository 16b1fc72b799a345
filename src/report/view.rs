//! What the Markdown and HTML reports say, computed once from the results document so
//! the two formats cannot drift apart. Values here are already formatted for people.

use super::terminal::FLAG_RATIO;
use crate::results::{Metric, RunResults, Status};
use crate::units::{fmt_bytes, fmt_value};
use serde_json::Value;

/// One row of the predicted-vs-measured table.
pub struct MetricRow {
    pub experiment: String,
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

pub fn metric_row(exp: &str, m: &Metric) -> MetricRow {
    let s = &m.summary;
    let pred = m.prediction.as_ref();
    let ratio = pred
        .map(|p| p.value)
        .filter(|p| p.is_finite() && *p != 0.0 && s.median.is_finite())
        .map(|p| s.median / p);
    MetricRow {
        experiment: exp.to_string(),
        metric: m.name.clone(),
        description: m.description.clone(),
        predicted: pred
            .map(|p| fmt_value(p.value, &m.unit))
            .unwrap_or_else(|| "-".into()),
        formula: pred.map(|p| p.formula.clone()).unwrap_or_default(),
        inputs: pred
            .map(|p| {
                p.inputs
                    .iter()
                    .map(|(k, v)| format!("{k} = {} ({})", fmt_value(v.value, &v.unit), v.source))
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
        flagged: ratio.is_some_and(|r| !(1.0 / FLAG_RATIO..=FLAG_RATIO).contains(&r)),
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
        str_at(&r.machine, "/hostname").unwrap_or_else(|| "unknown host".into()),
        r.started_at
    )
}

pub fn run_line(r: &RunResults) -> String {
    let ok = r
        .experiments
        .iter()
        .filter(|e| e.status == Status::Ok)
        .count();
    let not_ok = r.experiments.len() - ok;
    format!(
        "osmeter {}, profile {}, started {}, took {:.1} s; {} experiments, {} ok{}. Results schema version {}.",
        r.tool.version,
        r.config
            .get("profile")
            .and_then(|v| v.as_str())
            .unwrap_or("?"),
        r.started_at,
        r.duration_s,
        r.experiments.len(),
        ok,
        if not_ok > 0 {
            format!(", {not_ok} skipped, invalid or failed (reasons below)")
        } else {
            String::new()
        },
        r.schema_version
    )
}

fn str_at(v: &Value, p: &str) -> Option<String> {
    match v.pointer(p)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn f64_at(v: &Value, p: &str) -> Option<f64> {
    v.pointer(p)?.as_f64()
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
    add("host", str_at(m, "/hostname").unwrap_or_default());
    let mut cpu = str_at(m, "/cpu/model").unwrap_or_else(|| "unknown model".into());
    if let Some(n) = f64_at(m, "/cpu/logical_cpus") {
        cpu.push_str(&format!(", {n} logical CPUs"));
    }
    if let Some(n) = f64_at(m, "/cpu/physical_cores") {
        cpu.push_str(&format!(", {n} physical cores"));
    }
    if let Some(n) = f64_at(m, "/cpu/sockets") {
        cpu.push_str(&format!(", {n} socket(s)"));
    }
    if let Some(b) = m.pointer("/cpu/smt").and_then(|v| v.as_bool()) {
        cpu.push_str(if b { ", SMT on" } else { ", SMT off" });
    }
    if let Some(a) = m.pointer("/cpu/allowed_cpus").and_then(|v| v.as_array()) {
        cpu.push_str(&format!(", {} allowed to this run", a.len()));
    }
    add("CPU", cpu);
    if let Some(t) = m.pointer("/topology").filter(|t| t.is_object()) {
        topology_facts(t, r, &mut add);
    }
    if let Some(hz) = f64_at(m, "/cpu/core_clock_hz") {
        add(
            "core clock",
            format!(
                "{:.2} GHz effective, measured with a chain of dependent adds; \"core cycles\" below are at this clock",
                hz / 1e9
            ),
        );
    }
    if m.pointer("/clock").is_some_and(|c| c.is_object()) {
        let inv = match m.pointer("/clock/invariant").and_then(|v| v.as_bool()) {
            Some(true) => "invariant",
            Some(false) => "NOT invariant",
            None => "invariance unknown",
        };
        add(
            "time base",
            format!(
                "{} at {:.1} MHz ({}), {inv}; read overhead {} (subtracted)",
                str_at(m, "/clock/counter").unwrap_or_else(|| "?".into()),
                f64_at(m, "/clock/frequency_hz").unwrap_or(0.0) / 1e6,
                str_at(m, "/clock/frequency_source").unwrap_or_else(|| "?".into()),
                f64_at(m, "/clock/overhead_ns")
                    .map(|v| fmt_value(v, "ns"))
                    .unwrap_or_else(|| "?".into())
            ),
        );
    }
    if let Some(g) = str_at(m, "/cpu/governor") {
        let turbo = match m.pointer("/cpu/turbo").and_then(|v| v.as_bool()) {
            Some(true) => ", turbo on",
            Some(false) => ", turbo off",
            None => "",
        };
        add("frequency", format!("governor {g}{turbo}"));
    }
    if let Some(caches) = m.pointer("/cpu/caches").and_then(|v| v.as_array()) {
        let v: Vec<String> = caches
            .iter()
            .map(|c| {
                let kind = c.get("kind").and_then(|v| v.as_str()).unwrap_or("");
                let k = match kind {
                    "Data" => "d",
                    "Instruction" => "i",
                    _ => "",
                };
                let mut s = format!(
                    "L{}{k} {}",
                    c.get("level").and_then(|v| v.as_u64()).unwrap_or(0),
                    fmt_bytes(c.get("size_bytes").and_then(|v| v.as_f64()).unwrap_or(0.0))
                );
                if let Some(w) = c.get("ways").and_then(|v| v.as_u64()) {
                    s.push_str(&format!(" {w}-way"));
                }
                if let Some(n) = c
                    .get("shared_cpus")
                    .and_then(|v| v.as_u64())
                    .filter(|n| *n > 1)
                {
                    s.push_str(&format!(" shared by {n} CPUs"));
                }
                s
            })
            .collect();
        let line = caches
            .first()
            .and_then(|c| c.get("line_bytes"))
            .and_then(|v| v.as_f64())
            .map(|l| format!("; line {}", fmt_bytes(l)))
            .unwrap_or_default();
        if !v.is_empty() {
            add("caches (sysfs)", format!("{}{line}", v.join(", ")));
        }
    }
    let mut mem = String::new();
    if let Some(t) = f64_at(m, "/memory/total_bytes").filter(|t| *t > 0.0) {
        mem.push_str(&format!("{} total", fmt_bytes(t)));
    }
    if let Some(t) = f64_at(m, "/memory/available_bytes").filter(|t| *t > 0.0) {
        mem.push_str(&format!(", {} available at start", fmt_bytes(t)));
    }
    if let Some(t) = str_at(m, "/memory/memory_type") {
        mem.push_str(&format!(", {t}"));
    }
    if let Some(s) = f64_at(m, "/memory/speed_mts") {
        mem.push_str(&format!(" {s} MT/s"));
    }
    if let Some(c) = f64_at(m, "/memory/channels") {
        mem.push_str(&format!(", {c} channel(s)"));
    }
    if let Some(p) = f64_at(m, "/memory/peak_bandwidth_bytes_per_s") {
        mem.push_str(&format!(", theoretical peak {}", fmt_value(p, "bytes/s")));
    }
    if let Some(n) = f64_at(m, "/memory/numa_nodes") {
        mem.push_str(&format!(", {n} NUMA node(s)"));
    }
    add("memory", mem.trim_start_matches(", ").to_string());
    let os: Vec<String> = ["/os/distribution", "/os/kernel", "/os/arch"]
        .iter()
        .filter_map(|p| str_at(m, p))
        .collect();
    add("OS", os.join(", "));
    if let Some(v) = m.pointer("/virtualization").filter(|v| v.is_object()) {
        let vm = v.get("is_vm").and_then(|b| b.as_bool()).unwrap_or(false);
        let mut s = if vm {
            format!(
                "virtual machine ({})",
                str_at(v, "/hypervisor").unwrap_or_else(|| "hypervisor flag set".into())
            )
        } else {
            "no hypervisor detected".into()
        };
        if let Some(c) = str_at(v, "/container") {
            s.push_str(&format!(", container: {c}"));
        }
        if let Some(f) = f64_at(v, "/steal_during_run/steal_fraction") {
            s.push_str(&format!(", steal time during the run {:.1}%", f * 100.0));
        }
        add("virtualisation", s);
    }
    let mut cg = Vec::new();
    if let Some(c) = f64_at(m, "/cgroup/cpu_limit") {
        cg.push(format!("CPU limit {c:.2} CPUs"));
    }
    if let Some(b) = f64_at(m, "/cgroup/memory_limit_bytes") {
        cg.push(format!("memory limit {}", fmt_bytes(b)));
    }
    add("cgroup", cg.join(", "));
    if let Some(disks) = m.pointer("/storage/disks").and_then(|v| v.as_array()) {
        let v: Vec<String> = disks
            .iter()
            .map(|d| {
                let mut s = str_at(d, "/name").unwrap_or_default();
                if let Some(x) = str_at(d, "/model") {
                    s.push_str(&format!(" {x}"));
                }
                match d.get("rotational").and_then(|b| b.as_bool()) {
                    Some(true) => s.push_str(" (rotational"),
                    Some(false) => s.push_str(" (solid state"),
                    None => s.push_str(" ("),
                }
                if let Some(x) = str_at(d, "/scheduler") {
                    s.push_str(&format!(", scheduler {x}"));
                }
                s.push(')');
                s.replace(" ()", "").replace("(, ", "(")
            })
            .collect();
        add("disks", v.join("; "));
    }
    if let Some(fs) = m
        .pointer("/storage/cwd_filesystem")
        .filter(|v| v.is_object())
    {
        add(
            "current directory",
            format!(
                "{} on {}{}",
                str_at(fs, "/fstype").unwrap_or_default(),
                str_at(fs, "/source").unwrap_or_default(),
                if fs.get("in_memory").and_then(|b| b.as_bool()) == Some(true) {
                    " (in memory: never touches a disk)"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(nics) = m.pointer("/network").and_then(|v| v.as_array()) {
        let v: Vec<String> = nics
            .iter()
            .filter(|n| n.get("loopback").and_then(|b| b.as_bool()) != Some(true))
            .map(|n| {
                let mut s = str_at(n, "/name").unwrap_or_default();
                if let Some(sp) = f64_at(n, "/speed_mbit_s") {
                    s.push_str(&format!(" {sp} Mbit/s"));
                }
                if n.get("virtual_device").and_then(|b| b.as_bool()) == Some(true) {
                    s.push_str(" (virtual)");
                }
                s
            })
            .collect();
        add("network", v.join(", "));
    }
    if let Some(l) = m.pointer("/load_average").and_then(|v| v.as_array()) {
        let v: Vec<String> = l
            .iter()
            .filter_map(|x| x.as_f64())
            .map(|x| format!("{x:.2}"))
            .collect();
        add("load average at start", v.join(" "));
    }
    if let Some(mi) = m.pointer("/cpu/mitigations").and_then(|v| v.as_object()) {
        let active = mi
            .values()
            .filter_map(|v| v.as_str())
            .filter(|s| s.starts_with("Mitigation"))
            .count();
        if !mi.is_empty() {
            add(
                "CPU vulnerabilities",
                format!(
                    "{} listed, {active} mitigated in software (these change system call costs)",
                    mi.len()
                ),
            );
        }
    }
    out
}

/// Topology, the CPU the run used and why, and the partners (absent in runs recorded
/// before the topology was described).
fn topology_facts(t: &Value, r: &RunResults, add: &mut dyn FnMut(&str, String)) {
    let count = |k: &str, what: &str| {
        f64_at(t, &format!("/{k}"))
            .map(|n| format!("{n} {what}{}", if n == 1.0 { "" } else { "s" }))
    };
    let mut parts: Vec<String> = [
        count("packages", "package"),
        count("cores", "core"),
        count("llc_groups", "last-level cache group"),
        count("numa_nodes", "NUMA node"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(cpus) = t.pointer("/cpus").and_then(|v| v.as_array()) {
        let of = |k: &str| {
            let v: Vec<usize> = cpus
                .iter()
                .filter(|c| c.get("kind").and_then(|x| x.as_str()) == Some(k))
                .filter_map(|c| c.get("cpu").and_then(|x| x.as_u64()).map(|x| x as usize))
                .collect();
            crate::machine::format_list(&v)
        };
        let (p, e) = (of("performance"), of("efficiency"));
        if !p.is_empty() && !e.is_empty() {
            parts.push(format!("performance CPUs {p}, efficiency CPUs {e}"));
        }
    }
    add("topology", parts.join(", "));
    // The CPU the run pinned to is in the config; the topology says why.
    let used = r
        .config
        .get("cpu")
        .and_then(|v| v.as_u64())
        .or_else(|| t.get("chosen_cpu").and_then(|v| v.as_u64()));
    if let Some(c) = used {
        let why = str_at(t, "/chosen_reason").unwrap_or_default();
        add(
            "chosen CPU",
            if why.is_empty() {
                c.to_string()
            } else {
                format!("{c}: {why}")
            },
        );
    }
    if let Some(p) = t.get("partners").and_then(|v| v.as_object()) {
        let v: Vec<String> = ["smt_sibling", "same_llc", "other_llc", "other_package"]
            .iter()
            .map(|k| match p.get(*k).and_then(|x| x.as_u64()) {
                Some(c) => format!("{k} {c}"),
                None => format!("{k} none"),
            })
            .collect();
        add("partner CPUs", v.join(", "));
    }
}

/// Every machine fact as `path = value`, for the full listing.
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
    let mut v = Vec::new();
    for (k, label) in [
        ("outlier_rule", "outliers"),
        ("ci_method", "confidence interval"),
    ] {
        if let Some(s) = r
            .config
            .pointer(&format!("/statistics/{k}"))
            .and_then(|v| v.as_str())
        {
            v.push((label.to_string(), s.to_string()));
        }
    }
    v
}
