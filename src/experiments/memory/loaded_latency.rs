//! mem.loaded-latency: the latency of a dependent chase while the other cores stream
//! reads, swept from idle to unthrottled (Intel MLC's `--loaded_latency`, measured the
//! same way with the kernels of mem.latency; docs/METHODOLOGY.md, mem.loaded-latency).
//!
//! One thread (on the run's CPU) chases mem.latency's verified Sattolo cycle over a buffer
//! of at least 8x the last-level cache; load threads, one per physical core first, each
//! read their own part of a second buffer one cache line at a time with a calibrated delay
//! between lines. Each point is one delay; bandwidth is counted over exactly the chase's
//! trials (the load threads' line counters read before and after each trial).

use super::latency::{chase, lay, verify_chain, UNROLL};
use super::{measure_raw, measure_trials, Pages, Region};
use crate::experiments::{Context, Experiment, ExperimentMeta, Needs, Outcome, Profile};
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

const META: ExperimentMeta = ExperimentMeta {
    id: "mem.loaded-latency",
    title: "Memory latency under load",
    description: "dependent chase beyond the last-level cache while the other cores stream reads with a calibrated delay, idle to unthrottled: latency vs bandwidth (like Intel MLC --loaded_latency)",
    method: "The chase thread runs on the run's CPU and follows mem.latency's verified Sattolo cycle (one node per \
        cache line, each load's address from the one before) over a buffer of 8x the last-level cache (the size \
        of mem.latency's dram point), on transparent huge pages where the kernel provides them (the backing read \
        from /proc/self/smaps is noted; else base pages). Load threads, one per other allowed CPU, one per \
        physical core first, each pinned, read their own part of a second buffer (4x the last-level cache, at \
        least 128 MiB, on huge pages likewise) one cache line at a time (every word loaded), with a delay loop between lines whose cost \
        per iteration is measured first; the delays are swept from none to a gap of microseconds per line, \
        plus an idle point without load threads. Each point times the chase in short trials (preempted trials \
        repeated) while the load threads stream; every load thread counts its lines, and the counters are read \
        before and after each chase trial, so the bandwidth (load threads plus the chase's own lines) is over \
        exactly the trials' spans. Premises: each load thread started before the point's first trial and \
        stopped after its last, on its CPU at every look (getcpu every 1024 lines); a trial is kept only when \
        the chase thread was not preempted and every load thread read lines all through it without a batch of \
        32 lines taking more than twice its quickest plus 20 us (else it is repeated), and a point needs a kept \
        trial; the chain is one cycle (verified in memory); the idle point agrees with \
        mem.latency's dram (dram_thp when on huge pages) within 20% or their 95% intervals. The knee is the \
        highest-bandwidth point still within 20% of idle latency. Little's law gives the misses in flight at \
        each point: bandwidth / line size x chase latency.",
    needs: Needs {
        min_cpus: 2,
        ..Needs::NONE
    },
    // a dependent chase, as mem.latency.
    bottleneck: crate::results::Bottleneck::Chase,
    per_core_kind: false,
};

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
    fn meta(&self) -> &ExperimentMeta {
        &META
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
        let mut v = Vec::new();
        let thp = super::thp_available(ctx.machine);
        let idle = if thp {
            ctx.earlier_median("mem.latency", "dram_thp")
                .map(|x| (x, "dram_thp"))
                .or_else(|| {
                    ctx.earlier_median("mem.latency", "dram")
                        .map(|x| (x, "dram"))
                })
        } else {
            ctx.earlier_median("mem.latency", "dram")
                .map(|x| (x, "dram"))
        };
        if let Some((x, name)) = idle {
            v.push((
                "idle_latency".to_string(),
                Prediction::new(x, format!("mem.latency's {name}: the same chase, idle")).measured(
                    name,
                    x,
                    "ns",
                    format!("measured: mem.latency {name}"),
                ),
            ));
        }
        // The load threads are the allowed CPUs but the chase's: with one of them, the
        // one-thread read is the measured figure for that team, else the all-thread read
        // (memory saturates well before the last thread on most machines).
        let n = ctx.machine.cpu.allowed_cpus.len().max(1);
        let (name, why) = if n == 2 && thp {
            (
                "read_thp_1t".to_string(),
                "one load thread on huge pages: mem.bandwidth's one-thread read on huge pages",
            )
        } else if n == 2 {
            (
                "read_1t".to_string(),
                "one load thread: mem.bandwidth's one-thread read",
            )
        } else {
            (
                format!("read_{n}t"),
                "mem.bandwidth's all-thread read (the load threads are all CPUs but one)",
            )
        };
        if let Some(bw) = ctx.earlier_median("mem.bandwidth", &name) {
            v.push((
                "peak_bandwidth".to_string(),
                Prediction::new(bw, why).measured(
                    &name,
                    bw,
                    "bytes/s",
                    format!("measured: mem.bandwidth {name}"),
                ),
            ));
        }
        v
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
        let line = super::line_bytes(&caches);
        let llc = super::llc_bytes(&caches).unwrap_or(32 << 20);
        let (chase_len, load_len) = sizes(ctx, llc, line, loaders.len(), &mut out)?;
        let rss0 = super::rss_baseline();
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
        let verified = verify_chain(&chain, line, n, &mut rng);
        out.check(Check::premise(
            "the chase visits every node (one cycle)",
            verified,
            if verified {
                format!(
                    "{n} nodes of {line} B over {}: verified in memory as one cycle",
                    fmt_bytes(chase_len as f64)
                )
            } else {
                "the chain in memory is not one cycle through every node".into()
            },
        ));
        if !verified {
            anyhow::bail!("the chase chain did not verify");
        }
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
        // Under half the budget for the points (idle twice) and the delay calibration; the
        // rest lays the chain and faults the buffers.
        let points = gaps.len() + 2;
        let cfg = HarnessConfig::short_trials(Duration::from_micros(100), 11)
            .for_budget(ctx.budget.mul_f64(0.45), points + 1);
        let per_iter = delay_ns_per_iter(ctx, &cfg);
        let team = Team {
            ctx,
            cfg: &cfg,
            chain: &chain,
            loads: &loads,
            line,
            loaders: &loaders,
        };
        let pts = team.sweep(&gaps, per_iter);
        drop(chain);
        drop(loads);
        out.check(super::rss_check(rss0, (chase_len + load_len) as u64));
        report(ctx, &mut out, &pts, line, &huge, per_iter, &loaders);
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
    let cap = super::memory_cap(ctx.machine, want, 32 << 20)?;
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
    let why = if !super::thp_available(ctx.machine) {
        Some("transparent huge pages are not available".to_string())
    } else {
        super::too_small_for_huge_pages(ctx.machine, len)
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
    let mut r = Region::aligned(len, Pages::Huge, super::huge_page(ctx.machine))?;
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
struct Counter {
    lines: AtomicU64,
    hiccups: AtomicU64,
}

/// A batch slower than twice the quickest plus this is a hiccup, ns: longer than any
/// memory stall, shorter than a time slice.
const HICCUP_SLACK_NS: f64 = 20_000.0;

/// What one load thread saw during one point.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Span {
    start: u64,
    end: u64,
    /// getcpu looks, and those that found the thread elsewhere.
    looks: u64,
    off_cpu: u64,
}

/// One point of the curve.
#[derive(Debug, Clone, Default)]
struct Point {
    /// Target gap between a load thread's lines, ns; None for idle.
    gap: Option<f64>,
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
    spans: Vec<Span>,
    window: (u64, u64),
    notes: Vec<String>,
    preempted: usize,
}

impl Point {
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
struct Team<'a, 'c> {
    ctx: &'a Context<'c>,
    cfg: &'a HarnessConfig,
    chain: &'a Region,
    loads: &'a Region,
    line: usize,
    loaders: &'a [usize],
}

/// What the chase thread tells the load threads.
struct Shared {
    gen: AtomicU64,
    delay: AtomicU64,
    stop: AtomicBool,
    quit: AtomicBool,
    started: AtomicUsize,
    done: AtomicUsize,
    counters: Vec<Counter>,
    spans: Vec<std::sync::Mutex<Span>>,
}

impl Team<'_, '_> {
    /// Idle, then each gap from lightest load to none.
    fn sweep(&self, gaps: &[f64], ns_per_iter: f64) -> Vec<Point> {
        let k = self.loaders.len();
        let sh = Shared {
            gen: AtomicU64::new(0),
            delay: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            counters: (0..k).map(|_| Counter::default()).collect(),
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
            let mut pts = vec![self.point(&sh, None, 0, &mut at)];
            (self.ctx.progress)(&format!("idle: {}", fmt_ns(pts[0].latency_ns())));
            for &g in gaps {
                let iters = (g / ns_per_iter).round() as u64;
                let p = self.point(&sh, Some(g), iters, &mut at);
                (self.ctx.progress)(&format!(
                    "gap {}: {} at {}",
                    fmt_ns(g),
                    fmt_ns(p.latency_ns()),
                    fmt_bandwidth(p.bandwidth_bps())
                ));
                pts.push(p);
            }
            // Idle again after the sweep, pooled with the first: on a shared machine the
            // neighbours' memory traffic changes over time, and one short idle window
            // would stand for all of it.
            let again = self.point(&sh, None, 0, &mut at);
            let before = pts[0].latency_ns();
            let idle = &mut pts[0];
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
            pts
        })
    }

    /// One point: release the load threads (unless idle), time the chase, stop them.
    /// One point of the sweep; the chase continues from `at` and leaves it where it stopped.
    fn point(&self, sh: &Shared, gap: Option<f64>, delay_iters: u64, at: &mut *const u8) -> Point {
        let clock = self.ctx.clock;
        let k = self.loaders.len();
        if gap.is_some() {
            sh.delay.store(delay_iters, Ordering::Release);
            sh.stop.store(false, Ordering::Release);
            sh.started.store(0, Ordering::Release);
            sh.done.store(0, Ordering::Release);
            sh.gen.fetch_add(1, Ordering::AcqRel);
            spin_until(|| sh.started.load(Ordering::Acquire) == k);
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
        let mut p = Point {
            gap,
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
                let bytes = (c1 - c0) as f64 * line + (iters * UNROLL) as f64 * line;
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
            spin_until(|| sh.done.load(Ordering::Acquire) == k);
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
    sh: &Shared,
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
    let mut x = 0u64;
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
        let mut span = Span {
            start: clock.now(),
            ..Default::default()
        };
        let look = |span: &mut Span| {
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
                // SAFETY: pos + line <= len keeps the line inside this thread's part of the
                // load region, which only this thread touches while the region lives.
                let words =
                    unsafe { std::slice::from_raw_parts((base + pos) as *const u64, line / 8) };
                for w in words {
                    x = x.wrapping_add(*w);
                }
                pos += line;
                if pos + line > len {
                    pos = 0;
                }
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
    std::hint::black_box(x);
}

/// Spins until `cond`, yielding now and then so a thread we wait for can run here.
fn spin_until(cond: impl Fn() -> bool) {
    let mut spins = 0u64;
    while !cond() {
        spins += 1;
        if spins % 1024 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
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

/// Metrics, series, checks and findings from the measured points.
fn report(
    ctx: &Context,
    out: &mut Outcome,
    pts: &[Point],
    line: usize,
    huge: &Backing,
    ns_per_iter: f64,
    loaders: &[usize],
) {
    let Some(idle) = pts.first() else { return };
    let loaded: Vec<&Point> = pts.iter().skip(1).collect();
    // Premise: the load ran alongside every loaded point.
    let fails: Vec<String> = loaded
        .iter()
        .filter_map(|p| {
            p.concurrency_failure(loaders)
                .map(|w| format!("gap {}: {w}", fmt_ns(p.gap.unwrap_or(0.0))))
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
                "{} loaded points: every load thread started before the chase's first trial and stopped after its last, on its CPU at every look; {trials} trials kept with every load thread streaming, {stalled} set aside and repeated (a load thread read nothing or was held up more than 20 us in them)",
                loaded.len()
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
    // Series: the curve and Little's law.
    let curve: Vec<(f64, f64)> = pts
        .iter()
        .map(|p| (p.bandwidth_bps(), p.latency_ns()))
        .collect();
    out.series.push(Series {
        name: "latency_vs_bandwidth".into(),
        x_unit: "bytes/s".into(),
        y_unit: "ns".into(),
        points: curve.iter().map(|&(b, l)| [b, l]).collect(),
    });
    out.series.push(Series {
        name: "outstanding_misses_vs_bandwidth".into(),
        x_unit: "bytes/s".into(),
        y_unit: "lines".into(),
        points: curve
            .iter()
            .map(|&(b, l)| [b, outstanding(b, line, l)])
            .collect(),
    });
    let page = if huge.huge() {
        "huge pages"
    } else {
        "base pages"
    };
    out.metric(
        "idle_latency",
        "ns",
        &format!("chase latency with no load thread running ({page})"),
        idle.latency.clone(),
    );
    let Some(full) = loaded.last() else { return };
    out.metric(
        "loaded_latency",
        "ns",
        &format!(
            "chase latency with every load thread unthrottled ({} thread(s), {page})",
            loaders.len()
        ),
        full.latency.clone(),
    );
    let peak = pts
        .iter()
        .max_by(|a, b| a.bandwidth_bps().total_cmp(&b.bandwidth_bps()))
        .unwrap_or(full);
    out.metric(
        "peak_bandwidth",
        "bytes/s",
        &format!(
            "highest bandwidth of the sweep (load threads and chase, per chase trial), at gap {}",
            fmt_ns(peak.gap.unwrap_or(0.0))
        ),
        peak.bandwidth.clone(),
    );
    out.metric(
        "loaded_outstanding_misses",
        "lines",
        "misses in flight at the unthrottled point by Little's law: bandwidth / line x chase latency, per trial",
        full.bandwidth
            .iter()
            .zip(&full.latency)
            .map(|(&b, &l)| outstanding(b, line, l))
            .collect(),
    );
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
    out.finding_salient(
        format!(
            "Loaded latency: {} idle, {} with {} load thread(s) unthrottled ({:.2}x, {side}), at {}; peak bandwidth {}.",
            fmt_ns(il),
            fmt_ns(fl),
            loaders.len(),
            fl / il,
            fmt_bandwidth(full.bandwidth_bps()),
            fmt_bandwidth(peak.bandwidth_bps())
        ),
        &["idle_latency", "loaded_latency", "peak_bandwidth"],
        fl / il,
    );
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
                    100.0 * peak.bandwidth_bps() / bw,
                    fmt_bandwidth(bw)
                )
            })
        })
        .collect();
    if !reads.is_empty() {
        out.notes.push(format!(
            "peak bandwidth {} with {} load thread(s) and the chase: {}",
            fmt_bandwidth(peak.bandwidth_bps()),
            loaders.len(),
            reads.join(", ")
        ));
    }
    let lp: Vec<(f64, f64)> = loaded
        .iter()
        .map(|p| (p.bandwidth_bps(), p.latency_ns()))
        .collect();
    match knee(il, &lp) {
        Some(i) if i + 1 == lp.len() || lp[i].0 >= peak.bandwidth_bps() => out.notes.push(format!(
            "no knee: latency stayed within {:.0}% of idle up to the highest bandwidth reached",
            (KNEE_RISE - 1.0) * 100.0
        )),
        Some(i) => {
            let kp = loaded[i];
            out.metric(
                "knee_bandwidth",
                "bytes/s",
                &format!(
                    "the highest bandwidth whose chase latency stays within {:.0}% of idle",
                    (KNEE_RISE - 1.0) * 100.0
                ),
                kp.bandwidth.clone(),
            );
            out.finding(
                format!(
                    "Knee at {} ({:.0}% of the peak): latency {} there, {} at the peak.",
                    fmt_bandwidth(kp.bandwidth_bps()),
                    100.0 * kp.bandwidth_bps() / peak.bandwidth_bps(),
                    fmt_ns(kp.latency_ns()),
                    fmt_ns(peak.latency_ns())
                ),
                &["knee_bandwidth", "peak_bandwidth"],
            );
        }
        None => out.notes.push(format!(
            "no knee: the lightest load already raised latency by more than {:.0}%",
            (KNEE_RISE - 1.0) * 100.0
        )),
    }
    out.notes.push(format!(
        "points (gap target -> bandwidth, latency, misses in flight): {}",
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
    out.notes.push(format!(
        "delay loop: {:.2} ns per iteration (measured on the chase's CPU); {} chase trials were preempted and repeated",
        ns_per_iter,
        pts.iter().map(|p| p.preempted).sum::<usize>()
    ));
    for p in pts {
        for n in &p.notes {
            out.notes.push(format!(
                "gap {}: {n}",
                p.gap.map_or("idle".to_string(), fmt_ns)
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

    fn span(start: u64, end: u64) -> Span {
        Span {
            start,
            end,
            looks: 3,
            off_cpu: 0,
        }
    }

    #[test]
    fn concurrency_premise_fails_when_a_load_thread_misses_the_window() {
        let mut p = Point {
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
        p.spans[1] = Span {
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
        let idle = Point::default();
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

    #[test]
    fn gaps_end_unthrottled() {
        for p in Profile::ALL {
            let g = gaps(p);
            assert_eq!(g.last(), Some(&0.0));
            assert!(g.windows(2).all(|w| w[0] > w[1]), "{p:?}");
        }
    }
}
