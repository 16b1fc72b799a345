//! The time base: a serialised cycle-counter read per architecture, its frequency,
//! its invariance, and its own read overhead.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A time source the harness measures with. Real clocks read hardware counters; the mock
/// clock lets the harness and statistics be tested deterministically.
pub trait Clock: Send + Sync {
    /// Counter value before a measured region (serialising: earlier work has retired).
    fn start(&self) -> u64;
    /// Counter value after a measured region (serialising: later work has not begun).
    fn stop(&self) -> u64;
    /// Counter ticks per nanosecond.
    fn ticks_per_ns(&self) -> f64;
    /// Ticks an empty start/stop region reports; subtracted from every trial.
    fn overhead_ticks(&self) -> f64;
    /// Short name of the counter ("tsc", "cntvct", "monotonic_raw", "mock").
    fn name(&self) -> &'static str;
    /// Ticks the counter advances by at once. 1 for most, but AMD Zen's TSC is updated
    /// every 10 ns by the P0 ratio (24.45 ticks at a 2445 MHz P0), so its resolution is
    /// 10 ns however fine its tick.
    fn step_ticks(&self) -> f64 {
        1.0
    }
    /// Counter value without serialisation: cheap enough to poll a deadline every
    /// operation, or to time spans of microseconds and longer (`Stopwatch`, `Deadline`).
    fn now(&self) -> u64 {
        self.start()
    }

    fn ticks_to_ns(&self, ticks: f64) -> f64 {
        ticks / self.ticks_per_ns()
    }
    fn ns_to_ticks(&self, ns: f64) -> f64 {
        ns * self.ticks_per_ns()
    }
}

/// What is known about the counter; recorded in the machine description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClockInfo {
    pub counter: String,
    pub frequency_hz: f64,
    /// Where the frequency came from ("cpuid 0x15", "calibrated against CLOCK_MONOTONIC_RAW", ...).
    pub frequency_source: String,
    /// Calibrated frequency, kept even when CPUID gave one, as a cross-check.
    pub calibrated_hz: f64,
    pub invariant: Option<bool>,
    /// Ticks an empty fenced region reports (what measurements contain and have subtracted).
    pub overhead_ticks: f64,
    pub overhead_ns: f64,
    /// Wall-clock cost of one complete start+stop pair including the fences.
    pub pair_cost_ns: f64,
    /// Ticks the counter advances by at once (`Clock::step_ticks`); 1 in documents
    /// written before it was measured. Left out when 1, so those documents re-save as
    /// they were.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub step_ticks: f64,
    /// The counter counts core cycles (false for TSC on modern CPUs, which ticks at a fixed rate).
    pub counts_core_cycles: bool,
    pub warnings: Vec<String>,
}

