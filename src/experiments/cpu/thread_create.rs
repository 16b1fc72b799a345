//! cpu.thread-create: create, run and join a kernel thread that returns at once.

use super::measure_ops;
use crate::experiments::predict::Predictions;
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome};
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct ThreadCreate;

/// pthread_create + join, counted on a C loop (strace -f, glibc 2.36+; the method page).
const MODEL: super::Counted = super::Counted {
    syscalls: 10.0,
    switches: 2.0,
    switch_of: "cpu.thread-switch",
    switches_source: "method: to the thread and back",
    left_out: "clone's and exit's own work beyond a kernel entry is not in the model",
};

static SENTINEL: u8 = 0;
/// Runs of the start routine, and those in the creating thread (`CREATOR`'s pthread_self).
static RAN: AtomicU64 = AtomicU64::new(0);
static RAN_AS_CREATOR: AtomicU64 = AtomicU64::new(0);
static CREATOR: AtomicU64 = AtomicU64::new(0);

extern "C" fn return_arg(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: pthread_self has no preconditions.
    if unsafe { libc::pthread_self() } as u64 == CREATOR.load(Relaxed) {
        RAN_AS_CREATOR.fetch_add(1, Relaxed);
    }
    // Relaxed: join orders the thread's writes before the creator reads them.
    RAN.fetch_add(1, Relaxed);
    arg
}

/// The start routine ran once per create + join, never in the creating thread.
pub fn ran_check(created: u64, ran: u64, ran_as_creator: u64) -> Check {
    Check::premise(
        "every thread ran",
        created > 0 && ran == created && ran_as_creator == 0,
        format!(
            "{created} threads created and joined; the start routine counted {ran} runs, {ran_as_creator} of them in the creating thread"
        ),
    )
}

/// One pthread_create + pthread_join; Err(-1) when the thread did not return its argument.
#[inline(always)]
fn create_join() -> Result<(), i32> {
    let arg = &SENTINEL as *const u8 as *mut libc::c_void;
    if crate::experiments::seams::get().inline_create {
        return_arg(arg);
        return Ok(());
    }
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
    match (rc, ret == arg) {
        (0, true) => Ok(()),
        (0, false) => Err(-1),
        (rc, _) => Err(rc),
    }
}

const SPEC: Spec = Spec {
    id: "cpu.thread-create",
    title: "Thread creation",
    description: "raw pthread_create + pthread_join of a thread that returns at once",
    method: crate::method!("cpu.thread-create"),
    budget: Some(PerProfile::new(ms(200), ms(400), ms(5000), ms(15000))),
    // Kernel work at the core's clock.
    ..Spec::CORE_LOOP
};

impl Experiment for ThreadCreate {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        MODEL.state(&mut p, "create_join", &[]);
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = super::long_trials(ctx, 1, 5);
        let mut done = 0u64;
        (ctx.progress)("pthread_create + join");
        // SAFETY: pthread_self has no preconditions.
        CREATOR.store(unsafe { libc::pthread_self() } as u64, Relaxed);
        let (ran0, same0) = (RAN.load(Relaxed), RAN_AS_CREATOR.load(Relaxed));
        let (m, failed) = measure_ops(&h, None, || create_join().map(|()| done += 1));
        match failed {
            Some(-1) => out.check(Check::premise(
                "every thread ran",
                false,
                "a joined thread did not return the value it was given",
            )),
            Some(e) => anyhow::bail!(
                "pthread_create/join failed: {}",
                std::io::Error::from_raw_os_error(e)
            ),
            None => out.check(ran_check(
                done,
                RAN.load(Relaxed) - ran0,
                RAN_AS_CREATOR.load(Relaxed) - same0,
            )),
        }
        out.measured(
            "create_join",
            "pthread_create + pthread_join of a thread that returns at once",
            &m,
        );
        out.pool(ctx);
        let c = out.median("create_join");
        let earlier = |e, m| ctx.earlier_median(e, m).filter(|v| *v > 0.0);
        let mut text = format!("Creating, running and joining a thread costs {}", fmt_ns(c));
        // Only positive figures as units: a switch measured at or below zero is noise.
        let units: Vec<String> = [
            earlier("cpu.syscall", "getppid").map(|s| format!("{:.0} minimal system calls", c / s)),
            earlier("cpu.thread-switch", "switch").map(|w| format!("{:.1} thread switches", c / w)),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !units.is_empty() {
            text += &format!(" ({})", units.join(" or "));
        }
        text.push('.');
        let (sys, sw) = (MODEL.syscalls, MODEL.switches);
        let parts = format!("{sys} kernel entries and {sw} thread switches");
        text += &MODEL.explained(ctx, &parts, 0.0, c);
        out.finding(text, &["create_join"]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 34: a thread switch measured at or below zero gives no count of switches
    /// (and no model), through the experiment as wired; a positive one does.
    #[test]
    fn a_negative_thread_switch_prints_no_switch_count() {
        use crate::experiments::testing::{recorded, World};
        let clock = crate::clock::detect(None).0;
        let text = |switch: f64| {
            let mut o = crate::experiments::Outcome::default();
            o.metric("switch", "ns", "", vec![switch; 5]);
            let mut w = World::live(&clock);
            w.earlier = vec![recorded("cpu.thread-switch", o)];
            let r = w.run(&ThreadCreate);
            assert!(r.status.measured(), "{:?} {:?}", r.status, r.reason);
            r.findings[0].text.clone()
        };
        let t = text(-500.0);
        assert!(!t.contains("thread switches") && !t.contains("-"), "{t}");
        let t = text(1000.0);
        assert!(t.contains(" thread switches)"), "{t}");
    }

    #[test]
    fn ran_check_fails_when_a_thread_did_not_run() {
        assert!(ran_check(100, 100, 0).passed);
        // A create that returned without its thread running (or a count lost).
        let c = ran_check(100, 99, 0);
        assert!(!c.passed && c.premise, "{}", c.detail);
        // The routine ran in the creating thread (a fake create that calls it inline).
        assert!(!ran_check(100, 100, 1).passed);
        assert!(!ran_check(0, 0, 0).passed);
    }
}
