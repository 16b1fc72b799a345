//! The chase and its load threads: one point per gap and traffic.

use super::{Buffer, Run, Traffic, BATCH, STORED};
use crate::experiments::kit::place::Place;
use crate::experiments::kit::team::{Step, Team};
use crate::experiments::kit::{measure_raw, measure_trials, spin_until};
use crate::experiments::memory::latency::{chase, UNROLL};
use crate::units::{fmt_bandwidth, fmt_ns};
use std::sync::atomic::Ordering::{self, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::Duration;

/// The delay between a load thread's lines.
#[inline(never)]
fn delay(n: u64) {
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// Hiccups: batches far slower than the quickest. 128 bytes: adjacent-line prefetch pairs.
#[repr(align(128))]
#[derive(Default)]
struct LineCounter {
    lines: AtomicU64,
    hiccups: AtomicU64,
}

/// Past twice the quickest batch, ns: longer than any memory stall, shorter than a slice.
const HICCUP_SLACK_NS: f64 = 20_000.0;

const QUIET_WARM_UP: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Default)]
pub(super) struct LoadedPoint {
    /// None for idle.
    pub(super) gap: Option<f64>,
    pub(super) traffic: Traffic,
    /// Per trial: chase ns per load, and bytes/s of the load threads and the chase.
    pub(super) latency: Vec<f64>,
    pub(super) bandwidth: Vec<f64>,
    /// Trials set aside because a load thread read nothing or hiccuped, and trials kept.
    pub(super) stalled: usize,
    pub(super) trials: usize,
    pub(super) load: Step,
    pub(super) window: (u64, u64),
    pub(super) notes: Vec<String>,
    pub(super) preempted: usize,
}

impl LoadedPoint {
    pub(super) fn latency_ns(&self) -> f64 {
        crate::stats::median(&self.latency)
    }
    pub(super) fn bandwidth_bps(&self) -> f64 {
        crate::stats::median(&self.bandwidth)
    }
    pub(super) fn label(&self) -> String {
        let gap = |g| format!("gap {} ({})", fmt_ns(g), self.traffic.label());
        self.gap.map_or("gap idle".into(), gap)
    }
    /// Why the load did not run alongside the whole point, if it did not.
    pub(super) fn concurrency_failure(&self, loaders: &[usize]) -> Option<String> {
        self.gap?;
        let (w0, w1) = self.window;
        let load = self.load.stamps.iter().zip(&self.load.places);
        for ((&(start, end), place), cpu) in load.zip(loaders) {
            let (off, looks) = (place.off(), place.looks);
            if start == 0 || start > w0 || end < w1 {
                return Some(format!(
                    "the load thread on CPU {cpu} did not span the chase's trials"
                ));
            } else if off > 0 {
                return Some(format!(
                    "the load thread pinned to CPU {cpu} was elsewhere at {off} of {looks} looks"
                ));
            }
        }
        let stalled = self.stalled;
        let none = format!("no trial had every load thread streaming ({stalled} set aside)");
        (self.trials == 0).then_some(none)
    }
}

/// The idle point (repeats pooled), each traffic's points, and the quiet repeats' medians.
#[derive(Default, Clone)]
pub(super) struct Sweep {
    pub(super) idle: LoadedPoint,
    pub(super) curves: [Vec<LoadedPoint>; 2],
    pub(super) idle_repeats: Vec<f64>,
    pub(super) reference_repeats: Vec<f64>,
    pub(super) ns_per_iter: f64,
}

struct LoadSignals {
    stop: AtomicBool,
    started: AtomicUsize,
    counters: Vec<LineCounter>,
}

