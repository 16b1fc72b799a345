//! mem.loaded-latency: the latency of a dependent chase while the other cores stream
//! reads, or a 2:1 read/write mix, swept from idle to unthrottled.

mod kernel;
mod predict;
#[cfg(test)]
mod tests;
mod text;

use super::latency::{lay, verify_chain};
use crate::experiments::kit::{self, Pages, Region};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::harness::HarnessConfig;
use crate::results::Prediction;
use crate::rng::{sattolo, Rng};
use crate::units::fmt_bytes;
use kernel::Sweep;
use std::time::Duration;

pub(crate) struct LoadedLatency;

/// A point whose latency is more than this over idle is past the knee.
const KNEE_RISE: f64 = 1.2;
/// Without a reference chase, the idle point agrees with mem.latency's within this ratio.
const IDLE_AGREES: f64 = 0.2;
/// Idle and reference agree within this many times the window's noise, at least the floor.
const AGREE_NOISE_TIMES: f64 = 3.0;
const AGREE_FLOOR: f64 = 0.15;
/// Lines a load thread reads between looks at the stop flag and the clock.
const BATCH: u64 = 32;

const SPEC: Spec = Spec {
    id: "mem.loaded-latency",
    title: "Memory latency under load",
    description: "dependent chase beyond the last-level cache while the other cores stream reads, or a 2:1 read/write mix, with a calibrated delay, idle to unthrottled: latency vs bandwidth (like Intel MLC --loaded_latency, and its -W2)",
    method: crate::method!("mem.loaded-latency"),
    needs: Needs {
        min_cpus: 2,
        ..Needs::NONE
    },
    budget: Some(PerProfile::new(ms(1_500), ms(2_000), ms(30_000), ms(90_000))),
    ..Spec::MEMORY
};

/// What the load threads do with each line: MLC's default reads, or its `-W2` mix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Traffic {
    #[default]
    Read,
    Mix,
}

/// The mix's lines read and written per group.
const MIX_READS: u64 = 2;
const MIX_WRITES: u64 = 1;
/// A written line's words: not a repeated byte, so the loop stays stores, not memset.
const STORED: u64 = 0x0123_4567_89ab_cdef;

impl Traffic {
    const BOTH: [Traffic; 2] = [Traffic::Read, Traffic::Mix];
    fn writes(self, n: u64) -> bool {
        match self {
            Traffic::Read => false,
            Traffic::Mix => n % (MIX_READS + MIX_WRITES) >= MIX_READS,
        }
    }
    /// Bytes the memory moves per counted byte where a written line is read for ownership.
    fn memory_per_counted(self) -> f64 {
        match self {
            Traffic::Read => 1.0,
            Traffic::Mix => (MIX_READS + 2 * MIX_WRITES) as f64 / (MIX_READS + MIX_WRITES) as f64,
        }
    }
    /// Suffix of its metric names ("" for reads, so older results keep their names).
    fn suffix(self) -> &'static str {
        ["", "_mix"][self as usize]
    }
    fn label(self) -> &'static str {
        ["reads", "2 reads : 1 write"][self as usize]
    }
}

const FULL_SWEEP: &[f64] = &[
    4000.0, 2000.0, 1000.0, 600.0, 350.0, 200.0, 120.0, 70.0, 40.0, 20.0, 10.0, 5.0, 0.0,
];
/// Gaps between lines a load thread aims for, ns, lightest load first; the last is none.
const GAPS: PerProfile<&[f64]> = PerProfile::new(
    &[500.0, 0.0],
    &[2000.0, 500.0, 150.0, 50.0, 15.0, 0.0],
    FULL_SWEEP,
    FULL_SWEEP,
);

