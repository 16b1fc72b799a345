//! cpu.signal: a caught signal to self (lmbench lat_sig catch) and a same-CPU round trip
//! between two processes, timed in forked single-threaded children (the method page says why).

use super::{cpus_check, pipe_io, Counted, Report};
use crate::clock::Clock;
use crate::experiments::kit::children::Children;
use crate::experiments::kit::place::Place;
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{seams, Context, Experiment, Outcome, PerProfile, Spec};
use crate::opaque::repeat;
use crate::platform::{self, catch_signal, send_signal, SignalWait};
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use anyhow::Context as _;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

pub(crate) struct Signal;

const SELF_SIG: i32 = libc::SIGUSR1;
const PING: i32 = libc::SIGUSR2;
/// The measuring child's commands: the kernel it repeats `n` times, and its metric.
const NULL: usize = 0;
const CATCH: usize = 1;
const ROUND: usize = 2;
const KERNELS: [(&str, &str); 3] = [
    ("kill_null", "kill(getpid(), 0): the send's lookup and permission check, nothing delivered"),
    ("kill_caught", "kill(getpid(), SIGUSR1) with a handler installed, in a single-threaded process: the send, the delivery before kill returns, the empty handler and its return (sigreturn)"),
    ("round_trip_same_cpu", "SIGUSR2 to a partner process on the same CPU whose handler signals back, until our handler ran: two sends, two deliveries, two switches"),
];
/// Round trips before measuring (the children's first copy-on-write faults).
const WARM_ROUNDS: u64 = 200;
/// The partner looks at its CPU every this many signals.
const LOOK_EVERY: u64 = 64;
/// The children close inherited descriptors below this (a run opens far fewer).
const INHERITED_BELOW: RawFd = 1024;
pub(crate) const HANDLED_ONCE: &str = "the handler ran once per signal sent";

// Per process (each child has its own copy).
static HANDLED: AtomicU64 = AtomicU64::new(0);
static PEER: AtomicI64 = AtomicI64::new(0);
static CPU: AtomicI64 = AtomicI64::new(-1);
static LOOKS: AtomicU64 = AtomicU64::new(0);
static AWAY: AtomicU64 = AtomicU64::new(0);

extern "C" fn count(_: libc::c_int) {
    HANDLED.fetch_add(1, Relaxed);
}

/// The partner's handler: counts, signals the peer back, and looks at its CPU now and then.
extern "C" fn answer(_: libc::c_int) {
    let k = HANDLED.fetch_add(1, Relaxed) + 1;
    send_signal(PEER.load(Relaxed), PING);
    if k % LOOK_EVERY == 0 {
        LOOKS.fetch_add(1, Relaxed);
        if platform::current_cpu_raw() as i64 != CPU.load(Relaxed) {
            AWAY.fetch_add(1, Relaxed);
        }
    }
}

/// Reads or writes `w` whole (at most PIPE_BUF bytes, so atomic). Async-signal-safe.
fn words(fd: RawFd, w: &mut [u64], write: bool) -> bool {
    pipe_io(fd, w, write) == std::mem::size_of_val(w) as isize
}

/// The measuring child: swaps pids with the partner, then answers each [kernel, n] on
/// `cmd` with [ticks, handler runs] on `rep` until end of file.
fn measurer(fd: [RawFd; 4], clock: &dyn Clock, cpu: usize, ignore: bool) -> Report {
    let [cmd, rep, to_b, from_b] = fd;
    let me = platform::raw_getpid();
    let mut w = [me as u64];
    // The partner stores our pid before it sends its own.
    if !words(to_b, &mut w, true) || !words(from_b, &mut w, false) {
        return Report::default();
    }
    let partner = w[0] as i64;
    let caught = (!ignore).then_some(count as extern "C" fn(libc::c_int));
    let ready = catch_signal(SELF_SIG, caught) && catch_signal(PING, Some(count));
    let Some(wait) = ready.then(|| SignalWait::block(PING)).flatten() else {
        return Report::default();
    };
    let mut place = Place::new(cpu);
    let mut c = [0u64; 2];
    while words(cmd, &mut c, false) {
        place.look();
        let (h0, t0) = (HANDLED.load(Relaxed), clock.start());
        match c[0] as usize {
            NULL => repeat(c[1], || send_signal(me, 0)),
            CATCH => repeat(c[1], || send_signal(me, SELF_SIG)),
            _ => repeat(c[1], || {
                send_signal(partner, PING);
                wait.wait()
            }),
        }
        let t = clock.stop().wrapping_sub(t0);
        place.look();
        if !words(rep, &mut [t, HANDLED.load(Relaxed) - h0], true) {
            break;
        }
    }
    Report {
        count: HANDLED.load(Relaxed),
        place,
    }
}

