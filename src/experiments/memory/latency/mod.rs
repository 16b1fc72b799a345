//! mem.latency: load-to-use latency against working-set size, with the cache levels
//! derived from the curve.
//!
//! A pointer chase: every node is one cache line whose first word holds the address of the
//! next node, so each load's address comes from the previous load and no two loads can
//! overlap. The random curve follows a Sattolo permutation over all nodes of the working
//! set (so consecutive loads land on random lines of random pages: cache and TLB misses
//! are both real); the sequential curves walk nodes in address order at a fixed stride,
//! which the hardware prefetcher can follow.
//!
//! Split along its seams: `kernel` (laying and chasing chains, curves), `checks` (the
//! one-cycle premise and level sanity), `levels` (naming plateaus against sysfs; finding
//! them is `analysis::detect_levels`) and `text` (series, descriptions, findings);
//! docs/METHODOLOGY.md, mem.latency, states the method.

mod checks;
mod kernel;
mod levels;
#[cfg(test)]
mod tests;
mod text;

pub(crate) use crate::analysis::detect_levels;
pub use kernel::{lmbench_chain, Point};
pub(crate) use levels::{llc_hit_fraction, name_levels};

use crate::experiments::kit::{Pages, Region};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::HarnessConfig;
use crate::results::{Check, Prediction};
use crate::rng::Rng;
use crate::units::fmt_bytes;
use kernel::{curve, lmbench_point, Curve, Specs};
use std::time::Duration;
/// The verified chase, shared with mem.loaded-latency (one kernel, one premise).
pub(crate) use {
    checks::verify_chain,
    kernel::{chase, lay, UNROLL},
};

pub(crate) struct Latency;

/// Working-set sizes from `min` to `max`, `per_doubling` points per doubling, rounded to
/// whole nodes of `node` bytes, at least two nodes each.
pub(crate) fn sizes(min: u64, max: u64, per_doubling: u32, node: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut k = 0u32;
    loop {
        let s = min as f64 * 2f64.powf(k as f64 / per_doubling as f64);
        if s > max as f64 * 1.0001 {
            break;
        }
        let s = ((s / node as f64).round() as u64).max(2) * node;
        if v.last() != Some(&s) {
            v.push(s);
        }
        k += 1;
    }
    v
}

/// Sizes and effort per profile.
struct Plan {
    per_doubling: u32,
    /// The curve's last size at `per_doubling` points per doubling.
    curve_max: u64,
    /// The largest size, where `dram` is measured: at least 8x the last-level cache so that
    /// few loads hit it (one extra point past `curve_max` when larger).
    max: u64,
    strides: Vec<usize>,
    seq_per_doubling: u32,
    /// Random curve with huge pages too (else only its largest size).
    thp_curve: bool,
    trials: usize,
    min_trial: Duration,
}

