//! mem.latency's prose: series, metric descriptions and findings from measured points
//! and named levels.

use super::kernel::ChasePoint;
use super::levels::NamedLevel;
use crate::analysis::{separation, Separation};
use crate::results::Series;
use crate::stats::Summary;
use crate::units::{fmt_bytes, fmt_ns};

pub(super) fn series(name: &str, pts: &[ChasePoint]) -> Series {
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

pub(super) fn level_text(nl: &NamedLevel, det_name: &str) -> LevelText {
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

pub(super) fn lmbench_vs_chase(lm: &ChasePoint, last: &ChasePoint) -> String {
    format!(
        "At {} lmbench's layout (lat_mem_rd -t: random page order, one line per page per pass) reads {} per load against {} for osmeter's chase over all lines in random order ({:+.0}%).",
        fmt_bytes(lm.size as f64),
        fmt_ns(lm.median),
        fmt_ns(last.median),
        (lm.median / last.median - 1.0) * 100.0
    )
}

/// A matched level's detected size against sysfs, and its salience (|ln| of the ratio).
pub(super) fn size_vs_sysfs(nl: &NamedLevel) -> (String, f64) {
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
        // What shrinks the edge (sharing, TLB reach, a victim or non-inclusive cache, the
        // half-way rule) is not measured here: the sentence says only what was.
        text.push_str(
            " Less than half the sysfs size shows as this level's capacity to this thread's random chase.",
        );
    }
    (text, (t / s).ln())
}

/// `a` against `b` by their trials' 95% intervals.
fn apart(a: &ChasePoint, b: &ChasePoint) -> Separation {
    match (Summary::of(&a.trials), Summary::of(&b.trials)) {
        (Some(x), Some(y)) => separation(&x, &y),
        _ => Separation::Overlap,
    }
}

/// The sequential chase against the random one at the same size. Prefetching, TLB hits and
/// DRAM row locality all favour the sequential order and none is counted, so the text
/// names no mechanism; it says whether the difference is beyond noise.
pub(super) fn sequential_vs_random(stride: usize, pt: &ChasePoint, random: &ChasePoint) -> String {
    let head = format!(
        "At {} a sequential chase (stride {stride} B) costs {} per load against {} in random order",
        fmt_bytes(pt.size as f64),
        fmt_ns(pt.median),
        fmt_ns(random.median),
    );
    let tail = match apart(pt, random) {
        Separation::Below => format!(
            ", {:.0}% less, beyond both 95% intervals (prefetching, TLB hits and open DRAM rows all come with address order; they are not separated here).",
            (1.0 - pt.median / random.median) * 100.0
        ),
        Separation::Overlap => ": within noise of each other (their 95% intervals overlap).".into(),
        Separation::Above => ": the sequential order is the slower one here, beyond both 95% intervals.".into(),
    };
    head + &tail
}

/// The same random chase on huge pages against base pages. The page size is the one
/// difference between the two curves, so a difference beyond noise is what the page size
/// changes (TLB misses and page walks); otherwise the text names no cause.
pub(super) fn huge_vs_base(pt: &ChasePoint, random: &ChasePoint) -> String {
    let head = format!(
        "Huge pages change the random latency at {} from {} to {} ({:+.0}%)",
        fmt_bytes(pt.size as f64),
        fmt_ns(random.median),
        fmt_ns(pt.median),
        (pt.median / random.median - 1.0) * 100.0
    );
    let tail = match apart(pt, random) {
        Separation::Below => ", beyond both 95% intervals: with the chase unchanged, the difference is what the page size changes, TLB misses and page walks.",
        Separation::Overlap => ": within noise of each other (their 95% intervals overlap), so no cost of TLB misses shows here.",
        Separation::Above => ": huge pages are the slower ones here, beyond both 95% intervals, so no saving of TLB misses shows.",
    };
    head + tail
}
