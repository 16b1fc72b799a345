//! mem.loaded-latency: the latency of a dependent chase while the other cores stream
//! reads, or a 2:1 read/write mix, swept from idle to unthrottled (Intel MLC's
//! `--loaded_latency` and its `-W2`, measured with the kernels of mem.latency;
//! docs/METHODOLOGY.md, mem.loaded-latency).
//!
//! One thread (on the run's CPU) chases mem.latency's verified Sattolo cycle over a buffer
//! of at least 8x the last-level cache; load threads, one per physical core first, each
//! read (or read two lines and write one of every three) their own part of a second buffer
//! one cache line at a time with a calibrated delay between lines. Each point is one delay
//! and one traffic; bandwidth is counted over exactly the chase's trials (the load
//! threads' line counters read before and after each trial).

use super::latency::{chase, lay, verify_chain, UNROLL};
use crate::experiments::kit::{measure_raw, measure_trials, Pages, Region};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::{Context, Experiment, Needs, Outcome, Profile, Spec};
use crate::harness::HarnessConfig;
use crate::results::{Check, Prediction, Series};
use crate::rng::{sattolo, Rng};
use crate::units::{fmt_bandwidth, fmt_bytes, fmt_ns};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub(crate) struct LoadedLatency;

/// A point whose latency is more than this over idle is past the knee.
const KNEE_RISE: f64 = 1.2;
/// The idle point agrees with mem.latency's figure when within this ratio (or their 95%
/// intervals overlap): the chase then misses the caches as mem.latency's does.
const IDLE_AGREES: f64 = 0.2;
/// Lines a load thread reads between looks at the stop flag and the clock (its line
/// counter is stored after every line, so even a short trial sees it move).
const BATCH: u64 = 32;

const SPEC: crate::experiments::Spec = crate::experiments::Spec {
    id: "mem.loaded-latency",
    title: "Memory latency under load",
    description: "dependent chase beyond the last-level cache while the other cores stream reads, or a 2:1 read/write mix, with a calibrated delay, idle to unthrottled: latency vs bandwidth (like Intel MLC --loaded_latency, and its -W2)",
    method: crate::method!("mem.loaded-latency"),
    needs: Needs {
        min_cpus: 2,
        ..Needs::NONE
    },
    // a dependent chase, as mem.latency.
    bottleneck: crate::results::Bottleneck::Chase,
    per_core_kind: false,
    subtracts_loop: false,
    budget: None,
};

/// What the load threads do with each line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Traffic {
    /// Every line read (every word loaded): MLC's default, read-only traffic.
    #[default]
    Read,
    /// Of every three lines, two read and one written with ordinary stores (every word
    /// stored; the core reads the line for ownership, then writes it back): MLC's `-W2`,
    /// "2:1 reads-writes".
    Mix,
}

/// The mix: lines read and lines written in each group of `MIX_READS + MIX_WRITES`.
const MIX_READS: u64 = 2;
const MIX_WRITES: u64 = 1;
/// What a written line's words are set to: not a repeated byte, so the store loop stays
/// ordinary stores rather than a memset call.
const STORED: u64 = 0x0123_4567_89ab_cdef;

impl Traffic {
    /// Whether a load thread's `n`th line (from 0) is written rather than read.
    fn writes(self, n: u64) -> bool {
        match self {
            Traffic::Read => false,
            Traffic::Mix => n % (MIX_READS + MIX_WRITES) >= MIX_READS,
        }
    }
    /// Bytes the memory moves per counted byte: a written line is read for ownership and
    /// later written back, so it moves twice.
    fn memory_per_counted(self) -> f64 {
        match self {
            Traffic::Read => 1.0,
            Traffic::Mix => (MIX_READS + 2 * MIX_WRITES) as f64 / (MIX_READS + MIX_WRITES) as f64,
        }
    }
    /// Suffix of its metric names ("" for reads, so older results keep their names).
    fn suffix(self) -> &'static str {
        match self {
            Traffic::Read => "",
            Traffic::Mix => "_mix",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Traffic::Read => "reads",
            Traffic::Mix => "2 reads : 1 write",
        }
    }
}

/// One line of a load thread's stream, the one at word `*pos` of its part: read (every
/// word added into `acc`, eight lanes so no add waits on the one before) or, when the
/// traffic writes the thread's `n`th line, every word stored with ordinary stores. Then
/// `*pos` moves to the next line, back to 0 past the last whole line.
#[inline(always)]
fn step(
    part: &mut [u64],
    words: usize,
    pos: &mut usize,
    n: u64,
    traffic: Traffic,
    acc: &mut [u64; 8],
) {
    let l = &mut part[*pos..*pos + words];
    if traffic.writes(n) {
        for w in l.iter_mut() {
            *w = STORED;
        }
    } else {
        let mut it = l.chunks_exact(8);
        for c in &mut it {
            for k in 0..8 {
                acc[k] = acc[k].wrapping_add(c[k]);
            }
        }
        for (k, w) in it.remainder().iter().enumerate() {
            acc[k] = acc[k].wrapping_add(*w);
        }
    }
    *pos += words;
    if *pos + words > part.len() {
        *pos = 0;
    }
}

/// Gaps between lines a load thread aims for, ns, lightest load first; the last is none.
fn gaps(profile: Profile) -> Vec<f64> {
    match profile {
        Profile::Smoke => vec![500.0, 0.0],
        Profile::Quick => vec![2000.0, 500.0, 150.0, 50.0, 15.0, 0.0],
        Profile::Standard | Profile::Thorough => vec![
            4000.0, 2000.0, 1000.0, 600.0, 350.0, 200.0, 120.0, 70.0, 40.0, 20.0, 10.0, 5.0, 0.0,
        ],
    }
}

