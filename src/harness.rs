//! The shared measurement loop: warm-up, iteration calibration with a hard time bound,
//! trials within a budget, and subtraction of the clock's and the loop's own cost.
//!
//! All timing, including the time bounds, goes through a `Clock`, so a `MockClock` makes
//! the whole harness deterministic in tests.

use crate::clock::Clock;
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

/// Trials of one calibrated measurement.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Per-operation time of each trial in ns, clock and loop overhead subtracted.
    pub per_op_ns: Vec<f64>,
    /// Raw counter ticks of each trial, before any subtraction.
    pub raw_ticks: Vec<u64>,
    /// Iterations per trial.
    pub iters: u64,
    /// Operations per iteration (the body may do several per iteration).
    pub ops_per_iter: f64,
    /// Every trial reached the minimum trial length.
    pub stable: bool,
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
}

/// The canonical measured loop: `op` runs `iters` times and its result cannot be discarded.
/// Kernels use this (or the same shape) so that the loop overhead measured on an empty
/// body is the overhead they carry.
///
/// Register-only: the counter and each result stay in registers. `black_box` would store
/// every result to the stack, and how store forwarding and memory-dependence prediction
/// then settle varies from run to run (the loop read 0.34 or 0.79 ns in different runs).
/// The counter passes through `hide` each iteration, so the trip count is unknown to the
/// optimiser and the loop is neither unrolled nor collapsed.
#[inline(always)]
pub fn repeat<T: Reg>(iters: u64, mut op: impl FnMut() -> T) {
    let mut i = iters;
    while i != 0 {
        keep(op());
        i = hide(i).wrapping_sub(1);
    }
}

/// A value that fits one general-purpose register, so `keep` can consume it without memory.
pub trait Reg: Copy {
    fn bits(self) -> u64;
}
macro_rules! reg_int {
    ($($t:ty),*) => {$(
        impl Reg for $t {
            #[inline(always)]
            fn bits(self) -> u64 {
                self as u64
            }
        }
    )*};
}
reg_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, bool);
impl Reg for () {
    #[inline(always)]
    fn bits(self) -> u64 {
        0
    }
}
impl<P> Reg for *const P {
    #[inline(always)]
    fn bits(self) -> u64 {
        self as usize as u64
    }
}
impl<P> Reg for *mut P {
    #[inline(always)]
    fn bits(self) -> u64 {
        self as usize as u64
    }
}

