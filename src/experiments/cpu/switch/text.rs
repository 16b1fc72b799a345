//! The switch experiments' findings.

use super::*;

/// The cross-CPU round trip against the same-CPU one.
pub(super) fn cross_finding(name: &str, class: &str, out: &mut Outcome) {
    let (Some(c), Some(s)) = (out.get(name), out.get("pipe_round_trip_same_cpu")) else {
        return;
    };
    let (cm, sm) = (c.summary.median, s.summary.median);
    let clause = match out.separation(name, "pipe_round_trip_same_cpu") {
        crate::analysis::Separation::Above => {
            "dearer than two switches on one CPU, beyond both 95% intervals"
        }
        crate::analysis::Separation::Below => {
            "cheaper than two switches on one CPU, beyond both 95% intervals"
        }
        crate::analysis::Separation::Overlap => {
            "within noise of two switches on one CPU (the 95% intervals overlap)"
        }
    };
    let (c, k, s) = (fmt_ns(cm), cm / sm, fmt_ns(sm));
    let text = format!(
        "With the partner on another CPU ({class}) a round trip takes {c} ({k:.2}x the same-CPU {s}): the two tasks do not share a CPU, and each hop wakes a task on the other CPU, which switches to it (from idle, when nothing else runs there); {clause}.",
    );
    out.finding(text, &[name, "pipe_round_trip_same_cpu"]);
}

pub(super) fn kind_finding(
    kind: Kind,
    sw: &SwitchFigure,
    thread: Option<SwitchFigure>,
    out: &mut Outcome,
) {
    match kind {
        Kind::Thread => out.finding(
            format!(
                "A switch between two threads on one CPU costs {}, the pipe cost's noise included); a same-CPU round trip is {} of which {} is pipe work.",
                sw.text().trim_end_matches(')'),
                fmt_ns(out.median("pipe_round_trip_same_cpu")),
                fmt_ns(out.median("pipe_cost"))
            ),
            &["switch", "pipe_round_trip_same_cpu", "pipe_cost"],
        ),
        Kind::Process => {
            let Some(t) = thread else {
                return;
            };
            // Causal wording only with the intervals apart (below fails a premise).
            let clause = match crate::analysis::separation_of(sw.interval, t.interval) {
                crate::analysis::Separation::Above => {
                    ", beyond both 95% intervals (the pipe costs' noise included): the price of changing address spaces"
                }
                _ => {
                    " (within noise of each other, their 95% intervals overlap: changing address spaces adds nothing measurable here)"
                }
            };
            let (p, th, k) = (fmt_ns(sw.median), fmt_ns(t.median), sw.median / t.median);
            out.finding(
                format!("A switch between processes costs {p} against {th} between threads: {k:.2}x{clause}."),
                &["switch", "cpu.thread-switch/switch"],
            );
        }
    }
}
