//! The kernel kit: what more than one experiment area needs, so that no area imports another.

use crate::harness::{Harness, HarnessConfig, Measurement};

pub(crate) mod children;
pub(crate) mod files;
pub(crate) mod place;
pub(crate) mod region;
pub(crate) mod team;

pub(crate) use region::{
    huge_page, largest_set, line_bytes, llc_bytes, llc_or_assumed, memory_cap, rss_baseline,
    rss_check, thp_available, thread_faults, too_small_for_huge_pages, Pages, Region, UNKNOWN_LLC,
};

/// Measures `body(iters)` under `cfg`, repeating preempted trials; only the clock's
/// overhead is subtracted (a chase or stream step dwarfs the loop's).
pub(crate) fn measure_raw(
    clock: &dyn crate::clock::Clock,
    cfg: &HarnessConfig,
    ops_per_iter: f64,
    body: impl FnMut(u64),
) -> Measurement {
    let m = Harness::new(clock, cfg.clone(), 0.0).measure_raw(ops_per_iter, body);
    without_preemption_note(m)
}

/// Memory experiments sum preempted trials into one note of their own.
fn without_preemption_note(mut m: Measurement) -> Measurement {
    let note = crate::harness::preemption_note(m.preempted, m.undisturbed);
    m.notes.retain(|n| *n != note);
    m
}

/// As `measure_raw` over a trial the caller times (threads released together):
/// `trial(iters)` returns its ticks and whether every thread ran undisturbed.
pub(crate) fn measure_trials(
    clock: &dyn crate::clock::Clock,
    cfg: &HarnessConfig,
    ops_per_iter: f64,
    trial: impl FnMut(u64) -> (u64, bool),
) -> Measurement {
    let m = Harness::new(clock, cfg.clone(), 0.0).measure_trials(ops_per_iter, trial);
    without_preemption_note(m)
}

/// Spins until `cond`, yielding now and then so a thread we wait for can run here.
pub(crate) fn spin_until(cond: impl Fn() -> bool) {
    poll_until(cond, 1024, std::thread::yield_now);
}

fn poll_until(cond: impl Fn() -> bool, every: u64, pause: impl Fn()) {
    let mut spins = 0u64;
    while !cond() {
        spins += 1;
        if spins % every == 0 {
            pause();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// "16KiB" style label of a size, for metric and series names.
pub(crate) fn size_label(b: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b % (1 << shift) == 0 {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(size_label(16 << 10), "16KiB");
        assert_eq!(size_label(512 << 20), "512MiB");
        assert_eq!(size_label(100), "100B");
    }
}
