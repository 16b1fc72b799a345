//! The experiment interface, profiles and the registry of every experiment.
//!
//! An experiment owns only its measurement: it states a prediction, runs, and returns an
//! `Outcome`. The runner owns order, progress, budgets, skipping and error capture.

use crate::clock::Clock;
use crate::harness::{Harness, HarnessConfig};
use crate::machine::Machine;
use crate::results::{ExperimentResult, Metric, Prediction};
use crate::stats::Summary;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) mod cpu;
pub(crate) mod fs;
pub(crate) mod kit;
pub mod memory;
pub(crate) mod net;
pub(crate) mod outcome;
pub mod parts;
pub(crate) mod predict;
pub(crate) mod seams;
pub mod spec;

pub use outcome::Outcome;
pub(crate) use outcome::{explained, pool_metric};
pub use spec::{PerProfile, Spec};
#[cfg(test)]
pub(crate) mod testing;

/// How much a run may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    Smoke,
    Quick,
    Standard,
    Thorough,
}

impl Profile {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Profile::Smoke => "smoke",
            Profile::Quick => "quick",
            Profile::Standard => "standard",
            Profile::Thorough => "thorough",
        }
    }

    pub(crate) const ALL: [Profile; 4] = [
        Profile::Smoke,
        Profile::Quick,
        Profile::Standard,
        Profile::Thorough,
    ];

    /// Harness settings for this profile (the budget is set per measurement).
    pub(crate) fn harness(&self) -> HarnessConfig {
        let ms = Duration::from_millis;
        let (min_trial, trials, warmup, cal) = match self {
            // Short trials in smoke and quick: long against the clock's overhead, short
            // against a scheduler time slice, so most run undisturbed on a busy machine.
            Profile::Smoke => (Duration::from_micros(500), 7, ms(2), ms(50)),
            Profile::Quick => (ms(1), 15, ms(10), ms(200)),
            Profile::Standard => (ms(10), 31, ms(50), ms(1000)),
            Profile::Thorough => (ms(20), 51, ms(100), ms(2000)),
        };
        HarnessConfig {
            min_trial,
            trials,
            min_trials: 5.min(trials),
            warmup,
            budget: ms(500),
            calibration_limit: cal,
            max_iters: 1 << 40,
            detect_preemption: false,
        }
    }

    /// The most one experiment of this profile may lay out, on a machine with `avail`
    /// bytes available (MemAvailable within the cgroup limit; 0 when unknown). Quick
    /// stays well under 1 GiB for the whole process, or an eighth of what is available,
    /// so that it runs beside real work on a small instance; the larger profiles may take
    /// a quarter. Experiments run one at a time, so this bounds the run's peak too.
    pub(crate) fn memory_limit(&self, avail: u64) -> u64 {
        const MIB: u64 = 1 << 20;
        let (ceiling, share) = match self {
            Profile::Smoke => (128 * MIB, 8),
            Profile::Quick => (768 * MIB, 8),
            Profile::Standard => (4096 * MIB, 4),
            Profile::Thorough => (16384 * MIB, 4),
        };
        if avail == 0 {
            // Unknown: stay small rather than risk the machine.
            return ceiling.min(256 * MIB);
        }
        ceiling.min(avail / share)
    }

    /// The most a whole run of this profile may take on any machine: the sum of its
    /// experiments' ceilings (budget times runs, per kind of core included) stays below.
    pub(crate) fn time_limit(&self) -> Duration {
        Duration::from_secs(match self {
            Profile::Smoke => 15,
            Profile::Quick => 60,
            Profile::Standard => 15 * 60,
            Profile::Thorough => 60 * 60,
        })
    }

    /// Runs of each experiment when `--repeat` is not given. Two runs back to back give
    /// compare a run-to-run spread from a single run: trials within one run share its
    /// state (page placement, huge-page backing, the host's neighbours), so their
    /// confidence interval alone calls such differences significant (docs/REPORTS.md,
    /// "Compare and its significance rule"). Smoke is for tests and stays single.
    pub(crate) fn default_repeat(&self) -> usize {
        match self {
            Profile::Smoke => 1,
            Profile::Quick | Profile::Standard | Profile::Thorough => 2,
        }
    }
}

