//! mem.latency's prose: series, descriptions and findings from points and named levels.

use super::kernel::ChasePoint;
use super::levels::NamedLevel;
use super::plan::ChaseSchedule;
use crate::analysis::Separation;
use crate::experiments::Outcome;
use crate::units::{fmt_bytes, fmt_ns};

pub(super) fn plot(out: &mut Outcome, name: &str, curve: &[ChasePoint]) {
    let xy = curve.iter().map(|p| [p.size as f64, p.median()]);
    out.plot(name, "bytes", "ns", xy.collect());
}

impl ChaseSchedule<'_, '_> {
    /// Notes, not a check: no figure depends on a chain that failed.
    pub(super) fn report(&mut self, out: &mut Outcome) {
        out.notes.push(if self.broken.is_empty() {
            let chains = self.chains;
            format!("{chains} chains verified before timing: each is one cycle of all its nodes, read back from memory")
        } else {
            let broken: Vec<String> = self.broken.iter().map(|&b| fmt_bytes(b as f64)).collect();
            let broken = broken.join(", ");
            format!("chains at {broken} did not verify and were not measured")
        });
        out.notes.append(&mut self.notes);
        let (pre, kept, again) = (self.preempted, self.kept, self.remeasured);
        out.notes.push(format!(
            "{pre} trials were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed trials kept; {again} points slower than the next larger size were measured again (both measurements kept: each such point is the median of all its trials)"
        ));
    }
}

/// Where a named level lies: "huge-page plateau 1 KiB..32 KiB, transition at 40 KiB
/// (sysfs 48 KiB)".
pub(super) fn level_span(nl: &NamedLevel, det_name: &str) -> String {
    let l = &nl.level;
    let b = |x: u64| fmt_bytes(x as f64);
    let (first, last) = (b(l.first), b(l.last));
    let edge = l.transition.map(|t| format!(", transition at {}", b(t)));
    let sys = nl.sysfs_bytes.map(|s| format!(" (sysfs {})", b(s)));
    let (edge, sys) = (edge.unwrap_or_default(), sys.unwrap_or_default());
    format!("{det_name} plateau {first}..{last}{edge}{sys}")
}

pub(super) fn lmbench_vs_chase(size: u64, lm: f64, chase: f64) -> String {
    format!(
        "At {} lmbench's layout (lat_mem_rd -t: random page order, one line per page per pass) reads {} per load against {} for osmeter's chase over all lines in random order ({:+.0}%).",
        fmt_bytes(size as f64),
        fmt_ns(lm),
        fmt_ns(chase),
        (lm / chase - 1.0) * 100.0
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

/// Names no mechanism: prefetching, TLB hits and DRAM rows are not counted apart.
pub(super) fn sequential_vs_random(stride: usize, size: u64, out: &Outcome) -> String {
    let (seq, random) = (out.median("dram_sequential"), out.median("dram"));
    let head = format!(
        "At {} a sequential chase (stride {stride} B) costs {} per load against {} in random order",
        fmt_bytes(size as f64),
        fmt_ns(seq),
        fmt_ns(random),
    );
    let tail = match out.separation("dram_sequential", "dram") {
        Separation::Below => format!(
            ", {:.0}% less, beyond both 95% intervals (prefetching, TLB hits and open DRAM rows all come with address order; they are not separated here).",
            (1.0 - seq / random) * 100.0
        ),
        Separation::Overlap => ": within noise of each other (their 95% intervals overlap).".into(),
        Separation::Above => ": the sequential order is the slower one here, beyond both 95% intervals.".into(),
    };
    head + &tail
}

/// The page size is the chases' one difference: a difference beyond noise is its doing.
pub(super) fn huge_vs_base(size: u64, out: &Outcome) -> String {
    let (huge, base) = (out.median("dram_thp"), out.median("dram"));
    let head = format!(
        "Huge pages change the random latency at {} from {} to {} ({:+.0}%)",
        fmt_bytes(size as f64),
        fmt_ns(base),
        fmt_ns(huge),
        (huge / base - 1.0) * 100.0
    );
    let tail = match out.separation("dram_thp", "dram") {
        Separation::Below => ", beyond both 95% intervals: with the chase unchanged, the difference is what the page size changes: TLB misses and page walks, and how the buffer lies in physical memory (its spread over DRAM channels and banks).",
        Separation::Overlap => ": within noise of each other (their 95% intervals overlap), so no cost of TLB misses shows here.",
        Separation::Above => ": huge pages are the slower ones here, beyond both 95% intervals, so no saving of TLB misses shows.",
    };
    head + tail
}
