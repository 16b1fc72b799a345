//! Findings that span experiments, computed from a results document and never written by
//! hand. Each finding names the metrics (`experiment/metric`) or series
//! (`experiment/series`) it comes from, and appears only when its inputs exist in an
//! experiment whose status is ok. Metrics read by name are typed `MetricRef`s listed in
//! `READS`, which a test runs against what the experiments emit; conclusions an
//! experiment draws itself (cache levels, the contention fit) are never re-derived here,
//! and the analyses (knees, interval separation) are `crate::analysis`'s.
//! docs/REPORTS.md, "Findings across experiments", states every rule.

use crate::analysis::knee;
use crate::analysis::{separation_of, Separation};
use crate::results::MetricRef;
use crate::results::{ExperimentResult, Finding, Metric, RunResults, Status};
use crate::units::{fmt_bytes, fmt_value};

pub(crate) const PROCESS_SWITCH: MetricRef = MetricRef::new("cpu.process-switch", "switch");
pub(crate) const THREAD_SWITCH: MetricRef = MetricRef::new("cpu.thread-switch", "switch");
pub(crate) const THREAD_CREATE: MetricRef = MetricRef::new("cpu.thread-create", "create_join");
pub(crate) const FORK: MetricRef = MetricRef::new("cpu.process-create", "fork_exit_wait");
pub(crate) const SPAWN: MetricRef = MetricRef::new("cpu.process-create", "spawn_exec");
pub(crate) const SYSCALL: MetricRef = MetricRef::new("cpu.syscall", "getppid");
pub(crate) const CALL: MetricRef = MetricRef::new("cpu.call", "args_0");
pub(crate) const DRAM: MetricRef = MetricRef::new("mem.latency", "dram");
pub(crate) const MAJOR_FAULT: MetricRef = MetricRef::new("mem.pagefault", "major_fault");
pub(crate) const MINOR_FAULT: MetricRef = MetricRef::new("mem.pagefault", "minor_fault");

/// Every metric a cross-experiment finding reads by name.
pub const READS: &[MetricRef] = &[
    PROCESS_SWITCH,
    THREAD_SWITCH,
    THREAD_CREATE,
    FORK,
    SPAWN,
    SYSCALL,
    CALL,
    DRAM,
    MAJOR_FAULT,
    MINOR_FAULT,
];

/// The experiment whose thread-count series give the bandwidth-scaling findings.
pub(crate) const BANDWIDTH: &str = "mem.bandwidth";
/// Experiments whose `remote_x` metrics are set against their local `x`.
pub(crate) const REMOTE_VS_LOCAL: [&str; 4] =
    ["net.rtt", "net.bandwidth", "net.connect", "fs.remote-read"];

/// Experiments whose metrics or series findings read by pattern: their ids must exist
/// even though the names read vary.
pub fn read_by_pattern() -> Vec<&'static str> {
    std::iter::once(BANDWIDTH).chain(REMOTE_VS_LOCAL).collect()
}

/// The references among `refs` that `r` does not hold although their experiment ran ok:
/// names no experiment emits (an experiment that did not run proves nothing).
pub fn missing(refs: &[MetricRef], r: &RunResults) -> Vec<MetricRef> {
    refs.iter()
        .copied()
        .filter(|x| ok(r, x.experiment).is_some_and(|e| e.metric(x.metric).is_none()))
        .collect()
}

/// The findings a report shows: the ones stored with the results, computed once when the
/// run ended; recomputed only for files written before findings were stored.
pub(crate) fn for_report(r: &RunResults) -> Vec<Finding> {
    if r.findings.is_empty() {
        compute(r)
    } else {
        r.findings.clone()
    }
}

