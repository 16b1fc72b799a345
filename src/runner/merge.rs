//! One experiment's result: judged from its checks, its repetitions merged, their
//! checks, series and notes labelled by run.

#[cfg(test)]
use crate::experiments::Context;
use crate::experiments::Experiment;
use crate::machine::Machine;
use crate::results::{Cycles, ExperimentResult, Status};

/// Names the run that checks and series describe when an experiment runs more than once:
/// all of them on an earlier run; on the last, those made before `Outcome::pool` (after
/// it they describe the pooled runs and keep their names).
pub(super) fn label_run(
    checks: &mut [crate::results::Check],
    series: &mut [crate::results::Series],
    pooled_at: Option<(usize, usize)>,
    rep: crate::experiments::Repetition,
) {
    let last = rep.index + 1 == rep.of;
    let (nc, ns) = match pooled_at {
        Some(at) if last => at,
        _ => (checks.len(), series.len()),
    };
    let (nc, ns) = (nc.min(checks.len()), ns.min(series.len()));
    let k = rep.index + 1;
    for c in &mut checks[..nc] {
        c.name = format!("run {k}: {}", c.name);
    }
    for s in &mut series[..ns] {
        s.label_run(k, rep.of);
    }
}

pub(super) fn empty_result(exp: &dyn Experiment) -> ExperimentResult {
    let meta = exp.spec();
    ExperimentResult::new(meta.id, meta.title, meta.method)
}

pub(super) fn failed(mut result: ExperimentResult, reason: String) -> ExperimentResult {
    result.status = Status::Failed;
    result.reason = Some(reason);
    result
}

/// Every time metric in core and counter cycles, where those clocks are known.
pub(super) fn add_cycles(result: &mut ExperimentResult, machine: &Machine) {
    let counter_hz = machine
        .clock
        .as_ref()
        .filter(|c| c.counter != "monotonic_raw")
        .map(|c| c.frequency_hz);
    for m in result
        .metrics
        .iter_mut()
        .filter(|m| m.unit == "ns" && m.summary.median.is_finite())
    {
        m.cycles = Some(Cycles {
            core: machine
                .cpu
                .core_clock_hz
                .map(|hz| m.summary.median * hz / 1e9),
            counter: counter_hz.map(|hz| m.summary.median * hz / 1e9),
        });
    }
}

/// The status of an experiment that returned: a failed premise makes it invalid, no
/// metrics make it failed.
pub(super) fn judge(mut result: ExperimentResult) -> ExperimentResult {
    let failed: Vec<String> = result
        .checks
        .iter()
        .filter(|c| c.premise && !c.passed && !c.unverified)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    let unchecked: Vec<String> = result
        .checks
        .iter()
        .filter(|c| c.premise && c.unverified)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    if !failed.is_empty() {
        result.status = Status::Invalid;
        result.reason = Some(format!("premise failed: {}", failed.join("; ")));
    } else if result.metrics.is_empty() {
        result.status = Status::Failed;
        result.reason = Some("the experiment produced no metrics".into());
    } else if !unchecked.is_empty() {
        result.status = Status::Unverified;
        result.reason = Some(format!(
            "premise not verified here: {}",
            unchecked.join("; ")
        ));
    }
    result
}

/// One experiment run in `ctx` and judged as the runner judges it (tests: an experiment
/// as wired, in a context whose clock, machine or earlier results say what a test needs).
#[cfg(test)]
pub(crate) fn run_judged(exp: &dyn Experiment, ctx: &Context) -> ExperimentResult {
    let mut result = empty_result(exp);
    match exp.run(ctx) {
        Err(e) => failed(result, format!("{e:#}")),
        Ok(o) if o.skipped.is_some() => {
            result.status = Status::Skipped;
            result.reason = o.skipped;
            result
        }
        Ok(o) => {
            result.metrics = o.metrics;
            result.series = o.series;
            result.checks = o.checks;
            result.findings = o.findings;
            result.notes = o.notes;
            judge(result)
        }
    }
}

