//! Runs a selection of experiments: validates the request, sets up the clock and pinning,
//! runs each experiment within its budget (with a watchdog so none can hang), captures
//! failures and panics, and assembles the results document. It writes and prints
//! nothing: progress goes to a `Progress` observer, and `osmeter run` (commands::run)
//! writes the results folder, the reports and the history entry.

mod kinds;
mod merge;
mod overrun;
mod plan;
#[cfg(test)]
mod tests;
mod watchdog;

use crate::clock::Clock;
use crate::experiments::{self, Context, Experiment, Profile, Repetition, RunOptions};
use crate::machine::{Machine, Topology};
use crate::platform;
use crate::results::{ExperimentResult, RunResults, Status};
use kinds::{add_kind, KindEarlier, KindRun};
pub(crate) use merge::merge_repeats;
#[cfg(test)]
pub(crate) use merge::run_judged;
use merge::{add_cycles, empty_result, failed, judge, kept_observations, label_run};
use overrun::Ledger;
pub use overrun::{OnOverrun, Overrun};
pub(crate) use plan::plan;
use plan::{repeats, runs_of};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};
pub(crate) use watchdog::hard_limit;
pub use watchdog::Watchdog;

/// What `osmeter run` was asked to do.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub profile: Profile,
    pub only: Vec<String>,
    pub skip: Vec<String>,
    pub cpu: Option<usize>,
    pub options: RunOptions,
    /// Runs of each experiment (`--repeat`), back to back, merged into one result;
    /// `None`: each experiment's default for the profile (`Experiment::default_repeat`).
    pub repeat: Option<usize>,
}

/// Errors of a run: the binary's one error type (usage exit 2, runtime exit 1).
pub use crate::error::Error as RunError;

/// An existing directory this process may create files in (checked with access(2), so
/// nothing is written to find out).
pub(crate) fn check_writable_dir(flag: &str, d: &Path) -> Result<(), RunError> {
    if !d.is_dir() {
        return Err(RunError::Usage(format!(
            "{flag} {}: not an existing directory",
            d.display()
        )));
    }
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(d.as_os_str()))
        .map_err(|_| RunError::Usage(format!("{flag}: path contains a NUL byte")))?;
    // SAFETY: c is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(RunError::Usage(format!(
            "{flag} {}: not writable: {e}",
            d.display()
        )));
    }
    Ok(())
}

/// What a run tells whoever watches it. The runner prints nothing itself: `osmeter run`
/// shows these as a bar or as lines (commands::run), tests pass `Silent`.
pub trait Progress {
    /// Measuring begins; `total` is the budget of every run of every selected experiment.
    fn begin(&self, _total: Duration) {}
    /// Called while the runner starts its helper threads away from the measured CPU, so
    /// that a display's own threads (a ticker) start there too.
    fn start_threads(&self) {}
    /// What is happening now (replaces the previous message).
    fn message(&self, _msg: &str) {}
    /// A line that stays: an experiment done, a warning.
    fn line(&self, _msg: &str) {}
    /// `by` of the total budget is done.
    fn advance(&self, _by: Duration) {}
    /// Measuring is over.
    fn finish(&self) {}
}

/// A progress observer that shows nothing.
pub struct Silent;

impl Progress for Silent {}

/// Runs `start` while the calling thread may use every allowed CPU but `cpu`, so the
/// threads it spawns (which inherit their creator's affinity) never wake on the measured
/// CPU; the caller's affinity is then restored. With one allowed CPU
/// there is nowhere else to go. On macOS affinity is at most a hint and `set_affinity`
/// does nothing, so the helpers go wherever the scheduler puts them.
pub fn off_cpu<T>(cpu: usize, allowed: &[usize], start: impl FnOnce() -> T) -> T {
    let others: Vec<usize> = allowed.iter().copied().filter(|&c| c != cpu).collect();
    let narrowed = !others.is_empty() && platform::set_affinity(&others).is_ok();
    let t = start();
    if narrowed {
        let _ = platform::set_affinity(allowed);
    }
    t
}

/// The experiments a run selects from and how it stops one that hangs. `run` uses the
/// real ones; tests pass mock experiments and a watchdog that only records (as
/// hyperfine's mock executor and fio's null engine stand in for the real thing).
pub struct Registry {
    pub experiments: Vec<Box<dyn Experiment>>,
    /// The hard wall-time limit of an experiment with a given budget.
    pub hard_limit: fn(Duration) -> Duration,
    pub on_overrun: OnOverrun,
    /// A topology standing in for this machine's (tests: a CPU with two kinds of core,
    /// on a machine with one); None: the machine's own.
    pub topology: Option<Topology>,
    /// A stand-in for the core clock (Hz) measured on another kind's CPU, given that CPU
    /// (tests: kinds whose clocks differ); None: `clock::measure_core_clock` there.
    pub kind_clock: Option<fn(usize) -> Option<f64>>,
}

