//! mem.bandwidth's findings and scaling check, each claim only as far as the data goes.

use super::predict::Peak;
use crate::analysis::{separation, Separation};
use crate::experiments::Outcome;
use crate::results::Check;
use crate::stats::Summary;
use crate::units::fmt_bandwidth;

/// Whether one thread's figures show reads for ownership: ordinary stores below reads and
/// non-temporal ones (which skip that read) above them, beyond the 95% intervals.
pub(crate) fn rfo_shown(r: &Summary, w: &Summary, nt: &Summary) -> bool {
    separation(nt, w) == Separation::Above && separation(w, r) == Separation::Below
}

/// Non-temporal against ordinary stores; reads for ownership named only when `rfo_shown`.
pub(super) fn nt_vs_write(r: &Summary, w: &Summary, nt: &Summary) -> String {
    let head = format!(
        "Non-temporal stores write {} against {} for ordinary stores ({:.2}x)",
        fmt_bandwidth(nt.median),
        fmt_bandwidth(w.median),
        nt.median / w.median
    );
    let tail = match (separation(nt, w), rfo_shown(r, w, nt)) {
        (Separation::Above, true) => format!(
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

/// Huge against base pages: the page size named as the cause only when every stream gains.
fn huge_vs_base(out: &mut Outcome) {
    let (mut parts, mut from, mut all_faster) = (Vec::new(), Vec::new(), true);
    for (verb, name) in [("reads", "read"), ("writes", "write"), ("copies", "copy")] {
        let (base, huge) = (format!("{name}_1t"), format!("{name}_thp_1t"));
        let (Some(b), Some(h)) = (out.get(&base), out.get(&huge)) else {
            return;
        };
        let (b, h) = (b.summary.median, h.summary.median);
        let sep = out.separation(&huge, &base);
        let mark = match sep {
            Separation::Above => "faster beyond noise",
            Separation::Overlap => "within noise",
            Separation::Below => "slower beyond noise",
        };
        all_faster &= sep == Separation::Above;
        let (bw, change) = (fmt_bandwidth(h), (h / b - 1.0) * 100.0);
        parts.push(format!("{verb} {bw} ({change:+.0}%, {mark})"));
        from.extend([base, huge]);
    }
    let cause = if all_faster {
        ": with the loops unchanged, the difference is what the page size changes: TLB misses and page walks, and how the buffer lies in physical memory (its spread over DRAM channels and banks, and the page boundaries where the prefetcher stops)"
    } else {
        " (95% intervals): no cost of the base page size is shown for every stream"
    };
    let text = format!(
        "On huge pages one thread {}, {} and {} against base pages{cause}. The headline figures (read_1t, write_1t, copy_1t) are base pages, what a program gets from malloc unless THP is 'always'.",
        parts[0], parts[1], parts[2]
    );
    let from: Vec<&str> = from.iter().map(String::as_str).collect();
    out.finding(text, &from);
}

/// The findings from the metrics (`n` threads at most; `peak` the DIMMs', or why not).
pub(super) fn conclusions(out: &mut Outcome, n: usize, peak: Peak) {
    let med = |name: &str| out.get(name).map(|m| m.summary.median);
    let (r1, w1, c1) = (med("read_1t"), med("write_1t"), med("copy_1t"));
    let scalar = (med("read_scalar_1t"), med("write_scalar_1t"));
    huge_vs_base(out);
    if let (Some(r), Some(w), Some(c)) = (r1, w1, c1) {
        let [r, w, c] = [r, w, c].map(fmt_bandwidth);
        let text =
            format!("One thread reads {r}, writes {w} and copies {c} (bytes copied per second).");
        out.finding(text, &["read_1t", "write_1t", "copy_1t"]);
    }
    if let (Some(r), Some(w), (Some(rs), Some(ws))) = (r1, w1, scalar) {
        let (rate_r, rate_w) = (fmt_bandwidth(rs), fmt_bandwidth(ws));
        let text = format!(
            "Loops of single 8-byte volatile accesses (as in sysbench memory) read {rate_r} and write {rate_w}: {:.2}x and {:.2}x the vectorised loops.",
            rs / r,
            ws / w
        );
        let from = ["read_scalar_1t", "write_scalar_1t", "read_1t", "write_1t"];
        out.finding(text, &from);
    }
    let s = |name: &str| out.get(name).map(|m| m.summary.clone());
    if let (Some(r), Some(w), Some(nt)) = (s("read_1t"), s("write_1t"), s("write_nt_1t")) {
        let from = ["write_nt_1t", "write_1t", "read_1t"];
        out.finding(nt_vs_write(&r, &w, &nt), &from);
    }
    scaling(out, n, r1);
    against_peak(out, peak);
}

/// The N-thread read against one thread's, as a finding and the scaling check.
fn scaling(out: &mut Outcome, n: usize, r1: Option<f64>) {
    let rn = format!("read_{n}t");
    let rall = out.get(&rn).filter(|_| n > 1).map(|m| m.summary.median);
    let (Some(r), Some(rall)) = (r1, rall) else {
        return;
    };
    let (all, one) = (fmt_bandwidth(rall), fmt_bandwidth(r));
    let text = format!(
        "{n} threads read {all} together, {:.2}x one thread.",
        rall / r
    );
    out.finding(text, &["read_1t", rn.as_str()]);
    let detail = format!("{n} threads {all}, 1 thread {one}");
    let name = "more threads do not read slower";
    out.check(Check::sanity(name, rall >= 0.8 * r, detail));
}

/// The best read against the DIMMs' theoretical peak, or why the peak is unknown.
fn against_peak(out: &mut Outcome, peak: Peak) {
    let (peak, src) = match peak {
        Ok(p) => p,
        Err(why) => return out.notes.push(format!("theoretical peak unknown: {why}")),
    };
    let reads = out.metrics.iter().filter(|m| m.name.starts_with("read_"));
    let best = reads.map(|m| m.summary.median).fold(0.0, f64::max);
    let (share, peak) = (best / peak * 100.0, fmt_bandwidth(peak));
    let text =
        format!("The best read bandwidth is {share:.0}% of the theoretical peak {peak} ({src}).");
    out.finding(text, &["read_1t"]);
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

    /// The page size is named as the cause only when every stream is faster on huge pages
    /// beyond the intervals; one stream within noise closes the gate.
    #[test]
    fn the_page_size_is_named_only_when_every_stream_gains() {
        let with = |write_thp: f64| {
            let mut o = Outcome::default();
            for (name, v) in [
                ("read_1t", 10.0),
                ("write_1t", 8.0),
                ("copy_1t", 6.0),
                ("read_thp_1t", 12.0),
                ("write_thp_1t", write_thp),
                ("copy_thp_1t", 7.0),
            ] {
                let spread: Vec<f64> = (0..9).map(|i| v * (1.0 + 0.001 * i as f64)).collect();
                o.metric(name, "bytes/s", "", spread);
            }
            huge_vs_base(&mut o);
            o.findings.pop().map(|f| f.text).unwrap_or_default()
        };
        let all = with(9.6);
        assert!(all.contains("what the page size changes"), "{all}");
        assert!(
            all.contains("faster beyond noise") && !all.contains("slower"),
            "{all}"
        );
        let one_flat = with(8.0);
        assert!(
            !one_flat.contains("page size changes") && one_flat.contains("no cost"),
            "{one_flat}"
        );
        let one_slower = with(7.0);
        assert!(
            one_slower.contains("slower beyond noise") && !one_slower.contains("page size changes"),
            "{one_slower}"
        );
    }
}