/// What the host did around the repetitions whose figures `merge_repeats` keeps: all of
/// them, or only the one that was not measured, whose result alone is shown (a condition
/// seen around a dropped run would grade figures it never touched, with no note beside them).
pub(super) fn kept_observations(
    reps: &[ExperimentResult],
    mut observed: Vec<Vec<crate::results::GradeReason>>,
) -> Vec<Vec<crate::results::GradeReason>> {
    match reps.iter().position(|r| !r.status.measured()) {
        Some(bad) if reps.len() > 1 => vec![observed.swap_remove(bad)],
        _ => observed,
    }
}

/// The notes of the repetitions, in run order: a note every repetition made once, unlabelled
/// (it holds for the pooled figures: a withheld prediction's reason, a skipped part);
/// every other labelled with its run.
pub(super) fn label_notes<'a>(
    runs: impl Iterator<Item = &'a ExperimentResult> + Clone,
) -> Vec<String> {
    let in_every = |x: &String| runs.clone().all(|r| r.notes.contains(x));
    let mut notes: Vec<String> = Vec::new();
    for (k, r) in runs.clone().enumerate() {
        for x in &r.notes {
            if !in_every(x) {
                notes.push(format!("run {}: {x}", k + 1));
            } else if !notes.contains(x) {
                notes.push(x.clone());
            }
        }
    }
    notes
}

/// One result from the repetitions of an experiment. The last run is kept whole: its
/// metrics were pooled with the earlier runs' by `Outcome::pool` (each metric's raw values
/// from every run, each run's median in `runs`), and its findings, series and later checks
/// were stated from those pooled figures. A metric the experiment did not pool is pooled
/// here. Every run's checks are kept, labelled by run (`label_run`), so a check failing in
/// any run shows; a run that is not ok makes the merged result take its status and reason.
pub(crate) fn merge_repeats(mut reps: Vec<ExperimentResult>) -> ExperimentResult {
    if reps.len() <= 1 {
        return reps.pop().expect("at least one run");
    }
    let n = reps.len();
    if let Some(bad) = reps.iter().position(|r| !r.status.measured()) {
        let mut r = reps.swap_remove(bad);
        r.notes.push(format!(
            "run {} of {n} (--repeat) was {}",
            bad + 1,
            r.status.as_str()
        ));
        return r;
    }
    // An unverified premise in any repetition leaves the pooled figures unverified.
    let unverified = reps
        .iter()
        .find(|r| r.status == Status::Unverified)
        .map(|r| r.reason.clone());
    let mut base = reps.pop().expect("at least two runs");
    if let (Some(reason), Status::Ok) = (unverified, base.status) {
        base.status = Status::Unverified;
        base.reason = reason;
    }
    base.duration_s += reps.iter().map(|r| r.duration_s).sum::<f64>();
    base.sentinel = match (reps[0].sentinel, base.sentinel) {
        (Some(a), Some(b)) => Some(crate::results::BeforeAfter {
            before: a.before,
            after: b.after,
        }),
        _ => None,
    };
    let mut checks: Vec<crate::results::Check> =
        reps.iter().flat_map(|r| r.checks.iter().cloned()).collect();
    checks.append(&mut base.checks);
    base.checks = checks;
    base.notes = label_notes(reps.iter().chain(std::iter::once(&base)));
    for m in &mut base.metrics {
        if m.runs.len() == n {
            continue; // pooled by the experiment
        }
        let earlier: Vec<&crate::results::Metric> = reps
            .iter()
            .filter_map(|r| r.metric(&m.name).filter(|x| x.unit == m.unit))
            .collect();
        if earlier.len() < n - 1 {
            m.runs.clear();
            continue;
        }
        crate::experiments::pool_metric(m, &earlier);
    }
    base
}
