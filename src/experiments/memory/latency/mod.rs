//! mem.latency: load-to-use latency against working-set size, and the cache levels in it.

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
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Spec};
use crate::results::{Check, Prediction};
use crate::units::{fmt_bytes, fmt_ns};
use kernel::{ChasePoint, Order};
use levels::NamedLevel;
use plan::ChaseSchedule;
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
    // Dependent loads, as the sentinel's chase: one CPU of each kind (runner::per_kind).
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
        let (mut max, cap) = plan::set_and_cap(ctx.machine, ctx.profile, line)?;
        out.notes.push(format!(
            "memory cap {} (working sets up to {} plus a 4-byte-per-node permutation); {}",
            fmt_bytes(cap as f64),
            fmt_bytes(max as f64),
            ctx.machine.memory_budget_text()
        ));
        let rss0 = kit::rss_baseline();
        // The last run ends where the earlier ones did: the pooled `dram` is one set.
        let earlier_end = (ctx.repetition.before.iter())
            .filter_map(|r| r.series.iter().find(|s| s.base_name() == "random"))
            .filter_map(|s| s.points.last().map(|p| p[0] as u64))
            .min();
        if let Some(end) = earlier_end {
            max = end.min(max);
            out.notes.push(format!(
                "the curves go to {}, where the earlier run's ended, so that the pooled dram is one working set",
                fmt_bytes(max as f64)
            ));
        }
        let llc = known_llc.unwrap_or(32 << 20);
        let mut sched = ChaseSchedule::new(ctx, max, line, llc);
        sched.decided = earlier_end.is_some();

        let mut c = measure_base(&mut sched, max, line)?;
        let max = c.random.last().map_or(max, |p| p.size);
        out.check(plan::dram_beyond_cache(max, known_llc));
        c.thp = measure_thp(&mut sched, max, line, &mut out)?;
        out.check(kit::rss_check(rss0, cap));
        sched.report(&mut out);
        if let Some(b) = c.base_huge.filter(|&b| b > 0) {
            out.notes.push(format!(
                "{} of the base-page region was backed by huge pages despite MADV_NOHUGEPAGE",
                fmt_bytes(b as f64)
            ));
        }

        text::plot(&mut out, "random", &c.random);
        for (s, sc) in &c.seq {
            text::plot(&mut out, &format!("sequential_stride_{s}B"), sc);
        }
        if let Some((t, _)) = &c.thp {
            text::plot(&mut out, "random_thp", t);
        }
        if c.random.is_empty() {
            anyhow::bail!("no point of the latency curve could be measured");
        }
        let (named, det_name) = metrics(&sched, &caches, &c, max, &mut out);
        out.pool(ctx);
        findings(ctx, &c, &named, det_name, max, &mut out);
        Ok(out)
    }
}

struct Curves {
    random: Vec<ChasePoint>,
    lmbench: Vec<ChasePoint>,
    seq: Vec<(usize, Vec<ChasePoint>)>,
    /// The random curve on huge pages, and the share of its region they backed.
    thp: Option<(Vec<ChasePoint>, f64)>,
    /// Bytes of the base-page region backed by huge pages anyway.
    base_huge: Option<u64>,
}

impl Curves {
    fn sequential(&self) -> Option<(usize, &ChasePoint)> {
        let (s, c) = self.seq.first()?;
        Some((*s, c.last()?))
    }
}

fn measure_base(s: &mut ChaseSchedule, max: u64, line: usize) -> anyhow::Result<Curves> {
    (s.ctx.progress)("mapping and faulting the working set");
    let mut region = Region::new(max as usize, Pages::Base)?;
    region.prefault();
    let sizes = s.random_sizes.clone();
    let random = s.curve(&mut region, sizes, line, Order::Random, true);
    let max = random.last().map_or(max, |p| p.size);
    let mut seq = Vec::new();
    for stride in s.strides.clone() {
        let sizes = s.seq_sizes(stride, max);
        let c = s.curve(&mut region, sizes, stride, Order::Sequential, false);
        seq.push((stride, c));
    }
    let sizes = plan::lm_sizes(max);
    let lmbench = s.curve(&mut region, sizes, line, Order::Lmbench, false);
    Ok(Curves {
        random,
        lmbench,
        seq,
        thp: None,
        base_huge: region.huge_bytes(),
    })
}

fn measure_thp(
    s: &mut ChaseSchedule,
    max: u64,
    line: usize,
    out: &mut Outcome,
) -> anyhow::Result<Option<(Vec<ChasePoint>, f64)>> {
    let ctx = s.ctx;
    if !s.thp {
        out.notes.push(if !s.plan.thp {
            "smoke profile: no huge-page figure (quick and larger profiles measure one)".into()
        } else {
            "transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): no huge-page figure".into()
        });
        return Ok(None);
    }
    if let Some(why) = kit::too_small_for_huge_pages(ctx.machine, max as usize) {
        out.notes.push(format!("no huge-page figure: {why}"));
        return Ok(None);
    }
    (ctx.progress)("huge-page region");
    let huge = kit::huge_page(ctx.machine);
    let mut region = Region::aligned(max as usize, Pages::Huge, huge)?;
    region.prefault();
    let frac = region.huge_bytes().unwrap_or(0) as f64 / max as f64;
    let c = s.curve(&mut region, s.thp_sizes(max), line, Order::Random, false);
    Ok(Some((c, frac)))
}

