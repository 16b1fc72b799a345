//! Trust grades and host conditions (docs/METHODOLOGY.md, "Trust grades and host
//! conditions"). Before the experiments the run records what can distort any figure (a
//! VM, the governor and boost, cgroup limits, a busy machine, the clock source, placement);
//! around each repetition of an experiment it reads the host counters
//! (`machine::conditions`) and the sentinel, and names what it saw distort the figures
//! (an issue rate below the core's, steal on the measured CPU, a moved core clock,
//! thermal throttling) in the repetition's notes. Each experiment then gets a grade:
//! A nothing known to distort it, B a condition that can but was not seen to, C a
//! condition seen during the experiment.

use crate::machine::conditions::HostSample;
use crate::machine::Machine;
use crate::results::{
    BeforeAfter, ExperimentResult, Grade, GradeLevel, GradeReason, MetricKind, Reading, Status,
};

/// The name of cpu.loop's check that its own loop ran at the core's issue rate: a failed
/// one is the same evidence as the sentinel's issue kernel (it is the same loop).
pub(crate) const ISSUE_CHECK: &str = "issued at the core's rate";

/// Sanity checks whose failure bends no reported figure: ICMP refused leaves its figure out
/// (the other round trips are not ICMP's), and a footprint past the announced cap is a
/// promise to the user broken, not a measurement. The experiments name them from here.
pub(crate) const ICMP_CHECK: &str = "icmp echo permitted";
pub(crate) const CAP_CHECK: &str = "memory use within the announced cap";
const NO_FIGURE_BENT: [&str; 2] = [ICMP_CHECK, CAP_CHECK];

/// What the harness's note says when preempted trials had to be kept (harness.rs).
const PREEMPTED_INCLUDED: &str = "(the fastest) are included, so the figure may be inflated";

/// Core cycles per iteration of the one-uop loop (`opaque::repeat`, the sentinel's issue
/// kernel and cpu.loop) from which the issue rate counts as reduced: one is assumed (its
/// dependent decrement), uncited for every core; a core shared with a busy SMT sibling
/// reads about two.
pub(crate) const ISSUE_SLOW_CYCLES: f64 = 1.5;
/// A sentinel reading whose dependent chain moved more than this from the run's start
/// is not an issue-rate reading (the whole CPU was slowed: preemption, steal, a clock change).
const CHAIN_HELD: f64 = 0.25;
/// The chain moved by more than this, before and after alike: the core clock moved.
const CLOCK_MOVED: f64 = 0.15;
/// Steal on the measured CPU worth naming (the run-level warning's threshold).
const STEAL_SHARE: f64 = 0.02;
/// The shortest stolen interval assumed: once the host scheduler gives the vCPU's core to
/// another thread, that thread keeps it for its slice, Linux's base slice on a host of eight
/// or more CPUs (kernel/sched/fair.c `sysctl_sched_base_slice`, scaled by the CPU count; a
/// KVM vCPU is such a thread). Shorter steals would be more of them, each hitting a trial.
const STEAL_SLICE_S: f64 = 3e-3;
/// Share of trials that could be hit from which the median can be a hit trial: below
/// half, the median is an unhit trial's figure.
const STEAL_HIT_C: f64 = 0.5;
/// Steal from which trials of a slice or longer, each slowed by about the stolen share,
/// grade C: beyond the 15% a clock change must reach (`CLOCK_MOVED`), at a quarter.
const STEAL_SHARE_C: f64 = 0.25;
/// A slow loop overhead grades C where its error is this share of a figure or more.
const LOOP_ERROR_C: f64 = 0.01;
/// Steal ticks (USER_HZ) below which the share is too coarse to grade C.
const STEAL_TICKS_C: u64 = 5;
/// Share of the time other tasks waited for a CPU (PSI) that makes the machine busy.
const WAIT_SHARE: f64 = 0.10;
/// Share of the time the SMT sibling was busy that counts.
const SIBLING_SHARE: f64 = 0.10;

/// What the run knows before its experiments: the machine and the run's own start.
pub(crate) struct RunState<'a> {
    pub machine: &'a Machine,
    pub cpu: usize,
    /// The sentinel at the start of the run, right after the core clock was measured.
    pub reference: Option<Reading>,
    /// The loop overhead the harness subtracts, in core cycles per iteration.
    pub loop_cycles: Option<f64>,
    /// Why the measuring thread's CPU is not controlled (None: hard pinning).
    pub placement: Option<String>,
    /// The kernel's clock source, where it has one.
    pub clock_source: Option<String>,
    /// USER_HZ, the unit of the steal and busy ticks.
    pub user_hz: f64,
    /// The harness's shortest trial in this run's profile: it grows a trial's iterations
    /// until one lasts this long, so its trials last under twice it.
    pub trial: std::time::Duration,
}

/// Every failed sanity check but those whose failure leaves a figure out rather than
/// bending one: checks are not tied to metrics, so any other may concern a figure the
/// report leads with.
fn failed_sanity(e: &ExperimentResult) -> impl Iterator<Item = GradeReason> + '_ {
    let bears = |c: &&crate::results::Check| {
        let any = |n: &&str| c.name.ends_with(n);
        !c.name.ends_with(ISSUE_CHECK) && !NO_FIGURE_BENT.iter().any(any)
    };
    let failed = e
        .checks
        .iter()
        .filter(|c| !c.passed && !c.premise && !c.unverified);
    failed.filter(bears).map(|c| {
        let text = format!("a sanity check failed: {}: {}", c.name, c.detail);
        reason("sanity", GradeLevel::B, text)
    })
}