impl Registry {
    /// Every experiment, with the real limits.
    pub(crate) fn real() -> Registry {
        Registry {
            experiments: experiments::registry(),
            hard_limit,
            on_overrun: overrun::exit_on_overrun(),
            topology: None,
            kind_clock: None,
        }
    }
}

/// Runs the configured experiments of the real registry.
pub fn run(cfg: &RunConfig, progress: &dyn Progress) -> Result<RunResults, RunError> {
    run_with(cfg, Registry::real(), progress)
}

/// Runs the configured experiments of `registry`.
pub fn run_with(
    cfg: &RunConfig,
    registry: Registry,
    progress: &dyn Progress,
) -> Result<RunResults, RunError> {
    plan(cfg, registry)?.run(progress)
}

/// Each selected experiment in turn, `--repeat` times, within its budget and hard limit,
/// with the sentinel just before and just after on the pinned CPU.
fn run_selected(selected: &[Box<dyn Experiment>], env: &Env) -> Vec<ExperimentResult> {
    let mut results: Vec<ExperimentResult> = Vec::new();
    let per_kind: Vec<&'static str> = selected
        .iter()
        .filter(|e| e.spec().per_core_kind)
        .map(|e| e.id())
        .collect();
    for (i, exp) in selected.iter().enumerate() {
        let exp = exp.as_ref();
        let cfg = env.cfg;
        let turn = Turn {
            exp,
            env,
            earlier: &results,
            per_kind: &per_kind,
            // The other kinds of core this experiment runs on too, each repetition.
            kinds: if exp.spec().per_core_kind {
                env.kinds
            } else {
                &[]
            },
            // Kinds of core share the budget (`Experiment::kind_budget`).
            budget: plan::budget_of(cfg, exp, 1 + env.kinds.len()),
            repeat: repeats(cfg, exp),
            step: format!("[{}/{}]", i + 1, selected.len()),
            siblings: env.host.siblings(),
        };
        let res = turn.run();
        env.ledger.done(&res);
        results.push(res);
        if env.ledger.ended() {
            break;
        }
    }
    results
}

/// One experiment's turn in the run: what its repetitions share.
struct Turn<'a> {
    exp: &'a dyn Experiment,
    env: &'a Env<'a>,
    /// The results of the experiments before it.
    earlier: &'a Vec<ExperimentResult>,
    /// The ids of the selected per-kind experiments.
    per_kind: &'a [&'static str],
    kinds: &'a [KindRun],
    budget: Duration,
    repeat: usize,
    /// "[i/n]", its place in the selection.
    step: String,
    /// The measured CPU's siblings, whose conditions the host samples.
    siblings: Vec<usize>,
}