fn one() -> f64 {
    1.0
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

impl ClockInfo {
    /// "advancing in steps of 10 ns (24.5 ticks)" when the counter skips ticks.
    pub fn step_text(&self) -> Option<String> {
        (self.step_ticks > 1.5 && self.frequency_hz > 0.0).then(|| {
            format!(
                "advancing in steps of {} ({:.1} ticks)",
                crate::units::fmt_ns(self.step_ticks / self.frequency_hz * 1e9),
                self.step_ticks
            )
        })
    }
}

/// The system's raw monotonic clock in nanoseconds (CLOCK_MONOTONIC_RAW on Linux,
/// mach_absolute_time on macOS).
pub(crate) fn monotonic_raw_ns() -> u64 {
    crate::platform::raw_clock_ns()
}

#[cfg(target_arch = "x86_64")]
// CPUID intrinsics became safe in recent Rust; the blocks stay for older toolchains.
#[allow(unused_unsafe)]
mod arch {
    use core::arch::x86_64::{__cpuid, __cpuid_count, __rdtscp, _rdtsc};

    pub(crate) const NAME: &str = "tsc";

    #[inline(always)]
    pub(crate) fn start() -> u64 {
        // SAFETY: CPUID and RDTSC exist on every x86-64 CPU and touch no memory.
        unsafe {
            __cpuid(0);
            _rdtsc()
        }
    }

    #[inline(always)]
    pub(crate) fn now() -> u64 {
        // SAFETY: RDTSC exists on every x86-64 CPU and touches no memory.
        unsafe { _rdtsc() }
    }

    #[inline(always)]
    pub(crate) fn stop() -> u64 {
        let mut aux = 0u32;
        // SAFETY: RDTSCP writes only to `aux`, a local; CPUID touches no memory. RDTSCP is
        // checked for at start-up (`available`) before this clock is chosen.
        unsafe {
            let t = __rdtscp(&mut aux);
            __cpuid(0);
            t
        }
    }

    pub(crate) fn available() -> bool {
        // SAFETY: CPUID is always available on x86-64.
        let ext = unsafe { __cpuid(0x8000_0000) };
        if ext.eax < 0x8000_0001 {
            return false;
        }
        // SAFETY: leaf 0x80000001 is within the supported range checked above.
        let f = unsafe { __cpuid(0x8000_0001) };
        f.edx & (1 << 27) != 0 // RDTSCP
    }

    /// Invariant TSC bit (CPUID 0x80000007 EDX bit 8).
    pub(crate) fn invariant() -> Option<bool> {
        // SAFETY: CPUID is always available on x86-64; leaves are range-checked.
        unsafe {
            if __cpuid(0x8000_0000).eax < 0x8000_0007 {
                return None;
            }
            Some(__cpuid(0x8000_0007).edx & (1 << 8) != 0)
        }
    }

    /// Nominal frequency from CPUID: leaf 0x15 (crystal ratio), 0x16 (base MHz) or the
    /// hypervisor timing leaf 0x40000010 (kHz).
    pub(crate) fn nominal_hz() -> Option<(f64, String)> {
        // SAFETY: CPUID is always available; every leaf is range-checked before use.
        unsafe {
            let max = __cpuid(0).eax;
            if max >= 0x15 {
                let l = __cpuid_count(0x15, 0);
                if l.eax != 0 && l.ebx != 0 && l.ecx != 0 {
                    let hz = l.ecx as f64 * l.ebx as f64 / l.eax as f64;
                    return Some((hz, "CPUID leaf 0x15 (crystal x ratio)".into()));
                }
            }
            if max >= 0x16 {
                let l = __cpuid_count(0x16, 0);
                if l.eax & 0xffff != 0 {
                    let hz = (l.eax & 0xffff) as f64 * 1e6;
                    return Some((hz, "CPUID leaf 0x16 (base MHz)".into()));
                }
            }
            let hv = __cpuid(0x4000_0000).eax;
            if (0x4000_0010..0x5000_0000).contains(&hv) {
                let l = __cpuid(0x4000_0010);
                if l.eax != 0 {
                    return Some((
                        l.eax as f64 * 1e3,
                        "CPUID leaf 0x40000010 (hypervisor)".into(),
                    ));
                }
            }
        }
        None
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub(crate) const NAME: &str = "cntvct";

    #[inline(always)]
    fn read() -> u64 {
        let v: u64;
        // SAFETY: CNTVCT_EL0 is readable from EL0 on Linux (the kernel enables it for the vDSO);
        // ISB keeps the read from being hoisted over earlier instructions.
        unsafe {
            core::arch::asm!("isb", "mrs {v}, cntvct_el0", "isb", v = out(reg) v, options(nostack))
        };
        v
    }
    #[inline(always)]
    pub(crate) fn start() -> u64 {
        read()
    }
    #[inline(always)]
    pub(crate) fn stop() -> u64 {
        read()
    }
    #[inline(always)]
    pub(crate) fn now() -> u64 {
        read()
    }
    pub(crate) fn available() -> bool {
        true
    }
    pub(crate) fn invariant() -> Option<bool> {
        // The generic timer runs at a fixed frequency by architecture.
        Some(true)
    }
    pub(crate) fn nominal_hz() -> Option<(f64, String)> {
        let f: u64;
        // SAFETY: CNTFRQ_EL0 is readable from EL0; it only reads a system register.
        unsafe { core::arch::asm!("mrs {f}, cntfrq_el0", f = out(reg) f, options(nostack, nomem)) };
        (f != 0).then(|| (f as f64, "CNTFRQ_EL0".to_string()))
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    pub(crate) const NAME: &str = "monotonic_raw";
    pub(crate) fn start() -> u64 {
        super::monotonic_raw_ns()
    }
    pub(crate) fn stop() -> u64 {
        super::monotonic_raw_ns()
    }
    pub(crate) fn now() -> u64 {
        super::monotonic_raw_ns()
    }
    pub(crate) fn available() -> bool {
        false
    }
    pub(crate) fn invariant() -> Option<bool> {
        Some(true)
    }
    pub(crate) fn nominal_hz() -> Option<(f64, String)> {
        Some((1e9, "nanoseconds".into()))
    }
}

/// The hardware counter (TSC or CNTVCT), or CLOCK_MONOTONIC_RAW where there is none.
#[derive(Debug, Clone)]
pub(crate) struct HwClock {
    use_counter: bool,
    ticks_per_ns: f64,
    overhead: f64,
    step_ticks: f64,
}

impl Clock for HwClock {
    #[inline(always)]
    fn start(&self) -> u64 {
        if self.use_counter {
            arch::start()
        } else {
            monotonic_raw_ns()
        }
    }
    #[inline(always)]
    fn stop(&self) -> u64 {
        if self.use_counter {
            arch::stop()
        } else {
            monotonic_raw_ns()
        }
    }
    fn ticks_per_ns(&self) -> f64 {
        self.ticks_per_ns
    }
    fn overhead_ticks(&self) -> f64 {
        self.overhead
    }
    fn step_ticks(&self) -> f64 {
        self.step_ticks
    }
    fn name(&self) -> &'static str {
        if self.use_counter {
            arch::NAME
        } else {
            "monotonic_raw"
        }
    }
    #[inline(always)]
    fn now(&self) -> u64 {
        if self.use_counter {
            arch::now()
        } else {
            monotonic_raw_ns()
        }
    }
}

/// One timed span of microseconds or more (a whole read, a fill, a stream), through the
/// run's clock. Unserialised reads: at this length the fences would only add cost.
#[derive(Clone, Copy)]
pub(crate) struct Stopwatch<'a> {
    clock: &'a dyn Clock,
    t0: u64,
}

impl<'a> Stopwatch<'a> {
    pub(crate) fn start(clock: &'a dyn Clock) -> Self {
        Stopwatch {
            clock,
            t0: clock.now(),
        }
    }
    /// Nanoseconds since `start`.
    pub(crate) fn elapsed_ns(&self) -> f64 {
        self.clock
            .ticks_to_ns(self.clock.now().saturating_sub(self.t0) as f64)
    }
    pub(crate) fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns() as u64)
    }
}

