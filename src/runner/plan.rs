//! A run's plan and its measuring: the request validated, the machine gathered, the
//! measured CPU chosen and pinned, and the results document assembled.

use super::kinds::other_kinds;
use super::merge::empty_result;
use super::overrun::{Ledger, OnOverrun};
use super::watchdog::Watchdog;
use super::{
    check_writable_dir, off_cpu, run_selected, Env, Progress, Registry, RunConfig, RunError,
};
use crate::clock::Clock;
use crate::experiments::{self, Experiment, Profile, RunOptions};
use crate::machine::{Machine, Topology};
use crate::platform;
use crate::results::{
    ExperimentResult, PeerMachine, PeerRecord, RecordedOptions, RunRecord, RunResults, Statistics,
    Tool, SCHEMA_VERSION,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

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
    /// What the run does if an experiment overruns, in place of the registry's.
    pub(crate) fn on_overrun(&mut self, react: OnOverrun) {
        self.on_overrun = react;
    }

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
    let (mut machine, cpu) = machine_and_cpu(cfg, topology, &allowed)?;
    let kind_cpus = kind_cpus(&selected, &machine, cpu, &allowed);
    progress.begin(total_budget(cfg, &selected, kind_cpus.len()));
    progress.message("gathering machine facts");
    let ledger = Arc::new(Ledger::new(
        selected.iter().map(|e| empty_result(e.as_ref())).collect(),
    ));
    // Helper threads start before pinning, away from the measured CPU.
    let watchdog = off_cpu(cpu, &allowed, || {
        progress.start_threads();
        Watchdog::start(ledger.alarm(on_overrun))
    });
    let placement = pin(cpu, &mut machine)?;
    let hw = machine.add_time_base();
    let (loop_ticks, loop_cycles) = loop_overhead(&machine, &hw, cfg.profile);
    let reference = reference_reading();
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
    let peer = peer_record(cfg, &selected, &machine, progress);
    ledger.begin(head(cfg, cpu, (started, t0), &machine, &warnings, &peer));

    let scratch = std::sync::OnceLock::new();
    let host = crate::grade::RunState {
        machine: &machine,
        cpu,
        reference,
        loop_cycles,
        placement: placement.clone(),
        clock_source: crate::machine::conditions::clock_source(),
        user_hz: crate::machine::conditions::user_hz(),
        trial: cfg.profile.harness().min_trial,
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
        ledger: &ledger,
        hard_limit,
        placement,
        host: &host,
        kinds: &kinds,
    };
    let results = run_selected(&selected, &env);
    drop(host);
    add_steal(&steal, &mut machine, &mut warnings, progress);
    progress.finish();
    drop(scratch); // removes the scratch folder
    let _ = platform::set_affinity(&allowed);
    if let Some(doc) = ledger.document() {
        return Ok(doc);
    }
    let mut doc = document(cfg, cpu, (started, t0), (machine, peer), warnings, results);
    doc.findings = crate::findings::compute(&doc);
    Ok(doc)
}

/// One CPU per kind of core, for the experiments that report figures per kind (none when
/// none is selected).
fn kind_cpus(
    selected: &[Box<dyn Experiment>],
    machine: &Machine,
    cpu: usize,
    allowed: &[usize],
) -> Vec<crate::machine::KindCpu> {
    if selected.iter().any(|e| e.spec().per_core_kind) {
        machine.topology.per_kind_cpus(cpu, allowed)
    } else {
        Vec::new()
    }
}

/// The budget of every run of every selected experiment.
fn total_budget(cfg: &RunConfig, selected: &[Box<dyn Experiment>], kinds: usize) -> Duration {
    selected
        .iter()
        .map(|e| budget_of(cfg, e.as_ref(), kinds) * runs_of(cfg, e.as_ref(), kinds))
        .sum()
}

/// The budget of one run of `exp` on one of `kinds` kinds of core: a network experiment
/// with `--peer` measures loopback and the peer, each in the budget it has alone.
pub(super) fn budget_of(cfg: &RunConfig, exp: &dyn Experiment, kinds: usize) -> Duration {
    let targets = match exp.spec().needs.peer && cfg.options.peer.is_some() {
        true => 2,
        false => 1,
    };
    exp.kind_budget(cfg.profile, kinds) * targets
}