/// What an experiment needs beyond an ordinary user on a quiet machine.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Needs {
    pub root: bool,
    pub peer: bool,
    pub remote_dir: bool,
    /// Free scratch disk in bytes under the quick profile.
    pub disk_bytes: u64,
    pub min_cpus: usize,
}

impl Needs {
    /// Nothing beyond an ordinary user (`Default`, usable in a `const`).
    pub const NONE: Needs = Needs {
        root: false,
        peer: false,
        remote_dir: false,
        disk_bytes: 0,
        min_cpus: 0,
    };

    pub(crate) fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.root {
            v.push("root".to_string());
        }
        if self.peer {
            v.push("a peer (loopback by default)".to_string());
        }
        if self.remote_dir {
            v.push("--remote-dir".to_string());
        }
        if self.disk_bytes > 0 {
            v.push(format!(
                "{} free disk",
                crate::units::fmt_bytes(self.disk_bytes as f64)
            ));
        }
        if self.min_cpus > 1 {
            v.push(format!("{} CPUs", self.min_cpus));
        }
        if v.is_empty() {
            "-".into()
        } else {
            v.join(", ")
        }
    }
}

/// What the user asked for that experiments may read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunOptions {
    pub peer: Option<String>,
    /// Never written to results: a results folder may be shared.
    #[serde(skip_serializing)]
    pub peer_token: Option<String>,
    /// How reports and the history name this host (a fleet's inventory name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_name: Option<String>,
    /// How reports name the `--peer` host (its inventory name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_name: Option<String>,
    pub remote_dir: Option<PathBuf>,
    pub scratch_dir: Option<PathBuf>,
    pub drop_caches: bool,
}

/// Everything an experiment may use while it runs.
pub struct Context<'a> {
    pub profile: Profile,
    pub machine: &'a Machine,
    pub clock: &'a dyn Clock,
    /// The CPU single-threaded work is pinned to.
    pub cpu: usize,
    /// Wall time this experiment may take.
    pub budget: Duration,
    /// Results of experiments that ran earlier in this run (the runner's list).
    pub earlier: &'a dyn EarlierResults,
    pub options: &'a RunOptions,
    /// Ticks of one empty `repeat` iteration.
    pub loop_ticks: f64,
    /// Reports sub-steps to the progress display.
    pub progress: &'a dyn Fn(&str),
    /// The run's scratch folder, made on first use (see `scratch()`).
    pub scratch_cell: &'a std::sync::OnceLock<crate::scratch::Scratch>,
    /// Which run of this experiment this is (`--repeat`), and the ones before it.
    pub repetition: Repetition<'a>,
}

/// Which of the back-to-back runs of one experiment this is. On the last one `before`
/// holds the earlier runs' results, which `Outcome::pool` merges into this run's metrics
/// so that checks and findings stated after it use the figures the table shows.
#[derive(Clone, Copy)]
pub struct Repetition<'a> {
    /// 0-based.
    pub index: usize,
    pub of: usize,
    /// The earlier runs, on the last run only (empty otherwise).
    pub before: &'a [ExperimentResult],
}

impl Repetition<'_> {
    /// A single run.
    pub const SINGLE: Repetition<'static> = Repetition {
        index: 0,
        of: 1,
        before: &[],
    };
}

impl Context<'_> {
    /// A harness whose budget is this experiment's budget split `parts` ways.
    pub(crate) fn harness(&self, parts: usize) -> Harness<'_> {
        let cfg = self.profile.harness().for_budget(self.budget, parts);
        Harness::new(self.clock, cfg, self.loop_ticks)
    }

    /// As `harness`, for bodies that only compute (never block or wake another task):
    /// trials during which the thread was preempted are set aside and repeated.
    pub(crate) fn cpu_harness(&self, parts: usize) -> Harness<'_> {
        let cfg = self
            .profile
            .harness()
            .for_budget(self.budget, parts)
            .cpu_only();
        Harness::new(self.clock, cfg, self.loop_ticks)
    }

    /// The run's scratch folder (under --scratch-dir or the current directory), made on
    /// first use and removed at the end of the run. Callers check `fs()` for tmpfs.
    pub(crate) fn scratch(&self) -> anyhow::Result<&crate::scratch::Scratch> {
        if let Some(s) = self.scratch_cell.get() {
            return Ok(s);
        }
        let s = crate::scratch::Scratch::new(self.options.scratch_dir.as_deref())?;
        let _ = self.scratch_cell.set(s);
        self.scratch_cell
            .get()
            .ok_or_else(|| anyhow::anyhow!("scratch folder unavailable"))
    }

    /// Core clock in GHz (cycles per ns) for cycle-based models, with where it came from.
    pub(crate) fn core_ghz(&self) -> (f64, String) {
        match self.machine.cpu.core_clock_hz {
            Some(hz) => (
                hz / 1e9,
                "machine: effective core clock (dependent add chain)".into(),
            ),
            None => (
                self.clock.ticks_per_ns(),
                "machine: counter frequency (core clock unknown)".into(),
            ),
        }
    }

    /// A metric measured earlier in this run.
    pub(crate) fn earlier_metric(&self, experiment: &str, metric: &str) -> Option<&Metric> {
        self.earlier.metric(experiment, metric)
    }

    /// Median of an earlier metric.
    pub(crate) fn earlier_median(&self, experiment: &str, metric: &str) -> Option<f64> {
        self.earlier_metric(experiment, metric)
            .map(|m| m.summary.median)
    }
}