impl Experiment for LoadedLatency {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        match p {
            Profile::Smoke => Duration::from_millis(1500),
            Profile::Quick => Duration::from_secs(5),
            Profile::Standard => Duration::from_secs(30),
            Profile::Thorough => Duration::from_secs(90),
        }
    }
    /// Once: a second run lays and faults both buffers again for a curve whose run-to-run
    /// spread compare takes from history, and the findings (idle, loaded, knee) are then
    /// the one run's, as the table shows them.
    fn default_repeat(&self, _: Profile) -> usize {
        1
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        let thp = crate::experiments::kit::thp_available(ctx.machine);
        let chases: &[&str] = if thp {
            &["dram_thp", "dram"]
        } else {
            &["dram"]
        };
        let dram = p.earlier("mem.latency", chases);
        let name = dram.name().to_string();
        p.equal(
            "idle_latency",
            &dram,
            format!("mem.latency's {name}: the same chase, idle"),
        );
        for loaded in ["loaded_latency", "loaded_latency_mix"] {
            p.at_least(
                loaded,
                &dram,
                format!(
                    "mem.latency's {name}, a lower bound: a chase whose misses queue \
                     behind the load threads' is never faster than the idle one (the \
                     queueing is not in the model)"
                ),
            );
        }
        p.withhold(
            &["knee_bandwidth", "knee_bandwidth_mix"],
            "where latency starts to rise depends on the memory controller's queueing, \
             which no measured primitive or table entry describes",
        );
        // The peaks: mem.bandwidth's figures for as many threads as load threads.
        let peaks = peak_predictions(ctx);
        for name in ["peak_bandwidth", "peak_bandwidth_mix"] {
            if !peaks.iter().any(|(n, _)| n == name) {
                p.withhold(
                    &[name],
                    "mem.bandwidth's figures for the load threads' team were not measured \
                     in this run",
                );
            }
        }
        for (n, pr) in peaks {
            p.add(&n, pr);
        }
        outstanding_predictions(&mut p, &dram, thp);
        p.done()
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut allowed = ctx.machine.cpu.allowed_cpus.clone();
        if allowed.is_empty() {
            allowed = crate::platform::allowed_cpus();
        }
        let others: Vec<usize> = allowed.iter().copied().filter(|&c| c != ctx.cpu).collect();
        if others.is_empty() {
            return Ok(Outcome::skipped(
                "only one CPU is allowed: no other core can load memory while the chase runs (allow at least 2 CPUs)",
            ));
        }
        let mut out = Outcome::default();
        let loaders = ctx.machine.topology.spread(&others, others.len());
        let caches = ctx.machine.data_caches();
        let line = crate::experiments::kit::line_bytes(&caches);
        let llc = crate::experiments::kit::llc_bytes(&caches).unwrap_or(32 << 20);
        let (chase_len, load_len) = sizes(ctx, llc, line, loaders.len(), &mut out)?;
        let rss0 = crate::experiments::kit::rss_baseline();
        (ctx.progress)("faulting the buffers in");
        let (mut chain, huge) = mapping(ctx, chase_len)?;
        let (mut loads, load_huge) = mapping(ctx, load_len)?;
        loads.as_mut_slice().fill(0x5a);
        (ctx.progress)("laying the chase");
        let mut rng = Rng::from_entropy();
        let n = chase_len / line;
        let next = sattolo(n, &mut rng);
        lay(&mut chain, line, &next);
        drop(next);
        // A chain that does not verify is never measured, so this is a note, not a check
        // (as a check it could fail in no result).
        if !verify_chain(&chain, line, n, &mut rng) {
            anyhow::bail!("the chase chain in memory is not one cycle through every node");
        }
        out.notes.push(format!(
            "{n} nodes of {line} B over {}: the chase verified in memory as one cycle",
            fmt_bytes(chase_len as f64)
        ));
        out.notes.push(format!(
            "chase on CPU {}; load threads on CPUs {} (one per physical core first); chase buffer {} on {}; load buffer {} ({} per thread) on {}",
            ctx.cpu,
            loaders.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
            fmt_bytes(chase_len as f64),
            huge.text(),
            fmt_bytes(load_len as f64),
            fmt_bytes((load_len / loaders.len()) as f64),
            load_huge.text(),
        ));
        let gaps = gaps(ctx.profile);
        // 45% of the budget for the points (each gap twice, reads and the mix; idle twice)
        // and the delay calibration; laying the chain and faulting the buffers take the rest.
        let points = 2 * gaps.len() + 2;
        let cfg = HarnessConfig::short_trials(Duration::from_micros(100), 11)
            .for_budget(ctx.budget.mul_f64(0.45), points + 1);
        let per_iter = delay_ns_per_iter(ctx, &cfg);
        let team = LoadTeam {
            ctx,
            cfg: &cfg,
            chain: &chain,
            loads: &loads,
            line,
            loaders: &loaders,
        };
        let sweep = team.sweep(&gaps, per_iter);
        drop(chain);
        drop(loads);
        out.check(crate::experiments::kit::rss_check(
            rss0,
            (chase_len + load_len) as u64,
        ));
        report(ctx, &mut out, &sweep, line, &huge, per_iter, &loaders);
        Ok(out)
    }
}

/// The chase buffer (8x the LLC, the size of mem.latency's dram point) and the load
/// buffer (4x the LLC, at least 128 MiB), within the memory cap, a whole number of huge
/// pages and of load parts.
fn sizes(
    ctx: &Context,
    llc: u64,
    line: usize,
    threads: usize,
    out: &mut Outcome,
) -> anyhow::Result<(usize, usize)> {
    let (chase, load) = if ctx.profile == Profile::Smoke {
        (64u64 << 20, 64u64 << 20)
    } else {
        ((8 * llc).next_power_of_two(), (4 * llc).max(128 << 20))
    };
    // The chase's permutation (4 bytes per node) lives while the chain is laid.
    let want = chase + load + 4 * chase / line as u64;
    let cap = crate::experiments::kit::memory_cap(ctx.machine, want, 32 << 20)?;
    let scale = (cap as f64 / want as f64).min(1.0);
    let chase = (1u64 << (63 - ((chase as f64 * scale) as u64).max(1).leading_zeros())) as usize;
    let part = ((load as f64 * scale) as usize / threads).max(1 << 20) >> 20 << 20;
    if (chase as u64) < 4 * llc {
        out.notes.push(format!(
            "the chase buffer ({}) is less than 4x the last-level cache ({}): some of its loads hit that cache",
            fmt_bytes(chase as f64),
            fmt_bytes(llc as f64)
        ));
    }
    Ok((chase, part * threads))
}

/// How the chase buffer is backed.
struct Backing {
    huge_fraction: Option<f64>,
    why_base: Option<String>,
}

impl Backing {
    fn huge(&self) -> bool {
        self.huge_fraction.is_some_and(|f| f >= 0.5)
    }
    fn text(&self) -> String {
        match (self.huge_fraction, &self.why_base) {
            (Some(f), _) => format!(
                "transparent huge pages ({:.0}% backed, /proc/self/smaps)",
                f * 100.0
            ),
            (None, Some(w)) => format!("base pages ({w})"),
            (None, None) => "base pages".into(),
        }
    }
}

/// The chase region: huge pages where the kernel offers them, else base pages.
fn mapping(ctx: &Context, len: usize) -> anyhow::Result<(Region, Backing)> {
    let why = if !crate::experiments::kit::thp_available(ctx.machine) {
        Some("transparent huge pages are not available".to_string())
    } else {
        crate::experiments::kit::too_small_for_huge_pages(ctx.machine, len)
    };
    if let Some(w) = why {
        let mut r = Region::new(len, Pages::Base)?;
        r.prefault();
        return Ok((
            r,
            Backing {
                huge_fraction: None,
                why_base: Some(w),
            },
        ));
    }
    let mut r = Region::aligned(
        len,
        Pages::Huge,
        crate::experiments::kit::huge_page(ctx.machine),
    )?;
    r.prefault();
    // At most all of it: smaps may count a neighbouring mapping the kernel merged with this.
    let f = (r.huge_bytes().unwrap_or(0) as f64 / len as f64).min(1.0);
    Ok((
        r,
        Backing {
            huge_fraction: Some(f),
            why_base: None,
        },
    ))
}

/// Spins `n` iterations (the delay between a load thread's lines).
#[inline(never)]
fn delay(n: u64) {
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// ns per iteration of `delay`, measured on this thread.
fn delay_ns_per_iter(ctx: &Context, cfg: &HarnessConfig) -> f64 {
    let m = measure_raw(ctx.clock, cfg, 1024.0, |iters| {
        for _ in 0..iters {
            delay(1024);
        }
    });
    m.median_ns().max(0.01)
}

/// A load thread's lines read and hiccups (batches that took far longer than its
/// quickest: it was descheduled or stalled), on a cache line of their own (128 bytes:
/// adjacent-line prefetch works in pairs).
#[repr(align(128))]
#[derive(Default)]
struct LineCounter {
    lines: AtomicU64,
    hiccups: AtomicU64,
}

/// A batch slower than twice the quickest plus this is a hiccup, ns: longer than any
/// memory stall, shorter than a time slice.
const HICCUP_SLACK_NS: f64 = 20_000.0;

/// What one load thread saw during one point.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct LoadSpan {
    start: u64,
    end: u64,
    /// getcpu looks, and those that found the thread elsewhere.
    looks: u64,
    off_cpu: u64,
}

