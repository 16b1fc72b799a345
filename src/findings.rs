//! Findings that span experiments, computed from a results document and never written by
//! hand. Each finding names the metrics (`experiment/metric`) or series
//! (`experiment/series`) it comes from, and appears only when its inputs exist in an
//! experiment whose status is ok. docs/METHODOLOGY-report.md states every rule.

use crate::results::{ExperimentResult, Finding, Metric, RunResults, Series, Status};
use crate::units::{fmt_bytes, fmt_value};

/// All cross-experiment findings of a run, in a stable order.
pub fn compute(r: &RunResults) -> Vec<Finding> {
    let mut out = Vec::new();
    cache_levels(r, &mut out);
    switch_and_creation(r, &mut out);
    syscall_vs_call(r, &mut out);
    page_fault_vs_dram(r, &mut out);
    bandwidth_scaling(r, &mut out);
    remote_vs_local(r, &mut out);
    cached_vs_uncached(r, &mut out);
    block_size_knee(r, &mut out);
    contention_model(r, &mut out);
    out
}

/// An experiment that ran and whose premises held.
fn ok<'a>(r: &'a RunResults, id: &str) -> Option<&'a ExperimentResult> {
    r.experiment(id).filter(|e| e.status == Status::Ok)
}

fn metric<'a>(r: &'a RunResults, id: &str, name: &str) -> Option<&'a Metric> {
    ok(r, id)?
        .metric(name)
        .filter(|m| m.summary.median.is_finite())
}

/// First metric of an experiment whose name passes `pred`.
fn metric_where<'a>(
    r: &'a RunResults,
    id: &str,
    pred: impl Fn(&Metric) -> bool,
) -> Option<&'a Metric> {
    ok(r, id)?
        .metrics
        .iter()
        .find(|m| m.summary.median.is_finite() && pred(m))
}

fn reference(id: &str, name: &str) -> String {
    format!("{id}/{name}")
}