/// (experiment, metric) pairs read from earlier results.
pub(crate) type MetricReads = std::collections::BTreeSet<(String, String)>;

/// Metrics measured earlier in the run, where `Context::earlier_metric` finds them.
pub trait EarlierResults {
    /// `metric` of `experiment`, when that experiment ran and its status is ok.
    fn metric(&self, experiment: &str, metric: &str) -> Option<&Metric>;
}

/// The runner's results so far.
impl EarlierResults for Vec<ExperimentResult> {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&Metric> {
        self.iter()
            .find(|e| e.id == experiment && e.status == crate::results::Status::Ok)?
            .metric(metric)
    }
}

/// Earlier results for `prediction_reads`: every lookup is recorded and answered with one
/// stand-in metric, or with none.
struct Recorder {
    stand_in: Option<Metric>,
    reads: std::cell::RefCell<MetricReads>,
}

impl EarlierResults for Recorder {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&Metric> {
        self.reads
            .borrow_mut()
            .insert((experiment.to_string(), metric.to_string()));
        self.stand_in.as_ref()
    }
}

/// Every (experiment, metric) that some experiment's `predict` reads from earlier results,
/// for the test that each one names a metric some experiment emits. Every prediction runs
/// twice: once finding no earlier metric (fallback branches), once finding all (branches that
/// stop early without one).
pub fn prediction_reads(machine: &Machine, clock: &dyn Clock, options: &RunOptions) -> MetricReads {
    predict_all(machine, clock, options, &[false, true]).0
}

/// Every prediction every experiment states on `machine`, as (experiment, metric,
/// prediction), once finding no earlier metric and once finding all: for the tests that
/// every input has a kind and every withheld prediction a reason.
pub fn all_predictions(
    machine: &Machine,
    clock: &dyn Clock,
    options: &RunOptions,
) -> Vec<(String, String, Prediction)> {
    predict_all(machine, clock, options, &[false, true]).1
}

/// As `all_predictions`, with no earlier metric found: for the test that a prediction
/// whose measured primitive did not run is withheld with the reason, never guessed.
pub fn predictions_without_earlier(
    machine: &Machine,
    clock: &dyn Clock,
    options: &RunOptions,
) -> Vec<(String, String, Prediction)> {
    predict_all(machine, clock, options, &[false]).1
}

type Stated = Vec<(String, String, Prediction)>;

fn predict_all(
    machine: &Machine,
    clock: &dyn Clock,
    options: &RunOptions,
    passes: &[bool],
) -> (MetricReads, Stated) {
    let scratch = std::sync::OnceLock::new();
    let stand_in = Metric {
        name: "stand-in".into(),
        unit: String::new(),
        description: String::new(),
        summary: Summary::of(&[1.0]).expect("one value summarises"),
        prediction: None,
        cycles: None,
        iterations: None,
        raw: vec![1.0],
        kind: None,
        runs: vec![],
        bottleneck: None,
    };
    let mut all = MetricReads::new();
    let mut stated = Vec::new();
    for &found in passes {
        let earlier = Recorder {
            stand_in: found.then(|| stand_in.clone()),
            reads: Default::default(),
        };
        for exp in registry() {
            let ctx = Context {
                profile: Profile::Quick,
                machine,
                clock,
                cpu: 0,
                budget: exp.budget(Profile::Quick),
                earlier: &earlier,
                options,
                loop_ticks: 0.0,
                progress: &|_| {},
                scratch_cell: &scratch,
                repetition: Repetition::SINGLE,
            };
            for (name, p) in exp.predict(&ctx) {
                stated.push((exp.id().to_string(), name, p));
            }
        }
        all.extend(earlier.reads.into_inner());
    }
    (all, stated)
}

