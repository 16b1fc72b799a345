//! mem.latency's checks: every chase is one cycle through all its nodes, read back.

use super::levels::NamedLevel;
use crate::experiments::kit::Region;
use crate::results::Check;
use crate::rng::Rng;

/// Independent cursors overlap their loads: a serial walk would be n dependent misses.
pub(super) const VERIFY_CURSORS: usize = 16;

/// Whether the chain in memory over the first `n` nodes of `stride` bytes is one cycle
/// through all of them (docs/methods/mem.latency.md, "Verified premise").
pub(crate) fn verify_chain(region: &Region, stride: usize, n: usize, rng: &mut Rng) -> bool {
    let base = region.as_ptr() as usize;
    if n == 0 || stride < 8 || n * stride > region.len() {
        return false;
    }
    let read = |i: usize| -> Option<usize> {
        // SAFETY: i < n, so the node lies inside the region (checked above).
        let p = unsafe { *((base + i * stride) as *const usize) };
        let off = p.checked_sub(base)?;
        (off % stride == 0 && off / stride < n).then_some(off / stride)
    };
    let k = VERIFY_CURSORS.min(n);
    let mut marks: Vec<usize> = Vec::with_capacity(k);
    while marks.len() < k {
        let m = rng.below(n);
        if !marks.contains(&m) {
            marks.push(m);
        }
    }
    let mut is_mark = vec![0u64; n.div_ceil(64)];
    for &m in &marks {
        is_mark[m / 64] |= 1 << (m % 64);
    }
    let marked = |i: usize| is_mark[i / 64] & (1 << (i % 64)) != 0;
    let mut cur: Vec<usize> = marks.clone();
    let mut done = vec![false; k];
    let mut total = 0usize;
    while done.contains(&false) {
        for (at, d) in cur.iter_mut().zip(&mut done).filter(|(_, d)| !**d) {
            let Some(nx) = read(*at) else {
                return false;
            };
            *at = nx;
            total += 1;
            if total > n {
                return false;
            }
            *d = marked(nx);
        }
    }
    // The marks must form one cycle: "mark -> mark its walk reached" leads from mark 0
    // back to it in k steps, not fewer.
    let idx = |m: usize| marks.iter().position(|&x| x == m);
    let back = (1..=k).try_fold(0, |at, step| idx(cur[at]).filter(|&j| j != 0 || step == k));
    total == n && back == Some(0)
}

pub(super) fn levels(named: &[NamedLevel], caches: usize) -> Check {
    let found = named.iter().filter(|n| n.sysfs_bytes.is_some()).count();
    Check::sanity(
        "every sysfs data cache level detected",
        found == caches,
        format!("{found} of {caches} sysfs data/unified cache levels matched a plateau"),
    )
}