/// A point in time on the run's clock: budgets, warm-up limits and stream lengths are
/// deadlines on the same clock the measurements use, so a `MockClock` drives them too.
#[derive(Clone, Copy)]
pub(crate) struct Deadline<'a> {
    clock: &'a dyn Clock,
    end: u64,
}

impl<'a> Deadline<'a> {
    pub(crate) fn after(clock: &'a dyn Clock, d: Duration) -> Self {
        let ticks = clock.ns_to_ticks(d.as_nanos() as f64);
        Deadline {
            clock,
            end: clock.now().saturating_add(ticks as u64),
        }
    }
    pub(crate) fn passed(&self) -> bool {
        self.clock.now() >= self.end
    }
    /// Time left (zero once passed).
    pub(crate) fn remaining(&self) -> Duration {
        let left = self.end.saturating_sub(self.clock.now()) as f64;
        Duration::from_nanos(self.clock.ticks_to_ns(left) as u64)
    }
}

/// Calibrates the counter against CLOCK_MONOTONIC_RAW: median of several windows.
fn calibrate_hz(read: impl Fn() -> u64, window: Duration) -> f64 {
    let mut rates: Vec<f64> = (0..5)
        .map(|_| {
            let n0 = monotonic_raw_ns();
            let c0 = read();
            while monotonic_raw_ns() - n0 < window.as_nanos() as u64 {
                std::hint::spin_loop();
            }
            let c1 = read();
            let n1 = monotonic_raw_ns();
            (c1 - c0) as f64 / ((n1 - n0) as f64 * 1e-9)
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// A tick this long or longer makes a counter coarse: a region of a few tens of ns spans
/// 0 or 1 ticks, so its median says 0 or one tick. Finer counters (every TSC, and 1 GHz
/// arm timers) keep the median, which their own jitter already dithers.
pub const COARSE_TICK_NS: f64 = 2.0;

/// True when one step of `c` is `COARSE_TICK_NS` or longer (24-25 MHz arm timers: Apple
/// silicon's CNTVCT_EL0 and mach_absolute_time, Ampere Altra; AMD Zen's 10 ns TSC steps).
pub fn is_coarse(c: &dyn Clock) -> bool {
    c.ticks_to_ns(c.step_ticks()) >= COARSE_TICK_NS
}

/// The step of a coarse clock in ticks, for `region_ticks`; None for a fine one.
pub fn coarse_step(c: &dyn Clock) -> Option<f64> {
    is_coarse(c).then(|| c.step_ticks())
}

/// "one tick = 41.7 ns" or "one step = 10.0 ns (24.5 ticks)", for texts that say a
/// figure is below the counter's resolution.
pub fn tick_text(c: &dyn Clock) -> String {
    let step = c.step_ticks();
    if step > 1.5 {
        format!(
            "one step = {} ({step:.1} ticks)",
            crate::units::fmt_ns(c.ticks_to_ns(step))
        )
    } else {
        format!("one tick = {}", crate::units::fmt_ns(c.ticks_to_ns(1.0)))
    }
}

/// The typical ticks of many short regions (the values are sorted in place). On a fine
/// counter their median. On a coarse one the median is 0 or 1 tick whatever the region
/// costs, but the mean is unbiased: a region of cost c starts at a uniformly spread phase
/// of the step, so it reads ceil or floor of c/step with the right odds and
/// E[ticks] = c. Reads beyond median + 2 steps (an interrupt) are left out first.
/// `coarse_step`: the step in ticks of a coarse counter, None for a fine one.
pub fn region_ticks(values: &mut [u64], coarse_step: Option<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_unstable();
    let med = values[values.len() / 2];
    let Some(step) = coarse_step else {
        return med as f64;
    };
    let limit = med as f64 + 2.0 * step.max(1.0);
    let kept: Vec<u64> = values
        .iter()
        .copied()
        .filter(|&v| v as f64 <= limit)
        .collect();
    kept.iter().sum::<u64>() as f64 / kept.len() as f64
}

/// The step of a nanosecond clock: a coarse clock's readings all lie on one lattice of
/// its step (41.7 ns for mach_absolute_time on Apple silicon), whatever a read costs, so
/// when nearly every reading is within 1 ns (the rounding to whole ns) of one lattice with
/// a step of `COARSE_TICK_NS` or more, that is the step; 1 ns otherwise.
pub fn clock_step_ns(now: &dyn Fn() -> u64) -> f64 {
    step_of_readings(&dithered_readings(now))
}

/// 2000 readings of `now` with a pseudo-random short spin before each: a fine clock read
/// at perfectly regular intervals would otherwise sit on a lattice of the read's cost.
fn dithered_readings(now: &dyn Fn() -> u64) -> Vec<u64> {
    let mut rng = crate::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    (0..2000)
        .map(|_| {
            for i in 0..rng.below(24) {
                std::hint::black_box(i);
            }
            now()
        })
        .collect()
}

/// Within 1 unit of a lattice of step s by chance is 2/s: below 4 units a fine clock's jittery
/// readings fit too often, so shorter steps are not told apart from a fine clock (and
/// matter little beside a read's own cost).
const LATTICE_MIN_STEP: f64 = 4.0;

/// `clock_step_ns` on recorded readings. Reads faster than the step repeat values and the
/// smallest advance is the step; reads slower (a system-call clock, an emulator) advance
/// by several steps each, so each whole fraction of the smallest advance is tried, largest
/// first: its guess is refined by the ratio of the advances to their step counts (the
/// advances' rounding errors telescope), and it is the step when nearly every advance is
/// within 1 unit of a whole number of steps. A fine clock read at jittery intervals fits
/// no lattice.
fn step_of_readings(readings: &[u64]) -> f64 {
    let mut vals = readings.to_vec();
    vals.sort_unstable();
    vals.dedup();
    if vals.len() < 20 {
        return 1.0;
    }
    let advances: Vec<f64> = vals.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let smallest = advances.iter().copied().fold(f64::INFINITY, f64::min);
    for m in 1..=1024 {
        let mut step = smallest / m as f64;
        if step < LATTICE_MIN_STEP {
            break;
        }
        // Only short advances refine the guess: a long pause's step count would be
        // miscounted by the guess's error.
        for _ in 0..3 {
            let (mut d, mut k) = (0.0, 0.0);
            for &a in &advances {
                let n = (a / step).round();
                if n <= 64.0 {
                    d += a;
                    k += n;
                }
            }
            if k > 0.0 {
                step = d / k;
            }
        }
        let near = advances
            .iter()
            .filter(|&&a| (a - (a / step).round() * step).abs() <= 1.0)
            .count();
        if step >= LATTICE_MIN_STEP && near * 10 >= advances.len() * 9 {
            return step;
        }
    }
    1.0
}

/// The typical ticks of an empty fenced region (`region_ticks`): what every measurement
/// carries and has subtracted.
fn measure_overhead<C: Clock + ?Sized>(c: &C, coarse_step: Option<f64>) -> (f64, f64) {
    let mut region: Vec<u64> = Vec::with_capacity(2000);
    let t0 = monotonic_raw_ns();
    for _ in 0..2000 {
        let a = c.start();
        let b = c.stop();
        region.push(b.wrapping_sub(a));
    }
    let wall = (monotonic_raw_ns() - t0) as f64 / 2000.0;
    // The median (fine counters), not the minimum: trials see the typical cost, and the
    // minimum would under-subtract by the occasional interrupt-free best case.
    (region_ticks(&mut region, coarse_step), wall)
}

/// Builds the best clock the platform offers and describes it. `cpuinfo_invariant` is the
/// operating system's word on the counter's invariance (`machine::cpu::tsc_invariant_flags`
/// on Linux x86), used where the CPU itself does not say.
pub(crate) fn detect(cpuinfo_invariant: Option<bool>) -> (HwClock, ClockInfo) {
    let mut warnings = Vec::new();
    let use_counter = arch::available() && std::env::var_os("OSMETER_CLOCK_FALLBACK").is_none();
    let (hz, source, calibrated, invariant) = if use_counter {
        let calibrated = calibrate_hz(arch::stop, Duration::from_millis(20));
        let invariant = arch::invariant().or(cpuinfo_invariant);
        match arch::nominal_hz() {
            Some((hz, src)) => {
                if ((hz - calibrated) / calibrated).abs() > 0.01 {
                    warnings.push(format!(
                        "counter frequency from {src} ({:.1} MHz) differs from calibration ({:.1} MHz) by more than 1%; using the calibrated value",
                        hz / 1e6,
                        calibrated / 1e6
                    ));
                    (
                        calibrated,
                        "calibrated against CLOCK_MONOTONIC_RAW".to_string(),
                        calibrated,
                        invariant,
                    )
                } else {
                    (hz, src, calibrated, invariant)
                }
            }
            None => (
                calibrated,
                "calibrated against CLOCK_MONOTONIC_RAW".to_string(),
                calibrated,
                invariant,
            ),
        }
    } else {
        warnings.push(
            "no usable cycle counter; using CLOCK_MONOTONIC_RAW (coarser, slower to read)".into(),
        );
        (1e9, "CLOCK_MONOTONIC_RAW (ns)".to_string(), 1e9, Some(true))
    };
    if invariant == Some(false) {
        warnings.push("the cycle counter is not invariant (no constant_tsc/nonstop_tsc): its rate may change with frequency or sleep states".into());
    }
    let mut clock = HwClock {
        use_counter,
        ticks_per_ns: hz / 1e9,
        overhead: 0.0,
        step_ticks: 1.0,
    };
    clock.step_ticks = step_of_readings(&dithered_readings(&|| clock.now()));
    let (overhead, pair_wall) = measure_overhead(&clock, coarse_step(&clock));
    clock.overhead = overhead;
    let info = ClockInfo {
        counter: clock.name().into(),
        frequency_hz: hz,
        frequency_source: source,
        calibrated_hz: calibrated,
        invariant,
        overhead_ticks: overhead,
        overhead_ns: overhead / clock.ticks_per_ns,
        pair_cost_ns: pair_wall,
        step_ticks: clock.step_ticks,
        counts_core_cycles: false,
        warnings,
    };
    (clock, info)
}

/// The core clock as timed by dependent chains, and the cross-check.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreClock {
    /// From the register-register add chain (1 cycle per link).
    pub hz: f64,
    /// From the imul chain (3 cycles per link) where there is one (x86-64).
    pub imul_hz: Option<f64>,
}

/// Cycles per link of each chain. A register-register add and a 64-bit imul take 1 and 3
/// cycles on every x86-64 core since Nehalem and Zen; AArch64 adds take 1.
pub(crate) const ADD_LATENCY: f64 = 1.0;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the imul chain is x86-64 only
pub(crate) const IMUL_LATENCY: f64 = 3.0;
const LINKS_PER_ITER: u64 = 100;

/// Core clock from the fastest of `windows` timed windows, each `links` dependent links of
/// `latency` cycles: the fastest is the one least disturbed by preemption or interrupts.
pub(crate) fn core_hz_from_windows(
    links: u64,
    latency: f64,
    windows: usize,
    mut time_window_ns: impl FnMut() -> f64,
) -> Option<f64> {
    let best = (0..windows)
        .map(|_| time_window_ns())
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min);
    best.is_finite()
        .then(|| links as f64 * latency / (best * 1e-9))
}

impl CoreClock {
    /// What is wrong with the estimate: above the hardware's maximum (cpufreq
    /// cpuinfo_max_freq, when known) or the two chains disagree.
    pub(crate) fn warnings(&self, max_hz: Option<f64>) -> Vec<String> {
        let mut w = Vec::new();
        // 3% covers timing noise at the window level; a real boost state is in max_freq.
        if let Some(max) = max_hz.filter(|m| *m > 0.0) {
            if self.hz > max * 1.03 {
                w.push(format!(
                    "the measured core clock ({:.2} GHz) is above the CPU's maximum ({:.2} GHz, cpufreq \
                     cpuinfo_max_freq): the add chain ran faster than one link per cycle, so cycle figures \
                     and cycle-based predictions are suspect",
                    self.hz / 1e9,
                    max / 1e9
                ));
            }
        }
        if let Some(m) = self.imul_hz {
            let r = self.hz / m;
            if !(0.85..=1.15).contains(&r) {
                w.push(format!(
                    "the core clock from the add chain ({:.2} GHz) and from the imul chain ({:.2} GHz, 3 \
                     cycles per imul) disagree by {:.0}%: one of the latencies assumed does not hold on this core",
                    self.hz / 1e9,
                    m / 1e9,
                    (r - 1.0).abs() * 100.0
                ));
            }
        }
        w
    }
}

/// Times dependent chains that no core executes faster than their latency. An `add reg, imm`
/// chain is not enough: from Golden Cove on, small immediate adds can execute at rename with
/// zero latency. A register-register add cannot be eliminated; the imul chain (x86-64) is the
/// independent cross-check.
pub fn measure_core_clock() -> Option<CoreClock> {
    #[cfg(target_arch = "x86_64")]
    fn add_chain(iters: u64) {
        let mut x = 0u64;
        let y = crate::opaque::hide(1);
        for _ in 0..iters {
            // SAFETY: register-only arithmetic on locals; no memory or stack; flags clobbered.
            unsafe {
                core::arch::asm!(
                    ".rept 100", "add {x}, {y}", ".endr",
                    x = inout(reg) x, y = in(reg) y, options(nomem, nostack)
                )
            };
        }
        crate::opaque::keep(x);
    }
    #[cfg(target_arch = "x86_64")]
    fn imul_chain(iters: u64) {
        let mut x = 1u64;
        let y = crate::opaque::hide(3);
        for _ in 0..iters {
            // SAFETY: register-only arithmetic on locals; no memory or stack; flags clobbered.
            unsafe {
                core::arch::asm!(
                    ".rept 100", "imul {x}, {y}", ".endr",
                    x = inout(reg) x, y = in(reg) y, options(nomem, nostack)
                )
            };
        }
        crate::opaque::keep(x);
    }
    #[cfg(target_arch = "aarch64")]
    fn add_chain(iters: u64) {
        let mut x = 0u64;
        let y = crate::opaque::hide(1);
        for _ in 0..iters {
            // SAFETY: register-only arithmetic on locals.
            unsafe {
                core::arch::asm!(
                    ".rept 100", "add {x}, {x}, {y}", ".endr",
                    x = inout(reg) x, y = in(reg) y, options(nomem, nostack)
                )
            };
        }
        crate::opaque::keep(x);
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn add_chain(_iters: u64) {}
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return None;
    }
    // Short windows (~0.6 ms), best of many: one of them will run without preemption even
    // on a busy machine.
    let iters = 20_000u64;
    let timed = |chain: fn(u64)| {
        chain(100_000); // warm up: let the core reach its running frequency
        move || {
            let t0 = monotonic_raw_ns();
            chain(iters);
            (monotonic_raw_ns() - t0) as f64
        }
    };
    // 33 add windows with an imul window after every third: interleaved, so that both
    // chains' best windows come from the same spell of the host (a vCPU slowed while one
    // chain ran alone reads as the two disagreeing).
    let add = timed(add_chain);
    #[cfg(target_arch = "x86_64")]
    let imul = Some(timed(imul_chain));
    #[cfg(not(target_arch = "x86_64"))]
    let imul = None::<fn() -> f64>;
    let (mut add_ns, mut imul_ns) = (Vec::new(), Vec::new());
    for i in 0..33 {
        add_ns.push(add());
        if let Some(imul) = imul.as_ref().filter(|_| i % 3 == 2) {
            imul_ns.push(imul());
        }
    }
    let from = |v: Vec<f64>, latency: f64| {
        let n = v.len();
        let mut v = v.into_iter();
        core_hz_from_windows(iters * LINKS_PER_ITER, latency, n, || {
            v.next().unwrap_or(0.0)
        })
    };
    let hz = from(add_ns, ADD_LATENCY)?;
    let imul_hz = from(imul_ns, IMUL_LATENCY);
    Some(CoreClock { hz, imul_hz })
}

/// A coarse counter for tests on any machine: CLOCK_MONOTONIC_RAW read as a counter of
/// `hz` ticks per second (24 MHz: Apple silicon's), each read rounded down to a tick.
#[derive(Debug)]
pub struct CoarseClock {
    hz: f64,
    overhead: f64,
}

impl CoarseClock {
    /// The counter, its empty-region overhead measured as `detect` measures the real one's.
    pub fn new(hz: f64) -> Self {
        let mut c = CoarseClock { hz, overhead: 0.0 };
        c.overhead = measure_overhead(&c, coarse_step(&c)).0;
        c
    }
    fn read(&self) -> u64 {
        self.ticks_at(monotonic_raw_ns())
    }
    /// The counter as a nanosecond clock (what `raw_clock_ns` is on a Mac).
    pub fn ns(&self) -> u64 {
        self.ns_at(monotonic_raw_ns())
    }
    /// What the counter reads, in ns, at the instant the fine clock reads `fine_ns`: so a
    /// test can time one window with both clocks at once.
    pub fn ns_at(&self, fine_ns: u64) -> u64 {
        (self.ticks_at(fine_ns) as f64 * 1e9 / self.hz) as u64
    }
    /// The counter's ticks at the instant the fine clock reads `fine_ns`.
    pub fn ticks_at(&self, fine_ns: u64) -> u64 {
        (fine_ns as f64 * self.hz / 1e9) as u64
    }
}

impl Clock for CoarseClock {
    fn start(&self) -> u64 {
        self.read()
    }
    fn stop(&self) -> u64 {
        self.read()
    }
    fn ticks_per_ns(&self) -> f64 {
        self.hz / 1e9
    }
    fn overhead_ticks(&self) -> f64 {
        self.overhead
    }
    fn name(&self) -> &'static str {
        "coarse"
    }
}

