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
//! on an unchanged host. See docs/METHODOLOGY.md, "Environment sentinel".
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

fn time_ns(f: impl FnOnce()) -> f64 {
    let t = crate::clock::monotonic_raw_ns();
    f();
    crate::clock::monotonic_raw_ns().saturating_sub(t) as f64
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
/// measures when a busy SMT sibling takes issue slots. A four-add kernel moved 1.9x where
/// cpu.loop moved 2.2x; this one is cpu.loop's own loop.
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

/// Measures the sentinel once (about 1 ms).
pub fn measure() -> Reading {
    // The ring: a random single cycle through the slots (fixed seed: the same every time).
    let ring: Vec<u32> = sattolo(CHASE_SLOTS, &mut Rng::new(0x2545_f491_4f6c_dd1d));
    // Source and destination in one page-aligned region, 2 KiB apart modulo 4 KiB: the
    // same layout every time. Apart by a multiple of 4 KiB, loads falsely wait for stores
    // (4K aliasing) and the copy runs many times slower; a heap-aligned buffer changed its
    // cache-line alignment, and the copy its speed, from one measurement to the next.
    const PAGE: usize = 4096;
    let mut buf = vec![1u8; 2 * COPY_BYTES + 2048 + PAGE];
    let start = buf.as_ptr().align_offset(PAGE).min(PAGE);
    let region = &mut buf[start..start + 2 * COPY_BYTES + 2048];
    let (src, rest) = region.split_at_mut(COPY_BYTES);
    let src: &[u8] = src;
    let dst = &mut rest[2048..2048 + COPY_BYTES];
    // One untimed pass of each warms the caches and the branch predictors.
    black_box(chain(CHAIN_OPS / 4, 1));
    black_box(issue(ISSUE_ITERS / 4));
    black_box(chase(&ring, CHASE_STEPS / 4));
    dst.copy_from_slice(src);
    let (mut c, mut t, mut p, mut m) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..REPS {
        c.push(
            time_ns(|| {
                black_box(chain(CHAIN_OPS, r as u64));
            }) / CHAIN_OPS as f64,
        );
        t.push(
            time_ns(|| {
                black_box(issue(ISSUE_ITERS));
            }) / ISSUE_ITERS as f64,
        );
        p.push(
            time_ns(|| {
                black_box(chase(&ring, CHASE_STEPS));
            }) / CHASE_STEPS as f64,
        );
        m.push(
            time_ns(|| {
                for _ in 0..COPY_TIMES {
                    dst.copy_from_slice(black_box(src));
                    black_box(&mut *dst);
                }
            }) / (COPY_BYTES * COPY_TIMES) as f64,
        );
    }
    let (chain_ns, s1) = min_and_spread(c);
    let (issue_ns, s4) = min_and_spread(t);
    let (chase_ns, s2) = min_and_spread(p);
    let (copy_ns_per_byte, s3) = min_and_spread(m);
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
        let t = std::time::Instant::now();
        let r = measure();
        let took = t.elapsed();
        // A dependent multiply-add is ~4 core cycles; an L1 load 4-5; a copy well under
        // 0.1 ns/byte from L1.
        assert!(r.chain_ns > 0.3 && r.chain_ns < 10.0, "{r:?}");
        assert!(r.chase_ns > 0.3 && r.chase_ns < 20.0, "{r:?}");
        assert!(
            r.copy_ns_per_byte > 0.001 && r.copy_ns_per_byte < 1.0,
            "{r:?}"
        );
        // The chase serialises loads: it cannot be faster than the add chain.
        assert!(r.chase_ns > r.chain_ns, "{r:?}");
        // An empty loop iteration is about a cycle: well under a dependent multiply-add.
        assert!(r.issue_ns > 0.05 && r.issue_ns < 2.0 * r.chain_ns, "{r:?}");
        assert!(took.as_millis() < 100, "sentinel took {took:?}");
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
