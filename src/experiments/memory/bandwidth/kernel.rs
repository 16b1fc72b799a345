//! mem.bandwidth's kernels over one thread's part of the buffer, run in step by a team.

use super::{Op, BLOCK};

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