/// The lmbench-layout metric at `size`: `lmbench_dram` at the largest size past 1 MiB.
fn lmbench_name(size: u64, max: u64) -> String {
    if size == max && size > 1 << 20 {
        "lmbench_dram".to_string()
    } else {
        format!("lmbench_{}", kit::size_label(size))
    }
}

/// Returns the levels and the name of the curve they come from.
fn metrics(
    s: &ChaseSchedule,
    caches: &[crate::machine::Cache],
    c: &Curves,
    max: u64,
    out: &mut Outcome,
) -> (Vec<NamedLevel>, &'static str) {
    // Levels from the huge-page curve where it can: its TLB reach passes every cache.
    let (det, det_name) = match &c.thp {
        Some((t, f)) if *f >= 0.5 && t.len() == c.random.len() => (t, "huge-page"),
        _ => (&c.random, "base-page"),
    };
    let pts: Vec<(u64, f64)> = det.iter().map(|p| (p.size, p.median())).collect();
    let levels = detect_levels(&pts, (s.plan.per_doubling as usize).clamp(2, 3));
    let named = name_levels(&levels, caches, max, s.ctx.machine.virtualization.is_vm);
    if det_name == "base-page" && s.thp {
        out.notes.push("the levels come from the base-page curve (the huge-page curve did not cover it or huge pages backed under half of its region): the cache predictions, stated as points for huge pages, leave out page walks, so read them as lower bounds".into());
    }
    // The dram metrics below are the largest size, on both page sizes.
    for nl in named.iter().filter(|n| n.name != "dram") {
        if nl.widened {
            let t = nl.level.transition.unwrap_or(0);
            let s = nl.sysfs_bytes.unwrap_or(1);
            out.notes.push(format!(
                "{} is named for the last-level cache although its transition, {}, is {:.2}x the sysfs size, below the 1/4 that names a level elsewhere: in a VM the guest may get only its share of the host's cache",
                nl.name,
                fmt_bytes(t as f64),
                t as f64 / s as f64
            ));
        }
        let span = text::level_span(nl, det_name);
        point(out, &nl.name, &det[nl.level.rep], |at| {
            format!("random chase at {at} ({span})")
        });
    }
    let last = c.random.last().expect("checked non-empty");
    point(out, "dram", last, |at| {
        format!("random chase at the largest size, {at}, base pages")
    });
    for pt in &c.lmbench {
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
    if let Some((pt, frac)) = c.thp.as_ref().and_then(|(t, f)| Some((t.last()?, *f))) {
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
    }
    (named, det_name)
}

fn point(out: &mut Outcome, name: &str, pt: &ChasePoint, what: impl Fn(String) -> String) {
    let what = what(fmt_bytes(pt.size as f64));
    out.metric(name, "ns", &what, pt.trials.clone());
}

/// The findings, from the pooled metrics (the levels' sizes from this run's curve).
fn findings(
    ctx: &Context,
    c: &Curves,
    named: &[NamedLevel],
    det_name: &str,
    max: u64,
    out: &mut Outcome,
) {
    if c.lmbench.iter().any(|p| p.size == max) {
        let lm = out.median(&lmbench_name(max, max));
        let t = text::lmbench_vs_chase(max, lm, out.median("dram"));
        out.finding(t, &["lmbench_dram", "dram"]);
    }
    let line = |nl: &NamedLevel| {
        let span = text::level_span(nl, det_name);
        format!("{} {}: {span}", nl.name, fmt_ns(out.median(&nl.name)))
    };
    let lines: Vec<String> = named.iter().map(line).collect();
    let rep = ctx.repetition;
    let which = match rep.of {
        0 | 1 => String::new(),
        n => format!(" of run {} of {n}; latencies from all runs", rep.index + 1),
    };
    let names = named.iter().map(|n| n.name.as_str());
    let from: Vec<&str> = names.filter(|&n| n != "dram").collect();
    let lines = lines.join("; ");
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
    let thp = c.thp.as_ref().and_then(|(t, _)| t.last());
    if let (Some(pt), Some(_)) = (thp, out.get("dram_thp")) {
        out.finding(text::huge_vs_base(pt.size, out), &["dram", "dram_thp"]);
    }
}

/// dram_sequential's description; mem.bandwidth reads the size back from it (the size
/// after the last " at ") to tell a chase the cache holds from one of memory.
pub(crate) fn sequential_description(stride: impl std::fmt::Display, at: &str) -> String {
    format!("sequential chase, stride {stride} B, at {at} (address order)")
}
