//! mem.latency: load-to-use latency against working-set size, with the cache levels
//! derived from the curve.
//!
//! Split along its seams: `plan` (sizes and trial settings per profile), `kernel` (laying
//! and chasing chains, curves), `checks` (the one-cycle premise and level sanity),
//! `levels` (naming plateaus against sysfs), `predict` and `text` (series, findings).

mod checks;
mod kernel;
mod levels;
pub(super) mod plan;
mod predict;
#[cfg(test)]
mod tests;
mod text;

pub(crate) use crate::analysis::detect_levels;
pub use kernel::{lmbench_chain, ChasePoint};
pub(crate) use levels::{llc_hit_fraction, name_levels};
#[cfg(test)]
use plan::sizes;

use crate::experiments::kit::{Pages, Region};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Profile, Spec};
use crate::results::{Check, Prediction};
use crate::rng::Rng;
use crate::units::fmt_bytes;
use kernel::{curve, lmbench_point, ChaseCurve};
use plan::{plan, working_set, ChaseSchedule, LatencyPlan};
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
        let line = crate::experiments::kit::line_bytes(&caches);
        let known_llc = crate::experiments::kit::llc_bytes(&caches);
        let llc = known_llc.unwrap_or(32 << 20);
        let p = plan(ctx.profile, line);
        let (max, cap) = working_set(ctx, line, &mut out)?;
        let rss0 = crate::experiments::kit::rss_baseline();
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
        let mut sched = ChaseSchedule::new(ctx, &p, max, line, llc);
        sched.decided = earlier_end.is_some();
        let mut rng = Rng::from_entropy();

        let base = measure_base(ctx, &mut sched, max, line, &mut rng)?;
        let max = base.random.points.last().map_or(max, |p| p.size);
        out.check(plan::dram_beyond_cache(max, known_llc));
        let thp_curve = measure_thp(ctx, &sched, max, line, &mut rng, &mut out)?;
        out.check(crate::experiments::kit::rss_check(rss0, cap));
        premise_and_notes(&base, thp_curve.as_ref(), &mut out);

        out.series.push(text::series("random", &base.random.points));
        for (s, c) in &base.seq_curves {
            out.series
                .push(text::series(&format!("sequential_stride_{s}B"), &c.points));
        }
        if let Some((c, _)) = &thp_curve {
            if p.thp_curve {
                out.series.push(text::series("random_thp", &c.points));
            }
        }
        if base.random.points.is_empty() {
            anyhow::bail!("no point of the latency curve could be measured");
        }
        let levels = levels_and_memory(&p, &caches, &base, thp_curve.as_ref(), max, &mut out);
        let seq = sequential(&base, &mut out);
        let thp = huge_pages(thp_curve.as_ref(), max, &mut out);
        // Findings from the pooled runs: the figures the table shows.
        out.pool(ctx);
        levels_findings(ctx, &base, levels, &mut out);
        let random = base.random.points.last().map(|r| pooled(r, "dram", &out));
        if let (Some((s, pt)), Some(random)) = (seq, random.as_ref()) {
            let pt = pooled(pt, "dram_sequential", &out);
            out.finding(
                text::sequential_vs_random(s, &pt, random),
                &["dram_sequential", "dram"],
            );
        }
        if let (Some(pt), Some(random)) = (thp, random.as_ref()) {
            let pt = pooled(pt, "dram_thp", &out);
            out.finding(text::huge_vs_base(&pt, random), &["dram", "dram_thp"]);
        }
        Ok(out)
    }
}

/// The curves measured in the base-page region.
struct BaseCurves {
    random: ChaseCurve,
    /// (stride, curve) per sequential stride.
    seq_curves: Vec<(usize, ChaseCurve)>,
    lm_points: Vec<kernel::ChasePoint>,
    lm_broken: Vec<u64>,
    /// Trials set aside (preempted) and kept by the lmbench-layout points.
    lm_quiet: (usize, usize),
    /// Bytes of the base-page region backed by huge pages anyway.
    base_huge: Option<u64>,
}