/// One point of the curve.
#[derive(Debug, Clone, Default)]
struct LoadPoint {
    /// Target gap between a load thread's lines, ns; None for idle.
    gap: Option<f64>,
    /// What the load threads did with their lines.
    traffic: Traffic,
    /// Chase ns per load, per trial.
    latency: Vec<f64>,
    /// Bytes/s over each trial (load threads and chase).
    bandwidth: Vec<f64>,
    /// Trials set aside (and repeated) because a load thread read nothing or hiccuped
    /// in them.
    stalled: usize,
    /// Trials kept.
    trials: usize,
    /// Spans of the load threads, and the span of the chase's trials.
    spans: Vec<LoadSpan>,
    window: (u64, u64),
    notes: Vec<String>,
    preempted: usize,
}

impl LoadPoint {
    fn latency_ns(&self) -> f64 {
        crate::stats::median(&self.latency)
    }
    fn bandwidth_bps(&self) -> f64 {
        crate::stats::median(&self.bandwidth)
    }
    /// Why the load did not run alongside the whole point, if it did not.
    fn concurrency_failure(&self, loaders: &[usize]) -> Option<String> {
        self.gap?;
        let (w0, w1) = self.window;
        for (s, cpu) in self.spans.iter().zip(loaders) {
            if s.start == 0 || s.start > w0 || s.end < w1 {
                return Some(format!(
                    "the load thread on CPU {cpu} did not span the chase's trials"
                ));
            }
            if s.off_cpu > 0 {
                return Some(format!(
                    "the load thread pinned to CPU {cpu} was elsewhere at {} of {} looks",
                    s.off_cpu, s.looks
                ));
            }
        }
        if self.trials == 0 {
            return Some(format!(
                "no trial had every load thread streaming ({} set aside)",
                self.stalled
            ));
        }
        None
    }
}

/// The chase and its load threads for one run.
struct LoadTeam<'a, 'c> {
    ctx: &'a Context<'c>,
    cfg: &'a HarnessConfig,
    chain: &'a Region,
    loads: &'a Region,
    line: usize,
    loaders: &'a [usize],
}

/// The measured points: idle (before and after, pooled) and each traffic's loaded points,
/// lightest load first.
struct Sweep {
    idle: LoadPoint,
    reads: Vec<LoadPoint>,
    mix: Vec<LoadPoint>,
}

/// What the chase thread tells the load threads.
struct LoadSignals {
    gen: AtomicU64,
    delay: AtomicU64,
    /// The load threads write a line in three (`Traffic::Mix`) rather than only read.
    mix: AtomicBool,
    stop: AtomicBool,
    quit: AtomicBool,
    started: AtomicUsize,
    done: AtomicUsize,
    counters: Vec<LineCounter>,
    spans: Vec<std::sync::Mutex<LoadSpan>>,
}

impl LoadTeam<'_, '_> {
    /// Idle, then each gap from lightest load to none, read-only and then the mix at each
    /// (so both curves see the neighbours' traffic of the same moments), then idle again.
    fn sweep(&self, gaps: &[f64], ns_per_iter: f64) -> Sweep {
        let k = self.loaders.len();
        let sh = LoadSignals {
            gen: AtomicU64::new(0),
            delay: AtomicU64::new(0),
            mix: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            counters: (0..k).map(|_| LineCounter::default()).collect(),
            spans: (0..k).map(|_| Default::default()).collect(),
        };
        let part = self.loads.len() / k / self.line * self.line;
        let base = self.loads.as_ptr() as usize;
        std::thread::scope(|s| {
            for (t, &cpu) in self.loaders.iter().enumerate() {
                let (sh, clock, line) = (&sh, self.ctx.clock, self.line);
                s.spawn(move || {
                    let _ = crate::platform::pin_to_cpu(cpu);
                    load_thread(sh, t, cpu, clock, base + t * part, part, line);
                });
            }
            // One chase position for the whole sweep: restarting each point at node 0 walked
            // the same prefix again, which then sat in the caches (35 ns "DRAM" latencies).
            let mut at = self.chain.as_ptr() as *const u8;
            let mut idle = self.point(&sh, None, Traffic::Read, 0, &mut at);
            (self.ctx.progress)(&format!("idle: {}", fmt_ns(idle.latency_ns())));
            let (mut reads, mut mix) = (Vec::new(), Vec::new());
            for &g in gaps {
                let iters = (g / ns_per_iter).round() as u64;
                for (traffic, pts) in [(Traffic::Read, &mut reads), (Traffic::Mix, &mut mix)] {
                    let p = self.point(&sh, Some(g), traffic, iters, &mut at);
                    (self.ctx.progress)(&format!(
                        "gap {} ({}): {} at {}",
                        fmt_ns(g),
                        traffic.label(),
                        fmt_ns(p.latency_ns()),
                        fmt_bandwidth(p.bandwidth_bps())
                    ));
                    pts.push(p);
                }
            }
            // Idle again after the sweep, pooled with the first: on a shared machine the
            // neighbours' memory traffic changes over time, and one short idle window
            // would stand for all of it.
            let again = self.point(&sh, None, Traffic::Read, 0, &mut at);
            let before = idle.latency_ns();
            idle.notes.push(format!(
                "idle measured before the sweep ({}) and after it ({}); the trials are pooled",
                fmt_ns(before),
                fmt_ns(again.latency_ns())
            ));
            idle.latency.extend(again.latency);
            idle.bandwidth.extend(again.bandwidth);
            idle.preempted += again.preempted;
            idle.notes.extend(again.notes);
            sh.quit.store(true, Ordering::Release);
            sh.gen.fetch_add(1, Ordering::AcqRel);
            Sweep { idle, reads, mix }
        })
    }

    /// One point: release the load threads (unless idle), time the chase, stop them.
    /// One point of the sweep; the chase continues from `at` and leaves it where it stopped.
    fn point(
        &self,
        sh: &LoadSignals,
        gap: Option<f64>,
        traffic: Traffic,
        delay_iters: u64,
        at: &mut *const u8,
    ) -> LoadPoint {
        let clock = self.ctx.clock;
        let k = self.loaders.len();
        if gap.is_some() {
            sh.delay.store(delay_iters, Ordering::Release);
            sh.mix.store(traffic == Traffic::Mix, Ordering::Release);
            sh.stop.store(false, Ordering::Release);
            sh.started.store(0, Ordering::Release);
            sh.done.store(0, Ordering::Release);
            sh.gen.fetch_add(1, Ordering::AcqRel);
            crate::experiments::kit::spin_until(|| sh.started.load(Ordering::Acquire) == k);
        }
        let count = || -> (u64, Vec<(u64, u64)>) {
            let v: Vec<(u64, u64)> = sh
                .counters
                .iter()
                .map(|c| {
                    (
                        c.lines.load(Ordering::Relaxed),
                        c.hiccups.load(Ordering::Relaxed),
                    )
                })
                .collect();
            (v.iter().map(|x| x.0).sum(), v)
        };
        let mut p = LoadPoint {
            gap,
            traffic,
            ..Default::default()
        };
        let mut first = None;
        let mut last = 0u64;
        let line = self.line as f64;
        // A trial counts when this thread was not preempted and, under load, every load
        // thread read lines without a hiccup all through it; others are repeated.
        let m = measure_trials(clock, self.cfg, UNROLL as f64, |iters| {
            let (c0, v0) = count();
            let pre = crate::harness::thread_preemptions();
            let t0 = clock.start();
            // SAFETY: the chain in this region was laid and verified as one cycle before
            // the sweep, and nothing writes the region while the chase runs.
            *at = unsafe { chase(*at, iters) };
            let t1 = clock.stop();
            let quiet = crate::harness::thread_preemptions() == pre;
            let (c1, v1) = count();
            first.get_or_insert(t0);
            last = t1;
            let loaded = v0.iter().zip(&v1).all(|(a, b)| b.0 > a.0 && b.1 == a.1);
            if gap.is_some() && quiet && !loaded {
                p.stalled += 1;
            }
            let quiet = quiet && (gap.is_none() || loaded);
            let ns = clock.ticks_to_ns(t1.saturating_sub(t0) as f64);
            if quiet && ns > 0.0 {
                // A load thread's line counts once, read or written (as mem.bandwidth
                // counts a store); its read for ownership is not counted.
                let bytes = (c1 - c0) as f64 * self.line as f64 + (iters * UNROLL) as f64 * line;
                p.bandwidth.push(bytes / ns * 1e9);
            }
            (t1.saturating_sub(t0), quiet)
        });
        if gap.is_some() {
            // Undisturbed trials only: the harness fills a short count with preempted ones.
            p.trials = m.undisturbed;
        }
        std::hint::black_box(*at);
        if gap.is_some() {
            sh.stop.store(true, Ordering::Release);
            crate::experiments::kit::spin_until(|| sh.done.load(Ordering::Acquire) == k);
            p.spans = sh
                .spans
                .iter()
                .map(|s| *s.lock().unwrap_or_else(|e| e.into_inner()))
                .collect();
        }
        p.window = (first.unwrap_or(0), last);
        p.latency = m.per_op_ns.clone();
        p.preempted = m.preempted;
        p.notes = m.notes.clone();
        p
    }
}