/// Steal over the whole run, so that its figures can be judged against it.
fn add_steal(
    steal: &crate::machine::StealMeter,
    machine: &mut Machine,
    warnings: &mut Vec<String>,
    progress: &dyn Progress,
) {
    if let Some(report) = steal.finish() {
        machine.virtualization.steal_during_run = Some(report);
        if let Some(w) = report.warning() {
            progress.line(&format!("warning: {w}"));
            machine.warnings.push(w.clone());
            warnings.push(w);
        }
    }
}

/// Pins this thread to `cpu`; why its placement is not controlled, if it is not (also a
/// warning of the machine's).
fn pin(cpu: usize, machine: &mut Machine) -> Result<Option<String>, RunError> {
    let pinning = platform::pin_to_cpu(cpu)
        .map_err(|e| RunError::Runtime(anyhow::anyhow!("cannot pin to CPU {cpu}: {e}")))?;
    if let Some(why) = pinning.reason() {
        machine.warnings.push(format!(
            "not pinned to CPU {cpu}: {why}; single-thread figures may include migrations"
        ));
    }
    Ok(pinning.reason().map(str::to_string))
}

/// This machine's facts (with `topology` standing in for its own, when given) and the CPU
/// the run measures on, chosen from `--cpu` or the topology and recorded with why.
fn machine_and_cpu(
    cfg: &RunConfig,
    topology: Option<Topology>,
    allowed: &[usize],
) -> Result<(Machine, usize), RunError> {
    let mut machine = Machine::gather();
    if let Some(t) = topology {
        machine.topology = t;
    }
    let cpu = machine
        .topology
        .choose_cpu(cfg.cpu, allowed)
        .map_err(RunError::Usage)?;
    if machine.topology.chosen_cpu != Some(cpu) {
        let why = if cfg.cpu.is_some() {
            "requested with --cpu"
        } else {
            "the last allowed CPU (the topology's choice is not allowed)"
        };
        machine.topology.choose(cpu, why);
    }
    Ok((machine, cpu))
}

/// The overhead subtracted from every per-operation figure, in ticks and (where the core
/// clock is known) core cycles: every current core takes one; a disturbed measurement is
/// retaken (twice at most), the fastest kept, and one still slow is named in every
/// experiment's grade.
fn loop_overhead(machine: &Machine, hw: &dyn Clock, profile: Profile) -> (f64, Option<f64>) {
    let mut loop_ticks = crate::harness::measure_loop_ticks(hw, &profile.harness());
    let core_hz = machine.cpu.core_clock_hz;
    let loop_cycles = |t: f64| core_hz.map(|hz| t / hw.ticks_per_ns() * hz / 1e9);
    for _ in 0..2 {
        if loop_cycles(loop_ticks).is_some_and(|c| c >= crate::grade::ISSUE_SLOW_CYCLES) {
            loop_ticks = loop_ticks.min(crate::harness::measure_loop_ticks(hw, &profile.harness()));
        }
    }
    (loop_ticks, loop_cycles(loop_ticks))
}

/// The sentinel at the clock the core was just measured at: what later readings are
/// judged against (the fastest of three, kernel by kernel).
fn reference_reading() -> Option<crate::results::Reading> {
    (0..3)
        .map(|_| crate::sentinel::measure())
        .reduce(|a, b| crate::results::Reading {
            chain_ns: a.chain_ns.min(b.chain_ns),
            issue_ns: a.issue_ns.min(b.issue_ns),
            chase_ns: a.chase_ns.min(b.chase_ns),
            copy_ns_per_byte: a.copy_ns_per_byte.min(b.copy_ns_per_byte),
            spread: a.spread.max(b.spread),
        })
}

