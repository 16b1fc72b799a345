//! Runs a selection of experiments: validates the request, sets up the clock and pinning,
//! runs each experiment within its budget (with a watchdog so none can hang), captures
//! failures and panics, and assembles the results document.

use crate::clock::{self, Clock};
use crate::experiments::{self, Context, Experiment, Outcome, Profile, RunOptions};
use crate::machine::{Machine, Topology};
use crate::platform;
use crate::results::{Cycles, ExperimentResult, RunResults, Status, Tool, SCHEMA_VERSION};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// What `osmeter run` was asked to do.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub profile: Profile,
    pub only: Vec<String>,
    pub skip: Vec<String>,
    pub cpu: Option<usize>,
    /// Parent folder of the results folder.
    pub out: PathBuf,
    pub write_results: bool,
    pub quiet: bool,
    pub no_history: bool,
    pub options: RunOptions,
    /// Runs of each experiment (`--repeat`), back to back, merged into one result.
    pub repeat: usize,
}

/// Errors of a run: usage errors exit 2, runtime errors exit 1.
#[derive(Debug)]
pub enum RunError {
    Usage(String),
    Runtime(anyhow::Error),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Usage(s) => write!(f, "{s}"),
            RunError::Runtime(e) => write!(f, "{e:#}"),
        }
    }
}

/// A finished run and where it was written.
pub struct RunOutput {
    pub results: RunResults,
    pub folder: Option<PathBuf>,
}

/// The CPU to pin single-threaded work to: the requested one (validated), else the one
/// the topology chose (a performance core, not CPU 0's core when another is allowed),
/// else the last allowed CPU.
pub fn choose_cpu(requested: Option<usize>, topology: &Topology) -> Result<usize, RunError> {
    let allowed = platform::allowed_cpus();
    match requested {
        Some(c) if allowed.contains(&c) => Ok(c),
        Some(c) => Err(RunError::Usage(format!(
            "--cpu {c}: not a CPU this process may use (allowed: {})",
            allowed
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ))),
        None => Ok(topology
            .chosen_cpu
            .filter(|c| allowed.contains(c))
            .unwrap_or(*allowed.last().unwrap_or(&0))),
    }
}