/// A load thread: for each generation, streams its part with the set delay until told
/// to stop, recording its span and where it ran.
fn load_thread(
    sh: &LoadSignals,
    t: usize,
    cpu: usize,
    clock: &dyn crate::clock::Clock,
    base: usize,
    len: usize,
    line: usize,
) {
    let mut seen = 0u64;
    let mut pos = 0usize;
    let mut lines = 0u64;
    let mut hiccups = 0u64;
    let mut acc = [0u64; 8];
    let words = line / 8;
    // SAFETY: base..base+len is this thread's part of the load region (a whole number of
    // lines of a page-aligned mapping, so u64-aligned), which lives for the sweep's scope
    // and which no other thread touches meanwhile.
    let part = unsafe { std::slice::from_raw_parts_mut(base as *mut u64, len / 8) };
    let slack = clock.ns_to_ticks(HICCUP_SLACK_NS) as u64;
    loop {
        // Between points, sleep rather than spin: during the idle point a spinning CPU
        // is not idle (under a hypervisor spinning also exits to the host).
        let mut spins = 0u32;
        while sh.gen.load(Ordering::Acquire) == seen {
            spins += 1;
            if spins % 256 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::hint::spin_loop();
            }
        }
        seen = sh.gen.load(Ordering::Acquire);
        if sh.quit.load(Ordering::Acquire) {
            break;
        }
        let d = sh.delay.load(Ordering::Acquire);
        let traffic = if sh.mix.load(Ordering::Acquire) {
            Traffic::Mix
        } else {
            Traffic::Read
        };
        let mut span = LoadSpan {
            start: clock.now(),
            ..Default::default()
        };
        let look = |span: &mut LoadSpan| {
            span.looks += 1;
            if crate::platform::current_cpu() != Some(cpu) {
                span.off_cpu += 1;
            }
        };
        look(&mut span);
        sh.started.fetch_add(1, Ordering::AcqRel);
        let mut last = clock.now();
        let mut quickest = u64::MAX;
        while !sh.stop.load(Ordering::Relaxed) {
            for _ in 0..BATCH {
                step(part, words, &mut pos, lines, traffic, &mut acc);
                lines += 1;
                sh.counters[t].lines.store(lines, Ordering::Relaxed);
                if d > 0 {
                    delay(d);
                }
            }
            let now = clock.now();
            let took = now.saturating_sub(last);
            last = now;
            quickest = quickest.min(took);
            if took > quickest.saturating_mul(2).saturating_add(slack) {
                hiccups += 1;
                sh.counters[t].hiccups.store(hiccups, Ordering::Relaxed);
            }
            if lines % 1024 == 0 {
                look(&mut span);
            }
        }
        look(&mut span);
        span.end = clock.now();
        *sh.spans[t].lock().unwrap_or_else(|e| e.into_inner()) = span;
        sh.done.fetch_add(1, Ordering::AcqRel);
    }
    std::hint::black_box(acc);
}

/// The knee: the highest-bandwidth point still within `KNEE_RISE` of idle latency.
/// None when the lightest load already exceeds it. Points as (bandwidth, latency).
fn knee(idle: f64, pts: &[(f64, f64)]) -> Option<usize> {
    let mut order: Vec<usize> = (0..pts.len()).collect();
    order.sort_by(|&a, &b| pts[a].0.total_cmp(&pts[b].0));
    let mut best = None;
    for i in order {
        if pts[i].1 <= KNEE_RISE * idle {
            best = Some(i);
        } else {
            break;
        }
    }
    best
}

/// The premise that the idle chase misses the caches as mem.latency's `refname` does.
fn idle_check(
    idle: &crate::stats::Summary,
    reference: &crate::stats::Summary,
    refname: &str,
) -> Check {
    let ratio = idle.median / reference.median;
    let overlap =
        crate::analysis::separation(idle, reference) == crate::analysis::Separation::Overlap;
    Check::premise(
        "the idle chase misses the caches (agrees with mem.latency)",
        (ratio - 1.0).abs() <= IDLE_AGREES || overlap,
        format!(
            "idle {} against mem.latency's {refname} {} ({ratio:.2}x; agreement: within 20% or overlapping 95% intervals)",
            fmt_ns(idle.median),
            fmt_ns(reference.median),
        ),
    )
}

/// Misses in flight by Little's law: bandwidth / line x latency.
fn outstanding(bandwidth: f64, line: usize, latency_ns: f64) -> f64 {
    bandwidth / line as f64 * latency_ns * 1e-9
}

/// Little's law on the team's bandwidth and the idle chase: misses in flight = bandwidth x
/// latency / line. Not a bound: the idle latency errs low, the team's unloaded bandwidth
/// high. The mix's misses count its counted lines, as its measured figure does (reads for
/// ownership and write-backs are in neither).
fn outstanding_predictions(p: &mut Predictions, dram: &Input, thp: bool) {
    let ctx = p.ctx();
    let n = ctx.machine.cpu.allowed_cpus.len().max(1);
    let line = crate::experiments::kit::line_bytes(&ctx.machine.data_caches());
    let line_in = Input::machine(
        "line",
        Some(line as f64),
        "bytes",
        "machine: cache line size (sysfs)",
        "no cache line size",
    );
    let (reads, writes) = (team_figures("read", n, thp), team_figures("write", n, thp));
    let names: Vec<&str> = reads.iter().map(String::as_str).collect();
    let bw = p.earlier("mem.bandwidth", &names);
    let (bname, lname) = (bw.name().to_string(), dram.name().to_string());
    p.state("loaded_outstanding_misses", &[&bw, dram, &line_in], |v| {
        Prediction::new(
            outstanding(v[0], line, v[1]),
            format!(
                "Little's law: {bname} x {lname} / line (the idle latency for the loaded one, \
                 which alone would make it low; but the bandwidth is mem.bandwidth's, which \
                 the loaded team may not reach: not a bound)"
            ),
        )
    });
    let pairs: Vec<(Input, Input)> = reads
        .iter()
        .zip(&writes)
        .map(|(r, w)| {
            (
                p.earlier("mem.bandwidth", &[r]),
                p.earlier("mem.bandwidth", &[w]),
            )
        })
        .collect();
    let Some((r, w)) = pairs
        .iter()
        .find(|(r, w)| r.value().is_some() && w.value().is_some())
        .or(pairs.first())
    else {
        return;
    };
    let (rn, wn) = (r.name().to_string(), w.name().to_string());
    p.state(
        "loaded_outstanding_misses_mix",
        &[r, w, dram, &line_in],
        |v| {
            Prediction::new(
                outstanding(mix_bandwidth(v[0], v[1]), line, v[2]),
                format!(
                "Little's law on the counted lines: 3 / (2 / {rn} + 1 / {wn}) x {lname} / line \
                 (the idle latency for the loaded one, which alone would make it low; but the \
                 bandwidths are mem.bandwidth's, which the loaded team may not reach: not a \
                 bound)"
            ),
            )
        },
    );
}

