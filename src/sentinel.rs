//! The environment sentinel: three fixed, tiny references measured just before and just
//! after every experiment on the run's pinned CPU, so that compare can tell a change of
//! the machine under test from a change of the host around it (a vCPU run slower, a
//! busier neighbour). Each kernel touches at most 16 KiB (L1-sized) so that it leaves
//! the caches much as an experiment's own warm-up finds them; all four take ~1 ms.
//!
//! Two core kernels, because a host slows a vCPU in two ways: a lower clock slows a
//! dependent chain (latency-bound), while a busy SMT sibling on the host halves the issue
//! slots and slows throughput-bound code (loops, system calls) but hardly a dependent
//! chain. Every kernel keeps its state in registers or a fixed, aligned buffer: a
//! `black_box` store and reload per step, or a buffer whose alignment changes from one
//! allocation to the next, made the chase and the copy settle into states up to 2x apart
//! on an unchanged host. See docs/REPORTS.md, "Compare and its significance rule".
//!
//! A measurement is a `results::Reading`: data the results document stores, so it lives
//! with the document, which then depends on none of this measuring code.

use crate::opaque::hide;
use crate::results::Reading;
use crate::rng::{sattolo, Rng};
use std::hint::black_box;

/// Dependent multiply-adds per chain repetition.
const CHAIN_OPS: u64 = 20_000;
/// Iterations of the throughput kernel (the harness's empty measured loop).
const ISSUE_ITERS: u64 = 40_000;
/// Pointer-chase ring: 4 KiB of 8-byte slots, well inside any L1 data cache.
const CHASE_SLOTS: usize = 512;
const CHASE_STEPS: usize = 20_000;
/// memcpy of 8 KiB into 8 KiB.
const COPY_BYTES: usize = 8192;
const COPY_TIMES: usize = 16;
/// Repetitions of each kernel; the minimum is kept (preemption only adds time).
const REPS: usize = 7;

fn min_and_spread(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let min = v[0];
    let med = v[v.len() / 2];
    (min, if min > 0.0 { med / min - 1.0 } else { 0.0 })
}

fn time_ns(now: &dyn Fn() -> u64, f: impl FnOnce()) -> f64 {
    let t = now();
    f();
    now().saturating_sub(t) as f64
}

/// Steps of the clock each timed repetition spans at least, on a coarse clock.
const MIN_STEPS: f64 = 1000.0;

/// How many times to repeat a kernel whose one pass took `once_ns`, so that a timed
/// repetition spans `MIN_STEPS` steps of a clock of `step_ns`: 1 on a fine clock (1 ns
/// steps: the kernels are sized for it, so Linux figures are unchanged).
fn scale(step_ns: f64, once_ns: f64) -> usize {
    if step_ns < crate::clock::COARSE_TICK_NS {
        return 1;
    }
    (MIN_STEPS * step_ns / once_ns.max(step_ns)).ceil().max(1.0) as usize
}

/// A chain of dependent multiply-adds the compiler cannot fold or vectorise (the input
/// and the count are opaque); nothing touches memory, so code placement does not matter.
fn chain(n: u64, seed: u64) -> u64 {
    let mut x = black_box(seed) | 1;
    for _ in 0..black_box(n) {
        // `hide` stops the compiler merging iterations algebraically while x stays in a
        // register (no memory).
        x = hide(x.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1));
    }
    x
}

/// The empty measured loop every kernel runs in: bound by the front end (one taken
/// branch per iteration), not by a dependency, so it slows as much as anything osmeter
/// measures when a busy SMT sibling takes issue slots, more than a kernel of dependent
/// adds slows; this one is cpu.loop's own loop.
fn issue(n: u64) -> u64 {
    crate::opaque::repeat(n, || ());
    n
}

/// A pointer chase through `ring`, the index kept in a register (no store per step).
fn chase(ring: &[u32], steps: usize) -> u64 {
    let mut i = 0u64;
    for _ in 0..steps {
        i = hide(ring[i as usize] as u64);
    }
    i
}

/// Measures the sentinel once (about 1 ms), timed with CLOCK_MONOTONIC_RAW
/// (mach_absolute_time on macOS).
pub fn measure() -> Reading {
    measure_with(&crate::clock::monotonic_raw_ns)
}

/// As `measure`, timed with `now` (ns). On a coarse clock (41.7 ns steps on Apple silicon)
/// each kernel is repeated within a timed window until the window spans `MIN_STEPS`
/// steps, so that one step is at most 0.1% of it.
pub fn measure_with(now: &dyn Fn() -> u64) -> Reading {
    let mut kernels = Kernels::new();
    kernels.warm();
    let k = plan(now, &mut kernels);
    reading(&windows(now, &mut kernels, k), k)
}