fn plan(profile: Profile, llc: u64, line: usize) -> Plan {
    let four_llc = (4 * llc).next_power_of_two();
    let eight_llc = (8 * llc).next_power_of_two();
    let (per_doubling, curve_max, max, strides, seq_per_doubling, thp_curve, trials) = match profile
    {
        Profile::Smoke => {
            let m = four_llc.min(64 << 20);
            (1, m, m, vec![line], 1, false, 5)
        }
        Profile::Quick => (4, four_llc, eight_llc, vec![line], 2, true, 11),
        Profile::Standard => (
            4,
            four_llc.max(512 << 20),
            eight_llc.max(512 << 20),
            vec![64, 128, 256, 512, 1024, 4096, 16384],
            2,
            true,
            11,
        ),
        Profile::Thorough => (
            4,
            (16 * llc).next_power_of_two().max(2 << 30),
            (16 * llc).next_power_of_two().max(2 << 30),
            vec![64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
            4,
            true,
            21,
        ),
    };
    let mut strides: Vec<usize> = strides.into_iter().filter(|&s| s >= line).collect();
    if strides.is_empty() {
        strides.push(line);
    }
    Plan {
        per_doubling,
        curve_max: curve_max.min(max),
        max,
        strides,
        seq_per_doubling,
        thp_curve,
        trials,
        // Short trials dodge the scheduler on a busy machine; more of them in larger profiles.
        min_trial: Duration::from_micros(if profile == Profile::Smoke { 150 } else { 250 }),
    }
}

const SPEC: crate::experiments::Spec = crate::experiments::Spec {
    id: "mem.latency",
    title: "Memory load latency by working-set size",
    description: "pointer chase over a random single cycle (Sattolo) from 1 KiB to 4x the last-level cache; cache levels detected; sequential-stride curves; huge pages",
    method: crate::method!("mem.latency"),
    needs: crate::experiments::Needs::NONE,
    // Dependent loads, as the sentinel's chase.
    bottleneck: crate::results::Bottleneck::Chase,
    // One CPU of each kind of core on hybrid CPUs (runner::per_kind).
    per_core_kind: true,
    subtracts_loop: false,
    budget: None,
};

impl Experiment for Latency {
    fn spec(&self) -> &crate::experiments::Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        match p {
            Profile::Smoke => Duration::from_millis(900),
            Profile::Quick => Duration::from_secs(9),
            Profile::Standard => Duration::from_secs(90),
            Profile::Thorough => Duration::from_secs(300),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        use crate::experiments::parts::{self, Pick};
        let (ghz, src) = ctx.core_ghz();
        let m = ctx.machine;
        let mut v = Vec::new();
        let caches = m.data_caches();
        // lmbench's 16 KiB point is four pages, inside any L1 data cache of 16 KiB or more.
        if let Some(l1) = caches
            .iter()
            .find(|c| c.level == 1 && c.size_bytes >= 16 << 10)
        {
            let what = "L1 data load-to-use latency";
            let p = match parts::figure(m, what, |c| c.l1d_cycles) {
                Ok((cyc, key, reference)) => Prediction::new(
                    cyc / ghz,
                    format!("{cyc} cycles ({what}, parts table) / f_core: 16 KiB fits the L1 data cache"),
                )
                .table("cycles", cyc, "cycles", what, &key, reference)
                .machine("f_core", ghz * 1e9, "Hz", src.clone())
                .machine("size", l1.size_bytes as f64, "bytes", "machine: sysfs L1 data cache size"),
                Err(why) => Prediction::withheld(why),
            };
            v.push(("lmbench_16KiB".into(), p));
        }
        for c in &caches {
            let (name, what, pick): (String, &str, Pick) = match c.level {
                1 => ("l1d".into(), "L1 data load-to-use latency", |c| {
                    c.l1d_cycles
                }),
                2 => ("l2".into(), "L2 load-to-use latency", |c| c.l2_cycles),
                3 => ("l3".into(), "L3 load-to-use latency", |c| c.l3_cycles),
                l => {
                    let why = format!("the parts table has no level-{l} cache figures");
                    v.push((format!("l{l}"), Prediction::withheld(why)));
                    continue;
                }
            };
            let p = match parts::figure(m, what, pick) {
                Ok((cyc, key, reference)) => Prediction::new(
                    cyc / ghz,
                    format!("{cyc} cycles ({what}, parts table) / f_core"),
                )
                .table("cycles", cyc, "cycles", what, &key, reference)
                .machine("f_core", ghz * 1e9, "Hz", src.clone())
                .machine(
                    "size",
                    c.size_bytes as f64,
                    "bytes",
                    "machine: sysfs cache size",
                ),
                Err(why) => Prediction::withheld(why),
            };
            v.push((name, p));
        }
        // Base pages add a page walk per access far beyond the TLB's reach; no published
        // walk cost per part (nor nested paging's under a hypervisor) is in the table.
        v.push((
            "dram".into(),
            Prediction::withheld(
                "a random chase over base pages adds a page walk per access, and the parts table \
                 names no published page-walk cost",
            ),
        ));
        let dram = match parts::figure(m, "idle DRAM latency", |c| c.dram_ns) {
            Ok((ns, key, reference)) => Prediction::new(
                ns,
                "published idle DRAM latency of a full random chase (parts table); huge pages \
                 keep the TLB reach",
            )
            .table("dram", ns, "ns", "idle DRAM latency", &key, reference),
            Err(why) => Prediction::withheld(why),
        };
        v.push(("dram_thp".into(), dram));
        let walk = "base pages in random order add TLB misses and page walks, and the parts \
                    table names no published walk cost";
        v.push(("lmbench_1MiB".into(), Prediction::withheld(walk)));
        v.push(("lmbench_dram".into(), Prediction::withheld(walk)));
        v.push((
            "dram_sequential".into(),
            Prediction::withheld(
                "how far ahead and how fast the prefetcher fetches has no published figure per part",
            ),
        ));
        // Plateaus not matched to a sysfs cache level (names up to the deepest possible).
        for k in 1..=8 {
            v.push((
                format!("plateau_{k}"),
                Prediction::withheld(
                    "a plateau matched to no cache level the machine lists: no figure describes it",
                ),
            ));
        }
        v
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let caches = ctx.machine.data_caches();
        let line = crate::experiments::kit::line_bytes(&caches);
        let llc = crate::experiments::kit::llc_bytes(&caches).unwrap_or(32 << 20);
        let p = plan(ctx.profile, llc, line);
        let (max, cap) = working_set(ctx, &p, line, llc, &mut out)?;
        let rss0 = crate::experiments::kit::rss_baseline();
        let sched = Schedule::new(ctx, &p, max, line, llc);
        let mut rng = Rng::from_entropy();

        let base = measure_base(ctx, &p, &sched, max, line, &mut rng)?;
        let thp_curve = measure_thp(ctx, &p, &sched, max, line, &mut rng, &mut out)?;
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

/// The largest working set that fits the memory cap with its permutation, and the cap;
/// notes both, and the share of LLC hits when the set is below 8x the LLC.
fn working_set(
    ctx: &Context,
    p: &Plan,
    line: usize,
    llc: u64,
    out: &mut Outcome,
) -> anyhow::Result<(u64, u64)> {
    let node_max = p.max / line as u64;
    // The region plus the permutation (4 bytes per node) while a chain is laid.
    let want = p.max + 4 * node_max;
    let cap = crate::experiments::kit::memory_cap(ctx.machine, want, 8 << 20)?;
    let max = if cap < want {
        // Largest power of two that fits with its permutation.
        let fit = cap * line as u64 / (line as u64 + 4);
        1u64 << (63 - fit.leading_zeros())
    } else {
        p.max
    };
    out.notes.push(format!(
        "memory cap {} (working sets up to {} plus a {}-byte-per-node permutation); MemAvailable {}",
        fmt_bytes(cap as f64),
        fmt_bytes(max as f64),
        4,
        fmt_bytes(ctx.machine.memory_budget_bytes() as f64)
    ));
    if max < 8 * llc {
        out.notes.push(format!(
            "largest working set {} is below 8x the last-level cache ({}): about {:.0}% of the dram figure's loads may hit that cache (a random chase over S bytes finds about C/S of its lines in a cache of C bytes)",
            fmt_bytes(max as f64),
            fmt_bytes(llc as f64),
            llc_hit_fraction(llc, max) * 100.0
        ));
    }
    Ok((max, cap))
}

/// Every size each curve measures, and the trial settings that share the budget out.
struct Schedule {
    random_sizes: Vec<u64>,
    seq_sizes: Vec<u64>,
    lm_sizes: Vec<u64>,
    thp: bool,
    spec: Specs,
}

impl Schedule {
    fn new(ctx: &Context, p: &Plan, max: u64, line: usize, llc: u64) -> Schedule {
        let curve_max = p.curve_max.min(max);
        let with_max = |mut v: Vec<u64>| {
            if v.last().is_some_and(|&l| l < max) {
                v.push(max);
            }
            v
        };
        let random_sizes = with_max(sizes(1024, curve_max, p.per_doubling, line as u64));
        let seq_sizes = with_max(sizes(1024, curve_max, p.seq_per_doubling, line as u64));
        let thp =
            crate::experiments::kit::thp_available(ctx.machine) && ctx.profile != Profile::Smoke;
        let mut all: Vec<u64> = random_sizes.clone();
        for &s in &p.strides {
            all.extend(seq_sizes.iter().filter(|&&z| z >= 2 * s as u64));
        }
        match (thp, p.thp_curve) {
            (true, true) => all.extend(&random_sizes),
            (true, false) => all.push(max),
            _ => {}
        }
        // lmbench's layout at 16 KiB, 1 MiB and the largest size.
        let lm_sizes: Vec<u64> = [16 << 10, 1 << 20, max]
            .into_iter()
            .filter(|&s| s <= max)
            .collect();
        all.extend(&lm_sizes);
        // Far points (beyond the last-level cache) trial twice as long and twice as often;
        // they may take up to 4x a near point's share, which few near points use up.
        let far_weight = 4;
        // A third of the budget goes to laying chains and faulting pages.
        let unit = ctx.budget.mul_f64(0.66) / all.len().max(1) as u32;
        let near = HarnessConfig::short_trials(p.min_trial, p.trials).for_budget(unit, 1);
        let spec = Specs {
            far: HarnessConfig::short_trials(p.min_trial * 2, p.trials * 2)
                .for_budget(unit * far_weight as u32, 1),
            near,
            far_from: llc,
        };
        Schedule {
            random_sizes,
            seq_sizes,
            lm_sizes,
            thp,
            spec,
        }
    }
}

/// The curves measured in the base-page region.
struct BaseCurves {
    random: Curve,
    /// (stride, curve) per sequential stride.
    seq_curves: Vec<(usize, Curve)>,
    lm_points: Vec<kernel::Point>,
    lm_broken: Vec<u64>,
    /// Trials set aside (preempted) and kept by the lmbench-layout points.
    lm_quiet: (usize, usize),
    /// Bytes of the base-page region backed by huge pages anyway.
    base_huge: Option<u64>,
}

fn measure_base(
    ctx: &Context,
    p: &Plan,
    s: &Schedule,
    max: u64,
    line: usize,
    rng: &mut Rng,
) -> anyhow::Result<BaseCurves> {
    (ctx.progress)("mapping and faulting the working set");
    let mut region = Region::new(max as usize, Pages::Base)?;
    region.prefault();
    let random = curve(ctx, &s.spec, &mut region, &s.random_sizes, line, true, rng);
    let mut seq_curves = Vec::new();
    for &stride in &p.strides {
        let sz: Vec<u64> = s
            .seq_sizes
            .iter()
            .copied()
            .filter(|&z| z >= 2 * stride as u64)
            .collect();
        seq_curves.push((
            stride,
            curve(ctx, &s.spec, &mut region, &sz, stride, false, rng),
        ));
    }
    let mut lm_broken = Vec::new();
    let mut lm_quiet = (0usize, 0usize);
    let lm_points: Vec<kernel::Point> = s
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
    p: &Plan,
    s: &Schedule,
    max: u64,
    line: usize,
    rng: &mut Rng,
    out: &mut Outcome,
) -> anyhow::Result<Option<(Curve, f64)>> {
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
        let sz = if p.thp_curve {
            s.random_sizes.clone()
        } else {
            vec![max]
        };
        let c = curve(ctx, &s.spec, &mut region, &sz, line, true, rng);
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
fn premise_and_notes(base: &BaseCurves, thp_curve: Option<&(Curve, f64)>, out: &mut Outcome) {
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
    p: &Plan,
    caches: &[crate::machine::Cache],
    base: &BaseCurves,
    thp_curve: Option<&(Curve, f64)>,
    max: u64,
    out: &mut Outcome,
) -> Levels {
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
    Levels { named, det_name }
}

/// The levels detected on one run's curve, for the findings stated after pooling.
struct Levels {
    named: Vec<levels::Named>,
    det_name: &'static str,
}

/// `pt` with the pooled figure of its metric (`name`) when there is one: the median and
/// trials the table shows.
fn pooled(pt: &kernel::Point, name: &str, out: &Outcome) -> kernel::Point {
    match out.get(name) {
        Some(m) => kernel::Point {
            size: pt.size,
            trials: m.raw.clone(),
            median: m.summary.median,
        },
        None => pt.clone(),
    }
}

/// The lmbench-layout and levels findings, from the pooled metrics; which sizes the
/// levels span comes from the detection on this run's curve, and the text says so.
fn levels_findings(ctx: &Context, base: &BaseCurves, lv: Levels, out: &mut Outcome) {
    let Levels {
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
fn sequential<'a>(base: &'a BaseCurves, out: &mut Outcome) -> Option<(usize, &'a kernel::Point)> {
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
    thp_curve: Option<&'a (Curve, f64)>,
    max: u64,
    out: &mut Outcome,
) -> Option<&'a kernel::Point> {
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