/// A clock whose stated rate is wrong by `factor` (a counter whose frequency was
/// mis-measured): it reads CLOCK_MONOTONIC_RAW in ns but claims `factor` ticks per ns, so
/// every figure timed with it comes out `factor` times too small. For tests that make an
/// experiment's premise about time fail.
#[derive(Debug)]
pub struct MisratedClock {
    inner: CoarseClock,
    factor: f64,
}

impl MisratedClock {
    pub fn new(factor: f64) -> Self {
        MisratedClock {
            inner: CoarseClock::new(1e9),
            factor,
        }
    }
}

impl Clock for MisratedClock {
    fn start(&self) -> u64 {
        self.inner.start()
    }
    fn stop(&self) -> u64 {
        self.inner.stop()
    }
    fn ticks_per_ns(&self) -> f64 {
        self.factor
    }
    fn overhead_ticks(&self) -> f64 {
        self.inner.overhead_ticks()
    }
    fn name(&self) -> &'static str {
        "misrated"
    }
}

/// A counter not synchronised across CPUs (as a TSC can be on old or broken firmware): a
/// 1 GHz counter offset by one second per CPU number. Spans timed on one CPU are right;
/// readings taken on two CPUs disagree by seconds. For tests of premises that compare
/// times taken on different CPUs.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct SkewedClock {
    inner: CoarseClock,
}

