//! A pinned thread team that steps by generation, with a start barrier; each step reports
//! the slowest member's ticks on the run's clock and whether every member ran undisturbed.

use super::place::{pin, Pinned, Place};
use super::{poll_until, spin_until};
use crate::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// One step of a team, in member order: stamps on the run's clock and looks during the step.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Step {
    pub(crate) stamps: Vec<(u64, u64)>,
    pub(crate) quiet: bool,
    pub(crate) places: Vec<Place>,
}

impl Step {
    pub(crate) fn slowest(&self) -> u64 {
        let own = self.stamps.iter().map(|&(a, b)| b.wrapping_sub(a));
        own.max().unwrap_or(0)
    }

    /// First start to last stop, in ticks.
    pub(crate) fn span(&self) -> u64 {
        let first = self.stamps.iter().map(|s| s.0).min().unwrap_or(0);
        let last = self.stamps.iter().map(|s| s.1).max().unwrap_or(0);
        last.saturating_sub(first)
    }

    /// The share of the span during which every member ran (1: all together, 0: in turn).
    pub(crate) fn overlap(&self) -> f64 {
        let span = self.span();
        let last_start = self.stamps.iter().map(|s| s.0).max().unwrap_or(0);
        let first_stop = self.stamps.iter().map(|s| s.1).min().unwrap_or(0);
        match span {
            0 => 1.0,
            _ => first_stop.saturating_sub(last_start) as f64 / span as f64,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TeamPlacement {
    /// Threads that could not be pinned or were seen on another CPU than their own.
    pub(crate) misplaced: Vec<String>,
    /// Why where the threads ran is not known (no hard pinning, no current-CPU call).
    pub(crate) unknown: Option<String>,
    pub(crate) places: Vec<Place>,
}

pub(crate) struct Team<'c> {
    clock: &'c dyn Clock,
    cpus: Vec<usize>,
    /// Members nap while they wait for a step.
    rest: bool,
    /// A test seam: members run their step one after another, in member order.
    serial: bool,
    /// Under `serial`, the member whose turn it is.
    turn: AtomicUsize,
    gen: AtomicU64,
    /// Start-line arrivals over all steps: a late member delays the start, not runs alone.
    arrived: AtomicU64,
    arg: AtomicU64,
    ready: AtomicUsize,
    done: AtomicUsize,
    stop: AtomicBool,
    records: Vec<Mutex<Record>>,
    pins: Mutex<TeamPlacement>,
}

/// A member's looks (all, and its last run's), and the stamps and quietness of its last run.
#[derive(Default)]
struct Record {
    place: Place,
    last: Place,
    start: u64,
    stop: u64,
    quiet: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'c> Team<'c> {
    /// Runs a team of `cpus.len()` threads: member 0 is the calling thread (already on
    /// `cpus[0]`), member t > 0 a thread pinned to `cpus[t]`, each with the body `member(t)`
    /// made on its own thread (setup such as a first touch). `drive` runs here once all are
    /// ready; each `step(arg)` it calls runs every body once with `arg` and gives the Step.
    pub(crate) fn run<W, R>(
        clock: &'c dyn Clock,
        cpus: &[usize],
        member: impl Fn(usize) -> W + Sync,
        drive: impl FnOnce(&mut dyn FnMut(u64) -> Step) -> R,
    ) -> (R, TeamPlacement)
    where
        W: FnMut(u64),
    {
        let member = |t| {
            let mut body = member(t);
            move |arg, _: &mut Place| body(arg)
        };
        Team::new(clock, cpus, false).scoped(&member, |team| {
            let mut body = member(0);
            drive(&mut |arg| team.step(arg, &mut body))
        })
    }

    /// As `run`, but the calling thread leads: each `lead(arg, f)` runs `f` here while members
    /// 1.. run their body with `arg` and their placement (to look at as they go), and gives
    /// their Step. Between steps they sleep now and then, so a CPU without work is idle.
    pub(crate) fn led<W, R>(
        clock: &'c dyn Clock,
        cpus: &[usize],
        member: impl Fn(usize) -> W + Sync,
        drive: impl FnOnce(&mut dyn FnMut(u64, &mut dyn FnMut()) -> Step) -> R,
    ) -> (R, TeamPlacement)
    where
        W: FnMut(u64, &mut Place),
    {
        Team::new(clock, cpus, true).scoped(&member, |team| {
            drive(&mut |arg, f| {
                team.release(arg);
                f();
                team.join();
                team.last_step(1)
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
            team.timed(0, 0, None, &mut |_, _| r = f.take().map(|f| f()));
            (r.expect("the body ran"), team.placement())
        };
        std::thread::scope(|s| s.spawn(run).join().expect("pinned thread panicked"))
    }

    fn new(clock: &'c dyn Clock, cpus: &[usize], rest: bool) -> Team<'c> {
        Team {
            clock,
            cpus: cpus.to_vec(),
            rest,
            // A led team's leader takes no turn, so only stepped teams run in turns.
            serial: !rest && crate::experiments::seams::get().serial_team,
            turn: AtomicUsize::new(0),
            gen: AtomicU64::new(0),
            arrived: AtomicU64::new(0),
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
    fn scoped<W: FnMut(u64, &mut Place), R>(
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

    fn member(&self, t: usize, mut body: impl FnMut(u64, &mut Place)) {
        self.ready.fetch_add(1, Ordering::AcqRel);
        let mut seen = 0u64;
        loop {
            let next =
                || self.gen.load(Ordering::Acquire) != seen || self.stop.load(Ordering::Acquire);
            if self.rest {
                // A CPU that spins is not idle (and under a hypervisor spinning exits to the host).
                let nap = || std::thread::sleep(std::time::Duration::from_micros(200));
                poll_until(next, 256, nap);
            } else {
                spin_until(next);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            seen = self.gen.load(Ordering::Acquire);
            if self.serial {
                spin_until(|| self.turn.load(Ordering::Acquire) == t);
            }
            let line = (!self.serial && !self.rest).then_some(seen);
            self.timed(t, self.arg.load(Ordering::Acquire), line, &mut body);
            self.turn.store(t + 1, Ordering::Release);
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn release(&self, arg: u64) {
        self.done.store(0, Ordering::Release);
        self.arg.store(arg, Ordering::Release);
        self.gen.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until every member has reached step `gen`'s start line.
    fn start_line(&self, gen: u64) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let all = gen * self.cpus.len() as u64;
        spin_until(|| self.arrived.load(Ordering::Acquire) >= all);
    }

    fn join(&self) {
        spin_until(|| self.done.load(Ordering::Acquire) == self.cpus.len() - 1);
    }

    fn step(&self, arg: u64, body: &mut impl FnMut(u64, &mut Place)) -> Step {
        self.turn.store(0, Ordering::Release);
        self.release(arg);
        let line = (!self.serial).then(|| self.gen.load(Ordering::Acquire));
        self.timed(0, arg, line, body);
        self.turn.store(1, Ordering::Release);
        self.join();
        self.last_step(0)
    }

    fn last_step(&self, from: usize) -> Step {
        let records: Vec<_> = self.records[from..].iter().map(|r| lock(r)).collect();
        Step {
            stamps: records.iter().map(|r| (r.start, r.stop)).collect(),
            quiet: records.iter().all(|r| r.quiet),
            places: records.iter().map(|r| r.last).collect(),
        }
    }

    /// One stamped run of member t's body between two looks, after the start `line` if any
    /// (a preemption while waiting counts: the others could run without this member).
    fn timed(&self, t: usize, arg: u64, line: Option<u64>, body: &mut impl FnMut(u64, &mut Place)) {
        let r = &mut *lock(&self.records[t]);
        let before = r.place;
        r.place.look();
        let c0 = crate::harness::thread_preemptions();
        if let Some(gen) = line {
            self.start_line(gen);
        }
        r.start = self.clock.start();
        body(arg, &mut r.place);
        r.stop = self.clock.stop();
        r.quiet = crate::harness::thread_preemptions() == c0;
        r.place.look();
        r.last = r.place.since(&before);
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
            (1..=4).map(|arg| step(arg).quiet).count()
        });
        assert_eq!(steps, 4);
        for s in &sums {
            assert_eq!(s.load(Ordering::Relaxed), 1 + 2 + 3 + 4);
        }
        assert_eq!(placed.places.len(), 3);
        assert!(placed.places.iter().all(|p| p.looks == 8), "{placed:?}");
    }

    /// A led team runs the leader's closure beside one run of every member per step, and
    /// gives each step's stamps and looks of members 1.. (a member may look as it goes);
    /// `once` runs its closure on the CPU it is given.
    #[test]
    fn a_led_step_runs_the_leader_beside_every_member() {
        let (clock, cpus, sums) = three();
        let member = |t: usize| {
            let sums = &sums;
            move |arg: u64, place: &mut Place| {
                sums[t].fetch_add(arg, Ordering::Relaxed);
                place.look();
            }
        };
        let (led, placed) = Team::led(&clock, &cpus, member, |lead| {
            let mut ran = 0;
            for arg in 1..=4 {
                let step = lead(arg, &mut || ran += 1);
                assert_eq!((step.stamps.len(), step.places.len()), (2, 2), "{step:?}");
                assert!(step.places.iter().all(|p| p.looks == 3), "{step:?}");
            }
            ran
        });
        assert_eq!(led, 4);
        assert_eq!(sums[0].load(Ordering::Relaxed), 0, "the leader has no body");
        for s in &sums[1..] {
            assert_eq!(s.load(Ordering::Relaxed), 1 + 2 + 3 + 4);
        }
        assert!(
            placed.places[1..].iter().all(|p| p.looks == 12),
            "{placed:?}"
        );
        let (v, placed) = Team::once(&clock, cpus[1], || 7);
        assert_eq!((v, placed.places.len()), (7, 1));
    }

    /// A step's span runs from the first start to the last stop, and its overlap is the
    /// share of the span during which every member ran.
    #[test]
    fn a_step_spans_its_members() {
        let s = Step {
            stamps: vec![(100, 200), (110, 190)],
            quiet: true,
            places: vec![],
        };
        assert_eq!((s.slowest(), s.span()), (100, 100));
        assert!((s.overlap() - 0.8).abs() < 1e-9);
        let one_after_another = Step {
            stamps: vec![(100, 200), (200, 300)],
            quiet: true,
            places: vec![],
        };
        assert_eq!(one_after_another.span(), 200);
        assert_eq!(one_after_another.overlap(), 0.0);
    }

    /// Under the serial seam a stepped team's members run in member order, each after the
    /// one before has stopped.
    #[test]
    fn a_serial_team_runs_its_members_in_turn() {
        let clock = crate::clock::detect(None).0;
        let allowed = crate::platform::allowed_cpus();
        let cpus: Vec<usize> = (0..3).map(|k| allowed[k % allowed.len()]).collect();
        let member =
            |_t: usize| |_arg: u64| std::thread::sleep(std::time::Duration::from_millis(1));
        crate::experiments::seams::set(|s| s.serial_team = true);
        let (steps, _) = Team::run(&clock, &cpus, member, |step| {
            (0..3).map(|_| step(0)).collect::<Vec<_>>()
        });
        crate::experiments::seams::set(|s| s.serial_team = false);
        for s in steps {
            assert!(s.stamps.windows(2).all(|w| w[0].1 <= w[1].0), "{s:?}");
            assert!(s.overlap() < 0.5, "{s:?}");
        }
    }
}