/// mem.bandwidth's figures for the load threads' team, most like it first: `op` ("read",
/// "write") with as many threads as load threads (all allowed CPUs but the chase's), on
/// huge pages when there is one load thread and the kernel gives them (mem.bandwidth
/// measures huge pages with one thread only), else the all-thread figure when that count
/// was not measured (large machines measure powers of two and N).
fn team_figures(op: &str, allowed: usize, thp: bool) -> Vec<String> {
    let k = allowed.saturating_sub(1).max(1);
    match (k, thp) {
        (1, true) => vec![format!("{op}_thp_1t"), format!("{op}_1t")],
        (1, false) => vec![format!("{op}_1t")],
        _ => vec![format!("{op}_{k}t"), format!("{op}_{allowed}t")],
    }
}

/// The first of `names` mem.bandwidth measured earlier in the run, with its median.
fn earlier_bandwidth(ctx: &Context, names: &[String]) -> Option<(String, f64)> {
    names.iter().find_map(|n| {
        ctx.earlier_median("mem.bandwidth", n)
            .map(|v| (n.clone(), v))
    })
}

/// The mix's bandwidth from a read and a write bandwidth: of every three lines two take
/// a read's time and one a write's (bytes counted as both figures count them).
fn mix_bandwidth(read: f64, write: f64) -> f64 {
    (MIX_READS + MIX_WRITES) as f64 / (MIX_READS as f64 / read + MIX_WRITES as f64 / write)
}

/// The predictions of the peak bandwidths: the read of the same team for reads; for the
/// mix, that read and the team's write combined by `mix_bandwidth`.
fn peak_predictions(ctx: &Context) -> Vec<(String, Prediction)> {
    let n = ctx.machine.cpu.allowed_cpus.len().max(1);
    let thp = crate::experiments::kit::thp_available(ctx.machine);
    let k = n.saturating_sub(1).max(1);
    let mut v = Vec::new();
    let reads = team_figures("read", n, thp);
    if let Some((name, bw)) = earlier_bandwidth(ctx, &reads) {
        v.push((
            "peak_bandwidth".to_string(),
            Prediction::new(
                bw,
                format!(
                    "mem.bandwidth's {name}: the read of as many threads as load threads ({k})"
                ),
            )
            .measured(
                &name,
                bw,
                "bytes/s",
                format!("measured: mem.bandwidth {name}"),
            ),
        ));
    }
    let writes = team_figures("write", n, thp);
    let pair = reads.iter().zip(&writes).find_map(|(r, w)| {
        Some((
            r,
            ctx.earlier_median("mem.bandwidth", r)?,
            w,
            ctx.earlier_median("mem.bandwidth", w)?,
        ))
    });
    if let Some((r, rb, w, wb)) = pair {
        v.push((
            "peak_bandwidth_mix".to_string(),
            Prediction::new(
                mix_bandwidth(rb, wb),
                format!(
                    "3 / (2 / {r} + 1 / {w}): of every three lines two at mem.bandwidth's read rate and one at its write rate (ordinary stores, read for ownership), {k} thread(s)"
                ),
            )
            .measured(r, rb, "bytes/s", format!("measured: mem.bandwidth {r}"))
            .measured(w, wb, "bytes/s", format!("measured: mem.bandwidth {w}")),
        ));
    }
    v
}

/// Metrics, series, checks and findings from the measured points.
fn report(
    ctx: &Context,
    out: &mut Outcome,
    sw: &Sweep,
    line: usize,
    huge: &Backing,
    ns_per_iter: f64,
    loaders: &[usize],
) {
    let idle = &sw.idle;
    let loaded: Vec<&LoadPoint> = sw.reads.iter().chain(&sw.mix).collect();
    // Premise: the load ran alongside every loaded point, of both traffics.
    let fails: Vec<String> = loaded
        .iter()
        .filter_map(|p| {
            p.concurrency_failure(loaders).map(|w| {
                format!(
                    "gap {} ({}): {w}",
                    fmt_ns(p.gap.unwrap_or(0.0)),
                    p.traffic.label()
                )
            })
        })
        .collect();
    let stalled: usize = loaded.iter().map(|p| p.stalled).sum();
    let trials: usize = loaded.iter().map(|p| p.trials).sum();
    let pin = crate::platform::pinning_premise_failure(&crate::platform::pin_support());
    out.check(Check::premise(
        "the load threads ran alongside the chase for every point",
        fails.is_empty() && pin.is_none(),
        match (&pin, fails.is_empty()) {
            (Some(w), _) => w.clone(),
            (None, true) => format!(
                "{} loaded points ({} read-only, {} of the read/write mix): every load thread started before the chase's first trial and stopped after its last, on its CPU at every look; {trials} trials kept with every load thread streaming, {stalled} set aside and repeated (a load thread read nothing or was held up more than 20 us in them)",
                loaded.len(),
                sw.reads.len(),
                sw.mix.len()
            ),
            (None, false) => fails.join("; "),
        },
    ));
    // Premise: the idle chase misses the caches as mem.latency's does.
    let refname = if huge.huge() { "dram_thp" } else { "dram" };
    let idle_sum = crate::stats::Summary::of(&idle.latency);
    match (ctx.earlier_metric("mem.latency", refname), &idle_sum) {
        (Some(r), Some(s)) => out.check(idle_check(s, &r.summary, refname)),
        _ => out.notes.push(format!(
            "mem.latency's {refname} is not in this run: the idle point is not compared with it"
        )),
    }
    let page = if huge.huge() {
        "huge pages"
    } else {
        "base pages"
    };
    out.metric(
        "idle_latency",
        "ns",
        &format!(
            "chase latency with no load thread running ({page}); the idle point of both curves"
        ),
        idle.latency.clone(),
    );
    let predicted: Vec<(String, Prediction)> = peak_predictions(ctx);
    for (traffic, pts) in [(Traffic::Read, &sw.reads), (Traffic::Mix, &sw.mix)] {
        let c = LoadCurve {
            traffic,
            idle,
            loaded: pts,
            line,
            page,
            loaders,
        };
        let pred = predicted
            .iter()
            .find(|(n, _)| *n == format!("peak_bandwidth{}", traffic.suffix()))
            .map(|(_, p)| p);
        c.report(ctx, out, pred);
    }
    out.notes.push(format!(
        "delay loop: {:.2} ns per iteration (measured on the chase's CPU); {} chase trials were preempted and repeated",
        ns_per_iter,
        std::iter::once(idle).chain(loaded.iter().copied()).map(|p| p.preempted).sum::<usize>()
    ));
    for p in std::iter::once(idle).chain(loaded.iter().copied()) {
        for n in &p.notes {
            out.notes.push(format!(
                "gap {}{}: {n}",
                p.gap.map_or("idle".to_string(), fmt_ns),
                if p.gap.is_some() {
                    format!(" ({})", p.traffic.label())
                } else {
                    String::new()
                }
            ));
        }
    }
}

/// One traffic's curve: the shared idle point and its loaded points, lightest first.
struct LoadCurve<'a> {
    traffic: Traffic,
    idle: &'a LoadPoint,
    loaded: &'a [LoadPoint],
    line: usize,
    page: &'a str,
    loaders: &'a [usize],
}