/// The random curve as far as the budget allows (the schedule then ends every curve
/// where it stopped), the sequential curves and lmbench's layout.
fn measure_base(
    ctx: &Context,
    s: &mut ChaseSchedule,
    max: u64,
    line: usize,
    rng: &mut Rng,
) -> anyhow::Result<BaseCurves> {
    (ctx.progress)("mapping and faulting the working set");
    let mut region = Region::new(max as usize, Pages::Base)?;
    region.prefault();
    let fits = |size, rate| s.fits(size, rate);
    let random = curve(
        ctx,
        &s.spec,
        &mut region,
        &s.random_sizes,
        line,
        true,
        rng,
        &fits,
    );
    if let Some(last) = random.points.last() {
        s.truncate(last.size);
    }
    let all = |_, _| true;
    let mut seq_curves = Vec::new();
    for &stride in &s.strides {
        let sz: Vec<u64> = s
            .seq_sizes
            .iter()
            .copied()
            .filter(|&z| z >= 2 * stride as u64)
            .collect();
        seq_curves.push((
            stride,
            curve(ctx, &s.spec, &mut region, &sz, stride, false, rng, &all),
        ));
    }
    let mut lm_broken = Vec::new();
    let mut lm_quiet = (0usize, 0usize);
    let lm_points: Vec<kernel::ChasePoint> = s
        .lm_sizes
        .iter()
        .filter_map(|&size| {
            lmbench_point(
                ctx,
                s.spec.for_size(size),
                &mut region,
                size,
                line,
                rng,
                &mut lm_broken,
                &mut lm_quiet,
            )
        })
        .collect();
    let base_huge = region.huge_bytes();
    Ok(BaseCurves {
        random,
        seq_curves,
        lm_points,
        lm_broken,
        lm_quiet,
        base_huge,
    })
}

/// Huge pages: the whole random curve (quick and up) or its largest size (not smoke),
/// with the fraction of the region huge pages backed.
fn measure_thp(
    ctx: &Context,
    s: &ChaseSchedule,
    max: u64,
    line: usize,
    rng: &mut Rng,
    out: &mut Outcome,
) -> anyhow::Result<Option<(ChaseCurve, f64)>> {
    if s.thp {
        if let Some(why) =
            crate::experiments::kit::too_small_for_huge_pages(ctx.machine, max as usize)
        {
            out.notes.push(format!("no huge-page figure: {why}"));
            return Ok(None);
        }
        (ctx.progress)("huge-page region");
        let huge = crate::experiments::kit::huge_page(ctx.machine);
        let mut region = Region::aligned(max as usize, Pages::Huge, huge)?;
        region.prefault();
        let frac = region.huge_bytes().unwrap_or(0) as f64 / max as f64;
        let sz = if s.thp_curve {
            s.random_sizes.clone()
        } else {
            vec![max]
        };
        let c = curve(ctx, &s.spec, &mut region, &sz, line, true, rng, &|_, _| {
            true
        });
        return Ok(Some((c, frac)));
    }
    if ctx.profile == Profile::Smoke {
        out.notes.push(
            "smoke profile: no huge-page figure (quick and larger profiles measure one)".into(),
        );
    } else {
        out.notes.push(
            "transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): no huge-page figure".into(),
        );
    }
    Ok(None)
}