impl Turn<'_> {
    /// Every repetition, merged with the other kinds' figures and graded.
    fn run(&self) -> ExperimentResult {
        let (exp, env, progress) = (self.exp, self.env, self.env.progress);
        let mut kind_reps: Vec<Vec<ExperimentResult>> =
            self.kinds.iter().map(|_| Vec::new()).collect();
        let mut reps = Vec::with_capacity(self.repeat);
        let mut observed = Vec::with_capacity(self.repeat);
        for r in 0..self.repeat {
            let (res, seen) = self.repetition(r, &reps, &mut kind_reps);
            observed.push(seen);
            reps.push(res);
            if env.ledger.ended() {
                break;
            }
        }
        let observed = kept_observations(&reps, observed);
        let mut res = merge_repeats(reps);
        for (kr, kreps) in self.kinds.iter().zip(kind_reps) {
            add_kind(
                &mut res,
                merge_repeats(kreps),
                kr,
                env.machine,
                self.per_kind,
            );
        }
        res.grade = env.host.grade(&res, &observed, exp.spec().subtracts_loop);
        progress.advance(self.budget * runs_of(env.cfg, exp, 1 + self.kinds.len()));
        let mut line = format!(
            "{} {} {} ({:.1} s)",
            self.step,
            exp.id(),
            res.status.as_str(),
            res.duration_s
        );
        if let Some(r) = &res.reason {
            line.push_str(&format!(": {r}"));
        }
        progress.line(&line);
        res
    }

    /// Repetition `r` on the run's CPU and then on each other kind's (whose results go to
    /// `kind_reps`), between two sentinel readings; returns the result and what the host
    /// did around it.
    fn repetition(
        &self,
        r: usize,
        reps: &[ExperimentResult],
        kind_reps: &mut [Vec<ExperimentResult>],
    ) -> (ExperimentResult, Vec<crate::results::GradeReason>) {
        let (exp, env, cpu) = (self.exp, self.env, self.env.cpu);
        let run_of = if self.repeat > 1 {
            format!(" (run {}/{})", r + 1, self.repeat)
        } else {
            String::new()
        };
        env.progress
            .message(&format!("{} {}{run_of}", self.step, exp.id()));
        // Experiments may move threads around; every one starts pinned.
        let _ = platform::pin_to_cpu(cpu);
        let host_before = crate::machine::conditions::sample(cpu, &self.siblings);
        let before = crate::sentinel::measure();
        let limit = self.limit();
        env.ledger.running(limit, self.budget);
        env.watchdog.arm(exp.id(), limit);
        let mut res = run_one(exp, env, self.budget, self.earlier, self.rep(r, reps));
        if env.watchdog.disarm() {
            self.overran(&mut res, limit);
        }
        for (kr, kreps) in self.kinds.iter().zip(kind_reps.iter_mut()) {
            if env.ledger.ended() {
                break;
            }
            env.progress.message(&format!(
                "{} {} on the {} cores{run_of}",
                self.step,
                exp.id(),
                kr.kind
            ));
            let kres = self.on_kind(kr, limit, self.rep(r, kreps));
            kreps.push(kres);
        }
        let _ = platform::pin_to_cpu(cpu);
        let after = crate::sentinel::measure();
        let host_after = crate::machine::conditions::sample(cpu, &self.siblings);
        res.sentinel = Some(crate::results::BeforeAfter { before, after });
        let seen = host_conditions(env.host, &mut res, &host_before, &host_after);
        (res, seen)
    }

    /// The hard limit of each repetition (short for the experiment a test makes hang).
    fn limit(&self) -> Duration {
        if experiments::seams::hangs(self.exp.id()) {
            experiments::seams::HUNG_LIMIT
        } else {
            (self.env.hard_limit)(self.budget)
        }
    }

    /// Repetition `r`; the last one pools the earlier ones (Outcome::pool).
    fn rep<'b>(&self, r: usize, earlier: &'b [ExperimentResult]) -> Repetition<'b> {
        Repetition {
            index: r,
            of: self.repeat,
            before: if r + 1 == self.repeat { earlier } else { &[] },
        }
    }

    /// One repetition on another kind's CPU, reading earlier results as that kind's.
    fn on_kind(&self, kr: &KindRun, limit: Duration, rep: Repetition) -> ExperimentResult {
        let env = self.env;
        let _ = platform::pin_to_cpu(kr.cpu);
        env.ledger.running(limit, self.budget);
        env.watchdog.arm(self.exp.id(), limit);
        let earlier = KindEarlier {
            results: self.earlier,
            suffix: &kr.suffix,
            per_kind: self.per_kind,
        };
        let kenv = Env {
            machine: &kr.machine,
            cpu: kr.cpu,
            loop_ticks: kr.loop_ticks,
            // other_kinds kept only kinds whose CPU this thread can be pinned to.
            placement: None,
            ..*env
        };
        let mut kres = run_one(self.exp, &kenv, self.budget, &earlier, rep);
        if env.watchdog.disarm() {
            self.overran(&mut kres, limit);
        }
        kres
    }

    /// Fails a repetition that overran its hard time limit, once the reaction to the
    /// overrun has returned (only a test's does: the real one ends the process).
    fn overran(&self, res: &mut ExperimentResult, limit: Duration) {
        self.env.ledger.wait();
        res.status = Status::Failed;
        res.reason = Some(overrun::reason(limit, self.budget));
    }
}

/// What the host did around one repetition (`grade::RunState::observe`): the conditions
/// that distort its figures become notes beside them; all go to its grade.
fn host_conditions(
    host: &crate::grade::RunState,
    res: &mut ExperimentResult,
    before: &crate::machine::conditions::HostSample,
    after: &crate::machine::conditions::HostSample,
) -> Vec<crate::results::GradeReason> {
    let Some(sentinel) = res.sentinel else {
        return Vec::new();
    };
    let seen = host.observe(before, after, &sentinel, res);
    for c in seen
        .iter()
        .filter(|c| c.level == crate::results::GradeLevel::C)
    {
        res.notes.push(format!("host condition: {}", c.text));
    }
    seen
}

