//! The switch experiments' premises and sanity checks.

use super::*;
use crate::experiments::kit::place::Place;

/// Every look found both tasks where they were pinned, and the pinning was hard.
pub(crate) fn cpus_check(
    name: &str,
    main: &Place,
    p: &Place,
    pinning: &crate::platform::Pinning,
) -> Check {
    if let Some(why) = crate::platform::pinning_premise_failure(pinning) {
        return Check::premise(name, false, why);
    }
    let passed = main.off() == 0 && p.off() == 0 && p.looks > 0 && main.looks > 0;
    let side = |x: &Place| format!("{} of {} samples off CPU {}", x.off(), x.looks, x.cpu);
    let mut detail = format!("measuring task: {}; partner: {}", side(main), side(p));
    if let Some(c) = p.last_away {
        detail.push_str(&format!(" (seen on CPU {c})"));
    }
    Check::premise(name, passed, detail)
}

pub(super) const POSITIVE: &str = "the switch figure is positive";

/// A switch costs time: below zero beyond noise the subtraction's premise fails (the
/// pipe work alone is not that of the round trip); within noise, a sanity check.
pub(super) fn switch_positive(sw: &SwitchFigure) -> Check {
    let detail = format!(
        "switch = (round trip - pipe cost) / 2 = {}, the pipe cost's included)",
        sw.text().trim_end_matches(')')
    );
    if sw.interval[1] < 0.0 || !sw.median.is_finite() {
        Check::premise(POSITIVE, false, detail)
    } else {
        Check::sanity(POSITIVE, sw.median > 0.0, detail)
    }
}

/// The thread switch of this run, with its interval widened by its own pipe cost's.
pub(super) fn thread_switch(ctx: &Context) -> Option<SwitchFigure> {
    let t = ctx.earlier_metric("cpu.thread-switch", "switch")?;
    let pipe = ctx.earlier_metric("cpu.thread-switch", "pipe_cost");
    Some(SwitchFigure {
        median: t.summary.median,
        interval: t.interval(|n| pipe.filter(|_| n == "pipe_cost")),
    })
}

/// A process switch does all a thread switch does and more: not cheaper beyond noise.
pub(super) fn address_space_check(p: &SwitchFigure, t: &SwitchFigure) -> Check {
    let below = crate::analysis::separation_of(p.interval, t.interval)
        == crate::analysis::Separation::Below;
    let detail = format!(
        "process switch {}, thread switch {}, intervals including the pipe costs'",
        p.text(),
        t.text().replace("95% interval ", "")
    );
    Check::premise(
        "a process switch costs no less than a thread switch, within noise",
        !below,
        detail,
    )
}