/// The partner: answers each PING from its handler until `stop` reads end of file.
fn partner(from_a: RawFd, to_a: RawFd, stop: RawFd, cpu: usize) -> Report {
    CPU.store(cpu as i64, Relaxed);
    let mut w = [0u64];
    if !words(from_a, &mut w, false) {
        return Report::default();
    }
    PEER.store(w[0] as i64, Relaxed);
    w[0] = platform::raw_getpid() as u64;
    if catch_signal(PING, Some(answer)) && words(to_a, &mut w, true) {
        while words(stop, &mut w, false) {}
    }
    Report {
        count: HANDLED.load(Relaxed),
        place: Place {
            looks: LOOKS.load(Relaxed),
            away: AWAY.load(Relaxed),
            ..Place::new(cpu)
        },
    }
}

/// The parent's side: pipes [commands, replies, the partner's stop], per kernel [signals
/// sent, handler runs]. Fields drop in order: the children end before they are reaped.
struct Pair<'c> {
    pipes: [OwnedFd; 3],
    tally: [[u64; 2]; 3],
    failed: bool,
    children: Children<'c, Report>,
}

impl<'c> Pair<'c> {
    fn start(ctx: &Context<'c>) -> anyhow::Result<Self> {
        let children = Children::new(2, ctx.clock)?;
        // Made after `children`, so an early return closes them first and ends any child.
        let [cmd, rep, ab, ba, stop] = [(); 5].map(|()| platform::pipe());
        let [cmd, rep, ab, ba, stop] = [cmd?, rep?, ab?, ba?, stop?];
        // Every inherited descriptor but its own, another thread's pipes too: a copy held
        // here would hide their end of file from the child reading them.
        let keep_only = |mine: &[RawFd]| {
            for fd in (3..INHERITED_BELOW).filter(|fd| !mine.contains(fd)) {
                // SAFETY: in the child, closing its copy of a descriptor it does not use.
                unsafe { libc::close(fd) };
            }
        };
        let a = [&cmd.0, &rep.1, &ab.1, &ba.0].map(|f| f.as_raw_fd());
        let b = [&ab.0, &ba.1, &stop.0].map(|f| f.as_raw_fd());
        let mask = platform::CpuMask::single(ctx.cpu)?;
        let (clock, cpu, ignore) = (ctx.clock, ctx.cpu, seams::get().signal_ignored);
        // SAFETY: the children make only close, read, write, kill, sigaction, sigprocmask,
        // sigsuspend, getpid, sched_getcpu and clock reads, on memory made before the fork.
        unsafe {
            children.spawn(0, &mask, || {
                keep_only(&b);
                partner(b[0], b[1], b[2], cpu)
            })?;
            children.spawn(1, &mask, || {
                keep_only(&a);
                measurer(a, clock, cpu, ignore)
            })?;
        }
        Ok(Pair {
            pipes: [cmd.1, rep.0, stop.1],
            tally: [[0; 2]; 3],
            failed: false,
            children,
        })
    }

