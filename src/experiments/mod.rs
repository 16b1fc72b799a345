//! The experiment interface (its contract is `Experiment`'s), profiles and the registry.

use crate::clock::Clock;
use crate::harness::{Harness, HarnessConfig};
use crate::machine::Machine;
use crate::results::{ExperimentResult, Metric, Prediction};
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
use spec::ms;
pub use spec::{PerProfile, Spec};
mod personality;
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
        ["smoke", "quick", "standard", "thorough"][*self as usize]
    }

    pub(crate) const ALL: [Profile; 4] = [
        Profile::Smoke,
        Profile::Quick,
        Profile::Standard,
        Profile::Thorough,
    ];

    /// Harness settings for this profile (the budget is set per measurement).
    pub(crate) fn harness(&self) -> HarnessConfig {
        // (shortest trial, trials, warm-up, calibration limit). Smoke's and quick's trials are
        // long against the clock's overhead, short against a time slice: most run undisturbed.
        const TRIALS: PerProfile<(Duration, usize, Duration, Duration)> = PerProfile::new(
            (Duration::from_micros(500), 7, ms(2), ms(50)),
            (ms(1), 15, ms(10), ms(200)),
            (ms(10), 31, ms(50), ms(1000)),
            (ms(20), 51, ms(100), ms(2000)),
        );
        let (min_trial, trials, warmup, cal) = TRIALS.get(*self);
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

    /// The most one experiment may lay out with `avail` bytes available (0: unknown): quick
    /// stays under 1 GiB or an eighth, to run beside real work; larger profiles take a quarter.
    pub(crate) fn memory_limit(&self, avail: u64) -> u64 {
        const MIB: u64 = 1 << 20;
        const SHARE: PerProfile<(u64, u64)> = PerProfile::new(
            (128 * MIB, 8),
            (768 * MIB, 8),
            (4096 * MIB, 4),
            (16384 * MIB, 4),
        );
        let (ceiling, share) = SHARE.get(*self);
        if avail == 0 {
            // Unknown: stay small rather than risk the machine.
            return ceiling.min(256 * MIB);
        }
        ceiling.min(avail / share)
    }

    /// The most a whole run may take on any machine: its experiments' ceilings sum below it.
    pub(crate) fn time_limit(&self) -> Duration {
        PerProfile::new(ms(15_000), ms(60_000), ms(900_000), ms(3_600_000)).get(*self)
    }

    /// Runs without `--repeat`: two give compare a run-to-run spread, which trials sharing one
    /// run's state cannot (docs/REPORTS.md); smoke is for tests and stays single.
    pub(crate) fn default_repeat(&self) -> usize {
        PerProfile::new(1, 2, 2, 2).get(*self)
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
    /// `Default`, usable in a `const`.
    pub const NONE: Needs = Needs {
        root: false,
        peer: false,
        remote_dir: false,
        disk_bytes: 0,
        min_cpus: 0,
    };

    pub(crate) fn describe(&self) -> String {
        let disk = crate::units::fmt_bytes(self.disk_bytes as f64) + " free disk";
        let cpus = format!("{} CPUs", self.min_cpus);
        let v: Vec<&str> = [
            (self.root, "root"),
            (self.peer, "a peer (loopback by default)"),
            (self.remote_dir, "--remote-dir"),
            (self.disk_bytes > 0, &disk),
            (self.min_cpus > 1, &cpus),
        ]
        .into_iter()
        .filter_map(|(needed, what)| needed.then_some(what))
        .collect();
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
    /// `--host-cache none`: the guest's sectors-read counter then proves a read reached storage.
    pub host_cache_none: bool,
}

/// Everything an experiment may use while it runs.
pub struct Context<'a> {
    pub profile: Profile,
    pub machine: &'a Machine,
    pub clock: &'a dyn Clock,
    /// The CPU single-threaded work is pinned to.
    pub cpu: usize,
    pub budget: Duration,
    pub earlier: &'a dyn EarlierResults,
    pub options: &'a RunOptions,
    /// Ticks of one empty `repeat` iteration.
    pub loop_ticks: f64,
    pub progress: &'a dyn Fn(&str),
    pub scratch_cell: &'a std::sync::OnceLock<crate::scratch::Scratch>,
    pub repetition: Repetition<'a>,
}

/// Which of the back-to-back runs of one experiment this is (`index` 0-based); on the
/// last one `before` holds the earlier runs' results for `Outcome::pool`.
#[derive(Clone, Copy)]
pub struct Repetition<'a> {
    pub index: usize,
    pub of: usize,
    pub before: &'a [ExperimentResult],
}

impl Repetition<'_> {
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

    /// As `harness`, for bodies that only compute: preempted trials are repeated.
    pub(crate) fn cpu_harness(&self, parts: usize) -> Harness<'_> {
        let cfg = self.profile.harness().for_budget(self.budget, parts);
        Harness::new(self.clock, cfg.cpu_only(), self.loop_ticks)
    }

    /// The run's scratch folder, made on first use (callers check `fs()` for tmpfs).
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

    /// The CPUs this run may use: the description's, else the process's affinity.
    pub(crate) fn allowed_cpus(&self) -> Vec<usize> {
        match &self.machine.cpu.allowed_cpus {
            a if a.is_empty() => crate::platform::allowed_cpus(),
            a => a.clone(),
        }
    }

    /// Core clock in GHz (cycles per ns), with where it came from.
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

    pub(crate) fn earlier_median(&self, experiment: &str, metric: &str) -> Option<f64> {
        self.earlier
            .metric(experiment, metric)
            .map(|m| m.summary.median)
    }
}

/// (experiment, metric) pairs read from earlier results.
pub(crate) type MetricReads = std::collections::BTreeSet<(String, String)>;