/// The four kernels, in the order they are timed.
const CHAIN: usize = 0;
const ISSUE: usize = 1;
const CHASE: usize = 2;
const COPY: usize = 3;
/// The work one pass of each kernel does, the unit its reading is per: dependent
/// multiply-adds, loop iterations, chase steps, bytes copied.
const WORK: [f64; 4] = [
    CHAIN_OPS as f64,
    ISSUE_ITERS as f64,
    CHASE_STEPS as f64,
    (COPY_BYTES * COPY_TIMES) as f64,
];

/// The kernels' state, laid out the same way every time.
struct Kernels {
    /// A random single cycle through the slots (fixed seed: the same every time).
    ring: Vec<u32>,
    buf: Vec<u8>,
    /// Where the copy's page-aligned region starts in `buf`.
    start: usize,
}

impl Kernels {
    fn new() -> Self {
        const PAGE: usize = 4096;
        // Source and destination in one page-aligned region, 2 KiB apart modulo 4 KiB: the
        // same layout every time. Apart by a multiple of 4 KiB, loads falsely wait for
        // stores (4K aliasing) and the copy runs many times slower; a heap-aligned buffer
        // changed its cache-line alignment, and the copy its speed, from one measurement
        // to the next.
        let buf = vec![1u8; 2 * COPY_BYTES + 2048 + PAGE];
        let start = buf.as_ptr().align_offset(PAGE).min(PAGE);
        Kernels {
            ring: sattolo(CHASE_SLOTS, &mut Rng::new(0x2545_f491_4f6c_dd1d)),
            buf,
            start,
        }
    }

    /// One untimed pass of each at a quarter size warms the caches and branch predictors.
    fn warm(&mut self) {
        black_box(chain(CHAIN_OPS / 4, 1));
        black_box(issue(ISSUE_ITERS / 4));
        black_box(chase(&self.ring, CHASE_STEPS / 4));
        self.run(COPY, 1, 0);
    }

    /// `times` passes of one kernel; `seed` varies the chain's input between windows.
    fn run(&mut self, kernel: usize, times: usize, seed: u64) {
        match kernel {
            CHAIN => (0..times).for_each(|_| {
                black_box(chain(CHAIN_OPS, seed));
            }),
            ISSUE => (0..times).for_each(|_| {
                black_box(issue(ISSUE_ITERS));
            }),
            CHASE => (0..times).for_each(|_| {
                black_box(chase(&self.ring, CHASE_STEPS));
            }),
            _ => {
                let region = &mut self.buf[self.start..self.start + 2 * COPY_BYTES + 2048];
                let (src, rest) = region.split_at_mut(COPY_BYTES);
                let src: &[u8] = src;
                let dst = &mut rest[2048..2048 + COPY_BYTES];
                for _ in 0..COPY_TIMES * times {
                    dst.copy_from_slice(black_box(src));
                    black_box(&mut *dst);
                }
            }
        }
    }
}

/// How many passes of each kernel one timed window holds: one each on a fine clock; on a
/// coarse clock, enough that a window spans `MIN_STEPS` steps, from the fastest of five
/// timed passes (a pass preempted once must not shrink the count).
fn plan(now: &dyn Fn() -> u64, kernels: &mut Kernels) -> [usize; 4] {
    let step = crate::clock::clock_step_ns(now);
    if step < crate::clock::COARSE_TICK_NS {
        return [1; 4];
    }
    let mut k = [1; 4];
    for (kernel, k) in k.iter_mut().enumerate() {
        let once = (0..5)
            .map(|_| time_ns(now, || kernels.run(kernel, 1, 0)))
            .fold(f64::INFINITY, f64::min);
        *k = scale(step, once);
    }
    k
}

/// `REPS` timed windows of each kernel, interleaved (chain, issue, chase, copy, then
/// again), each holding `k` passes: the elapsed ns of each window.
fn windows(now: &dyn Fn() -> u64, kernels: &mut Kernels, k: [usize; 4]) -> Vec<[f64; 4]> {
    (0..REPS)
        .map(|rep| {
            let mut row = [0.0; 4];
            for (kernel, t) in row.iter_mut().enumerate() {
                *t = time_ns(now, || kernels.run(kernel, k[kernel], rep as u64));
            }
            row
        })
        .collect()
}

