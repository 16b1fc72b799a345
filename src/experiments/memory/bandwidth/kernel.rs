//! mem.bandwidth's kernels: streaming loads, ordinary, scalar and non-temporal stores
//! and copies over one thread's part of the buffer, and the team of pinned threads that
//! runs them in step (docs/METHODOLOGY.md, mem.bandwidth).

use super::{Op, BLOCK};
use crate::experiments::kit::measure_trials;
use crate::experiments::Context;
use crate::harness::{HarnessConfig, Measurement};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Loads every word; eight accumulators so no add waits on the one before, which lets the
/// compiler vectorise the loop.
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

/// Stores `v` into every word. `v` is not a repeated byte, so this stays a store loop
/// rather than becoming memset (whose large-size path uses non-temporal stores).
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

/// Streams `blocks` blocks of `op` over the part, from `*pos` (wrapping). Returns a value
/// the caller must consume so the loads are not dead.
pub(super) fn work(op: Op, part: Part, pos: &mut usize, blocks: u64, pattern: u64) -> u64 {
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

/// What a team measured, and where its threads ran.
pub(super) struct Team {
    pub(super) m: Measurement,
    /// Threads that could not be pinned or were seen on another CPU than their own.
    pub(super) misplaced: Vec<String>,
    /// Why where the threads ran is not known (no hard pinning, no current-CPU call).
    pub(super) unknown: Option<String>,
}

/// Writes every byte of `part` from the calling thread: with the kernel's default
/// (local) policy each page lands on the NUMA node of the CPU that first touches it.
pub(super) fn touch(part: Part) {
    // SAFETY: part.base..part.base+part.len lies inside a live mapping owned by the
    // caller's region, and no other thread touches this part while it is being written.
    unsafe { std::ptr::write_bytes(part.base as *mut u8, 0x5a, part.len) };
}

/// Aggregate bandwidth trials of `threads` threads, thread k pinned to `cpus[k]` (thread 0
/// is the calling thread, already pinned to `cpus[0]` by the runner) and streaming its own
/// part. With `first_touch` each thread first writes its own part, so its pages sit on
/// its node. A trial's time is the slowest thread's; it is set aside when any thread was
/// preempted. Where each thread runs is read (the current CPU) around every trial.
/// Returns ns per byte (of all threads together).
pub(super) fn team(
    ctx: &Context,
    op: Op,
    parts: &[Part],
    cpus: &[usize],
    spec: &HarnessConfig,
    first_touch: bool,
) -> Team {
    use crate::platform::{current_cpu, pin_to_cpu, Pinning};
    let threads = parts.len();
    let gen = AtomicU64::new(0);
    let blocks = AtomicU64::new(0);
    let done = AtomicUsize::new(0);
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let ticks: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let quiet: Vec<AtomicBool> = (0..threads).map(|_| AtomicBool::new(true)).collect();
    // Per thread: checks that found it elsewhere, and the last such CPU.
    let away: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let away_cpu: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
    let checks = AtomicU64::new(0);
    let unknown = std::sync::Mutex::new(None::<String>);
    let pin_errors = std::sync::Mutex::new(Vec::<String>::new());
    let clock = ctx.clock;
    let pattern = 0x0123_4567_89ab_cdefu64;
    let here = |t: usize| match current_cpu() {
        Some(c) if c == cpus[t] => {}
        Some(c) => {
            away[t].fetch_add(1, Ordering::Relaxed);
            away_cpu[t].store(c, Ordering::Relaxed);
        }
        None => {
            let mut u = unknown.lock().unwrap_or_else(|e| e.into_inner());
            u.get_or_insert_with(|| "this system does not say which CPU a thread runs on".into());
        }
    };
    // One timed run of `b` blocks on this thread; records ticks, quietness and placement.
    let timed = |t: usize, pos: &mut usize, b: u64| {
        here(t);
        let c0 = crate::harness::thread_preemptions();
        let t0 = clock.start();
        let x = work(op, parts[t], pos, b, pattern);
        let t1 = clock.stop();
        std::hint::black_box(x);
        ticks[t].store(t1.wrapping_sub(t0), Ordering::Relaxed);
        quiet[t].store(
            crate::harness::thread_preemptions() == c0,
            Ordering::Relaxed,
        );
        here(t);
        checks.fetch_add(2, Ordering::Relaxed);
    };
    let m = std::thread::scope(|s| {
        for (t, &cpu) in cpus.iter().enumerate().take(threads).skip(1) {
            let (gen, blocks, done, stop, timed, ready) =
                (&gen, &blocks, &done, &stop, &timed, &ready);
            let (unknown, pin_errors) = (&unknown, &pin_errors);
            s.spawn(move || {
                match pin_to_cpu(cpu) {
                    Ok(Pinning::Hard) => {}
                    Ok(p) => {
                        let why = p.reason().unwrap_or("no hard pinning").to_string();
                        let mut u = unknown.lock().unwrap_or_else(|e| e.into_inner());
                        u.get_or_insert(why);
                    }
                    Err(e) => pin_errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("thread {t} could not be pinned to CPU {cpu} ({e})")),
                }
                if first_touch {
                    touch(parts[t]);
                }
                ready.fetch_add(1, Ordering::AcqRel);
                let mut seen = 0u64;
                let mut pos = 0usize;
                loop {
                    crate::experiments::kit::spin_until(|| {
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
        if first_touch {
            touch(parts[0]);
        }
        // Wait until every worker runs on its own CPU. Yielding matters: a new thread starts
        // on this CPU, and under a real-time policy it would never run while we spin.
        crate::experiments::kit::spin_until(|| ready.load(Ordering::Acquire) == threads - 1);
        let mut pos = 0usize;
        let bytes_per_iter = (BLOCK * threads) as f64;
        let q = measure_trials(clock, spec, bytes_per_iter, |b| {
            done.store(0, Ordering::Release);
            blocks.store(b, Ordering::Release);
            gen.fetch_add(1, Ordering::AcqRel);
            timed(0, &mut pos, b);
            crate::experiments::kit::spin_until(|| done.load(Ordering::Acquire) == threads - 1);
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
    });
    let per_thread = checks.load(Ordering::Relaxed) / threads.max(1) as u64;
    let mut misplaced = pin_errors.into_inner().unwrap_or_else(|e| e.into_inner());
    for t in 0..threads {
        let n = away[t].load(Ordering::Relaxed);
        if n > 0 {
            misplaced.push(format!(
                "thread {t} (placed on CPU {}) was on CPU {} at {n} of about {per_thread} checks",
                cpus[t],
                away_cpu[t].load(Ordering::Relaxed)
            ));
        }
    }
    Team {
        m,
        misplaced,
        unknown: unknown.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}
