//! mem.latency's kernel: laying and chasing a chain of one node per line, and its curves.

use super::checks::verify_chain;
use super::plan::ChaseSchedule;
use crate::experiments::kit::{measure_raw, Region};
use crate::rng::{sattolo, Rng};
use crate::units::{fmt_bytes, fmt_ns};
use std::time::Instant;

/// Loads per loop iteration of the chase (unrolled so the loop branch is negligible).
pub(crate) const UNROLL: u64 = 16;

macro_rules! rep4 {
    ($e:expr) => {
        $e;
        $e;
        $e;
        $e;
    };
}

/// Follows the chain `iters * UNROLL` steps from `p`.
///
/// # Safety
/// `p` must point into a chain laid by `lay`: every node's first word holds the address
/// of another node of the same live chain.
#[inline(never)]
pub(crate) unsafe fn chase(mut p: *const u8, iters: u64) -> *const u8 {
    for _ in 0..iters {
        // SAFETY: guaranteed by the caller; the volatile read keeps every load and its
        // order, and each address is the value of the load before it.
        rep4!({
            rep4!(p = unsafe { std::ptr::read_volatile(p as *const *const u8) });
        });
    }
    p
}

/// Points node i's first word to node next[i] (nodes of `stride` bytes), if they all fit.
pub(crate) fn lay(region: &mut Region, stride: usize, next: &[u32]) {
    let base = region.as_ptr();
    if stride < 8 || next.len() * stride > region.len() {
        return;
    }
    for (i, &j) in next.iter().enumerate() {
        // SAFETY: i and j are below next.len(), so both nodes lie inside the region
        // (checked above); stride >= 8 keeps each pointer-sized slot disjoint, and the
        // region and stride are 8-byte aligned.
        unsafe {
            let slot = base.add(i * stride) as *mut *const u8;
            slot.write(base.add(j as usize * stride));
        }
    }
}

/// lmbench's `lat_mem_rd -t` chain (thrash_initialize in lib_mem.c) over `npages` pages of
/// `lines` nodes (a power of two): pages in random order, lines bit-reversed per pass.
pub fn lmbench_chain(npages: usize, lines: usize, rng: &mut Rng) -> Vec<u32> {
    let mut order: Vec<u32> = (0..npages as u32).collect();
    rng.shuffle(&mut order);
    // The bit-reversed position of line k; a shift by all the bits (one line) is none.
    let shift = usize::BITS - lines.trailing_zeros();
    let word = |k: usize| (k % lines).reverse_bits().checked_shr(shift).unwrap_or(0);
    let mut next = vec![0u32; npages * lines];
    for i in 0..npages {
        let (cp, np) = (order[i] as usize, order[(i + 1) % npages] as usize);
        for j in 0..lines {
            let cur = cp * lines + word(i + j);
            // The last page wraps to the first one line further on, as lat_mem_rd does.
            let k = if i + 1 == npages { j + 1 } else { i + j + 1 };
            next[cur] = (np * lines + word(k)) as u32;
        }
    }
    next
}

/// One measured point of a curve: ns per load, one value per trial.
#[derive(Debug, Clone)]
pub struct ChasePoint {
    pub size: u64,
    pub trials: Vec<f64>,
}

impl ChasePoint {
    pub fn median(&self) -> f64 {
        crate::stats::median(&self.trials)
    }
}

/// A point this much slower than the next larger size is measured again.
const REMEASURE_RATIO: f64 = 1.15;

/// Adds a second measurement of the same size to `p`: every trial kept.
pub(super) fn remeasure(p: &mut ChasePoint, again: ChasePoint) {
    p.trials.extend(again.trials);
}

