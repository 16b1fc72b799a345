//! A pinned thread team that steps by generation, with a start barrier; each step reports
//! the slowest member's ticks on the run's clock and whether every member ran undisturbed.

use super::place::{pin, Pinned, Place};
use super::spin_until;
use crate::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Where a team's threads ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TeamPlacement {
    /// Threads that could not be pinned or were seen on another CPU than their own.
    pub(crate) misplaced: Vec<String>,
    /// Why where the threads ran is not known (no hard pinning, no current-CPU call).
    pub(crate) unknown: Option<String>,
    /// Each member's looks, in member order.
    pub(crate) places: Vec<Place>,
}

/// The state the members share: the generation they step by, the argument of the
/// current step, ready and done counts, the stop flag and each member's record.
pub(crate) struct Team<'c> {
    clock: &'c dyn Clock,
    cpus: Vec<usize>,
    /// Members sleep now and then while they wait for a step.
    rest: bool,
    gen: AtomicU64,
    arg: AtomicU64,
    ready: AtomicUsize,
    done: AtomicUsize,
    stop: AtomicBool,
    records: Vec<Mutex<Record>>,
    pins: Mutex<TeamPlacement>,
}

/// A member's looks, and the ticks and quietness of its last run.
#[derive(Default)]
struct Record {
    place: Place,
    ticks: u64,
    quiet: bool,
}

