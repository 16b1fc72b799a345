//! mem.latency: load-to-use latency against working-set size, with the cache levels
//! derived from the curve.
//!
//! A pointer chase: every node is one cache line whose first word holds the address of the
//! next node, so each load's address comes from the previous load and no two loads can
//! overlap. The random curve follows a Sattolo permutation over all nodes of the working
//! set (so consecutive loads land on random lines of random pages: cache and TLB misses
//! are both real); the sequential curves walk nodes in address order at a fixed stride,
//! which the hardware prefetcher can follow.

use super::{measure_quiet, Pages, Quiet, QuietSpec, Region, Rng};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::results::{Check, Prediction, Series};
use crate::units::{fmt_bytes, fmt_ns};
use std::time::Duration;

pub struct Latency;

/// Loads per loop iteration of the chase (unrolled so the loop branch is negligible).
const UNROLL: u64 = 16;

/// Model load-to-use latencies in core cycles (typical of current x86-64 and Arm cores).
const L1_CYCLES: f64 = 4.5;
const L2_CYCLES: f64 = 14.0;
const L3_CYCLES: f64 = 45.0;
/// Model DRAM latency: typical 80-100 ns of an idle DDR4/DDR5 system, plus a page walk for
/// a random access far beyond the TLB's reach with base pages.
const DRAM_NS: f64 = 90.0;
const PAGE_WALK_NS: f64 = 15.0;
/// Under a hypervisor every guest page-table access is itself translated (nested paging),
/// so a walk costs several times more.
const NESTED_WALK_NS: f64 = 60.0;

macro_rules! rep16 {
    ($e:expr) => {
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
    };
}

/// Follows the chain `iters * UNROLL` steps from `p` and returns where it stopped.
///
/// # Safety
/// `p` must point into a chain laid by `lay`: every node's first word holds the address
/// of another node of the same live chain.
#[inline(never)]
unsafe fn chase(mut p: *const u8, iters: u64) -> *const u8 {
    for _ in 0..iters {
        // SAFETY: guaranteed by the caller; the volatile read keeps every load and its
        // order, and each address is the value of the load before it.
        rep16!(p = unsafe { std::ptr::read_volatile(p as *const *const u8) });
    }
    p
}

/// Writes a chain over the first `next.len()` nodes of `stride` bytes: node i's first word
/// points to node next[i]. Does nothing when the nodes would not fit in the region.
fn lay(region: &mut Region, stride: usize, next: &[u32]) {
    let base = region.as_ptr();
    if stride < 8 || next.len() * stride > region.len() {
        return;
    }
    for (i, &j) in next.iter().enumerate() {
        // SAFETY: i and j are below next.len(), so both nodes lie inside the region
        // (checked above); stride >= 8 keeps each pointer-sized slot disjoint, and the
        // region and stride are 8-byte aligned.
        unsafe {
            let slot = base.add(i * stride) as *mut *const u8;
            slot.write(base.add(j as usize * stride));
        }
    }
}

/// Cursors walked side by side while verifying (independent loads overlap in memory).
const VERIFY_CURSORS: usize = 16;

/// Verifies that the chain in memory over the first `n` nodes of `stride` bytes is one
/// cycle through all of them, by reading the pointers actually chased. A single serial
/// walk would take n dependent DRAM misses; instead up to 16 cursors start at distinct
/// random nodes ("marks") and walk side by side, each until it reaches a mark. The chain
/// is one cycle exactly when the walks' lengths sum to n and each mark leads to the next
/// one around a single cycle of marks; every pointer must also land on a node.
pub(crate) fn verify_chain(region: &Region, stride: usize, n: usize, rng: &mut Rng) -> bool {
    let base = region.as_ptr() as usize;
    if n == 0 || stride < 8 || n * stride > region.len() {
        return false;
    }
    let read = |i: usize| -> Option<usize> {
        // SAFETY: i < n, so the node lies inside the region (checked above).
        let p = unsafe { *((base + i * stride) as *const usize) };
        let off = p.checked_sub(base)?;
        (off % stride == 0 && off / stride < n).then_some(off / stride)
    };
    let k = VERIFY_CURSORS.min(n);
    let mut marks: Vec<usize> = Vec::with_capacity(k);
    while marks.len() < k {
        let m = rng.below(n);
        if !marks.contains(&m) {
            marks.push(m);
        }
    }
    let mut is_mark = vec![0u64; n.div_ceil(64)];
    for &m in &marks {
        is_mark[m / 64] |= 1 << (m % 64);
    }
    let marked = |i: usize| is_mark[i / 64] & (1 << (i % 64)) != 0;
    let mut cur: Vec<usize> = marks.clone();
    let mut len = vec![0usize; k];
    let mut done = vec![false; k];
    let mut left = k;
    let mut total = 0usize;
    while left > 0 {
        for c in 0..k {
            if done[c] {
                continue;
            }
            let Some(nx) = read(cur[c]) else {
                return false;
            };
            cur[c] = nx;
            len[c] += 1;
            total += 1;
            if total > n {
                return false;
            }
            if marked(nx) {
                done[c] = true;
                left -= 1;
            }
        }
    }
    if total != n {
        return false;
    }
    // The marks must form one cycle: follow "mark -> mark its walk reached" k steps.
    let idx = |m: usize| marks.iter().position(|&x| x == m);
    let mut at = 0usize;
    for step in 1..=k {
        let Some(j) = idx(cur[at]) else {
            return false;
        };
        at = j;
        if at == 0 && step < k {
            return false;
        }
    }
    at == 0
}

