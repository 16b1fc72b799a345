//! mem.latency's prose: series, metric descriptions and findings from measured points
//! and named levels (docs/METHODOLOGY.md, mem.latency).

use super::kernel::Point;
use super::levels::Named;
use crate::results::Series;
use crate::units::{fmt_bytes, fmt_ns};

pub(super) fn series(name: &str, pts: &[Point]) -> Series {
    Series {
        name: name.into(),
        x_unit: "bytes".into(),
        y_unit: "ns".into(),
        points: pts.iter().map(|p| [p.size as f64, p.median]).collect(),
    }
}

/// How a named level is described: its plateau, transition and sysfs size.
pub(super) struct LevelText {
    pub(super) plateau: String,
    pub(super) edge: String,
    pub(super) sys: String,
    /// "l2 4.1 ns: huge-page plateau ..., transition at ... (sysfs ...)".
    pub(super) line: String,
}

pub(super) fn level_text(nl: &Named, det_name: &str) -> LevelText {
    let l = &nl.level;
    let plateau = format!(
        "{} plateau {}..{}",
        det_name,
        fmt_bytes(l.first as f64),
        fmt_bytes(l.last as f64)
    );
    let edge = l
        .transition
        .map(|t| format!(", transition at {}", fmt_bytes(t as f64)))
        .unwrap_or_default();
    let sys = nl
        .sysfs_bytes
        .map(|s| format!(" (sysfs {})", fmt_bytes(s as f64)))
        .unwrap_or_default();
    let line = format!("{} {}: {plateau}{edge}{sys}", nl.name, fmt_ns(l.latency_ns));
    LevelText {
        plateau,
        edge,
        sys,
        line,
    }
}

pub(super) fn lmbench_vs_chase(lm: &Point, last: &Point) -> String {
    format!(
        "At {} lmbench's layout (lat_mem_rd -t: random page order, one line per page per pass) reads {} per load against {} for osmeter's chase over all lines in random order ({:+.0}%).",
        fmt_bytes(lm.size as f64),
        fmt_ns(lm.median),
        fmt_ns(last.median),
        (lm.median / last.median - 1.0) * 100.0
    )
}

/// A matched level's detected size against sysfs, and its salience (|ln| of the ratio).
pub(super) fn size_vs_sysfs(nl: &Named) -> (String, f64) {
    let s = nl.sysfs_bytes.unwrap_or(1) as f64;
    let t = nl.level.transition.unwrap_or(nl.level.last) as f64;
    let mut text = format!(
        "{}: detected size {} (latency half-way to the next level; the plateau ends at {}) against sysfs {} ({:.2}x).",
        nl.name,
        fmt_bytes(t),
        fmt_bytes(nl.level.last as f64),
        fmt_bytes(s),
        t / s
    );
    if t / s < 0.5 {
        text.push_str(" Less than half the cache is effectively this thread's: it is shared with other cores, hyperthreads or virtual machines.");
    }
    (text, (t / s).ln())
}

pub(super) fn sequential_vs_random(stride: usize, pt: &Point, dram: f64) -> String {
    format!(
        "At {} a sequential chase (stride {stride} B) costs {} per load against {} in random order: the prefetcher hides {:.0}% of the latency.",
        fmt_bytes(pt.size as f64),
        fmt_ns(pt.median),
        fmt_ns(dram),
        (1.0 - pt.median / dram) * 100.0
    )
}

pub(super) fn huge_vs_base(pt: &Point, dram: f64) -> String {
    format!(
        "Huge pages change the random DRAM latency at {} from {} to {} ({:+.0}%): the rest is TLB misses and page walks.",
        fmt_bytes(pt.size as f64),
        fmt_ns(dram),
        fmt_ns(pt.median),
        (pt.median / dram - 1.0) * 100.0
    )
}
