//! mem.bandwidth: read, write and copy bandwidth of main memory, one thread and 1..N.
//!
//! Each thread streams over its own part of one buffer far larger than the last-level
//! cache, 1 MiB at a time, continuing where its last trial stopped, so no trial finds its
//! data in a cache. Trials are short (a few ms), start together (spinning threads), and are
//! repeated when a thread was preempted.

//!
//! Split along its seams: `kernel` (the streaming loops and the team of pinned threads)
//! and `text` (findings, with each claim tied to its evidence); docs/METHODOLOGY.md,
//! mem.bandwidth, states the method.

mod kernel;
mod text;

use super::{Pages, Region};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::HarnessConfig;
use crate::results::{Prediction, Series};
use crate::units::fmt_bytes;
#[cfg(test)]
use kernel::{
    read_words, read_words_scalar, work, write_words, write_words_nt, write_words_scalar,
};
use kernel::{team, Part};
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

const META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: "mem.bandwidth",
    title: "Memory bandwidth",
    description: "read, write (and non-temporal write) and copy bandwidth on a buffer far larger than the last-level cache, 1..N threads",
    method: "One buffer (at least 8x the last-level cache and 256 MiB; 64 MiB in smoke) in base pages (the headline \
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
        1..N, N = CPUs this process may use.",
    needs: crate::experiments::Needs::NONE,
    // Streaming loads and stores.
    bottleneck: crate::results::Bottleneck::Copy,
};

impl Experiment for Bandwidth {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &META
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
        let caches = ctx.machine.data_caches();
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
        let caches = ctx.machine.data_caches();
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
        let size = buffer_size(ctx, llc, n, &mut out)?;
        let rss0 = super::rss_baseline();
        (ctx.progress)("faulting the buffer in");
        let mut region = Region::new(size, Pages::Base)?;
        region.prefault();
        // Touch every byte once: the first write pass is not timed.
        region.as_mut_slice().fill(0x5a);

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
        let configs = counts.len() * ops.len() + scalar.len() + if thp { THP_OPS.len() } else { 0 };
        let (min_trial, trials) = match ctx.profile {
            Profile::Smoke => (Duration::from_millis(1), 5),
            Profile::Quick => (Duration::from_millis(2), 11),
            Profile::Standard => (Duration::from_millis(4), 21),
            Profile::Thorough => (Duration::from_millis(4), 31),
        };
        let spec = HarnessConfig::short_trials(min_trial, trials)
            .for_budget(ctx.budget.mul_f64(0.85), configs);
        let mut run = Streams {
            ctx,
            cpus: &cpus,
            spec: &spec,
            size,
            preempted: 0,
            kept: 0,
        };
        let base = region.as_ptr() as usize;
        for &op in ops.iter().chain(scalar) {
            let counts: &[usize] = if scalar.contains(&op) { &[1] } else { &counts };
            let pts = run.by_threads(op, base, counts, n, &mut out);
            if !scalar.contains(&op) {
                out.series.push(Series {
                    name: format!("{}_by_threads", op.name()),
                    x_unit: "threads".into(),
                    y_unit: "bytes/s".into(),
                    points: pts,
                });
            }
        }
        drop(region);

        if thp {
            run.huge_pages(&mut out)?;
        } else if ctx.profile != Profile::Smoke {
            out.notes.push("transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): base pages only".into());
        }
        out.check(super::rss_check(rss0, size as u64));
        out.notes.push(format!(
            "{} trials were preempted by other tasks and repeated; {} undisturbed trials kept",
            run.preempted, run.kept
        ));
        text::conclusions(&mut out, n, dimm_peak(ctx));
        Ok(out)
    }
}

/// Operations measured again on huge pages, one thread.
const THP_OPS: [Op; 3] = [Op::Read, Op::Write, Op::Copy];

/// The buffer: far larger than the last-level cache, within the memory cap, a whole
/// number of blocks per thread; noted with MemAvailable.
fn buffer_size(ctx: &Context, llc: u64, n: usize, out: &mut Outcome) -> anyhow::Result<usize> {
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
        fmt_bytes(ctx.machine.memory_budget_bytes() as f64)
    ));
    if (size as u64) < 4 * llc {
        out.notes.push(format!(
            "the buffer ({}) is less than 4x the last-level cache ({}): some trials may find data in the cache",
            fmt_bytes(size as f64),
            fmt_bytes(llc as f64)
        ));
    }
    Ok(size)
}

/// Measures streams over the buffer and counts preempted and kept trials.
struct Streams<'a, 'c> {
    ctx: &'a Context<'c>,
    cpus: &'a [usize],
    spec: &'a HarnessConfig,
    size: usize,
    preempted: usize,
    kept: usize,
}

impl Streams<'_, '_> {
    /// `op` with each thread count over the buffer at `base`; the metric `OP_Tt` for one
    /// thread and for all `n`; returns the (threads, median bandwidth) points.
    fn by_threads(
        &mut self,
        op: Op,
        base: usize,
        counts: &[usize],
        n: usize,
        out: &mut Outcome,
    ) -> Vec<[f64; 2]> {
        let (ctx, size) = (self.ctx, self.size);
        let mut pts = Vec::new();
        for &t in counts {
            let part_len = size / t / BLOCK * BLOCK;
            let parts: Vec<Part> = (0..t)
                .map(|k| Part {
                    base: base + k * part_len,
                    len: part_len,
                })
                .collect();
            (ctx.progress)(&format!("{} with {t} thread(s)", op.name()));
            let q = team(ctx, op, &parts, self.cpus, self.spec);
            self.preempted += q.preempted;
            self.kept += q.per_op_ns.len();
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
        pts
    }

    /// Huge pages: a stream enters a new base page every page_size / line_size lines,
    /// so on base pages each trial also pays TLB misses and page walks the prediction
    /// leaves out.
    fn huge_pages(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        let (ctx, size) = (self.ctx, self.size);
        if let Some(why) = super::too_small_for_huge_pages(ctx.machine, size) {
            out.notes.push(format!("no huge-page figures: {why}"));
            return Ok(());
        }
        (ctx.progress)("huge-page buffer");
        let huge = super::huge_page(ctx.machine);
        let mut region = Region::aligned(size, Pages::Huge, huge)?;
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
        if !backed {
            out.notes.push("the kernel did not back most of the huge-page buffer with huge pages (fragmented memory or THP defrag policy): no huge-page figures".into());
            return Ok(());
        }
        let part = [Part {
            base: region.as_ptr() as usize,
            len: size / BLOCK * BLOCK,
        }];
        for op in THP_OPS {
            (ctx.progress)(&format!("{} with 1 thread, huge pages", op.name()));
            let q = team(ctx, op, &part, self.cpus, self.spec);
            self.preempted += q.preempted;
            self.kept += q.per_op_ns.len();
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
        Ok(())
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
