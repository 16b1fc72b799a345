//! mem.latency: load-to-use latency against working-set size, with the cache levels
//! derived from the curve.

mod checks;
mod kernel;
mod levels;
pub(super) mod plan;
mod predict;
#[cfg(test)]
mod tests;
mod text;

use crate::analysis::detect_levels;
pub use kernel::lmbench_chain;
use levels::name_levels;

use crate::experiments::kit::{self, Pages, Region};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Profile, Spec};
use crate::results::{Check, Prediction};
use crate::units::{fmt_bytes, fmt_ns};
use kernel::{ChaseCurve, ChasePoint, Order};
use levels::NamedLevel;
use plan::{ChaseSchedule, LatencyPlan, PLANS};
/// The verified chase, shared with mem.loaded-latency (one kernel, one premise).
pub(crate) use {
    checks::verify_chain,
    kernel::{chase, lay, UNROLL},
};

pub(crate) struct Latency;

const SPEC: Spec = Spec {
    id: "mem.latency",
    title: "Memory load latency by working-set size",
    description: "pointer chase over a random single cycle (Sattolo) from 1 KiB to as far as the memory cap and time budget reach; cache levels detected; sequential-stride curves; huge pages",
    method: crate::method!("mem.latency"),
    // Dependent loads, as the sentinel's chase; one CPU of each kind of core on hybrid
    // CPUs (runner::per_kind).
    per_core_kind: true,
    budget: Some(PerProfile::new(ms(900), ms(5_500), ms(90_000), ms(300_000))),
    ..Spec::MEMORY
};

impl Experiment for Latency {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict::predict(ctx)
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let caches = ctx.machine.data_caches();
        let line = kit::line_bytes(&caches);
        let known_llc = kit::llc_bytes(&caches);
        let p = PLANS.get(ctx.profile);
        let (max, cap) = plan::set_and_cap(ctx.machine, ctx.profile, line)?;
        out.notes.push(format!(
            "memory cap {} (working sets up to {} plus a 4-byte-per-node permutation); {}",
            fmt_bytes(cap as f64),
            fmt_bytes(max as f64),
            ctx.machine.memory_budget_text()
        ));
        let rss0 = kit::rss_baseline();
        // The last run ends where the earlier ones did, so that the pooled `dram` is one
        // working set; the first run's budget decided it.
        let earlier_end = ctx
            .repetition
            .before
            .iter()
            .filter_map(|r| r.series.iter().find(|s| s.base_name() == "random"))
            .filter_map(|s| s.points.last().map(|p| p[0] as u64))
            .min();
        let max = earlier_end.map_or(max, |e| e.min(max));
        if earlier_end.is_some() {
            out.notes.push(format!(
                "the curves go to {}, where the earlier run's ended, so that the pooled dram is one working set",
                fmt_bytes(max as f64)
            ));
        }
        let mut sched = ChaseSchedule::new(ctx, &p, max, line, known_llc.unwrap_or(32 << 20));
        sched.decided = earlier_end.is_some();

        let mut c = measure_base(&mut sched, max, line)?;
        let max = c.random.points.last().map_or(max, |p| p.size);
        out.check(plan::dram_beyond_cache(max, known_llc));
        c.thp = measure_thp(&mut sched, max, line, &mut out)?;
        out.check(kit::rss_check(rss0, cap));
        notes(&c, &mut out);

        c.random.plot(&mut out, "random");
        for (s, sc) in &c.seq {
            sc.plot(&mut out, &format!("sequential_stride_{s}B"));
        }
        if let Some((t, _)) = c.thp.as_ref().filter(|_| p.thp_curve) {
            t.plot(&mut out, "random_thp");
        }
        if c.random.points.is_empty() {
            anyhow::bail!("no point of the latency curve could be measured");
        }
        let (named, det_name) = metrics(ctx, &p, &caches, &c, max, &mut out);
        // Findings from the pooled runs: the figures the table shows.
        out.pool(ctx);
        findings(ctx, &c, named, det_name, max, &mut out);
        Ok(out)
    }
}

