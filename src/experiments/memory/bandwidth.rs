//! mem.bandwidth: read, write and copy bandwidth of main memory, one thread and 1..N.
//!
//! Each thread streams over its own part of one buffer far larger than the last-level
//! cache, 1 MiB at a time, continuing where its last trial stopped, so no trial finds its
//! data in a cache. Trials are short (a few ms), start together (spinning threads), and are
//! repeated when a thread was preempted.

use super::{measure_trials, Pages, Quiet, QuietSpec, Region};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::results::{Check, Prediction, Series};
use crate::units::{fmt_bandwidth, fmt_bytes};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

pub struct Bandwidth;

/// Bytes each thread moves per iteration of a trial.
const BLOCK: usize = 1 << 20;
/// Cache lines in flight per core for a streaming read (line-fill buffers plus the L2
/// prefetcher's requests): the concurrency in the Little's-law model.
const LINES_IN_FLIGHT: f64 = 20.0;
/// DRAM latency assumed when mem.latency has not run.
const DRAM_NS_MODEL: f64 = 90.0;

/// What a trial does to each byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Load every 8-byte word and add it into one of eight accumulators.
    Read,
    /// Store every 8-byte word (ordinary stores: each line is read for ownership first).
    Write,
    /// Store every 16 bytes with non-temporal stores (no read for ownership; x86-64).
    WriteNt,
    /// memcpy (`copy_from_slice`) from one half of the part to the other.
    Copy,
    /// One volatile 8-byte load per loop iteration, not vectorised (what simple C loops
    /// and `sysbench memory` do).
    ReadScalar,
    /// One volatile 8-byte store per loop iteration.
    WriteScalar,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::WriteNt => "write_nt",
            Op::Copy => "copy",
            Op::ReadScalar => "read_scalar",
            Op::WriteScalar => "write_scalar",
        }
    }
    fn describe(&self) -> &'static str {
        match self {
            Op::Read => "load and add every 8-byte word (8 independent accumulators)",
            Op::Write => "store every 8-byte word (ordinary stores)",
            Op::WriteNt => "non-temporal 16-byte stores of every word (MOVNTDQ, then SFENCE)",
            Op::Copy => {
                "memcpy (copy_from_slice); bytes copied per second, each read once and written once"
            }
            Op::ReadScalar => {
                "one volatile 8-byte load per loop iteration (not vectorised, like sysbench memory)"
            }
            Op::WriteScalar => {
                "one volatile 8-byte store per loop iteration (like sysbench memory)"
            }
        }
    }
}

/// Loads every word; eight accumulators so no add waits on the one before, which lets the
/// compiler vectorise the loop.
#[inline(never)]
fn read_words(s: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in s.chunks_exact(8) {
        for k in 0..8 {
            acc[k] = acc[k].wrapping_add(c[k]);
        }
    }
    acc.iter().fold(0, |a, &b| a ^ b)
}

/// Stores `v` into every word. `v` is not a repeated byte, so this stays a store loop
/// rather than becoming memset (whose large-size path uses non-temporal stores).
#[inline(never)]
fn write_words(s: &mut [u64], v: u64) {
    for w in s.iter_mut() {
        *w = v;
    }
}

/// One volatile load per word: the loop cannot be vectorised or merged.
#[inline(never)]
fn read_words_scalar(s: &[u64]) -> u64 {
    let mut x = 0u64;
    for w in s {
        // SAFETY: w is a valid reference; the volatile read only forbids merging loads.
        x = x.wrapping_add(unsafe { std::ptr::read_volatile(w) });
    }
    x
}

