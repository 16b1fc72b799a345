//! cpu.thread-switch and cpu.process-switch: one context switch, from a pipe ping-pong
//! between two tasks pinned to one CPU, less the pipe cost (lmbench lat_ctx's method).

use super::cpus_check;
use crate::analysis::{separation_of, Separation};
use crate::experiments::predict::Predictions;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Spec};
use crate::harness::Harness;
use crate::machine::CrossPlan;
use crate::platform;
use crate::results::{Check, Prediction};
use crate::units::{fmt_bytes, fmt_ns};
use anyhow::{anyhow, Context as _};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

mod partner;
use partner::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Thread,
    Process,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Thread => "threads",
            Kind::Process => "processes",
        }
    }
}

/// Cache-line stride for touching a working set (Apple silicon's hw.cachelinesize is 128).
const LINE: usize = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    128
} else {
    64
};
/// The partner samples its CPU every this many rounds (cheap: sched_getcpu is a vDSO call).
const SAMPLE_EVERY: u64 = 64;
/// Round trips before measuring, or for at most this long (a cross-CPU one can take 100 us).
const WARM_ROUNDS: usize = 200;
const WARM_LIMIT: Duration = Duration::from_millis(10);
const SERIES_SIZES: PerProfile<&[usize]> = PerProfile::new(
    &[],
    &[0, 64 << 10],
    &[0, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    &[0, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
);

/// A switch figure with the 95% interval of its median, widened by the pipe cost's.
#[derive(Debug, Clone, Copy)]
struct SwitchFigure {
    median: f64,
    interval: [f64; 2],
}

impl SwitchFigure {
    /// "1.50 us (95% interval 1.40 us to 1.60 us)".
    fn text(&self) -> String {
        let [m, lo, hi] = [self.median, self.interval[0], self.interval[1]].map(fmt_ns);
        format!("{m} (95% interval {lo} to {hi})")
    }
}

/// Adds `switch` = (`round_trip` - median `pipe_cost`) / 2 after `pipe_cost`, interval widened.
fn switch_metric(out: &mut Outcome, round_trip: &str, pipe_cost: &str) -> SwitchFigure {
    let d = out.difference(
        "switch",
        "one context switch: (round trip - median pipe cost) / 2, per trial; its interval includes the pipe cost's",
        round_trip,
        pipe_cost,
        0.5,
    );
    // Shown beside the pipe cost it subtracts.
    if let Some(at) = d.and(out.metrics.iter().position(|x| x.name == pipe_cost)) {
        let m = out.metrics.pop().expect("just added");
        out.metrics.insert(at + 1, m);
    }
    let (median, interval) = d.unwrap_or((f64::NAN, [f64::NAN; 2]));
    SwitchFigure { median, interval }
}

const POSITIVE: &str = "the switch figure is positive";

/// A switch costs time: below zero beyond noise the subtraction's premise fails (the
/// pipe work alone is not that of the round trip); within noise, a sanity check.
fn switch_positive(sw: &SwitchFigure) -> Check {
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
fn thread_switch(ctx: &Context) -> Option<SwitchFigure> {
    let t = ctx.earlier.metric(THREAD_SPEC.id, "switch")?;
    let pipe = ctx.earlier.metric(THREAD_SPEC.id, "pipe_cost");
    Some(SwitchFigure {
        median: t.summary.median,
        interval: t.interval(|n| pipe.filter(|_| n == "pipe_cost")),
    })
}

/// A process switch does all a thread switch does and more: not cheaper beyond noise.
fn address_space_check(p: &SwitchFigure, t: &SwitchFigure) -> Check {
    let below = separation_of(p.interval, t.interval) == Separation::Below;
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

/// The cross-CPU round trips the run measures, one per partner class.
fn cross_plans(ctx: &Context) -> Vec<CrossPlan> {
    let allowed = &ctx.machine.cpu.allowed_cpus;
    ctx.machine.topology.cross_cpu_plans(ctx.cpu, allowed)
}

fn cross_name(plan: &CrossPlan) -> String {
    format!("pipe_round_trip_cross_cpu{}", plan.suffix)
}

/// One cross-CPU round trip, the partner on the plan's CPU: the metric's name and class.
fn cross_cpu(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    plan: &CrossPlan,
    out: &mut Outcome,
) -> anyhow::Result<(String, String)> {
    let (o, class, name) = (plan.cpu, plan.class_name(), cross_name(plan));
    (ctx.progress)(&format!("cross-CPU round trip ({class})"));
    let (noun, cpu) = (kind.noun(), ctx.cpu);
    let check = format!("the {noun} ran on different CPUs ({cpu} and {o}, {class})");
    let cross = round_trips(ctx, h, kind, (o, 0), &check, out)?;
    out.measured(
        &name,
        &format!(
            "raw round trip with the partner pinned to another CPU ({o}, {class}): the tasks do not share a CPU, each hop wakes a task on the other CPU"
        ),
        &cross,
    )
    // A wake-up waits for the other CPU (an IPI, a vCPU the host must run).
    .shares(crate::results::Bottleneck::None);
    Ok((name, class.to_string()))
}

fn cross_finding(name: &str, class: &str, out: &mut Outcome) {
    let (Some(c), Some(s)) = (out.get(name), out.get("pipe_round_trip_same_cpu")) else {
        return;
    };
    let (cm, sm) = (c.summary.median, s.summary.median);
    let clause = match out.separation(name, "pipe_round_trip_same_cpu") {
        Separation::Above => "dearer than two switches on one CPU, beyond both 95% intervals",
        Separation::Below => "cheaper than two switches on one CPU, beyond both 95% intervals",
        Separation::Overlap => {
            "within noise of two switches on one CPU (the 95% intervals overlap)"
        }
    };
    let (c, k, s) = (fmt_ns(cm), cm / sm, fmt_ns(sm));
    let text = format!(
        "With the partner on another CPU ({class}) a round trip takes {c} ({k:.2}x the same-CPU {s}): the two tasks do not share a CPU, and each hop wakes a task on the other CPU, which switches to it (from idle, when nothing else runs there); {clause}.",
    );
    out.finding(text, &[name, "pipe_round_trip_same_cpu"]);
}

fn kind_finding(kind: Kind, sw: &SwitchFigure, thread: Option<SwitchFigure>, out: &mut Outcome) {
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
            let clause = match separation_of(sw.interval, t.interval) {
                Separation::Above => {
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

const THREAD_SPEC: Spec = Spec {
    id: "cpu.thread-switch",
    title: "Context switch between threads",
    description: "two threads pinned to one CPU ping-pong a byte over two pipes; switch = (round trip - pipe cost) / 2",
    method: crate::method!("cpu.thread-switch"),
    budget: Some(PerProfile::new(ms(250), ms(1000), ms(6000), ms(15000))),
    // The scheduler's path at the core's clock (the cross-CPU round trip declares `None`).
    ..Spec::CORE_LOOP
};

const PROCESS_SPEC: Spec = Spec {
    id: "cpu.process-switch",
    title: "Context switch between processes",
    description: "as cpu.thread-switch with a forked partner process, plus switch cost vs working set (lat_ctx -s)",
    method: crate::method!("cpu.process-switch"),
    budget: Some(PerProfile::new(ms(300), ms(1200), ms(12000), ms(30000))),
    ..THREAD_SPEC
};

impl Experiment for Kind {
    fn spec(&self) -> &Spec {
        match self {
            Kind::Thread => &THREAD_SPEC,
            Kind::Process => &PROCESS_SPEC,
        }
    }
    /// From figures measured earlier only (docs/methods/cpu.thread-switch.md).
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let kind = *self;
        let mut p = Predictions::new(ctx);
        // The thread experiment's figure `m` (positive), for the process experiment only.
        let thread = |p: &Predictions, m: &str, name: &str| {
            let i = p.earlier(THREAD_SPEC.id, &[m]).positive().named(name);
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
        for plan in cross_plans(p.ctx()) {
            let name = cross_name(&plan);
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
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let kind = *self;
        let mut out = Outcome::default();
        let plans = cross_plans(ctx);
        let sizes = match kind {
            Kind::Process => SERIES_SIZES.get(ctx.profile),
            Kind::Thread => &[],
        };
        // Nonzero series points need a round trip and an overhead each.
        let extra = sizes.iter().filter(|&&w| w > 0).count() * 2;
        let h = super::long_trials(ctx, 2 + plans.len() + extra, 5);
        (ctx.progress)("same-CPU round trip");
        let check = format!("both {} ran on CPU {}", kind.noun(), ctx.cpu);
        let same = round_trips(ctx, &h, kind, (ctx.cpu, 0), &check, &mut out)?;
        (ctx.progress)("pipe cost");
        let pipe = pipe_cost(&h, 0)?;
        out.measured(
            "pipe_round_trip_same_cpu",
            "raw round trip of one byte over two pipes, both tasks pinned to one CPU (two switches)",
            &same,
        );
        out.measured(
            "pipe_cost",
            "one task writing and reading its own two pipes, per round-trip equivalent",
            &pipe,
        );
        let cross: Vec<_> = (plans.iter())
            .map(|plan| cross_cpu(kind, ctx, &h, plan, &mut out))
            .collect::<anyhow::Result<_>>()?;
        if plans.is_empty() {
            out.notes.push(
                "pipe_round_trip_cross_cpu: skipped, this process may use only one CPU".into(),
            );
        }
        let series = (!sizes.is_empty())
            .then(|| working_set_series(kind, ctx, &h, sizes, &mut out))
            .transpose()?;
        out.pool(ctx);
        let sw = switch_metric(&mut out, "pipe_round_trip_same_cpu", "pipe_cost");
        out.check(switch_positive(&sw));
        let thread = thread_switch(ctx).filter(|_| kind == Kind::Process);
        if let Some(t) = &thread {
            out.check(address_space_check(&sw, t));
        }
        // A figure that breaks a physical relation states no finding; the check says why.
        let broken = out
            .checks
            .iter()
            .any(|c| !c.passed && (c.premise || c.name == POSITIVE));
        if broken {
            return Ok(out);
        }
        for (name, class) in &cross {
            cross_finding(name, class, &mut out);
        }
        if let Some(s) = &series {
            series_finding(s, ctx, &mut out);
        }
        kind_finding(kind, &sw, thread, &mut out);
        Ok(out)
    }
}

/// One point of the working-set series: W bytes, and this run's switch figure at W.
type WsPoint = (f64, SwitchFigure);

/// Switch cost vs working set (lmbench lat_ctx -s), this run's alone (not metrics).
fn working_set_series(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    sizes: &[usize],
    out: &mut Outcome,
) -> anyhow::Result<Vec<WsPoint>> {
    let mut pts = Vec::new();
    for &w in sizes {
        if w == 0 {
            let raw = |name| out.get(name).map_or(&[][..], |m| &m.raw[..]);
            let (rt, pipe) = (raw("pipe_round_trip_same_cpu"), raw("pipe_cost"));
            pts.push(ws_point(0.0, rt, pipe));
            continue;
        }
        (ctx.progress)(&format!("working set {}", fmt_bytes(w as f64)));
        let (noun, cpu, ws) = (kind.noun(), ctx.cpu, fmt_bytes(w as f64));
        let check = format!("both {noun} ran on CPU {cpu} (working set {ws})");
        let t = round_trips(ctx, h, kind, (cpu, w), &check, out)?;
        let ovh = pipe_cost(h, w)?;
        pts.push(ws_point(w as f64, &t.per_op_ns, &ovh.per_op_ns));
    }
    let points = pts.iter().map(|(w, f)| [*w, f.median]).collect();
    out.plot("switch cost vs working set", "bytes", "ns", points);
    Ok(pts)
}

/// The switch figure at `bytes` from this run's round trips and overheads alone.
fn ws_point(bytes: f64, rt: &[f64], ovh: &[f64]) -> WsPoint {
    let mut o = Outcome::default();
    o.metric("round_trip", "ns", "", rt.to_vec());
    o.metric("overhead", "ns", "", ovh.to_vec());
    (bytes, switch_metric(&mut o, "round_trip", "overhead"))
}

/// The series' largest working set against its empty switch; "more" only beyond both
/// intervals, and no cause claimed (the ping-pong touches 2W, the overhead W).
fn series_finding(pts: &[WsPoint], ctx: &Context, out: &mut Outcome) {
    let (Some(&(w0, first)), Some(&(w, last))) = (pts.first(), pts.last()) else {
        return;
    };
    if w <= 0.0 || w0 != 0.0 {
        return;
    }
    let (k, of) = (ctx.repetition.index + 1, ctx.repetition.of);
    let which = match of {
        1 => "W".to_string(),
        _ => format!("In run {k} of {of} (the series shown), w"),
    };
    let clause = match separation_of(last.interval, first.interval) {
        Separation::Above => format!(
            "{} more per switch beyond both 95% intervals; the two tasks together touch twice what the subtracted overhead touches ({}); whether the rest is cache misses is not counted here",
            fmt_ns(last.median - first.median),
            fmt_bytes(2.0 * w)
        ),
        Separation::Overlap => {
            "within noise of each other (the 95% intervals overlap)".to_string()
        }
        Separation::Below => {
            "less beyond both 95% intervals, which touching more memory should not give: treat the series with care".to_string()
        }
    };
    let (ws, at, none) = (fmt_bytes(w), fmt_ns(last.median), fmt_ns(first.median));
    let k = last.median / first.median;
    out.finding(
        format!("{which}ith {ws} of private data per process a switch costs {at} against {none} with none ({k:.2}x): {clause}."),
        &["switch"],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reports_the_partners_rounds() {
        let clock = crate::clock::CoarseClock::new(1e9);
        let cpu = crate::platform::current_cpu().unwrap_or(0);
        for kind in [Kind::Thread, Kind::Process] {
            let mut pp = PingPong::start(kind, &clock, cpu, 4096).unwrap();
            for _ in 0..100 {
                pp.round_trip().unwrap();
            }
            let r = pp.finish().unwrap();
            assert_eq!(r.count, 100, "{kind:?}");
            assert!(r.place.looks >= 3, "{kind:?}: {r:?}");
        }
    }

    #[test]
    fn dropping_mid_run_never_hangs() {
        // Drop closes pipe A: the partner sees end of file and is joined or reaped.
        let clock = crate::clock::CoarseClock::new(1e9);
        let cpu = crate::platform::current_cpu().unwrap_or(0);
        for kind in [Kind::Thread, Kind::Process] {
            let mut pp = PingPong::start(kind, &clock, cpu, 0).unwrap();
            pp.round_trip().unwrap();
            drop(pp);
        }
    }

    #[test]
    fn unpinned_switch_is_labelled_not_same_cpu() {
        use crate::experiments::kit::place::Place;
        use crate::platform::Pinning;
        let partner = Place {
            looks: 3,
            ..Place::new(1)
        };
        let main = Place {
            looks: 2,
            ..Place::new(1)
        };
        let good = cpus_check("same CPU", &main, &partner, &Pinning::Hard);
        assert!(good.passed, "{good:?}");
        let hint = Pinning::Unsupported {
            reason: "no pinning on this system".into(),
        };
        let bad = cpus_check("same CPU", &main, &partner, &hint);
        assert!(!bad.passed);
        assert!(bad.detail.contains("unpinned"), "{bad:?}");
        let moved = Place {
            away: 1,
            last_away: Some(0),
            ..main
        };
        assert!(!cpus_check("same CPU", &moved, &partner, &Pinning::Hard).passed);
    }

    /// A recorded cpu.thread-switch whose switch is `ns` with a tight interval.
    fn thread_result(ns: f64) -> crate::results::ExperimentResult {
        let mut o = Outcome::default();
        o.metric("pipe_cost", "ns", "", vec![1000.0; 20]);
        o.metric("switch", "ns", "", vec![ns; 20])
            .derived(&[("pipe_cost", "sub", 0.5)]);
        crate::experiments::testing::recorded(THREAD_SPEC.id, o)
    }

    /// cpu.process-switch as wired and judged, after a thread switch recorded at
    /// `thread_ns`.
    fn process_switch_after(thread_ns: f64) -> crate::results::ExperimentResult {
        use crate::experiments::testing::World;
        let mut machine = crate::machine::Machine::gather();
        let clock = machine.add_time_base();
        let mut w = World::live(&clock);
        w.machine = machine;
        w.budget = Duration::from_millis(300);
        w.earlier = vec![thread_result(thread_ns)];
        w.run(&Kind::Process)
    }

    const RELATION: &str = "a process switch costs no less than a thread switch, within noise";

    /// Issue 20 item 4: a process switch cheaper than the thread switch beyond both
    /// intervals (here a thread switch recorded at 1 s) makes the experiment invalid with
    /// the reason, and no finding is stated; against a 1 ns thread switch it passes.
    /// `process_switch_after`, retaken (at most three times) until the relation is judged:
    /// a live run can stop before it (under CI's load a same-CPU premise failed once).
    fn judged_after(thread_ns: f64) -> crate::results::ExperimentResult {
        let mut why = Vec::new();
        for _ in 0..3 {
            let out = process_switch_after(thread_ns);
            if out.checks.iter().any(|c| c.name == RELATION) {
                return out;
            }
            why.push(format!("{:?}: {:?}", out.status, out.reason));
        }
        panic!("the relation was never judged: {why:?}");
    }

    #[test]
    fn a_process_switch_below_the_thread_switch_is_refused() {
        let out = judged_after(1e9);
        crate::experiments::testing::assert_invalid_by(&out, RELATION);
        let c = out.checks.iter().find(|c| c.name == RELATION).unwrap();
        assert!(c.premise && !c.passed, "{c:?}");
        assert!(c.detail.contains("thread switch 1.00 s"), "{}", c.detail);
        assert!(out.findings.is_empty(), "{:?}", out.findings);
        let out = judged_after(1.0);
        let c = out.checks.iter().find(|c| c.name == RELATION).unwrap();
        assert!(c.passed, "{c:?}");
    }

    #[test]
    fn the_switch_interval_carries_the_pipe_cost_and_a_negative_switch_fails() {
        let mut o = Outcome::default();
        // Round trips 10 us, tight; pipe cost 4-8 us, wide.
        o.metric("pipe_round_trip_same_cpu", "ns", "", vec![10_000.0; 20]);
        let pipe: Vec<f64> = (0..20).map(|i| 4000.0 + 200.0 * i as f64).collect();
        o.metric("pipe_cost", "ns", "", pipe);
        let sw = switch_metric(&mut o, "pipe_round_trip_same_cpu", "pipe_cost");
        let m = o.get("switch").unwrap();
        let own = m.summary.ci95;
        assert!(
            own[1] - own[0] < 1e-9,
            "the round trips alone are tight: {own:?}"
        );
        assert!(sw.interval[1] - sw.interval[0] > 100.0, "{sw:?}");
        assert!(sw.interval[0] < sw.median && sw.median < sw.interval[1]);
        // Kept next to its input, in the table's order.
        let names: Vec<&str> = o.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["pipe_round_trip_same_cpu", "pipe_cost", "switch"]);
        assert!(switch_positive(&sw).passed);
        let neg = SwitchFigure {
            median: -50.0,
            interval: [-80.0, -20.0],
        };
        let c = switch_positive(&neg);
        assert!(c.premise && !c.passed, "{c:?}");
        // Negative within noise: reported, but flagged (a sanity check) rather than invalid.
        let noisy = SwitchFigure {
            median: -5.0,
            interval: [-30.0, 20.0],
        };
        let c = switch_positive(&noisy);
        assert!(!c.premise && !c.passed, "{c:?}");
    }

    /// A recorded machine's facts (tests/fixtures/machines/`name`).
    fn recorded_machine(name: &str) -> crate::machine::Machine {
        use crate::machine::facts::FactRoot;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines")
            .join(name);
        let mut m = crate::machine::Machine::gather_from(&FactRoot::recorded(dir));
        m.cpu.allowed_cpus = m.topology.allowed.clone();
        m
    }

    /// Issue 34: on machines with SMT, several LLCs or sockets, every cross-CPU figure the
    /// run plans (suffixed too) gets a prediction, from the thread experiment's figure of
    /// the same name or the pipe cost.
    #[test]
    fn every_planned_cross_cpu_figure_is_predicted() {
        use crate::experiments::testing::{recorded, World};
        let clock = crate::clock::MockClock::new(1);
        for name in ["amd-two-ccx", "xeon-two-socket"] {
            let mut w = World::live(&clock);
            w.machine = recorded_machine(name);
            let plans = w.with_ctx(|ctx| {
                let t = &ctx.machine.topology;
                t.cross_cpu_plans(ctx.cpu, &ctx.machine.cpu.allowed_cpus)
            });
            let names: Vec<String> = plans
                .iter()
                .map(|p| format!("pipe_round_trip_cross_cpu{}", p.suffix))
                .collect();
            assert!(names.iter().any(|n| n.len() > 25), "{name}: {names:?}");
            let mut sys = Outcome::default();
            sys.metric("write_devnull_0", "ns", "", vec![100.0; 5]);
            let mut thread = Outcome::default();
            for n in &names {
                thread.metric(n, "ns", "", vec![5000.0; 5]);
            }
            w.earlier = vec![
                recorded("cpu.syscall", sys),
                recorded(THREAD_SPEC.id, thread),
            ];
            for kind in [Kind::Thread, Kind::Process] {
                let got = w.with_ctx(|ctx| kind.predict(ctx));
                for n in &names {
                    let p = got.iter().find(|(m, _)| m == n).map(|x| &x.1);
                    let p = p.unwrap_or_else(|| panic!("{name} {kind:?}: no prediction for {n}"));
                    assert!(p.withheld.is_none(), "{name} {kind:?} {n}: {p:?}");
                    let want = if kind == Kind::Thread { 400.0 } else { 5000.0 };
                    assert_eq!(p.value, want, "{name} {kind:?} {n}");
                }
            }
        }
    }

    /// Issue 34: the cross-CPU sentence says the tasks do not share a CPU, never that no
    /// switch is needed (the other CPU still switches to the woken task).
    #[test]
    fn the_cross_cpu_sentence_claims_no_switchless_hop() {
        let mut o = Outcome::default();
        o.metric("pipe_round_trip_same_cpu", "ns", "", vec![4000.0; 20]);
        o.metric("pipe_round_trip_cross_cpu", "ns", "", vec![50_000.0; 20]);
        cross_finding("pipe_round_trip_cross_cpu", "same_llc", &mut o);
        let t = &o.findings[0].text;
        assert!(!t.contains("no switch"), "{t}");
        assert!(
            t.contains("do not share a CPU") && t.contains("dearer"),
            "{t}"
        );
    }

    #[test]
    fn touch_writes_one_word_per_line() {
        let mut buf = working_set(256);
        touch(buf.as_mut_ptr() as *mut u8, 256);
        let touched: Vec<usize> = (0..buf.len()).filter(|&i| buf[i] == 1).collect();
        let want: Vec<usize> = (0..256).step_by(LINE).map(|b| b / 8).collect();
        assert_eq!(touched, want);
    }
}
