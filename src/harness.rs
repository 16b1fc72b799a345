//! The one timing path (docs/ARCHITECTURE.md, "One timing path"): every experiment
//! times through these modes, never reading a clock itself.
//!
//! - `measure` / `measure_raw`: warm-up, iteration calibration with a hard time bound,
//!   trials within a budget, clock and loop cost subtracted.
//! - `measure_trials`: the same loop over trials the caller times (threads released together).
//! - `sample` / `try_sample` / `try_sample_with`: per-operation samples
//!   for distributions, with a minimum count, a budget and preemption handling.
//! - `cpu_time_trials`: the thread's CPU time per operation over wall-time trials.
//! - `stopwatch`, `deadline`, `warm_up`: spans, time bounds and untimed warm-up on the
//!   same clock.
//!
//! Preempted trials and samples are set aside, repeated and noted the same way in every
//! mode (`preemption_note`).
//!
//! All timing, including the time bounds, goes through a `Clock`, so a `MockClock` makes
//! the whole harness deterministic in tests.

use crate::clock::{Clock, Deadline, Stopwatch};
use crate::opaque::repeat;
use std::time::Duration;

/// How long and how often to measure.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// A trial must last at least this long to dwarf the clock's resolution and overhead.
    pub min_trial: Duration,
    /// Trials wanted (fewer when the budget runs out; never fewer than `min_trials`
    /// unless one trial alone exceeds the budget).
    pub trials: usize,
    pub min_trials: usize,
    /// Warm-up time at the calibrated iteration count before the first trial.
    pub warmup: Duration,
    /// Wall time for calibration, warm-up and trials together.
    pub budget: Duration,
    /// Hard bound on calibration alone; past it the harness uses what it has and says so.
    pub calibration_limit: Duration,
    /// Never run more iterations than this in one trial.
    pub max_iters: u64,
    /// Repeat trials during which the thread was preempted (involuntary context switch):
    /// they timed another task too. Only for bodies that never block or wake another task
    /// on purpose (a ping-pong's wake-ups count as involuntary switches).
    pub detect_preemption: bool,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            min_trial: Duration::from_millis(2),
            trials: 15,
            min_trials: 5,
            warmup: Duration::from_millis(10),
            budget: Duration::from_millis(500),
            calibration_limit: Duration::from_millis(200),
            max_iters: 1 << 40,
            detect_preemption: false,
        }
    }
}

impl HarnessConfig {
    /// These settings within `budget` split `parts` ways, calibration within half of a
    /// part: the one way a budget becomes harness settings (`Context::harness`,
    /// cpu.syscall's `harness_config` for `io syscalls`, the memory kernels).
    pub fn for_budget(mut self, budget: Duration, parts: usize) -> Self {
        self.budget = budget / parts.max(1) as u32;
        self.calibration_limit = self.calibration_limit.min(self.budget / 2);
        self
    }

    /// For bodies that only compute (never block or wake another task): trials during
    /// which the thread was preempted are set aside and repeated.
    pub fn cpu_only(mut self) -> Self {
        self.detect_preemption = true;
        self
    }

    /// Short trials without a timed warm-up beyond one trial, preempted ones repeated
    /// (the memory kernels: long against the clock's overhead, short against a time
    /// slice); the budget comes from `for_budget`.
    pub fn short_trials(min_trial: Duration, trials: usize) -> Self {
        HarnessConfig {
            min_trial,
            trials,
            min_trials: 3.min(trials),
            warmup: Duration::ZERO,
            budget: Duration::ZERO,
            calibration_limit: Duration::MAX,
            max_iters: 1 << 40,
            detect_preemption: false,
        }
        .cpu_only()
    }
}

/// Trials of one calibrated measurement.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Per-operation time of each trial in ns, clock and loop overhead subtracted.
    pub per_op_ns: Vec<f64>,
    /// Iterations per trial.
    pub iters: u64,
    /// What went short: calibration bound hit, budget ran out, and so on.
    pub notes: Vec<String>,
    /// Trials set aside and repeated because the thread was preempted while they ran.
    pub preempted: usize,
    /// Undisturbed trials kept (fewer than `per_op_ns` when preempted ones filled up).
    pub undisturbed: usize,
}