fn reason(code: &str, level: GradeLevel, text: String) -> GradeReason {
    GradeReason {
        code: code.into(),
        level,
        text,
    }
}

impl RunState<'_> {
    fn ghz(&self) -> Option<f64> {
        self.machine.cpu.core_clock_hz.map(|h| h / 1e9)
    }

    /// The siblings of the measured CPU.
    pub(crate) fn siblings(&self) -> Vec<usize> {
        self.machine
            .topology
            .place(self.cpu)
            .map(|p| p.siblings.clone())
            .unwrap_or_default()
    }

    /// The loop overhead measured slow at the run's start, for an experiment whose figures
    /// have it subtracted: C where the error can move one of its ns figures by
    /// `LOOP_ERROR_C` or more (cpu.call's 1.2 ns calls), else B (a 25 us thread creation).
    fn loop_overhead(&self, e: &ExperimentResult) -> Option<GradeReason> {
        let (c, g) = (self.loop_cycles?, self.ghz()?);
        if c < ISSUE_SLOW_CYCLES {
            return None;
        }
        let err = (c - 1.0) / g;
        let least = e
            .metrics
            .iter()
            .filter(|m| m.unit == "ns" && m.summary.median > 0.0)
            .map(|m| m.summary.median)
            .fold(f64::INFINITY, f64::min);
        let share = err / least;
        Some(reason(
            "loop_overhead",
            if share >= LOOP_ERROR_C {
                GradeLevel::C
            } else {
                GradeLevel::B
            },
            format!(
                "the loop overhead subtracted from per-operation figures was measured at {c:.1} core \
                 cycles per iteration at the start of the run (1 assumed; three tries): \
                 its figures read up to {err:.2} ns per operation low{}",
                if least.is_finite() {
                    format!(", {:.1}% of the smallest ({})", share * 100.0, crate::units::fmt_value(least, "ns"))
                } else {
                    String::new()
                }
            ),
        ))
    }

    /// Conditions of the whole run that can distort the figures of an experiment in `area`.
    pub(crate) fn standing(&self, area: &str) -> Vec<GradeReason> {
        let m = self.machine;
        let b = GradeLevel::B;
        let mut v = Vec::new();
        if m.virtualization.is_vm {
            v.push(reason(
                "vm",
                b,
                format!(
                    "a virtual machine ({}): the host can give this vCPU's core or its SMT sibling to \
                     another guest; steal is counted and a shared core shows in the sentinel",
                    m.virtualization.hypervisor.as_deref().unwrap_or("hypervisor unknown")
                ),
            ));
        }
        if let Some(g) = m.cpu.governors.get(&self.cpu) {
            if g != "performance" {
                v.push(reason(
                    "governor",
                    b,
                    format!(
                        "CPU {} runs the {g} governor: its clock follows the load",
                        self.cpu
                    ),
                ));
            }
        }
        if m.cpu.turbo == Some(true) {
            v.push(reason(
                "boost",
                b,
                "frequency boost is on: the core clock follows load and temperature".into(),
            ));
        }
        let cpus = m.cpu.allowed_cpus.len().max(1) as f64;
        if let Some(l) = m.cgroup.cpu_limit.filter(|l| *l < cpus) {
            v.push(reason(
                "cgroup_cpu",
                b,
                format!("a cgroup CPU quota of {l:.2} CPUs: the scheduler can throttle the run"),
            ));
        }
        if matches!(area, "mem" | "fs") {
            if let Some(l) = m
                .cgroup
                .memory_limit_bytes
                .filter(|l| m.memory.total_bytes > 0 && *l < m.memory.total_bytes)
            {
                v.push(reason(
                    "cgroup_memory",
                    b,
                    format!(
                        "a cgroup memory limit of {}: memory and the file cache are capped below the machine's",
                        crate::units::fmt_bytes(l as f64)
                    ),
                ));
            }
        }
        // In a cpuset, the allowed CPUs' own ticks: the load average is the machine's.
        if let Some(busy) = m.allowed_busy {
            if busy > 0.5 * cpus {
                v.push(reason(
                    "busy",
                    b,
                    format!(
                        "the CPUs this process may use were busy at the start: {busy:.1} of {cpus}"
                    ),
                ));
            }
        } else if let Some(one) = m.load_average.map(|l| l[0]).filter(|l| *l > 0.5 * cpus) {
            v.push(reason(
                "busy",
                b,
                format!("the machine was busy at the start: load average {one:.2} on {cpus} CPUs"),
            ));
        }
        v.extend(self.clock_and_placement());
        v
    }

    /// The standing conditions of the clock and of the measuring thread's placement.
    fn clock_and_placement(&self) -> Vec<GradeReason> {
        let m = self.machine;
        let b = GradeLevel::B;
        let mut v = Vec::new();
        if let Some(cs) = self
            .clock_source
            .as_deref()
            .filter(|c| !matches!(*c, "tsc" | "arch_sys_counter"))
        {
            v.push(reason(
                "clock_source",
                b,
                format!(
                    "the kernel's clock source is {cs} (not the CPU's counter): clock reads are slow \
                     and coarse"
                ),
            ));
        }
        if m.clock.as_ref().is_some_and(|c| c.invariant == Some(false)) {
            v.push(reason(
                "clock_source",
                b,
                "the time-stamp counter is not invariant: it may change rate with the clock".into(),
            ));
        }
        if let Some(why) = &self.placement {
            v.push(reason(
                "placement",
                b,
                format!("the measuring thread's CPU is not controlled: {why}"),
            ));
        }
        let kind = m.topology.place(self.cpu).and_then(|p| p.kind.as_deref());
        if kind == Some("efficiency") {
            v.push(reason(
                "efficiency_core",
                b,
                format!("CPU {} is an efficiency core", self.cpu),
            ));
        }
        v
    }

    /// What one repetition saw, from the counters and sentinel around it: C conditions
    /// (each also a note of the repetition) and B ones (grade reasons only).
    pub(crate) fn observe(
        &self,
        before: &HostSample,
        after: &HostSample,
        sentinel: &BeforeAfter,
        e: &ExperimentResult,
    ) -> Vec<GradeReason> {
        let mut v = Vec::new();
        let names: Vec<&str> = e.metrics.iter().map(|m| m.name.as_str()).collect();
        let figures = if names.is_empty() {
            String::new()
        } else {
            format!(" (measured in it: {})", names.join(", "))
        };
        let secs = after.at.duration_since(before.at).as_secs_f64();
        let delta = |f: fn(&HostSample) -> Option<u64>| match (f(before), f(after)) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let sibling_share = delta(|s| s.sibling_busy_ticks)
            .filter(|_| secs > 0.0)
            .map(|t| t as f64 / self.user_hz / secs);
        if let Some(text) = self.issue_rate(sentinel, sibling_share) {
            v.push(reason(
                "issue_rate",
                GradeLevel::C,
                format!("{text}{figures}"),
            ));
        }
        if let Some(text) = self.clock_moved(sentinel, before.cur_khz, after.cur_khz) {
            v.push(reason(
                "frequency",
                GradeLevel::C,
                format!("{text}{figures}"),
            ));
        }
        if let Some(t) = delta(|s| s.steal_ticks).filter(|t| *t >= 2 && secs > 0.0) {
            let share = t as f64 / self.user_hz / secs;
            if share > STEAL_SHARE {
                v.push(self.steal(e, t, share, secs, &figures));
            }
        }
        if let Some(n) = delta(|s| s.throttle_events).filter(|n| *n > 0) {
            v.push(reason(
                "throttle",
                GradeLevel::C,
                format!(
                    "CPU {} was thermally throttled {n} time{} during the experiment (thermal_throttle \
                     counters){figures}",
                    self.cpu,
                    if n == 1 { "" } else { "s" }
                ),
            ));
        }
        if let Some(us) = delta(|s| s.cpu_wait_us).filter(|_| secs > 0.0) {
            let share = us as f64 / 1e6 / secs;
            if share > WAIT_SHARE {
                v.push(reason(
                    "busy",
                    GradeLevel::B,
                    format!(
                        "other tasks waited for a CPU {:.0}% of the time (/proc/pressure/cpu): preempted \
                         trials are retaken, but the machine was not quiet",
                        (share * 100.0).min(100.0)
                    ),
                ));
            }
        }
        if let Some(share) = sibling_share {
            if share > SIBLING_SHARE {
                v.push(reason(
                    "smt_sibling_busy",
                    GradeLevel::B,
                    format!(
                        "the SMT sibling of CPU {} was busy {:.0}% of the time: it shares the core's issue \
                         slots and caches",
                        self.cpu,
                        (share * 100.0).min(100.0)
                    ),
                ));
            }
        }
        v
    }

    /// Steal of `share` of the repetition's `secs` (`ticks` USER_HZ ticks): B, or C where
    /// up to half the trials or more could be hit. Stolen time S in intervals of at least
    /// `STEAL_SLICE_S` is at most S / slice intervals; one interval hits the trials it
    /// overlaps, at most its length / T + 2 of them; so of the secs / T trials that fit, at
    /// most share x (1 + 2 T / slice) are hit.
    fn steal(
        &self,
        e: &ExperimentResult,
        ticks: u64,
        share: f64,
        secs: f64,
        figures: &str,
    ) -> GradeReason {
        let trial = self.trial_secs(e);
        let hit = trial.map_or(1.0, |t| (share * (1.0 + 2.0 * t / STEAL_SLICE_S)).min(1.0));
        // Trials as long as a slice or longer (or of unknown length) are each hit by about
        // the stolen share: their medians move with it, not with the share of trials hit.
        let long = !matches!(trial, Some(t) if t < STEAL_SLICE_S);
        let heavy = ticks >= STEAL_TICKS_C
            && match long {
                true => share >= STEAL_SHARE_C,
                false => hit >= STEAL_HIT_C,
            };
        let trials = match trial {
            Some(t) if !long => format!(
                "with trials of up to {} and stolen intervals of {:.0} ms or more (a Linux host's \
                 scheduler slice), up to {:.0}% of the trials could be hit",
                crate::units::fmt_value(t * 1e9, "ns"),
                STEAL_SLICE_S * 1e3,
                hit * 100.0
            ),
            Some(t) => format!(
                "its trials of up to {} are as long as a stolen interval ({:.0} ms or more, a \
                 Linux host's scheduler slice) or longer, so each is slowed by about the stolen \
                 share, C from {:.0}%",
                crate::units::fmt_value(t * 1e9, "ns"),
                STEAL_SLICE_S * 1e3,
                STEAL_SHARE_C * 100.0
            ),
            None => format!(
                "its trials' length is not recorded (rounds and intervals sized by the \
                 experiment), so each is taken to be slowed by about the stolen share, C from \
                 {:.0}%",
                STEAL_SHARE_C * 100.0
            ),
        };
        reason(
            "steal",
            if heavy { GradeLevel::C } else { GradeLevel::B },
            format!(
                "the hypervisor stole {:.0}% of CPU {}'s time during the experiment ({:.0} ms of \
                 {secs:.1} s; /proc/stat): a trial that spans a stolen interval reads slow, and the \
                 guest does not see it as a preemption; {trials}: {}{}",
                share * 100.0,
                self.cpu,
                ticks as f64 / self.user_hz * 1e3,
                match (heavy, long) {
                    (true, _) => "the medians can be hit trials",
                    (false, true) => "graded B, as the share is small",
                    (false, false) => "graded B, as a median resists a minority of hit trials",
                },
                if heavy { figures } else { "" }
            ),
        )
    }

    /// The longest trial of the experiment's figures, in seconds: a per-operation figure's
    /// operation, a calibrated one's iterations, a cpu or mem figure's harness trial (under
    /// twice its shortest). None where a trial's length is not recorded (fs and net rounds
    /// and intervals, sized by the experiment).
    fn trial_secs(&self, e: &ExperimentResult) -> Option<f64> {
        let mut longest: f64 = 0.0;
        for m in &e.metrics {
            let scale = match m.unit.as_str() {
                "ns" => Some(1e-9),
                "us" => Some(1e-6),
                "ms" => Some(1e-3),
                "s" => Some(1.0),
                _ => None,
            };
            let t = match (&m.kind, m.iterations, scale) {
                (Some(MetricKind::Derived { .. }), _, _) => continue,
                (_, Some(n), Some(k)) => n as f64 * m.summary.median * k,
                (Some(MetricKind::PerOperation), _, Some(k)) => m.summary.median * k,
                _ if matches!(e.area.as_str(), "cpu" | "mem") => 2.0 * self.trial.as_secs_f64(),
                _ => return None,
            };
            longest = longest.max(t);
        }
        Some(longest)
    }

    /// The sentinel's one-uop loop slower than the 1 cycle assumed, while its dependent
    /// chain held (a whole-CPU slowdown is preemption or a clock change, not this). An SMT
    /// sibling is named only where the topology shows one, and not where its busy share
    /// (`sibling_share`, where counted) was below `SIBLING_SHARE`.
    fn issue_rate(&self, s: &BeforeAfter, sibling_share: Option<f64>) -> Option<String> {
        let slow: Vec<(&str, f64, f64)> = [("before", &s.before), ("after", &s.after)]
            .into_iter()
            .filter_map(|(when, r)| {
                if r.issue_ns <= 0.0 {
                    return None;
                }
                if let Some(reference) = &self.reference {
                    if (r.chain_ns / reference.chain_ns - 1.0).abs() > CHAIN_HELD {
                        return None;
                    }
                }
                match (self.ghz(), &self.reference) {
                    (Some(g), _) => Some((when, r.issue_ns * g, r.chain_ns * g)),
                    // Without a core clock: against the run's start, assumed one cycle.
                    (None, Some(reference)) if reference.issue_ns > 0.0 => Some((
                        when,
                        r.issue_ns / reference.issue_ns,
                        r.chain_ns / reference.chain_ns,
                    )),
                    _ => None,
                }
            })
            .filter(|(_, ic, _)| *ic >= ISSUE_SLOW_CYCLES)
            .collect();
        if slow.is_empty() {
            return None;
        }
        let unit = if self.ghz().is_some() {
            "core cycles"
        } else {
            "x the run's start"
        };
        let what: Vec<String> = slow
            .iter()
            .map(|(when, ic, cc)| {
                format!("{ic:.1} {unit} per iteration {when} the experiment (chain {cc:.1})")
            })
            .collect();
        let worst = slow.iter().map(|s| s.1).fold(0.0, f64::max);
        let siblings = self.siblings();
        let list = || {
            let v: Vec<String> = siblings.iter().map(usize::to_string).collect();
            v.join(", ")
        };
        let smt = match sibling_share {
            _ if siblings.is_empty() => String::new(),
            Some(share) if share > SIBLING_SHARE => format!(
                ", and CPU {}'s SMT sibling (CPU {}), which shares its issue slots, was busy {:.0}% of the time",
                self.cpu,
                list(),
                (share * 100.0).min(100.0)
            ),
            Some(_) => String::new(),
            None => format!(
                " (CPU {} shares its core with CPU {} (SMT), whose work would take its issue slots; \
                 how busy it was is not counted here)",
                self.cpu,
                list()
            ),
        };
        Some(format!(
            "a slower issue rate than the 1 cycle assumed: the sentinel's one-uop loop took {} while its \
             dependent chain held{smt}; throughput-bound figures (loops, calls, system calls) read up to \
             {worst:.1}x slow",
            what.join(" and ")
        ))
    }

    /// The dependent chain moved from the run's start by more than `CLOCK_MOVED` before
    /// and after the experiment alike, or cpufreq's current frequency moved as much.
    fn clock_moved(&self, s: &BeforeAfter, khz0: Option<u64>, khz1: Option<u64>) -> Option<String> {
        if let (Some(a), Some(b)) = (khz0, khz1) {
            if a > 0 && b > 0 && ((b as f64 / a as f64) - 1.0).abs() > CLOCK_MOVED {
                return Some(format!(
                    "CPU {}'s clock moved from {:.0} to {:.0} MHz during the experiment (cpufreq \
                     scaling_cur_freq): cycle figures and time figures disagree",
                    self.cpu,
                    a as f64 / 1e3,
                    b as f64 / 1e3
                ));
            }
        }
        let r = self.reference.as_ref().filter(|r| r.chain_ns > 0.0)?;
        let k0 = s.before.chain_ns / r.chain_ns;
        let k1 = s.after.chain_ns / r.chain_ns;
        let moved = |k: f64| (k - 1.0).abs() > CLOCK_MOVED;
        // The same direction, both sides: one disturbed reading is not a clock change.
        if moved(k0) && moved(k1) && (k0 > 1.0) == (k1 > 1.0) {
            let k = (k0 * k1).sqrt();
            return Some(format!(
                "the core clock moved: the sentinel's dependent chain took {:.2}x and {:.2}x its time at \
                 the run's start before and after the experiment, so the core ran at about {:.0}% of the \
                 clock measured then (cycle figures use that clock)",
                k0,
                k1,
                100.0 / k
            ));
        }
        None
    }

    /// The grade of an experiment from the standing conditions, what each repetition
    /// observed, and its own issue-rate check. None for skipped and failed experiments.
    /// `subtracts_loop`: the experiment's meta says its figures have the loop overhead
    /// subtracted.
    pub(crate) fn grade(
        &self,
        e: &ExperimentResult,
        observed: &[Vec<GradeReason>],
        subtracts_loop: bool,
    ) -> Option<Grade> {
        if matches!(e.status, Status::Skipped | Status::Failed) {
            return None;
        }
        let n = observed.len();
        let mut reasons: Vec<GradeReason> = Vec::new();
        for (k, obs) in observed.iter().enumerate() {
            for r in obs {
                // Every C observation, labelled with its repetition; of the B ones the
                // first of each kind (the same busy machine in every repetition is one reason).
                if r.level < GradeLevel::C && reasons.iter().any(|x| x.code == r.code) {
                    continue;
                }
                let mut r = r.clone();
                if n > 1 {
                    r.text = format!("run {} of {n}: {}", k + 1, r.text);
                }
                reasons.push(r);
            }
        }
        // The harness's own note (harness.rs) when too few undisturbed trials fitted.
        for n in e.notes.iter().filter(|n| n.contains(PREEMPTED_INCLUDED)) {
            reasons.push(reason(
                "preempted",
                GradeLevel::C,
                format!("other tasks preempted the measuring thread so often that {n}"),
            ));
        }
        for c in e
            .checks
            .iter()
            .filter(|c| !c.passed && c.name.ends_with(ISSUE_CHECK))
        {
            reasons.push(reason(
                "issue_rate",
                GradeLevel::C,
                format!("{}: {}", c.name, c.detail),
            ));
        }
        if e.status == Status::Unverified {
            let what: Vec<&str> = e
                .checks
                .iter()
                .filter(|c| c.unverified)
                .map(|c| c.name.as_str())
                .collect();
            let which = if what.is_empty() {
                String::new()
            } else {
                format!(" ({})", what.join("; "))
            };
            reasons.push(reason(
                "unverified",
                GradeLevel::B,
                format!(
                    "its status is unverified: a premise could not be checked here{which}, so the \
                     figures may not measure what they name"
                ),
            ));
        }
        reasons.extend(failed_sanity(e));
        if subtracts_loop {
            reasons.extend(self.loop_overhead(e));
        }
        reasons.extend(self.standing(&e.area));
        // One reason per condition and text; worst first, in the order found.
        let mut seen = std::collections::BTreeSet::new();
        reasons.retain(|r| seen.insert((r.code.clone(), r.text.clone())));
        reasons.sort_by_key(|r| std::cmp::Reverse(r.level));
        Some(Grade {
            level: reasons
                .iter()
                .map(|r| r.level)
                .max()
                .unwrap_or(GradeLevel::A),
            reasons,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn reading(chain: f64, issue: f64) -> Reading {
        Reading {
            chain_ns: chain,
            issue_ns: issue,
            chase_ns: 1.5,
            copy_ns_per_byte: 0.02,
            spread: 0.0,
        }
    }

    /// This VM's figures: 3.24 GHz, chain 4 cycles, loop 1 cycle.
    fn machine() -> Machine {
        let mut m = Machine::default();
        m.cpu.core_clock_hz = Some(3.24e9);
        m.cpu.allowed_cpus = vec![0, 1];
        m
    }

    fn state(m: &Machine) -> RunState<'_> {
        RunState {
            machine: m,
            cpu: 1,
            reference: Some(reading(4.0 / 3.24, 1.0 / 3.24)),
            loop_cycles: Some(1.0),
            placement: None,
            clock_source: Some("tsc".into()),
            user_hz: 100.0,
            trial: Duration::from_millis(1),
        }
    }

    /// A cpu experiment measuring `names`, each a per-trial figure of the harness.
    fn cpu_exp(names: &[&str]) -> ExperimentResult {
        let mut e = ExperimentResult::new("cpu.syscall", "", "");
        for n in names {
            e.metrics
                .push(crate::results::Metric::test_ns(n, vec![100.0; 5], None));
        }
        e
    }

    fn sample(at: Instant, steal: u64, wait_us: u64) -> HostSample {
        HostSample {
            at,
            steal_ticks: Some(steal),
            sibling_busy_ticks: None,
            cpu_wait_us: Some(wait_us),
            throttle_events: Some(0),
            cur_khz: None,
        }
    }

    fn quiet_pair() -> (HostSample, HostSample) {
        let t = Instant::now();
        (
            sample(t, 100, 0),
            sample(t + Duration::from_secs(1), 100, 1000),
        )
    }

    fn codes(v: &[GradeReason]) -> Vec<&str> {
        v.iter().map(|r| r.code.as_str()).collect()
    }

    #[test]
    fn a_quiet_repetition_names_nothing() {
        let m = machine();
        let st = state(&m);
        let (a, b) = quiet_pair();
        let quiet = reading(4.0 / 3.24, 1.04 / 3.24);
        let s = BeforeAfter {
            before: quiet,
            after: quiet,
        };
        assert!(st.observe(&a, &b, &s, &cpu_exp(&[])).is_empty());
    }

    /// The state issue 20 saw: cpu.loop at 2 cycles, the chain unchanged.
    #[test]
    fn a_shared_core_is_named_with_its_figures() {
        let m = machine();
        let st = state(&m);
        let (a, b) = quiet_pair();
        let s = BeforeAfter {
            before: reading(4.0 / 3.24, 2.1 / 3.24),
            after: reading(4.0 / 3.24, 1.0 / 3.24),
        };
        let v = st.observe(&a, &b, &s, &cpu_exp(&["iteration"]));
        assert_eq!(codes(&v), ["issue_rate"]);
        assert!(
            v[0].text.contains("2.1 core cycles per iteration before"),
            "{}",
            v[0].text
        );
        assert!(
            v[0].text.contains("measured in it: iteration"),
            "{}",
            v[0].text
        );
        assert_eq!(v[0].level, GradeLevel::C);
    }

    /// Issue 34: the slow issue rate names an SMT sibling only where the topology shows
    /// one for the measured CPU, and not when its counted busy share was small.
    #[test]
    fn a_slow_issue_rate_names_smt_only_with_a_sibling() {
        let slow = BeforeAfter {
            before: reading(4.0 / 3.24, 2.1 / 3.24),
            after: reading(4.0 / 3.24, 2.1 / 3.24),
        };
        let (a, b) = quiet_pair();
        let text = |m: &Machine, a: &HostSample, b: &HostSample| {
            let v = state(m).observe(a, b, &slow, &cpu_exp(&[]));
            let r = v
                .iter()
                .find(|r| r.code == "issue_rate")
                .expect("issue_rate");
            r.text.clone()
        };
        let alone = machine();
        let t = text(&alone, &a, &b);
        assert!(
            t.contains("slower issue rate than the 1 cycle assumed"),
            "{t}"
        );
        assert!(!t.contains("SMT") && !t.contains("hardware thread"), "{t}");
        let mut smt = machine();
        smt.topology.cpus = vec![crate::machine::topology::CpuPlace {
            cpu: 1,
            siblings: vec![3],
            ..Default::default()
        }];
        let t = text(&smt, &a, &b);
        assert!(t.contains("CPU 1 shares its core with CPU 3 (SMT)"), "{t}");
        // The sibling counted 50% busy is named with its share; 1% is not blamed.
        let t0 = Instant::now();
        let at = |ticks, s| HostSample {
            sibling_busy_ticks: Some(ticks),
            ..sample(t0 + Duration::from_secs(s), 0, 0)
        };
        let t = text(&smt, &at(1000, 0), &at(1050, 1));
        assert!(
            t.contains("SMT sibling (CPU 3)") && t.contains("busy 50%"),
            "{t}"
        );
        let t = text(&smt, &at(1000, 0), &at(1001, 1));
        assert!(!t.contains("SMT"), "{t}");
    }

    /// A sentinel preempted mid-way (chain and loop 3x slow alike) is not a shared core,
    /// and one such reading is not a clock change either: seen in quiet runs here.
    #[test]
    fn a_disturbed_sentinel_reading_is_not_a_condition() {
        let m = machine();
        let st = state(&m);
        let (a, b) = quiet_pair();
        let s = BeforeAfter {
            before: reading(4.0 / 3.24, 1.0 / 3.24),
            after: reading(13.4 / 3.24, 2.58 / 3.24),
        };
        assert!(st.observe(&a, &b, &s, &cpu_exp(&[])).is_empty());
    }

    #[test]
    fn a_slower_clock_on_both_sides_is_a_frequency_change() {
        let m = machine();
        let st = state(&m);
        let (a, b) = quiet_pair();
        // The chain 1.3x slow: the clock at 77%; the loop as slow, so in start-clock
        // cycles 1.3 (below the issue rule).
        let s = BeforeAfter {
            before: reading(5.2 / 3.24, 1.3 / 3.24),
            after: reading(5.3 / 3.24, 1.3 / 3.24),
        };
        let v = st.observe(&a, &b, &s, &cpu_exp(&[]));
        assert_eq!(codes(&v), ["frequency"]);
        assert!(
            v[0].text.contains("about 76%") || v[0].text.contains("about 77%"),
            "{}",
            v[0].text
        );
        // cpufreq says so too.
        let (mut a, mut b) = quiet_pair();
        a.cur_khz = Some(3_000_000);
        b.cur_khz = Some(2_000_000);
        let quiet = BeforeAfter {
            before: reading(4.0 / 3.24, 1.0 / 3.24),
            after: reading(4.0 / 3.24, 1.0 / 3.24),
        };
        let v = st.observe(&a, &b, &quiet, &cpu_exp(&[]));
        assert_eq!(codes(&v), ["frequency"]);
        assert!(v[0].text.contains("3000 to 2000 MHz"));
    }

    #[test]
    fn steal_throttle_busy_and_sibling() {
        let m = machine();
        let st = state(&m);
        let t = Instant::now();
        let a = HostSample {
            sibling_busy_ticks: Some(1000),
            ..sample(t, 100, 0)
        };
        // 10 ticks = 100 ms stolen of 1 s; 600 ms of waiting; 2 throttle events; the
        // sibling busy 50 ticks = 50%.
        let b = HostSample {
            throttle_events: Some(2),
            sibling_busy_ticks: Some(1050),
            ..sample(t + Duration::from_secs(1), 110, 600_000)
        };
        let quiet = reading(4.0 / 3.24, 1.0 / 3.24);
        let s = BeforeAfter {
            before: quiet,
            after: quiet,
        };
        let v = st.observe(&a, &b, &s, &cpu_exp(&[]));
        assert_eq!(codes(&v), ["steal", "throttle", "busy", "smt_sibling_busy"]);
        assert!(
            v[0].text.contains("stole 10% of CPU 1's time"),
            "{}",
            v[0].text
        );
        // 10%: named, but the median resists it.
        assert_eq!(v[0].level, GradeLevel::B);
        // 40 ticks of 1 s: a C condition, with the figures.
        let heavy = sample(t + Duration::from_secs(1), 140, 0);
        let v = st.observe(&a, &heavy, &s, &cpu_exp(&["getppid"]));
        let steal = v.iter().find(|r| r.code == "steal").unwrap();
        assert_eq!(steal.level, GradeLevel::C);
        assert!(
            steal.text.contains("measured in it: getppid"),
            "{}",
            steal.text
        );
        // One tick is within USER_HZ's resolution: not named.
        let b1 = sample(t + Duration::from_secs(1), 101, 0);
        assert!(st
            .observe(&a, &b1, &s, &cpu_exp(&[]))
            .iter()
            .all(|r| r.code != "steal"));
    }

    #[test]
    fn grades_from_standing_and_observed_conditions() {
        let mut m = machine();
        let st = state(&m);
        let mut e = ExperimentResult {
            duration_s: 1.0,
            ..ExperimentResult::new("cpu.loop", "", "")
        };
        // Nothing known: A, no reasons.
        let g = st.grade(&e, &[vec![], vec![]], false).unwrap();
        assert_eq!((g.level, g.reasons.len()), (GradeLevel::A, 0));
        // A VM: B.
        m.virtualization.is_vm = true;
        m.virtualization.hypervisor = Some("KVM".into());
        let st = state(&m);
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::B);
        assert_eq!(codes(&g.reasons), ["vm"]);
        // A failed issue-rate check of cpu.loop itself: C, first.
        e.checks.push(crate::results::Check::sanity(
            &format!("run 2: {ISSUE_CHECK}"),
            false,
            "2.02 core cycles per iteration",
        ));
        let g = st.grade(&e, &[vec![], vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::C);
        assert_eq!(codes(&g.reasons), ["issue_rate", "vm"]);
        // Observations are labelled with their repetition.
        let obs = reason("steal", GradeLevel::C, "x".into());
        let g = st.grade(&e, &[vec![], vec![obs]], false).unwrap();
        assert!(g.reasons.iter().any(|r| r.text == "run 2 of 2: x"));
        // Skipped: no grade.
        e.status = Status::Skipped;
        assert!(st.grade(&e, &[], false).is_none());
        // The harness kept preempted trials: C, quoting its note.
        e.status = Status::Ok;
        e.checks.clear();
        e.notes.push(format!("run 1: args_0: only 1 undisturbed trials fitted in the budget: 4 preempted trials {PREEMPTED_INCLUDED}"));
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(codes(&g.reasons), ["preempted", "vm"]);
        // A loop overhead measured slow at the start (2.2 cycles at 3.24 GHz: 0.37 ns):
        // it grades only experiments that subtract it, C where that is 1% of a figure.
        let mut slow = state(&m);
        slow.loop_cycles = Some(2.2);
        e.notes.clear();
        let with_ns = |median: f64| {
            let mut e = e.clone();
            e.metrics
                .push(crate::results::Metric::test_ns("t", vec![median; 5], None));
            e
        };
        let level = |e: &ExperimentResult, sub: bool| {
            let g = slow.grade(e, &[vec![]], sub).unwrap();
            g.reasons
                .iter()
                .find(|r| r.code == "loop_overhead")
                .map(|r| r.level)
        };
        assert_eq!(level(&with_ns(1.24), true), Some(GradeLevel::C), "a call");
        assert_eq!(
            level(&with_ns(25_000.0), true),
            Some(GradeLevel::B),
            "a thread creation"
        );
        assert_eq!(
            level(&with_ns(1.24), false),
            None,
            "a chase, nothing subtracted"
        );
        assert!(!codes(&slow.standing("cpu")).contains(&"loop_overhead"));
        // Memory limits count for memory experiments only.
        m.cgroup.memory_limit_bytes = Some(1 << 30);
        m.memory.total_bytes = 8 << 30;
        let st = state(&m);
        assert!(codes(&st.standing("mem")).contains(&"cgroup_memory"));
        assert!(!codes(&st.standing("cpu")).contains(&"cgroup_memory"));
    }

    /// An experiment whose premise could not be checked, on a quiet host, is B, not A.
    #[test]
    fn an_unverified_experiment_is_not_graded_a() {
        let m = machine();
        let st = state(&m);
        let mut e = ExperimentResult::new("fs.read", "", "");
        e.status = Status::Unverified;
        e.checks.push(crate::results::Check::unverified(
            "uncached reads reached the device",
            "a virtual disk: the host's page cache may answer",
        ));
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::B);
        assert_eq!(codes(&g.reasons), ["unverified"]);
        assert!(
            g.reasons[0]
                .text
                .contains("(uncached reads reached the device)"),
            "{}",
            g.reasons[0].text
        );
    }

    /// A failed sanity check grades B and is named; a passed one does not count, and
    /// cpu.loop's own issue-rate check stays C.
    #[test]
    fn a_failed_sanity_check_caps_at_b() {
        let m = machine();
        let st = state(&m);
        let mut e = cpu_exp(&["getppid", "clock_gettime"]);
        e.checks.push(crate::results::Check::sanity(
            "a system call costs more than a loop iteration",
            true,
            "getppid 60 ns, loop 0.3 ns",
        ));
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::A);
        e.checks.push(crate::results::Check::sanity(
            "run 2: vDSO call cheaper than a kernel entry",
            false,
            "clock_gettime 80.0 ns, getppid 60.0 ns",
        ));
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::B);
        assert_eq!(codes(&g.reasons), ["sanity"]);
        assert!(
            g.reasons[0]
                .text
                .contains("run 2: vDSO call cheaper than a kernel entry: clock_gettime 80.0 ns"),
            "{}",
            g.reasons[0].text
        );
        e.checks
            .push(crate::results::Check::sanity(ISSUE_CHECK, false, "2.1"));
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!(g.level, GradeLevel::C);
        assert_eq!(codes(&g.reasons), ["issue_rate", "sanity"]);
    }

    /// A refused ICMP echo or a footprint past the cap bends no figure: no grade reason.
    #[test]
    fn checks_that_bend_no_figure_do_not_cap() {
        let m = machine();
        let st = state(&m);
        let mut e = cpu_exp(&["tcp"]);
        for name in [ICMP_CHECK, &format!("run 2: {CAP_CHECK}")] {
            e.checks
                .push(crate::results::Check::sanity(name, false, "refused"));
        }
        let g = st.grade(&e, &[vec![]], false).unwrap();
        assert_eq!((g.level, codes(&g.reasons).len()), (GradeLevel::A, 0));
    }

    /// 3% steal over 20 s (60 ticks): short trials are a few of them hit, and stay B;
    /// trials that span a stolen interval are most of them hit, and grade C.
    #[test]
    fn steal_counts_by_trial_length() {
        let m = machine();
        let st = state(&m);
        let t = Instant::now();
        let (a, b) = (
            sample(t, 100, 0),
            sample(t + Duration::from_secs(20), 160, 0),
        );
        let quiet = reading(4.0 / 3.24, 1.0 / 3.24);
        let s = BeforeAfter {
            before: quiet,
            after: quiet,
        };
        let steal = |e: &ExperimentResult| {
            let v = st.observe(&a, &b, &s, e);
            v.into_iter().find(|r| r.code == "steal").unwrap()
        };
        // Per-operation round trips of 20 us: about 3% of them hit.
        let mut rtt = ExperimentResult::new("net.rtt", "", "");
        rtt.metrics.push(crate::results::Metric::test_ns(
            "tcp",
            vec![20_000.0; 40],
            Some(MetricKind::PerOperation),
        ));
        let r = steal(&rtt);
        assert_eq!(r.level, GradeLevel::B, "{}", r.text);
        assert!(r.text.contains("up to 3% of the trials"), "{}", r.text);
        // The harness's trials of a quick cpu experiment (under 2 ms): up to 7%.
        let r = steal(&cpu_exp(&["getppid"]));
        assert_eq!(r.level, GradeLevel::B, "{}", r.text);
        assert!(r.text.contains("up to 7% of the trials"), "{}", r.text);
        // A calibrated trial of 100 ms spans stolen intervals: each is slowed by about the
        // stolen share, B at 3%; so are fs rounds of unrecorded length.
        let mut long = cpu_exp(&[]);
        let mut f = crate::results::Metric::test_ns("t", vec![100_000.0; 5], None);
        f.iterations = Some(1000);
        long.metrics.push(f);
        let r = steal(&long);
        assert_eq!(r.level, GradeLevel::B, "{}", r.text);
        assert!(
            r.text.contains("slowed by about the stolen share"),
            "{}",
            r.text
        );
        let mut fs = ExperimentResult::new("fs.contention", "", "");
        fs.metrics.push(crate::results::Metric::test_ns(
            "per_block_pmax",
            vec![70_000.0; 3],
            None,
        ));
        let r = steal(&fs);
        assert_eq!(r.level, GradeLevel::B, "{}", r.text);
        assert!(r.text.contains("length is not recorded"), "{}", r.text);
        // At 30% both are C.
        let heavy = sample(t + Duration::from_secs(20), 700, 0);
        for e in [&long, &fs] {
            let v = st.observe(&a, &heavy, &s, e);
            let r = v.into_iter().find(|r| r.code == "steal").unwrap();
            assert_eq!(r.level, GradeLevel::C, "{}", r.text);
        }
        assert_eq!(
            st.grade(&fs, &[st.observe(&a, &heavy, &s, &fs)], false)
                .unwrap()
                .level,
            GradeLevel::C
        );
    }

    #[test]
    fn busy_in_a_cpuset_is_judged_by_its_own_cpus() {
        // The host's load average (2 on a big machine) against 2 allowed CPUs: busy by
        // the load alone, but not when the allowed CPUs' own ticks were measured idle.
        let mut m = machine();
        m.load_average = Some([2.0; 3]);
        assert!(codes(&state(&m).standing("cpu")).contains(&"busy"));
        m.allowed_busy = Some(0.1);
        assert!(!codes(&state(&m).standing("cpu")).contains(&"busy"));
        m.load_average = Some([0.0; 3]);
        m.allowed_busy = Some(1.9);
        assert!(codes(&state(&m).standing("cpu")).contains(&"busy"));
    }
}
