//! cpu.thread-create: create, run and join a kernel thread that returns at once.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::repeat;
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::cell::Cell;
use std::time::Duration;

pub struct ThreadCreate;

/// Model: pthread_create + join in minimal system calls: clone3 (copying the task
/// struct, signal and fs state) ~ 12, plus rseq and robust-list registration, the
/// child's exit and the futex wake-up of the joiner, ~ 2 each.
const CREATE_SYSCALLS: f64 = 20.0;

/// What the new thread returns, so join can prove it ran.
static SENTINEL: u8 = 0;

extern "C" fn return_arg(arg: *mut libc::c_void) -> *mut libc::c_void {
    arg
}

/// One pthread_create + pthread_join; Err(errno-like code) on failure, Err(-1) when the
/// thread did not return what it was given.
#[inline(always)]
fn create_join() -> Result<(), i32> {
    let arg = &SENTINEL as *const u8 as *mut libc::c_void;
    // SAFETY: pthread_t is a plain integer on Linux; zero is a valid placeholder.
    let mut tid: libc::pthread_t = unsafe { std::mem::zeroed() };
    // SAFETY: tid is writable, default attributes (null), return_arg is a valid start
    // routine that only returns its argument (a pointer to a static).
    let rc = unsafe { libc::pthread_create(&mut tid, std::ptr::null(), return_arg, arg) };
    if rc != 0 {
        return Err(rc);
    }
    let mut ret: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: tid is a joinable thread we created and have not joined.
    let rc = unsafe { libc::pthread_join(tid, &mut ret) };
    if rc != 0 {
        return Err(rc);
    }
    if ret != arg {
        return Err(-1);
    }
    Ok(())
}

impl Experiment for ThreadCreate {
    fn id(&self) -> &'static str {
        "cpu.thread-create"
    }
    fn title(&self) -> &'static str {
        "Thread creation"
    }
    fn description(&self) -> &'static str {
        "raw pthread_create + pthread_join of a thread that returns at once"
    }
    fn method(&self) -> &'static str {
        "libc::pthread_create with default attributes, called directly (not std::thread, which adds an Arc, \
         a name and a result slot), of a thread whose start routine returns its argument, then pthread_join; \
         each pair is one iteration of the calibrated loop, loop overhead subtracted. The new thread inherits \
         the caller's pinning, so it runs on the same CPU: creating it, switching to it, its exit and the switch \
         back are all in the figure. glibc caches the stacks of joined threads, so in steady state no mmap is \
         paid; this is the cost a thread pool avoids, not the first-thread cost. Check: every join returned the \
         value its thread was given (the thread really ran)."
    }
    fn budget(&self, p: Profile) -> Duration {
        let ms = Duration::from_millis;
        match p {
            Profile::Smoke => ms(200),
            Profile::Quick => ms(1000),
            Profile::Standard => ms(5000),
            Profile::Thorough => ms(15000),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let Some(sys) = ctx.earlier_median("cpu.syscall", "getppid") else {
            return Vec::new();
        };
        let (sw, sw_src) = match ctx.earlier_median("cpu.thread-switch", "switch") {
            Some(s) => (s, "cpu.thread-switch switch"),
            None => (10.0 * sys, "model: 10 x getppid"),
        };
        vec![(
            "create_join".into(),
            Prediction::new(
                CREATE_SYSCALLS * sys + 2.0 * sw,
                format!("{CREATE_SYSCALLS} x getppid (clone, registration, exit, futex wake) + 2 x thread switch (to the new thread and back)"),
            )
            .input("getppid", sys, "ns", "cpu.syscall getppid")
            .input("thread_switch", sw, "ns", sw_src),
        )]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = super::long_trials(ctx, 1, 5);
        let done = Cell::new(0u64);
        let failed = Cell::new(None::<i32>);
        (ctx.progress)("pthread_create + join");
        let m = h.measure(1.0, |n| {
            repeat(n, || {
                if failed.get().is_none() {
                    match create_join() {
                        Ok(()) => done.set(done.get() + 1),
                        Err(e) => failed.set(Some(e)),
                    }
                }
            })
        });
        match failed.get() {
            Some(-1) => out.check(Check::premise(
                "every thread ran",
                false,
                "a joined thread did not return the value it was given",
            )),
            Some(e) => anyhow::bail!(
                "pthread_create/join failed: {}",
                std::io::Error::from_raw_os_error(e)
            ),
            None => out.check(Check::premise(
                "every thread ran",
                true,
                format!(
                    "{} threads created, each returned its argument to join",
                    done.get()
                ),
            )),
        }
        out.measured(
            "create_join",
            "pthread_create + pthread_join of a thread that returns at once",
            &m,
        );
        let c = m.median_ns();
        let mut text = format!("Creating, running and joining a thread costs {}", fmt_ns(c));
        if let Some(sys) = ctx.earlier_median("cpu.syscall", "getppid") {
            text.push_str(&format!(" ({:.0} minimal system calls)", c / sys));
        }
        if let Some(sw) = ctx.earlier_median("cpu.thread-switch", "switch") {
            text.push_str(&format!(" or {:.1} thread switches", c / sw));
        }
        text.push('.');
        out.finding(text, &["create_join"]);
        Ok(out)
    }
}
