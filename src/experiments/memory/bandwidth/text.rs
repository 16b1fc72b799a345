//! mem.bandwidth's conclusions: findings and the scaling check drawn from its metrics,
//! each claim said only as far as the data supports it.

use crate::analysis::{separation, Separation};
use crate::experiments::Outcome;
use crate::results::Check;
use crate::stats::Summary;
use crate::units::fmt_bandwidth;

fn summary(out: &Outcome, name: &str) -> Option<Summary> {
    out.get(name).map(|m| m.summary.clone())
}

/// Non-temporal against ordinary stores. Reads for ownership are named as the cause only
/// when the data shows them: ordinary stores write below the read bandwidth and
/// non-temporal stores (which skip that read) above the ordinary ones, both beyond the
/// 95% intervals.
pub(super) fn nt_vs_write(r: &Summary, w: &Summary, nt: &Summary) -> String {
    let head = format!(
        "Non-temporal stores write {} against {} for ordinary stores ({:.2}x)",
        fmt_bandwidth(nt.median),
        fmt_bandwidth(w.median),
        nt.median / w.median
    );
    let tail = match (separation(nt, w), separation(w, r)) {
        (Separation::Above, Separation::Below) => format!(
            ": ordinary stores first read each line for ownership (they write {:.2}x the read bandwidth, and skipping that read is faster, both beyond the 95% intervals).",
            w.median / r.median
        ),
        (Separation::Above, _) => format!(
            "; ordinary stores write {:.2}x the read bandwidth, not below it beyond the 95% intervals, so the gap is not shown to be reads for ownership.",
            w.median / r.median
        ),
        (Separation::Overlap, _) => {
            "; the two are within noise of each other (their 95% intervals overlap): no cost of reads for ownership shows here.".to_string()
        }
        (Separation::Below, _) => {
            "; the non-temporal stores are the slower ones here, beyond both 95% intervals: no cost of reads for ownership shows.".to_string()
        }
    };
    head + &tail
}

/// Huge pages against base pages for one thread's read, write and copy. The page size is
/// the one difference between the pairs, so TLB misses and page walks are named only when
/// every pair is apart beyond the 95% intervals with huge pages faster; otherwise the text
/// says which pairs differ beyond noise and names no cause.
fn huge_vs_base(out: &Outcome) -> Option<String> {
    let mut parts = Vec::new();
    let mut seps = Vec::new();
    for (verb, name) in [("reads", "read"), ("writes", "write"), ("copies", "copy")] {
        let base = summary(out, &format!("{name}_1t"))?;
        let huge = summary(out, &format!("{name}_thp_1t"))?;
        let sep = separation(&huge, &base);
        let mark = match sep {
            Separation::Above => "faster beyond noise",
            Separation::Overlap => "within noise",
            Separation::Below => "slower beyond noise",
        };
        parts.push(format!(
            "{verb} {} ({:+.0}%, {mark})",
            fmt_bandwidth(huge.median),
            (huge.median / base.median - 1.0) * 100.0
        ));
        seps.push(sep);
    }
    let cause = if seps.iter().all(|&s| s == Separation::Above) {
        ": with the loops unchanged, the difference is what the page size changes, TLB misses and page walks"
    } else {
        " (95% intervals): no cost of TLB misses is shown for every stream"
    };
    Some(format!(
        "On huge pages one thread {}, {} and {} against base pages{cause}. The headline figures (read_1t, write_1t, copy_1t) are base pages, what a program gets from malloc unless THP is 'always'.",
        parts[0], parts[1], parts[2]
    ))
}