impl Experiment for LoadedLatency {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    /// Once: a second run would lay and fault both buffers again.
    fn default_repeat(&self, _: Profile) -> usize {
        1
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict::predictions(ctx)
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let allowed = ctx.allowed_cpus();
        let others: Vec<usize> = allowed.into_iter().filter(|&c| c != ctx.cpu).collect();
        if others.is_empty() {
            return Ok(Outcome::skipped(
                "only one CPU is allowed: no other core can load memory while the chase runs (allow at least 2 CPUs)",
            ));
        }
        let (mut out, rss0) = (Outcome::default(), kit::rss_baseline());
        let mut run = Run::new(ctx, &others, &mut out)?;
        run.sw = run.sweep();
        let reference = run.reference.as_ref().map_or(0, |r| r.region.len());
        let (chase, line) = (run.chase.region.len(), run.line);
        let held = chase + run.loads.region.len() + reference + 4 * chase / line;
        out.check(kit::rss_check(rss0, held as u64));
        run.write(&mut out);
        Ok(out)
    }
}

/// One run's CPUs, buffers, gaps, trial settings (loaded, quiet) and sweep.
struct Run<'a, 'c> {
    ctx: &'a Context<'c>,
    gaps: &'static [f64],
    cfg: HarnessConfig,
    quiet_cfg: HarnessConfig,
    line: usize,
    loaders: Vec<usize>,
    chase: Buffer,
    reference: Option<Buffer>,
    loads: Buffer,
    sw: Sweep,
}

impl<'a, 'c> Run<'a, 'c> {
    fn new(ctx: &'a Context<'c>, others: &[usize], out: &mut Outcome) -> anyhow::Result<Self> {
        let caches = ctx.machine.data_caches();
        let line = kit::line_bytes(&caches);
        let (llc, assumed) = kit::llc_or_assumed(&caches);
        out.notes.extend(assumed);
        let (chase_len, load_len, k) = sizes(ctx.machine, ctx.profile, line, others.len())?;
        if k < others.len() {
            out.notes.push(format!(
                "{k} load threads of {} other CPUs: the memory cap holds {k} parts of at least 1 MiB",
                others.len()
            ));
        }
        if (chase_len as u64) < 4 * llc {
            out.notes.push(format!(
                "the chase buffer ({}) is less than 4x the last-level cache ({}): some of its loads hit that cache",
                fmt_bytes(chase_len as f64),
                fmt_bytes(llc as f64)
            ));
        }
        let loaders = ctx.machine.topology.spread(others, k);
        (ctx.progress)("faulting the buffers in");
        let seams = crate::experiments::seams::get();
        let mut chase = mapping(ctx, chase_len, !seams.chase_base_pages)?;
        let mut loads = mapping(ctx, load_len, true)?;
        loads.region.as_mut_slice().fill(0x5a);
        (ctx.progress)("laying the chase");
        let mut rng = Rng::from_entropy();
        let n = (chase_len / line).min(seams.chase_nodes.unwrap_or(usize::MAX));
        laid_chain(&mut chase.region, line, n, &mut rng)?;
        out.notes.push(format!(
            "{n} nodes of {line} B over {}: the chase verified in memory as one cycle",
            fmt_bytes((n * line) as f64)
        ));
        // The reference chase (mem.latency's, laid afresh), unless the memory cap is full.
        let want = (2 * chase_len + load_len + 4 * chase_len / line) as u64;
        let reference = if kit::memory_cap(ctx.machine, ctx.profile, want, 0)? < want {
            out.notes.push(format!(
                "no reference chase: {} more would pass the memory cap (the profile's memory limit); the idle chase is compared with mem.latency's figure from earlier in the run",
                fmt_bytes(chase_len as f64)
            ));
            None
        } else {
            (ctx.progress)("laying the reference chase");
            let mut r = mapping(ctx, chase_len, true)?;
            laid_chain(&mut r.region, line, chase_len / line, &mut rng)?;
            Some(r)
        };
        let cpus: Vec<String> = loaders.iter().map(|c| c.to_string()).collect();
        out.notes.push(format!(
            "chase on CPU {}; load threads on CPUs {} (one per physical core first); chase buffer {} on {}; load buffer {} ({} per thread) on {}",
            ctx.cpu,
            cpus.join(","),
            fmt_bytes(chase_len as f64),
            chase.text,
            fmt_bytes(load_len as f64),
            fmt_bytes((load_len / loaders.len()) as f64),
            loads.text,
        ));
        let gaps = GAPS.get(ctx.profile);
        // The rest of the budget lays the chains and faults the buffers in.
        let trials = HarnessConfig::short_trials(Duration::from_micros(100), 11);
        let budget = |share: f64| ctx.budget.mul_f64(share);
        Ok(Run {
            ctx,
            gaps,
            cfg: trials.clone().for_budget(budget(0.4), 2 * gaps.len() + 1),
            quiet_cfg: trials.for_budget(budget(0.1), 2 * (gaps.len() + 1)),
            line,
            loaders,
            chase,
            reference,
            loads,
            sw: Sweep::default(),
        })
    }
}