    /// `n` of `kernel` in the measuring child: its ticks (0 once a trial failed).
    fn trial(&mut self, kernel: usize, n: u64) -> u64 {
        let ([cmd, rep, _], mut r) = (&self.pipes, [0u64; 2]);
        self.failed = self.failed
            || !(words(cmd.as_raw_fd(), &mut [kernel as u64, n], true)
                && words(rep.as_raw_fd(), &mut r, false));
        self.tally[kernel][0] += if kernel == NULL { 0 } else { n };
        self.tally[kernel][1] += r[1];
        r[0]
    }

    fn ok(&self) -> anyhow::Result<()> {
        anyhow::ensure!(!self.failed, "the measuring process exited early");
        Ok(())
    }

    /// Stops both children: the measuring child's report and the partner's.
    fn finish(self) -> anyhow::Result<(Report, Report)> {
        drop(self.pipes);
        self.children.wait("signal process")?;
        Ok((self.children.get(1).1, self.children.get(0).1))
    }
}

/// Every signal sent to self and both of each round trip's were handled exactly once.
fn handled_check(tally: &[[u64; 2]; 3], partner: u64) -> Check {
    let ([cs, ch], [rs, rh]) = (tally[CATCH], tally[ROUND]);
    let detail = format!(
        "kill to self: {cs} sent, {ch} handler runs; round trips: {rs} sent, the measuring \
         process's handler ran {rh} times, the partner's {partner}"
    );
    Check::premise(
        HANDLED_ONCE,
        cs == ch && rs == rh && rs == partner && cs > 0,
        detail,
    )
}

const SPEC: Spec = Spec {
    id: "cpu.signal",
    title: "Signal delivery",
    description:
        "kill() to self caught by a handler (lmbench lat_sig catch) and a signal round trip between two processes on one CPU",
    method: crate::method!("cpu.signal"),
    budget: Some(PerProfile::scaled(ms(1500))),
    ..Spec::SCHEDULER
};