/// The chain lmbench's `lat_mem_rd -t` lays (thrash_initialize in lib_mem.c), over
/// `npages` pages of `lines` nodes each (node = page * lines + line): pages in a random
/// order, every step to the next page of that order, and the line within the page turning
/// one position per pass in bit-reversed order (so all lines are visited, one per page per
/// pass). One cycle through every node. `lines` must be a power of two.
pub fn lmbench_chain(npages: usize, lines: usize, rng: &mut Rng) -> Vec<u32> {
    let mut order: Vec<u32> = (0..npages as u32).collect();
    rng.shuffle(&mut order);
    let bits = lines.trailing_zeros();
    let word = |k: usize| -> usize {
        if bits == 0 {
            0
        } else {
            (k % lines).reverse_bits() >> (usize::BITS - bits)
        }
    };
    let mut next = vec![0u32; npages * lines];
    for i in 0..npages {
        let (cp, np) = (order[i] as usize, order[(i + 1) % npages] as usize);
        for j in 0..lines {
            let cur = cp * lines + word(i + j);
            // The last page wraps to the first with the line one further than where the
            // pass started, as lat_mem_rd does.
            let k = if i + 1 == npages { j + 1 } else { i + j + 1 };
            next[cur] = (np * lines + word(k)) as u32;
        }
    }
    next
}

/// Working-set sizes from `min` to `max`, `per_doubling` points per doubling, rounded to
/// whole nodes of `node` bytes, at least two nodes each.
pub fn sizes(min: u64, max: u64, per_doubling: u32, node: u64) -> Vec<u64> {
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

/// One measured point of a curve.
#[derive(Debug, Clone)]
pub struct Point {
    pub size: u64,
    /// ns per load, one value per trial.
    pub trials: Vec<f64>,
    pub median: f64,
}

/// A plateau of the random curve: a run of sizes over which latency stays level.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// First and last size on the plateau.
    pub first: u64,
    pub last: u64,
    /// Median latency over the plateau's points.
    pub latency_ns: f64,
    /// Index of the point whose latency is nearest the plateau's (it represents the level).
    pub rep: usize,
    /// Indices of the plateau's first and last points.
    pub span: (usize, usize),
    /// Where the curve crosses half-way (in log latency) to the next level: the capacity
    /// estimate for this level. None for the last level.
    pub transition: Option<u64>,
}

/// A step between neighbouring sizes breaks a plateau when latency changes by more than
/// this factor per quarter doubling (scaled for other spacings).
const STEP_PER_QUARTER: f64 = 1.10;
/// Neighbouring plateaus closer than this ratio are one level (real cache levels differ by
/// 2.5x or more; noise, TLB reach and sharing make steps of up to 60% inside one level).
const MERGE_RATIO: f64 = 2.0;
/// A point this much slower than the next larger size is measured again.
const REMEASURE_RATIO: f64 = 1.15;

/// Plateaus of a latency curve, in size order, on log latency against log size:
/// 1. smooth log latency with a running median of three (one noisy point cannot split);
/// 2. cut the curve where a step changes latency by more than 10% per quarter doubling;
/// 3. keep runs of at least `min_points` points (shorter runs are transitions), and always
///    the run at the largest size;
/// 4. merge neighbouring plateaus within 2x of each other, and any plateau not above the
///    one before it (latency cannot fall as the working set grows);
/// 5. between neighbours, the transition size is where the curve crosses the geometric
///    mean of the two levels (interpolated in log-log).
pub fn detect_levels(points: &[(u64, f64)], min_points: usize) -> Vec<Level> {
    let n = points.len();
    if n == 0 {
        return vec![];
    }
    let y: Vec<f64> = points.iter().map(|p| p.1.max(1e-3).ln()).collect();
    let ys: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 || i + 1 == n {
                y[i]
            } else {
                crate::stats::median(&[y[i - 1], y[i], y[i + 1]])
            }
        })
        .collect();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for i in 0..n - 1 {
        let doublings = (points[i + 1].0 as f64 / points[i].0 as f64)
            .log2()
            .max(0.05);
        let limit = STEP_PER_QUARTER.ln() * (doublings * 4.0).max(1.0);
        if (ys[i + 1] - ys[i]).abs() > limit {
            runs.push((start, i));
            start = i + 1;
        }
    }
    runs.push((start, n - 1));
    let level_of = |a: usize, b: usize| crate::stats::median(&ys[a..=b]).exp();
    let last_run = runs.len() - 1;
    let kept = runs
        .iter()
        .enumerate()
        .filter(|(k, &(a, b))| b - a + 1 >= min_points || *k == last_run)
        .map(|(_, &r)| r);
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for r in kept {
        if let Some(prev) = merged.last_mut() {
            let (l0, l1) = (level_of(prev.0, prev.1), level_of(r.0, r.1));
            if l1 / l0 < MERGE_RATIO {
                prev.1 = r.1;
                continue;
            }
        }
        merged.push(r);
    }
    let mut levels: Vec<Level> = merged
        .iter()
        .map(|&(a, b)| {
            let lat = level_of(a, b);
            let rep = (a..=b)
                .min_by(|&i, &j| (y[i] - lat.ln()).abs().total_cmp(&(y[j] - lat.ln()).abs()))
                .unwrap_or(a);
            Level {
                first: points[a].0,
                last: points[b].0,
                latency_ns: lat,
                rep,
                span: (a, b),
                transition: None,
            }
        })
        .collect();
    for k in 0..levels.len().saturating_sub(1) {
        let target = (levels[k].latency_ns * levels[k + 1].latency_ns)
            .sqrt()
            .ln();
        let (from, to) = (levels[k].span.1, levels[k + 1].span.0);
        levels[k].transition = (from..to).find_map(|i| {
            (ys[i] <= target && ys[i + 1] > target).then(|| {
                let (x0, x1) = ((points[i].0 as f64).ln(), (points[i + 1].0 as f64).ln());
                let f = (target - ys[i]) / (ys[i + 1] - ys[i]);
                (x0 + f * (x1 - x0)).exp().round() as u64
            })
        });
        if levels[k].transition.is_none() {
            // No crossing found (an abrupt step): the boundary between the two plateaus.
            levels[k].transition =
                Some(((points[from].0 as f64) * (points[to].0 as f64)).sqrt() as u64);
        }
    }
    levels
}