impl Measurement {
    pub fn median_ns(&self) -> f64 {
        crate::stats::median(&self.per_op_ns)
    }
}

pub struct Harness<'a> {
    clock: &'a dyn Clock,
    cfg: HarnessConfig,
    /// Ticks one empty iteration of `repeat` costs; subtracted per iteration.
    loop_ticks: f64,
    /// Involuntary switches of this thread so far (`thread_preemptions`; a stand-in in tests).
    preemptions: fn() -> u64,
}

impl<'a> Harness<'a> {
    pub fn new(clock: &'a dyn Clock, cfg: HarnessConfig, loop_ticks: f64) -> Self {
        Harness {
            clock,
            cfg,
            loop_ticks,
            preemptions: thread_preemptions,
        }
    }

    /// Counts preemptions with `f` instead of getrusage (tests drive preemption with it).
    #[cfg(test)]
    pub fn with_preemption_counter(mut self, f: fn() -> u64) -> Self {
        self.preemptions = f;
        self
    }

    pub fn config(&self) -> &HarnessConfig {
        &self.cfg
    }

    fn ticks(&self, d: Duration) -> f64 {
        self.clock.ns_to_ticks(d.as_nanos() as f64)
    }

    /// One trial of `body`: its ticks, and whether it ran undisturbed.
    fn time_body(&self, body: &mut dyn FnMut(u64), iters: u64) -> (u64, bool) {
        let c0 = if self.cfg.detect_preemption {
            (self.preemptions)()
        } else {
            0
        };
        let t0 = self.clock.start();
        body(iters);
        let t1 = self.clock.stop();
        let quiet = !self.cfg.detect_preemption || (self.preemptions)() == c0;
        (t1.wrapping_sub(t0), quiet)
    }

    /// Measures `body(iters)`, which must run `iters` iterations of `ops_per_iter`
    /// operations each in the shape of `repeat`. Loop overhead is subtracted.
    pub fn measure(&self, ops_per_iter: f64, mut body: impl FnMut(u64)) -> Measurement {
        self.run(ops_per_iter, true, &mut |n| self.time_body(&mut body, n))
    }

    /// As `measure`, without subtracting the loop overhead (for the loop itself, and for
    /// bodies whose iteration is not a `repeat` loop).
    pub fn measure_raw(&self, ops_per_iter: f64, mut body: impl FnMut(u64)) -> Measurement {
        self.run(ops_per_iter, false, &mut |n| self.time_body(&mut body, n))
    }

    /// The same calibration and trial loop over a trial the caller times itself (for
    /// example several threads released together): `trial(iters)` returns the counter
    /// ticks it took, clock overhead included, and whether it ran undisturbed. No loop
    /// overhead is subtracted.
    pub fn measure_trials(
        &self,
        ops_per_iter: f64,
        mut trial: impl FnMut(u64) -> (u64, bool),
    ) -> Measurement {
        self.run(ops_per_iter, false, &mut trial)
    }

