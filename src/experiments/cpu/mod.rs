//! CPU, scheduling and OS-service experiments (docs/METHODOLOGY.md, "CPU and OS services").

use super::Experiment;

mod call;
mod core_to_core;
mod loop_cost;
pub(crate) mod process_create;
pub(crate) mod switch;
pub(crate) mod syscall;
pub(crate) mod thread_create;
mod timer;

/// In run order: each may use the ones before it in its prediction.
pub fn experiments() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(timer::Timer),
        Box::new(loop_cost::LoopCost),
        Box::new(call::Call),
        Box::new(syscall::Syscall),
        Box::new(switch::ThreadSwitch),
        Box::new(switch::ProcessSwitch),
        Box::new(core_to_core::CoreToCore),
        Box::new(thread_create::ThreadCreate),
        Box::new(process_create::ProcessCreate),
    ]
}

/// Whether the system-call counts traced from the methods (strace -f) hold for this build:
/// they were counted against glibc on Linux x86-64; musl and macOS's libSystem make other calls.
pub(crate) const COUNTS_HOLD: bool = cfg!(all(target_os = "linux", target_env = "gnu"));
/// Where the traced counts come from, for a prediction input.
pub(crate) const STRACE_LIBC: &str =
    "method: strace -f of the method's loop, glibc 2.36 (Debian 12, Linux x86-64)";
/// Why a count-based prediction is withheld off glibc.
pub(crate) const COUNTS_WITHHELD: &str =
    "the system-call counts were traced against glibc on Linux; this build's C library makes other calls";

/// A harness like `ctx.harness(parts)` whose trials last `factor` times the profile's
/// minimum: operations of microseconds that go through the scheduler (switches, task
/// creation) need longer trials to average out other tasks' interference.
pub(crate) fn long_trials<'a>(
    ctx: &super::Context<'a>,
    parts: usize,
    factor: u32,
) -> crate::harness::Harness<'a> {
    let mut cfg = ctx.harness(parts).config().clone();
    cfg.min_trial *= factor.max(1);
    crate::harness::Harness::new(ctx.clock, cfg, ctx.loop_ticks)
}
