//! mem.latency's plan: working-set sizes and trial settings per profile and cache size.

use super::kernel::TrialSettings;
use super::llc_hit_fraction;
use crate::experiments::{Context, Outcome, PerProfile, Profile};
use crate::harness::HarnessConfig;
use crate::units::fmt_bytes;
use std::time::Duration;

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
pub(super) struct LatencyPlan {
    pub(super) per_doubling: u32,
    /// The curve's last size at `per_doubling` points per doubling.
    pub(super) curve_max: u64,
    /// The largest size, where `dram` is measured: at least 8x the last-level cache so that
    /// few loads hit it (one extra point past `curve_max` when larger).
    pub(super) max: u64,
    pub(super) strides: Vec<usize>,
    pub(super) seq_per_doubling: u32,
    /// Random curve with huge pages too (else only its largest size).
    pub(super) thp_curve: bool,
    pub(super) trials: usize,
    pub(super) min_trial: Duration,
}

/// A size from the last-level cache: `llc_times` x LLC rounded up to a power of two,
/// within [`floor`, `ceiling`].
#[derive(Clone, Copy)]
struct FromLlc {
    llc_times: u64,
    floor: u64,
    ceiling: u64,
}

impl FromLlc {
    const fn new(llc_times: u64, floor: u64, ceiling: u64) -> FromLlc {
        FromLlc {
            llc_times,
            floor,
            ceiling,
        }
    }
    fn of(&self, llc: u64) -> u64 {
        (self.llc_times * llc)
            .next_power_of_two()
            .max(self.floor)
            .min(self.ceiling)
    }
}

/// A profile's row of the plan, before the cache sizes are known.
#[derive(Clone, Copy)]
struct LatencyPlanRow {
    per_doubling: u32,
    curve_max: FromLlc,
    max: FromLlc,
    strides: &'static [usize],
    seq_per_doubling: u32,
    thp_curve: bool,
    trials: usize,
    /// Short trials dodge the scheduler on a busy machine; longer ones in larger profiles.
    min_trial: Duration,
}

const NONE: u64 = u64::MAX;
const MIB: u64 = 1 << 20;

const QUICK: LatencyPlanRow = LatencyPlanRow {
    per_doubling: 4,
    curve_max: FromLlc::new(4, 0, NONE),
    max: FromLlc::new(8, 0, NONE),
    strides: &[0],
    seq_per_doubling: 2,
    thp_curve: true,
    trials: 11,
    min_trial: Duration::from_micros(250),
};

const PLANS: PerProfile<LatencyPlanRow> = PerProfile::new(
    LatencyPlanRow {
        per_doubling: 1,
        curve_max: FromLlc::new(4, 0, 64 * MIB),
        max: FromLlc::new(4, 0, 64 * MIB),
        seq_per_doubling: 1,
        thp_curve: false,
        trials: 5,
        min_trial: Duration::from_micros(150),
        ..QUICK
    },
    QUICK,
    LatencyPlanRow {
        curve_max: FromLlc::new(4, 512 * MIB, NONE),
        max: FromLlc::new(8, 512 * MIB, NONE),
        strides: &[64, 128, 256, 512, 1024, 4096, 16384],
        ..QUICK
    },
    LatencyPlanRow {
        curve_max: FromLlc::new(16, 2048 * MIB, NONE),
        max: FromLlc::new(16, 2048 * MIB, NONE),
        strides: &[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        seq_per_doubling: 4,
        trials: 21,
        ..QUICK
    },
);

/// The plan of `profile` for a last-level cache of `llc` bytes and lines of `line` bytes
/// (a stride of 0 in the table is one line).
pub(super) fn plan(profile: Profile, llc: u64, line: usize) -> LatencyPlan {
    let row = PLANS.get(profile);
    let max = row.max.of(llc);
    let mut strides: Vec<usize> = row
        .strides
        .iter()
        .map(|&s| if s == 0 { line } else { s })
        .filter(|&s| s >= line)
        .collect();
    if strides.is_empty() {
        strides.push(line);
    }
    LatencyPlan {
        per_doubling: row.per_doubling,
        curve_max: row.curve_max.of(llc).min(max),
        max,
        strides,
        seq_per_doubling: row.seq_per_doubling,
        thp_curve: row.thp_curve,
        trials: row.trials,
        min_trial: row.min_trial,
    }
}

/// The largest working set that fits the memory cap with its permutation, and the cap;
/// notes both, and the share of LLC hits when the set is below 8x the LLC.
pub(super) fn working_set(
    ctx: &Context,
    p: &LatencyPlan,
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
pub(super) struct ChaseSchedule {
    pub(super) random_sizes: Vec<u64>,
    pub(super) seq_sizes: Vec<u64>,
    pub(super) lm_sizes: Vec<u64>,
    pub(super) thp: bool,
    pub(super) spec: TrialSettings,
}

impl ChaseSchedule {
    pub(super) fn new(
        ctx: &Context,
        p: &LatencyPlan,
        max: u64,
        line: usize,
        llc: u64,
    ) -> ChaseSchedule {
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
        let spec = TrialSettings {
            far: HarnessConfig::short_trials(p.min_trial * 2, p.trials * 2)
                .for_budget(unit * far_weight as u32, 1),
            near,
            far_from: llc,
        };
        ChaseSchedule {
            random_sizes,
            seq_sizes,
            lm_sizes,
            thp,
            spec,
        }
    }
}
