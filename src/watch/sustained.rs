//! Burst and sustained CPU speed (`watch.cpu-sustained`): the harness retakes a trial
//! that was preempted, so a per-operation figure is the speed of the CPU while the
//! thread runs — the burst. A cgroup quota, a burstable instance out of credits or a
//! neighbour taking the core leaves that speed alone and takes time away instead. This
//! measures both on one loop: for `total` of wall time it runs fixed chunks of the
//! harness's register loop (`opaque::repeat`, ~100 us each) back to back. Per slice of
//! the window, `burst_iteration` is the fastest chunk's time per iteration,
//! `sustained_iteration` the slice's wall time over all iterations done in it, and
//! `cpu_share` their ratio: the share of wall time the thread computed at full speed.

use crate::results::{ExperimentResult, Metric, MetricKind, Status};
use crate::stats::Summary;
use std::time::{Duration, Instant};

/// The id this figure is recorded under.
pub const ID: &str = "watch.cpu-sustained";

/// Slices of the window: each gives one value of each metric.
const SLICES: usize = 8;
/// Target length of one chunk of the loop.
const CHUNK: Duration = Duration::from_micros(100);
/// Fewest chunks in a slice for its burst time to be a burst: below it, the slice was
/// mostly not given the CPU and its fastest chunk says little.
const MIN_CHUNKS: usize = 20;

/// The time `iters` iterations of the loop take, in ns.
fn chunk_ns(iters: u64) -> f64 {
    let t = Instant::now();
    crate::opaque::repeat(iters, || 0u64);
    t.elapsed().as_nanos() as f64
}

/// Iterations that take about `CHUNK` (doubling from 1000, the fastest of three).
fn calibrate() -> u64 {
    let mut iters = 1000u64;
    while iters < 1 << 34 {
        let best = (0..3)
            .map(|_| chunk_ns(iters))
            .fold(f64::INFINITY, f64::min);
        if best >= CHUNK.as_nanos() as f64 {
            break;
        }
        iters *= 2;
    }
    iters
}

/// One slice: (burst ns/iteration, sustained ns/iteration, chunks done).
fn slice(iters: u64, length: Duration) -> (f64, f64, usize) {
    let start = Instant::now();
    let (mut best, mut chunks) = (f64::INFINITY, 0usize);
    while start.elapsed() < length {
        best = best.min(chunk_ns(iters));
        chunks += 1;
    }
    let wall = start.elapsed().as_nanos() as f64;
    (
        best / iters as f64,
        wall / (chunks as u64 * iters) as f64,
        chunks,
    )
}

/// Measures for `total` of wall time on the calling thread. The result is invalid when
/// a slice was given too little of the CPU to show its burst speed (`MIN_CHUNKS`).
pub fn measure(total: Duration) -> ExperimentResult {
    let t0 = Instant::now();
    let iters = calibrate();
    let length = total / SLICES as u32;
    let slices: Vec<(f64, f64, usize)> = (0..SLICES).map(|_| slice(iters, length)).collect();
    from_slices(&slices, iters, length, t0.elapsed())
}

/// The result from measured slices (separate from the timing, so a test can feed a
/// starved slice and see the premise fail).
pub(crate) fn from_slices(
    slices: &[(f64, f64, usize)],
    iters: u64,
    length: Duration,
    took: Duration,
) -> ExperimentResult {
    let mut e = ExperimentResult::new(
        ID,
        "CPU speed, burst and sustained",
        "A register loop run in ~100 us chunks back to back for the whole window; per slice, \
         burst = the fastest chunk per iteration, sustained = the slice's wall time per \
         iteration, cpu_share = burst / sustained (the share of wall time the thread computed).",
    );
    e.duration_s = took.as_secs_f64();
    let fewest = slices.iter().map(|s| s.2).min().unwrap_or(0);
    let premise = fewest >= MIN_CHUNKS;
    e.checks.push(crate::results::Check::premise(
        "every slice ran enough chunks to show the burst speed",
        premise,
        format!(
            "fewest chunks of {iters} iterations in a {:.0} ms slice: {fewest} (at least {MIN_CHUNKS})",
            length.as_secs_f64() * 1e3
        ),
    ));
    if !premise {
        e.status = Status::Invalid;
        e.reason = Some(format!(
            "a slice ran only {fewest} chunks: the thread was given too little CPU to measure its burst speed"
        ));
    }
    let burst: Vec<f64> = slices.iter().map(|s| s.0).collect();
    let sustained: Vec<f64> = slices.iter().map(|s| s.1).collect();
    let share: Vec<f64> = slices.iter().map(|s| s.0 / s.1).collect();
    for (name, unit, v, what) in [
        (
            "burst_iteration",
            "ns",
            burst,
            "time per loop iteration while the thread runs",
        ),
        (
            "sustained_iteration",
            "ns",
            sustained,
            "wall time per loop iteration over the window",
        ),
        (
            "cpu_share",
            "ratio",
            share,
            "share of wall time the thread computed (burst / sustained)",
        ),
    ] {
        if let Some(summary) = Summary::of(&v) {
            e.metrics.push(Metric {
                name: name.into(),
                unit: unit.into(),
                description: what.into(),
                summary,
                prediction: None,
                cycles: None,
                iterations: Some(iters),
                raw: v,
                kind: Some(MetricKind::PerTrial),
                runs: vec![],
                bottleneck: None,
            });
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_halves_the_share_and_not_the_burst() {
        let free = vec![(0.3, 0.31, 3000); 8];
        let half = vec![(0.3, 0.6, 1500); 8];
        let (a, b) = (
            from_slices(
                &free,
                1000,
                Duration::from_millis(125),
                Duration::from_secs(1),
            ),
            from_slices(
                &half,
                1000,
                Duration::from_millis(125),
                Duration::from_secs(1),
            ),
        );
        let m = |e: &ExperimentResult, n: &str| e.metric(n).unwrap().summary.median;
        assert_eq!(a.status, Status::Ok);
        assert!((m(&b, "cpu_share") / m(&a, "cpu_share") - 0.516).abs() < 0.01);
        assert_eq!(m(&a, "burst_iteration"), m(&b, "burst_iteration"));
    }

    #[test]
    fn a_starved_slice_makes_the_result_invalid() {
        let mut s = vec![(0.3, 0.31, 3000); 8];
        s[3] = (0.3, 30.0, 3);
        let e = from_slices(&s, 1000, Duration::from_millis(125), Duration::from_secs(1));
        assert_eq!(e.status, Status::Invalid);
        assert!(e.checks.iter().any(|c| !c.passed));
    }

    #[test]
    fn a_real_window_gives_plausible_figures() {
        let e = measure(Duration::from_millis(160));
        let share = e.metric("cpu_share").unwrap().summary.median;
        // The share cannot exceed one beyond timer noise, and on any host running this
        // test the thread gets some of a CPU.
        assert!(share > 0.02 && share <= 1.05, "{share}");
    }
}