/// How the ledger makes the document of a run an experiment overran: as `measure` makes
/// it, from copies of what it holds when measuring begins.
fn head(
    cfg: &RunConfig,
    cpu: usize,
    start: (SystemTime, Instant),
    machine: &Machine,
    warnings: &[String],
    peer: &Option<PeerRecord>,
) -> super::overrun::Head {
    let (cfg, machine, warnings) = (cfg.clone(), machine.clone(), warnings.to_vec());
    let peer = peer.clone();
    Box::new(move |results| {
        let hosts = (machine.clone(), peer.clone());
        let mut doc = document(&cfg, cpu, start, hosts, warnings.clone(), results);
        doc.findings = crate::findings::compute(&doc);
        doc
    })
}

/// The results document of a run that started at `started`, of this machine and the
/// `--peer` host (its findings are the caller's to add).
fn document(
    cfg: &RunConfig,
    cpu: usize,
    (started, t0): (SystemTime, Instant),
    (machine, peer): (Machine, Option<PeerRecord>),
    warnings: Vec<String>,
    experiments: Vec<ExperimentResult>,
) -> RunResults {
    RunResults {
        schema_version: SCHEMA_VERSION,
        tool: Tool::this_build(crate::platform::c_library()),
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
            peer: Some(peer),
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
        experiments,
        findings: Vec::new(),
    }
}

/// The selected experiments, after every usage error is found (before anything is
/// measured or printed).
pub(super) fn validate(
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
pub(super) fn repeats(cfg: &RunConfig, exp: &dyn Experiment) -> usize {
    cfg.repeat
        .unwrap_or_else(|| exp.default_repeat(cfg.profile))
        .max(1)
}

/// Budgets `exp` takes in all: its repeats, times the kinds of core it runs on.
pub(super) fn runs_of(cfg: &RunConfig, exp: &dyn Experiment, kinds: usize) -> u32 {
    let k = if exp.spec().per_core_kind {
        kinds.max(1)
    } else {
        1
    };
    (repeats(cfg, exp) * k) as u32
}

/// The `--peer` host, described by itself when a selected experiment uses it (asked once,
/// before measuring; an older peer's refusal or no answer is recorded as the reason).
fn peer_record(
    cfg: &RunConfig,
    selected: &[Box<dyn Experiment>],
    machine: &Machine,
    progress: &dyn Progress,
) -> Option<PeerRecord> {
    let mut rec = peer_identity(&cfg.options)?;
    if !selected.iter().any(|e| e.spec().needs.peer) {
        return Some(rec);
    }
    progress.message("asking the peer to describe its machine");
    let addr = crate::peer::client::resolve_peer(cfg.options.peer.as_deref()?);
    if let Some((nic, _)) = addr
        .as_ref()
        .ok()
        .and_then(|&a| platform::net::route_interface(a))
    {
        let speed = machine.network.iter().find(|n| n.name == nic);
        rec.local_nic_speed_mbit_s = speed.and_then(|n| n.speed_mbit_s);
        rec.local_nic = Some(nic);
    }
    let asked = addr.map_err(|e| e.to_string()).and_then(|a| {
        let c = crate::peer::client::Client::new(a, cfg.options.peer_token.clone());
        c.describe()
            .map_err(|e| format!("the peer was not described: {e}"))
    });
    match asked.and_then(|d| d) {
        Ok(h) => rec.machine = Some(peer_machine(h)),
        Err(why) => rec.undescribed = Some(why),
    }
    Some(rec)
}

/// The peer's description as the document records it.
fn peer_machine(h: crate::peer::protocol::HostInfo) -> PeerMachine {
    PeerMachine {
        hostname: h.hostname,
        cpu_model: h.cpu_model,
        logical_cpus: h.logical_cpus,
        physical_cores: h.physical_cores,
        memory_bytes: h.memory_bytes,
        os: h.os,
        os_version: h.os_version,
        arch: h.arch,
        nic: h.nic,
        nic_speed_mbit_s: h.nic_speed_mbit_s,
        nic_mtu: h.nic_mtu,
        notes: Some(h.notes).filter(|n| !n.is_empty()),
        extra: Default::default(),
    }
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
        host_cache_none: Some(o.host_cache_none),
        ..Default::default()
    }
}
