//! The runs of per-kind experiments on the other kinds of core of a hybrid CPU.

use super::Progress;
use crate::experiments::Profile;
use crate::machine::Machine;
use crate::platform;
use crate::results::{ExperimentResult, Status};

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
pub(super) fn other_kinds(
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
pub(super) fn kind_source(source: &str, per_kind: &[&'static str], suffix: &str) -> String {
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
pub(super) struct KindEarlier<'a> {
    pub results: &'a [ExperimentResult],
    pub suffix: &'a str,
    pub per_kind: &'a [&'static str],
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
    fn not_ok(&self, experiment: &str) -> Option<Status> {
        let e = self.results.iter().find(|e| e.id == experiment)?;
        (e.status != Status::Ok).then_some(e.status)
    }
}

/// Adds one other kind's merged result to the run's own (`res`): its metrics (and the
/// findings' references to them) named with the kind's suffix, its series, checks, findings
/// and notes labelled with the kind, and
/// a note saying where each set ran and at which clock. An invalid or unverified kind
/// makes the whole result so (as a repetition does); a kind that failed or was skipped
/// adds only a note, having no figures.
pub(super) fn add_kind(
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
    relabel(&mut other, k, &label, per_kind);
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

/// Names another kind's metrics with its suffix (and the findings' references to them),
/// and labels its series, checks and findings with the kind.
fn relabel(other: &mut ExperimentResult, k: &KindRun, label: &str, per_kind: &[&'static str]) {
    let names: Vec<String> = other.metrics.iter().map(|m| m.name.clone()).collect();
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
}