#[cfg(test)]
impl Default for CoarseClock {
    /// A 1 GHz counter.
    fn default() -> Self {
        CoarseClock::new(1e9)
    }
}

#[cfg(test)]
impl SkewedClock {
    fn read(&self, base: u64) -> u64 {
        let cpu = crate::platform::current_cpu_raw().max(0) as u64;
        base + cpu * 1_000_000_000
    }
}

#[cfg(test)]
impl Clock for SkewedClock {
    fn start(&self) -> u64 {
        self.read(self.inner.start())
    }
    fn stop(&self) -> u64 {
        self.read(self.inner.stop())
    }
    fn ticks_per_ns(&self) -> f64 {
        1.0
    }
    fn overhead_ticks(&self) -> f64 {
        self.inner.overhead_ticks()
    }
    fn name(&self) -> &'static str {
        "skewed"
    }
}

/// A deterministic clock for tests: one tick per nanosecond, advanced explicitly.
#[derive(Debug, Default)]
pub struct MockClock {
    now: std::sync::atomic::AtomicU64,
    pub overhead: u64,
}

impl MockClock {
    pub fn new(overhead: u64) -> Self {
        MockClock {
            now: Default::default(),
            overhead,
        }
    }
    pub(crate) fn advance(&self, ticks: u64) {
        self.now
            .fetch_add(ticks, std::sync::atomic::Ordering::SeqCst);
    }
    pub(crate) fn now(&self) -> u64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Clock for MockClock {
    fn start(&self) -> u64 {
        self.now()
    }
    fn stop(&self) -> u64 {
        self.advance(self.overhead);
        self.now()
    }
    fn ticks_per_ns(&self) -> f64 {
        1.0
    }
    fn overhead_ticks(&self) -> f64 {
        self.overhead as f64
    }
    fn name(&self) -> &'static str {
        "mock"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_clock_is_monotonic_and_plausible() {
        let (c, info) = detect(None);
        assert!(
            info.frequency_hz > 1e6 && info.frequency_hz < 1e11,
            "{info:?}"
        );
        assert!(
            info.overhead_ns >= 0.0 && info.overhead_ns < 1000.0,
            "{info:?}"
        );
        let a = c.start();
        let b = c.stop();
        assert!(b >= a);
        // The counter agrees with CLOCK_MONOTONIC_RAW over 20 ms to within 5%. Each end
        // is a counter read bracketed by two clock reads at most 20 us apart (retried
        // until so): a preemption between the two clocks' reads would otherwise count
        // in one span and not the other.
        let pair = || {
            for _ in 0..1000 {
                let n0 = monotonic_raw_ns();
                let t = c.start();
                let n1 = monotonic_raw_ns();
                if n1 - n0 < 20_000 {
                    return (t, (n0 + n1) / 2);
                }
            }
            panic!("no counter read within 20 us of the clock's in 1000 tries");
        };
        let (c0, n0) = pair();
        std::thread::sleep(Duration::from_millis(20));
        let (c1, n1) = pair();
        let ratio = c.ticks_to_ns((c1 - c0) as f64) / (n1 - n0) as f64;
        assert!((0.95..1.05).contains(&ratio), "ratio {ratio}");
    }

    #[test]
    fn core_clock_is_plausible() {
        if let Some(c) = measure_core_clock() {
            assert!(c.hz > 1e8 && c.hz < 1e10, "{c:?}");
            // The two chains agree within noise on a real core (loose: the machine is shared).
            if let Some(m) = c.imul_hz {
                assert!((0.7..1.4).contains(&(c.hz / m)), "{c:?}");
            }
        }
    }

    #[test]
    fn stopwatch_and_deadline_follow_the_clock() {
        let c = MockClock::new(7);
        let sw = Stopwatch::start(&c);
        let d = Deadline::after(&c, Duration::from_micros(10));
        assert!(!d.passed());
        c.advance(4_000);
        assert_eq!(sw.elapsed_ns(), 4_000.0);
        assert_eq!(d.remaining(), Duration::from_micros(6));
        c.advance(6_000);
        assert!(d.passed());
        assert_eq!(d.remaining(), Duration::ZERO);
        // Polling neither advances the mock clock nor charges the fence overhead.
        assert_eq!(c.now(), 10_000);
        assert_eq!(sw.elapsed(), Duration::from_micros(10));
    }

    #[test]
    fn unserialised_read_agrees_with_the_fenced_one() {
        let (c, _) = detect(None);
        let a = c.start();
        let n = c.now();
        let b = c.stop();
        assert!(a <= n && n <= b, "{a} {n} {b}");
    }

    #[test]
    fn core_clock_arithmetic() {
        // 2,000,000 one-cycle links in 1 ms is 2 GHz; the fastest window counts.
        let mut t = [1.5e6, 1.0e6, 1.2e6].into_iter();
        let hz = core_hz_from_windows(2_000_000, 1.0, 3, || t.next().unwrap()).unwrap();
        assert!((hz - 2e9).abs() < 1.0, "{hz}");
        // 3-cycle links: the same window is three times as many cycles.
        let hz = core_hz_from_windows(2_000_000, 3.0, 1, || 1.0e6).unwrap();
        assert!((hz - 6e9).abs() < 1.0, "{hz}");
        // No usable window: no estimate.
        assert_eq!(core_hz_from_windows(1, 1.0, 2, || 0.0), None);
    }

    #[test]
    fn coarse_regions_are_averaged_without_bias() {
        // A 30 ns region on a 41.7 ns counter at evenly spread phases reads 1 tick 72% of
        // the time, 0 otherwise: the median says one tick (41.7 ns), the mean 30 ns.
        let tick = 1e9 / 24e6;
        let mut v: Vec<u64> = (0..1000)
            .map(|i| {
                let start = i as f64 * 7.31; // phases spread over the tick
                (((start + 30.0) / tick).floor() - (start / tick).floor()) as u64
            })
            .collect();
        v.push(500); // an interrupt
        let mean = region_ticks(&mut v.clone(), Some(1.0)) * tick;
        assert!((mean - 30.0).abs() < 1.5, "{mean}");
        assert_eq!(region_ticks(&mut v, None), 1.0);
        // A fine counter keeps its median.
        assert_eq!(region_ticks(&mut [40, 42, 41, 900], None), 42.0);
        assert_eq!(region_ticks(&mut [], Some(1.0)), 0.0);
    }

    /// Readings of a clock with step `tick` ns (1.0: fine) taken every `gap` ns plus up to
    /// `jitter` ns, floored to whole ns as a nanosecond clock reports them.
    fn readings(tick: f64, gap: f64, jitter: usize, seed: u64) -> Vec<u64> {
        let mut rng = crate::rng::Rng::new(seed);
        let mut t = 1e6 + rng.below(1000) as f64;
        (0..2000)
            .map(|_| {
                t += gap + rng.below(jitter + 1) as f64;
                ((t / tick).floor() * tick).floor() as u64
            })
            .collect()
    }

    #[test]
    fn the_step_is_found_whether_reads_are_faster_or_slower_than_it() {
        let tick = 1e9 / 24e6;
        for seed in 1..6 {
            // Fast reads (a Mac's vDSO-like read) repeat values; slow ones (a system call,
            // qemu-user) skip several steps per read, as in CI's aarch64 run.
            for (gap, jitter) in [(15.0, 10), (600.0, 400), (3000.0, 2000)] {
                let s = step_of_readings(&readings(tick, gap, jitter, seed));
                assert!((s - tick).abs() < 0.05, "gap {gap}: {s}");
            }
            // A fine clock fits no lattice however it is read.
            for (gap, jitter) in [(15.0, 10), (600.0, 400), (3000.0, 2000)] {
                let s = step_of_readings(&readings(1.0, gap, jitter, seed));
                assert_eq!(s, 1.0, "gap {gap}");
            }
        }
        // AMD Zen's TSC in ticks: 24.45 ticks at once (10 ns at 2445 MHz).
        let s = step_of_readings(&readings(24.45, 30.0, 40, 3));
        assert!((s - 24.45).abs() < 0.05, "{s}");
        // A 10 MHz counter read slowly.
        let s = step_of_readings(&readings(100.0, 700.0, 500, 9));
        assert!((s - 100.0).abs() < 0.1, "{s}");
        // A long pause after the first read (seen under qemu-user: 59 us) misleads no guess.
        let mut r = readings(tick, 550.0, 300, 4);
        let first = r[0];
        let shift = ((59_000.0 / tick).round() * tick) as u64;
        r.iter_mut().skip(1).for_each(|v| *v += shift);
        r[0] = first;
        let s = step_of_readings(&r);
        assert!((s - tick).abs() < 0.05, "{s}");
        // Too few distinct readings to judge.
        assert_eq!(step_of_readings(&[5, 5, 5]), 1.0);
    }

    #[test]
    fn a_24_mhz_counter_is_coarse_and_its_step_is_found() {
        let c = CoarseClock::new(24e6);
        assert!(is_coarse(&c));
        assert!(tick_text(&c).contains("41.7 ns"), "{}", tick_text(&c));
        let step = clock_step_ns(&|| c.ns());
        assert!((41.0..=42.0).contains(&step), "{step}");
        // CLOCK_MONOTONIC_RAW's step is the hardware's: 1 ns on Intel, 10 ns on AMD Zen
        // (its TSC steps by the P0 ratio at 100 MHz), tens of ns under an emulator.
        let raw = clock_step_ns(&monotonic_raw_ns);
        assert!((1.0..=100.0).contains(&raw), "{raw}");
        // The hardware counter's step, in ns, is the raw clock's where both read one
        // counter: both coarse or both fine.
        let (hw, info) = detect(None);
        assert!(info.step_ticks >= 1.0, "{}", info.step_ticks);
        if cfg!(target_arch = "x86_64") && raw < 1.5 {
            assert!(!is_coarse(&hw), "{}", tick_text(&hw));
        }
        // Its overhead is the mean of ticks, not a median of 0 or 1: above 0 and within
        // a step of what a read pair costs in wall time (a fraction of a tick where reads
        // are fast, a dozen under qemu-user).
        let o = c.overhead_ticks();
        let (_, pair_ns) = measure_overhead(&c, coarse_step(&c));
        let tick_ns = c.ticks_to_ns(1.0);
        assert!(
            o > 0.0 && o * tick_ns <= 2.0 * pair_ns + tick_ns,
            "{o} ticks, pair {pair_ns} ns"
        );
    }

    #[test]
    fn core_clock_above_maximum_is_flagged() {
        // A chain eliminated at rename reads several times the real clock.
        let eliminated = CoreClock {
            hz: 9.6e9,
            imul_hz: Some(3.2e9),
        };
        let w = eliminated.warnings(Some(3.2e9));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("above the CPU's maximum"), "{w:?}");
        assert!(w[1].contains("disagree"), "{w:?}");
        let fine = CoreClock {
            hz: 3.1e9,
            imul_hz: Some(3.05e9),
        };
        assert!(fine.warnings(Some(3.2e9)).is_empty());
        // Without cpufreq only the cross-check speaks.
        assert!(fine.warnings(None).is_empty());
        assert_eq!(eliminated.warnings(None).len(), 1);
    }
}