    /// Grows the iteration count until a trial lasts `min_trial`, within the calibration
    /// bound and the iteration cap (a note says which stopped it short).
    fn calibrate(
        &self,
        trial: &mut dyn FnMut(u64) -> (u64, bool),
        elapsed: &dyn Fn() -> f64,
        notes: &mut Vec<String>,
    ) -> u64 {
        let min_trial = self.ticks(self.cfg.min_trial);
        let cal_limit = self.ticks(self.cfg.calibration_limit);
        let mut iters: u64 = 1;
        loop {
            let (t, quiet) = trial(iters);
            let t = t as f64;
            if !quiet && elapsed() <= cal_limit {
                continue; // a preempted trial says nothing about the rate
            }
            if t >= min_trial {
                break;
            }
            if iters >= self.cfg.max_iters {
                notes.push(format!(
                    "calibration stopped at the cap of {iters} iterations per trial ({:.3} ms, short of the {:.3} ms target)",
                    self.clock.ticks_to_ns(t) / 1e6,
                    self.cfg.min_trial.as_secs_f64() * 1e3
                ));
                break;
            }
            if elapsed() > cal_limit {
                notes.push(format!(
                    "calibration stopped at its {} ms bound with {} iterations per trial ({:.3} ms, short of the {:.3} ms target)",
                    self.cfg.calibration_limit.as_millis(),
                    iters,
                    self.clock.ticks_to_ns(t) / 1e6,
                    self.cfg.min_trial.as_secs_f64() * 1e3
                ));
                break;
            }
            // Aim 20% past the target from the last trial's rate, growing 2x..10x per step.
            let factor = if t > 0.0 {
                (min_trial * 1.2 / t).clamp(2.0, 10.0)
            } else {
                10.0
            };
            iters = ((iters as f64 * factor).ceil() as u64).min(self.cfg.max_iters);
        }
        iters
    }

    fn run(
        &self,
        ops_per_iter: f64,
        subtract_loop: bool,
        trial: &mut dyn FnMut(u64) -> (u64, bool),
    ) -> Measurement {
        let began = self.clock.start();
        let elapsed = || self.clock.stop().wrapping_sub(began) as f64;
        let budget = self.ticks(self.cfg.budget);
        let mut notes = Vec::new();

        let iters = self.calibrate(trial, &elapsed, &mut notes);

        // Warm up at the calibrated count (at least one trial).
        let warm_end = elapsed() + self.ticks(self.cfg.warmup);
        loop {
            trial(iters);
            if elapsed() >= warm_end || elapsed() > budget {
                break;
            }
        }

        let mut raw = Vec::with_capacity(self.cfg.trials);
        // Preempted trials are set aside and repeated; they are used only when too few
        // undisturbed ones fit in the budget, and a note says so.
        let mut disturbed: Vec<u64> = Vec::new();
        while raw.len() < self.cfg.trials {
            let have = raw.len() + disturbed.len();
            let over_budget = elapsed() > budget;
            if over_budget && have >= self.cfg.min_trials.max(1) {
                notes.push(format!(
                    "budget of {} ms reached after {} of {} trials",
                    self.cfg.budget.as_millis(),
                    raw.len(),
                    self.cfg.trials
                ));
                break;
            }
            // Never exceed twice the budget, even for min_trials.
            if elapsed() > 2.0 * budget && have > 0 {
                notes.push(format!(
                    "stopped at twice the {} ms budget after {} trials",
                    self.cfg.budget.as_millis(),
                    raw.len()
                ));
                break;
            }
            match trial(iters) {
                (t, true) => raw.push(t),
                (t, false) => {
                    disturbed.push(t);
                    // Whoever ran meanwhile may have evicted our data: warm up again, untimed.
                    trial(iters);
                }
            }
        }
        let preempted = disturbed.len();
        let undisturbed = raw.len();
        keep_undisturbed(
            &mut raw,
            disturbed,
            self.cfg.min_trials.max(1),
            "trials",
            &mut notes,
        );

        let overhead = self.clock.overhead_ticks();
        let loop_ticks = if subtract_loop { self.loop_ticks } else { 0.0 };
        let per_op_ns = raw
            .iter()
            .map(|&t| {
                let per_iter = (t as f64 - overhead) / iters as f64 - loop_ticks;
                self.clock.ticks_to_ns(per_iter) / ops_per_iter
            })
            .collect();
        Measurement {
            per_op_ns,
            iters,
            notes,
            preempted,
            undisturbed,
        }
    }