/// One volatile store per word.
#[inline(never)]
fn write_words_scalar(s: &mut [u64], v: u64) {
    for w in s.iter_mut() {
        // SAFETY: w is a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(w, v) };
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn write_words_nt(s: &mut [u64], v: u64) {
    use core::arch::x86_64::{__m128i, _mm_set1_epi64x, _mm_sfence, _mm_stream_si128};
    let p = s.as_mut_ptr() as *mut __m128i;
    if p as usize % 16 != 0 {
        return write_words(s, v);
    }
    // SAFETY: SSE2 is part of the x86-64 baseline; p is 16-byte aligned (checked) and the
    // s.len() / 2 16-byte stores stay inside `s`, which we borrow mutably.
    unsafe {
        let x = _mm_set1_epi64x(v as i64);
        for i in 0..s.len() / 2 {
            _mm_stream_si128(p.add(i), x);
        }
        _mm_sfence();
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn write_words_nt(s: &mut [u64], v: u64) {
    write_words(s, v)
}

/// One thread's share of the buffer (an address range owned by that thread alone).
#[derive(Debug, Clone, Copy)]
struct Part {
    base: usize,
    len: usize,
}

/// Streams `blocks` blocks of `op` over the part, from `*pos` (wrapping). Returns a value
/// the caller must consume so the loads are not dead.
fn work(op: Op, part: Part, pos: &mut usize, blocks: u64, pattern: u64) -> u64 {
    let half = part.len / 2 / BLOCK * BLOCK;
    let span = if op == Op::Copy {
        half
    } else {
        part.len / BLOCK * BLOCK
    };
    let mut x = 0u64;
    for _ in 0..blocks {
        if *pos + BLOCK > span {
            *pos = 0;
        }
        let at = part.base + *pos;
        // SAFETY: at..at+BLOCK lies inside this thread's part (pos + BLOCK <= span <=
        // part.len; for copy the destination is the other half), the part is 1 MiB-aligned
        // (so u64-aligned), and no other thread touches it while this runs.
        unsafe {
            let words = BLOCK / 8;
            match op {
                Op::Read => x ^= read_words(std::slice::from_raw_parts(at as *const u64, words)),
                Op::Write => write_words(
                    std::slice::from_raw_parts_mut(at as *mut u64, words),
                    pattern,
                ),
                Op::WriteNt => write_words_nt(
                    std::slice::from_raw_parts_mut(at as *mut u64, words),
                    pattern,
                ),
                Op::ReadScalar => {
                    x ^= read_words_scalar(std::slice::from_raw_parts(at as *const u64, words))
                }
                Op::WriteScalar => write_words_scalar(
                    std::slice::from_raw_parts_mut(at as *mut u64, words),
                    pattern,
                ),
                Op::Copy => {
                    let src = std::slice::from_raw_parts(at as *const u8, BLOCK);
                    let dst = std::slice::from_raw_parts_mut((at + half) as *mut u8, BLOCK);
                    dst.copy_from_slice(src);
                }
            }
        }
        *pos += BLOCK;
    }
    x
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

/// Aggregate bandwidth trials of `threads` threads, each pinned to its own CPU and
/// streaming its own part. A trial's time is the slowest thread's; it is set aside when
/// any thread was preempted. Returns ns per byte (of all threads together).
fn team(ctx: &Context, op: Op, parts: &[Part], cpus: &[usize], spec: &QuietSpec) -> Quiet {
    let threads = parts.len();
    let gen = AtomicU64::new(0);
    let blocks = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let ticks: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let quiet: Vec<AtomicBool> = (0..threads).map(|_| AtomicBool::new(true)).collect();
    let clock = ctx.clock;
    let pattern = 0x0123_4567_89ab_cdefu64;
    // One timed run of `b` blocks on this thread; records ticks and quietness.
    let timed = |t: usize, pos: &mut usize, b: u64| {
        let c0 = super::thread_preemptions();
        let t0 = clock.start();
        let x = work(op, parts[t], pos, b, pattern);
        let t1 = clock.stop();
        std::hint::black_box(x);
        ticks[t].store(t1.wrapping_sub(t0), Ordering::Relaxed);
        quiet[t].store(super::thread_preemptions() == c0, Ordering::Relaxed);
    };
    std::thread::scope(|s| {
        for (t, &cpu) in cpus.iter().enumerate().take(threads).skip(1) {
            let (gen, blocks, done, stop, timed, ready) =
                (&gen, &blocks, &done, &stop, &timed, &ready);
            s.spawn(move || {
                let _ = crate::platform::pin_to_cpu(cpu);
                ready.fetch_add(1, Ordering::AcqRel);
                let mut seen = 0u64;
                let mut pos = 0usize;
                loop {
                    spin_until(|| {
                        gen.load(Ordering::Acquire) != seen || stop.load(Ordering::Acquire)
                    });
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    seen = gen.load(Ordering::Acquire);
                    timed(t, &mut pos, blocks.load(Ordering::Acquire));
                    done.fetch_add(1, Ordering::AcqRel);
                }
            });
        }
        // Wait until every worker runs on its own CPU. Yielding matters: a new thread starts
        // on this CPU, and under a real-time policy it would never run while we spin.
        spin_until(|| ready.load(Ordering::Acquire) == threads - 1);
        let mut pos = 0usize;
        let bytes_per_iter = (BLOCK * threads) as f64;
        let q = measure_trials(clock, spec, bytes_per_iter, |b| {
            done.store(0, Ordering::Release);
            blocks.store(b, Ordering::Release);
            gen.fetch_add(1, Ordering::AcqRel);
            timed(0, &mut pos, b);
            spin_until(|| done.load(Ordering::Acquire) == threads - 1);
            let slowest = ticks
                .iter()
                .map(|t| t.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0);
            let all_quiet = quiet.iter().all(|q| q.load(Ordering::Relaxed));
            (slowest, all_quiet)
        });
        stop.store(true, Ordering::Release);
        q
    })
}

/// Theoretical peak of the DIMMs (speed x width x channels), or why it is unknown.
///
/// WIRING POINT: once the machine module provides `memory.peak_bandwidth_bytes_per_s:
/// Option<f64>` (from dmidecode or sysfs), return it here:
/// `ctx.machine.memory.peak_bandwidth_bytes_per_s.ok_or(...)`, with its source.
fn dimm_peak(ctx: &Context) -> Result<(f64, String), String> {
    let m = &ctx.machine.memory;
    match m.peak_bandwidth_bytes_per_s {
        Some(peak) => Ok((peak, format!("machine: {}", m.peak_bandwidth_note))),
        None => Err(m.peak_bandwidth_note.clone()),
    }
}

/// Thread counts measured: 1..N, thinned to powers of two plus N on large machines.
fn thread_counts(n: usize, profile: Profile) -> Vec<usize> {
    let mut v: Vec<usize> = if n <= 8 || profile == Profile::Thorough {
        (1..=n).collect()
    } else {
        let mut v: Vec<usize> = (0..).map(|k| 1 << k).take_while(|&t| t < n).collect();
        v.push(n);
        v
    };
    if profile == Profile::Smoke {
        v = vec![1, n.min(2)];
        v.dedup();
    }
    v
}

fn ops() -> Vec<Op> {
    let mut v = vec![Op::Read, Op::Write];
    if cfg!(target_arch = "x86_64") {
        v.push(Op::WriteNt);
    }
    v.push(Op::Copy);
    v
}

impl Experiment for Bandwidth {
    fn id(&self) -> &'static str {
        "mem.bandwidth"
    }
    fn title(&self) -> &'static str {
        "Memory bandwidth"
    }
    fn description(&self) -> &'static str {
        "read, write (and non-temporal write) and copy bandwidth on a buffer far larger than the last-level cache, 1..N threads"
    }
    fn method(&self) -> &'static str {
        "One buffer (at least 8x the last-level cache and 256 MiB; 64 MiB in smoke) in base pages (the headline \
         figures), and again on transparent huge pages for one thread (read_thp_1t, write_thp_1t, copy_thp_1t; quick \
         and up, when the kernel backs at least half of it, the share read from /proc/self/smaps), faulted in \
         before timing, split into one part per thread; each thread is pinned to its own CPU and streams its part \
         1 MiB at a time, each trial continuing where the last stopped so data is never cache-resident. read: \
         load and add every 8-byte word into eight accumulators (vectorised, no dependency chain); write: store \
         every word with ordinary stores (each line is read for ownership, then written back); write_nt: \
         non-temporal 16-byte stores (x86-64); copy: memcpy of 1 MiB blocks between the two halves of the part (below \
         glibc's non-temporal threshold, so ordinary stores), counted as bytes copied per second (STREAM counts \
         twice that). Trials of a few ms start together (threads spin on a \
         shared flag); the slowest thread's time is the trial's; a trial during which any thread was preempted \
         is repeated and counted. Reported in bytes/s, shown as GB/s (10^9) and GiB/s (2^30). Thread counts \
         1..N, N = CPUs this process may use."
    }
    fn budget(&self, p: Profile) -> Duration {
        match p {
            Profile::Smoke => Duration::from_millis(900),
            Profile::Quick => Duration::from_secs(5),
            Profile::Standard => Duration::from_secs(40),
            Profile::Thorough => Duration::from_secs(120),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let caches = super::data_caches(ctx.machine);
        let line = super::line_bytes(&caches) as f64;
        let (lat, src) = match ctx
            .earlier_median("mem.latency", "dram_thp")
            .map(|v| {
                (
                    v,
                    "measured: mem.latency dram_thp (no TLB misses, as in a stream)",
                )
            })
            .or_else(|| {
                ctx.earlier_median("mem.latency", "dram")
                    .map(|v| (v, "measured: mem.latency dram"))
            }) {
            Some((v, s)) => (v, s.to_string()),
            None => (
                DRAM_NS_MODEL,
                "model: typical DRAM latency (mem.latency did not run)".into(),
            ),
        };
        let one = LINES_IN_FLIGHT * line / (lat * 1e-9);
        let little = |f: f64, formula: &str| {
            Prediction::new(one * f, formula.to_string())
                .input(
                    "lines_in_flight",
                    LINES_IN_FLIGHT,
                    "lines",
                    "model: line-fill buffers and L2 prefetch per core",
                )
                .input("line", line, "bytes", "machine: cache line size (sysfs)")
                .input("dram_latency", lat, "ns", src.clone())
        };
        let n = ctx.machine.cpu.allowed_cpus.len().max(1);
        let mut v = vec![
            ("read_1t".into(), little(1.0, "Little's law: lines_in_flight x line / dram_latency")),
            (
                "write_1t".into(),
                little(1.0, "Little's law on reads for ownership: lines_in_flight x line / dram_latency"),
            ),
            (
                "copy_1t".into(),
                little(0.5, "each copied line is read and written: 0.5 x lines_in_flight x line / dram_latency"),
            ),
            // The model has no TLB term: it is the huge-page figures' model above all.
            ("read_thp_1t".into(), little(1.0, "Little's law: lines_in_flight x line / dram_latency")),
            (
                "write_thp_1t".into(),
                little(1.0, "Little's law on reads for ownership: lines_in_flight x line / dram_latency"),
            ),
            (
                "copy_thp_1t".into(),
                little(0.5, "each copied line is read and written: 0.5 x lines_in_flight x line / dram_latency"),
            ),
        ];
        if n > 1 {
            let p = match dimm_peak(ctx) {
                Ok((peak, s)) => Prediction::new(
                    (one * n as f64).min(peak),
                    "min(N x single-thread Little's law, DIMM peak)",
                )
                .input("dimm_peak", peak, "bytes/s", s),
                Err(why) => Prediction::new(
                    one * n as f64,
                    format!("N x single-thread Little's law (theoretical peak unknown: {why})"),
                ),
            }
            .input(
                "threads",
                n as f64,
                "threads",
                "machine: CPUs this process may use",
            )
            .input("dram_latency", lat, "ns", src.clone());
            v.push((format!("read_{n}t"), p));
        }
        v
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let caches = super::data_caches(ctx.machine);
        let llc = super::llc_bytes(&caches).unwrap_or(32 << 20);
        // The CPUs the process may use (gathered before the runner pinned this thread).
        let mut allowed = ctx.machine.cpu.allowed_cpus.clone();
        if allowed.is_empty() {
            allowed = vec![ctx.cpu];
        }
        let n = allowed.len();
        // This thread first, then the other allowed CPUs in order.
        let at = allowed.iter().position(|&c| c == ctx.cpu).unwrap_or(0);
        let cpus: Vec<usize> = (0..n).map(|k| allowed[(at + k) % n]).collect();
        let want: u64 = match ctx.profile {
            Profile::Smoke => 64 << 20,
            Profile::Quick => (8 * llc).max(256 << 20),
            Profile::Standard => (8 * llc).max(1 << 30),
            Profile::Thorough => (16 * llc).max(2 << 30),
        };
        // Each thread's part needs at least two blocks per half for copy.
        let min = (4 * BLOCK * n) as u64;
        let cap = super::memory_cap(ctx.machine, want, min)?;
        let size = (cap as usize / (BLOCK * n)) * BLOCK * n;
        out.notes.push(format!(
            "memory cap {} (the buffer); MemAvailable {}",
            fmt_bytes(size as f64),
            fmt_bytes(super::mem_available(ctx.machine) as f64)
        ));
        if (size as u64) < 4 * llc {
            out.notes.push(format!(
                "the buffer ({}) is less than 4x the last-level cache ({}): some trials may find data in the cache",
                fmt_bytes(size as f64),
                fmt_bytes(llc as f64)
            ));
        }
        let rss0 = super::rss_baseline();
        (ctx.progress)("faulting the buffer in");
        let mut region = Region::new(size, Pages::Base)?;
        region.prefault();
        // Touch every byte once: the first write pass is not timed.
        region.as_mut_slice().fill(0x5a);
        let base = region.as_ptr() as usize;

        let counts = thread_counts(n, ctx.profile);
        let ops = ops();
        // Scalar variants with one thread only (they explain simpler tools' figures).
        let scalar: &[Op] = if ctx.profile == Profile::Smoke {
            &[]
        } else {
            &[Op::ReadScalar, Op::WriteScalar]
        };
        // One thread again on huge pages (not smoke), for read, write and copy.
        let thp = super::thp_available(ctx.machine) && ctx.profile != Profile::Smoke;
        let thp_ops = [Op::Read, Op::Write, Op::Copy];
        let configs = counts.len() * ops.len() + scalar.len() + if thp { thp_ops.len() } else { 0 };
        let (min_trial, trials) = match ctx.profile {
            Profile::Smoke => (Duration::from_millis(1), 5),
            Profile::Quick => (Duration::from_millis(2), 11),
            Profile::Standard => (Duration::from_millis(4), 21),
            Profile::Thorough => (Duration::from_millis(4), 31),
        };
        let spec = QuietSpec {
            min_trial,
            trials,
            budget: ctx.budget.mul_f64(0.85) / configs.max(1) as u32,
        };
        let mut preempted = 0;
        let mut kept = 0;
        for &op in ops.iter().chain(scalar) {
            let mut pts = Vec::new();
            let counts: &[usize] = if scalar.contains(&op) { &[1] } else { &counts };
            for &t in counts {
                let part_len = size / t / BLOCK * BLOCK;
                let parts: Vec<Part> = (0..t)
                    .map(|k| Part {
                        base: base + k * part_len,
                        len: part_len,
                    })
                    .collect();
                (ctx.progress)(&format!("{} with {t} thread(s)", op.name()));
                let q = team(ctx, op, &parts, &cpus, &spec);
                preempted += q.preempted;
                kept += q.per_op_ns.len();
                let bw: Vec<f64> = q.per_op_ns.iter().map(|ns| 1e9 / ns).collect();
                let name = format!("{}_{t}t", op.name());
                for note in &q.notes {
                    out.notes.push(format!("{name}: {note}"));
                }
                let med = crate::stats::median(&bw);
                pts.push([t as f64, med]);
                if t == 1 || t == n {
                    out.metric(
                        &name,
                        "bytes/s",
                        &format!(
                            "{}, {t} thread(s), {} buffer",
                            op.describe(),
                            fmt_bytes(size as f64)
                        ),
                        bw,
                    );
                }
            }
            if scalar.contains(&op) {
                continue;
            }
            out.series.push(Series {
                name: format!("{}_by_threads", op.name()),
                x_unit: "threads".into(),
                y_unit: "bytes/s".into(),
                points: pts,
            });
        }
        drop(region);

        // Huge pages: a stream touches a new 4 KiB page every 64 lines, so on base pages
        // each trial also pays TLB misses and page walks the prediction leaves out.
        if thp {
            (ctx.progress)("huge-page buffer");
            let mut region = Region::new(size, Pages::Huge)?;
            region.prefault();
            region.as_mut_slice().fill(0x5a);
            let frac = region.huge_bytes().unwrap_or(0) as f64 / size as f64;
            let backed = frac >= 0.5;
            out.check(crate::results::Check::sanity(
                "huge pages back the huge-page buffer",
                backed,
                format!(
                    "{:.0}% of {} backed by transparent huge pages (AnonHugePages in /proc/self/smaps)",
                    frac * 100.0,
                    fmt_bytes(size as f64)
                ),
            ));
            if backed {
                let part = [Part {
                    base: region.as_ptr() as usize,
                    len: size / BLOCK * BLOCK,
                }];
                for op in thp_ops {
                    (ctx.progress)(&format!("{} with 1 thread, huge pages", op.name()));
                    let q = team(ctx, op, &part, &cpus, &spec);
                    preempted += q.preempted;
                    kept += q.per_op_ns.len();
                    let name = format!("{}_thp_1t", op.name());
                    for note in &q.notes {
                        out.notes.push(format!("{name}: {note}"));
                    }
                    out.metric(
                        &name,
                        "bytes/s",
                        &format!(
                            "{}, 1 thread, {} buffer on huge pages ({:.0}% backed)",
                            op.describe(),
                            fmt_bytes(size as f64),
                            frac * 100.0
                        ),
                        q.per_op_ns.iter().map(|ns| 1e9 / ns).collect(),
                    );
                }
            } else {
                out.notes.push("the kernel did not back most of the huge-page buffer with huge pages (fragmented memory or THP defrag policy): no huge-page figures".into());
            }
        } else if ctx.profile != Profile::Smoke {
            out.notes.push("transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): base pages only".into());
        }
        out.check(super::rss_check(rss0, size as u64));
        out.notes.push(format!(
            "{preempted} trials were preempted by other tasks and repeated; {kept} undisturbed trials kept"
        ));

        let medians: Vec<(String, f64)> = out
            .metrics
            .iter()
            .map(|m| (m.name.clone(), m.summary.median))
            .collect();
        let med = |name: &str| medians.iter().find(|m| m.0 == name).map(|m| m.1);
        let (r1, w1, c1) = (med("read_1t"), med("write_1t"), med("copy_1t"));
        if let (Some(r), Some(w), Some(c), Some(rh), Some(wh), Some(ch)) = (
            r1,
            w1,
            c1,
            med("read_thp_1t"),
            med("write_thp_1t"),
            med("copy_thp_1t"),
        ) {
            out.finding(
                format!(
                    "On huge pages one thread reads {} ({:+.0}%), writes {} ({:+.0}%) and copies {} ({:+.0}%) against base pages: what TLB misses and page walks cost a stream. The headline figures (read_1t, write_1t, copy_1t) are base pages, what a program gets from malloc unless THP is 'always'.",
                    fmt_bandwidth(rh),
                    (rh / r - 1.0) * 100.0,
                    fmt_bandwidth(wh),
                    (wh / w - 1.0) * 100.0,
                    fmt_bandwidth(ch),
                    (ch / c - 1.0) * 100.0
                ),
                &["read_1t", "read_thp_1t", "write_1t", "write_thp_1t", "copy_1t", "copy_thp_1t"],
            );
        }
        if let (Some(r), Some(w), Some(c)) = (r1, w1, c1) {
            out.finding(
                format!(
                    "One thread reads {}, writes {} and copies {} (bytes copied per second).",
                    fmt_bandwidth(r),
                    fmt_bandwidth(w),
                    fmt_bandwidth(c)
                ),
                &["read_1t", "write_1t", "copy_1t"],
            );
        }
        if let (Some(r), Some(w), Some(rs), Some(ws)) =
            (r1, w1, med("read_scalar_1t"), med("write_scalar_1t"))
        {
            let why = if rs / r < 0.8 || ws / w < 0.8 {
                "fewer bytes per instruction keep fewer cache lines in flight"
            } else {
                "memory, not the instruction stream, sets the pace"
            };
            out.finding(
                format!(
                    "Loops of single 8-byte volatile accesses (as in sysbench memory) read {} and write {}: {:.2}x and {:.2}x the vectorised loops; {why}.",
                    fmt_bandwidth(rs),
                    fmt_bandwidth(ws),
                    rs / r,
                    ws / w
                ),
                &["read_scalar_1t", "write_scalar_1t", "read_1t", "write_1t"],
            );
        }
        if let (Some(w), Some(nt)) = (w1, med("write_nt_1t")) {
            out.finding(
                format!(
                    "Non-temporal stores write {} against {} for ordinary stores ({:.2}x): ordinary stores first read each line for ownership.",
                    fmt_bandwidth(nt),
                    fmt_bandwidth(w),
                    nt / w
                ),
                &["write_nt_1t", "write_1t"],
            );
        }
        if n > 1 {
            let rn = format!("read_{n}t");
            if let (Some(r), Some(rall)) = (r1, med(&rn)) {
                out.finding(
                    format!(
                        "{n} threads read {} together, {:.2}x one thread.",
                        fmt_bandwidth(rall),
                        rall / r
                    ),
                    &["read_1t", rn.as_str()],
                );
                out.check(Check::sanity(
                    "more threads do not read slower",
                    rall >= 0.8 * r,
                    format!(
                        "{n} threads {}, 1 thread {}",
                        fmt_bandwidth(rall),
                        fmt_bandwidth(r)
                    ),
                ));
            }
        }
        match dimm_peak(ctx) {
            Ok((peak, src)) => {
                let best = out
                    .metrics
                    .iter()
                    .filter(|m| m.name.starts_with("read_"))
                    .map(|m| m.summary.median)
                    .fold(0.0, f64::max);
                out.finding(
                    format!(
                        "The best read bandwidth is {:.0}% of the theoretical peak {} ({src}).",
                        best / peak * 100.0,
                        fmt_bandwidth(peak)
                    ),
                    &["read_1t"],
                );
            }
            Err(why) => out.notes.push(format!("theoretical peak unknown: {why}")),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_touch_every_word() {
        let v: Vec<u64> = (0..64).collect();
        // Sum per accumulator lane, xor-combined: equals the reference.
        let mut acc = [0u64; 8];
        for (i, x) in v.iter().enumerate() {
            acc[i % 8] = acc[i % 8].wrapping_add(*x);
        }
        assert_eq!(read_words(&v), acc.iter().fold(0, |a, &b| a ^ b));
        let mut w = vec![0u64; 64];
        write_words(&mut w, 7);
        assert!(w.iter().all(|&x| x == 7));
        let mut w = vec![0u64; 64];
        write_words_nt(&mut w, 9);
        assert!(w.iter().all(|&x| x == 9));
        write_words_scalar(&mut w, 4);
        assert!(w.iter().all(|&x| x == 4));
        assert_eq!(read_words_scalar(&v), (0..64).sum::<u64>());
    }

    #[test]
    fn work_wraps_within_the_part() {
        let r = Region::new(4 * BLOCK, Pages::Base).unwrap();
        let part = Part {
            base: r.as_ptr() as usize,
            len: 4 * BLOCK,
        };
        let mut pos = 0;
        work(Op::Write, part, &mut pos, 9, 3);
        assert!(pos <= 4 * BLOCK);
        let mut pos = 0;
        work(Op::Copy, part, &mut pos, 5, 0);
        assert!(pos <= 2 * BLOCK);
    }

    #[test]
    fn thread_counts_cover_one_to_n() {
        assert_eq!(thread_counts(2, Profile::Quick), vec![1, 2]);
        assert_eq!(thread_counts(1, Profile::Quick), vec![1]);
        assert_eq!(thread_counts(1, Profile::Smoke), vec![1]);
        let v = thread_counts(64, Profile::Standard);
        assert_eq!((v[0], *v.last().unwrap()), (1, 64));
    }
}