/// Every curve of one run.
struct Curves {
    random: ChaseCurve,
    lmbench: ChaseCurve,
    seq: Vec<(usize, ChaseCurve)>,
    /// The random curve on huge pages, and the share of its region they backed.
    thp: Option<(ChaseCurve, f64)>,
    /// Bytes of the base-page region backed by huge pages anyway.
    base_huge: Option<u64>,
}

impl Curves {
    /// The first sequential curve's largest point, and its stride.
    fn sequential(&self) -> Option<(usize, &ChasePoint)> {
        let (s, c) = self.seq.first()?;
        Some((*s, c.points.last()?))
    }
}

/// The random curve as far as the budget allows (every curve then ends there), the
/// sequential curves and lmbench's layout.
fn measure_base(s: &mut ChaseSchedule, max: u64, line: usize) -> anyhow::Result<Curves> {
    (s.ctx.progress)("mapping and faulting the working set");
    let mut region = Region::new(max as usize, Pages::Base)?;
    region.prefault();
    let sizes = s.random_sizes.clone();
    let random = s.curve(&mut region, sizes, line, Order::Random, true);
    if let Some(last) = random.points.last() {
        s.truncate(last.size);
    }
    let mut seq = Vec::new();
    for stride in s.strides.clone() {
        let sz = s.seq_sizes.iter().copied();
        let sz = sz.filter(|&z| z >= 2 * stride as u64).collect();
        let c = s.curve(&mut region, sz, stride, Order::Sequential, false);
        seq.push((stride, c));
    }
    let sizes = s.lm_sizes.clone();
    let lmbench = s.curve(&mut region, sizes, line, Order::Lmbench, false);
    Ok(Curves {
        random,
        lmbench,
        seq,
        thp: None,
        base_huge: region.huge_bytes(),
    })
}

/// Huge pages: the whole random curve (quick and up) or its largest size (not smoke),
/// with the fraction of the region huge pages backed.
fn measure_thp(
    s: &mut ChaseSchedule,
    max: u64,
    line: usize,
    out: &mut Outcome,
) -> anyhow::Result<Option<(ChaseCurve, f64)>> {
    let ctx = s.ctx;
    if s.thp {
        if let Some(why) = kit::too_small_for_huge_pages(ctx.machine, max as usize) {
            out.notes.push(format!("no huge-page figure: {why}"));
            return Ok(None);
        }
        (ctx.progress)("huge-page region");
        let huge = kit::huge_page(ctx.machine);
        let mut region = Region::aligned(max as usize, Pages::Huge, huge)?;
        region.prefault();
        let frac = region.huge_bytes().unwrap_or(0) as f64 / max as f64;
        let sz = if s.thp_curve {
            s.random_sizes.clone()
        } else {
            vec![max]
        };
        let c = s.curve(&mut region, sz, line, Order::Random, false);
        return Ok(Some((c, frac)));
    }
    out.notes.push(if ctx.profile == Profile::Smoke {
        "smoke profile: no huge-page figure (quick and larger profiles measure one)".into()
    } else {
        "transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): no huge-page figure".into()
    });
    Ok(None)
}