/// All cross-experiment findings of a run, in a stable order.
pub fn compute(r: &RunResults) -> Vec<Finding> {
    let mut out = Vec::new();
    // Cache levels and the contention fit are the experiments' own conclusions
    // (mem.latency, fs.contention), stated once there and never re-derived here.
    switch_and_creation(r, &mut out);
    syscall_vs_call(r, &mut out);
    page_fault_vs_dram(r, &mut out);
    bandwidth_scaling(r, &mut out);
    remote_vs_local(r, &mut out);
    cached_vs_uncached(r, &mut out);
    block_size_knee(r, &mut out);
    // A cross finding an experiment already states (its references are a subset of that
    // finding's) is the same subject said twice: the experiment's own wins.
    out.retain(|f| !covered_by_experiment(r, f));
    out
}

/// `experiment/metric` for a reference; a bare metric name belongs to `owner`.
fn qualified(owner: Option<&str>, reference: &str) -> String {
    match owner {
        Some(o) if !reference.contains('/') => format!("{o}/{reference}"),
        _ => reference.to_string(),
    }
}

fn refs(owner: Option<&str>, f: &Finding) -> Vec<String> {
    let mut v: Vec<String> = f.from.iter().map(|x| qualified(owner, x)).collect();
    v.sort();
    v.dedup();
    v
}

fn covered_by_experiment(r: &RunResults, f: &Finding) -> bool {
    let mine = refs(None, f);
    r.experiments.iter().any(|e| {
        e.findings.iter().any(|g| {
            let theirs = refs(Some(&e.id), g);
            mine.iter().all(|x| theirs.contains(x))
        })
    })
}

/// A finding placed for the terminal: its owner (None for cross-experiment ones) and score.
#[derive(Debug, Clone)]
pub(crate) struct Ranked<'a> {
    pub owner: Option<&'a str>,
    pub finding: &'a Finding,
    pub score: f64,
}

/// How surprising a finding is: its `salience` when the experiment set one, else, for a
/// finding that compares exactly two metrics of the same unit, |ln(a/b)| of their medians
/// (a 1x ratio says nothing, 150x a lot); otherwise 0.
pub(crate) fn score(r: &RunResults, owner: Option<&str>, f: &Finding) -> f64 {
    if let Some(s) = f.salience {
        return s;
    }
    let ms: Vec<&Metric> = refs(owner, f)
        .iter()
        .filter_map(|q| {
            let (id, name) = q.rsplit_once('/')?;
            r.experiment(id)?.metric(name)
        })
        .collect();
    match ms.as_slice() {
        [a, b] if a.unit == b.unit => {
            let x = a.summary.median / b.summary.median;
            if x.is_finite() && x > 0.0 {
                x.ln().abs()
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

/// The subject of a finding for de-duplication: its area and the metric names it
/// compares, so the same comparison made by two experiments of an area (e.g. the
/// cross-CPU round trip of thread and process switches) counts once.
fn subject(owner: Option<&str>, f: &Finding) -> (String, Vec<String>) {
    let q = refs(owner, f);
    let area = q
        .first()
        .and_then(|x| x.split('.').next())
        .unwrap_or("")
        .to_string();
    let mut names: Vec<String> = q
        .iter()
        .map(|x| x.rsplit_once('/').map_or(x.as_str(), |p| p.1).to_string())
        .collect();
    names.sort();
    (area, names)
}

/// Every finding of experiments that ran with their premises holding, plus the
/// cross-experiment ones, highest score first (ties keep document order), one per subject.
pub(crate) fn ranked(r: &RunResults) -> Vec<Ranked<'_>> {
    let mut v: Vec<Ranked> = r
        .experiments
        .iter()
        .filter(|e| e.status == Status::Ok)
        .flat_map(|e| e.findings.iter().map(move |f| (Some(e.id.as_str()), f)))
        .chain(r.findings.iter().map(|f| (None, f)))
        .map(|(owner, finding)| Ranked {
            owner,
            finding,
            score: score(r, owner, finding),
        })
        .collect();
    v.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(subject(x.owner, x.finding)));
    v
}

/// An experiment that ran and whose premises held.
fn ok<'a>(r: &'a RunResults, id: &str) -> Option<&'a ExperimentResult> {
    r.experiment(id).filter(|e| e.status == Status::Ok)
}

