//! A run that an experiment overran. Nothing can stop a thread that never returns, and a
//! thread left spinning takes a CPU from whatever would be measured next, so the run ends
//! there; but what it measured before is kept. The runner records each experiment's
//! result in a `Ledger` as it finishes, so that the watchdog's thread (the measuring one
//! may never return) can assemble the document: the experiments before as measured, the
//! one that overran failed with its limit and budget, the ones after skipped with why. The
//! registry's reaction gets it: `osmeter run` writes it as a normal run's and exits
//! (commands::run), a test records it.

use crate::results::{ExperimentResult, RunResults, Status};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// An experiment overran its hard limit, and the run ended there.
#[derive(Debug, Clone)]
pub struct Overrun {
    /// The experiment that overran.
    pub id: String,
    /// Why it failed: "exceeded its hard time limit of L (budget B)".
    pub reason: String,
    /// The run's document as it stands: every experiment before it as measured, it
    /// failed, the ones after it skipped (with its findings, as a normal run's).
    pub results: RunResults,
}

/// What a run does when an experiment overruns, on the watchdog's thread. One that
/// returns lets the run end by itself once the experiment returns (tests), with the same
/// document.
pub type OnOverrun = Arc<dyn Fn(&Overrun) + Send + Sync>;

/// The runner's own reaction, for callers that write nothing (`runner::run`): the
/// scratch files go, as on Ctrl-C, and the process ends with `EXIT_OVERRUN`.
/// `osmeter run` replaces it with one that also writes the results.
pub(crate) fn exit_on_overrun() -> OnOverrun {
    Arc::new(|o: &Overrun| {
        crate::scratch::cleanup_all();
        let msg = format!("experiment {} {}; the run ended there", o.id, o.reason);
        eprintln!("{}", crate::error::Error::runtime(msg).line());
        std::process::exit(i32::from(crate::error::EXIT_OVERRUN));
    })
}

/// Why an experiment that overran failed.
pub(super) fn reason(limit: Duration, budget: Duration) -> String {
    format!(
        "exceeded its hard time limit of {} (budget {})",
        secs(limit),
        secs(budget)
    )
}

/// "1.0 s", or "50 ms" below a second.
fn secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Makes the run's document from its experiments' results (the caller's configuration,
/// machine and start, owned).
pub(super) type Head = Box<dyn Fn(Vec<ExperimentResult>) -> RunResults + Send>;

/// The run so far, where the watchdog's thread can read it.
pub(super) struct Ledger {
    state: Mutex<State>,
    /// Set, and waited for, once the reaction to an overrun has returned.
    reacted: (Mutex<bool>, Condvar),
}

struct State {
    head: Option<Head>,
    /// Each selected experiment's result: as measured, or still the empty one.
    results: Vec<ExperimentResult>,
    /// How many are measured: the next one is running.
    done: usize,
    /// The running experiment's hard limit and budget.
    running: (Duration, Duration),
    /// The document of a run an experiment overran.
    ended: Option<RunResults>,
}

impl Ledger {
    /// A ledger of the selected experiments, given their empty results in run order.
    pub(super) fn new(empty: Vec<ExperimentResult>) -> Ledger {
        Ledger {
            state: Mutex::new(State {
                head: None,
                results: empty,
                done: 0,
                running: (Duration::ZERO, Duration::ZERO),
                ended: None,
            }),
            reacted: (Mutex::new(false), Condvar::new()),
        }
    }

    // A panic elsewhere must not keep the results from being saved: a poisoned lock's
    // data is still whole (every update is one assignment).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How to make the document, once the machine and configuration are known.
    pub(super) fn begin(&self, head: Head) {
        self.state().head = Some(head);
    }

    /// The running experiment's hard limit and budget, for the reason if it overruns.
    pub(super) fn running(&self, limit: Duration, budget: Duration) {
        self.state().running = (limit, budget);
    }

    /// The running experiment is done, with this result.
    pub(super) fn done(&self, res: &ExperimentResult) {
        let mut s = self.state();
        let i = s.done;
        if let Some(slot) = s.results.get_mut(i) {
            *slot = res.clone();
        }
        s.done += 1;
    }

    /// The watchdog's alarm: the document as it stands goes to `react`.
    pub(super) fn alarm(self: &Arc<Self>, react: OnOverrun) -> super::watchdog::Alarm {
        let ledger = self.clone();
        Arc::new(move |_: &str| {
            if let Some(o) = ledger.end() {
                react(&o);
            }
            let (done, cv) = &ledger.reacted;
            *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        })
    }

    /// Ends the run at the running experiment: its document, kept for `ended`.
    fn end(&self) -> Option<Overrun> {
        let mut s = self.state();
        let at = s.done;
        let (limit, budget) = s.running;
        let mut results = s.results.clone();
        let id = results.get(at)?.id.clone();
        let why = reason(limit, budget);
        results[at].status = Status::Failed;
        results[at].reason = Some(why.clone());
        for r in &mut results[at + 1..] {
            r.status = Status::Skipped;
            r.reason = Some(format!(
                "not run: the run ended after {id} overran its hard time limit"
            ));
        }
        let doc = (s.head.as_ref()?)(results);
        s.ended = Some(doc.clone());
        Some(Overrun {
            id,
            reason: why,
            results: doc,
        })
    }

    /// Waits until the reaction to an overrun has returned (it may never: the real one
    /// ends the process), so that the run never goes on while it writes.
    pub(super) fn wait(&self) {
        let (done, cv) = &self.reacted;
        let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
        while !*d {
            d = cv.wait(d).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// True once an experiment overran: no more are run.
    pub(super) fn ended(&self) -> bool {
        *self.reacted.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The document of a run an experiment overran, as its reaction got it.
    pub(super) fn document(&self) -> Option<RunResults> {
        self.state().ended.take()
    }
}
