//! The switch experiments' predictions.

use super::*;
use crate::experiments::predict::Predictions;

/// From figures measured earlier only (docs/methods/cpu.thread-switch.md).
pub(super) fn predict_switch(kind: Kind, ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    // The thread experiment's figure `m` (positive), for the process experiment only.
    let thread = |p: &Predictions, m: &str, name: &str| {
        let i = p.earlier(Kind::Thread.id(), &[m]).positive().named(name);
        (kind == Kind::Process && i.value().is_some()).then_some(i)
    };
    match thread(&p, "switch", "thread_switch") {
        Some(t) => p.at_least(
            "switch",
            &t,
            "cpu.thread-switch's switch, a lower bound: a switch between processes does that \
             work and changes address spaces too, which has no measured or published cost",
        ),
        None if kind == Kind::Process => p.withhold(
            &["switch"],
            "cpu.thread-switch switch was not measured in this run (or not positive)",
        ),
        None => p.withhold(
            &["switch"],
            "the parts table names no published context-switch cost for any part, and no \
             experiment before it measures the scheduler's path",
        ),
    }
    let fdw = p.earlier("cpu.syscall", &["write_devnull_0"]);
    let Some(pipe) = fdw.value().map(|v| 4.0 * v) else {
        return p.done();
    };
    p.state("pipe_cost", &[&fdw], |v| {
        Prediction::new(
            4.0 * v[0],
            "4 x write_devnull_0, a lower bound: two writes and two reads, each a kernel entry \
             with an fd lookup, and the pipe's lock, one-byte copy and wake-up check besides",
        )
        .lower_bound()
    });
    let bound = |what: &str| {
        Prediction::new(
            pipe,
            format!(
                "pipe_cost alone, a lower bound: {what} has no published cost in the parts table"
            ),
        )
        .lower_bound()
        .prediction("pipe_cost", pipe, "ns", "prediction: pipe_cost above")
    };
    match thread(&p, "pipe_round_trip_same_cpu", "thread_same_cpu") {
        Some(rt) => p.at_least(
            "pipe_round_trip_same_cpu",
            &rt,
            "cpu.thread-switch's same-CPU round trip, a lower bound: the same pipe work and two \
             switches, without the two address-space changes (no measured or published cost)",
        ),
        None => p.add("pipe_round_trip_same_cpu", bound("the two switches")),
    }
    // One per cross-CPU figure the run measures, suffixed ones too, as `run_switch` plans them.
    let ctx = p.ctx();
    let plans = ctx
        .machine
        .topology
        .cross_cpu_plans(ctx.cpu, &ctx.machine.cpu.allowed_cpus);
    for plan in plans {
        let name = format!("pipe_round_trip_cross_cpu{}", plan.suffix);
        match thread(&p, &name, "thread_cross_cpu") {
            Some(rt) => p.equal(
                &name,
                &rt,
                "cpu.thread-switch's round trip with the partner on the same CPU as here: the same \
                 pipe work and the same two cross-CPU wake-ups; each task keeps its CPU, so no hop \
                 switches between the two address spaces",
            ),
            None => p.add(&name, bound("a cross-CPU wake-up")),
        }
    }
    p.done()
}
