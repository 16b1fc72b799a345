//! The switch experiments' predictions.

use super::*;

/// Shared predictions, from figures measured earlier only: the pipe work is four kernel
/// entries with an fd lookup (cpu.syscall's write_devnull_0). No published figure prices a
/// switch or a cross-CPU wake-up per part, so the thread experiment's round trips are
/// predicted by their pipe work alone, a lower bound. The process experiment runs after it
/// and composes its measured figures: a process switch does a thread switch's work and
/// changes address spaces too (no figure for that: lower bounds), and a cross-CPU round
/// trip wakes a task on the other CPU as the thread one does.
pub(super) fn predict_switch(kind: Kind, ctx: &Context) -> Vec<(String, Prediction)> {
    let no_switch = "the parts table names no published context-switch cost for any part, and no \
                     experiment before it measures the scheduler's path";
    let thread = |m: &str| {
        (kind == Kind::Process)
            .then(|| ctx.earlier_median(Kind::Thread.id(), m))
            .flatten()
            .filter(|v| *v > 0.0)
    };
    let switch = match (kind, thread("switch")) {
        (Kind::Process, Some(t)) => Prediction::new(
            t,
            "cpu.thread-switch's switch, a lower bound: a switch between processes does that \
             work and changes address spaces too, which has no measured or published cost",
        )
        .lower_bound()
        .measured(
            "thread_switch",
            t,
            "ns",
            "measured: cpu.thread-switch switch",
        ),
        (Kind::Process, None) => Prediction::withheld(
            "cpu.thread-switch switch was not measured in this run (or not positive)",
        ),
        (Kind::Thread, _) => Prediction::withheld(no_switch),
    };
    let Some(fdw) = ctx.earlier_median("cpu.syscall", "write_devnull_0") else {
        return vec![("switch".into(), switch)];
    };
    let pipe = 4.0 * fdw;
    let pipe_pred = Prediction::new(
        pipe,
        "4 x write_devnull_0: two writes and two reads, each a kernel entry with an fd lookup \
         (the pipe's lock, one-byte copy and wake-up check are not in the model)",
    )
    .measured(
        "write_devnull_0",
        fdw,
        "ns",
        "measured: cpu.syscall write_devnull_0",
    );
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
    let same = match thread("pipe_round_trip_same_cpu") {
        Some(rt) => Prediction::new(
            rt,
            "cpu.thread-switch's same-CPU round trip, a lower bound: the same pipe work and two \
             switches, without the two address-space changes (no measured or published cost)",
        )
        .lower_bound()
        .measured(
            "thread_same_cpu",
            rt,
            "ns",
            "measured: cpu.thread-switch pipe_round_trip_same_cpu",
        ),
        None => bound("the two switches"),
    };
    let cross = match thread("pipe_round_trip_cross_cpu") {
        Some(rt) => Prediction::new(
            rt,
            "cpu.thread-switch's cross-CPU round trip: the same pipe work and the same two \
             wake-ups on the other CPU, where each task keeps its CPU and needs no switch of \
             address space per hop",
        )
        .measured(
            "thread_cross_cpu",
            rt,
            "ns",
            "measured: cpu.thread-switch pipe_round_trip_cross_cpu",
        ),
        None => bound("a cross-CPU wake-up"),
    };
    vec![
        ("pipe_round_trip_same_cpu".into(), same),
        ("pipe_cost".into(), pipe_pred),
        ("switch".into(), switch),
        ("pipe_round_trip_cross_cpu".into(), cross),
    ]
}