    /// Per-operation samples of `op` as `spec` says (see `SampleSpec`); the tests' infallible
    /// form of `try_sample`.
    #[cfg(test)]
    pub fn sample(&self, spec: &SampleSpec, mut op: impl FnMut()) -> Samples {
        let r: Result<Samples, std::convert::Infallible> = self.try_sample(spec, || {
            op();
            Ok(())
        });
        match r {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }

    /// As `sample`, stopping at the first error `op` returns.
    pub fn try_sample<E>(
        &self,
        spec: &SampleSpec,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Samples, E> {
        self.try_sample_with(spec, || Ok(()), |_: &mut ()| op(), |_, _| {})
    }

    /// Per-operation samples with untimed steps around each one: `before` prepares the
    /// sample (a fresh buffer, the next page, a counter reading) and hands it to `timed`,
    /// the only part inside the clock reads; `after` gets it back with whether the sample
    /// ran undisturbed (false: preempted, set aside and taken again).
    ///
    /// Sampling stops at `max_n` kept samples; past the budget once `min_n` samples exist
    /// (preempted ones included); and at twice the budget in any case, with a note. When
    /// fewer than `min_n` undisturbed samples were kept, the fastest preempted ones fill
    /// up to `min_n` and a note says so, as trials do in `measure`.
    pub fn try_sample_with<T, E>(
        &self,
        spec: &SampleSpec,
        mut before: impl FnMut() -> Result<T, E>,
        mut timed: impl FnMut(&mut T) -> Result<(), E>,
        mut after: impl FnMut(T, bool),
    ) -> Result<Samples, E> {
        let clock = self.clock;
        let began = clock.now();
        let elapsed = || clock.now().saturating_sub(began) as f64;
        let budget = self.ticks(spec.budget);
        let min_n = spec.min_n.min(spec.max_n);
        let mut notes = Vec::new();
        let mut raw: Vec<u64> = Vec::with_capacity(spec.max_n.min(1 << 20));
        let mut disturbed: Vec<u64> = Vec::new();
        while raw.len() < spec.max_n {
            let have = raw.len() + disturbed.len();
            let el = elapsed();
            if el > budget && have >= min_n {
                break;
            }
            if el > 2.0 * budget && have > 0 {
                notes.push(format!(
                    "sampling stopped at twice the {} ms budget with {have} of the {min_n} samples wanted",
                    spec.budget.as_millis(),
                ));
                break;
            }
            let mut item = before()?;
            let c0 = if spec.detect_preemption {
                (self.preemptions)()
            } else {
                0
            };
            let t0 = clock.start();
            let r = timed(&mut item);
            let t1 = clock.stop();
            let quiet = !spec.detect_preemption || (self.preemptions)() == c0;
            r?;
            after(item, quiet);
            if quiet {
                raw.push(t1.wrapping_sub(t0));
            } else {
                disturbed.push(t1.wrapping_sub(t0));
            }
        }
        keep_undisturbed(&mut raw, disturbed, min_n, "samples", &mut notes);
        let overhead = clock.overhead_ticks();
        let ns = raw
            .iter()
            .map(|&t| clock.ticks_to_ns((t as f64 - overhead).max(0.0)))
            .collect();
        Ok(Samples { ns, notes })
    }

    /// A span timed on the run's clock (whole reads, fills, streams, start times).
    pub fn stopwatch(&self) -> Stopwatch<'a> {
        Stopwatch::start(self.clock)
    }

    /// A deadline `d` from now on the run's clock.
    pub fn deadline(&self, d: Duration) -> Deadline<'a> {
        Deadline::after(self.clock, d)
    }