fn metric(r: &RunResults, x: MetricRef) -> Option<&Metric> {
    ok(r, x.experiment)?
        .metric(x.metric)
        .filter(|m| m.summary.median.is_finite())
}

fn reference(id: &str, name: &str) -> String {
    format!("{id}/{name}")
}

fn finding(text: String, from: Vec<String>) -> Finding {
    Finding {
        text,
        from,
        salience: None,
    }
}

/// Ratio a/b with the two medians, e.g. "3.20x (1.6 us vs 500.0 ns)".
fn ratio_text(a: &Metric, b: &Metric) -> Option<(f64, String)> {
    let (x, y) = (a.summary.median, b.summary.median);
    if !(x.is_finite() && y.is_finite()) || y <= 0.0 {
        return None;
    }
    let r = x / y;
    Some((
        r,
        format!(
            "{}x ({} vs {})",
            ratio_num(r),
            fmt_value(x, &a.unit),
            fmt_value(y, &b.unit)
        ),
    ))
}

/// A ratio with as many digits as are meaningful: 155, 15.5, 1.55.
pub(crate) fn ratio_num(r: f64) -> String {
    if r.abs() >= 100.0 {
        format!("{r:.0}")
    } else if r.abs() >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// A switch figure's interval, widened by its experiment's pipe cost's (a derived figure
/// carries its inputs' uncertainty).
fn switch_interval(r: &RunResults, x: MetricRef, m: &Metric) -> [f64; 2] {
    let e = r.experiment(x.experiment);
    m.interval(|n| e.and_then(|e| e.metric(n)))
}

/// Why a process switch costs what it does against a thread switch, said only as far as
/// their 95% intervals (each with its pipe cost's noise) support it.
fn address_space_clause(r: &RunResults, p: &Metric, t: &Metric) -> &'static str {
    let (pi, ti) = (
        switch_interval(r, PROCESS_SWITCH, p),
        switch_interval(r, THREAD_SWITCH, t),
    );
    match separation_of(pi, ti) {
        Separation::Above => {
            "; the difference, beyond both 95% intervals, is the price of changing address space (page tables, TLB)"
        }
        Separation::Overlap => {
            "; the two are within noise of each other (their 95% intervals overlap): changing address space adds nothing measurable here"
        }
        Separation::Below => {
            "; the process switch is the cheaper one beyond both 95% intervals, so no cost of changing address space shows here"
        }
    }
}

fn switch_and_creation(r: &RunResults, out: &mut Vec<Finding>) {
    if let (Some(p), Some(t)) = (metric(r, PROCESS_SWITCH), metric(r, THREAD_SWITCH)) {
        if let Some((_, txt)) = ratio_text(p, t) {
            out.push(finding(
                format!(
                    "A process context switch costs {txt} a thread switch{}.",
                    address_space_clause(r, p, t)
                ),
                vec![PROCESS_SWITCH.path(), THREAD_SWITCH.path()],
            ));
        }
    }
    let Some(thread) = metric(r, THREAD_CREATE) else {
        return;
    };
    for (x, what) in [
        (FORK, "fork + exit + wait"),
        (SPAWN, "spawning and exec'ing a program"),
    ] {
        if let Some(p) = metric(r, x) {
            if let Some((_, txt)) = ratio_text(p, thread) {
                out.push(finding(
                    format!(
                        "Creating a process by {what} costs {txt} creating and joining a thread."
                    ),
                    vec![x.path(), THREAD_CREATE.path()],
                ));
            }
        }
    }
}

fn syscall_vs_call(r: &RunResults, out: &mut Vec<Finding>) {
    let (Some(sys), Some(call)) = (metric(r, SYSCALL), metric(r, CALL)) else {
        return;
    };
    if let Some((_, txt)) = ratio_text(sys, call) {
        out.push(finding(
            format!(
                "A minimal system call (getppid) costs {txt} a procedure call without arguments."
            ),
            vec![SYSCALL.path(), CALL.path()],
        ));
    }
}