/// What stays the same for every experiment of a run.
struct Env<'a> {
    cfg: &'a RunConfig,
    machine: &'a Machine,
    clock: &'a dyn Clock,
    cpu: usize,
    loop_ticks: f64,
    scratch: &'a std::sync::OnceLock<crate::scratch::Scratch>,
    progress: &'a dyn Progress,
    watchdog: &'a Watchdog,
    /// The results so far, for the document of a run an experiment overran.
    ledger: &'a Ledger,
    hard_limit: fn(Duration) -> Duration,
    /// Why the measuring thread's CPU is not controlled (None: hard pinning).
    placement: Option<String>,
    /// The run's standing conditions and reference, for the host conditions and grades.
    host: &'a crate::grade::RunState<'a>,
    /// The other kinds of core per-kind experiments also run on (none on most CPUs).
    kinds: &'a [KindRun],
}

fn run_one(
    exp: &dyn Experiment,
    env: &Env,
    budget: Duration,
    earlier: &dyn crate::experiments::EarlierResults,
    repetition: crate::experiments::Repetition,
) -> ExperimentResult {
    let t = Instant::now();
    let sub = |msg: &str| env.progress.message(&format!("{}: {msg}", exp.id()));
    let ctx = Context {
        profile: env.cfg.profile,
        machine: env.machine,
        clock: env.clock,
        cpu: env.cpu,
        budget,
        earlier,
        options: &env.cfg.options,
        loop_ticks: env.loop_ticks,
        progress: &sub,
        scratch_cell: env.scratch,
        repetition,
    };
    if experiments::seams::hangs(exp.id()) {
        // A test's stand-in for an experiment that never returns; asleep, so that it
        // leaves the CPU to the test's other work.
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    let mut result = empty_result(exp);
    let predictions = exp.predict(&ctx);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exp.run(&ctx)));
    result.duration_s = t.elapsed().as_secs_f64();
    let outcome = match outcome {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return failed(result, format!("{e:#}")),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            return failed(result, format!("internal error: {msg}"));
        }
    };
    if let Some(reason) = outcome.skipped {
        result.status = Status::Skipped;
        result.reason = Some(reason);
        result.checks = outcome.checks;
        return result;
    }
    let (mut checks, mut series) = (outcome.checks, outcome.series);
    if repetition.of > 1 {
        label_run(&mut checks, &mut series, outcome.pooled_at, repetition);
    }
    result.metrics = outcome.metrics;
    // Each metric names the sentinel component compare discounts it by: its own
    // declaration, else its experiment's.
    for m in &mut result.metrics {
        m.bottleneck.get_or_insert(exp.spec().bottleneck);
    }
    result.series = series;
    result.checks = checks;
    result.findings = outcome.findings;
    result.notes = outcome.notes;
    for m in outcome.method_notes {
        result.method.push(' ');
        result.method.push_str(&m);
    }
    attach_predictions(&mut result, predictions);
    if let Some(why) = &env.placement {
        placement_note(&mut result, why, env.machine);
    }
    add_cycles(&mut result, env.machine);
    judge(result)
}

/// Each metric's prediction, or a note of why it was withheld; a metric the experiment
/// stated nothing for gets a note too, so no figure stands without a prediction or a reason.
fn attach_predictions(
    result: &mut ExperimentResult,
    predictions: Vec<(String, crate::results::Prediction)>,
) {
    let mut reasoned = std::collections::BTreeSet::new();
    for (name, p) in predictions {
        let Some(m) = result.metrics.iter_mut().find(|m| m.name == name) else {
            if p.withheld.is_none() {
                result
                    .notes
                    .push(format!("{name} was predicted but not measured in this run"));
            }
            continue;
        };
        reasoned.insert(name.clone());
        match p.withheld {
            Some(why) => result
                .notes
                .push(format!("no prediction for {name}: {why}")),
            None => m.prediction = Some(p),
        }
    }
    for m in &result.metrics {
        if !reasoned.contains(&m.name) {
            result.notes.push(format!(
                "no prediction for {}: no model in osmeter covers it",
                m.name
            ));
        }
    }
}

/// A note naming the metrics measured where the thread's CPU is not controlled (`why`).
fn placement_note(result: &mut ExperimentResult, why: &str, machine: &Machine) {
    if !result.metrics.is_empty() {
        let names: Vec<&str> = result.metrics.iter().map(|m| m.name.as_str()).collect();
        result.notes.push(format!(
            "placement not controlled for {}: {why}{}",
            names.join(", "),
            if machine.topology.hybrid() {
                "; a figure may come from an efficiency core"
            } else {
                ""
            }
        ));
    }
}