fn finding(text: String, from: Vec<String>) -> Finding {
    Finding { text, from }
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
pub fn ratio_num(r: f64) -> String {
    if r.abs() >= 100.0 {
        format!("{r:.0}")
    } else if r.abs() >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// A (data or unified) cache from the machine facts.
#[derive(Debug, Clone)]
pub struct CacheFact {
    pub level: u64,
    pub kind: String,
    pub size_bytes: f64,
}

impl CacheFact {
    pub fn label(&self) -> String {
        let k = if self.kind.eq_ignore_ascii_case("data") {
            "d"
        } else {
            ""
        };
        format!("L{}{k}", self.level)
    }
}

/// Data and unified caches listed in `machine.cpu.caches`, by level.
pub fn sysfs_caches(r: &RunResults) -> Vec<CacheFact> {
    let mut v: Vec<CacheFact> = r
        .machine
        .pointer("/cpu/caches")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|c| {
                    let kind = c.get("kind").and_then(|k| k.as_str()).unwrap_or("");
                    let size = c.get("size_bytes").and_then(|s| s.as_f64())?;
                    (!kind.eq_ignore_ascii_case("instruction") && size > 0.0).then(|| CacheFact {
                        level: c.get("level").and_then(|l| l.as_u64()).unwrap_or(0),
                        kind: kind.to_string(),
                        size_bytes: size,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|c| (c.level, c.size_bytes as u64));
    v.dedup_by(|a, b| a.level == b.level && a.size_bytes == b.size_bytes);
    v
}

/// A flat stretch of a latency curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Plateau {
    pub first_size: f64,
    pub last_size: f64,
    pub latency: f64,
}

/// Splits a latency-vs-size curve into plateaus: a plateau goes on while points stay
/// within 25% of its first latency; a climb goes on while each point is 12% above the one
/// before. A plateau needs two points, except the last one (memory may be reached only
/// at the largest size).
pub fn plateaus(points: &[[f64; 2]]) -> Vec<Plateau> {
    let mut p: Vec<[f64; 2]> = points
        .iter()
        .copied()
        .filter(|q| q[0] > 0.0 && q[1].is_finite() && q[1] > 0.0)
        .collect();
    p.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let mut out = Vec::new();
    let n = p.len();
    let mut i = 0;
    while i < n {
        let base = p[i][1];
        let mut j = i;
        while j + 1 < n && p[j + 1][1] <= base * 1.25 {
            j += 1;
        }
        if j > i || j + 1 == n {
            let ys: Vec<f64> = p[i..=j].iter().map(|q| q[1]).collect();
            out.push(Plateau {
                first_size: p[i][0],
                last_size: p[j][0],
                latency: crate::stats::median(&ys),
            });
        }
        let mut k = j + 1;
        while k + 1 < n && p[k + 1][1] > p[k][1] * 1.12 {
            k += 1;
        }
        i = k.max(j + 1);
    }
    out
}

fn latency_curve(e: &ExperimentResult) -> Option<&Series> {
    e.series
        .iter()
        .find(|s| s.name == "random" && !s.points.is_empty())
        .or_else(|| {
            e.series
                .iter()
                .find(|s| s.x_unit == "bytes" && s.y_unit == "ns" && !s.points.is_empty())
        })
}

fn cache_levels(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(e) = ok(r, "mem.latency") else {
        return;
    };
    let Some(curve) = latency_curve(e) else {
        return;
    };
    let pl = plateaus(&curve.points);
    if pl.is_empty() {
        return;
    }
    let caches = sysfs_caches(r);
    let levels: Vec<String> = pl
        .iter()
        .map(|p| {
            format!(
                "{} up to {}",
                fmt_value(p.latency, "ns"),
                fmt_bytes(p.last_size)
            )
        })
        .collect();
    let mut text = format!(
        "The memory latency curve has {} plateau{}: {}.",
        pl.len(),
        if pl.len() == 1 { "" } else { "s" },
        levels.join(", ")
    );
    // A transition is where a plateau ends and latency starts to climb.
    let transitions: Vec<f64> = pl[..pl.len() - 1].iter().map(|p| p.last_size).collect();
    if caches.is_empty() {
        text.push_str(" The machine facts list no cache sizes to compare with.");
    } else {
        let mut parts = Vec::new();
        for c in &caches {
            let near = transitions
                .iter()
                .map(|t| (t, (t / c.size_bytes).log2().abs()))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            parts.push(match near {
                Some((t, d)) if d <= 1.0 => format!(
                    "{} {}: transition after {} (matches)",
                    c.label(),
                    fmt_bytes(c.size_bytes),
                    fmt_bytes(*t)
                ),
                _ => format!(
                    "{} {}: no transition within 2x",
                    c.label(),
                    fmt_bytes(c.size_bytes)
                ),
            });
        }
        text.push_str(&format!(" Against sysfs: {}.", parts.join("; ")));
    }
    let mut from = vec![reference("mem.latency", &curve.name)];
    if !caches.is_empty() {
        from.push("machine/cpu.caches".into());
    }
    out.push(finding(text, from));
}

fn switch_and_creation(r: &RunResults, out: &mut Vec<Finding>) {
    if let (Some(p), Some(t)) = (
        metric(r, "cpu.process-switch", "switch"),
        metric(r, "cpu.thread-switch", "switch"),
    ) {
        if let Some((ratio, txt)) = ratio_text(p, t) {
            let why = if ratio >= 1.1 {
                "; the difference is what changing address space adds (page tables, TLB)"
            } else {
                "; changing address space adds little here (tagged TLB entries or noise)"
            };
            out.push(finding(
                format!("A process context switch costs {txt} a thread switch{why}."),
                vec![
                    reference("cpu.process-switch", "switch"),
                    reference("cpu.thread-switch", "switch"),
                ],
            ));
        }
    }
    let Some(thread) = metric(r, "cpu.thread-create", "create_join") else {
        return;
    };
    for (name, what) in [
        ("fork_exit_wait", "fork + exit + wait"),
        ("spawn_exec", "spawning and exec'ing a program"),
    ] {
        if let Some(p) = metric(r, "cpu.process-create", name) {
            if let Some((_, txt)) = ratio_text(p, thread) {
                out.push(finding(
                    format!(
                        "Creating a process by {what} costs {txt} creating and joining a thread."
                    ),
                    vec![
                        reference("cpu.process-create", name),
                        reference("cpu.thread-create", "create_join"),
                    ],
                ));
            }
        }
    }
}

fn syscall_vs_call(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(sys) = metric(r, "cpu.syscall", "getppid") else {
        return;
    };
    if let Some(call) = metric(r, "cpu.call", "args_0") {
        if let Some((_, txt)) = ratio_text(sys, call) {
            out.push(finding(
                format!("A minimal system call (getppid) costs {txt} a procedure call without arguments: entering the kernel is the price."),
                vec![reference("cpu.syscall", "getppid"), reference("cpu.call", "args_0")],
            ));
        }
    }
}

fn page_fault_vs_dram(r: &RunResults, out: &mut Vec<Finding>) {
    let dram = metric(r, "mem.latency", "dram").map(|m| {
        (
            m.summary.median,
            fmt_value(m.summary.median, "ns"),
            reference("mem.latency", "dram"),
        )
    });
    // Without a named DRAM level, the largest size of the latency curve stands in.
    let dram = dram.or_else(|| {
        let e = ok(r, "mem.latency")?;
        let c = latency_curve(e)?;
        let last = c.points.iter().max_by(|a, b| a[0].total_cmp(&b[0]))?;
        (last[1] > 0.0).then(|| {
            (
                last[1],
                format!("{} at {}", fmt_value(last[1], "ns"), fmt_bytes(last[0])),
                reference("mem.latency", &c.name),
            )
        })
    });
    let Some((dram_ns, dram_txt, dram_ref)) = dram else {
        return;
    };
    let is_ns = |m: &Metric| m.unit == "ns" && !m.name.contains("per_byte");
    let major =
        metric_where(r, "mem.pagefault", |m| is_ns(m) && m.name.contains("major")).or_else(|| {
            metric_where(r, "mem.pagefault", |m| {
                is_ns(m) && !m.name.contains("minor")
            })
        });
    let minor = metric_where(r, "mem.pagefault", |m| is_ns(m) && m.name.contains("minor"));
    for (m, what) in [(major, "A major page fault"), (minor, "A minor page fault")] {
        if let Some(m) = m {
            let ratio = m.summary.median / dram_ns;
            out.push(finding(
                format!(
                    "{what} ({}) costs {} DRAM accesses ({dram_txt} each).",
                    fmt_value(m.summary.median, "ns"),
                    if ratio >= 100.0 {
                        format!("{ratio:.0}")
                    } else {
                        format!("{ratio:.1}")
                    }
                ),
                vec![reference("mem.pagefault", &m.name), dram_ref.clone()],
            ));
        }
    }
}

fn bandwidth_scaling(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(e) = ok(r, "mem.bandwidth") else {
        return;
    };
    for s in e
        .series
        .iter()
        .filter(|s| s.y_unit == "bytes/s" && s.x_unit.contains("thread"))
    {
        let mut p = s.points.clone();
        p.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let (Some(first), Some(best)) = (
            p.first(),
            p.iter().max_by(|a, b| a[1].total_cmp(&b[1])).copied(),
        ) else {
            continue;
        };
        if p.len() < 2 || first[1] <= 0.0 {
            continue;
        }
        out.push(finding(
            format!(
                "{} bandwidth: {} with {} thread{}, at most {} with {} ({:.2}x).",
                s.name,
                fmt_value(first[1], "bytes/s"),
                first[0],
                if first[0] == 1.0 { "" } else { "s" },
                fmt_value(best[1], "bytes/s"),
                best[0],
                best[1] / first[1]
            ),
            vec![reference("mem.bandwidth", &s.name)],
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
    for id in ["net.rtt", "net.bandwidth", "net.connect", "fs.remote-read"] {
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

/// The smallest x whose y reaches `frac` of the largest y: where growing x stops paying.
pub fn knee(points: &[[f64; 2]], frac: f64) -> Option<([f64; 2], f64)> {
    let mut p: Vec<[f64; 2]> = points
        .iter()
        .copied()
        .filter(|q| q[0].is_finite() && q[1].is_finite())
        .collect();
    p.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let max = p.iter().map(|q| q[1]).fold(f64::NEG_INFINITY, f64::max);
    if p.len() < 3 || max <= 0.0 {
        return None;
    }
    p.iter().find(|q| q[1] >= frac * max).map(|q| (*q, max))
}

fn block_size_knee(r: &RunResults, out: &mut Vec<Finding>) {
    for e in r.experiments.iter().filter(|e| e.status == Status::Ok) {
        for s in e
            .series
            .iter()
            .filter(|s| s.x_unit == "bytes" && s.y_unit == "bytes/s")
        {
            if let Some((k, max)) = knee(&s.points, 0.9) {
                out.push(finding(
                    format!(
                        "{} {}: throughput stops improving at {} blocks ({}, within 10% of the best {}).",
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

/// A one- or two-segment least-squares model of y against x.
#[derive(Debug, Clone, PartialEq)]
pub struct PiecewiseFit {
    /// Where the second segment starts, when two segments fit much better than one.
    pub bend: Option<f64>,
    /// (intercept, slope) per segment.
    pub segments: Vec<(f64, f64)>,
}

impl PiecewiseFit {
    pub fn eval(&self, x: f64) -> f64 {
        let (a, b) = match (self.bend, self.segments.as_slice()) {
            (Some(k), [_, s2]) if x >= k => *s2,
            (_, [s1, ..]) => *s1,
            _ => (f64::NAN, f64::NAN),
        };
        a + b * x
    }
}

fn sse(points: &[(f64, f64)], (a, b): (f64, f64)) -> f64 {
    points.iter().map(|(x, y)| (y - a - b * x).powi(2)).sum()
}

/// One line, or two when splitting at some point (each side at least 3 points, the
/// split point shared) cuts the squared error by more than half.
pub fn piecewise_fit(points: &[[f64; 2]]) -> Option<PiecewiseFit> {
    let mut p: Vec<(f64, f64)> = points
        .iter()
        .filter(|q| q[0].is_finite() && q[1].is_finite())
        .map(|q| (q[0], q[1]))
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    let one = crate::stats::linear_fit(&p)?;
    let e1 = sse(&p, one);
    // (squared error, split index, left line, right line)
    type Split = (f64, usize, (f64, f64), (f64, f64));
    let mut best: Option<Split> = None;
    for k in 2..p.len().saturating_sub(2) {
        let (Some(l), Some(rr)) = (
            crate::stats::linear_fit(&p[..=k]),
            crate::stats::linear_fit(&p[k..]),
        ) else {
            continue;
        };
        let e = sse(&p[..=k], l) + sse(&p[k + 1..], rr);
        if best.as_ref().map_or(true, |b| e < b.0) {
            best = Some((e, k, l, rr));
        }
    }
    match best {
        Some((e, k, l, rr)) if e < 0.5 * e1 && e1 > 0.0 => Some(PiecewiseFit {
            bend: Some(p[k].0),
            segments: vec![l, rr],
        }),
        _ => Some(PiecewiseFit {
            bend: None,
            segments: vec![one],
        }),
    }
}

/// Series of a contention experiment that are measurements (not the experiment's own model).
pub fn is_model_series(s: &Series) -> bool {
    let n = s.name.to_ascii_lowercase();
    n.contains("model") || n.contains("fit") || n.contains("predict")
}

fn contention_model(r: &RunResults, out: &mut Vec<Finding>) {
    let Some(e) = ok(r, "fs.contention") else {
        return;
    };
    for s in e
        .series
        .iter()
        .filter(|s| s.x_unit != "bytes" && !is_model_series(s) && s.points.len() >= 3)
    {
        let Some(fit) = piecewise_fit(&s.points) else {
            continue;
        };
        let y1 = s
            .points
            .iter()
            .min_by(|a, b| a[0].total_cmp(&b[0]))
            .map(|p| p[1])
            .unwrap_or(f64::NAN);
        let per = |b: f64| {
            format!(
                "{} per added {}",
                fmt_value(b, &s.y_unit),
                unit_noun(&s.x_unit)
            )
        };
        let text = match (fit.bend, fit.segments.as_slice()) {
            (Some(k), [l, rr]) => format!(
                "fs.contention {}: {} at the smallest P; two regimes: {} up to P = {k}, then {}.",
                s.name,
                fmt_value(y1, &s.y_unit),
                per(l.1),
                per(rr.1)
            ),
            (_, [l, ..]) => format!(
                "fs.contention {}: {} at the smallest P, growing linearly by {}.",
                s.name,
                fmt_value(y1, &s.y_unit),
                per(l.1)
            ),
            _ => continue,
        };
        out.push(finding(text, vec![reference("fs.contention", &s.name)]));
    }
}

fn unit_noun(u: &str) -> String {
    match u {
        "" | "P" | "processes" | "procs" => "process".into(),
        "threads" => "thread".into(),
        other => other.trim_end_matches('s').into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plateaus_of_a_three_level_curve() {
        let mut pts = Vec::new();
        let mut s = 1024.0;
        while s <= 256.0 * 1024.0 * 1024.0 {
            let y = if s <= 32768.0 {
                1.2
            } else if s <= 65536.0 {
                2.5
            } else if s <= 1048576.0 {
                4.0
            } else if s <= 4.0 * 1048576.0 {
                20.0
            } else {
                90.0
            };
            pts.push([s, y]);
            s *= 2.0;
        }
        let p = plateaus(&pts);
        // 1.2 ns, (one point at 2.5 ns is a climb), 4 ns, 20 ns, 90 ns.
        assert_eq!(p.len(), 4, "{p:?}");
        assert_eq!(p[0].last_size, 32768.0);
        assert_eq!(p[1].last_size, 1048576.0);
        assert_eq!(p[2].last_size, 4.0 * 1048576.0);
        assert_eq!(p[3].latency, 90.0);
    }

    #[test]
    fn knee_finds_the_flat_part() {
        let pts: Vec<[f64; 2]> = (0..12)
            .map(|i| {
                let x = 2f64.powi(i);
                [x, (x * 100.0).min(64.0 * 100.0)]
            })
            .collect();
        let (k, max) = knee(&pts, 0.9).unwrap();
        assert_eq!(k[0], 64.0);
        assert_eq!(max, 6400.0);
        assert!(knee(&[], 0.9).is_none());
    }

    #[test]
    fn piecewise_finds_a_bend() {
        let pts: Vec<[f64; 2]> = (1..=10)
            .map(|p| {
                let p = p as f64;
                [
                    p,
                    if p <= 4.0 {
                        100.0 + 2.0 * p
                    } else {
                        108.0 + 50.0 * (p - 4.0)
                    },
                ]
            })
            .collect();
        let f = piecewise_fit(&pts).unwrap();
        assert_eq!(f.bend, Some(4.0));
        assert!((f.segments[1].1 - 50.0).abs() < 1e-6);
        let line: Vec<[f64; 2]> = (1..=6).map(|p| [p as f64, 3.0 * p as f64]).collect();
        assert_eq!(piecewise_fit(&line).unwrap().bend, None);
        assert!(piecewise_fit(&[[1.0, 1.0]]).is_none());
    }
}