/// One experiment: a measurement of one cost of the machine or its OS, with a prediction
/// stated before it and premise checks after it. What it is (id, title, description,
/// method, needs) is data, its `meta`; what it costs (`budget`, `default_repeat`) and
/// does (`predict`, `run`) are functions of the profile and the run.
///
/// # What `predict` and `run` may do
///
/// - Measure through the harness: `ctx.harness(parts)`, or `ctx.cpu_harness(parts)` for
///   bodies that only compute (the experiment's budget split `parts` ways); spans and time
///   bounds with that harness's `stopwatch()` and `deadline(d)`.
/// - Read the machine (`ctx.machine`) and the metrics of experiments that ran earlier in
///   the run (`ctx.earlier_median`, `ctx.earlier_metric`); live counters through
///   `machine` (e.g. `machine::process`, `machine::storage::sectors_read`).
/// - Make what the measurement needs (files, only under `ctx.scratch()`; children;
///   mappings; sockets) and remove or stop it before returning, on error too. The one
///   resource that outlives an experiment is the shared loopback peer of `net`, which
///   ends with the run.
/// - Report sub-steps with `ctx.progress`.
/// - Verify the premises its number depends on and record them as `Check::premise` (a
///   failed one makes the result invalid, not wrong), and sanity checks as
///   `Check::sanity`; state findings backed by its own metrics, after `Outcome::pool`
///   so that they quote the pooled figures the table shows.
/// - Return `Outcome::skipped(reason)` when it cannot run here, saying what would enable
///   it, and an error for what went wrong while running (the result becomes "failed").
///
/// # What it must never do
///
/// - Print: stdout and stderr belong to the progress display and the commands.
/// - Write outside the scratch folder, or leave anything behind.
/// - Read a clock itself (`Instant::now`, cycle counters): time comes from the harness
///   and the `clock` module, which tests replace with a `MockClock`.
/// - Call OS-specific items or read /proc, /sys or sysctl directly: those live behind
///   `platform` and `machine`.
/// - Panic, on bad input or on an unexpected answer from the system: the runner catches a
///   panic and records "internal error", but a panic is a bug.
///
/// # What the runner owns
///
/// The order (registry order, primitives first, since later predictions read them) and
/// the selection; pinning to the measured CPU before each run; the progress display;
/// the budget (`budget`), and the watchdog that enforces the hard limit derived from it;
/// repeats (`--repeat`, else `default_repeat`) and merging them (the experiment's part:
/// `Outcome::pool` on the last run, before the checks and findings that quote figures);
/// the sentinel before and
/// after; calling `predict` before `run` and attaching the predictions and cycle counts;
/// the status (failed premise: invalid; no metrics, an error or a panic: failed;
/// `Outcome::skipped`: skipped with its reason); and the scratch folder's removal at the
/// end of the run.
pub trait Experiment: Send + Sync {
    /// What this experiment is: its `const` spec.
    fn spec(&self) -> &Spec;
    /// Wall-time budget under a profile: the spec's table, or a function of the
    /// experiment's plan (sizes, slices, process counts) where the spec has none.
    fn budget(&self, profile: Profile) -> Duration {
        self.spec()
            .budget
            .map_or(Duration::ZERO, |b| b.get(profile))
    }
    /// Runs of this experiment when `--repeat` is not given.
    fn default_repeat(&self, profile: Profile) -> usize {
        profile.default_repeat()
    }
    /// The budget of one run on one kind of core, on a machine with `kinds` kinds: a
    /// per-core-kind experiment shares its budget out among them, so that a hybrid CPU
    /// does not make a run longer than the profile's limit.
    fn kind_budget(&self, profile: Profile, kinds: usize) -> Duration {
        let k = if self.spec().per_core_kind { kinds } else { 1 };
        self.budget(profile) / k.max(1) as u32
    }
    /// The most all default runs take (on every kind of core): what `osmeter list` states.
    fn ceiling(&self, profile: Profile) -> Duration {
        self.budget(profile) * self.default_repeat(profile) as u32
    }
    /// Predictions stated before measuring, by metric name.
    fn predict(&self, _ctx: &Context) -> Vec<(String, Prediction)> {
        Vec::new()
    }
    /// The measurement (see the trait's contract above).
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome>;
}

