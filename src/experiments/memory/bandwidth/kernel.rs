//! mem.bandwidth's kernels: streaming loads, ordinary, scalar and non-temporal stores
//! and copies over one thread's part of the buffer, run in step by a pinned team.

use super::{Op, BLOCK};
use crate::experiments::kit::measure_trials;
use crate::experiments::kit::team::{Team, TeamPlacement};
use crate::experiments::Context;
use crate::harness::{HarnessConfig, Measurement};

/// Loads every word; eight accumulators so no add waits on the one before (vectorised).
#[inline(never)]
pub(super) fn read_words(s: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    for c in s.chunks_exact(8) {
        for k in 0..8 {
            acc[k] = acc[k].wrapping_add(c[k]);
        }
    }
    acc.iter().fold(0, |a, &b| a ^ b)
}

/// Stores `v`, not a repeated byte, so not memset (non-temporal for large sizes).
#[inline(never)]
pub(super) fn write_words(s: &mut [u64], v: u64) {
    for w in s.iter_mut() {
        *w = v;
    }
}

/// One volatile load per word: the loop cannot be vectorised or merged.
#[inline(never)]
pub(super) fn read_words_scalar(s: &[u64]) -> u64 {
    let mut x = 0u64;
    for w in s {
        // SAFETY: w is a valid reference; the volatile read only forbids merging loads.
        x = x.wrapping_add(unsafe { std::ptr::read_volatile(w) });
    }
    x
}

/// One volatile store per word.
#[inline(never)]
pub(super) fn write_words_scalar(s: &mut [u64], v: u64) {
    for w in s.iter_mut() {
        // SAFETY: w is a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(w, v) };
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub(super) fn write_words_nt(s: &mut [u64], v: u64) {
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
pub(super) fn write_words_nt(s: &mut [u64], v: u64) {
    write_words(s, v)
}

/// One thread's share of the buffer (an address range owned by that thread alone).
#[derive(Debug, Clone, Copy)]
pub(super) struct Part {
    pub(super) base: usize,
    pub(super) len: usize,
}

/// Streams `blocks` blocks of `op` over the part from `*pos`, wrapping.
pub(super) fn work(op: Op, part: Part, pos: &mut usize, blocks: u64, pattern: u64) -> u64 {
    let (half, whole) = (part.len / 2 / BLOCK * BLOCK, part.len / BLOCK * BLOCK);
    let span = if op == Op::Copy { half } else { whole };
    let mut x = 0u64;
    for _ in 0..blocks {
        if *pos + BLOCK > span {
            *pos = 0;
        }
        let at = part.base + *pos;
        // SAFETY: at..at+BLOCK lies inside this thread's part (pos + BLOCK <= span <=
        // part.len; for copy the destination is the other half), the part is 1 MiB-aligned
        // (so u64-aligned), and no other thread touches it while this runs.
        let words = || unsafe { std::slice::from_raw_parts_mut(at as *mut u64, BLOCK / 8) };
        match op {
            Op::Read => x ^= read_words(words()),
            Op::Write => write_words(words(), pattern),
            Op::WriteNt => write_words_nt(words(), pattern),
            Op::ReadScalar => x ^= read_words_scalar(words()),
            Op::WriteScalar => write_words_scalar(words(), pattern),
            // SAFETY: as above, source and destination each BLOCK bytes of the part.
            Op::Copy => unsafe {
                let src = std::slice::from_raw_parts(at as *const u8, BLOCK);
                let dst = std::slice::from_raw_parts_mut((at + half) as *mut u8, BLOCK);
                dst.copy_from_slice(src);
            },
        }
        *pos += BLOCK;
    }
    x
}

/// Writes every byte of `part`, so its pages land on this CPU's node (first touch).
pub(super) fn touch(part: Part) {
    // SAFETY: part.base..part.base+part.len lies inside a live mapping owned by the
    // caller's region, and no other thread touches this part while it is being written.
    unsafe { std::ptr::write_bytes(part.base as *mut u8, 0x5a, part.len) };
}

/// The least share of a trial's span during which every thread must have run: threads of
/// unequal speed keep most of it; threads that ran one after another keep none.
pub(super) const TOGETHER: f64 = 0.5;

/// A team's trials, those set aside as run apart, the least share together, and those kept.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Together {
    pub(super) ran: usize,
    pub(super) apart: usize,
    pub(super) least: f64,
    pub(super) kept: usize,
}

/// Trials of one thread per part on `cpus`, in ns per byte of all threads, each timed from
/// the first start to the last stop (threads that ran one after another are not together).
pub(super) fn team(
    ctx: &Context,
    op: Op,
    parts: &[Part],
    cpus: &[usize],
    spec: &HarnessConfig,
    first_touch: bool,
) -> (Measurement, TeamPlacement, Together) {
    let pattern = 0x0123_4567_89ab_cdefu64;
    let member = |t: usize| {
        if first_touch {
            touch(parts[t]);
        }
        let mut pos = 0usize;
        move |blocks: u64| {
            std::hint::black_box(work(op, parts[t], &mut pos, blocks, pattern));
        }
    };
    let bytes_per_iter = (BLOCK * parts.len()) as f64;
    let mut together = Together {
        least: 1.0,
        ..Together::default()
    };
    let (m, placed) = Team::run(ctx.clock, &cpus[..parts.len()], member, |step| {
        measure_trials(ctx.clock, spec, bytes_per_iter, |blocks| {
            let s = step(blocks);
            let share = s.overlap();
            // A preempted trial is set aside anyway; counted apart are those it misses.
            let apart = s.quiet && share < TOGETHER;
            together.ran += 1;
            if s.quiet {
                together.least = together.least.min(share);
            }
            together.apart += usize::from(apart);
            (s.span(), s.quiet && !apart)
        })
    });
    together.kept = m.undisturbed;
    (m, placed, together)
}
