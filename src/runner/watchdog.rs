//! The hard limit on each experiment's wall time, watched from a thread of its own.

use crate::platform;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the watchdog does when an experiment overruns its hard limit (given its id).
pub(crate) type Alarm = Arc<dyn Fn(&str) + Send + Sync>;

/// Watches the running experiment's hard limit from a thread of its own, so no
/// experiment can hang the run.
pub struct Watchdog {
    deadline_ms: Arc<AtomicU64>,
    current: Arc<Mutex<String>>,
    overran: Arc<AtomicBool>,
    affinity: Arc<Mutex<Option<Vec<usize>>>>,
    epoch: Instant,
}

impl Watchdog {
    pub fn start(alarm: Alarm) -> Watchdog {
        let w = Watchdog {
            deadline_ms: Arc::new(AtomicU64::new(u64::MAX)),
            current: Arc::new(Mutex::new(String::new())),
            overran: Arc::new(AtomicBool::new(false)),
            affinity: Arc::new(Mutex::new(None)),
            epoch: Instant::now(),
        };
        let (d, c, o, a, epoch) = (
            w.deadline_ms.clone(),
            w.current.clone(),
            w.overran.clone(),
            w.affinity.clone(),
            w.epoch,
        );
        std::thread::Builder::new()
            .name("osmeter-watchdog".into())
            .spawn(move || {
                if let Ok(mut a) = a.lock() {
                    *a = Some(platform::allowed_cpus());
                }
                loop {
                    std::thread::sleep(Duration::from_millis(100));
                    let at = d.load(Ordering::SeqCst);
                    if epoch.elapsed().as_millis() as u64 > at
                        && d.compare_exchange(at, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        o.store(true, Ordering::SeqCst);
                        let id = c.lock().map(|s| s.clone()).unwrap_or_default();
                        alarm(&id);
                    }
                }
            })
            .ok();
        w
    }
    pub(super) fn arm(&self, id: &str, limit: Duration) {
        if let Ok(mut c) = self.current.lock() {
            *c = id.to_string();
        }
        self.overran.store(false, Ordering::SeqCst);
        let at = self.epoch.elapsed() + limit;
        self.deadline_ms
            .store(at.as_millis() as u64, Ordering::SeqCst);
    }
    /// Stops watching; true when the experiment overran since `arm`.
    pub(super) fn disarm(&self) -> bool {
        // The watchdog takes the deadline when it fires: finding it gone means it did, even
        // if it has not yet said so.
        let at = self.deadline_ms.swap(u64::MAX, Ordering::SeqCst);
        at == u64::MAX || self.overran.load(Ordering::SeqCst)
    }
    /// The CPUs the watchdog thread may run on, as it read them through the platform
    /// layer when it started (None until it has).
    pub fn thread_affinity(&self) -> Option<Vec<usize>> {
        for _ in 0..100 {
            if let Some(a) = self.affinity.lock().ok().and_then(|a| a.clone()) {
                return Some(a);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

/// Hard limit for one experiment: generous over its budget, but finite.
pub(crate) fn hard_limit(budget: Duration) -> Duration {
    budget * 10 + Duration::from_secs(30)
}