impl Experiment for Signal {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        let sys = p.earlier("cpu.syscall", &["getppid"]);
        for (metric, calls, what) in [
            ("kill_null", 1.0, "kill (its pid lookup and permission check are not in the model)"),
            ("kill_caught", 2.0, "kill, and sigreturn at the handler's end (the signal frame's set-up and copy are not in the model)"),
            ("catch", 1.0, "sigreturn at the handler's end (the signal frame's set-up and copy are not in the model)"),
        ] {
            let n = Input::method("system_calls", calls, "calls", format!("method: {what}"));
            p.state(metric, &[&sys, &n], |v| {
                Prediction::new(v[0] * v[1], format!("{} x getppid, a lower bound: {what}", v[1]))
                    .lower_bound()
            });
        }
        Counted {
            syscalls: 6.0,
            switches: 2.0,
            switch_of: "cpu.process-switch",
            switches_source:
                "method: the partner is woken once and the measuring process once, both on one CPU",
            left_out: "the two signal frames' set-up and copy are left out",
        }
        .state(&mut p, "round_trip_same_cpu", &[]);
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        // The same-CPU round trip needs both processes held on one CPU; kill to self does not.
        let unpinned = platform::pinning_premise_failure(&platform::pin_support());
        let kernels = &KERNELS[..if unpinned.is_some() { ROUND } else { 3 }];
        let h = ctx.harness(kernels.len());
        let mut pair = Pair::start(ctx).context("starting the signal processes")?;
        if unpinned.is_none() {
            pair.trial(ROUND, WARM_ROUNDS);
            pair.ok()?;
        }
        for (k, (name, what)) in kernels.iter().enumerate() {
            (ctx.progress)(name);
            let m = h.measure_trials(1.0, |n| (pair.trial(k, n), true));
            pair.ok()?;
            out.measured(name, what, &m);
        }
        let tally = pair.tally;
        let (a, b) = pair.finish()?;
        out.pool(ctx);
        out.difference(
            "catch",
            "kill_caught - kill_null: the delivery, the empty handler and its return (lmbench lat_sig catch's figure)",
            "kill_caught",
            "kill_null",
            1.0,
        );
        out.check(handled_check(&tally, b.count));
        match unpinned {
            Some(why) => out
                .notes
                .push(format!("round_trip_same_cpu: not measured, {why}")),
            None => out.check(cpus_check(
                &format!("both processes ran on CPU {}", ctx.cpu),
                &a.place,
                &b.place,
                &platform::Pinning::Hard,
            )),
        }
        let (caught, catch, round) = (
            out.median("kill_caught"),
            out.median("catch"),
            out.median("round_trip_same_cpu"),
        );
        out.check(Check::sanity(
            "catching a signal costs more than sending none",
            catch > 0.0,
            format!("kill_caught - kill_null = {}", fmt_ns(catch)),
        ));
        if out.checks.iter().all(|c| c.passed || !c.premise) {
            let mut from = vec!["kill_caught"];
            let mut trip = String::new();
            if round.is_finite() {
                from.push("round_trip_same_cpu");
                let (r, k) = (fmt_ns(round), round / caught);
                trip = format!("; a round trip of signals between two processes on one CPU costs {r} ({k:.1}x a caught signal)");
            }
            let (caught, catch) = (fmt_ns(caught), fmt_ns(catch));
            out.finding(
                format!("A signal a process sends itself and catches costs {caught} ({catch} beyond the send, lat_sig catch's figure){trip}."),
                &from,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::{assert_invalid_by, check, World};

    fn run_live() -> crate::results::ExperimentResult {
        let clock = crate::clock::CoarseClock::new(1e9);
        World::live(&clock).run(&Signal)
    }

    #[test]
    fn an_ignored_signal_fails_the_handler_premise() {
        seams::set(|s| s.signal_ignored = true);
        let r = run_live();
        assert_invalid_by(&r, HANDLED_ONCE);
        let d = &check(&r, HANDLED_ONCE).detail;
        assert!(d.contains(", 0 handler runs"), "{d}");
        assert!(r.findings.is_empty(), "{:?}", r.findings);
    }

    #[test]
    fn signals_are_caught_once_and_cost_more_than_the_send() {
        let r = run_live();
        let c = check(&r, HANDLED_ONCE);
        assert!(c.passed, "{c:?}");
        let m = |n: &str| {
            r.metric(n)
                .unwrap_or_else(|| panic!("no {n}"))
                .summary
                .median
        };
        let (null, caught, round) = (m("kill_null"), m("kill_caught"), m("round_trip_same_cpu"));
        // Plausible: a kernel entry costs 10 ns to 100 us; a round trip has two sends.
        assert!(null > 10.0 && caught < 1e5, "{null} {caught}");
        assert!(caught > null, "caught {caught} ns, null {null} ns");
        assert!(round > caught, "round trip {round} ns, caught {caught} ns");
        assert!((m("catch") - (caught - null)).abs() < 0.5 * caught);
    }

    /// Without hard pinning (macOS) the same-CPU round trip is not made, and says why;
    /// kill to self needs no pinning and stays valid.
    #[test]
    fn without_pinning_only_the_round_trip_is_left_out() {
        crate::platform::HINT_PINNING.with(|h| h.set(true));
        let r = run_live();
        assert!(r.status.measured(), "{:?} {:?}", r.status, r.reason);
        assert!(r.metric("round_trip_same_cpu").is_none() && r.metric("catch").is_some());
        let note = r
            .notes
            .iter()
            .find(|n| n.starts_with("round_trip_same_cpu: not measured"));
        assert!(
            note.is_some_and(|n| n.contains("not pinned")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn words_round_trip_through_a_pipe() {
        let (r, w) = platform::pipe().unwrap();
        assert!(words(w.as_raw_fd(), &mut [7, 9], true));
        let mut got = [0u64; 2];
        assert!(words(r.as_raw_fd(), &mut got, false));
        assert_eq!(got, [7, 9]);
        drop(w);
        assert!(!words(r.as_raw_fd(), &mut got, false), "end of file");
    }
}