/// Checks that the results parent folder can hold a new folder, before measuring.
pub fn check_out_dir(out: &Path) -> Result<(), RunError> {
    if out.exists() && !out.is_dir() {
        return Err(RunError::Usage(format!(
            "--out {}: exists and is not a directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| RunError::Usage(format!("--out {}: cannot create: {e}", out.display())))?;
    let probe = out.join(format!(".osmeter-write-test-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(RunError::Usage(format!(
            "--out {}: not writable: {e}",
            out.display()
        ))),
    }
}

/// An existing directory this process may create files in (checked with access(2), so
/// nothing is written to find out).
pub fn check_writable_dir(flag: &str, d: &Path) -> Result<(), RunError> {
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

/// Progress display: a bar on a terminal, plain lines otherwise, nothing when quiet.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
}

impl Progress {
    fn new(quiet: bool, total_budget: Duration) -> Progress {
        if quiet {
            return Progress {
                bar: None,
                plain: false,
            };
        }
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total_budget.as_millis() as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {percent:>3}% ETA {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            Progress {
                bar: Some(bar),
                plain: false,
            }
        } else {
            Progress {
                bar: None,
                plain: true,
            }
        }
    }
    fn message(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }
    fn line(&self, msg: &str) {
        if let Some(b) = &self.bar {
            // On a terminal, lines fit its width like the summary does.
            let w = crate::report::terminal::terminal_width() as usize;
            b.println(crate::report::terminal::wrap(msg, w, "", "    ").trim_end());
        } else if self.plain {
            eprintln!("{msg}");
        }
    }
    fn advance(&self, by: Duration) {
        if let Some(b) = &self.bar {
            b.inc(by.as_millis() as u64);
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Kills the run when an experiment overruns its hard limit, so no experiment can hang.
struct Watchdog {
    deadline_ms: Arc<AtomicU64>,
    current: Arc<std::sync::Mutex<String>>,
    epoch: Instant,
}

impl Watchdog {
    fn start() -> Watchdog {
        let deadline_ms = Arc::new(AtomicU64::new(u64::MAX));
        let current = Arc::new(std::sync::Mutex::new(String::new()));
        let epoch = Instant::now();
        let (d, c) = (deadline_ms.clone(), current.clone());
        std::thread::Builder::new()
            .name("osmeter-watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(100));
                if epoch.elapsed().as_millis() as u64 > d.load(Ordering::SeqCst) {
                    let id = c.lock().map(|s| s.clone()).unwrap_or_default();
                    eprintln!("osmeter: error: experiment {id} exceeded its hard time limit; aborting the run");
                    std::process::exit(1);
                }
            })
            .ok();
        Watchdog {
            deadline_ms,
            current,
            epoch,
        }
    }
    fn arm(&self, id: &str, limit: Duration) {
        if let Ok(mut c) = self.current.lock() {
            *c = id.to_string();
        }
        let at = self.epoch.elapsed() + limit;
        self.deadline_ms
            .store(at.as_millis() as u64, Ordering::SeqCst);
    }
    fn disarm(&self) {
        self.deadline_ms.store(u64::MAX, Ordering::SeqCst);
    }
}

/// Hard limit for one experiment: generous over its budget, but finite.
fn hard_limit(budget: Duration) -> Duration {
    budget * 10 + Duration::from_secs(30)
}

/// Runs the configured experiments.
pub fn run(cfg: &RunConfig) -> Result<RunOutput, RunError> {
    let selected = experiments::select(experiments::registry(), &cfg.only, &cfg.skip)
        .map_err(RunError::Usage)?;
    // A bad --cpu is a usage error found before anything is measured.
    if cfg.cpu.is_some() {
        choose_cpu(cfg.cpu, &Topology::default())?;
    }
    // Validate --scratch-dir and --remote-dir before measuring anything.
    for (flag, dir) in [
        ("--scratch-dir", &cfg.options.scratch_dir),
        ("--remote-dir", &cfg.options.remote_dir),
    ] {
        if let Some(d) = dir {
            check_writable_dir(flag, d)?;
        }
    }
    if cfg.write_results {
        check_out_dir(&cfg.out)?;
    }
    // Every usage error is found before anything is measured or printed.
    if let Some(d) = &cfg.options.scratch_dir {
        if !d.is_dir() {
            return Err(RunError::Usage(format!(
                "--scratch-dir {}: not an existing directory",
                d.display()
            )));
        }
    }
    let started = SystemTime::now();
    let t0 = Instant::now();
    let total_budget: Duration = selected
        .iter()
        .map(|e| e.budget(cfg.profile) * cfg.repeat.max(1) as u32)
        .sum();
    let progress = Progress::new(cfg.quiet, total_budget);
    progress.message("gathering machine facts");

    let allowed = platform::allowed_cpus();
    let steal = crate::machine::StealMeter::start();
    let mut machine = Machine::gather();
    let cpu = choose_cpu(cfg.cpu, &machine.topology)?;
    if machine.topology.chosen_cpu != Some(cpu) {
        let why = if cfg.cpu.is_some() {
            "requested with --cpu"
        } else {
            "the last allowed CPU (the topology's choice is not allowed)"
        };
        machine.topology.choose(cpu, why);
    }
    let pinning = platform::pin_to_cpu(cpu)
        .map_err(|e| RunError::Runtime(anyhow::anyhow!("cannot pin to CPU {cpu}: {e}")))?;
    if let Some(why) = pinning.reason() {
        machine.warnings.push(format!(
            "not pinned to CPU {cpu}: {why}; single-thread figures may include migrations"
        ));
    }
    let (hw, clock_info) = clock::detect();
    let core = clock::measure_core_clock();
    machine.cpu.core_clock_hz = core.as_ref().map(|c| c.hz);
    if let Some(c) = &core {
        let max_hz = machine.cpu.max_mhz.map(|m| m * 1e6);
        machine.warnings.extend(c.warnings(max_hz));
    }
    machine.warnings.extend(clock_info.warnings.iter().cloned());
    machine.clock = Some(clock_info);
    let loop_ticks = crate::harness::measure_loop_ticks(&hw, &cfg.profile.harness());

    // The machine's warnings include the load average at start.
    let mut warnings = machine.warnings.clone();
    for w in &warnings {
        progress.line(&format!("warning: {w}"));
    }

    let scratch = std::sync::OnceLock::new();
    let watchdog = Watchdog::start();
    let mut results: Vec<ExperimentResult> = Vec::new();
    let n = selected.len();
    let repeat = cfg.repeat.max(1);
    for (i, exp) in selected.iter().enumerate() {
        let budget = exp.budget(cfg.profile);
        let mut reps = Vec::with_capacity(repeat);
        for r in 0..repeat {
            if repeat > 1 {
                progress.message(&format!(
                    "[{}/{n}] {} (run {}/{repeat})",
                    i + 1,
                    exp.id(),
                    r + 1
                ));
            } else {
                progress.message(&format!("[{}/{n}] {}", i + 1, exp.id()));
            }
            // Experiments may move threads around; every one starts pinned, and the
            // sentinel runs on that CPU just before and just after.
            let _ = platform::pin_to_cpu(cpu);
            let before = crate::sentinel::measure();
            watchdog.arm(exp.id(), hard_limit(budget));
            let env = Env {
                cfg,
                machine: &machine,
                clock: &hw,
                cpu,
                loop_ticks,
                scratch: &scratch,
            };
            let mut res = run_one(exp.as_ref(), &env, budget, &results, &progress);
            watchdog.disarm();
            let _ = platform::pin_to_cpu(cpu);
            let after = crate::sentinel::measure();
            res.sentinel = Some(crate::sentinel::BeforeAfter { before, after });
            reps.push(res);
        }
        let res = merge_repeats(reps);
        progress.advance(budget * repeat as u32);
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
        config: serde_json::json!({
            "profile": cfg.profile.name(),
            "only": cfg.only,
            "skip": cfg.skip,
            "cpu": cpu,
            "repeat": repeat,
            "options": cfg.options,
            "peer": peer_identity(&cfg.options),
            "statistics": {
                "outlier_rule": crate::stats::OUTLIER_RULE,
                "ci_method": crate::stats::CI_METHOD,
                "harness": format!("{:?}", cfg.profile.harness()),
            },
        }),
        machine,
        warnings,
        experiments: results,
        findings: Vec::new(),
    };
    let mut run_results = run_results;
    run_results.findings = crate::findings::compute(&run_results);

    let folder = if cfg.write_results {
        let f = write_results(&cfg.out, &run_results).map_err(RunError::Runtime)?;
        // results.json is safe on disk; a report or history problem only warns.
        if let Err(e) = crate::report::write_reports(&f, &run_results) {
            eprintln!("osmeter: warning: could not write the reports: {e:#}");
        }
        Some(f)
    } else {
        None
    };
    if !cfg.no_history {
        if let Err(e) = crate::history::History::open_default()
            .and_then(|mut h| h.record(&run_results, folder.as_deref()))
        {
            eprintln!(
                "osmeter: warning: run not recorded in the history: {e:#} (--no-history skips it)"
            );
        }
    }
    Ok(RunOutput {
        results: run_results,
        folder,
    })
}

/// Which host the network experiments measured against: the name given for it and the
/// address it resolved to (null without `--peer`: the loopback peer).
fn peer_identity(o: &RunOptions) -> serde_json::Value {
    let Some(spec) = o.peer.as_deref() else {
        return serde_json::Value::Null;
    };
    let address = crate::peer::client::resolve_peer(spec)
        .map(|a| a.to_string())
        .ok();
    serde_json::json!({
        "name": o.peer_name.clone().unwrap_or_else(|| spec.trim().to_string()),
        "spec": spec.trim(),
        "address": address,
    })
}

/// What stays the same for every experiment of a run.
struct Env<'a> {
    cfg: &'a RunConfig,
    machine: &'a Machine,
    clock: &'a dyn Clock,
    cpu: usize,
    loop_ticks: f64,
    scratch: &'a std::sync::OnceLock<crate::scratch::Scratch>,
}

fn run_one(
    exp: &dyn Experiment,
    env: &Env,
    budget: Duration,
    earlier: &[ExperimentResult],
    progress: &Progress,
) -> ExperimentResult {
    let Env {
        cfg,
        machine,
        clock,
        cpu,
        loop_ticks,
        scratch,
    } = *env;
    let t = Instant::now();
    let sub = |msg: &str| progress.message(&format!("{}: {msg}", exp.id()));
    let ctx = Context {
        profile: cfg.profile,
        machine,
        clock,
        cpu,
        budget,
        earlier,
        options: &cfg.options,
        loop_ticks,
        progress: &sub,
        scratch_cell: scratch,
    };
    let mut result = ExperimentResult {
        id: exp.id().into(),
        area: exp.area().into(),
        title: exp.title().into(),
        status: Status::Ok,
        reason: None,
        method: exp.method().into(),
        duration_s: 0.0,
        metrics: vec![],
        series: vec![],
        checks: vec![],
        findings: vec![],
        notes: vec![],
        sentinel: None,
    };
    let predictions = exp.predict(&ctx);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exp.run(&ctx)));
    result.duration_s = t.elapsed().as_secs_f64();
    let outcome: Outcome = match outcome {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            result.status = Status::Failed;
            result.reason = Some(format!("{e:#}"));
            return result;
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            result.status = Status::Failed;
            result.reason = Some(format!("internal error: {msg}"));
            return result;
        }
    };
    if let Some(reason) = outcome.skipped {
        result.status = Status::Skipped;
        result.reason = Some(reason);
        result.checks = outcome.checks;
        return result;
    }
    result.metrics = outcome.metrics;
    result.series = outcome.series;
    result.checks = outcome.checks;
    result.findings = outcome.findings;
    result.notes = outcome.notes;
    for (name, p) in predictions {
        if let Some(m) = result.metrics.iter_mut().find(|m| m.name == name) {
            m.prediction = Some(p);
        }
    }
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
    let failed: Vec<String> = result
        .checks
        .iter()
        .filter(|c| c.premise && !c.passed)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    if !failed.is_empty() {
        result.status = Status::Invalid;
        result.reason = Some(format!("premise failed: {}", failed.join("; ")));
    } else if result.metrics.is_empty() {
        result.status = Status::Failed;
        result.reason = Some("the experiment produced no metrics".into());
    }
    result
}

