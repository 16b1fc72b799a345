//! mem.latency's plan: working-set sizes and trial settings per profile and cache size.

use crate::experiments::{kit, Context, PerProfile, Profile};
use crate::harness::HarnessConfig;
use crate::machine::Machine;
use crate::results::Check;
use crate::rng::Rng;
use crate::units::fmt_bytes;
use anyhow::Result;
use std::time::{Duration, Instant};

/// Sizes from `min` to `max`, `per_doubling` per doubling, in whole nodes (two at least).
pub(crate) fn sizes(min: u64, max: u64, per_doubling: u32, node: u64) -> Vec<u64> {
    let mut v = Vec::new();
    for k in 0u32.. {
        let s = min as f64 * 2f64.powf(k as f64 / per_doubling as f64);
        if s > max as f64 * 1.0001 {
            break;
        }
        let s = ((s / node as f64).round() as u64).max(2) * node;
        if v.last() != Some(&s) {
            v.push(s);
        }
    }
    v
}

#[derive(Clone, Copy)]
pub(super) struct LatencyPlan {
    pub(super) per_doubling: u32,
    /// The largest working set wanted, before the memory cap and the time budget.
    pub(super) ceiling: u64,
    /// Sequential strides in bytes, 0 being one line.
    pub(super) strides: &'static [usize],
    pub(super) seq_per_doubling: u32,
    pub(super) thp: bool,
    pub(super) trials: usize,
    /// Short trials dodge the scheduler on a busy machine; longer ones in larger profiles.
    pub(super) min_trial: Duration,
}

const QUICK: LatencyPlan = LatencyPlan {
    per_doubling: 4,
    ceiling: u64::MAX,
    strides: &[0],
    seq_per_doubling: 2,
    thp: true,
    trials: 11,
    min_trial: Duration::from_micros(250),
};