impl LoadCurve<'_> {
    /// Its series, metrics (named with the traffic's suffix), knee and findings.
    fn report(&self, ctx: &Context, out: &mut Outcome, predicted: Option<&Prediction>) {
        let (t, sfx, line) = (self.traffic, self.traffic.suffix(), self.line);
        let name = |base: &str| format!("{base}{sfx}");
        let idle = self.idle;
        let pts: Vec<&LoadPoint> = std::iter::once(idle).chain(self.loaded).collect();
        self.push_series(out, &pts);
        let Some(full) = self.loaded.last() else {
            return;
        };
        let what = match t {
            Traffic::Read => "reading".to_string(),
            Traffic::Mix => format!(
                "reading {MIX_READS} lines and writing {MIX_WRITES} of every {}",
                MIX_READS + MIX_WRITES
            ),
        };
        let counted = match t {
            Traffic::Read => "load threads' and chase's lines".to_string(),
            Traffic::Mix => format!(
                "lines the load threads read or wrote, each once, and the chase's; a written line's read for ownership is not counted (the memory moved {:.2}x the load threads' count)",
                t.memory_per_counted()
            ),
        };
        let (loaded_name, peak_name, misses_name, knee_name) = (
            name("loaded_latency"),
            name("peak_bandwidth"),
            name("loaded_outstanding_misses"),
            name("knee_bandwidth"),
        );
        out.metric(
            &loaded_name,
            "ns",
            &format!(
                "chase latency with every load thread {what} unthrottled ({} thread(s), {})",
                self.loaders.len(),
                self.page
            ),
            full.latency.clone(),
        );
        let peak = pts
            .iter()
            .copied()
            .max_by(|a, b| a.bandwidth_bps().total_cmp(&b.bandwidth_bps()))
            .unwrap_or(full);
        out.metric(
            &peak_name,
            "bytes/s",
            &format!(
                "highest bandwidth of the {} sweep, per chase trial, at gap {}: {counted}",
                t.label(),
                fmt_ns(peak.gap.unwrap_or(0.0))
            ),
            peak.bandwidth.clone(),
        );
        out.metric(
            &misses_name,
            "lines",
            &format!("misses in flight at the unthrottled {} point by Little's law: bandwidth / line x chase latency, per trial", t.label()),
            full.bandwidth
                .iter()
                .zip(&full.latency)
                .map(|(&b, &l)| outstanding(b, line, l))
                .collect(),
        );
        let il = idle.latency_ns();
        self.summary_finding(out, peak, predicted, &loaded_name, &peak_name);
        if t == Traffic::Read {
            self.read_shares(ctx, out, peak.bandwidth_bps());
        }
        self.knee(out, il, peak, &knee_name, &peak_name);
        self.points_note(out, &pts);
    }

    /// The latency and misses-in-flight curves against bandwidth, idle point first.
    fn push_series(&self, out: &mut Outcome, pts: &[&LoadPoint]) {
        let line = self.line;
        let series = |base: &str| match self.traffic {
            Traffic::Read => base.to_string(),
            Traffic::Mix => format!("mix_{base}"),
        };
        let curve: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.bandwidth_bps(), p.latency_ns()))
            .collect();
        out.series.push(Series {
            name: series("latency_vs_bandwidth"),
            x_unit: "bytes/s".into(),
            y_unit: "ns".into(),
            points: curve.iter().map(|&(b, l)| [b, l]).collect(),
        });
        out.series.push(Series {
            name: series("outstanding_misses_vs_bandwidth"),
            x_unit: "bytes/s".into(),
            y_unit: "lines".into(),
            points: curve
                .iter()
                .map(|&(b, l)| [b, outstanding(b, line, l)])
                .collect(),
        });
    }

    /// The finding: idle against the unthrottled point, and the peak against its prediction.
    fn summary_finding(
        &self,
        out: &mut Outcome,
        peak: &LoadPoint,
        predicted: Option<&Prediction>,
        loaded_name: &str,
        peak_name: &str,
    ) {
        let (t, idle) = (self.traffic, self.idle);
        let Some(full) = self.loaded.last() else {
            return;
        };
        let (il, fl) = (idle.latency_ns(), full.latency_ns());
        let side = match (
            crate::stats::Summary::of(&full.latency),
            crate::stats::Summary::of(&idle.latency),
        ) {
            (Some(f), Some(i)) => match crate::analysis::separation(&f, &i) {
                crate::analysis::Separation::Above => "above idle, 95% intervals apart",
                crate::analysis::Separation::Below => "below idle, 95% intervals apart",
                crate::analysis::Separation::Overlap => "within noise of idle",
            },
            _ => "too few trials to compare",
        };
        // The peak against its prediction: the same team's figure from mem.bandwidth.
        let against = predicted
            .map(|p| {
                let inputs: Vec<&str> = p.inputs.keys().map(|k| k.as_str()).collect();
                format!(
                    " ({:.2}x of {}, predicted from mem.bandwidth's {} with as many threads as load threads)",
                    peak.bandwidth_bps() / p.value,
                    fmt_bandwidth(p.value),
                    inputs.join(" and ")
                )
            })
            .unwrap_or_default();
        let text = match t {
            Traffic::Read => format!(
                "Loaded latency: {} idle, {} with {} load thread(s) reading unthrottled ({:.2}x, {side}), at {}; peak bandwidth {}{against}.",
                fmt_ns(il),
                fmt_ns(fl),
                self.loaders.len(),
                fl / il,
                fmt_bandwidth(full.bandwidth_bps()),
                fmt_bandwidth(peak.bandwidth_bps())
            ),
            Traffic::Mix => format!(
                "Under a {} load (ordinary stores): {} with {} load thread(s) unthrottled ({:.2}x idle, {side}), at {}; peak {}{against}, counting each written line once (with its read for ownership the memory moved about {}).",
                t.label(),
                fmt_ns(fl),
                self.loaders.len(),
                fl / il,
                fmt_bandwidth(full.bandwidth_bps()),
                fmt_bandwidth(peak.bandwidth_bps()),
                fmt_bandwidth(peak.bandwidth_bps() * t.memory_per_counted())
            ),
        };
        out.finding_salient(text, &["idle_latency", loaded_name, peak_name], fl / il);
    }

    /// The knee: the highest bandwidth whose latency stays within `KNEE_RISE` of idle.
    fn knee(&self, out: &mut Outcome, il: f64, peak: &LoadPoint, knee_name: &str, peak_name: &str) {
        let lp: Vec<(f64, f64)> = self
            .loaded
            .iter()
            .map(|p| (p.bandwidth_bps(), p.latency_ns()))
            .collect();
        let label = self.traffic.label();
        match knee(il, &lp) {
            Some(i) if i + 1 == lp.len() || lp[i].0 >= peak.bandwidth_bps() => {
                out.notes.push(format!(
                    "{label}: no knee: latency stayed within {:.0}% of idle up to the highest bandwidth reached",
                    (KNEE_RISE - 1.0) * 100.0
                ))
            }
            Some(i) => {
                let kp = &self.loaded[i];
                out.metric(
                    knee_name,
                    "bytes/s",
                    &format!(
                        "the highest bandwidth of the {label} sweep whose chase latency stays within {:.0}% of idle",
                        (KNEE_RISE - 1.0) * 100.0
                    ),
                    kp.bandwidth.clone(),
                );
                out.finding(
                    format!(
                        "Knee ({label}) at {} ({:.0}% of the peak): latency {} there, {} at the peak.",
                        fmt_bandwidth(kp.bandwidth_bps()),
                        100.0 * kp.bandwidth_bps() / peak.bandwidth_bps(),
                        fmt_ns(kp.latency_ns()),
                        fmt_ns(peak.latency_ns())
                    ),
                    &[knee_name, peak_name],
                );
            }
            None => out.notes.push(format!(
                "{label}: no knee: the lightest load already raised latency by more than {:.0}%",
                (KNEE_RISE - 1.0) * 100.0
            )),
        }
    }

    /// Every point of the sweep as a note (gap target, bandwidth, latency, misses).
    fn points_note(&self, out: &mut Outcome, pts: &[&LoadPoint]) {
        let (label, line) = (self.traffic.label(), self.line);
        out.notes.push(format!(
            "points, {label} (gap target -> bandwidth, latency, misses in flight): {}",
            pts.iter()
                .map(|p| format!(
                    "{} -> {}, {}, {:.1}",
                    p.gap.map_or("idle".to_string(), fmt_ns),
                    fmt_bandwidth(p.bandwidth_bps()),
                    fmt_ns(p.latency_ns()),
                    outstanding(p.bandwidth_bps(), line, p.latency_ns())
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }

    /// The read peak as a share of each of mem.bandwidth's reads this run measured with
    /// the load threads' count, the chase's CPU added, and one thread.
    fn read_shares(&self, ctx: &Context, out: &mut Outcome, peak: f64) {
        let n = ctx.machine.cpu.allowed_cpus.len().max(1);
        let teams: std::collections::BTreeSet<String> = [1, n - 1, n]
            .iter()
            .filter(|&&t| t >= 1)
            .map(|t| t.to_string())
            .collect();
        let reads: Vec<String> = std::iter::once("thp_1".to_string())
            .chain(teams)
            .filter_map(|t| {
                let name = format!("read_{t}t");
                ctx.earlier_median("mem.bandwidth", &name).map(|bw| {
                    format!(
                        "{:.0}% of mem.bandwidth's {name} ({})",
                        100.0 * peak / bw,
                        fmt_bandwidth(bw)
                    )
                })
            })
            .collect();
        if !reads.is_empty() {
            out.notes.push(format!(
                "peak bandwidth {} with {} load thread(s) and the chase: {}",
                fmt_bandwidth(peak),
                self.loaders.len(),
                reads.join(", ")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_is_the_last_point_near_idle() {
        let pts = [(1e9, 100.0), (5e9, 110.0), (9e9, 119.0), (1.2e10, 180.0)];
        assert_eq!(knee(100.0, &pts), Some(2));
        assert_eq!(knee(100.0, &[(1e9, 150.0)]), None);
        // Order by bandwidth, not by position.
        let pts = [(1.2e10, 180.0), (1e9, 100.0)];
        assert_eq!(knee(100.0, &pts), Some(1));
    }

    #[test]
    fn littles_law() {
        // 10 GB/s of 64-byte lines at 100 ns: 15.6 lines in flight.
        let v = outstanding(10e9, 64, 100.0);
        assert!((v - 15.625).abs() < 1e-9, "{v}");
    }

    fn span(start: u64, end: u64) -> LoadSpan {
        LoadSpan {
            start,
            end,
            looks: 3,
            off_cpu: 0,
        }
    }

    #[test]
    fn concurrency_premise_fails_when_a_load_thread_misses_the_window() {
        let mut p = LoadPoint {
            gap: Some(0.0),
            window: (100, 200),
            spans: vec![span(50, 250), span(60, 220)],
            trials: 8,
            ..Default::default()
        };
        assert_eq!(p.concurrency_failure(&[0, 1]), None);
        p.spans[1] = span(120, 220);
        assert!(p.concurrency_failure(&[0, 1]).unwrap().contains("CPU 1"));
        p.spans[1] = span(60, 150);
        assert!(p.concurrency_failure(&[0, 1]).is_some());
        p.spans[1] = LoadSpan {
            off_cpu: 1,
            ..span(60, 220)
        };
        assert!(p
            .concurrency_failure(&[0, 1])
            .unwrap()
            .contains("elsewhere"));
        p.spans[1] = span(60, 220);
        p.stalled = 3;
        assert_eq!(p.concurrency_failure(&[0, 1]), None, "some trials kept");
        p.trials = 0;
        assert!(p.concurrency_failure(&[0, 1]).unwrap().contains("no trial"));
        // Idle points have no load to check.
        let idle = LoadPoint::default();
        assert_eq!(idle.concurrency_failure(&[0]), None);
    }

    #[test]
    fn idle_premise_fails_when_the_chase_hits_a_cache() {
        let s = |v: &[f64]| crate::stats::Summary::of(v).unwrap();
        let dram = s(&[150.0, 152.0, 149.0, 151.0, 150.0]);
        assert!(idle_check(&s(&[160.0, 162.0, 158.0, 161.0, 159.0]), &dram, "dram_thp").passed);
        // 40 ns: the chase found its lines in the last-level cache.
        let c = idle_check(&s(&[40.0, 41.0, 39.0, 40.5, 40.0]), &dram, "dram_thp");
        assert!(!c.passed && c.premise, "{}", c.detail);
        assert!(c.detail.contains("dram_thp"), "{}", c.detail);
    }

    /// The generator's kernel over `lines` lines of `words` words each (all ones), from
    /// line 0: (lines written, words read into the accumulators, position after).
    fn stream(traffic: Traffic, words: usize, lines: usize, steps: u64) -> (usize, u64, usize) {
        let mut part = vec![1u64; words * lines];
        let (mut pos, mut acc) = (0usize, [0u64; 8]);
        for n in 0..steps {
            step(&mut part, words, &mut pos, n, traffic, &mut acc);
        }
        let written = part
            .chunks_exact(words)
            .filter(|l| l.iter().all(|&w| w == STORED))
            .count();
        // No line half written: each is all stored or all as it was.
        assert!(part
            .chunks_exact(words)
            .all(|l| l.iter().all(|&w| w == STORED) || l.iter().all(|&w| w == 1)));
        (written, acc.iter().sum(), pos)
    }

    #[test]
    fn the_mix_writes_one_line_in_three_and_reads_the_others() {
        for words in [8, 16, 4] {
            // 30 lines: ten written, twenty read whole, back at the start.
            let (w, r, pos) = stream(Traffic::Mix, words, 30, 30);
            assert_eq!(
                (w, r, pos),
                (10, 20 * words as u64, 0),
                "{words} words a line"
            );
            let (w, r, pos) = stream(Traffic::Read, words, 30, 30);
            assert_eq!(
                (w, r, pos),
                (0, 30 * words as u64, 0),
                "{words} words a line"
            );
        }
        // Which lines: the third of every three, counted across a wrap of the part.
        let mix: Vec<bool> = (0..9).map(|n| Traffic::Mix.writes(n)).collect();
        assert_eq!(mix.iter().filter(|&&w| w).count(), 3);
        assert_eq!(&mix[..3], &[false, false, true]);
        assert!((0..9).all(|n| !Traffic::Read.writes(n)));
        // A part that is not a multiple of three lines still writes one line in three.
        let writes = (0..3000).filter(|&n| Traffic::Mix.writes(n)).count();
        assert_eq!(writes, 1000);
        let (_, _, pos) = stream(Traffic::Mix, 8, 7, 9);
        assert_eq!(pos, 2 * 8, "wrapped after the seventh line");
    }

    #[test]
    fn bytes_counted_per_line() {
        // Memory moves 4 lines for 3 counted in the mix: a write is an RFO read and a
        // write-back.
        assert_eq!(Traffic::Read.memory_per_counted(), 1.0);
        assert!((Traffic::Mix.memory_per_counted() - 4.0 / 3.0).abs() < 1e-12);
        assert_eq!(Traffic::Read.suffix(), "");
        assert_eq!(Traffic::Mix.suffix(), "_mix");
    }

    #[test]
    fn mix_prediction_adds_time_per_line() {
        assert!((mix_bandwidth(10e9, 10e9) - 10e9).abs() < 1.0);
        // Two lines at 18 GB/s and one at 12 GB/s: 3 / (2/18 + 1/12) = 15.43 GB/s.
        let v = mix_bandwidth(18e9, 12e9);
        assert!((v - 3.0 / (2.0 / 18e9 + 1.0 / 12e9)).abs() < 1.0, "{v}");
        assert!(v < 18e9 && v > 12e9);
    }

    #[test]
    fn the_peak_is_predicted_by_the_same_number_of_threads() {
        assert_eq!(team_figures("read", 2, true), ["read_thp_1t", "read_1t"]);
        assert_eq!(team_figures("read", 2, false), ["read_1t"]);
        assert_eq!(team_figures("write", 2, false), ["write_1t"]);
        // Seven load threads: read_7t, else the all-thread read where 7 was not measured.
        assert_eq!(team_figures("read", 8, true), ["read_7t", "read_8t"]);
        assert_eq!(team_figures("read", 1, false), ["read_1t"]);
    }

    /// mem.bandwidth's figures, as earlier results.
    struct EarlierBandwidth(Vec<crate::results::Metric>);

    impl crate::experiments::EarlierResults for EarlierBandwidth {
        fn metric(&self, experiment: &str, metric: &str) -> Option<&crate::results::Metric> {
            if experiment != "mem.bandwidth" {
                return None;
            }
            self.0.iter().find(|m| m.name == metric)
        }
    }

    fn point(gap: Option<f64>, traffic: Traffic, bw: f64, lat: f64) -> LoadPoint {
        let wobble = [1.0, 1.01, 0.99, 1.005, 0.995];
        LoadPoint {
            gap,
            traffic,
            latency: wobble.iter().map(|w| lat * w).collect(),
            bandwidth: wobble.iter().map(|w| bw * w).collect(),
            trials: 5,
            spans: if gap.is_some() {
                vec![span(1, 100)]
            } else {
                vec![]
            },
            window: (10, 90),
            ..Default::default()
        }
    }

    /// A sweep of both traffics through `report`, on a 2-CPU machine whose mem.bandwidth
    /// measured the one-thread read and write: the metrics, series and predictions by name.
    #[test]
    fn both_curves_report_their_metrics_by_name() {
        let mut m = crate::machine::Machine::default();
        m.cpu.allowed_cpus = vec![0, 1];
        m.memory.thp_enabled = Some("never".into());
        let mut bw = Outcome::default();
        bw.metric("read_1t", "bytes/s", "", vec![18e9; 5]);
        bw.metric("write_1t", "bytes/s", "", vec![12e9; 5]);
        let earlier = EarlierBandwidth(bw.metrics);
        let clock = crate::clock::detect(None).0;
        let scratch = std::sync::OnceLock::new();
        let ctx = Context {
            profile: Profile::Quick,
            machine: &m,
            clock: &clock,
            cpu: 1,
            budget: Duration::from_millis(100),
            earlier: &earlier,
            options: &Default::default(),
            loop_ticks: 0.0,
            progress: &|_| {},
            scratch_cell: &scratch,
            repetition: crate::experiments::Repetition::SINGLE,
        };
        let sw = Sweep {
            idle: point(None, Traffic::Read, 0.4e9, 100.0),
            reads: vec![
                point(Some(2000.0), Traffic::Read, 1e9, 105.0),
                point(Some(0.0), Traffic::Read, 15e9, 150.0),
            ],
            mix: vec![
                point(Some(2000.0), Traffic::Mix, 1e9, 108.0),
                point(Some(0.0), Traffic::Mix, 12e9, 160.0),
            ],
        };
        let huge = Backing {
            huge_fraction: None,
            why_base: None,
        };
        let mut out = Outcome::default();
        report(&ctx, &mut out, &sw, 64, &huge, 0.5, &[0]);
        let names: Vec<&str> = out.metrics.iter().map(|m| m.name.as_str()).collect();
        for want in [
            "idle_latency",
            "loaded_latency",
            "peak_bandwidth",
            "loaded_outstanding_misses",
            "knee_bandwidth",
            "loaded_latency_mix",
            "peak_bandwidth_mix",
            "loaded_outstanding_misses_mix",
            "knee_bandwidth_mix",
        ] {
            assert!(names.contains(&want), "{want} not in {names:?}");
        }
        assert_eq!(names.len(), 9, "{names:?}");
        let series: Vec<&str> = out.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            series,
            [
                "latency_vs_bandwidth",
                "outstanding_misses_vs_bandwidth",
                "mix_latency_vs_bandwidth",
                "mix_outstanding_misses_vs_bandwidth"
            ]
        );
        // Both curves start at the shared idle point and end unthrottled.
        assert_eq!(out.series[2].points.len(), 3);
        assert_eq!(out.series[0].points[0], out.series[2].points[0]);
        let peak = out.metrics.iter().find(|m| m.name == "peak_bandwidth_mix");
        assert!((peak.unwrap().summary.median - 12e9).abs() < 1e6);
        // Every finding names metrics the experiment reports.
        for f in &out.findings {
            for r in &f.from {
                let metric = r.rsplit('/').next().unwrap_or(r);
                assert!(names.contains(&metric), "{r} in {:?}", f.text);
            }
        }
        let mix = out
            .findings
            .iter()
            .find(|f| f.text.starts_with("Under a 2 reads : 1 write"));
        let mix = mix.expect("a finding for the mix");
        assert!(
            mix.text.contains("counting each written line once"),
            "{}",
            mix.text
        );
        assert!(mix.text.contains("read_1t and write_1t"), "{}", mix.text);
        // Predictions: the one-thread read, and the mix of the one-thread read and write.
        let p = peak_predictions(&ctx);
        let get = |n: &str| p.iter().find(|(m, _)| m == n).map(|(_, p)| p.value);
        assert_eq!(get("peak_bandwidth"), Some(18e9));
        assert_eq!(get("peak_bandwidth_mix"), Some(mix_bandwidth(18e9, 12e9)));
    }

    /// The experiment as the runner wires it, here (smoke: 64 MiB buffers): the mix's
    /// metrics come out beside the reads', with bandwidths a memory system can move.
    #[test]
    fn the_mix_is_measured_on_this_machine() {
        if crate::platform::allowed_cpus().len() < 2 {
            return crate::experiments::testing::skip(
                "the_mix_is_measured_on_this_machine",
                "one CPU allowed: no core to load memory beside the chase",
            );
        }
        let clock = crate::clock::detect(None).0;
        let w = crate::experiments::testing::World::live(&clock);
        let r = w.run(&LoadedLatency);
        // Measured: ok, or invalid when a premise failed on a busy machine (the figures
        // are still reported), never skipped or failed.
        use crate::results::Status;
        assert!(
            matches!(r.status, Status::Ok | Status::Invalid | Status::Unverified),
            "{:?} {:?}",
            r.status,
            r.reason
        );
        for t in [Traffic::Read, Traffic::Mix] {
            let name = format!("peak_bandwidth{}", t.suffix());
            let m = r
                .metric(&name)
                .unwrap_or_else(|| panic!("no {name}: {:?}", r.reason));
            // More than the chase alone (a line per microsecond), less than 10 TB/s, when
            // every premise held (on a machine busy with other tests a load thread may be
            // held up in every trial: then invalid, and the reason says so).
            let plausible = m.summary.median > 64e6 && m.summary.median < 1e13;
            assert!(
                plausible || (r.status == Status::Invalid && r.reason.is_some()),
                "{name} {} {:?}",
                m.summary.median,
                r.status
            );
            assert!(r.metric(&format!("loaded_latency{}", t.suffix())).is_some());
        }
    }

    #[test]
    fn gaps_end_unthrottled() {
        for p in Profile::ALL {
            let g = gaps(p);
            assert_eq!(g.last(), Some(&0.0));
            assert!(g.windows(2).all(|w| w[0] > w[1]), "{p:?}");
        }
    }
}