/// The points to measure again: slower than the next larger size (a quarter of the
/// curve at most), and the largest size when it jumps past the step before it.
fn suspects(points: &[ChasePoint]) -> Vec<usize> {
    let m: Vec<f64> = points.iter().map(ChasePoint::median).collect();
    let n = m.len();
    let slower = |i: &usize| m[*i] > REMEASURE_RATIO * m[i + 1];
    let pairs = 0..n.saturating_sub(1);
    let mut v: Vec<usize> = pairs.filter(slower).take(n / 4).collect();
    if n >= 3 && m[n - 1] / m[n - 2] > REMEASURE_RATIO * (m[n - 2] / m[n - 3]).max(1.0) {
        v.push(n - 1);
    }
    v
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// A Sattolo permutation of every node.
    Random,
    Sequential,
    /// lmbench's `lat_mem_rd -t` layout (`lmbench_chain`), measured once per size.
    Lmbench,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Random => "random",
            Order::Sequential => "sequential",
            Order::Lmbench => "lmbench layout",
        }
    }

    /// The chain over `size` bytes; None for lmbench's layout unless whole pages of nodes.
    fn chain(self, size: u64, stride: usize, rng: &mut Rng) -> Option<Vec<u32>> {
        let n = (size as usize / stride).max(2);
        let ps = crate::pagecache::page_size();
        Some(match self {
            Order::Random => sattolo(n, rng),
            Order::Sequential => (0..n as u32).map(|i| (i + 1) % n as u32).collect(),
            Order::Lmbench if size as usize % ps == 0 && ps % stride == 0 => {
                lmbench_chain(size as usize / ps, ps / stride, rng)
            }
            Order::Lmbench => return None,
        })
    }
}

impl ChaseSchedule<'_, '_> {
    /// Lays, verifies and times the chase over `size` bytes (harness notes kept if `noted`).
    fn point(
        &mut self,
        region: &mut Region,
        size: u64,
        stride: usize,
        order: Order,
        noted: bool,
    ) -> Option<ChasePoint> {
        let laying = Instant::now();
        let next = order.chain(size, stride, &mut self.rng)?;
        let n = next.len();
        lay(region, stride, &next);
        drop(next);
        if !verify_chain(region, stride, n, &mut self.rng) {
            self.broken.push(size);
            return None;
        }
        let laid = laying.elapsed().as_secs_f64();
        let trials = Instant::now();
        let mut p = region.as_ptr() as *const u8;
        let cfg = self.trials_for(size);
        let q = measure_raw(self.ctx.clock, cfg, UNROLL as f64, |iters| {
            // SAFETY: the chain over this region was laid and verified above.
            p = unsafe { chase(p, iters) };
        });
        std::hint::black_box(p);
        let (kind, at) = (order.name(), fmt_bytes(size as f64));
        self.paced(size, laid, trials.elapsed().as_secs_f64());
        self.preempted += q.preempted;
        self.kept += q.per_op_ns.len();
        if noted {
            let notes = q.notes.iter().map(|n| format!("{kind} at {at}: {n}"));
            self.notes.extend(notes);
        }
        let pt = ChasePoint {
            size,
            trials: q.per_op_ns,
        };
        let median = fmt_ns(pt.median());
        (self.ctx.progress)(&format!("{kind} {at} stride {stride}: {median}"));
        Some(pt)
    }

    /// The chase in `order` at each size; if `guarded`, while the next size `fits` the budget.
    pub(super) fn curve(
        &mut self,
        region: &mut Region,
        sizes: Vec<u64>,
        stride: usize,
        order: Order,
        guarded: bool,
    ) -> Vec<ChasePoint> {
        let mut c: Vec<ChasePoint> = Vec::new();
        let kind = order.name();
        for size in sizes {
            if guarded && !c.is_empty() && !self.fits(size) {
                self.notes.push(format!(
                "{kind} curve ended at {}: {} and what follows it would not fit the time budget at the rate chains were laid ({:.1} ns per byte)",
                fmt_bytes(c.last().map_or(0, |p| p.size) as f64),
                fmt_bytes(size as f64),
                self.pace.lay_secs_per_byte * 1e9
            ));
                break;
            }
            c.extend(self.point(region, size, stride, order, guarded));
        }
        self.chains += c.len();
        // Latency cannot fall as the set grows, so a point slower than the next was
        // likely disturbed: measure it again and keep both (the lower alone would bias it).
        let lmbench = order == Order::Lmbench;
        for i in suspects(&c).into_iter().filter(|_| !lmbench) {
            let size = c[i].size;
            if let Some(pt) = self.point(region, size, stride, order, guarded) {
                self.remeasured += 1;
                let (first, again) = (c[i].median(), pt.median());
                remeasure(&mut c[i], pt);
                self.notes.push(format!(
                "{kind} at {}: measured twice (first median {}, then {}); its figure {} is the median of all {} trials",
                fmt_bytes(size as f64),
                fmt_ns(first),
                fmt_ns(again),
                fmt_ns(c[i].median()),
                c[i].trials.len()
            ));
            }
        }
        c
    }
}