impl Run<'_, '_> {
    /// At each gap reads then the mix (so both see the same neighbours), quiet pairs between.
    pub(super) fn sweep(&self) -> Sweep {
        let calibration = |iters: u64| (0..iters).for_each(|_| delay(1024));
        let m = measure_raw(self.ctx.clock, &self.cfg, 1024.0, calibration);
        let ns_per_iter = m.median_ns().max(0.01);
        let k = self.loaders.len();
        let sh = LoadSignals {
            stop: AtomicBool::new(false),
            started: AtomicUsize::new(0),
            counters: (0..k).map(|_| LineCounter::default()).collect(),
        };
        let part = self.loads.region.len() / k / self.line * self.line;
        let base = self.loads.region.as_ptr() as usize;
        let cpus = [&[self.ctx.cpu][..], &self.loaders].concat();
        let (sh, clock, line) = (&sh, self.ctx.clock, self.line);
        // Member t > 0 is load thread t - 1 (the chase thread leads the team).
        let member = |t: usize| {
            // SAFETY: this is thread t's part of the load region (whole lines of a
            // page-aligned mapping, so u64-aligned), which outlives the team and which no
            // other thread touches meanwhile.
            let part = unsafe {
                std::slice::from_raw_parts_mut((base + (t - 1) * part) as *mut u64, part / 8)
            };
            let mut stream = LoadStream {
                clock,
                part,
                words: line / 8,
                pos: 0,
                acc: [0; 8],
            };
            move |arg: u64, place: &mut Place| stream.point(sh, t - 1, place, arg)
        };
        let sweep = |lead: &mut dyn FnMut(u64, &mut dyn FnMut()) -> Step| {
            // One chase position for the whole sweep: restarting each point at node 0 walked
            // the same prefix again, which then sat in the caches.
            let start = |b: &Buffer| b.region.as_ptr() as *const u8;
            let reference = self.reference.as_ref();
            let mut at = [
                start(&self.chase),
                reference.map_or(std::ptr::null(), start),
            ];
            let mut sw = Sweep {
                ns_per_iter,
                ..Default::default()
            };
            self.quiet_pair(sh, &mut at, &mut sw);
            for &g in self.gaps {
                let iters = (g / ns_per_iter).round() as u64;
                for traffic in Traffic::BOTH {
                    sh.stop.store(false, Ordering::Release);
                    sh.started.store(0, Ordering::Release);
                    let mut p = LoadedPoint::default();
                    // The step's argument: the delay between lines, and whether it is the mix.
                    let load = lead(iters << 1 | (traffic == Traffic::Mix) as u64, &mut || {
                        spin_until(|| sh.started.load(Ordering::Acquire) == k);
                        p = self.point(sh, Some(g), &mut at[0]);
                        sh.stop.store(true, Ordering::Release);
                    });
                    (p.load, p.traffic) = (load, traffic);
                    let (l, b) = (fmt_ns(p.latency_ns()), fmt_bandwidth(p.bandwidth_bps()));
                    (self.ctx.progress)(&format!("{}: {l} at {b}", p.label()));
                    sw.curves[traffic as usize].push(p);
                }
                self.quiet_pair(sh, &mut at, &mut sw);
            }
            sw
        };
        Team::led(clock, &cpus, member, sweep).0
    }

    /// Idle and reference in turn first (a drift favours neither), each warmed up (the
    /// streams left it cold); idle trials pooled, as the neighbours' traffic changes.
    fn quiet_pair(&self, sh: &LoadSignals, at: &mut [*const u8; 2], sw: &mut Sweep) {
        let order = [[0, 1], [1, 0]][sw.idle_repeats.len() % 2];
        let mut got = [None, None];
        let has_reference = self.reference.is_some();
        for c in order.into_iter().filter(|&c| c == 0 || has_reference) {
            let t = std::time::Instant::now();
            while t.elapsed() < QUIET_WARM_UP {
                // SAFETY: `at` is in a chain laid and verified as one cycle before the sweep,
                // and nothing writes its region while the chase runs.
                at[c] = unsafe { chase(at[c], 64) };
            }
            got[c] = Some(self.point(sh, None, &mut at[c]));
        }
        let [idle, reference] = got;
        let idle = idle.expect("the idle chase ran");
        let (l, reference) = (idle.latency_ns(), reference.map(|r| r.latency_ns()));
        let said = reference.map_or(String::new(), |r| {
            format!(", reference chase {}", fmt_ns(r))
        });
        (self.ctx.progress)(&format!("idle: {}{said}", fmt_ns(l)));
        sw.idle_repeats.push(l);
        sw.reference_repeats.extend(reference);
        sw.idle.latency.extend(idle.latency);
        sw.idle.bandwidth.extend(idle.bandwidth);
        sw.idle.preempted += idle.preempted;
        sw.idle.notes.extend(idle.notes);
    }