/// The notes on verified chains, preempted trials, remeasured points and stray huge pages.
fn notes(c: &Curves, out: &mut Outcome) {
    let curves = || {
        [&c.random, &c.lmbench]
            .into_iter()
            .chain(c.seq.iter().map(|(_, s)| s))
            .chain(c.thp.as_ref().map(|(t, _)| t))
    };
    let broken: Vec<u64> = curves().flat_map(|c| c.broken.iter().copied()).collect();
    let chains = curves().map(|c| c.points.len()).sum::<usize>();
    out.notes.push(checks::chains_note(&broken, chains));
    out.notes.extend(c.random.notes.iter().cloned());
    // Which points of the other curves were measured twice, and their figures.
    for c in curves().skip(1) {
        let twice = c.notes.iter().filter(|n| n.contains(": measured twice"));
        out.notes.extend(twice.cloned());
    }
    let (pre, kept, again) = curves().fold((0, 0, 0), |a, c| {
        (a.0 + c.preempted, a.1 + c.kept, a.2 + c.remeasured)
    });
    out.notes.push(format!(
        "{pre} trials were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed trials kept; {again} points slower than the next larger size were measured again (both measurements kept: each such point is the median of all its trials)"
    ));
    if let Some(b) = c.base_huge.filter(|&b| b > 0) {
        out.notes.push(format!(
            "{} of the base-page region was backed by huge pages despite MADV_NOHUGEPAGE",
            fmt_bytes(b as f64)
        ));
    }
}

/// The lmbench-layout metric at `size`: `lmbench_dram` at the largest size past 1 MiB.
fn lmbench_name(size: u64, max: u64) -> String {
    if size == max && size > 1 << 20 {
        "lmbench_dram".to_string()
    } else {
        format!("lmbench_{}", kit::size_label(size))
    }
}

/// The metrics and the sanity checks of the levels and the huge pages; returns the levels
/// and the curve they were found on.
fn metrics(
    ctx: &Context,
    p: &LatencyPlan,
    caches: &[crate::machine::Cache],
    c: &Curves,
    max: u64,
    out: &mut Outcome,
) -> (Vec<NamedLevel>, &'static str) {
    // Levels: from the huge-page curve where it exists (TLB reach then exceeds every
    // cache, so plateaus are cache capacities), else from the base-page curve.
    let (det, det_name) = match &c.thp {
        Some((t, f)) if *f >= 0.5 && p.thp_curve && t.points.len() == c.random.points.len() => {
            (&t.points, "huge-page")
        }
        _ => (&c.random.points, "base-page"),
    };
    let pts: Vec<(u64, f64)> = det.iter().map(|p| (p.size, p.median())).collect();
    let levels = detect_levels(&pts, (p.per_doubling as usize).clamp(2, 3));
    let named = name_levels(&levels, caches, max, ctx.machine.virtualization.is_vm);
    if det_name == "base-page" && plan::huge_page_levels(ctx.machine, ctx.profile) {
        out.notes.push("the levels come from the base-page curve (the huge-page curve did not cover it or huge pages backed under half of its region): the cache predictions, stated as points for huge pages, leave out page walks, so read them as lower bounds".into());
    }
    for nl in named.iter().filter(|n| n.widened) {
        let t = nl.level.transition.unwrap_or(0);
        let s = nl.sysfs_bytes.unwrap_or(1);
        out.notes.push(format!(
            "{} is named for the last-level cache although its transition, {}, is {:.2}x the sysfs size, below the 1/4 that names a level elsewhere: in a VM the guest may get only its share of the host's cache",
            nl.name,
            fmt_bytes(t as f64),
            t as f64 / s as f64
        ));
    }
    // The dram metrics below are the largest size, on both page sizes.
    for nl in named.iter().filter(|n| n.name != "dram") {
        let pt = &det[nl.level.rep];
        let span = text::level_span(nl, det_name);
        point(out, &nl.name, pt, |at| {
            format!("random chase at {at} ({span})")
        });
    }
    let last = c.random.points.last().expect("checked non-empty");
    point(out, "dram", last, |at| {
        format!("random chase at the largest size, {at}, base pages")
    });
    for pt in &c.lmbench.points {
        point(out, &lmbench_name(pt.size, max), pt, |at| {
            format!("lat_mem_rd -t layout at {at}, base pages: pages in random order, one line per page per pass (compare its min with lat_mem_rd, which reports the minimum)")
        });
    }
    out.check(checks::levels(&named, caches.len()));
    // Sequential at the largest size: what the prefetcher hides.
    if let Some((s, pt)) = c.sequential() {
        point(out, "dram_sequential", pt, |at| {
            sequential_description(s, &at)
        });
    }
    let Some((pt, frac)) = c
        .thp
        .as_ref()
        .and_then(|(t, f)| Some((t.points.last()?, *f)))
    else {
        return (named, det_name);
    };
    out.check(Check::sanity(
        "huge pages back the huge-page region",
        frac >= 0.5,
        format!(
            "{:.0}% of {} backed by transparent huge pages (AnonHugePages in /proc/self/smaps)",
            frac * 100.0,
            fmt_bytes(max as f64)
        ),
    ));
    if frac >= 0.5 {
        let backed = frac * 100.0;
        point(out, "dram_thp", pt, |at| {
            format!("random chase at {at} with transparent huge pages ({backed:.0}% backed)")
        });
    } else {
        out.notes.push("the kernel did not provide huge pages for most of the region (fragmented memory or THP defrag policy): no huge-page figure".into());
    }
    (named, det_name)
}