/// A detected level with its name and the sysfs cache it was matched with.
#[derive(Debug, Clone)]
pub struct Named {
    pub name: String,
    pub level: Level,
    pub sysfs_bytes: Option<u64>,
}

/// Names the plateaus. Memory: when the largest size is at least twice the last-level
/// cache, the last plateau and any plateau before it at more than half its latency (TLB
/// reach changes the DRAM figure, not the level) are "dram", merged. Caches: the other
/// plateaus are matched with the sysfs data caches in order (level 1 first), choosing
/// among order-preserving matchings the one with the most matches, then the smallest
/// total |log2(transition size / sysfs size)|; a match needs the sizes within 16x (a VM
/// may see only its share of a shared cache). Unmatched plateaus are "plateau_K".
pub fn name_levels(levels: &[Level], caches: &[super::CacheFact], max_size: u64) -> Vec<Named> {
    let mut levels = levels.to_vec();
    let llc = super::llc_bytes(caches).unwrap_or(0);
    let mut dram: Option<Level> = None;
    if levels.len() > 1 && max_size >= 2 * llc.max(1) {
        // Memory's latency: the last plateau of more than one point (a single disturbed
        // point at the end must not make the real memory plateau look like a cache).
        let top = levels
            .iter()
            .rev()
            .find(|l| l.span.1 > l.span.0)
            .or(levels.last())
            .map(|l| l.latency_ns)
            .unwrap_or(0.0);
        let mut k = levels.len() - 1;
        while k > 1 && levels[k - 1].latency_ns > top / 2.0 {
            k -= 1;
        }
        let mut d = levels[k].clone();
        let last = levels.last().cloned().unwrap_or_else(|| d.clone());
        d.last = last.last;
        d.span.1 = last.span.1;
        d.transition = None;
        // The level is what the whole memory region shows: median of its plateaus.
        let lats: Vec<f64> = levels[k..].iter().map(|l| l.latency_ns).collect();
        d.latency_ns = crate::stats::median(&lats);
        levels.truncate(k);
        dram = Some(d);
    }
    // Order-preserving matching of plateaus to caches (tiny: brute force by recursion).
    fn best(
        lv: &[Level],
        cs: &[super::CacheFact],
        i: usize,
        j: usize,
    ) -> (usize, f64, Vec<Option<usize>>) {
        if i == lv.len() {
            return (0, 0.0, vec![]);
        }
        // Leave plateau i unmatched.
        let (m, c, mut v) = best(lv, cs, i + 1, j);
        v.insert(0, None);
        let mut out = (m, c, v);
        let size = lv[i].transition.unwrap_or(lv[i].last) as f64;
        for jj in j..cs.len() {
            let d = (size / cs[jj].size_bytes as f64).log2().abs();
            if d > 4.0 {
                continue;
            }
            let (m2, c2, mut v2) = best(lv, cs, i + 1, jj + 1);
            v2.insert(0, Some(jj));
            if m2 + 1 > out.0 || (m2 + 1 == out.0 && c2 + d < out.1) {
                out = (m2 + 1, c2 + d, v2);
            }
        }
        out
    }
    let (_, _, assign) = best(&levels, caches, 0, 0);
    let mut out: Vec<Named> = levels
        .iter()
        .zip(assign)
        .enumerate()
        .map(|(k, (l, a))| match a {
            Some(j) => Named {
                name: if caches[j].level == 1 {
                    "l1d".into()
                } else {
                    format!("l{}", caches[j].level)
                },
                level: l.clone(),
                sysfs_bytes: Some(caches[j].size_bytes),
            },
            None => Named {
                name: format!("plateau_{}", k + 1),
                level: l.clone(),
                sysfs_bytes: None,
            },
        })
        .collect();
    if let Some(d) = dram {
        out.push(Named {
            name: "dram".into(),
            level: d,
            sysfs_bytes: None,
        });
    }
    out
}

