//! CPU, scheduling and OS-service experiments (SPEC section 3).

use super::Experiment;

mod call;
mod loop_cost;
mod syscall;
mod timer;

/// In run order: each may use the ones before it in its prediction.
pub fn experiments() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(timer::Timer),
        Box::new(loop_cost::LoopCost),
        Box::new(call::Call),
        Box::new(syscall::Syscall),
    ]
}

/// Core clock in GHz (cycles per ns) for cycle-based models, with where it came from.
pub(crate) fn core_ghz(ctx: &super::Context) -> (f64, String) {
    match ctx.machine.cpu.core_clock_hz {
        Some(hz) => (
            hz / 1e9,
            "machine: effective core clock (dependent add chain)".into(),
        ),
        None => (
            ctx.clock.ticks_per_ns(),
            "machine: counter frequency (core clock unknown)".into(),
        ),
    }
}