/// Adds `pt` as metric `name`, described by `what` of its size.
fn point(out: &mut Outcome, name: &str, pt: &ChasePoint, what: impl Fn(String) -> String) {
    let what = what(fmt_bytes(pt.size as f64));
    out.metric(name, "ns", &what, pt.trials.clone());
}

/// The findings, from the pooled metrics; which sizes the levels span comes from the
/// detection on this run's curve, and the text says so.
fn findings(
    ctx: &Context,
    c: &Curves,
    mut named: Vec<NamedLevel>,
    det_name: &str,
    max: u64,
    out: &mut Outcome,
) {
    if c.lmbench.points.iter().any(|p| p.size == max) {
        let lm = out.median(&lmbench_name(max, max));
        let t = text::lmbench_vs_chase(max, lm, out.median("dram"));
        out.finding(t, &["lmbench_dram", "dram"]);
    }
    // Each level's latency is its metric's (pooled) median.
    for nl in &mut named {
        if let Some(m) = out.get(&nl.name) {
            nl.level.latency_ns = m.summary.median;
        }
    }
    let lines: Vec<String> = named
        .iter()
        .map(|nl| {
            let (lat, span) = (fmt_ns(nl.level.latency_ns), text::level_span(nl, det_name));
            format!("{} {lat}: {span}", nl.name)
        })
        .collect();
    let lines = lines.join("; ");
    let rep = ctx.repetition;
    let which = match rep.of {
        0 | 1 => String::new(),
        n => format!(" of run {} of {n}; latencies from all runs", rep.index + 1),
    };
    let from: Vec<&str> = named
        .iter()
        .filter(|n| n.name != "dram")
        .map(|n| n.name.as_str())
        .collect();
    let t = format!("Detected levels ({det_name} random curve{which}): {lines}.");
    out.finding(t, &from);
    for nl in named.iter().filter(|n| n.sysfs_bytes.is_some()) {
        // A level much smaller (or larger) than sysfs says is what matters most here.
        let (t, salience) = text::size_vs_sysfs(nl);
        out.finding_salient(t, &[nl.name.as_str()], salience);
    }
    if let Some((stride, pt)) = c.sequential() {
        let t = text::sequential_vs_random(stride, pt.size, out);
        out.finding(t, &["dram_sequential", "dram"]);
    }
    let thp = c.thp.as_ref().and_then(|(t, _)| t.points.last());
    if let (Some(pt), Some(_)) = (thp, out.get("dram_thp")) {
        out.finding(text::huge_vs_base(pt.size, out), &["dram", "dram_thp"]);
    }
}

/// dram_sequential's description; mem.bandwidth reads the size back from it (the size
/// after the last " at ") to tell a chase the cache holds from one of memory.
pub(crate) fn sequential_description(stride: impl std::fmt::Display, at: &str) -> String {
    format!("sequential chase, stride {stride} B, at {at} (address order)")
}