/// Each kernel's fastest window per unit of work, and the spread of the worst kernel.
fn reading(windows: &[[f64; 4]], k: [usize; 4]) -> Reading {
    let per_work = |kernel: usize| {
        min_and_spread(
            windows
                .iter()
                .map(|w| w[kernel] / (WORK[kernel] * k[kernel] as f64))
                .collect(),
        )
    };
    let (chain_ns, s1) = per_work(CHAIN);
    let (issue_ns, s4) = per_work(ISSUE);
    let (chase_ns, s2) = per_work(CHASE);
    let (copy_ns_per_byte, s3) = per_work(COPY);
    Reading {
        chain_ns,
        issue_ns,
        chase_ns,
        copy_ns_per_byte,
        spread: s1.max(s2).max(s3).max(s4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plausible_and_tiny() {
        // CPU time, not wall time: a test beside it may hold the CPU for a whole slice.
        let t = crate::platform::thread_cpu_ns();
        let r = measure();
        let took_ms = crate::platform::thread_cpu_ns().saturating_sub(t) as f64 / 1e6;
        // A dependent multiply-add is ~4 core cycles; an L1 load 4-5; a copy well under
        // 0.1 ns/byte from L1.
        assert!(r.chain_ns > 0.3 && r.chain_ns < 10.0, "{r:?}");
        assert!(r.chase_ns > 0.3 && r.chase_ns < 20.0, "{r:?}");
        assert!(
            r.copy_ns_per_byte > 0.001 && r.copy_ns_per_byte < 1.0,
            "{r:?}"
        );
        // The chase serialises loads: a load-to-use is 3-5 cycles on every core, the
        // chain's multiply-add 4, so a chase at half the chain's time is not a chase.
        assert!(r.chase_ns > 0.5 * r.chain_ns, "{r:?}");
        // An empty loop iteration is about a cycle: well under a dependent multiply-add.
        assert!(r.issue_ns > 0.05 && r.issue_ns < 2.0 * r.chain_ns, "{r:?}");
        assert!(took_ms < 100.0, "sentinel took {took_ms} ms of CPU time");
    }

    #[test]
    fn repeats_scale_only_on_coarse_clocks() {
        // A fine clock keeps the kernels' sizes (Linux figures unchanged).
        assert_eq!(scale(1.0, 1300.0), 1);
        // The 1.3 us copy on a 41.7 ns clock: 33 times, 43 us, 1000+ steps.
        assert_eq!(scale(41.7, 1300.0), 33);
        assert!(scale(41.7, 1300.0) as f64 * 1300.0 / 41.7 >= MIN_STEPS);
        // A pass that read 0 steps counts as one step, not as free.
        assert_eq!(scale(41.7, 0.0), 1000);
        assert_eq!(scale(41.7, 100_000.0), 1);
    }

    /// The sentinel through a fake 24 MHz counter (Apple silicon's) gives the readings the
    /// fine clock gives for the very same windows: each window is read by both clocks at
    /// once (the coarse reading is the fine one rounded down to the counter's tick), so
    /// the host's swings cancel and only what the scaling controls is left: the rounding,
    /// at most 2 steps in a window of about `MIN_STEPS`. Without the scaling the copy's
    /// 1.3 us window spans ~31 steps (3% each); a repeat count not divided out is off by
    /// the count (3-33x).
    #[test]
    fn a_24_mhz_counter_gives_the_true_readings() {
        let coarse = crate::clock::CoarseClock::new(24e6);
        let step = 1e9 / 24e6;
        let mut kernels = Kernels::new();
        kernels.warm();
        let k = plan(&|| coarse.ns(), &mut kernels);
        let stamps = std::cell::RefCell::new(Vec::new());
        let both = || {
            let t = crate::clock::monotonic_raw_ns();
            stamps.borrow_mut().push(t);
            coarse.ns_at(t)
        };
        let r = reading(&windows(&both, &mut kernels, k), k);
        let stamps = stamps.into_inner();
        assert_eq!(
            stamps.len(),
            2 * 4 * REPS,
            "one start and one stop per window"
        );
        let got = [r.chain_ns, r.issue_ns, r.chase_ns, r.copy_ns_per_byte];
        for (kernel, name) in ["chain", "issue", "chase", "copy"].into_iter().enumerate() {
            let fine: Vec<f64> = (0..REPS)
                .map(|rep| {
                    let i = 2 * (4 * rep + kernel);
                    (stamps[i + 1] - stamps[i]) as f64
                })
                .collect();
            for w in &fine {
                // A quarter of MIN_STEPS: the plan's count comes from the fastest of five
                // passes, which a busy host can all slow (seen: 480 steps beside a busy
                // loop, 0.4% of rounding); without the scaling a window spans ~31.
                assert!(
                    w / step >= MIN_STEPS / 4.0,
                    "{name}: a window of {:.0} steps of the 24 MHz counter ({k:?} passes)",
                    w / step
                );
            }
            let truth = fine.iter().copied().fold(f64::INFINITY, f64::min)
                / (WORK[kernel] * k[kernel] as f64);
            assert!(got[kernel] > 0.0, "{name}: 0 on a coarse clock");
            assert!(
                (got[kernel] / truth - 1.0).abs() < 0.005,
                "{name}: {} on the 24 MHz counter against {truth} on the fine clock \
                 for the same windows ({k:?} passes)",
                got[kernel]
            );
        }
    }

    #[test]
    #[ignore]
    fn print_stability() {
        for _ in 0..40 {
            let r = measure();
            println!(
                "{:.3} {:.3} {:.3} {:.5} {:.2}",
                r.chain_ns, r.issue_ns, r.chase_ns, r.copy_ns_per_byte, r.spread
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
