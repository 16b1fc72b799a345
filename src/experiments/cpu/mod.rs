//! CPU, scheduling and OS-service experiments (docs/METHODOLOGY.md, "CPU and OS services").

use super::kit::place::Place;
use super::predict::{Input, Predictions};
use super::Context;
use crate::harness::{Harness, Measurement};
use crate::opaque::repeat;
use crate::results::{Check, Prediction};
use std::os::fd::RawFd;

pub(crate) mod call;
pub(crate) mod core_to_core;
pub(crate) mod loop_cost;
pub(crate) mod process_create;
pub(crate) mod signal;
pub(crate) mod switch;
pub(crate) mod syscall;
pub(crate) mod thread_create;
pub(crate) mod timer;

/// The system-call counts were traced (strace -f) against glibc on Linux x86-64.
const COUNTS_HOLD: bool = cfg!(all(target_os = "linux", target_env = "gnu"));
const STRACE_LIBC: &str =
    "method: strace -f of the method's loop, glibc 2.36 (Debian 12, Linux x86-64)";
const COUNTS_WITHHELD: &str =
    "the system-call counts were traced against glibc on Linux; this build's C library makes other calls";

/// `ctx.harness(parts)` with trials `factor` times longer, to average out other tasks.
pub(crate) fn long_trials<'a>(ctx: &Context<'a>, parts: usize, factor: u32) -> Harness<'a> {
    let mut cfg = ctx.harness(parts).config().clone();
    cfg.min_trial *= factor.max(1);
    Harness::new(ctx.clock, cfg, ctx.loop_ticks)
}

/// Every look found both tasks where they were pinned, and the pinning was hard.
pub(crate) fn cpus_check(
    name: &str,
    main: &Place,
    p: &Place,
    pinning: &crate::platform::Pinning,
) -> Check {
    if let Some(why) = crate::platform::pinning_premise_failure(pinning) {
        return Check::premise(name, false, why);
    }
    let passed = main.off() == 0 && p.off() == 0 && p.looks > 0 && main.looks > 0;
    let side = |x: &Place| format!("{} of {} samples off CPU {}", x.off(), x.looks, x.cpu);
    let mut detail = format!("measuring task: {}; partner: {}", side(main), side(p));
    if let Some(c) = p.last_away {
        detail.push_str(&format!(" (seen on CPU {c})"));
    }
    Check::premise(name, passed, detail)
}

/// What a partner task counted (round trips, handler runs) and where it ran.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Report {
    pub(crate) count: u64,
    pub(crate) place: Place,
}

/// One read() or write() of all of `buf` on a pipe, retried while a signal interrupts it:
/// the bytes moved, 0 at end of file, below 0 on error. Async-signal-safe.
pub(crate) fn pipe_io<T>(fd: RawFd, buf: &mut [T], write: bool) -> isize {
    let len = std::mem::size_of_val(buf);
    loop {
        // SAFETY: buf is `len` valid bytes, readable and writable.
        let r = unsafe {
            match write {
                true => libc::write(fd, buf.as_ptr().cast(), len),
                false => libc::read(fd, buf.as_mut_ptr().cast(), len),
            }
        };
        if !(r < 0 && crate::platform::interrupted()) {
            return r;
        }
    }
}

/// `h.measure` of `op` until its first error, beside it; `place` looks around each trial.
pub(crate) fn measure_ops<E>(
    h: &Harness,
    mut place: Option<&mut Place>,
    mut op: impl FnMut() -> Result<(), E>,
) -> (Measurement, Option<E>) {
    let mut err = None;
    let mut look = || place.as_mut().map(|p| p.look());
    let m = h.measure(1.0, |n| {
        look();
        repeat(n, || {
            if err.is_none() {
                err = op().err();
            }
        });
        look();
    });
    (m, err)
}

/// `syscalls` x getppid + `switches` x `switch_of`'s switch, from earlier in the run: a lower
/// bound where pinning is hard (the switches happen on the measuring CPU, and what is left
/// out only adds); else a task may run on another CPU without a switch, so a point.
pub(crate) struct Counted {
    pub syscalls: f64,
    pub switches: f64,
    pub switch_of: &'static str,
    pub switches_source: &'static str,
    pub left_out: &'static str,
}

impl Counted {
    /// `explained` of the model plus `extra_ns` against `measured_ns`; empty if withheld.
    pub(crate) fn explained(
        &self,
        ctx: &Context,
        parts: &str,
        extra_ns: f64,
        measured_ns: f64,
    ) -> String {
        let mut p = Predictions::new(ctx);
        self.state(&mut p, "model", &[]);
        match p.done().pop() {
            Some((_, m)) if m.withheld.is_none() => {
                super::explained(parts, m.value + extra_ns, measured_ns)
            }
            _ => String::new(),
        }
    }

    /// States `metric` as the model, with `extra` inputs recorded beside it.
    pub(crate) fn state(&self, p: &mut Predictions, metric: &str, extra: &[&Input]) {
        if !COUNTS_HOLD {
            return p.withhold(&[metric], COUNTS_WITHHELD);
        }
        let kind = self.switch_of.trim_start_matches("cpu.").replace('-', "_");
        let sys = p.earlier("cpu.syscall", &["getppid"]);
        let sw = p
            .earlier(self.switch_of, &["switch"])
            .positive()
            .named(&kind);
        let calls = Input::method("system_calls", self.syscalls, "calls", STRACE_LIBC);
        let switches = Input::method("switches", self.switches, "switches", self.switches_source);
        let mut inputs = vec![&sys, &sw, &calls, &switches];
        inputs.extend(extra);
        let (what, left_out) = (kind.replace('_', " "), self.left_out);
        let pinned = crate::platform::pinning_premise_failure(&crate::platform::pin_support());
        p.state(metric, &inputs, |v| {
            let model = format!("{} system calls x getppid + {} x {what}", v[2], v[3]);
            let p = |text| Prediction::new(v[2] * v[0] + v[3] * v[1], text);
            match pinned {
                None => p(format!(
                    "{model}, a lower bound (counts from the method; {left_out})"
                ))
                .lower_bound(),
                Some(_) => p(format!(
                    "{model} (counts from the method; {left_out}; not a bound: unpinned, a task \
                     may run on another CPU without the switch)"
                )),
            }
        });
    }
}