impl dyn Experiment + '_ {
    /// `spec().id`: the key the runner, selections and the results document use.
    pub fn id(&self) -> &'static str {
        self.spec().id
    }
}

/// Every experiment, in the order a run performs them (primitives first, since later
/// predictions use them).
pub fn registry() -> Vec<Box<dyn Experiment>> {
    let mut v: Vec<Box<dyn Experiment>> = Vec::new();
    v.extend(cpu::experiments());
    v.extend(memory::experiments());
    v.extend(net::experiments());
    v.extend(fs::experiments());
    v
}

/// Experiments selected by `--only` and `--skip` glob patterns (comma-separated).
/// Errors name a pattern that matches nothing.
pub(crate) fn select(
    all: Vec<Box<dyn Experiment>>,
    only: &[String],
    skip: &[String],
) -> Result<Vec<Box<dyn Experiment>>, String> {
    let compile = |pats: &[String]| -> Result<Vec<glob::Pattern>, String> {
        pats.iter()
            .flat_map(|p| p.split(','))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| glob::Pattern::new(p).map_err(|e| format!("bad pattern '{p}': {e}")))
            .collect()
    };
    let only = compile(only)?;
    let skip = compile(skip)?;
    let ids: Vec<&str> = all.iter().map(|e| e.id()).collect();
    for p in only.iter().chain(skip.iter()) {
        if !ids.iter().any(|id| p.matches(id)) {
            return Err(format!(
                "no experiment matches '{}'; valid ids: {}",
                p.as_str(),
                ids.join(", ")
            ));
        }
    }
    Ok(all
        .into_iter()
        .filter(|e| only.is_empty() || only.iter().any(|p| p.matches(e.id())))
        .filter(|e| !skip.iter().any(|p| p.matches(e.id())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_well_formed() {
        let all = registry();
        let mut ids: Vec<&str> = all.iter().map(|e| e.id()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for e in &all {
            let m = e.spec();
            assert!(m.id.contains('.') && m.id == e.id(), "{}", m.id);
            assert!(["cpu", "mem", "net", "fs"].contains(&m.area()), "{}", m.id);
            assert!(!m.title.is_empty(), "{}", m.id);
            for p in Profile::ALL {
                assert!(e.budget(p) > Duration::ZERO, "{} {p:?}", m.id);
            }
            assert!(
                !m.method.is_empty() && !m.description.is_empty(),
                "{}",
                m.id
            );
        }
    }

    #[test]
    fn every_profile_fits_its_time_limit_on_any_kind_of_cpu() {
        for p in Profile::ALL {
            let total: Duration = registry().iter().map(|e| e.ceiling(p)).sum();
            assert!(
                total <= p.time_limit(),
                "{p:?}: the experiments' ceilings add up to {total:?}, over {:?}",
                p.time_limit()
            );
            // A hybrid CPU's kinds share the budget: the runs on three kinds of core take
            // what one run takes.
            for e in registry() {
                let runs = if e.spec().per_core_kind { 3 } else { 1 };
                assert!(e.kind_budget(p, 3) * runs <= e.budget(p), "{}", e.id());
            }
        }
    }

    #[test]
    fn explained_share_is_bounded() {
        let under = explained("Entries", 50.0, 200.0);
        assert!(
            under.contains("25%") && under.contains("less than the measured cost"),
            "{under}"
        );
        let over = explained("Entries", 300.0, 200.0);
        assert!(!over.contains('%') && over.contains("1.50x"), "{over}");
        assert!(explained("Entries", f64::NAN, 1.0).is_empty());
    }

    #[test]
    fn selection_by_glob() {
        let sel = select(registry(), &["cpu.*".into()], &["cpu.timer".into()]).unwrap();
        assert!(sel
            .iter()
            .all(|e| e.id().starts_with("cpu.") && e.id() != "cpu.timer"));
        assert!(!sel.is_empty());
        let err = select(registry(), &["no-such".into()], &[]).err().unwrap();
        assert!(err.contains("cpu.timer"), "{err}");
    }
}