    /// One point's chase trials (the load threads streaming unless idle), from `at` on.
    fn point(&self, sh: &LoadSignals, gap: Option<f64>, at: &mut *const u8) -> LoadedPoint {
        let clock = self.ctx.clock;
        let mut p = LoadedPoint {
            gap,
            ..Default::default()
        };
        let (mut first, mut last, line) = (None, 0u64, self.line as f64);
        let read = |c: &LineCounter| (c.lines.load(Relaxed), c.hiccups.load(Relaxed));
        let counts = || sh.counters.iter().map(read).collect::<Vec<_>>();
        // A trial counts when this thread was not preempted and, under load, every load
        // thread read lines without a hiccup all through it; others are repeated.
        let cfg = gap.map_or(&self.quiet_cfg, |_| &self.cfg);
        let m = measure_trials(clock, cfg, UNROLL as f64, |iters| {
            let v0 = counts();
            let pre = crate::harness::thread_preemptions();
            let t0 = clock.start();
            // SAFETY: the chain in this region was laid and verified as one cycle before
            // the sweep, and nothing writes the region while the chase runs.
            *at = unsafe { chase(*at, iters) };
            let t1 = clock.stop();
            let quiet = crate::harness::thread_preemptions() == pre;
            let v1 = counts();
            first.get_or_insert(t0);
            last = t1;
            let pairs = || v0.iter().zip(&v1);
            let loaded = gap.is_none() || pairs().all(|(a, b)| b.0 > a.0 && b.1 == a.1);
            if quiet && !loaded {
                p.stalled += 1;
            }
            let ns = clock.ticks_to_ns(t1.saturating_sub(t0) as f64);
            if quiet && loaded && ns > 0.0 {
                let lines: u64 = pairs().map(|(a, b)| b.0 - a.0).sum();
                let bytes = lines as f64 * line + (iters * UNROLL) as f64 * line;
                p.bandwidth.push(bytes / ns * 1e9);
            }
            (t1.saturating_sub(t0), quiet && loaded)
        });
        // Undisturbed trials only: the harness fills a short count with preempted ones.
        p.trials = m.undisturbed;
        std::hint::black_box(*at);
        p.window = (first.unwrap_or(0), last);
        p.latency = m.per_op_ns.clone();
        p.preempted = m.preempted;
        p.notes = m.notes.clone();
        p
    }
}

pub(super) struct LoadStream<'c> {
    pub(super) clock: &'c dyn crate::clock::Clock,
    pub(super) part: &'c mut [u64],
    pub(super) words: usize,
    pub(super) pos: usize,
    pub(super) acc: [u64; 8],
}

impl LoadStream<'_> {
    /// Line `n` read into eight lanes (no add waits on the one before) or stored whole.
    #[inline(always)]
    pub(super) fn step(&mut self, n: u64, traffic: Traffic) {
        let (words, acc) = (self.words, &mut self.acc);
        let l = &mut self.part[self.pos..self.pos + words];
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
        self.pos += words;
        if self.pos + words > self.part.len() {
            self.pos = 0;
        }
    }

    /// Load thread `t` streams one point until told to stop, looking at its `place`. Out
    /// of line, so the stream loop's code does not change with what is inlined around it.
    #[inline(never)]
    fn point(&mut self, sh: &LoadSignals, t: usize, place: &mut Place, arg: u64) {
        let (clock, d, counter) = (self.clock, arg >> 1, &sh.counters[t]);
        let traffic = [Traffic::Read, Traffic::Mix][(arg & 1) as usize];
        sh.started.fetch_add(1, Ordering::AcqRel);
        let slack = clock.ns_to_ticks(HICCUP_SLACK_NS) as u64;
        let mut last = clock.now();
        let mut quickest = u64::MAX;
        while !sh.stop.load(Ordering::Relaxed) {
            // Only this thread writes its counter, so the counter holds its count.
            let mut lines = counter.lines.load(Relaxed);
            for _ in 0..BATCH {
                self.step(lines, traffic);
                lines += 1;
                counter.lines.store(lines, Relaxed);
                if d > 0 {
                    delay(d);
                }
            }
            let now = clock.now();
            let took = now.saturating_sub(last);
            last = now;
            quickest = quickest.min(took);
            if took > quickest.saturating_mul(2).saturating_add(slack) {
                counter.hiccups.fetch_add(1, Relaxed);
            }
            if lines % 1024 == 0 {
                place.look();
            }
        }
        std::hint::black_box(&self.acc);
    }
}