/// Waits until `cond`, sleeping now and then: a CPU that spins is not idle (and under a
/// hypervisor spinning also exits to the host).
fn rest_until(cond: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !cond() {
        spins += 1;
        if spins % 256 == 0 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'c> Team<'c> {
    /// Runs a team of `cpus.len()` threads: member 0 is the calling thread (already on
    /// `cpus[0]`), member t > 0 a thread pinned to `cpus[t]`. Each member first calls
    /// `member(t)` on its own thread (setup such as a first touch) to get its step body;
    /// `drive` then runs on the calling thread once all are ready, and each call of the
    /// `step(arg)` it is given releases every member into one run of its body with `arg`,
    /// returning the slowest member's ticks and whether every member ran undisturbed.
    pub(crate) fn run<W, R>(
        clock: &'c dyn Clock,
        cpus: &[usize],
        member: impl Fn(usize) -> W + Sync,
        drive: impl FnOnce(&mut dyn FnMut(u64) -> (u64, bool)) -> R,
    ) -> (R, TeamPlacement)
    where
        W: FnMut(u64),
    {
        Team::new(clock, cpus, false).scoped(&member, |team| {
            let mut body = member(0);
            drive(&mut |arg| team.step(arg, &mut body))
        })
    }

    /// As `run`, but the calling thread leads rather than joins: each `lead(arg, f)` runs
    /// `f` here while members 1.. run their body with `arg`, and returns when all are
    /// done. Between steps the members sleep now and then, so a CPU without work is idle.
    pub(crate) fn led<W, R>(
        clock: &'c dyn Clock,
        cpus: &[usize],
        member: impl Fn(usize) -> W + Sync,
        drive: impl FnOnce(&mut dyn FnMut(u64, &mut dyn FnMut())) -> R,
    ) -> (R, TeamPlacement)
    where
        W: FnMut(u64),
    {
        Team::new(clock, cpus, true).scoped(&member, |team| {
            drive(&mut |arg, f| {
                team.release(arg);
                f();
                team.join();
            })
        })
    }

    /// Runs `f` once on a new thread pinned to `cpu`, a team of one, with its placement.
    pub(crate) fn once<R: Send>(
        clock: &'c dyn Clock,
        cpu: usize,
        f: impl FnOnce() -> R + Send,
    ) -> (R, TeamPlacement) {
        let run = || {
            let team = Team::new(clock, &[cpu], false);
            team.pin(0);
            let (mut f, mut r) = (Some(f), None);
            team.timed(0, 0, &mut |_| r = f.take().map(|f| f()));
            (r.expect("the body ran"), team.placement())
        };
        std::thread::scope(|s| s.spawn(run).join().expect("pinned thread panicked"))
    }

    fn new(clock: &'c dyn Clock, cpus: &[usize], rest: bool) -> Team<'c> {
        Team {
            clock,
            cpus: cpus.to_vec(),
            rest,
            gen: AtomicU64::new(0),
            arg: AtomicU64::new(0),
            ready: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            records: cpus
                .iter()
                .map(|&c| {
                    Mutex::new(Record {
                        place: Place::new(c),
                        ..Default::default()
                    })
                })
                .collect(),
            pins: Mutex::new(TeamPlacement::default()),
        }
    }

    /// Starts members 1.., runs `lead` here once they are ready, then stops them.
    fn scoped<W: FnMut(u64), R>(
        self,
        member: &(impl Fn(usize) -> W + Sync),
        lead: impl FnOnce(&Team) -> R,
    ) -> (R, TeamPlacement) {
        let n = self.cpus.len();
        let r = std::thread::scope(|s| {
            for t in 1..n {
                let team = &self;
                // Pinned before its setup, so a first touch lands on its CPU's node.
                s.spawn(move || {
                    team.pin(t);
                    team.member(t, member(t))
                });
            }
            // Yielding matters: a new thread starts on this CPU, and under a real-time
            // policy it would never run while we spin.
            spin_until(|| self.ready.load(Ordering::Acquire) == n - 1);
            let r = lead(&self);
            self.stop.store(true, Ordering::Release);
            r
        });
        (r, self.placement())
    }

    /// Pins member t to its CPU, recording a soft or failed pin.
    fn pin(&self, t: usize) {
        let cpu = self.cpus[t];
        match pin(cpu) {
            Pinned::Hard => {}
            Pinned::Soft(why) => {
                lock(&self.pins).unknown.get_or_insert(why);
            }
            Pinned::Failed(e) => lock(&self.pins)
                .misplaced
                .push(format!("thread {t} could not be pinned to CPU {cpu} ({e})")),
        }
    }

    /// A member thread: runs one step per generation until stopped.
    fn member(&self, t: usize, mut body: impl FnMut(u64)) {
        self.ready.fetch_add(1, Ordering::AcqRel);
        let mut seen = 0u64;
        loop {
            let next =
                || self.gen.load(Ordering::Acquire) != seen || self.stop.load(Ordering::Acquire);
            if self.rest {
                rest_until(next);
            } else {
                spin_until(next);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            seen = self.gen.load(Ordering::Acquire);
            self.timed(t, self.arg.load(Ordering::Acquire), &mut body);
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Releases members 1.. into one run of their body with `arg`.
    fn release(&self, arg: u64) {
        self.done.store(0, Ordering::Release);
        self.arg.store(arg, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until members 1.. are done.
    fn join(&self) {
        spin_until(|| self.done.load(Ordering::Acquire) == self.cpus.len() - 1);
    }

    /// One generation, driven from member 0.
    fn step(&self, arg: u64, body: &mut impl FnMut(u64)) -> (u64, bool) {
        self.release(arg);
        self.timed(0, arg, body);
        self.join();
        let records = self.records.iter().map(|r| lock(r));
        records.fold((0, true), |(slowest, quiet), r| {
            (slowest.max(r.ticks), quiet && r.quiet)
        })
    }

    /// One run of member t's body, stamped, with a placement look on either side.
    fn timed(&self, t: usize, arg: u64, body: &mut impl FnMut(u64)) {
        let mut r = lock(&self.records[t]);
        r.place.look();
        let c0 = crate::harness::thread_preemptions();
        let t0 = self.clock.start();
        body(arg);
        r.ticks = self.clock.stop().wrapping_sub(t0);
        r.quiet = crate::harness::thread_preemptions() == c0;
        r.place.look();
    }

    /// Pin failures first, then the members seen elsewhere.
    fn placement(self) -> TeamPlacement {
        let mut p = self.pins.into_inner().unwrap_or_else(|e| e.into_inner());
        let records = self.records.into_iter();
        let places: Vec<Place> = records.map(|r| lock(&r).place).collect();
        let per_thread = places.iter().map(|p| p.looks).sum::<u64>() / places.len().max(1) as u64;
        if places.iter().any(|p| p.blind > 0) {
            p.unknown
                .get_or_insert_with(|| super::place::NO_CURRENT_CPU.into());
        }
        for (t, pl) in places.iter().enumerate().filter(|(_, p)| p.away > 0) {
            p.misplaced.push(format!(
                "thread {t} (placed on CPU {}) was on CPU {} at {} of about {per_thread} checks",
                pl.cpu,
                pl.last_away.unwrap_or(pl.cpu),
                pl.away
            ));
        }
        p.places = places;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock, three allowed CPUs (repeating when fewer are allowed) and a sum per member.
    fn three() -> (crate::clock::MockClock, Vec<usize>, Vec<AtomicU64>) {
        let allowed = crate::platform::allowed_cpus();
        let cpus = (0..3).map(|k| allowed[k % allowed.len()]).collect();
        let sums = (0..3).map(|_| AtomicU64::new(0)).collect();
        (crate::clock::MockClock::new(1), cpus, sums)
    }

    /// Every step releases every member once with its argument, and each member looks at
    /// its CPU on either side of each run.
    #[test]
    fn each_step_runs_every_member_once() {
        let (clock, cpus, sums) = three();
        let member = |t: usize| {
            let sums = &sums;
            move |arg: u64| {
                sums[t].fetch_add(arg, Ordering::Relaxed);
            }
        };
        let (steps, placed) = Team::run(&clock, &cpus, member, |step| {
            (1..=4).map(|arg| step(arg).1).count()
        });
        assert_eq!(steps, 4);
        for s in &sums {
            assert_eq!(s.load(Ordering::Relaxed), 1 + 2 + 3 + 4);
        }
        assert_eq!(placed.places.len(), 3);
        assert!(placed.places.iter().all(|p| p.looks == 8), "{placed:?}");
    }

    /// A led team runs the leader's closure beside one run of every member per step, and
    /// `once` runs its closure on the CPU it is given.
    #[test]
    fn a_led_step_runs_the_leader_beside_every_member() {
        let (clock, cpus, sums) = three();
        let member = |t: usize| {
            let sums = &sums;
            move |arg: u64| {
                sums[t].fetch_add(arg, Ordering::Relaxed);
            }
        };
        let (led, placed) = Team::led(&clock, &cpus, member, |lead| {
            let mut ran = 0;
            for arg in 1..=4 {
                lead(arg, &mut || ran += 1);
            }
            ran
        });
        assert_eq!(led, 4);
        assert_eq!(sums[0].load(Ordering::Relaxed), 0, "the leader has no body");
        for s in &sums[1..] {
            assert_eq!(s.load(Ordering::Relaxed), 1 + 2 + 3 + 4);
        }
        assert!(
            placed.places[1..].iter().all(|p| p.looks == 8),
            "{placed:?}"
        );
        let (v, placed) = Team::once(&clock, cpus[1], || 7);
        assert_eq!((v, placed.places.len()), (7, 1));
    }
}
