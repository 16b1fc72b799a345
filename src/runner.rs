//! Runs a selection of experiments: validates the request, sets up the clock and pinning,
//! runs each experiment within its budget (with a watchdog so none can hang), captures
//! failures and panics, and assembles the results document. It writes and prints
//! nothing: progress goes to a `Progress` observer, and `osmeter run` (commands::run)
//! writes the results folder, the reports and the history entry.

use crate::clock::Clock;
use crate::experiments::{self, Context, Experiment, Profile, RunOptions};
use crate::machine::{Machine, Topology};
use crate::platform;
use crate::results::{
    Cycles, ExperimentResult, PeerRecord, RecordedOptions, RunRecord, RunResults, Statistics,
    Status, Tool, SCHEMA_VERSION,
};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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
/// CPU; the caller's affinity is then restored (issue 11 item 8). With one allowed CPU
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

/// What the watchdog does when an experiment overruns its hard limit (given its id).
pub(crate) type OnOverrun = Arc<dyn Fn(&str) + Send + Sync>;

/// The real reaction to a hung experiment: nothing else can stop a thread that never
/// returns, so the run ends.
pub(crate) fn exit_on_overrun() -> OnOverrun {
    Arc::new(|id: &str| {
        eprintln!("osmeter: error: experiment {id} exceeded its hard time limit; aborting the run");
        std::process::exit(1);
    })
}

/// Watches the running experiment's hard limit from a thread of its own, so no
/// experiment can hang the run.
pub struct Watchdog {
    deadline_ms: Arc<AtomicU64>,
    current: Arc<Mutex<String>>,
    overran: Arc<AtomicBool>,
    affinity: Arc<Mutex<Option<Vec<usize>>>>,
    epoch: Instant,
}