/// Metrics measured earlier in the run: `metric` of `experiment` when its status is ok.
pub trait EarlierResults {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&Metric>;
    fn not_ok(&self, _experiment: &str) -> Option<crate::results::Status> {
        None
    }
}

impl EarlierResults for Vec<ExperimentResult> {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&Metric> {
        self.iter()
            .find(|e| e.id == experiment && e.status == crate::results::Status::Ok)?
            .metric(metric)
    }
    fn not_ok(&self, experiment: &str) -> Option<crate::results::Status> {
        let e = self.iter().find(|e| e.id == experiment)?;
        (e.status != crate::results::Status::Ok).then_some(e.status)
    }
}

/// Earlier results that record every lookup and answer each with one stand-in, or none.
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

/// (experiment, metric, prediction) triples.
pub type Stated = Vec<(String, String, Prediction)>;

/// For the tests: every (experiment, metric) some `predict` reads and every prediction it
/// states, once per pass: `false` finds no earlier metric (fallbacks, withheld with a
/// reason), `true` finds all (branches that stop early without one).
pub fn predict_all(
    machine: &Machine,
    clock: &dyn Clock,
    options: &RunOptions,
    passes: &[bool],
) -> (MetricReads, Stated) {
    let scratch = std::sync::OnceLock::new();
    let stand_in = Outcome::default()
        .metric("stand-in", "", "", vec![1.0])
        .clone();
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
/// stated before it and premise checks after it. What it is is data (`spec`); what it
/// costs (`budget`, `default_repeat`) and does (`predict`, `run`) depend on the profile.
///
/// `predict` and `run` may: measure through `ctx.harness(parts)` (`ctx.cpu_harness` for
/// bodies that only compute), with its `stopwatch()` and `deadline(d)` for spans; read
/// `ctx.machine`, live counters through `machine`, and earlier metrics
/// (`ctx.earlier_median`); make files (only under `ctx.scratch()`), children, mappings and
/// sockets, and remove them before returning, on error too (only `net`'s loopback peer
/// lives until the run ends); report sub-steps with `ctx.progress`; record premises
/// (`Check::premise`: a failed one makes the result invalid) and sanity checks, and state
/// findings after `Outcome::pool` so that they quote the pooled figures; return
/// `Outcome::skipped(reason)`, saying what would enable it, or an error (failed).
///
/// They must never print, write outside the scratch folder or leave anything behind, read
/// a clock themselves (time comes from the harness, which tests drive with a
/// `MockClock`), call OS-specific items or read /proc, /sys or sysctl directly (that is
/// `platform` and `machine`), or panic (the runner records "internal error": a bug).
///
/// The runner owns the order (registry order) and selection, pinning to the measured
/// CPU, progress, the budget and its watchdog, repeats (the experiment pools them), the
/// sentinel around each run, calling `predict` before `run` and attaching predictions
/// and cycle counts, the status, and removing the scratch folder.
pub trait Experiment: Send + Sync {
    fn spec(&self) -> &Spec;
    /// Wall-time budget: the spec's table, or a function of the plan where it has none.
    fn budget(&self, profile: Profile) -> Duration {
        self.spec()
            .budget
            .map_or(Duration::ZERO, |b| b.get(profile))
    }
    fn default_repeat(&self, profile: Profile) -> usize {
        profile.default_repeat()
    }
    /// The budget of one run on one of `kinds` kinds of core: a per-core-kind experiment
    /// shares it out, so that a hybrid CPU does not lengthen the run.
    fn kind_budget(&self, profile: Profile, kinds: usize) -> Duration {
        let k = if self.spec().per_core_kind { kinds } else { 1 };
        self.budget(profile) / k.max(1) as u32
    }
    /// The most all default runs take (on every kind of core): what `osmeter list` states.
    fn ceiling(&self, profile: Profile) -> Duration {
        self.budget(profile) * self.default_repeat(profile) as u32
    }
    fn predict(&self, _ctx: &Context) -> Vec<(String, Prediction)> {
        Vec::new()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome>;
}

impl dyn Experiment + '_ {
    pub fn id(&self) -> &'static str {
        self.spec().id
    }
}

/// Every experiment, in run order: each may use the ones before it in its prediction
/// (memory's findings read mem.latency's DRAM figure; remote-read and contention fs.read's).
pub fn registry() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(cpu::timer::Timer),
        Box::new(cpu::loop_cost::LoopCost),
        Box::new(cpu::call::Call),
        Box::new(cpu::syscall::Syscall),
        Box::new(cpu::switch::Kind::Thread),
        Box::new(cpu::switch::Kind::Process),
        Box::new(cpu::core_to_core::CoreToCore),
        Box::new(cpu::thread_create::ThreadCreate),
        Box::new(cpu::process_create::ProcessCreate),
        Box::new(cpu::signal::Signal),
        Box::new(memory::latency::Latency),
        Box::new(memory::bandwidth::MemBandwidth),
        Box::new(memory::loaded_latency::LoadedLatency),
        Box::new(memory::pagefault::PageFault),
        Box::new(net::rtt::Rtt),
        Box::new(net::bandwidth::NetBandwidth),
        Box::new(net::connect::Connect),
        Box::new(fs::read::Read),
        Box::new(fs::remote_read::RemoteRead),
        Box::new(fs::contention::Contention),
        Box::new(fs::cache_size::CacheSize),
    ]
}

/// Experiments selected by `--only` and `--skip` globs; a glob that matches nothing errs.
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
        // An over-prediction names no cause: a part not paid in full and an input
        // measured high are both possible.
        assert!(over.contains("over-predicts"), "{over}");
        assert!(!over.contains("so the model"), "{over}");
        assert!(over.contains("not paid in full") && over.contains("measured high"));
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