/// The findings of a run from its metrics (`n` threads at most; `peak` the DIMMs'
/// theoretical bandwidth with its source, or why it is unknown).
pub(super) fn conclusions(out: &mut Outcome, n: usize, peak: Result<(f64, String), String>) {
    let medians: Vec<(String, f64)> = out
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.summary.median))
        .collect();
    let med = |name: &str| medians.iter().find(|m| m.0 == name).map(|m| m.1);
    let (r1, w1, c1) = (med("read_1t"), med("write_1t"), med("copy_1t"));
    if let Some(t) = huge_vs_base(out) {
        out.finding(
            t,
            &[
                "read_1t",
                "read_thp_1t",
                "write_1t",
                "write_thp_1t",
                "copy_1t",
                "copy_thp_1t",
            ],
        );
    }
    if let (Some(r), Some(w), Some(c)) = (r1, w1, c1) {
        out.finding(
            format!(
                "One thread reads {}, writes {} and copies {} (bytes copied per second).",
                fmt_bandwidth(r),
                fmt_bandwidth(w),
                fmt_bandwidth(c)
            ),
            &["read_1t", "write_1t", "copy_1t"],
        );
    }
    if let (Some(r), Some(w), Some(rs), Some(ws)) =
        (r1, w1, med("read_scalar_1t"), med("write_scalar_1t"))
    {
        out.finding(
                format!(
                    "Loops of single 8-byte volatile accesses (as in sysbench memory) read {} and write {}: {:.2}x and {:.2}x the vectorised loops.",
                    fmt_bandwidth(rs),
                    fmt_bandwidth(ws),
                    rs / r,
                    ws / w
                ),
                &["read_scalar_1t", "write_scalar_1t", "read_1t", "write_1t"],
            );
    }
    if let (Some(r), Some(w), Some(nt)) = (
        summary(out, "read_1t"),
        summary(out, "write_1t"),
        summary(out, "write_nt_1t"),
    ) {
        out.finding(
            nt_vs_write(&r, &w, &nt),
            &["write_nt_1t", "write_1t", "read_1t"],
        );
    }
    scaling(out, n, r1);
    against_peak(out, peak);
}

/// The N-thread read against one thread's, as a finding and the scaling check.
fn scaling(out: &mut Outcome, n: usize, r1: Option<f64>) {
    if n <= 1 {
        return;
    }
    let rn = format!("read_{n}t");
    let rall = out.get(&rn).map(|m| m.summary.median);
    if let (Some(r), Some(rall)) = (r1, rall) {
        out.finding(
            format!(
                "{n} threads read {} together, {:.2}x one thread.",
                fmt_bandwidth(rall),
                rall / r
            ),
            &["read_1t", rn.as_str()],
        );
        out.check(Check::sanity(
            "more threads do not read slower",
            rall >= 0.8 * r,
            format!(
                "{n} threads {}, 1 thread {}",
                fmt_bandwidth(rall),
                fmt_bandwidth(r)
            ),
        ));
    }
}

/// The best read against the DIMMs' theoretical peak, or why the peak is unknown.
fn against_peak(out: &mut Outcome, peak: Result<(f64, String), String>) {
    match peak {
        Ok((peak, src)) => {
            let best = out
                .metrics
                .iter()
                .filter(|m| m.name.starts_with("read_"))
                .map(|m| m.summary.median)
                .fold(0.0, f64::max);
            out.finding(
                format!(
                    "The best read bandwidth is {:.0}% of the theoretical peak {} ({src}).",
                    best / peak * 100.0,
                    fmt_bandwidth(peak)
                ),
                &["read_1t"],
            );
        }
        Err(why) => out.notes.push(format!("theoretical peak unknown: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(lo: f64, hi: f64) -> Summary {
        let mut x = Summary::of(&[lo, hi]).unwrap();
        x.ci95 = [lo, hi];
        x
    }

    #[test]
    fn reads_for_ownership_only_with_the_evidence() {
        let read = s(11.0e9, 12.0e9);
        // Writes below reads, non-temporal above writes: the claim holds.
        let t = nt_vs_write(&read, &s(8.0e9, 9.0e9), &s(13.0e9, 14.0e9));
        assert!(t.contains("read each line for ownership"), "{t}");
        // Non-temporal within noise of ordinary stores: no claim.
        let t = nt_vs_write(&read, &s(8.0e9, 9.0e9), &s(8.5e9, 9.5e9));
        assert!(
            t.contains("within noise") && !t.contains("read each line"),
            "{t}"
        );
        // Non-temporal faster, but ordinary writes not below reads: no claim.
        let t = nt_vs_write(&read, &s(11.5e9, 12.5e9), &s(13.0e9, 14.0e9));
        assert!(
            t.contains("not shown") && !t.contains("read each line"),
            "{t}"
        );
        let t = nt_vs_write(&read, &s(8.0e9, 9.0e9), &s(5.0e9, 6.0e9));
        assert!(
            t.contains("slower ones") && !t.contains("read each line"),
            "{t}"
        );
    }
}