/// One result from the repetitions of an experiment: each metric pools the raw values of
/// every repetition and keeps each repetition's median in `runs` (the run-to-run spread).
/// A repetition that is not ok makes the merged result take its status and reason.
pub fn merge_repeats(mut reps: Vec<ExperimentResult>) -> ExperimentResult {
    if reps.len() <= 1 {
        return reps.pop().expect("at least one run");
    }
    let n = reps.len();
    if let Some(bad) = reps.iter().position(|r| r.status != Status::Ok) {
        let mut r = reps.swap_remove(bad);
        r.notes.push(format!(
            "run {} of {n} (--repeat) was {}",
            bad + 1,
            r.status.as_str()
        ));
        return r;
    }
    let mut base = reps[0].clone();
    base.duration_s = reps.iter().map(|r| r.duration_s).sum();
    base.sentinel = match (reps[0].sentinel, reps[n - 1].sentinel) {
        (Some(a), Some(b)) => Some(crate::sentinel::BeforeAfter {
            before: a.before,
            after: b.after,
        }),
        _ => None,
    };
    base.checks.clear();
    base.notes.clear();
    for (k, r) in reps.iter().enumerate() {
        for c in &r.checks {
            let mut c = c.clone();
            c.name = format!("run {}: {}", k + 1, c.name);
            base.checks.push(c);
        }
        base.notes
            .extend(r.notes.iter().map(|x| format!("run {}: {x}", k + 1)));
    }
    for m in &mut base.metrics {
        let same: Vec<&crate::results::Metric> = reps
            .iter()
            .filter_map(|r| r.metric(&m.name).filter(|x| x.unit == m.unit))
            .collect();
        if same.len() < n {
            m.runs.clear();
            continue;
        }
        m.runs = same.iter().map(|x| x.summary.median).collect();
        m.raw = same.iter().flat_map(|x| x.raw.iter().copied()).collect();
        let pooled = if m.summary.percentiles.is_some() {
            crate::stats::Summary::with_percentiles(&m.raw)
        } else {
            crate::stats::Summary::of(&m.raw)
        };
        if let Some(s) = pooled {
            let old = m.summary.median;
            if let Some(c) = &mut m.cycles {
                let k = s.median / old;
                c.core = c.core.map(|v| v * k);
                c.counter = c.counter.map(|v| v * k);
            }
            m.summary = s;
        }
    }
    base
}

/// Writes `results.json` into a new `HOST-TIMESTAMP` folder under `parent`; never
/// reuses an existing folder.
pub fn write_results(parent: &Path, r: &RunResults) -> anyhow::Result<PathBuf> {
    // The name may come from the command line: keep it to one safe path component.
    let host: String = r
        .host_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = host.trim_start_matches('.');
    let host = if host.is_empty() { "host" } else { host };
    let stamp = r.started_at.replace([':', '-'], "");
    let mut folder = parent.join(format!("{host}-{stamp}"));
    let mut k = 1;
    while folder.exists() {
        k += 1;
        folder = parent.join(format!("{host}-{stamp}-{k}"));
    }
    std::fs::create_dir_all(&folder)?;
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(folder.join("results.json"), json)?;
    Ok(folder)
}