/// The notes on verified chains, preempted trials, remeasured points and stray huge pages.
fn premise_and_notes(base: &BaseCurves, thp_curve: Option<&(ChaseCurve, f64)>, out: &mut Outcome) {
    let curves = || {
        std::iter::once(&base.random)
            .chain(base.seq_curves.iter().map(|(_, c)| c))
            .chain(thp_curve.map(|(c, _)| c))
    };
    let mut broken: Vec<u64> = base.random.broken.clone();
    broken.extend(&base.lm_broken);
    broken.extend(
        base.seq_curves
            .iter()
            .flat_map(|(_, c)| c.broken.iter().copied()),
    );
    if let Some((c, _)) = thp_curve {
        broken.extend(c.broken.iter().copied());
    }
    let chains = curves().map(|c| c.points.len()).sum::<usize>() + base.lm_points.len();
    out.notes.push(checks::chains_note(&broken, chains));
    out.notes.extend(base.random.notes.iter().cloned());
    // Which points of the other curves were measured twice, and their figures.
    for c in curves().skip(1) {
        out.notes.extend(
            c.notes
                .iter()
                .filter(|n| n.contains(": measured twice"))
                .cloned(),
        );
    }
    let (pre, kept, again) = curves().fold((base.lm_quiet.0, base.lm_quiet.1, 0), |a, c| {
        (a.0 + c.preempted, a.1 + c.kept, a.2 + c.remeasured)
    });
    out.notes.push(format!(
        "{pre} trials were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed trials kept; {again} points slower than the next larger size were measured again (both measurements kept: each such point is the median of all its trials)"
    ));
    if let Some(b) = base.base_huge.filter(|&b| b > 0) {
        out.notes.push(format!(
            "{} of the base-page region was backed by huge pages despite MADV_NOHUGEPAGE",
            fmt_bytes(b as f64)
        ));
    }
}

/// The cache levels (metrics named after the sysfs caches they match), `dram` and the
/// lmbench-layout figures, with their findings and sanity checks.
fn levels_and_memory(
    p: &LatencyPlan,
    caches: &[crate::machine::Cache],
    base: &BaseCurves,
    thp_curve: Option<&(ChaseCurve, f64)>,
    max: u64,
    out: &mut Outcome,
) -> DetectedLevels {
    let random = &base.random;
    // Levels: from the huge-page curve where it exists (TLB reach then exceeds every
    // cache, so plateaus are cache capacities), else from the base-page curve.
    let thp_ok = thp_curve
        .is_some_and(|(c, f)| *f >= 0.5 && p.thp_curve && c.points.len() == random.points.len());
    let (det, det_name) = match (thp_curve, thp_ok) {
        (Some((c, _)), true) => (&c.points, "huge-page"),
        _ => (&random.points, "base-page"),
    };
    let pts: Vec<(u64, f64)> = det.iter().map(|p| (p.size, p.median)).collect();
    let min_points = (p.per_doubling as usize).clamp(2, 3);
    let levels = detect_levels(&pts, min_points);
    let named = name_levels(&levels, caches, max);
    let mut level_text = Vec::new();
    for nl in &named {
        let t = text::level_text(nl, det_name);
        level_text.push(t.line);
        if nl.name == "dram" {
            continue; // the dram metrics below are the largest size, on both page sizes
        }
        let pt = &det[nl.level.rep];
        out.metric(
            &nl.name,
            "ns",
            &format!(
                "random chase at {} ({}{}{})",
                fmt_bytes(pt.size as f64),
                t.plateau,
                t.edge,
                t.sys
            ),
            pt.trials.clone(),
        );
    }
    let last = random.points.last().expect("checked non-empty");
    out.metric(
        "dram",
        "ns",
        &format!(
            "random chase at the largest size, {}, base pages",
            fmt_bytes(last.size as f64)
        ),
        last.trials.clone(),
    );
    for pt in &base.lm_points {
        let name = if pt.size == max && pt.size > 1 << 20 {
            "lmbench_dram".to_string()
        } else {
            format!("lmbench_{}", crate::experiments::kit::size_label(pt.size))
        };
        out.metric(
            &name,
            "ns",
            &format!(
                "lat_mem_rd -t layout at {}, base pages: pages in random order, one line per page per pass (compare its min with lat_mem_rd, which reports the minimum)",
                fmt_bytes(pt.size as f64)
            ),
            pt.trials.clone(),
        );
    }
    out.check(checks::levels(&named, caches.len()));
    DetectedLevels { named, det_name }
}

/// The levels detected on one run's curve, for the findings stated after pooling.
struct DetectedLevels {
    named: Vec<levels::NamedLevel>,
    det_name: &'static str,
}

