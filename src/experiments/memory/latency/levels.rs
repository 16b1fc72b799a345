//! Naming mem.latency's plateaus: which sysfs cache each one is, and which are memory.
//! Finding the plateaus is `analysis::detect_levels`.

use crate::analysis::Level;
use crate::experiments::kit::llc_bytes;
use crate::machine::Cache;

/// A detected level with its name and the sysfs cache it was matched with.
#[derive(Debug, Clone)]
pub struct NamedLevel {
    pub name: String,
    pub level: Level,
    pub sysfs_bytes: Option<u64>,
}

/// Names the plateaus (docs/methods/mem.latency.md, "Levels"): past twice the last-level
/// cache, the last plateaus within half its latency are "dram"; the others are matched in
/// order with the sysfs data caches (most matches, then the smallest total |log2| size
/// distance, within 16x); the rest are "plateau_K".
pub fn name_levels(levels: &[Level], caches: &[Cache], max_size: u64) -> Vec<NamedLevel> {
    let mut levels = levels.to_vec();
    let llc = llc_bytes(caches).unwrap_or(0);
    let mut dram: Option<Level> = None;
    if levels.len() > 1 && max_size >= 2 * llc.max(1) {
        // Memory's latency: the last plateau of more than one point (a single disturbed
        // point at the end must not make the real memory plateau look like a cache).
        let top = levels
            .iter()
            .rev()
            .find(|l| l.span.1 > l.span.0)
            .or(levels.last())
            .map(|l| l.latency_ns)
            .unwrap_or(0.0);
        let mut k = levels.len() - 1;
        while k > 1 && levels[k - 1].latency_ns > top / 2.0 {
            k -= 1;
        }
        let mut d = levels[k].clone();
        let last = levels.last().cloned().unwrap_or_else(|| d.clone());
        d.last = last.last;
        d.span.1 = last.span.1;
        d.transition = None;
        // The level is what the whole memory region shows: median of its plateaus.
        let lats: Vec<f64> = levels[k..].iter().map(|l| l.latency_ns).collect();
        d.latency_ns = crate::stats::median(&lats);
        levels.truncate(k);
        dram = Some(d);
    }
    let (_, _, assign) = best_matching(&levels, caches, 0, 0);
    let mut out: Vec<NamedLevel> = levels
        .iter()
        .zip(assign)
        .enumerate()
        .map(|(k, (l, a))| NamedLevel {
            name: match a.map(|j| caches[j].level) {
                Some(1) => "l1d".into(),
                Some(n) => format!("l{n}"),
                None => format!("plateau_{}", k + 1),
            },
            level: l.clone(),
            sysfs_bytes: a.map(|j| caches[j].size_bytes),
        })
        .collect();
    out.extend(dram.map(|level| NamedLevel {
        name: "dram".into(),
        level,
        sysfs_bytes: None,
    }));
    out
}

/// Order-preserving matching of plateaus `lv[i..]` to caches `cs[j..]` (tiny: brute force
/// by recursion): (matches, total |log2| distance, cache per plateau).
fn best_matching(
    lv: &[Level],
    cs: &[Cache],
    i: usize,
    j: usize,
) -> (usize, f64, Vec<Option<usize>>) {
    if i == lv.len() {
        return (0, 0.0, vec![]);
    }
    // Leave plateau i unmatched.
    let (m, c, mut v) = best_matching(lv, cs, i + 1, j);
    v.insert(0, None);
    let mut out = (m, c, v);
    let size = lv[i].transition.unwrap_or(lv[i].last) as f64;
    for jj in j..cs.len() {
        let d = (size / cs[jj].size_bytes as f64).log2().abs();
        if d > 4.0 {
            continue;
        }
        let (m2, c2, mut v2) = best_matching(lv, cs, i + 1, jj + 1);
        v2.insert(0, Some(jj));
        if m2 + 1 > out.0 || (m2 + 1 == out.0 && c2 + d < out.1) {
            out = (m2 + 1, c2 + d, v2);
        }
    }
    out
}