const TOTAL: PerProfile<u64> = PerProfile::new(128 << 20, 384 << 20, 4 << 30, 16 << 30);

/// The chase's length, the load buffer's and the load threads (docs/methods).
pub(super) fn sizes(
    machine: &crate::machine::Machine,
    profile: Profile,
    line: usize,
    threads: usize,
) -> anyhow::Result<(usize, usize, usize)> {
    let line = line as u64;
    let cap = kit::memory_cap(machine, profile, TOTAL.get(profile), 32 << 20)?;
    let two = |c: u64| 2 * c + 4 * c / line;
    let fit = (cap as f64 * 0.7 / two(1 << 20) as f64 * (1 << 20) as f64) as u64;
    let chase = 1u64 << (63 - fit.max(1).leading_zeros());
    let load = (cap - two(chase)).max(1 << 20) as usize;
    let threads = threads.clamp(1, load >> 20);
    let part = (load / threads) >> 20 << 20;
    Ok((chase as usize, part * threads, threads))
}

struct Buffer {
    region: Region,
    huge: bool,
    /// Huge pages and the share they back (/proc/self/smaps), or base pages and why.
    text: String,
}

impl Buffer {
    fn pages(&self) -> &'static str {
        ["base pages", "huge pages"][self.huge as usize]
    }
    fn dram(&self) -> &'static str {
        ["dram", "dram_thp"][self.huge as usize]
    }
}

/// A buffer on huge pages where the kernel offers them and `huge` asks, else base pages.
fn mapping(ctx: &Context, len: usize, huge: bool) -> anyhow::Result<Buffer> {
    let why = if !huge {
        Some("a test seam asked for base pages".to_string())
    } else if !kit::thp_available(ctx.machine) {
        Some("transparent huge pages are not available".to_string())
    } else {
        kit::too_small_for_huge_pages(ctx.machine, len)
    };
    let mut region = match why {
        Some(_) => Region::new(len, Pages::Base)?,
        None => Region::aligned(len, Pages::Huge, kit::huge_page(ctx.machine))?,
    };
    region.prefault();
    let (huge, text) = match why {
        Some(w) => (false, format!("base pages ({w})")),
        None => {
            // At most all of it: smaps may count a neighbouring mapping merged with this.
            let f = (region.huge_bytes().unwrap_or(0) as f64 / len as f64).min(1.0);
            let pct = f * 100.0;
            let text = format!("transparent huge pages ({pct:.0}% backed, /proc/self/smaps)");
            (f >= 0.5, text)
        }
    };
    Ok(Buffer { region, huge, text })
}

/// Lays a Sattolo cycle over `n` lines and verifies it: a chain that fails is an error.
fn laid_chain(region: &mut Region, line: usize, n: usize, rng: &mut Rng) -> anyhow::Result<()> {
    lay(region, line, &sattolo(n, rng));
    let one_cycle = verify_chain(region, line, n, rng);
    let not = "the chase chain in memory is not one cycle through every node";
    anyhow::ensure!(one_cycle, not);
    Ok(())
}