    /// Runs `op` up to `rounds` times, untimed, stopping early once `limit` has passed
    /// (start-up costs of a partner, cold caches). Returns the rounds run.
    pub fn warm_up<E>(
        &self,
        rounds: usize,
        limit: Duration,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<usize, E> {
        let until = self.deadline(limit);
        let mut done = 0;
        while done < rounds && !until.passed() {
            op()?;
            done += 1;
        }
        Ok(done)
    }

    /// CPU-time trials: `trials` times, `op` runs in batches of `batch` until `per_trial`
    /// of wall time has passed; each trial yields the calling thread's CPU time per
    /// operation in ns. CPU time, not wall time: time the thread spent preempted is
    /// nobody's cost (for throughput of calls on a busy machine, as `io syscalls` does).
    pub fn cpu_time_trials<E>(
        &self,
        trials: usize,
        per_trial: Duration,
        batch: u64,
        op: impl FnMut() -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        self.cpu_time_trials_with(crate::platform::thread_cpu_ns, trials, per_trial, batch, op)
    }

    /// `cpu_time_trials` with the CPU-time source given (ns), for tests.
    pub fn cpu_time_trials_with<E>(
        &self,
        mut cpu_ns: impl FnMut() -> u64,
        trials: usize,
        per_trial: Duration,
        batch: u64,
        mut op: impl FnMut() -> Result<(), E>,
    ) -> Result<Vec<f64>, E> {
        let batch = batch.max(1);
        let mut out = Vec::with_capacity(trials);
        for _ in 0..trials {
            let until = self.deadline(per_trial);
            let c0 = cpu_ns();
            let mut ops = 0u64;
            loop {
                for _ in 0..batch {
                    op()?;
                }
                ops += batch;
                if until.passed() {
                    break;
                }
            }
            let cpu = cpu_ns().saturating_sub(c0) as f64;
            out.push(cpu.max(1.0) / ops as f64);
        }
        Ok(out)
    }
}

/// How `Harness::sample` takes per-operation samples.
#[derive(Debug, Clone)]
pub struct SampleSpec {
    /// Samples honoured past the budget, up to twice the budget.
    pub min_n: usize,
    /// Never more than this many kept samples.
    pub max_n: usize,
    /// Wall time for the sampling.
    pub budget: Duration,
    /// Set aside and retake samples during which the thread was preempted (involuntary
    /// context switch). Only for operations that do not block or wake another task on
    /// purpose.
    pub detect_preemption: bool,
}

impl SampleSpec {
    /// Up to `max_n` samples within `budget`, at least one, preemption not checked.
    pub fn new(max_n: usize, budget: Duration) -> Self {
        SampleSpec {
            min_n: 1,
            max_n,
            budget,
            detect_preemption: false,
        }
    }
    pub fn min_n(mut self, n: usize) -> Self {
        self.min_n = n;
        self
    }
    pub fn detect_preemption(mut self, on: bool) -> Self {
        self.detect_preemption = on;
        self
    }
}

/// Per-operation samples, clock overhead subtracted.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// ns per sample, in the order taken (undisturbed ones, then any preempted fill-ins).
    pub ns: Vec<f64>,
    /// What went short or was set aside, in the words `measure` uses.
    pub notes: Vec<String>,
}

/// Notes preempted trials or samples and, when fewer than `min_kept` undisturbed ones
/// exist, adds the fastest preempted ones (with a note that the figure may be inflated).
fn keep_undisturbed(
    raw: &mut Vec<u64>,
    mut disturbed: Vec<u64>,
    min_kept: usize,
    unit: &str,
    notes: &mut Vec<String>,
) {
    if !disturbed.is_empty() {
        notes.push(preemption_note_for(unit, disturbed.len(), raw.len()));
    }
    if raw.len() < min_kept && !disturbed.is_empty() {
        let add = (min_kept - raw.len()).min(disturbed.len());
        disturbed.sort_unstable();
        raw.extend_from_slice(&disturbed[..add]);
        notes.push(format!(
            "only {} undisturbed {unit} fitted in the budget: {add} preempted {unit} (the fastest) are included, so the figure may be inflated",
            raw.len() - add
        ));
    }
}

/// The note a measurement carries when trials were preempted and repeated.
pub fn preemption_note(preempted: usize, kept: usize) -> String {
    preemption_note_for("trials", preempted, kept)
}

/// `preemption_note` for trials, samples, batches...
pub fn preemption_note_for(unit: &str, preempted: usize, kept: usize) -> String {
    format!(
        "{preempted} {unit} were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed {unit} kept"
    )
}

/// Involuntary context switches of the calling thread so far (getrusage RUSAGE_THREAD).
pub fn thread_preemptions() -> u64 {
    crate::platform::thread_usage()
        .map(|u| u.involuntary_switches)
        .unwrap_or(0)
}