pub(super) const PLANS: PerProfile<LatencyPlan> = PerProfile::new(
    LatencyPlan {
        per_doubling: 1,
        ceiling: 64 << 20,
        seq_per_doubling: 1,
        thp: false,
        trials: 5,
        min_trial: Duration::from_micros(150),
        ..QUICK
    },
    QUICK,
    LatencyPlan {
        strides: &[64, 128, 256, 512, 1024, 4096, 16384],
        ..QUICK
    },
    LatencyPlan {
        strides: &[64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        seq_per_doubling: 4,
        trials: 21,
        ..QUICK
    },
);

/// The largest power-of-two set `profile` lays out with its permutation, and the cap.
pub(crate) fn set_and_cap(m: &Machine, profile: Profile, line: usize) -> Result<(u64, u64)> {
    kit::largest_set(m, profile, PLANS.get(profile).ceiling, line)
}

/// Whether `profile` measures on huge pages here, and so plans the levels on that curve.
pub(super) fn huge_page_levels(machine: &Machine, profile: Profile) -> bool {
    kit::thp_available(machine) && PLANS.get(profile).thp
}

/// Share of a random chase's loads over `size` bytes a cache of `llc` bytes serves (C/S).
pub(super) fn llc_hit_fraction(llc: u64, size: u64) -> f64 {
    (llc as f64 / size.max(1) as f64).min(1.0)
}

/// Sanity: at most a quarter of `dram`'s loads can hit the last-level cache.
pub(super) fn dram_beyond_cache(reached: u64, llc: Option<u64>) -> Check {
    // Unknown: judged against a large cache rather than passed (N5), and said.
    let assumed = " (assumed: the machine does not say its cache sizes)";
    let (llc, said) = llc.map_or((kit::UNKNOWN_LLC, assumed), |l| (l, ""));
    let hits = llc_hit_fraction(llc, reached);
    Check::sanity(
        "dram: working set beyond the last-level cache",
        hits <= 0.25,
        format!(
            "largest working set {} against a {}{said} last-level cache: about {:.0}% of the dram figure's loads may hit that cache (a random chase over S bytes finds about C/S of its lines in a cache of C bytes; at most 25% wanted); the memory cap and the time budget bound the set",
            fmt_bytes(reached as f64),
            fmt_bytes(llc as f64),
            hits * 100.0
        ),
    )
}

/// The random curve's pace in seconds: per byte laid, near points' trials, latest far's.
#[derive(Clone, Copy, Default)]
pub(super) struct Pace {
    pub(super) lay_secs_per_byte: f64,
    near_secs: f64,
    near_points: u32,
    far_trials: f64,
}

/// Every curve's sizes and trial settings, and what their trials came to (`report`).
pub(super) struct ChaseSchedule<'c, 'a> {
    pub(super) ctx: &'c Context<'a>,
    pub(super) rng: Rng,
    pub(super) plan: LatencyPlan,
    /// The random curve's sizes; every other curve ends where it did (`upto`).
    pub(super) random_sizes: Vec<u64>,
    seq_sizes: Vec<u64>,
    pub(super) strides: Vec<usize>,
    pub(super) thp: bool,
    /// Up to the last-level cache and beyond: far points, at the mercy of other cores'
    /// use of cache and memory, spread their trials over more time.
    near: HarnessConfig,
    far: HarnessConfig,
    llc: u64,
    pub(super) pace: Pace,
    pub(super) start: Instant,
    /// The largest size was decided by an earlier run: measure every size.
    pub(super) decided: bool,
    /// The random base-page curve's notes, and the others' points measured twice.
    pub(super) notes: Vec<String>,
    /// Sizes whose chain did not verify, and chains that did.
    pub(super) broken: Vec<u64>,
    pub(super) chains: usize,
    /// Trials repeated because the thread was preempted, trials kept, points remeasured.
    pub(super) preempted: usize,
    pub(super) kept: usize,
    pub(super) remeasured: usize,
}

impl<'c, 'a> ChaseSchedule<'c, 'a> {
    pub(super) fn new(ctx: &'c Context<'a>, max: u64, line: usize, llc: u64) -> Self {
        let plan = PLANS.get(ctx.profile);
        // Past 2x the LLC is memory's plateau: one size per doubling there, few costly chains.
        let edge = (2 * llc).next_power_of_two().min(max);
        let curve = |per_doubling| {
            let mut v = sizes(1024, edge, per_doubling, line as u64);
            v.extend(sizes(edge, max, 1, line as u64).into_iter().skip(1));
            upto(&v, max)
        };
        let mut strides: Vec<usize> = plan.strides.iter().map(|&s| s.max(line)).collect();
        strides.dedup();
        let mut s = ChaseSchedule {
            ctx,
            rng: Rng::from_entropy(),
            plan,
            random_sizes: curve(plan.per_doubling),
            seq_sizes: curve(plan.seq_per_doubling),
            strides,
            thp: huge_page_levels(ctx.machine, ctx.profile),
            near: HarnessConfig::default(),
            far: HarnessConfig::default(),
            llc,
            pace: Pace::default(),
            start: Instant::now(),
            decided: false,
            notes: Vec::new(),
            broken: Vec::new(),
            chains: 0,
            preempted: 0,
            kept: 0,
            remeasured: 0,
        };
        let all = s.later_sizes(max).len() + s.random_sizes.len();
        // A third of the budget lays chains and faults pages. Far points trial twice as
        // long, twice as often, in up to 4x a near point's share (few near points use it).
        let unit = ctx.budget.mul_f64(0.66) / all.max(1) as u32;
        let trials = |k: u32| {
            let t = HarnessConfig::short_trials(plan.min_trial * k, plan.trials * k as usize);
            t.for_budget(unit * k * k, 1)
        };
        (s.near, s.far) = (trials(1), trials(2));
        s
    }

    /// The sequential curve of `stride` if the random curve ends at `max`.
    pub(super) fn seq_sizes(&self, stride: usize, max: u64) -> Vec<u64> {
        let v = upto(&self.seq_sizes, max).into_iter();
        v.filter(|&z| z >= 2 * stride as u64).collect()
    }

    /// The huge-page curve if the random curve ends at `max`: none without huge pages.
    pub(super) fn thp_sizes(&self, max: u64) -> Vec<u64> {
        let v = upto(&self.random_sizes, max).into_iter();
        v.filter(|_| self.thp).collect()
    }

    /// Every size measured after the random base-page curve if `max` is its last.
    fn later_sizes(&self, max: u64) -> Vec<u64> {
        let seq = self.strides.iter().flat_map(|&st| self.seq_sizes(st, max));
        let lm_thp = lm_sizes(max).into_iter().chain(self.thp_sizes(max));
        seq.chain(lm_thp).collect()
    }

    pub(super) fn trials_for(&self, size: u64) -> &HarnessConfig {
        if size > self.llc {
            &self.far
        } else {
            &self.near
        }
    }

    /// Records a point of `size`: `laid` seconds laying its chain, `trials` timing it.
    pub(super) fn paced(&mut self, size: u64, laid: f64, trials: f64) {
        let p = &mut self.pace;
        p.lay_secs_per_byte = laid / size as f64;
        if size > self.llc {
            p.far_trials = trials;
        } else {
            p.near_secs += trials;
            p.near_points += 1;
        }
    }

    /// Before any far point, a far one's trials are the near mean scaled by the budgets.
    fn trial_secs(&self, size: u64) -> f64 {
        let p = &self.pace;
        let near = p.near_secs / p.near_points.max(1) as f64;
        if size <= self.llc {
            near
        } else if p.far_trials > 0.0 {
            p.far_trials
        } else {
            near * (self.far.budget.as_secs_f64() / self.near.budget.as_secs_f64().max(1e-9))
        }
    }

    /// Whether `size` next on the random curve, and all after it, fits the budget at the
    /// pace so far; decided at powers of two only, so `dram` is one size from run to run.
    pub(super) fn fits(&self, size: u64) -> bool {
        if self.decided {
            return true;
        }
        let next = self.random_sizes.partition_point(|&z| z < size);
        let (done, rest) = self.random_sizes.split_at(next);
        if done.last().is_some_and(|p| !p.is_power_of_two()) {
            return true; // decided where this stretch began
        }
        let end = size.next_power_of_two();
        let random: Vec<u64> = rest.iter().copied().take_while(|&z| z <= end).collect();
        let later = self.later_sizes(end);
        // The huge-page region is faulted too; faulting is cheaper than laying a chain.
        let bytes = (end + random.iter().sum::<u64>() + later.iter().sum::<u64>()) as f64;
        let all = random.into_iter().chain(later);
        let trials: f64 = all.map(|z| self.trial_secs(z)).sum();
        let projected = 1.25 * (bytes * self.pace.lay_secs_per_byte + trials);
        self.start.elapsed().as_secs_f64() + projected <= self.ctx.budget.as_secs_f64() * 0.95
    }
}

pub(super) fn lm_sizes(max: u64) -> Vec<u64> {
    let v = [16 << 10, 1 << 20, max];
    v.into_iter().filter(|&z| z <= max).collect()
}

fn upto(v: &[u64], max: u64) -> Vec<u64> {
    let below = v.iter().copied().take_while(|&z| z < max);
    below.chain([max]).collect()
}