impl Watchdog {
    pub fn start(on_overrun: OnOverrun) -> Watchdog {
        let w = Watchdog {
            deadline_ms: Arc::new(AtomicU64::new(u64::MAX)),
            current: Arc::new(Mutex::new(String::new())),
            overran: Arc::new(AtomicBool::new(false)),
            affinity: Arc::new(Mutex::new(None)),
            epoch: Instant::now(),
        };
        let (d, c, o, a, epoch) = (
            w.deadline_ms.clone(),
            w.current.clone(),
            w.overran.clone(),
            w.affinity.clone(),
            w.epoch,
        );
        std::thread::Builder::new()
            .name("osmeter-watchdog".into())
            .spawn(move || {
                if let Ok(mut a) = a.lock() {
                    *a = Some(platform::allowed_cpus());
                }
                loop {
                    std::thread::sleep(Duration::from_millis(100));
                    let at = d.load(Ordering::SeqCst);
                    if epoch.elapsed().as_millis() as u64 > at
                        && d.compare_exchange(at, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        o.store(true, Ordering::SeqCst);
                        let id = c.lock().map(|s| s.clone()).unwrap_or_default();
                        on_overrun(&id);
                    }
                }
            })
            .ok();
        w
    }
    fn arm(&self, id: &str, limit: Duration) {
        if let Ok(mut c) = self.current.lock() {
            *c = id.to_string();
        }
        self.overran.store(false, Ordering::SeqCst);
        let at = self.epoch.elapsed() + limit;
        self.deadline_ms
            .store(at.as_millis() as u64, Ordering::SeqCst);
    }
    /// Stops watching; true when the experiment overran since `arm`.
    fn disarm(&self) -> bool {
        self.deadline_ms.store(u64::MAX, Ordering::SeqCst);
        self.overran.load(Ordering::SeqCst)
    }
    /// The CPUs the watchdog thread may run on, as it read them through the platform
    /// layer when it started (None until it has).
    pub fn thread_affinity(&self) -> Option<Vec<usize>> {
        for _ in 0..100 {
            if let Some(a) = self.affinity.lock().ok().and_then(|a| a.clone()) {
                return Some(a);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// Hard limit for one experiment: generous over its budget, but finite.
pub(crate) fn hard_limit(budget: Duration) -> Duration {
    budget * 10 + Duration::from_secs(30)
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
            on_overrun: exit_on_overrun(),
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

/// A validated run, not started yet.
pub(crate) struct Plan<'a> {
    cfg: &'a RunConfig,
    selected: Vec<Box<dyn Experiment>>,
    hard_limit: fn(Duration) -> Duration,
    on_overrun: OnOverrun,
    topology: Option<Topology>,
    kind_clock: Option<fn(usize) -> Option<f64>>,
}

/// Checks the request against `registry` (selection, --cpu, the directories), so that
/// every usage error is found before anything is measured; the caller may add checks of
/// its own between this and `Plan::run`.
pub(crate) fn plan(cfg: &RunConfig, registry: Registry) -> Result<Plan<'_>, RunError> {
    let Registry {
        experiments: all,
        hard_limit,
        on_overrun,
        topology,
        kind_clock,
    } = registry;
    let selected = validate(cfg, all)?;
    if let Some(why) = platform::translated() {
        return Err(RunError::Runtime(anyhow::anyhow!(why)));
    }
    Ok(Plan {
        cfg,
        selected,
        hard_limit,
        on_overrun,
        topology,
        kind_clock,
    })
}

impl Plan<'_> {
    /// Measures the selected experiments and assembles the results document.
    pub(crate) fn run(self, progress: &dyn Progress) -> Result<RunResults, RunError> {
        measure(self, progress)
    }
}

/// The body of `Plan::run`.
fn measure(plan: Plan, progress: &dyn Progress) -> Result<RunResults, RunError> {
    let Plan {
        cfg,
        selected,
        hard_limit,
        on_overrun,
        topology,
        kind_clock,
    } = plan;
    let started = SystemTime::now();
    let t0 = Instant::now();

    let allowed = platform::allowed_cpus();
    let steal = crate::machine::StealMeter::start();
    let mut machine = Machine::gather();
    if let Some(t) = topology {
        machine.topology = t;
    }
    let cpu = machine
        .topology
        .choose_cpu(cfg.cpu, &allowed)
        .map_err(RunError::Usage)?;
    if machine.topology.chosen_cpu != Some(cpu) {
        let why = if cfg.cpu.is_some() {
            "requested with --cpu"
        } else {
            "the last allowed CPU (the topology's choice is not allowed)"
        };
        machine.topology.choose(cpu, why);
    }
    // One CPU per kind of core, for the experiments that report figures per kind.
    let kind_cpus = if selected.iter().any(|e| e.spec().per_core_kind) {
        machine.topology.per_kind_cpus(cpu, &allowed)
    } else {
        Vec::new()
    };
    let total_budget: Duration = selected
        .iter()
        .map(|e| e.budget(cfg.profile) * runs_of(cfg, e.as_ref(), kind_cpus.len()))
        .sum();
    progress.begin(total_budget);
    progress.message("gathering machine facts");
    // Helper threads start before pinning, away from the measured CPU.
    let watchdog = off_cpu(cpu, &allowed, || {
        progress.start_threads();
        Watchdog::start(on_overrun)
    });
    let pinning = platform::pin_to_cpu(cpu)
        .map_err(|e| RunError::Runtime(anyhow::anyhow!("cannot pin to CPU {cpu}: {e}")))?;
    if let Some(why) = pinning.reason() {
        machine.warnings.push(format!(
            "not pinned to CPU {cpu}: {why}; single-thread figures may include migrations"
        ));
    }
    let hw = machine.add_time_base();
    let mut loop_ticks = crate::harness::measure_loop_ticks(&hw, &cfg.profile.harness());
    // The overhead subtracted from every per-operation figure, in core cycles: every
    // current core takes one; a disturbed measurement is retaken (twice at most), the
    // fastest kept, and one still slow is named in every experiment's grade.
    let core_hz = machine.cpu.core_clock_hz;
    let loop_cycles = |t: f64| core_hz.map(|hz| t / hw.ticks_per_ns() * hz / 1e9);
    for _ in 0..2 {
        if loop_cycles(loop_ticks).is_some_and(|c| c >= crate::grade::ISSUE_SLOW_CYCLES) {
            loop_ticks = loop_ticks.min(crate::harness::measure_loop_ticks(
                &hw,
                &cfg.profile.harness(),
            ));
        }
    }
    // The sentinel at the clock the core was just measured at: what later readings are
    // judged against (the fastest of three, kernel by kernel).
    let reference =
        (0..3)
            .map(|_| crate::sentinel::measure())
            .reduce(|a, b| crate::results::Reading {
                chain_ns: a.chain_ns.min(b.chain_ns),
                issue_ns: a.issue_ns.min(b.issue_ns),
                chase_ns: a.chase_ns.min(b.chase_ns),
                copy_ns_per_byte: a.copy_ns_per_byte.min(b.copy_ns_per_byte),
                spread: a.spread.max(b.spread),
            });

    let kinds = other_kinds(
        &mut machine,
        &kind_cpus,
        cpu,
        &hw,
        cfg.profile,
        kind_clock,
        progress,
    );

    // The machine's warnings include the load average at start.
    let mut warnings = machine.warnings.clone();
    for w in &warnings {
        progress.line(&format!("warning: {w}"));
    }

    let scratch = std::sync::OnceLock::new();
    let host = crate::grade::RunState {
        machine: &machine,
        cpu,
        reference,
        loop_cycles: loop_cycles(loop_ticks),
        placement: pinning.reason().map(str::to_string),
        clock_source: crate::machine::conditions::clock_source(),
        user_hz: crate::machine::conditions::user_hz(),
    };
    let env = Env {
        cfg,
        machine: &machine,
        clock: &hw,
        cpu,
        loop_ticks,
        scratch: &scratch,
        progress,
        watchdog: &watchdog,
        hard_limit,
        placement: pinning.reason().map(str::to_string),
        host: &host,
        kinds: &kinds,
    };
    let results = run_selected(&selected, &env);
    drop(host);
    // Steal over the whole run, so that its figures can be judged against it.
    if let Some(report) = steal.finish() {
        machine.virtualization.steal_during_run = Some(report);
        if let Some(w) = report.warning() {
            progress.line(&format!("warning: {w}"));
            machine.warnings.push(w.clone());
            warnings.push(w);
        }
    }
    progress.finish();
    drop(scratch); // removes the scratch folder
    let _ = platform::set_affinity(&allowed);

    let run_results = RunResults {
        schema_version: SCHEMA_VERSION,
        tool: Tool {
            name: "osmeter".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at: crate::results::rfc3339(started),
        duration_s: t0.elapsed().as_secs_f64(),
        config: RunRecord {
            profile: Some(cfg.profile.name().into()),
            only: Some(cfg.only.clone()),
            skip: Some(cfg.skip.clone()),
            cpu: Some(cpu),
            repeat: Some(
                cfg.repeat
                    .unwrap_or_else(|| cfg.profile.default_repeat())
                    .max(1),
            ),
            options: Some(recorded_options(&cfg.options)),
            peer: Some(peer_identity(&cfg.options)),
            statistics: Some(Statistics {
                outlier_rule: Some(crate::stats::OUTLIER_RULE.into()),
                ci_method: Some(crate::stats::CI_METHOD.into()),
                harness: Some(format!("{:?}", cfg.profile.harness())),
                ..Default::default()
            }),
            ..Default::default()
        },
        machine,
        warnings,
        experiments: results,
        findings: Vec::new(),
    };
    let mut run_results = run_results;
    run_results.findings = crate::findings::compute(&run_results);
    Ok(run_results)
}

/// The selected experiments, after every usage error is found (before anything is
/// measured or printed).
fn validate(
    cfg: &RunConfig,
    all: Vec<Box<dyn Experiment>>,
) -> Result<Vec<Box<dyn Experiment>>, RunError> {
    let selected = experiments::select(all, &cfg.only, &cfg.skip).map_err(RunError::Usage)?;
    if cfg.cpu.is_some() {
        Topology::default()
            .choose_cpu(cfg.cpu, &platform::allowed_cpus())
            .map_err(RunError::Usage)?;
    }
    for (flag, dir) in [
        ("--scratch-dir", &cfg.options.scratch_dir),
        ("--remote-dir", &cfg.options.remote_dir),
    ] {
        if let Some(d) = dir {
            check_writable_dir(flag, d)?;
        }
    }
    Ok(selected)
}

/// Runs of `exp`: `--repeat` when given, else the experiment's default for the profile.
fn repeats(cfg: &RunConfig, exp: &dyn Experiment) -> usize {
    cfg.repeat
        .unwrap_or_else(|| exp.default_repeat(cfg.profile))
        .max(1)
}

/// Budgets `exp` takes in all: its repeats, times the kinds of core it runs on.
fn runs_of(cfg: &RunConfig, exp: &dyn Experiment, kinds: usize) -> u32 {
    let k = if exp.spec().per_core_kind {
        kinds.max(1)
    } else {
        1
    };
    (repeats(cfg, exp) * k) as u32
}

/// A kind of core other than the run's CPU's, where per-kind experiments run again
/// (docs/METHODOLOGY.md, "Core kinds"): its CPU, and the machine as its experiments see
/// it (that CPU chosen, so its caches and partners are that kind's; its own core clock).
pub(crate) struct KindRun {
    pub kind: String,
    pub cpu: usize,
    pub suffix: String,
    pub machine: Machine,
    /// The harness's empty-loop cost, measured on `cpu`.
    pub loop_ticks: f64,
}

/// The kinds of `kind_cpus` after the first (the run's own), each with its core clock and
/// loop cost measured on its CPU; a kind whose CPU cannot be pinned is left out with a
/// warning (its figures would come from wherever the scheduler put the thread). Records
/// every kind's CPU and clock in `machine.cpu.core_kinds`; leaves the thread on `main`.
fn other_kinds(
    machine: &mut Machine,
    kind_cpus: &[crate::machine::KindCpu],
    main: usize,
    hw: &dyn crate::clock::Clock,
    profile: Profile,
    stand_in: Option<fn(usize) -> Option<f64>>,
    progress: &dyn Progress,
) -> Vec<KindRun> {
    let mut out = Vec::new();
    for k in kind_cpus.iter().skip(1) {
        let kind = k.kind.clone().unwrap_or_default();
        progress.message(&format!("measuring the core clock of the {kind} cores"));
        let pinned = platform::pin_to_cpu(k.cpu);
        let why = match &pinned {
            Err(e) => Some(e.to_string()),
            Ok(p) => p.reason().map(str::to_string),
        };
        if let Some(why) = why {
            machine.warnings.push(format!(
                "no figures of the {kind} cores: this thread cannot be pinned to CPU {} ({why})",
                k.cpu
            ));
            continue;
        }
        let core = match stand_in {
            Some(f) => f(k.cpu).map(|hz| crate::clock::CoreClock { hz, imul_hz: None }),
            None => crate::clock::measure_core_clock(),
        };
        let loop_ticks = crate::harness::measure_loop_ticks(hw, &profile.harness());
        if let Some(c) = &core {
            let max_hz = machine
                .topology
                .place(k.cpu)
                .and_then(|p| p.max_mhz)
                .map(|m| m * 1e6);
            for w in c.warnings(max_hz) {
                machine
                    .warnings
                    .push(format!("{kind} cores (CPU {}): {w}", k.cpu));
            }
        }
        let mut m = machine.clone();
        m.topology.choose(
            k.cpu,
            &format!("the {kind} cores' CPU for per-kind figures: {}", k.reason),
        );
        m.cpu.core_clock_hz = core.map(|c| c.hz);
        out.push(KindRun {
            kind,
            cpu: k.cpu,
            suffix: k.suffix.clone(),
            machine: m,
            loop_ticks,
        });
    }
    let _ = platform::pin_to_cpu(main);
    if !out.is_empty() {
        let mut v = vec![crate::machine::KindClock {
            kind: kind_cpus[0].kind.clone().unwrap_or_default(),
            cpu: main,
            suffix: String::new(),
            core_clock_hz: machine.cpu.core_clock_hz,
        }];
        v.extend(out.iter().map(|k| crate::machine::KindClock {
            kind: k.kind.clone(),
            cpu: k.cpu,
            suffix: k.suffix.clone(),
            core_clock_hz: k.machine.cpu.core_clock_hz,
        }));
        machine.cpu.core_kinds = v.clone();
        for k in &mut out {
            k.machine.cpu.core_kinds = v.clone();
        }
    }
    out
}

/// A measured input's source ("measured: cpu.syscall getppid") as another kind's
/// prediction read it: a per-kind experiment's metric with that kind's suffix.
fn kind_source(source: &str, per_kind: &[&'static str], suffix: &str) -> String {
    let Some((exp, metric)) = source
        .strip_prefix("measured: ")
        .and_then(|r| r.split_once(' '))
    else {
        return source.to_string();
    };
    if per_kind.contains(&exp) && !metric.contains(' ') {
        format!("measured: {exp} {metric}{suffix}")
    } else {
        source.to_string()
    }
}

/// Earlier results as a run on another kind of core reads them: a per-kind experiment's
/// metric is that kind's (suffixed) one or none, never the other kind's.
struct KindEarlier<'a> {
    results: &'a [ExperimentResult],
    suffix: &'a str,
    per_kind: &'a [&'static str],
}

impl crate::experiments::EarlierResults for KindEarlier<'_> {
    fn metric(&self, experiment: &str, metric: &str) -> Option<&crate::results::Metric> {
        let e = self
            .results
            .iter()
            .find(|e| e.id == experiment && e.status == Status::Ok)?;
        if self.per_kind.contains(&experiment) {
            e.metric(&format!("{metric}{}", self.suffix))
        } else {
            e.metric(metric)
        }
    }
}

/// Adds one other kind's merged result to the run's own (`res`): its metrics (and the
/// findings' references to them) named with the kind's suffix, its series, checks, findings
/// and notes labelled with the kind, and
/// a note saying where each set ran and at which clock. An invalid or unverified kind
/// makes the whole result so (as a repetition does); a kind that failed or was skipped
/// adds only a note, having no figures.
fn add_kind(
    res: &mut ExperimentResult,
    mut other: ExperimentResult,
    k: &KindRun,
    main: &Machine,
    per_kind: &[&'static str],
) {
    let label = format!("{} core (CPU {})", k.kind, k.cpu);
    res.duration_s += other.duration_s;
    if !matches!(
        other.status,
        Status::Ok | Status::Unverified | Status::Invalid
    ) {
        res.notes.push(format!(
            "{label}: {}{}; no {} figures",
            other.status.as_str(),
            other
                .reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            k.kind
        ));
        return;
    }
    let ghz = |hz: Option<f64>| {
        hz.map(|h| format!("{:.2} GHz", h / 1e9))
            .unwrap_or_else(|| "unknown".into())
    };
    let main_kind = main
        .cpu
        .core_kinds
        .first()
        .map(|c| c.kind.clone())
        .unwrap_or_default();
    let names: Vec<String> = other.metrics.iter().map(|m| m.name.clone()).collect();
    res.notes.push(format!(
        "figures per core kind: the unsuffixed ones ran on CPU {} ({main_kind} core, core clock {}), \
         those ending in {} on CPU {} ({} core, core clock {} measured there); each is converted to \
         cycles at its own core's clock and compared with its own kind's caches",
        main.topology.chosen_cpu.map_or("?".into(), |c| c.to_string()),
        ghz(main.cpu.core_clock_hz),
        k.suffix,
        k.cpu,
        k.kind,
        ghz(k.machine.cpu.core_clock_hz)
    ));
    let rename = |n: &str| {
        if names.iter().any(|m| m == n) {
            format!("{n}{}", k.suffix)
        } else {
            n.to_string()
        }
    };
    for m in &mut other.metrics {
        m.name = format!("{}{}", m.name, k.suffix);
        m.description = format!("{} (on a {} core, CPU {})", m.description, k.kind, k.cpu);
        // Measured inputs were read through KindEarlier: name the metric actually read.
        for i in m.prediction.iter_mut().flat_map(|p| p.inputs.values_mut()) {
            i.source = kind_source(&i.source, per_kind, &k.suffix);
        }
    }
    // Series names lead with the kind: a legend cuts a name at "_vs_".
    for s in &mut other.series {
        s.name = format!("{} core: {}", k.kind, s.name);
    }
    for c in &mut other.checks {
        c.name = format!("{label}: {}", c.name);
    }
    for f in &mut other.findings {
        f.text = format!("On the {label}: {}", f.text);
        f.from = f.from.iter().map(|n| rename(n)).collect();
    }
    res.metrics.append(&mut other.metrics);
    res.series.append(&mut other.series);
    res.checks.append(&mut other.checks);
    res.findings.append(&mut other.findings);
    res.notes
        .extend(other.notes.iter().map(|n| format!("{label}: {n}")));
    // The worse status wins: an invalid kind's figures are not the run's to stand by.
    let rank = |s: Status| match s {
        Status::Ok => 0,
        Status::Unverified => 1,
        _ => 2,
    };
    if rank(other.status) > rank(res.status) && res.status.measured() {
        res.status = other.status;
        res.reason = other.reason.map(|r| format!("{label}: {r}"));
    }
}

/// Each selected experiment in turn, `--repeat` times, within its budget and hard limit,
/// with the sentinel just before and just after on the pinned CPU.
fn run_selected(selected: &[Box<dyn Experiment>], env: &Env) -> Vec<ExperimentResult> {
    let (cfg, progress, cpu) = (env.cfg, env.progress, env.cpu);
    let mut results: Vec<ExperimentResult> = Vec::new();
    let n = selected.len();
    let per_kind: Vec<&'static str> = selected
        .iter()
        .filter(|e| e.spec().per_core_kind)
        .map(|e| e.id())
        .collect();
    for (i, exp) in selected.iter().enumerate() {
        let repeat = repeats(cfg, exp.as_ref());
        let budget = exp.budget(cfg.profile);
        // The other kinds of core this experiment runs on too, each repetition.
        let kinds: &[KindRun] = if exp.spec().per_core_kind {
            env.kinds
        } else {
            &[]
        };
        let mut kind_reps: Vec<Vec<ExperimentResult>> = kinds.iter().map(|_| Vec::new()).collect();
        let mut reps = Vec::with_capacity(repeat);
        let mut observed = Vec::with_capacity(repeat);
        let siblings = env.host.siblings();
        for r in 0..repeat {
            let run_of = if repeat > 1 {
                format!(" (run {}/{repeat})", r + 1)
            } else {
                String::new()
            };
            progress.message(&format!("[{}/{n}] {}{run_of}", i + 1, exp.id()));
            // Experiments may move threads around; every one starts pinned.
            let _ = platform::pin_to_cpu(cpu);
            let host_before = crate::machine::conditions::sample(cpu, &siblings);
            let before = crate::sentinel::measure();
            let limit = (env.hard_limit)(budget);
            env.watchdog.arm(exp.id(), limit);
            // The last run pools the earlier ones (Outcome::pool).
            let rep = crate::experiments::Repetition {
                index: r,
                of: repeat,
                before: if r + 1 == repeat { &reps } else { &[] },
            };
            let mut res = run_one(exp.as_ref(), env, budget, &results, rep);
            if env.watchdog.disarm() {
                // Only reached when the overrun reaction returns (the real one exits).
                res.status = Status::Failed;
                res.reason = Some(format!(
                    "exceeded its hard time limit of {:.1} s",
                    limit.as_secs_f64()
                ));
            }
            for (k, kr) in kinds.iter().enumerate() {
                progress.message(&format!(
                    "[{}/{n}] {} on the {} cores{run_of}",
                    i + 1,
                    exp.id(),
                    kr.kind
                ));
                let _ = platform::pin_to_cpu(kr.cpu);
                env.watchdog.arm(exp.id(), limit);
                let rep = crate::experiments::Repetition {
                    index: r,
                    of: repeat,
                    before: if r + 1 == repeat { &kind_reps[k] } else { &[] },
                };
                let earlier = KindEarlier {
                    results: &results,
                    suffix: &kr.suffix,
                    per_kind: &per_kind,
                };
                let kenv = Env {
                    machine: &kr.machine,
                    cpu: kr.cpu,
                    loop_ticks: kr.loop_ticks,
                    // other_kinds kept only kinds whose CPU this thread can be pinned to.
                    placement: None,
                    ..*env
                };
                let mut kres = run_one(exp.as_ref(), &kenv, budget, &earlier, rep);
                if env.watchdog.disarm() {
                    kres.status = Status::Failed;
                    kres.reason = Some(format!(
                        "exceeded its hard time limit of {:.1} s",
                        limit.as_secs_f64()
                    ));
                }
                kind_reps[k].push(kres);
            }
            let _ = platform::pin_to_cpu(cpu);
            let after = crate::sentinel::measure();
            let host_after = crate::machine::conditions::sample(cpu, &siblings);
            res.sentinel = Some(crate::results::BeforeAfter { before, after });
            observed.push(host_conditions(
                env.host,
                &mut res,
                &host_before,
                &host_after,
            ));
            reps.push(res);
        }
        let observed = kept_observations(&reps, observed);
        let mut res = merge_repeats(reps);
        for (kr, kreps) in kinds.iter().zip(kind_reps) {
            add_kind(&mut res, merge_repeats(kreps), kr, env.machine, &per_kind);
        }
        res.grade = env.host.grade(&res, &observed, exp.spec().subtracts_loop);
        progress.advance(budget * runs_of(cfg, exp.as_ref(), 1 + kinds.len()));
        let mut line = format!(
            "[{}/{n}] {} {} ({:.1} s)",
            i + 1,
            exp.id(),
            res.status.as_str(),
            res.duration_s
        );
        if let Some(r) = &res.reason {
            line.push_str(&format!(": {r}"));
        }
        progress.line(&line);
        results.push(res);
    }
    results
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
    let names: Vec<String> = res.metrics.iter().map(|m| m.name.clone()).collect();
    let seen = host.observe(before, after, &sentinel, &names);
    for c in seen
        .iter()
        .filter(|c| c.level == crate::results::GradeLevel::C)
    {
        res.notes.push(format!("host condition: {}", c.text));
    }
    seen
}

/// Which host the network experiments measured against: the name given for it and the
/// address it resolved to (None without `--peer`: the loopback peer).
fn peer_identity(o: &RunOptions) -> Option<PeerRecord> {
    let spec = o.peer.as_deref()?;
    let address = crate::peer::client::resolve_peer(spec)
        .map(|a| a.to_string())
        .ok();
    Some(PeerRecord {
        name: Some(
            o.peer_name
                .clone()
                .unwrap_or_else(|| spec.trim().to_string()),
        ),
        spec: Some(spec.trim().to_string()),
        address: Some(address),
        ..Default::default()
    })
}

/// The options as the document records them: all but the peer token.
fn recorded_options(o: &RunOptions) -> RecordedOptions {
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
    RecordedOptions {
        peer: Some(o.peer.clone()),
        host_name: o.host_name.clone(),
        peer_name: o.peer_name.clone(),
        remote_dir: Some(path(&o.remote_dir)),
        scratch_dir: Some(path(&o.scratch_dir)),
        drop_caches: Some(o.drop_caches),
        ..Default::default()
    }
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
    for (name, p) in predictions {
        if let Some(m) = result.metrics.iter_mut().find(|m| m.name == name) {
            match p.withheld {
                Some(why) => result
                    .notes
                    .push(format!("no prediction for {name}: {why}")),
                None => m.prediction = Some(p),
            }
        }
    }
    if let Some(why) = &env.placement {
        if !result.metrics.is_empty() {
            let names: Vec<&str> = result.metrics.iter().map(|m| m.name.as_str()).collect();
            result.notes.push(format!(
                "placement not controlled for {}: {why}{}",
                names.join(", "),
                if env.machine.topology.hybrid() {
                    "; a figure may come from an efficiency core"
                } else {
                    ""
                }
            ));
        }
    }
    add_cycles(&mut result, env.machine);
    judge(result)
}

/// Names the run that checks and series describe when an experiment runs more than once:
/// all of them on an earlier run; on the last, those made before `Outcome::pool` (after
/// it they describe the pooled runs and keep their names).
fn label_run(
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
        s.name = format!("{} (run {k} of {})", s.name, rep.of);
    }
}

fn empty_result(exp: &dyn Experiment) -> ExperimentResult {
    let meta = exp.spec();
    ExperimentResult::new(meta.id, meta.title, meta.method)
}

fn failed(mut result: ExperimentResult, reason: String) -> ExperimentResult {
    result.status = Status::Failed;
    result.reason = Some(reason);
    result
}

/// Every time metric in core and counter cycles, where those clocks are known.
fn add_cycles(result: &mut ExperimentResult, machine: &Machine) {
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
fn judge(mut result: ExperimentResult) -> ExperimentResult {
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
fn kept_observations(
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
fn label_notes<'a>(runs: impl Iterator<Item = &'a ExperimentResult> + Clone) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Check;
    use crate::units::fmt_ns;

    fn with(checks: Vec<Check>) -> ExperimentResult {
        let mut r = ExperimentResult {
            checks,
            ..ExperimentResult::new("x.y", "t", "")
        };
        let mut o = crate::experiments::Outcome::default();
        o.metric("m", "ns", "", vec![1.0, 2.0]);
        r.metrics = o.metrics;
        judge(r)
    }

    /// A note every repetition made (a withheld prediction's reason) is kept once and
    /// unlabelled; one not made in every repetition keeps its run's label.
    #[test]
    fn notes_made_in_every_repetition_are_kept_once() {
        let run = |notes: &[&str]| ExperimentResult {
            notes: notes.iter().map(|n| n.to_string()).collect(),
            ..ExperimentResult::new("x.y", "t", "")
        };
        let merged = merge_repeats(vec![
            run(&["no prediction for m: why", "host condition: a"]),
            run(&["no prediction for m: why", "host condition: b"]),
        ]);
        assert_eq!(
            merged.notes,
            [
                "no prediction for m: why",
                "run 1: host condition: a",
                "run 2: host condition: b"
            ]
        );
        // The same condition seen in both runs: once, true of both.
        let merged = merge_repeats(vec![run(&["x"]), run(&["x", "y"])]);
        assert_eq!(merged.notes, ["x", "run 2: y"]);
    }

    /// A run that was not measured is the result shown: the host conditions graded are
    /// the ones seen around it, each with its note, not those of a run whose figures went.
    #[test]
    fn a_kept_invalid_run_is_graded_by_what_was_seen_around_it() {
        use crate::results::{GradeLevel, GradeReason};
        let seen = |t: &str| {
            vec![GradeReason {
                code: "issue_rate".into(),
                level: GradeLevel::C,
                text: t.into(),
            }]
        };
        let run = |status: Status, note: &str| ExperimentResult {
            status,
            notes: vec![format!("host condition: {note}")],
            ..ExperimentResult::new("x.y", "t", "")
        };
        for bad in [0, 1] {
            let mut reps = vec![run(Status::Ok, "a"), run(Status::Ok, "b")];
            reps[bad] = run(Status::Invalid, ["a", "b"][bad]);
            let observed = kept_observations(&reps, vec![seen("a"), seen("b")]);
            let merged = merge_repeats(reps);
            assert_eq!(observed.len(), 1);
            let text = &observed[0][0].text;
            assert_eq!(text, ["a", "b"][bad]);
            assert!(merged.notes.iter().any(|n| n.ends_with(text.as_str())));
        }
        // All measured: every repetition's observations.
        let reps = vec![run(Status::Ok, "a"), run(Status::Ok, "b")];
        assert_eq!(
            kept_observations(&reps, vec![seen("a"), seen("b")]).len(),
            2
        );
    }

    #[test]
    fn an_unverifiable_premise_is_unverified_and_a_failed_one_wins() {
        let ok = Check::premise("a", true, "fine");
        let unv = Check::unverified("device counter", "no block device");
        let bad = Check::premise("b", false, "broken");
        assert_eq!(with(vec![ok.clone()]).status, Status::Ok);
        let r = with(vec![ok.clone(), unv.clone()]);
        assert_eq!(r.status, Status::Unverified);
        assert!(r
            .reason
            .unwrap()
            .contains("device counter: no block device"));
        let r = with(vec![unv, bad]);
        assert_eq!(r.status, Status::Invalid);
        assert!(!r.reason.unwrap().contains("device counter"));
        // Serialized as "unverified"; old spellings unchanged.
        assert_eq!(
            serde_json::to_string(&Status::Unverified).unwrap(),
            "\"unverified\""
        );
        assert_eq!(
            serde_json::to_string(&Status::Invalid).unwrap(),
            "\"invalid\""
        );
        let c: Check = serde_json::from_str(r#"{"name":"n","passed":false,"detail":"d"}"#).unwrap();
        assert!(c.premise && !c.unverified);
        assert!(!serde_json::to_string(&ok).unwrap().contains("unverified"));
    }

    #[test]
    fn another_kinds_measured_inputs_name_its_own_metrics() {
        let pk = ["cpu.syscall"];
        assert_eq!(
            kind_source("measured: cpu.syscall getppid", &pk, "_efficiency"),
            "measured: cpu.syscall getppid_efficiency"
        );
        // Not per-kind, or not a measured input: unchanged.
        for s in [
            "measured: mem.bandwidth copy_1t",
            "machine: effective core clock (dependent add chain)",
        ] {
            assert_eq!(kind_source(s, &pk, "_efficiency"), s);
        }
    }

    /// Issue 21 item 2, with real experiments as wired: a made-up two-kind topology over
    /// two CPUs of this machine gives every metric of a per-kind experiment twice, the
    /// second set suffixed and converted to cycles at the clock measured on its own CPU.
    #[test]
    fn real_experiments_report_both_kinds_each_at_its_own_clock() {
        use crate::machine::CpuPlace;
        let allowed = platform::allowed_cpus();
        if allowed.len() < 2 {
            eprintln!("SKIPPED real_experiments_report_both_kinds: needs two allowed CPUs");
            return;
        }
        let place = |cpu: usize, kind: &str| CpuPlace {
            cpu,
            core: Some(cpu),
            kind: Some(kind.into()),
            ..Default::default()
        };
        let topology = Topology {
            cpus: vec![
                place(allowed[0], "efficiency"),
                place(allowed[1], "performance"),
            ],
            allowed: allowed.clone(),
            chosen_cpu: Some(allowed[1]),
            source: "test".into(),
            ..Default::default()
        };
        let cfg = RunConfig {
            profile: Profile::Smoke,
            only: vec!["cpu.loop,cpu.syscall,cpu.core-to-core".into()],
            skip: vec![],
            cpu: None,
            options: RunOptions::default(),
            repeat: Some(1),
        };
        let registry = Registry {
            topology: Some(topology),
            // A clock the run's CPU cannot have: each set must be converted at its own.
            kind_clock: Some(|_| Some(1.0e9)),
            ..Registry::real()
        };
        let r = run_with(&cfg, registry, &Silent).expect("the run completes");
        let k = &r.machine.cpu.core_kinds;
        assert_eq!(k.len(), 2, "{k:?}");
        for id in ["cpu.loop", "cpu.syscall"] {
            let e = r.experiment(id).unwrap();
            if !e.status.measured() {
                eprintln!("{id} is {}: {:?}", e.status.as_str(), e.reason);
                continue;
            }
            let own: Vec<&crate::results::Metric> = e
                .metrics
                .iter()
                .filter(|m| !m.name.ends_with("_efficiency"))
                .collect();
            assert!(!own.is_empty(), "{id}");
            for m in own {
                let twin = e
                    .metric(&format!("{}_efficiency", m.name))
                    .unwrap_or_else(|| panic!("{id}: no {}_efficiency", m.name));
                for (x, hz) in [(m, k[0].core_clock_hz), (twin, k[1].core_clock_hz)] {
                    let (Some(c), Some(hz)) = (x.cycles.as_ref().and_then(|c| c.core), hz) else {
                        continue;
                    };
                    let want = x.summary.median * hz / 1e9;
                    assert!((c - want).abs() <= 1e-9 * want.abs(), "{id} {}", x.name);
                }
            }
        }
        // Not per-kind: today's names only.
        let c2c = r.experiment("cpu.core-to-core").unwrap();
        assert!(c2c.metrics.iter().all(|m| !m.name.contains("efficiency")));
    }

    /// Issue 20 item 2, with real experiments: a default (two-run) quick run's findings
    /// quote the pooled medians the table shows, and each metric keeps both runs' own.
    #[test]
    fn a_two_run_quick_runs_findings_quote_the_tables_figures() {
        let cfg = RunConfig {
            profile: Profile::Quick,
            only: vec!["cpu.syscall,cpu.call,cpu.thread-switch".into()],
            skip: vec![],
            cpu: None,
            options: RunOptions::default(),
            repeat: None,
        };
        let r = run(&cfg, &Silent).expect("the run completes");
        let quotes = |id: &str, metrics: &[&str]| {
            let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
            if e.status != Status::Ok {
                eprintln!(
                    "{id} is {}: {:?} (no findings to check)",
                    e.status.as_str(),
                    e.reason
                );
                return;
            }
            let text: String = e.findings.iter().map(|f| f.text.clone()).collect();
            for name in metrics {
                let m = e.metric(name).unwrap_or_else(|| panic!("{id} {name}"));
                assert_eq!(m.runs.len(), 2, "{id} {name}: both runs' medians kept");
                let pooled = fmt_ns(m.summary.median);
                assert!(
                    text.contains(&pooled),
                    "{id}: {pooled} ({name}) not in {text}"
                );
            }
        };
        quotes("cpu.syscall", &["getppid", "clock_gettime_vdso"]);
        // per_argument is quoted only when it stands beyond noise (the call finding's gate).
        quotes("cpu.call", &["args_0"]);
        quotes(
            "cpu.thread-switch",
            &["switch", "pipe_round_trip_same_cpu", "pipe_cost"],
        );
    }
}