/// Consumes `v` in a register: the compiler must compute it but stores nothing. Also a
/// compiler barrier (the asm may have side effects) that does not touch memory.
#[inline(always)]
pub fn keep<T: Reg>(v: T) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty asm statement reading one register; no memory, stack or flags.
    unsafe {
        core::arch::asm!("/* keep {0} */", in(reg) v.bits(), options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::hint::black_box(v.bits());
}

/// Returns `v` unchanged, but the optimiser cannot know its value; it stays in a register.
#[inline(always)]
pub fn hide(v: u64) -> u64 {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut v = v;
        // SAFETY: an empty asm statement that may "change" one register; no memory or flags.
        unsafe {
            core::arch::asm!("/* hide {0} */", inout(reg) v, options(nomem, nostack, preserves_flags))
        };
        v
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::hint::black_box(v)
}

impl<'a> Harness<'a> {
    pub fn new(clock: &'a dyn Clock, cfg: HarnessConfig, loop_ticks: f64) -> Self {
        Harness {
            clock,
            cfg,
            loop_ticks,
        }
    }

    pub fn config(&self) -> &HarnessConfig {
        &self.cfg
    }

    pub fn clock(&self) -> &dyn Clock {
        self.clock
    }

    /// Ticks per empty loop iteration subtracted from measurements.
    pub fn loop_ticks(&self) -> f64 {
        self.loop_ticks
    }

    fn ticks(&self, d: Duration) -> f64 {
        self.clock.ns_to_ticks(d.as_nanos() as f64)
    }

    /// One trial of `body`: its ticks, and whether it ran undisturbed.
    fn time_body(&self, body: &mut dyn FnMut(u64), iters: u64) -> (u64, bool) {
        let c0 = if self.cfg.detect_preemption {
            thread_preemptions()
        } else {
            0
        };
        let t0 = self.clock.start();
        body(iters);
        let t1 = self.clock.stop();
        let quiet = !self.cfg.detect_preemption || thread_preemptions() == c0;
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

    fn run(
        &self,
        ops_per_iter: f64,
        subtract_loop: bool,
        trial: &mut dyn FnMut(u64) -> (u64, bool),
    ) -> Measurement {
        let began = self.clock.start();
        let elapsed = || self.clock.stop().wrapping_sub(began) as f64;
        let min_trial = self.ticks(self.cfg.min_trial);
        let cal_limit = self.ticks(self.cfg.calibration_limit);
        let budget = self.ticks(self.cfg.budget);
        let mut notes = Vec::new();

        // Calibrate: grow the iteration count until a trial lasts min_trial.
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
        let mut disturbed = Vec::new();
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
        if preempted > 0 {
            notes.push(preemption_note(preempted, raw.len()));
        }
        let min_kept = self.cfg.min_trials.max(1);
        if raw.len() < min_kept && !disturbed.is_empty() {
            let add = (min_kept - raw.len()).min(disturbed.len());
            disturbed.sort_unstable();
            raw.extend_from_slice(&disturbed[..add]);
            notes.push(format!(
                "only {} undisturbed trials fitted in the budget: {add} preempted trials (the fastest) are included, so the figure may be inflated",
                raw.len() - add
            ));
        }

        let overhead = self.clock.overhead_ticks();
        let loop_ticks = if subtract_loop { self.loop_ticks } else { 0.0 };
        let per_op_ns = raw
            .iter()
            .map(|&t| {
                let per_iter = (t as f64 - overhead) / iters as f64 - loop_ticks;
                self.clock.ticks_to_ns(per_iter) / ops_per_iter
            })
            .collect();
        let stable = raw.iter().all(|&t| t as f64 >= min_trial);
        Measurement {
            per_op_ns,
            raw_ticks: raw,
            iters,
            ops_per_iter,
            stable,
            notes,
            preempted,
            undisturbed,
        }
    }

    /// Times each of up to `max_n` single operations separately (for distributions such
    /// as connection setup), within the budget. Returns ns per operation, clock overhead
    /// subtracted.
    pub fn sample_each(&self, max_n: usize, mut op: impl FnMut()) -> Vec<f64> {
        let began = self.clock.start();
        let budget = self.ticks(self.cfg.budget);
        let overhead = self.clock.overhead_ticks();
        let mut out = Vec::with_capacity(max_n.min(1 << 20));
        while out.len() < max_n {
            let t0 = self.clock.start();
            op();
            let t1 = self.clock.stop();
            out.push(
                self.clock
                    .ticks_to_ns((t1.wrapping_sub(t0) as f64 - overhead).max(0.0)),
            );
            if self.clock.stop().wrapping_sub(began) as f64 > budget {
                break;
            }
        }
        out
    }
}

/// The note a measurement carries when trials were preempted and repeated.
pub fn preemption_note(preempted: usize, kept: usize) -> String {
    format!(
        "{preempted} trials were preempted by other tasks (involuntary context switch) and repeated; {kept} undisturbed trials kept"
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
        let (clock, _) = crate::clock::detect();
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
        assert!(m.stable);
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
        assert!(!m.stable);
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
        assert!(!m.stable);
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
    fn sample_each_respects_budget() {
        let clock = MockClock::new(5);
        let h = Harness::new(&clock, cfg(), 0.0);
        let v = h.sample_each(1_000_000, || clock.advance(1_000_000));
        assert!(v.len() > 50 && v.len() < 200, "{}", v.len());
        assert!((v[0] - 1_000_000.0).abs() < 1e-6);
    }

    #[test]
    fn real_clock_measures_a_loop() {
        let (clock, _) = crate::clock::detect();
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