fn page_fault_vs_dram(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(dram) = metric(r, DRAM) else {
        return;
    };
    let (dram_ns, dram_txt) = (dram.summary.median, fmt_value(dram.summary.median, "ns"));
    for (x, what) in [
        (MAJOR_FAULT, "A major page fault"),
        (MINOR_FAULT, "A minor page fault"),
    ] {
        if let Some(m) = metric(r, x) {
            let ratio = m.summary.median / dram_ns;
            out.push(finding(
                format!(
                    "{what} ({}) takes the time of {} loads of mem.latency's base-page chase at its largest size ({dram_txt} each).",
                    fmt_value(m.summary.median, "ns"),
                    if ratio >= 100.0 {
                        format!("{ratio:.0}")
                    } else {
                        format!("{ratio:.1}")
                    }
                ),
                vec![x.path(), DRAM.path()],
            ));
        }
    }
}

/// The pooled metrics `OP_Tt` of operation `op`, by thread count.
fn by_threads<'a>(e: &'a ExperimentResult, op: &str) -> Vec<(usize, &'a Metric)> {
    let mut v: Vec<(usize, &Metric)> = e
        .metrics
        .iter()
        .filter(|m| m.summary.median.is_finite() && m.summary.median > 0.0)
        .filter_map(|m| {
            let t = m
                .name
                .strip_prefix(op)?
                .strip_prefix('_')?
                .strip_suffix('t')?;
            Some((t.parse().ok()?, m))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

/// For each operation with a by-thread series (`OP_by_threads`, one per run), its best
/// pooled multi-thread median against its one-thread figure, the direction said only
/// beyond both 95% intervals.
fn bandwidth_scaling(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(e) = ok(r, BANDWIDTH) else {
        return;
    };
    let mut ops: Vec<&str> = e
        .series
        .iter()
        .filter(|s| s.y_unit == "bytes/s" && s.x_unit.contains("thread"))
        .filter_map(|s| s.name.split_once("_by_threads").map(|p| p.0))
        .collect();
    ops.dedup();
    for op in ops {
        let kept = by_threads(e, op);
        let Some(&(1, one)) = kept.first() else {
            continue;
        };
        let Some(&(t, best)) = kept[1..]
            .iter()
            .max_by(|a, b| a.1.summary.median.total_cmp(&b.1.summary.median))
        else {
            continue;
        };
        let (x, y) = (best.summary.median, one.summary.median);
        let how = match separation_of(best.summary.ci95, one.summary.ci95) {
            Separation::Above => "more than one thread, beyond both 95% intervals",
            Separation::Overlap => "within noise of one thread (the 95% intervals overlap)",
            Separation::Below => "less than one thread, beyond both 95% intervals",
        };
        out.push(finding(
            format!(
                "{op} bandwidth: {t} threads move {} together (the best pooled median of the thread counts kept), {}x one thread's {}: {how}.",
                fmt_value(x, "bytes/s"),
                ratio_num(x / y),
                fmt_value(y, "bytes/s"),
            ),
            vec![reference(BANDWIDTH, &one.name), reference(BANDWIDTH, &best.name)],
        ));
    }
}

/// Pairs `A_x`/`B_x` of metric names in one experiment (e.g. remote_tcp and tcp).
fn prefixed_pairs<'a>(
    e: &'a ExperimentResult,
    prefix: &str,
    other_prefix: &str,
) -> Vec<(&'a Metric, &'a Metric)> {
    e.metrics
        .iter()
        .filter_map(|m| {
            let rest = m.name.strip_prefix(prefix)?;
            let want = format!("{other_prefix}{rest}");
            let o = e.metric(&want)?;
            (m.summary.median.is_finite() && o.summary.median.is_finite() && o.unit == m.unit)
                .then_some((m, o))
        })
        .collect()
}

fn remote_vs_local(r: &RunResults, out: &mut Vec<Finding>) {
    for id in REMOTE_VS_LOCAL {
        let Some(e) = ok(r, id) else {
            continue;
        };
        let mut pairs = prefixed_pairs(e, "remote_", "");
        if pairs.is_empty() {
            pairs = prefixed_pairs(e, "remote_", "local_");
        }
        if pairs.is_empty() {
            pairs = prefixed_pairs(e, "remote_", "loopback_");
        }
        for (rem, loc) in pairs {
            if let Some((_, txt)) = ratio_text(rem, loc) {
                out.push(finding(
                    format!("{id}: remote {} is {txt} the local one.", loc.name),
                    vec![reference(id, &rem.name), reference(id, &loc.name)],
                ));
            }
        }
    }
}

fn cached_vs_uncached(r: &RunResults, out: &mut Vec<Finding>) {
    for e in r.experiments.iter().filter(|e| e.status == Status::Ok) {
        for (slow, fast) in [("uncached_", "cached_"), ("cold_", "warm_")] {
            for (u, c) in prefixed_pairs(e, slow, fast) {
                if let Some((_, txt)) = ratio_text(u, c) {
                    let more = if u.unit == "ns" { "takes" } else { "reaches" };
                    out.push(finding(
                        format!(
                            "{}: {} {more} {txt} the {}.",
                            e.id,
                            u.name.replace('_', " "),
                            c.name.replace('_', " ")
                        ),
                        vec![reference(&e.id, &u.name), reference(&e.id, &c.name)],
                    ));
                }
            }
        }
    }
}

fn block_size_knee(r: &RunResults, out: &mut Vec<Finding>) {
    for e in r.experiments.iter().filter(|e| e.status == Status::Ok) {
        for s in e
            .series
            .iter()
            .filter(|s| s.x_unit == "bytes" && s.y_unit == "bytes/s")
        {
            if let Some((k, max)) = knee(&s.points, 0.1) {
                out.push(finding(
                    format!(
                        "{} {}: throughput stops improving at {} blocks ({}; no larger block is 10% faster; best {}).",
                        e.id,
                        s.name,
                        fmt_bytes(k[0]),
                        fmt_value(k[1], "bytes/s"),
                        fmt_value(max, "bytes/s")
                    ),
                    vec![reference(&e.id, &s.name)],
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, unit: &str, median: f64) -> serde_json::Value {
        serde_json::json!({"name": name, "unit": unit, "summary": {"n": 3, "median": median,
            "mean": median, "stddev": 0.0, "min": median, "max": median,
            "ci95": [median, median], "cov": 0.0, "outliers": 0}})
    }

    fn doc(exps: serde_json::Value) -> RunResults {
        let mut d = serde_json::json!({"schema_version": 1,
            "tool": {"name": "osmeter", "version": "0"}, "started_at": "", "duration_s": 1.0,
            "config": {}, "machine": {}, "experiments": exps});
        for e in d["experiments"].as_array_mut().unwrap() {
            e["area"] = e["id"].as_str().unwrap().split('.').next().unwrap().into();
            e["title"] = "t".into();
            e["duration_s"] = 1.0.into();
            if e.get("status").is_none() {
                e["status"] = "ok".into();
            }
        }
        serde_json::from_value(d).unwrap()
    }

    #[test]
    fn ranking_puts_far_ratios_and_salient_findings_first_and_says_each_subject_once() {
        let r = doc(serde_json::json!([
            {"id": "cpu.thread-switch",
             "metrics": [m("rt_cross", "ns", 15.0), m("rt_same", "ns", 7.0)],
             "findings": [{"text": "thread cross-CPU 2.1x", "from": ["rt_cross", "rt_same"]}]},
            {"id": "cpu.process-switch",
             "metrics": [m("rt_cross", "ns", 78.0), m("rt_same", "ns", 14.0),
                         m("switch", "ns", 5.0)],
             "findings": [
                {"text": "process cross-CPU 5.7x", "from": ["rt_cross", "rt_same"]},
                {"text": "process vs thread", "from": ["switch", "cpu.syscall/getppid"]}]},
            {"id": "cpu.syscall", "metrics": [m("getppid", "ns", 195.0)],
             "findings": [{"text": "one metric", "from": ["getppid"]}]},
            {"id": "mem.latency", "metrics": [m("l3", "ns", 15.0)],
             "findings": [{"text": "l3 0.12x sysfs", "from": ["l3"], "salience": 2.12}]},
            {"id": "net.rtt", "status": "invalid", "metrics": [m("a", "ns", 1.0), m("b", "ns", 1e3)],
             "findings": [{"text": "from an invalid experiment", "from": ["a", "b"]}]}
        ]));
        let texts: Vec<&str> = ranked(&r).iter().map(|x| x.finding.text.as_str()).collect();
        // process vs syscall: ln(195/5) = 3.7; l3: 2.12; cross-CPU: ln(78/14) = 1.7 beats
        // ln(15/7) = 0.76, and the thread one is the same subject; one metric: 0.
        assert_eq!(
            texts,
            [
                "process vs thread",
                "l3 0.12x sysfs",
                "process cross-CPU 5.7x",
                "one metric"
            ]
        );
    }

    #[test]
    fn a_cross_finding_an_experiment_already_states_is_dropped() {
        let r = doc(serde_json::json!([
            {"id": "cpu.thread-switch", "metrics": [m("switch", "ns", 1.3)]},
            {"id": "cpu.process-switch", "metrics": [m("switch", "ns", 5.1)],
             "findings": [{"text": "own", "from": ["switch", "cpu.thread-switch/switch"]}]},
            {"id": "cpu.syscall", "metrics": [m("getppid", "ns", 195.0)]},
            {"id": "cpu.call", "metrics": [m("args_0", "ns", 1.2)]}
        ]));
        let f = compute(&r);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].text.contains("procedure call"), "{f:?}");
    }

    /// A metric whose 95% interval is `[lo, hi]`.
    fn ci(name: &str, lo: f64, hi: f64) -> serde_json::Value {
        let mut v = m(name, "ns", (lo + hi) / 2.0);
        v["summary"]["ci95"] = serde_json::json!([lo, hi]);
        v
    }

    fn switch_finding(process: (f64, f64), thread: (f64, f64)) -> String {
        let r = doc(serde_json::json!([
            {"id": "cpu.thread-switch", "metrics": [ci("switch", thread.0, thread.1)]},
            {"id": "cpu.process-switch", "metrics": [ci("switch", process.0, process.1)]}
        ]));
        let f = compute(&r);
        assert_eq!(f.len(), 1, "{f:?}");
        f[0].text.clone()
    }

    #[test]
    fn the_price_of_changing_address_space_needs_disjoint_intervals() {
        let apart = switch_finding((1500.0, 1600.0), (1000.0, 1100.0));
        assert!(apart.contains("price of changing address space"), "{apart}");
        assert!(!apart.contains("within noise"), "{apart}");
        // 1.2x apart in the medians, but the intervals overlap: no claim either way.
        let overlap = switch_finding((1100.0, 1500.0), (1000.0, 1200.0));
        assert!(overlap.contains("within noise"), "{overlap}");
        assert!(!overlap.contains("price"), "{overlap}");
        let below = switch_finding((800.0, 900.0), (1000.0, 1100.0));
        assert!(
            below.contains("cheaper") && !below.contains("price"),
            "{below}"
        );
        assert!(!below.contains("within noise"), "{below}");
    }

    /// A mem.bandwidth result with pooled `read_1t`/`read_2t` of these intervals, and a
    /// series of one run whose 2-thread point is far above both.
    fn scaling(one: (f64, f64), two: (f64, f64)) -> Vec<String> {
        const G: f64 = 1e9;
        let r = doc(serde_json::json!([
            {"id": "mem.bandwidth",
             "metrics": [ci("read_1t", one.0 * G, one.1 * G), ci("read_2t", two.0 * G, two.1 * G),
                         ci("read_scalar_1t", 1.0, 2.0), ci("read_thp_1t", 1e12, 2e12)],
             "series": [{"name": "read_by_threads (run 2 of 2)", "x_unit": "threads",
                         "y_unit": "bytes/s", "points": [[1.0, 1e9], [2.0, 1e12]]}]}
        ]));
        let mut f = Vec::new();
        bandwidth_scaling(&r, &mut f);
        f.into_iter().map(|f| f.text).collect()
    }

    #[test]
    fn bandwidth_scaling_quotes_pooled_medians_and_says_more_only_beyond_the_intervals() {
        let apart = scaling((90.0, 110.0), (150.0, 170.0));
        assert_eq!(apart.len(), 1, "{apart:?}");
        // The pooled read_2t (median 160), not the series' one-run point or another
        // operation's metric; "at most" is gone.
        assert!(apart[0].contains("2 threads move 160.00 GB/s"), "{apart:?}");
        assert!(apart[0].contains("1.60x") && apart[0].contains("more than one thread"));
        assert!(
            !apart[0].contains("at most") && !apart[0].contains("1000"),
            "{apart:?}"
        );
        let overlap = scaling((90.0, 130.0), (120.0, 140.0));
        assert!(overlap[0].contains("within noise"), "{overlap:?}");
        assert!(!overlap[0].contains("more than"), "{overlap:?}");
        let below = scaling((90.0, 110.0), (50.0, 70.0));
        assert!(below[0].contains("less than one thread"), "{below:?}");
    }

    #[test]
    fn cross_findings_name_no_cause_and_no_dram_access() {
        let r = doc(serde_json::json!([
            {"id": "cpu.syscall", "metrics": [m("getppid", "ns", 195.0)]},
            {"id": "cpu.call", "metrics": [m("args_0", "ns", 1.2)]},
            {"id": "mem.latency", "metrics": [m("dram", "ns", 100.0)]},
            {"id": "mem.pagefault", "metrics": [m("major_fault", "ns", 50_000.0)]}
        ]));
        let f = compute(&r);
        let text: Vec<&str> = f.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].contains("procedure call") && !text[0].contains("price"));
        assert!(text[1].contains("500 loads of mem.latency's base-page chase"));
        assert!(!text[1].contains("DRAM"), "{text:?}");
    }

    #[test]
    fn missing_names_a_reference_its_experiment_does_not_emit() {
        let r = doc(serde_json::json!([
            {"id": "cpu.syscall", "metrics": [m("getppid", "ns", 195.0)]},
            {"id": "cpu.call", "status": "invalid", "metrics": []}
        ]));
        assert!(missing(&[SYSCALL], &r).is_empty());
        // Control: a bogus name in an experiment that ran is caught ...
        let bogus = MetricRef::new("cpu.syscall", "no_such_metric");
        assert_eq!(missing(&[SYSCALL, bogus], &r), [bogus]);
        // ... while an experiment that did not run ok proves nothing either way.
        assert!(missing(&[CALL, DRAM], &r).is_empty());
    }

    #[test]
    fn reports_show_stored_findings_and_compute_them_for_old_files() {
        let mut r = doc(serde_json::json!([
            {"id": "cpu.syscall", "metrics": [m("getppid", "ns", 195.0)]},
            {"id": "cpu.call", "metrics": [m("args_0", "ns", 1.2)]}
        ]));
        let old = for_report(&r);
        assert_eq!(old.len(), 1, "an old file gets them computed: {old:?}");
        r.findings = vec![Finding::new("stored", &["cpu.syscall/getppid"])];
        let stored = for_report(&r);
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].text, "stored");
    }
}