/// Share of a random chase's loads over `size` bytes that a cache of `llc` bytes can
/// serve (LRU-like: about C/S once the set is larger).
pub fn llc_hit_fraction(llc: u64, size: u64) -> f64 {
    (llc as f64 / size.max(1) as f64).min(1.0)
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

/// Trial settings: beyond the last-level cache a point's latency depends on what other
/// cores and guests do to the shared cache and memory, which changes over milliseconds, so
/// those points get trials twice as long and twice as many (spread over more time).
struct Specs {
    near: QuietSpec,
    far: QuietSpec,
    far_from: u64,
}

impl Specs {
    fn for_size(&self, size: u64) -> &QuietSpec {
        if size > self.far_from {
            &self.far
        } else {
            &self.near
        }
    }
}

/// Lays lmbench's chain (`lmbench_chain`) over the first `size` bytes of `region` with
/// nodes of `line` bytes, verifies it and measures it. None when `size` is not a whole
/// number of pages or the chain does not verify (then `broken` gets the size).
#[allow(clippy::too_many_arguments)]
fn lmbench_point(
    ctx: &Context,
    spec: &QuietSpec,
    region: &mut Region,
    size: u64,
    line: usize,
    rng: &mut Rng,
    broken: &mut Vec<u64>,
    quiet: &mut (usize, usize),
) -> Option<Point> {
    let ps = crate::pagecache::page_size();
    if size as usize % ps != 0 || ps % line != 0 || size as usize > region.len() {
        return None;
    }
    let next = lmbench_chain(size as usize / ps, ps / line, rng);
    lay(region, line, &next);
    let n = next.len();
    drop(next);
    if !verify_chain(region, line, n, rng) {
        broken.push(size);
        return None;
    }
    let (pt, q) = measure_chain(ctx, spec, region, size);
    quiet.0 += q.preempted;
    quiet.1 += q.per_op_ns.len();
    (ctx.progress)(&format!(
        "lmbench layout {}: {}",
        fmt_bytes(size as f64),
        fmt_ns(pt.median)
    ));
    Some(pt)
}

/// Measures the chase laid in `region`.
fn measure_chain(ctx: &Context, spec: &QuietSpec, region: &Region, size: u64) -> (Point, Quiet) {
    let mut p = region.as_ptr() as *const u8;
    let m = measure_quiet(ctx.clock, spec, UNROLL as f64, |iters| {
        // SAFETY: the caller laid and verified a chain over this region before measuring.
        p = unsafe { chase(p, iters) };
    });
    std::hint::black_box(p);
    (
        Point {
            size,
            median: m.median_ns(),
            trials: m.per_op_ns.clone(),
        },
        m,
    )
}

/// Outcome of one curve.
struct Curve {
    points: Vec<Point>,
    /// Sizes whose chain did not verify as a single full cycle.
    broken: Vec<u64>,
    notes: Vec<String>,
    /// Trials set aside because the thread was preempted, and trials kept.
    preempted: usize,
    kept: usize,
    /// Points measured a second time because they were slower than the next size.
    remeasured: usize,
}

/// Measures the random (Sattolo) or sequential chase at each size within `region`.
fn curve(
    ctx: &Context,
    spec: &Specs,
    region: &mut Region,
    sizes: &[u64],
    stride: usize,
    random: bool,
    rng: &mut Rng,
) -> Curve {
    let mut c = Curve {
        points: Vec::new(),
        broken: Vec::new(),
        notes: Vec::new(),
        preempted: 0,
        kept: 0,
        remeasured: 0,
    };
    let kind = if random { "random" } else { "sequential" };
    // Lays, verifies and measures one size.
    let mut one = |c: &mut Curve, size: u64, rng: &mut Rng| -> Option<Point> {
        let n = (size as usize / stride).max(2);
        let next: Vec<u32> = if random {
            super::sattolo(n, rng)
        } else {
            (0..n as u32).map(|i| (i + 1) % n as u32).collect()
        };
        lay(region, stride, &next);
        drop(next);
        if !verify_chain(region, stride, n, rng) {
            c.broken.push(size);
            return None;
        }
        let (pt, q) = measure_chain(ctx, spec.for_size(size), region, size);
        c.preempted += q.preempted;
        c.kept += q.per_op_ns.len();
        c.notes.extend(
            q.notes
                .iter()
                .map(|n| format!("{kind} at {}: {n}", fmt_bytes(size as f64))),
        );
        (ctx.progress)(&format!(
            "{kind} {} stride {stride}: {}",
            fmt_bytes(size as f64),
            fmt_ns(pt.median)
        ));
        Some(pt)
    };
    for &size in sizes {
        if let Some(pt) = one(&mut c, size, rng) {
            c.points.push(pt);
        }
    }
    // A point slower than the next larger working set was disturbed (latency cannot
    // fall as the set grows, and interference only adds time): measure it once more
    // and keep the lower median.
    let np = c.points.len();
    let mut suspects: Vec<usize> = (0..np.saturating_sub(1))
        .filter(|&i| c.points[i].median > REMEASURE_RATIO * c.points[i + 1].median)
        .take(np / 4)
        .collect();
    // The largest size has no larger neighbour: a jump past the step before it is suspect.
    if np >= 3 {
        let (a, b, z) = (
            c.points[np - 3].median,
            c.points[np - 2].median,
            c.points[np - 1].median,
        );
        if z / b > REMEASURE_RATIO * (b / a).max(1.0) {
            suspects.push(np - 1);
        }
    }
    for i in suspects {
        let size = c.points[i].size;
        if let Some(pt) = one(&mut c, size, rng) {
            c.remeasured += 1;
            if pt.median < c.points[i].median {
                c.points[i] = pt;
            }
        }
    }
    c
}

fn series(name: &str, pts: &[Point]) -> Series {
    Series {
        name: name.into(),
        x_unit: "bytes".into(),
        y_unit: "ns".into(),
        points: pts.iter().map(|p| [p.size as f64, p.median]).collect(),
    }
}

impl Experiment for Latency {
    fn id(&self) -> &'static str {
        "mem.latency"
    }
    fn title(&self) -> &'static str {
        "Memory load latency by working-set size"
    }
    fn description(&self) -> &'static str {
        "pointer chase over a random single cycle (Sattolo) from 1 KiB to 4x the last-level cache; cache levels detected; sequential-stride curves; huge pages"
    }
    fn method(&self) -> &'static str {
        "Nodes of one cache line each (line size from sysfs); node i's first word holds the address of the next \
         node, so every load depends on the one before (read_volatile, 16 loads per loop iteration). Random \
         curve: a Sattolo permutation over all nodes of the working set, so consecutive loads hit random lines \
         of random pages (cache and TLB misses both real); before timing, the chain in memory is verified to be \
         one cycle through every node. Sizes from 1 KiB to at least 4x the last-level cache (capped by a \
         quarter of MemAvailable), four per doubling (one in smoke), in a base-page mapping (MADV_NOHUGEPAGE), \
         and again in a MADV_HUGEPAGE mapping (quick and up; its backing is checked in /proc/self/smaps). \
         Sequential curves walk the nodes in address order at fixed strides, which the prefetcher follows. \
         Trials last about 250 us; a trial during which the thread was preempted (involuntary context switch) \
         is repeated and counted. Levels come from the huge-page curve when it exists (the TLB then reaches \
         past every cache): plateaus of log latency against log size (running median of three; a step of more \
         than 10% per quarter doubling ends a plateau; plateaus within 2x merge; a point slower than the next size is measured again, the lower median kept); each level's size is where \
         the curve crosses half-way (geometric mean) to the next level; plateaus are matched in order with the \
         sysfs data caches, and those at more than half the largest size's latency are memory. dram is the \
         base-page chase at the largest size, dram_thp the same with huge pages."
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
        let (ghz, src) = crate::experiments::cpu::core_ghz(ctx);
        let caches = super::data_caches(ctx.machine);
        let mut v = Vec::new();
        for c in &caches {
            let (name, cyc) = match c.level {
                1 => ("l1d".to_string(), L1_CYCLES),
                2 => ("l2".to_string(), L2_CYCLES),
                l => (format!("l{l}"), L3_CYCLES),
            };
            v.push((
                name,
                Prediction::new(
                    cyc / ghz,
                    format!("{cyc} cycles (typical load-to-use for this level) / f_core"),
                )
                .input("f_core", ghz * 1e9, "Hz", src.clone())
                .input(
                    "size",
                    c.size_bytes as f64,
                    "bytes",
                    "machine: sysfs cache size",
                ),
            ));
        }
        let (walk, walk_src) = if ctx.machine.virtualization.hypervisor_flag {
            (
                NESTED_WALK_NS,
                "model: TLB miss with base pages under a hypervisor (nested paging; cpuinfo flag 'hypervisor')",
            )
        } else {
            (PAGE_WALK_NS, "model: TLB miss with base pages")
        };
        v.push((
            "dram".into(),
            Prediction::new(
                DRAM_NS + walk,
                "DRAM 80-100 ns (model 90) + page walk for random base-page accesses",
            )
            .input(
                "dram_model",
                DRAM_NS,
                "ns",
                "model: typical idle DRAM latency",
            )
            .input("page_walk", walk, "ns", walk_src),
        ));
        v.push((
            "dram_thp".into(),
            Prediction::new(
                DRAM_NS,
                "DRAM 80-100 ns (model 90); huge pages keep the TLB reach",
            )
            .input(
                "dram_model",
                DRAM_NS,
                "ns",
                "model: typical idle DRAM latency",
            ),
        ));
        v
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let caches = super::data_caches(ctx.machine);
        let line = super::line_bytes(&caches);
        let llc = super::llc_bytes(&caches).unwrap_or(32 << 20);
        let p = plan(ctx.profile, llc, line);
        let node_max = p.max / line as u64;
        // The region plus the permutation (4 bytes per node) while a chain is laid.
        let want = p.max + 4 * node_max;
        let cap = super::memory_cap(ctx.machine, want, 8 << 20)?;
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
            fmt_bytes(super::mem_available(ctx.machine) as f64)
        ));
        if max < 8 * llc {
            out.notes.push(format!(
                "largest working set {} is below 8x the last-level cache ({}): about {:.0}% of the dram figure's loads may hit that cache (a random chase over S bytes finds about C/S of its lines in a cache of C bytes)",
                fmt_bytes(max as f64),
                fmt_bytes(llc as f64),
                llc_hit_fraction(llc, max) * 100.0
            ));
        }
        let rss0 = super::rss_baseline();

        let curve_max = p.curve_max.min(max);
        let with_max = |mut v: Vec<u64>| {
            if v.last().is_some_and(|&l| l < max) {
                v.push(max);
            }
            v
        };
        let random_sizes = with_max(sizes(1024, curve_max, p.per_doubling, line as u64));
        let seq_sizes = with_max(sizes(1024, curve_max, p.seq_per_doubling, line as u64));
        let thp = super::thp_available(ctx.machine) && ctx.profile != Profile::Smoke;
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
        let near = QuietSpec {
            min_trial: p.min_trial,
            trials: p.trials,
            budget: unit,
        };
        let spec = Specs {
            far: QuietSpec {
                min_trial: p.min_trial * 2,
                trials: p.trials * 2,
                budget: unit * far_weight as u32,
            },
            near,
            far_from: llc,
        };
        let mut rng = Rng::from_entropy();

        (ctx.progress)("mapping and faulting the working set");
        let mut region = Region::new(max as usize, Pages::Base)?;
        region.prefault();
        let random = curve(ctx, &spec, &mut region, &random_sizes, line, true, &mut rng);
        let mut seq_curves = Vec::new();
        for &s in &p.strides {
            let sz: Vec<u64> = seq_sizes
                .iter()
                .copied()
                .filter(|&z| z >= 2 * s as u64)
                .collect();
            seq_curves.push((s, curve(ctx, &spec, &mut region, &sz, s, false, &mut rng)));
        }
        let mut lm_broken = Vec::new();
        let mut lm_quiet = (0usize, 0usize);
        let lm_points: Vec<Point> = lm_sizes
            .iter()
            .filter_map(|&size| {
                lmbench_point(
                    ctx,
                    spec.for_size(size),
                    &mut region,
                    size,
                    line,
                    &mut rng,
                    &mut lm_broken,
                    &mut lm_quiet,
                )
            })
            .collect();
        let base_huge = region.huge_bytes();
        drop(region);

        // Huge pages: the whole random curve (quick and up) or its largest size (not smoke).
        let mut thp_curve: Option<(Curve, f64)> = None;
        if thp {
            (ctx.progress)("huge-page region");
            let mut region = Region::new(max as usize, Pages::Huge)?;
            region.prefault();
            let frac = region.huge_bytes().unwrap_or(0) as f64 / max as f64;
            let sz = if p.thp_curve {
                random_sizes.clone()
            } else {
                vec![max]
            };
            let c = curve(ctx, &spec, &mut region, &sz, line, true, &mut rng);
            thp_curve = Some((c, frac));
        } else if ctx.profile == Profile::Smoke {
            out.notes.push(
                "smoke profile: no huge-page figure (quick and larger profiles measure one)".into(),
            );
        } else {
            out.notes.push(
                "transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): no huge-page figure".into(),
            );
        }
        out.check(super::rss_check(rss0, cap));

        // Premise: every chain was a single cycle through all its nodes.
        let mut broken: Vec<u64> = random.broken.clone();
        broken.extend(&lm_broken);
        broken.extend(
            seq_curves
                .iter()
                .flat_map(|(_, c)| c.broken.iter().copied()),
        );
        if let Some((c, _)) = &thp_curve {
            broken.extend(c.broken.iter().copied());
        }
        let chains = random.points.len()
            + seq_curves
                .iter()
                .map(|(_, c)| c.points.len())
                .sum::<usize>()
            + thp_curve.as_ref().map_or(0, |(c, _)| c.points.len())
            + lm_points.len();
        out.check(Check::premise(
            "each chase visits every node (one cycle)",
            broken.is_empty(),
            if broken.is_empty() {
                format!("{chains} chains verified: the permutation is one cycle of all nodes and every pointer in memory matches it")
            } else {
                format!(
                    "chains at {} did not verify",
                    broken
                        .iter()
                        .map(|&b| fmt_bytes(b as f64))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        ));
        out.notes.extend(random.notes.iter().cloned());
        let (pre, kept, again) = std::iter::once(&random)
            .chain(seq_curves.iter().map(|(_, c)| c))
            .chain(thp_curve.iter().map(|(c, _)| c))
            .fold((lm_quiet.0, lm_quiet.1, 0), |a, c| {
                (a.0 + c.preempted, a.1 + c.kept, a.2 + c.remeasured)
            });
        out.notes.push(format!(
            "{pre} trials were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed trials kept; {again} points slower than the next larger size were measured again (the lower median kept)"
        ));
        if let Some(b) = base_huge.filter(|&b| b > 0) {
            out.notes.push(format!(
                "{} of the base-page region was backed by huge pages despite MADV_NOHUGEPAGE",
                fmt_bytes(b as f64)
            ));
        }

        out.series.push(series("random", &random.points));
        for (s, c) in &seq_curves {
            out.series
                .push(series(&format!("sequential_stride_{s}B"), &c.points));
        }
        if let Some((c, _)) = &thp_curve {
            if p.thp_curve {
                out.series.push(series("random_thp", &c.points));
            }
        }
        if random.points.is_empty() {
            anyhow::bail!("no point of the latency curve could be measured");
        }
        let dram = random.points.last().map(|p| p.median).unwrap_or(f64::NAN);

        // Levels: from the huge-page curve where it exists (TLB reach then exceeds every
        // cache, so plateaus are cache capacities), else from the base-page curve.
        let thp_ok = thp_curve.as_ref().is_some_and(|(c, f)| {
            *f >= 0.5 && p.thp_curve && c.points.len() == random.points.len()
        });
        let (det, det_name) = match (&thp_curve, thp_ok) {
            (Some((c, _)), true) => (&c.points, "huge-page"),
            _ => (&random.points, "base-page"),
        };
        let pts: Vec<(u64, f64)> = det.iter().map(|p| (p.size, p.median)).collect();
        let min_points = (p.per_doubling as usize).clamp(2, 3);
        let levels = detect_levels(&pts, min_points);
        let named = name_levels(&levels, &caches, max);
        let mut level_text = Vec::new();
        for nl in &named {
            let l = &nl.level;
            let plateau = format!(
                "{} plateau {}..{}",
                det_name,
                fmt_bytes(l.first as f64),
                fmt_bytes(l.last as f64)
            );
            let edge = l
                .transition
                .map(|t| format!(", transition at {}", fmt_bytes(t as f64)))
                .unwrap_or_default();
            let sys = nl
                .sysfs_bytes
                .map(|s| format!(" (sysfs {})", fmt_bytes(s as f64)))
                .unwrap_or_default();
            level_text.push(format!(
                "{} {}: {plateau}{edge}{sys}",
                nl.name,
                fmt_ns(l.latency_ns)
            ));
            if nl.name == "dram" {
                continue; // the dram metrics below are the largest size, on both page sizes
            }
            let pt = &det[l.rep];
            out.metric(
                &nl.name,
                "ns",
                &format!(
                    "random chase at {} ({plateau}{edge}{sys})",
                    fmt_bytes(pt.size as f64)
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
        for pt in &lm_points {
            let name = if pt.size == max && pt.size > 1 << 20 {
                "lmbench_dram".to_string()
            } else {
                format!("lmbench_{}", super::size_label(pt.size))
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
        if let Some(lm) = lm_points.iter().find(|p| p.size == last.size) {
            out.finding(
                format!(
                    "At {} lmbench's layout (lat_mem_rd -t: random page order, one line per page per pass) reads {} per load against {} for osmeter's chase over all lines in random order ({:+.0}%).",
                    fmt_bytes(lm.size as f64),
                    fmt_ns(lm.median),
                    fmt_ns(last.median),
                    (lm.median / last.median - 1.0) * 100.0
                ),
                &["lmbench_dram", "dram"],
            );
        }
        out.finding(
            format!(
                "Detected levels ({det_name} random curve): {}.",
                level_text.join("; ")
            ),
            &named
                .iter()
                .filter(|n| n.name != "dram")
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>(),
        );
        for nl in named.iter().filter(|n| n.sysfs_bytes.is_some()) {
            let s = nl.sysfs_bytes.unwrap_or(1) as f64;
            let t = nl.level.transition.unwrap_or(nl.level.last) as f64;
            let mut text = format!(
                "{}: detected size {} (latency half-way to the next level; the plateau ends at {}) against sysfs {} ({:.2}x).",
                nl.name,
                fmt_bytes(t),
                fmt_bytes(nl.level.last as f64),
                fmt_bytes(s),
                t / s
            );
            if t / s < 0.5 {
                text.push_str(" Less than half the cache is effectively this thread's: it is shared with other cores, hyperthreads or virtual machines.");
            }
            // A level much smaller (or larger) than sysfs says is what matters most here.
            out.finding_salient(text, &[nl.name.as_str()], (t / s).ln());
        }
        let lat: Vec<f64> = named.iter().map(|n| n.level.latency_ns).collect();
        out.check(Check::sanity(
            "levels ordered by latency",
            lat.windows(2).all(|w| w[0] < w[1]),
            level_text.join("; "),
        ));
        let expected = caches.len();
        let found = named.iter().filter(|n| n.sysfs_bytes.is_some()).count();
        out.check(Check::sanity(
            "every sysfs data cache level detected",
            found == expected,
            format!("{found} of {expected} sysfs data/unified cache levels matched a plateau"),
        ));

        // Sequential at the largest size: what the prefetcher hides.
        if let Some((s, c)) = seq_curves.first() {
            if let Some(pt) = c.points.last() {
                out.metric(
                    "dram_sequential",
                    "ns",
                    &format!(
                        "sequential chase, stride {s} B, at {} (prefetched)",
                        fmt_bytes(pt.size as f64)
                    ),
                    pt.trials.clone(),
                );
                out.finding(
                    format!(
                        "At {} a sequential chase (stride {s} B) costs {} per load against {} in random order: the prefetcher hides {:.0}% of the latency.",
                        fmt_bytes(pt.size as f64),
                        fmt_ns(pt.median),
                        fmt_ns(dram),
                        (1.0 - pt.median / dram) * 100.0
                    ),
                    &["dram_sequential", "dram"],
                );
            }
        }
        if let Some((c, frac)) = &thp_curve {
            if let Some(pt) = c.points.last() {
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
                    out.finding(
                        format!(
                            "Huge pages change the random DRAM latency at {} from {} to {} ({:+.0}%): the rest is TLB misses and page walks.",
                            fmt_bytes(pt.size as f64),
                            fmt_ns(dram),
                            fmt_ns(pt.median),
                            (pt.median / dram - 1.0) * 100.0
                        ),
                        &["dram", "dram_thp"],
                    );
                } else {
                    out.notes.push("the kernel did not provide huge pages for most of the region (fragmented memory or THP defrag policy): no huge-page figure".into());
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synth(levels: &[(u64, f64)], max: u64) -> Vec<(u64, f64)> {
        // Latency of a random chase: hit fraction C/S at each level, like LRU caches.
        sizes(1024, max, 4, 64)
            .into_iter()
            .map(|s| {
                let mut lat = 0.0;
                let mut remaining = 1.0;
                for &(cap, l) in levels {
                    let hit = (cap as f64 / s as f64).min(1.0) * remaining;
                    lat += hit * l;
                    remaining -= hit;
                }
                (s, lat + remaining * 100.0)
            })
            .collect()
    }

    fn caches3() -> Vec<super::super::CacheFact> {
        [
            (1, "Data", 32u64 << 10),
            (2, "Unified", 512 << 10),
            (3, "Unified", 32 << 20),
        ]
        .iter()
        .map(|&(level, kind, size)| super::super::CacheFact {
            level,
            kind: kind.into(),
            size_bytes: size,
            line_bytes: 64,
        })
        .collect()
    }

    #[test]
    fn sizes_are_increasing_and_cover_the_range() {
        let v = sizes(1024, 1 << 20, 4, 64);
        assert_eq!(v[0], 1024);
        assert_eq!(*v.last().unwrap(), 1 << 20);
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(v.len(), 41);
        assert!(v.iter().all(|s| s % 64 == 0));
    }

    #[test]
    fn detects_synthetic_levels() {
        let pts = synth(
            &[(32 << 10, 1.0), (512 << 10, 3.5), (32 << 20, 12.0)],
            128 << 20,
        );
        let lv = detect_levels(&pts, 3);
        assert!(lv.len() >= 3, "{lv:?}");
        let caches = vec![
            super::super::CacheFact {
                level: 1,
                kind: "Data".into(),
                size_bytes: 32 << 10,
                line_bytes: 64,
            },
            super::super::CacheFact {
                level: 2,
                kind: "Unified".into(),
                size_bytes: 512 << 10,
                line_bytes: 64,
            },
            super::super::CacheFact {
                level: 3,
                kind: "Unified".into(),
                size_bytes: 32 << 20,
                line_bytes: 64,
            },
        ];
        let named = name_levels(&lv, &caches, 128 << 20);
        let get = |n: &str| named.iter().find(|x| x.name == n).map(|x| x.level.clone());
        let l1 = get("l1d").expect("l1d");
        let l2 = get("l2").expect("l2");
        assert!(l1.last >= 16 << 10 && l1.last <= 64 << 10, "{l1:?}");
        assert!(l2.last >= 256 << 10 && l2.last <= 1 << 20, "{l2:?}");
        assert!(get("dram").is_some(), "{named:?}");
        assert!(l1.latency_ns < l2.latency_ns);
    }

    #[test]
    fn a_spike_at_the_largest_size_is_still_memory() {
        let mut pts = synth(
            &[(32 << 10, 1.0), (512 << 10, 3.5), (4 << 20, 15.0)],
            128 << 20,
        );
        let last = pts.len() - 1;
        pts[last].1 *= 3.0;
        let lv = detect_levels(&pts, 3);
        let named = name_levels(&lv, &caches3(), 128 << 20);
        let dram = named.iter().find(|n| n.name == "dram").expect("dram");
        assert!(dram.level.first < 64 << 20, "{named:?}");
        assert!(named.iter().any(|n| n.name == "l3"), "{named:?}");
    }

    #[test]
    fn a_flat_curve_is_one_level() {
        let pts: Vec<(u64, f64)> = sizes(1024, 1 << 20, 4, 64)
            .into_iter()
            .enumerate()
            .map(|(i, s)| (s, 1.0 + 0.05 * ((i % 3) as f64)))
            .collect();
        assert_eq!(detect_levels(&pts, 3).len(), 1);
    }

    #[test]
    fn verification_rejects_short_cycles_and_stray_pointers() {
        let mut r = Region::new(64 << 10, Pages::Base).unwrap();
        let mut rng = Rng::new(3);
        for n in [1usize, 2, 5, 16, 17, 1000] {
            let next = super::super::sattolo(n, &mut rng);
            lay(&mut r, 64, &next);
            assert!(verify_chain(&r, 64, n, &mut rng), "n={n}");
        }
        // Two cycles of 500: every node has a successor, but the chase would see half.
        let two: Vec<u32> = (0..1000u32)
            .map(|i| {
                if i < 500 {
                    (i + 1) % 500
                } else {
                    500 + (i - 499) % 500
                }
            })
            .collect();
        lay(&mut r, 64, &two);
        for _ in 0..20 {
            assert!(!verify_chain(&r, 64, 1000, &mut rng));
        }
        // A node pointing outside the chain.
        let next = super::super::sattolo(1000, &mut rng);
        lay(&mut r, 64, &next);
        // SAFETY: node 10 lies inside the region; overwriting its pointer with garbage.
        unsafe { *(r.as_ptr().add(640) as *mut usize) = 12345 };
        assert!(!verify_chain(&r, 64, 1000, &mut rng));
    }

    #[test]
    fn lmbench_chain_is_one_cycle_changing_page_every_step() {
        let mut rng = Rng::new(11);
        for (pages, lines) in [(1usize, 64usize), (4, 64), (256, 64), (3, 8), (5, 1)] {
            let next = lmbench_chain(pages, lines, &mut rng);
            assert_eq!(
                super::super::cycle_length(&next),
                pages * lines,
                "{pages}x{lines}"
            );
            if pages > 1 {
                assert!(next
                    .iter()
                    .enumerate()
                    .all(|(i, &j)| i / lines != j as usize / lines));
            }
        }
        assert!((llc_hit_fraction(32 << 20, 256 << 20) - 0.125).abs() < 1e-9);
        assert_eq!(llc_hit_fraction(32 << 20, 16 << 20), 1.0);
    }

    #[test]
    fn chase_follows_a_verified_chain() {
        let mut r = Region::new(64 << 10, Pages::Base).unwrap();
        let mut rng = Rng::new(7);
        let next = super::super::sattolo(1024, &mut rng);
        lay(&mut r, 64, &next);
        assert!(verify_chain(&r, 64, 1024, &mut rng));
        let start = r.as_ptr() as *const u8;
        // SAFETY: a verified chain over the region.
        let end = unsafe { chase(start, 64) }; // 64 x 16 = one full cycle
        assert_eq!(end, start);
    }
}
