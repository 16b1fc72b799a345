//! The switch experiments' predictions.

use super::*;
use crate::experiments::predict::Predictions;

/// From figures measured earlier only (docs/methods/cpu.thread-switch.md): the pipe work,
/// and for the process experiment the thread experiment's figures.
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
            "4 x write_devnull_0: two writes and two reads, each a kernel entry with an fd lookup \
             (the pipe's lock, one-byte copy and wake-up check are not in the model)",
        )
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
    match thread(&p, "pipe_round_trip_cross_cpu", "thread_cross_cpu") {
        Some(rt) => p.equal(
            "pipe_round_trip_cross_cpu",
            &rt,
            "cpu.thread-switch's cross-CPU round trip: the same pipe work and the same two \
             wake-ups on the other CPU, where each task keeps its CPU and needs no switch of \
             address space per hop",
        ),
        None => p.add("pipe_round_trip_cross_cpu", bound("a cross-CPU wake-up")),
    }
    p.done()
}