/// `pt` with the pooled figure of its metric (`name`) when there is one: the median and
/// trials the table shows.
fn pooled(pt: &kernel::ChasePoint, name: &str, out: &Outcome) -> kernel::ChasePoint {
    match out.get(name) {
        Some(m) => kernel::ChasePoint {
            size: pt.size,
            trials: m.raw.clone(),
            median: m.summary.median,
        },
        None => pt.clone(),
    }
}

/// The lmbench-layout and levels findings, from the pooled metrics; which sizes the
/// levels span comes from the detection on this run's curve, and the text says so.
fn levels_findings(ctx: &Context, base: &BaseCurves, lv: DetectedLevels, out: &mut Outcome) {
    let DetectedLevels {
        mut named,
        det_name,
    } = lv;
    let Some(last) = base.random.points.last() else {
        return;
    };
    let last = pooled(last, "dram", out);
    if let Some(lm) = base.lm_points.iter().find(|p| p.size == last.size) {
        let lm = pooled(lm, "lmbench_dram", out);
        out.finding(
            text::lmbench_vs_chase(&lm, &last),
            &["lmbench_dram", "dram"],
        );
    }
    // Each level's latency is its metric's (pooled) median.
    for nl in &mut named {
        if let Some(m) = out.get(&nl.name) {
            nl.level.latency_ns = m.summary.median;
        }
    }
    let level_text: Vec<String> = named
        .iter()
        .map(|nl| text::level_text(nl, det_name).line)
        .collect();
    let rep = ctx.repetition;
    let which = if rep.of > 1 {
        format!(
            " of run {} of {}; latencies from all runs",
            rep.index + 1,
            rep.of
        )
    } else {
        String::new()
    };
    out.finding(
        format!(
            "Detected levels ({det_name} random curve{which}): {}.",
            level_text.join("; ")
        ),
        &named
            .iter()
            .filter(|n| n.name != "dram")
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
    );
    for nl in named.iter().filter(|n| n.sysfs_bytes.is_some()) {
        // A level much smaller (or larger) than sysfs says is what matters most here.
        let (t, salience) = text::size_vs_sysfs(nl);
        out.finding_salient(t, &[nl.name.as_str()], salience);
    }
}

/// Sequential at the largest size: what the prefetcher hides. Returns the stride and
/// point for the finding stated after pooling.
fn sequential<'a>(
    base: &'a BaseCurves,
    out: &mut Outcome,
) -> Option<(usize, &'a kernel::ChasePoint)> {
    let (s, c) = base.seq_curves.first()?;
    let pt = c.points.last()?;
    out.metric(
        "dram_sequential",
        "ns",
        &format!(
            "sequential chase, stride {s} B, at {} (address order)",
            fmt_bytes(pt.size as f64)
        ),
        pt.trials.clone(),
    );
    Some((*s, pt))
}

/// `dram_thp`: the largest size on huge pages, when the kernel backed the region; returns
/// its point for the finding stated after pooling.
fn huge_pages<'a>(
    thp_curve: Option<&'a (ChaseCurve, f64)>,
    max: u64,
    out: &mut Outcome,
) -> Option<&'a kernel::ChasePoint> {
    let (c, frac) = thp_curve?;
    let pt = c.points.last()?;
    let huge = *frac >= 0.5;
    out.check(Check::sanity(
        "huge pages back the huge-page region",
        huge,
        format!(
            "{:.0}% of {} backed by transparent huge pages (AnonHugePages in /proc/self/smaps)",
            frac * 100.0,
            fmt_bytes(max as f64)
        ),
    ));
    if huge {
        out.metric(
            "dram_thp",
            "ns",
            &format!(
                "random chase at {} with transparent huge pages ({:.0}% backed)",
                fmt_bytes(pt.size as f64),
                frac * 100.0
            ),
            pt.trials.clone(),
        );
        Some(pt)
    } else {
        out.notes.push("the kernel did not provide huge pages for most of the region (fragmented memory or THP defrag policy): no huge-page figure".into());
        None
    }
}