/// Ticks per iteration of an empty `repeat` loop, measured with the given clock.
pub fn measure_loop_ticks(clock: &dyn Clock, cfg: &HarnessConfig) -> f64 {
    let cfg = HarnessConfig {
        detect_preemption: true,
        ..cfg.clone()
    };
    let h = Harness::new(clock, cfg, 0.0);
    let m = h.measure_raw(1.0, |n| repeat(n, || ()));
    let med = crate::stats::median(&m.per_op_ns);
    clock.ns_to_ticks(med).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::MockClock;

    fn cfg() -> HarnessConfig {
        HarnessConfig {
            min_trial: Duration::from_micros(1000),
            trials: 9,
            min_trials: 3,
            warmup: Duration::from_micros(100),
            budget: Duration::from_millis(100),
            calibration_limit: Duration::from_millis(20),
            max_iters: 1 << 40,
            detect_preemption: false,
        }
    }

    #[test]
    fn preemption_check_keeps_undisturbed_trials() {
        // On the real clock with the check on, kept trials are undisturbed or a note says why.
        let (clock, _) = crate::clock::detect(None);
        let c = HarnessConfig {
            detect_preemption: true,
            budget: Duration::from_millis(500),
            ..Default::default()
        };
        let h = Harness::new(&clock, c, 0.0);
        let m = h.measure_raw(1.0, |n| repeat(n, || ()));
        // A loaded host or an emulator may leave fewer trials in the budget; then a note
        // must say so rather than the figure passing silently.
        assert!(
            m.per_op_ns.len() >= 5 || !m.notes.is_empty(),
            "{} trials and no note",
            m.per_op_ns.len()
        );
        if m.preempted > 0 {
            assert!(
                m.notes.iter().any(|n| n.contains("preempted")),
                "{:?}",
                m.notes
            );
        }
    }

    #[test]
    fn recovers_a_known_cost_on_the_mock_clock() {
        let clock = MockClock::new(30);
        // 2 ticks of loop overhead per iteration, 50 ticks of work per operation.
        let h = Harness::new(&clock, cfg(), 2.0);
        let m = h.measure(1.0, |n| clock.advance(n * 52));
        assert_eq!(m.per_op_ns.len(), 9);
        for v in &m.per_op_ns {
            assert!((v - 50.0).abs() < 1e-9, "{v}");
        }
        assert!(m.iters as f64 * 52.0 >= 1000.0 * 1000.0);
        assert!(m.notes.is_empty(), "{:?}", m.notes);
    }

    #[test]
    fn ops_per_iteration_divides() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        let m = h.measure(4.0, |n| clock.advance(n * 40));
        assert!((m.median_ns() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn calibration_is_bounded_when_a_trial_never_grows() {
        // A body whose time does not grow with iterations would calibrate forever; without
        // an iteration cap only the time bound stops it.
        let clock = MockClock::new(0);
        let c = HarnessConfig {
            max_iters: u64::MAX,
            ..cfg()
        };
        let h = Harness::new(&clock, c, 0.0);
        let m = h.measure_raw(1.0, |_| clock.advance(100_000));
        assert!(
            m.notes.iter().any(|n| n.contains("calibration stopped")),
            "{:?}",
            m.notes
        );
        // Total mock time spent stays within a small multiple of the budget.
        assert!(clock.now() < 3 * 100_000_000);
    }

    #[test]
    fn calibration_says_when_it_hits_the_iteration_cap() {
        let clock = MockClock::new(0);
        let c = HarnessConfig {
            max_iters: 1000,
            ..cfg()
        };
        let h = Harness::new(&clock, c, 0.0);
        let m = h.measure_raw(1.0, |n| clock.advance(n));
        assert_eq!(m.iters, 1000);
        assert!(m.notes.iter().any(|n| n.contains("cap")), "{:?}", m.notes);
    }

    #[test]
    fn budget_limits_trials_of_slow_operations() {
        let clock = MockClock::new(0);
        // Each operation takes 30 ms: budget 100 ms allows only a few trials.
        let h = Harness::new(&clock, cfg(), 0.0);
        let m = h.measure(1.0, |n| clock.advance(n * 30_000_000));
        assert_eq!(m.iters, 1);
        assert!(
            m.per_op_ns.len() >= 3 && m.per_op_ns.len() < 9,
            "{}",
            m.per_op_ns.len()
        );
        assert!(m.notes.iter().any(|n| n.contains("budget")));
    }

    #[test]
    fn sample_respects_budget() {
        let clock = MockClock::new(5);
        let h = Harness::new(&clock, cfg(), 0.0);
        let spec = SampleSpec::new(1_000_000, h.config().budget);
        let v = h.sample(&spec, || clock.advance(1_000_000)).ns;
        assert!(v.len() > 50 && v.len() < 200, "{}", v.len());
        assert!((v[0] - 1_000_000.0).abs() < 1e-6);
    }

    thread_local! {
        static PREEMPTIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    fn mock_preemptions() -> u64 {
        PREEMPTIONS.with(|p| p.get())
    }
    fn preempt() {
        PREEMPTIONS.with(|p| p.set(p.get() + 1));
    }

    fn spec(max_n: usize) -> SampleSpec {
        SampleSpec::new(max_n, Duration::from_millis(100))
    }

    #[test]
    fn sampling_stops_at_max_n_within_the_budget() {
        let clock = MockClock::new(5);
        let h = Harness::new(&clock, cfg(), 0.0);
        let s = h.sample(&spec(10), || clock.advance(1_000));
        assert_eq!(s.ns, vec![1_000.0; 10]);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
    }

    #[test]
    fn min_n_is_honoured_past_the_budget_up_to_twice_it() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        // 30 ms each: the 100 ms budget holds 4, min_n asks for 5.
        let s = h.sample(&spec(1000).min_n(5), || clock.advance(30_000_000));
        assert_eq!(s.ns.len(), 5);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
        // min_n 10 cannot fit in twice the budget: stops at 7 (210 ms) and says so.
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        let s = h.sample(&spec(1000).min_n(10), || clock.advance(30_000_000));
        assert_eq!(s.ns.len(), 7);
        assert!(s.notes[0].contains("twice"), "{:?}", s.notes);
    }

    #[test]
    fn preempted_samples_are_repeated_and_noted() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0).with_preemption_counter(mock_preemptions);
        let mut k = 0;
        let s = h.sample(&spec(10).detect_preemption(true), || {
            k += 1;
            if k % 3 == 0 {
                preempt();
                clock.advance(50_000); // timed another task too
            } else {
                clock.advance(1_000);
            }
        });
        assert_eq!(s.ns, vec![1_000.0; 10], "preempted samples kept");
        assert_eq!(s.notes, vec![preemption_note_for("samples", 4, 10)]);
        // Without the check the same samples pass through.
        let h = Harness::new(&clock, cfg(), 0.0).with_preemption_counter(mock_preemptions);
        let s = h.sample(&spec(6), || {
            preempt();
            clock.advance(1_000)
        });
        assert_eq!(s.ns.len(), 6);
        assert!(s.notes.is_empty(), "{:?}", s.notes);
    }

    #[test]
    fn too_few_undisturbed_samples_are_filled_with_the_fastest_preempted() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0).with_preemption_counter(mock_preemptions);
        // Every sample preempted, 30 ms each: stops past the budget with min_n = 3.
        let mut t = 30_000_000;
        let s = h.sample(&spec(100).min_n(3).detect_preemption(true), || {
            preempt();
            t -= 1_000;
            clock.advance(t);
        });
        assert_eq!(s.notes[0], preemption_note_for("samples", 4, 0));
        // The three fastest of the four, fastest first.
        assert_eq!(s.ns, vec![29_996_000.0, 29_997_000.0, 29_998_000.0]);
        assert!(
            s.notes.iter().any(|n| n.contains("may be inflated")),
            "{:?}",
            s.notes
        );
    }

    #[test]
    fn trials_preempted_in_measure_are_repeated_and_noted() {
        let clock = MockClock::new(0);
        let c = HarnessConfig {
            detect_preemption: true,
            ..cfg()
        };
        let h = Harness::new(&clock, c, 0.0).with_preemption_counter(mock_preemptions);
        let mut k = 0;
        let m = h.measure_raw(1.0, |n| {
            k += 1;
            if k % 4 == 0 {
                preempt();
                clock.advance(n * 90);
            } else {
                clock.advance(n * 10);
            }
        });
        assert_eq!(m.per_op_ns.len(), 9);
        assert!(m.per_op_ns.iter().all(|&v| (v - 10.0).abs() < 1e-9));
        assert!(m.preempted > 0);
        assert!(
            m.notes.contains(&preemption_note(m.preempted, 9)),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn try_sample_stops_at_the_first_error() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        let mut k = 0;
        let r = h.try_sample(&spec(100), || {
            k += 1;
            clock.advance(10);
            if k == 5 {
                Err("broken")
            } else {
                Ok(())
            }
        });
        assert_eq!(r.unwrap_err(), "broken");
        assert_eq!(k, 5);
    }

    #[test]
    fn steps_around_a_sample_are_not_timed() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0).with_preemption_counter(mock_preemptions);
        let mut quiet_flags = Vec::new();
        let mut n = 0u64;
        let s = h
            .try_sample_with(
                &spec(4).detect_preemption(true),
                || {
                    clock.advance(1_000_000); // setup: untimed
                    n += 1;
                    Ok::<u64, ()>(n)
                },
                |i| {
                    if *i == 2 {
                        preempt();
                    }
                    clock.advance(*i * 100);
                    Ok(())
                },
                |_, quiet| quiet_flags.push(quiet),
            )
            .unwrap();
        assert_eq!(s.ns, vec![100.0, 300.0, 400.0, 500.0]);
        assert_eq!(quiet_flags, vec![true, false, true, true, true]);
    }

    #[test]
    fn warm_up_stops_at_its_limit() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        let r: Result<usize, ()> = h.warm_up(100, Duration::from_millis(10), || {
            clock.advance(1_000_000);
            Ok(())
        });
        assert_eq!(r, Ok(10));
        let r: Result<usize, ()> = h.warm_up(3, Duration::from_millis(10), || Ok(()));
        assert_eq!(r, Ok(3));
    }

    #[test]
    fn cpu_time_trials_divide_cpu_time_by_operations() {
        let clock = MockClock::new(0);
        let h = Harness::new(&clock, cfg(), 0.0);
        // The thread gets half the wall time: 100 ticks of wall per op is 50 ns of CPU.
        let v = h
            .cpu_time_trials_with(
                || clock.now() / 2,
                3,
                Duration::from_micros(10),
                10,
                || {
                    clock.advance(100);
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
        assert_eq!(v, vec![50.0; 3]);
        // The real source advances while the thread works.
        let (real, _) = crate::clock::detect(None);
        let h2 = Harness::new(&real, cfg(), 0.0);
        let v = h2
            .cpu_time_trials(2, Duration::from_millis(2), 100, || {
                std::hint::black_box(crate::platform::raw_getppid());
                Ok::<(), ()>(())
            })
            .unwrap();
        assert!(v.iter().all(|&ns| ns > 0.0 && ns < 1e6), "{v:?}");
    }

    #[test]
    fn real_clock_measures_a_loop() {
        let (clock, _) = crate::clock::detect(None);
        let c = HarnessConfig {
            budget: Duration::from_millis(100),
            ..Default::default()
        };
        let t = measure_loop_ticks(&clock, &c);
        let ns = clock.ticks_to_ns(t);
        // Loose bound: the machine may be heavily shared while tests run.
        assert!(ns > 0.0 && ns < 1000.0, "loop iteration {ns} ns");
    }
}
