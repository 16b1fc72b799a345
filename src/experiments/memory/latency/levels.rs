//! Naming mem.latency's plateaus (found by `analysis::detect_levels`) after sysfs caches.

use crate::analysis::Level;
use crate::experiments::kit::llc_bytes;
use crate::machine::Cache;

#[derive(Debug, Clone)]
pub struct NamedLevel {
    pub name: String,
    pub level: Level,
    pub sysfs_bytes: Option<u64>,
    /// Matched outside the ¼-2x window: a VM's share of the host's last-level cache.
    pub widened: bool,
}

/// log2 bounds of a transition against its cache's size; 1/16x for a VM's share of an LLC.
const WINDOW: (f64, f64) = (-2.0, 1.0);
const VM_LLC_BELOW: f64 = -4.0;

/// Names the plateaus (docs/methods/mem.latency.md, "Levels"): memory ("dram"), a sysfs
/// data cache's name (most matches, then the least total |log2| distance) or "plateau_K".
pub fn name_levels(levels: &[Level], caches: &[Cache], max_size: u64, vm: bool) -> Vec<NamedLevel> {
    let llc = llc_bytes(caches);
    let k = (levels.iter())
        .position(|v| llc.is_some_and(|l| v.last > 2 * l))
        .unwrap_or(levels.len());
    let (cached, memory) = levels.split_at(k);
    let assign = best_matching(cached, caches, (max_size, vm), 0, 0).2;
    let mut out: Vec<NamedLevel> = cached
        .iter()
        .zip(assign)
        .enumerate()
        .map(|(i, (l, a))| NamedLevel {
            name: match a.map(|(j, _)| caches[j].level) {
                Some(1) => "l1d".into(),
                Some(n) => format!("l{n}"),
                None => format!("plateau_{}", i + 1),
            },
            level: l.clone(),
            sysfs_bytes: a.map(|(j, _)| caches[j].size_bytes),
            widened: a.is_some_and(|(_, w)| w),
        })
        .collect();
    if let (Some(first), Some(last)) = (memory.first(), memory.last()) {
        // One level over the whole memory region; its figure is the `dram` metric's.
        let level = Level {
            last: last.last,
            transition: None,
            latency_ns: f64::NAN,
            ..first.clone()
        };
        out.push(NamedLevel {
            name: "dram".into(),
            level,
            sysfs_bytes: None,
            widened: false,
        });
    }
    out
}

/// How far (|log2|) `lv`'s capacity (transition, else a plateau's end before `max`) lies
/// from cache `c`, and whether only the VM's wider window admits it; None outside it.
fn distance(lv: &Level, c: &Cache, llc: bool, (max, vm): (u64, bool)) -> Option<(f64, bool)> {
    let size = lv.transition.or(Some(lv.last).filter(|&l| l < max))?;
    let d = (size as f64 / c.size_bytes as f64).log2();
    let below = if llc && vm { VM_LLC_BELOW } else { WINDOW.0 };
    (below..=WINDOW.1)
        .contains(&d)
        .then_some((d.abs(), d < WINDOW.0))
}

type Assignment = Vec<Option<(usize, bool)>>;

/// Order-preserving matching of plateaus `lv[i..]` to caches `cs[j..]` (tiny: brute force
/// by recursion): (matches, total |log2| distance, (cache, widened) per plateau).
fn best_matching(
    lv: &[Level],
    cs: &[Cache],
    at: (u64, bool),
    i: usize,
    j: usize,
) -> (usize, f64, Assignment) {
    if i == lv.len() {
        return (0, 0.0, vec![]);
    }
    // Leave plateau i unmatched.
    let (m, c, mut v) = best_matching(lv, cs, at, i + 1, j);
    v.insert(0, None);
    let mut out = (m, c, v);
    for jj in j..cs.len() {
        let llc = Some(cs[jj].size_bytes) == llc_bytes(cs);
        let Some((d, wide)) = distance(&lv[i], &cs[jj], llc, at) else {
            continue;
        };
        let (m2, c2, mut v2) = best_matching(lv, cs, at, i + 1, jj + 1);
        v2.insert(0, Some((jj, wide)));
        if m2 + 1 > out.0 || (m2 + 1 == out.0 && c2 + d < out.1) {
            out = (m2 + 1, c2 + d, v2);
        }
    }
    out
}
