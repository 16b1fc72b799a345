//! fs.contention's series, model and finding.

use super::*;
use crate::analysis::Model;
use crate::units::fmt_ns;

pub(super) fn report(ctx: &Context, out: &mut Outcome, m: &Readers) {
    let medians: Vec<(f64, f64)> = m
        .per_p
        .iter()
        .map(|(p, v)| (*p as f64, crate::stats::median(v)))
        .collect();
    let points = medians.iter().map(|&(x, y)| [x, y]).collect();
    out.plot("per_block_vs_processes", "processes", "ns", points);
    let aggregate = "aggregate_blocks_per_s_vs_processes";
    out.plot(aggregate, "processes", "1/s", m.aggregate.clone());
    if let Some((_, v)) = m.per_p.first() {
        let desc = "time per 4 KiB block, one process alone (one value per round)";
        out.metric("per_block_p1", "ns", desc, v.clone());
    }
    if let Some((p, v)) = m.per_p.last() {
        let desc = format!(
            "time per 4 KiB block with P = {p} processes (one value per process and round)"
        );
        out.metric("per_block_pmax", "ns", &desc, v.clone());
    }
    match fit(&medians) {
        Some(model) => report_model(ctx, out, &model, &medians, m.order.len()),
        None => out.pool(ctx),
    }
}

/// The fitted model's metrics: intercept and slope, then the bend's where it bends.
const MODEL: [(&str, &str, &str); 4] = [
    (
        "model_intercept",
        "ns",
        "fitted per-block time at P = 0 (the model's constant)",
    ),
    (
        "model_slope",
        "ns",
        "fitted added per-block time per extra process (first segment)",
    ),
    (
        "model_breakpoint",
        "processes",
        "P where the fitted line bends",
    ),
    (
        "model_slope_after",
        "ns",
        "fitted added per-block time per extra process beyond the breakpoint",
    ),
];

/// The model and the end points as the table shows them: each its metric's pooled median.
fn pooled_model(out: &Outcome, m: &Model, medians: &[(f64, f64)]) -> (Model, Vec<(f64, f64)>) {
    let or = |name: &str, v: f64| out.get(name).map_or(v, |x| x.summary.median);
    let mut model = m.clone();
    model.intercept = or("model_intercept", m.intercept);
    model.slope = or("model_slope", m.slope);
    model.bend = m
        .bend
        .map(|(b, s)| (or("model_breakpoint", b), or("model_slope_after", s)));
    let mut ends = medians.to_vec();
    if let Some(first) = ends.first_mut() {
        first.1 = or("per_block_p1", first.1);
    }
    if let Some(last) = ends.last_mut() {
        last.1 = or("per_block_pmax", last.1);
    }
    (model, ends)
}

fn report_model(ctx: &Context, out: &mut Outcome, m: &Model, medians: &[(f64, f64)], cpus: usize) {
    let bend = m.bend.map_or(vec![], |(b, s2)| vec![b, s2]);
    for ((name, unit, desc), v) in MODEL
        .iter()
        .zip([m.intercept, m.slope].into_iter().chain(bend))
    {
        out.metric(name, unit, desc, vec![v]);
    }
    let points = medians.iter().map(|&(x, _)| [x, m.eval(x)]).collect();
    out.plot("model_per_block_vs_processes", "processes", "ns", points);
    let failed = out
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str());
    let withheld = Some(failed.collect::<Vec<_>>().join("; ")).filter(|f| !f.is_empty());
    out.pool(ctx);
    let (m, medians) = &pooled_model(out, m, medians);
    let t1 = medians.first().map(|p| p.1).unwrap_or(f64::NAN);
    let (pl, tl) = medians.last().copied().unwrap_or((1.0, f64::NAN));
    let [a, k, t1s, tls] = [m.intercept, m.slope, t1, tl].map(fmt_ns);
    let shape = match m.bend {
        Some((b, s2)) => format!(
            "is {a} + {k} x P up to P = {b:.0}, then rises {} per extra process",
            fmt_ns(s2)
        ),
        None => format!("grows linearly, {a} + {k} x P"),
    };
    let ratio = tl / t1;
    let mut text = format!("Per-block time {shape}; with {pl:.0} readers each block takes {tls} ({ratio:.1}x one reader's {t1s}).");
    let vm = ctx.machine.virtualization.is_vm;
    text.push_str(&overlap_text(medians, cpus, vm, withheld.as_deref()));
    out.finding(text, &["per_block_p1", "per_block_pmax", "model_slope"]);
}

/// The requests served at once, P x t(1) / t(P), at the largest P with a CPU per reader.
pub(super) fn overlap_text(
    medians: &[(f64, f64)],
    cpus: usize,
    vm: bool,
    withheld: Option<&str>,
) -> String {
    if let Some(why) = withheld {
        return format!(" No overlap of requests is estimated: the check(s) {why} did not pass.");
    }
    let t1 = medians.first().map_or(f64::NAN, |p| p.1);
    let Some(&(pc, tc)) = medians.iter().rfind(|(p, _)| *p > 1.0 && *p <= cpus as f64) else {
        return format!(
            " No overlap of requests is estimated: with {cpus} CPU(s) for the readers, every P above 1 shares a CPU."
        );
    };
    let parallel = pc * t1 / tc;
    if !parallel.is_finite() {
        return String::new();
    }
    let shared = medians.last().is_some_and(|&(pl, _)| pl > pc);
    let beyond = if shared {
        format!(" Beyond P = {pc:.0} readers share the {cpus} CPUs, so those points include waiting for a CPU.")
    } else {
        String::new()
    };
    let n = parallel.min(pc);
    let (who, why) = match vm {
        true => (
            "host",
            "; in a VM that may be its I/O threads or page cache overlapping them, not its device",
        ),
        false => ("device", ""),
    };
    if parallel > pc * 1.05 {
        format!(
            " With {pc:.0} readers, each on its own CPU, each block took less time than with one ({:.2}x), which a device serving requests side by side at a fixed speed cannot do: a cache served some reads, or the device (or the CPU's clock) was faster under load, so no overlap is estimated.{beyond}",
            tc / t1
        )
    } else {
        format!(
            " With {pc:.0} readers, each on its own CPU, the {who} serves about {n:.1} of their {pc:.0} requests at once (P x t(1) / t(P)){why}.{beyond}"
        )
    }
}
