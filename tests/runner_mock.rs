//! The runner driven by mock experiments (as hyperfine's mock executor and fio's null
//! engine stand in for the real thing): its status logic, budgets, repeats, watchdog and
//! where its helper threads run, in a few seconds and without measuring anything real.

mod common;

use osmeter::experiments::{Context, Experiment, Needs, Outcome, Profile, RunOptions, Spec};
use osmeter::platform;
use osmeter::results::{Bottleneck, Check, RunResults, Status};
use osmeter::runner::{self, Registry, RunConfig, Watchdog};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy)]
enum Behaviour {
    /// Returns one metric: the budget it was given, in ms.
    Metrics,
    Panics,
    Errs,
    PremiseFails,
    NoMetrics,
    /// Sleeps this long, then returns a metric.
    Sleeps(Duration),
    Skipped,
    /// Each run gives different samples (10x the run number, plus 1 to 3), pools them,
    /// then states a check and a finding from the pooled median.
    Pools,
    /// What the context says about the CPU it runs on: `cpu` (ctx.cpu), `chosen` (the
    /// machine's chosen CPU, whose kind's caches `data_caches` gives), `ran_on`
    /// (sched_getcpu), `clock_ghz` (the core clock it was given), `earlier_cpu` (mock.kinds'
    /// `cpu` as earlier results give it, -1 when none), and `one` (1 ns, for its cycles),
    /// predicted at the context's clock in GHz.
    Kinds,
}

struct Mock {
    meta: Spec,
    budget: Duration,
    behaviour: Behaviour,
    calls: Arc<AtomicUsize>,
}

impl Experiment for Mock {
    fn spec(&self) -> &Spec {
        &self.meta
    }
    fn budget(&self, _p: Profile) -> Duration {
        self.budget
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, osmeter::results::Prediction)> {
        let Behaviour::Kinds = self.behaviour else {
            return vec![];
        };
        let ghz = ctx.machine.cpu.core_clock_hz.unwrap_or(f64::NAN) / 1e9;
        vec![(
            "one".into(),
            osmeter::results::Prediction {
                value: ghz,
                formula: "the context's core clock in GHz".into(),
                inputs: Default::default(),
                bound: None,
                consistency: false,
                withheld: None,
            },
        )]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut o = Outcome::default();
        let ms = ctx.budget.as_secs_f64() * 1e3;
        match self.behaviour {
            Behaviour::Metrics => {
                o.metric("budget", "ms", "the budget given", vec![ms, ms, ms]);
            }
            Behaviour::Panics => panic!("mock panic"),
            Behaviour::Errs => anyhow::bail!("mock error"),
            Behaviour::PremiseFails => {
                o.metric("x", "ns", "", vec![1.0, 2.0, 3.0]);
                o.check(Check::premise("mock premise", false, "did not hold"));
                o.check(Check::sanity("mock sanity", true, "held"));
            }
            Behaviour::NoMetrics => o.check(Check::sanity("mock sanity", true, "held")),
            Behaviour::Sleeps(d) => {
                std::thread::sleep(d);
                o.metric("x", "ns", "", vec![1.0, 2.0, 3.0]);
            }
            Behaviour::Skipped => return Ok(Outcome::skipped("needs a mock device")),
            Behaviour::Kinds => {
                #[cfg(target_os = "linux")]
                // SAFETY: sched_getcpu has no preconditions.
                let ran_on = unsafe { libc::sched_getcpu() } as f64;
                #[cfg(not(target_os = "linux"))]
                let ran_on = -1.0;
                let ghz = ctx.machine.cpu.core_clock_hz.unwrap_or(f64::NAN) / 1e9;
                let earlier = ctx
                    .earlier
                    .metric("mock.kinds", "cpu")
                    .map_or(-1.0, |m| m.summary.median);
                o.metric("cpu", "", "", vec![ctx.cpu as f64]);
                let chosen = ctx.machine.topology.chosen_cpu;
                o.metric("chosen", "", "", vec![chosen.map_or(-1.0, |c| c as f64)]);
                o.metric("ran_on", "", "", vec![ran_on]);
                o.metric("clock_ghz", "GHz", "", vec![ghz]);
                o.metric("earlier_cpu", "", "", vec![earlier]);
                o.metric("one", "ns", "one nanosecond", vec![1.0, 1.0, 1.0]);
                o.check(Check::premise("mock premise", true, "held"));
                o.series.push(osmeter::results::Series {
                    name: "curve".into(),
                    x_unit: "x".into(),
                    y_unit: "ns".into(),
                    points: vec![[0.0, 1.0]],
                });
                o.findings.push(osmeter::results::Finding {
                    text: format!("ran on CPU {}.", ctx.cpu),
                    from: vec!["cpu".into()],
                    salience: None,
                });
            }
            Behaviour::Pools => {
                let k = self.calls.load(Ordering::SeqCst) as f64 * 10.0;
                o.metric("x", "ns", "", vec![k + 1.0, k + 2.0, k + 3.0]);
                o.check(Check::premise("samples taken", true, "this run's"));
                o.series.push(osmeter::results::Series {
                    name: "x vs trial".into(),
                    x_unit: "trial".into(),
                    y_unit: "ns".into(),
                    points: vec![[0.0, k + 1.0]],
                });
                o.pool(ctx);
                let x = o.metrics[0].summary.median;
                o.check(Check::sanity("x is positive", x > 0.0, format!("{x} ns")));
                o.findings.push(osmeter::results::Finding {
                    text: format!("x costs {x} ns."),
                    from: vec!["x".into()],
                    salience: None,
                });
            }
        }
        Ok(o)
    }
}

fn mock(id: &'static str, behaviour: Behaviour, calls: &Arc<AtomicUsize>) -> Box<dyn Experiment> {
    Box::new(Mock {
        meta: Spec {
            id,
            title: "mock",
            description: "a mock experiment",
            method: "none",
            needs: Needs::NONE,
            bottleneck: Bottleneck::Chain,
            per_core_kind: false,
            subtracts_loop: false,
            budget: None,
        },
        budget: Duration::from_millis(50),
        behaviour,
        calls: calls.clone(),
    })
}

fn config(only: &str, repeat: usize) -> RunConfig {
    RunConfig {
        profile: Profile::Smoke,
        only: if only.is_empty() {
            vec![]
        } else {
            vec![only.into()]
        },
        skip: vec![],
        cpu: None,
        options: RunOptions::default(),
        repeat: Some(repeat),
    }
}

/// The hard limit in these tests: 1 s for the 50 ms budget (a panic's backtrace can take
/// a few hundred ms to print on a loaded machine).
fn short_limit(budget: Duration) -> Duration {
    budget * 20
}

/// Runs the mock set; returns the results, the ids the watchdog reported and the calls.
fn run_mocks(only: &str, repeat: usize) -> (RunResults, Vec<String>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let overruns = Arc::new(Mutex::new(Vec::new()));
    let o = overruns.clone();
    let registry = Registry {
        experiments: vec![
            mock("mock.metrics", Behaviour::Metrics, &calls),
            mock("mock.panic", Behaviour::Panics, &calls),
            mock("mock.error", Behaviour::Errs, &calls),
            mock("mock.premise", Behaviour::PremiseFails, &calls),
            mock("mock.empty", Behaviour::NoMetrics, &calls),
            mock("mock.skipped", Behaviour::Skipped, &calls),
            // Last: the run ends at an overrun.
            mock(
                "mock.sleeper",
                Behaviour::Sleeps(Duration::from_millis(2500)),
                &calls,
            ),
        ],
        hard_limit: short_limit,
        on_overrun: Arc::new(move |ov: &runner::Overrun| o.lock().unwrap().push(ov.id.clone())),
        topology: None,
        kind_clock: None,
    };
    let results = runner::run_with(&config(only, repeat), registry, &runner::Silent)
        .unwrap_or_else(|e| panic!("run failed: {e}"));
    let seen = overruns.lock().unwrap().clone();
    (results, seen, calls)
}

fn status(r: &RunResults, id: &str) -> (Status, String) {
    let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
    (e.status, e.reason.clone().unwrap_or_default())
}

#[test]
fn status_logic_budgets_and_watchdog() {
    let (r, overruns, calls) = run_mocks("", 1);
    assert_eq!(r.experiments.len(), 7);
    assert_eq!(calls.load(Ordering::SeqCst), 7);

    let (s, why) = status(&r, "mock.metrics");
    assert_eq!(s, Status::Ok, "{why}");
    // The runner hands each experiment its own budget.
    let m = r
        .experiment("mock.metrics")
        .unwrap()
        .metric("budget")
        .unwrap();
    assert_eq!(m.summary.median, 50.0);

    let (s, why) = status(&r, "mock.panic");
    assert_eq!(s, Status::Failed);
    assert!(
        why.contains("internal error") && why.contains("mock panic"),
        "{why}"
    );

    let (s, why) = status(&r, "mock.error");
    assert_eq!(s, Status::Failed);
    assert!(why.contains("mock error"), "{why}");

    let (s, why) = status(&r, "mock.premise");
    assert_eq!(s, Status::Invalid);
    assert!(
        why.contains("mock premise") && !why.contains("mock sanity"),
        "{why}"
    );

    let (s, why) = status(&r, "mock.empty");
    assert_eq!(s, Status::Failed);
    assert!(why.contains("no metrics"), "{why}");

    let (s, why) = status(&r, "mock.skipped");
    assert_eq!(s, Status::Skipped);
    assert_eq!(why, "needs a mock device");

    // 2.5 s against a 1 s hard limit: the watchdog fires for it, and only for it.
    assert_eq!(overruns, ["mock.sleeper"]);
    let (s, why) = status(&r, "mock.sleeper");
    assert_eq!(s, Status::Failed);
    assert!(why.contains("hard time limit"), "{why}");
    // Every experiment that ran to its end got the sentinel before and after.
    assert!(r
        .experiments
        .iter()
        .all(|e| e.sentinel.is_some() || e.id == "mock.sleeper"));
}

/// An overrun ends the run, keeping what was measured before it: the reaction gets the
/// document with the experiment failed (its limit and budget named) and the ones after it
/// skipped, none of them run, not even its own next repetition; the run returns the same.
#[test]
fn an_overrun_ends_the_run_and_keeps_what_came_before() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let registry = Registry {
        experiments: vec![
            mock("mock.metrics", Behaviour::Metrics, &calls),
            mock(
                "mock.sleeper",
                Behaviour::Sleeps(Duration::from_millis(2500)),
                &calls,
            ),
            mock("mock.after", Behaviour::Metrics, &calls),
        ],
        hard_limit: short_limit,
        on_overrun: Arc::new(move |o: &runner::Overrun| s.lock().unwrap().push(o.clone())),
        topology: None,
        kind_clock: None,
    };
    let r = runner::run_with(&config("", 2), registry, &runner::Silent).expect("run");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let o = &seen[0];
    assert_eq!(o.id, "mock.sleeper");
    assert_eq!(
        o.reason,
        "exceeded its hard time limit of 1.0 s (budget 50 ms)"
    );
    // mock.metrics twice, mock.sleeper once; mock.after never.
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    for doc in [&o.results, &r] {
        let ids: Vec<&str> = doc.experiments.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["mock.metrics", "mock.sleeper", "mock.after"]);
        let m = doc.experiment("mock.metrics").unwrap();
        assert_eq!(m.status, Status::Ok, "{:?}", m.reason);
        assert_eq!(m.metric("budget").unwrap().runs.len(), 2, "both runs kept");
        assert!(m.sentinel.is_some() && m.grade.is_some());
        assert_eq!(
            status(doc, "mock.sleeper"),
            (Status::Failed, o.reason.clone())
        );
        assert_eq!(
            status(doc, "mock.after"),
            (
                Status::Skipped,
                "not run: the run ended after mock.sleeper overran its hard time limit".into()
            )
        );
        assert_eq!(doc.config.profile.as_deref(), Some("smoke"));
    }
}

#[test]
fn selection_and_repeats() {
    let (r, overruns, calls) = run_mocks("mock.metrics,mock.skipped", 3);
    let ids: Vec<&str> = r.experiments.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["mock.metrics", "mock.skipped"]);
    assert_eq!(calls.load(Ordering::SeqCst), 6);
    assert!(overruns.is_empty());
    let m = r
        .experiment("mock.metrics")
        .unwrap()
        .metric("budget")
        .unwrap();
    assert_eq!(m.runs.len(), 3, "each repetition's median is kept");
    assert_eq!(m.raw.len(), 9, "the raw values are pooled");
    assert_eq!(
        r.experiment("mock.skipped").unwrap().status,
        Status::Skipped
    );
}

/// Issue 20 item 2: with two runs the finding quotes the pooled median the table shows,
/// not the last run's own; checks and series made before pooling name their run, and
/// every run's checks are kept.
#[test]
fn findings_quote_the_pooled_figures() {
    let run_pools = |repeat| {
        let calls = Arc::new(AtomicUsize::new(0));
        let registry = Registry {
            experiments: vec![mock("mock.pools", Behaviour::Pools, &calls)],
            hard_limit: short_limit,
            on_overrun: Arc::new(|_: &runner::Overrun| {}),
            topology: None,
            kind_clock: None,
        };
        runner::run_with(&config("", repeat), registry, &runner::Silent).unwrap()
    };
    let r = run_pools(2);
    let e = r.experiment("mock.pools").unwrap();
    let m = e.metric("x").unwrap();
    // Run 1 gives 11, 12, 13 and run 2 gives 21, 22, 23: the pooled median lies between.
    assert_eq!(m.runs, vec![12.0, 22.0]);
    assert_eq!(m.raw.len(), 6);
    assert!(m.summary.median > 13.0 && m.summary.median < 21.0, "{m:?}");
    let quoted = format!("x costs {} ns.", m.summary.median);
    let texts: Vec<&str> = e.findings.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(texts, [quoted.as_str()]);
    let names: Vec<&str> = e.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "run 1: samples taken",
            "run 1: x is positive",
            "run 2: samples taken",
            "x is positive"
        ]
    );
    let series: Vec<&str> = e.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(series, ["x vs trial (run 2 of 2)"]);
    // One run: nothing is relabelled, nothing pooled.
    let r = run_pools(1);
    let e = r.experiment("mock.pools").unwrap();
    assert_eq!(e.checks[0].name, "samples taken");
    assert_eq!(e.series[0].name, "x vs trial");
    assert!(e.metric("x").unwrap().runs.is_empty());
}

/// The document records the options as `RunOptions` serialises them (all but the peer
/// token) and the rest of the configuration under the keys it always had.
#[test]
fn the_configuration_is_recorded() {
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = Registry {
        experiments: vec![mock("mock.metrics", Behaviour::Metrics, &calls)],
        hard_limit: short_limit,
        on_overrun: Arc::new(|_: &runner::Overrun| {}),
        topology: None,
        kind_clock: None,
    };
    let mut cfg = config("mock.*", 2);
    cfg.options = RunOptions {
        peer: Some("127.0.0.1:1".into()),
        peer_token: Some("secret".into()),
        host_name: Some("h1".into()),
        scratch_dir: Some(std::env::temp_dir()),
        drop_caches: true,
        ..RunOptions::default()
    };
    let r = runner::run_with(&cfg, registry, &runner::Silent).unwrap();
    let doc = serde_json::to_value(&r).unwrap();
    let c = &doc["config"];
    assert_eq!(c["options"], serde_json::to_value(&cfg.options).unwrap());
    assert!(!doc.to_string().contains("secret"));
    let keys: Vec<&str> = c.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "cpu",
            "only",
            "options",
            "peer",
            "profile",
            "repeat",
            "skip",
            "statistics"
        ]
    );
    assert_eq!(c["profile"], "smoke");
    assert_eq!((c["repeat"].as_u64(), r.config.repeats()), (Some(2), 2));
    assert_eq!(c["only"], serde_json::json!(["mock.*"]));
    assert_eq!(c["peer"]["spec"], "127.0.0.1:1");
    assert_eq!(r.peer_name(), Some("127.0.0.1:1"));
    assert_eq!(r.peer_address(), Some("127.0.0.1:1"));
    assert_eq!(r.host_name(), "h1");
    let s = &c["statistics"];
    assert!(s["outlier_rule"].is_string() && s["ci_method"].is_string());
    assert!(s["harness"].as_str().unwrap().starts_with("HarnessConfig"));
    // Without --peer the peer is written as null (the loopback peer).
    cfg.options = RunOptions::default();
    let registry = Registry {
        experiments: vec![mock("mock.metrics", Behaviour::Metrics, &calls)],
        hard_limit: short_limit,
        on_overrun: Arc::new(|_: &runner::Overrun| {}),
        topology: None,
        kind_clock: None,
    };
    let r = runner::run_with(&cfg, registry, &runner::Silent).unwrap();
    let c = serde_json::to_value(&r.config).unwrap();
    assert!(c["peer"].is_null() && c.get("peer").is_some());
    assert_eq!(r.peer_name(), None);
}

/// Records what the runner tells its progress observer.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
}

impl runner::Progress for Recorder {
    fn begin(&self, total: Duration) {
        self.push(format!("begin {} ms", total.as_millis()));
    }
    fn start_threads(&self) {
        self.push("threads".into());
    }
    fn message(&self, msg: &str) {
        self.push(format!("message {msg}"));
    }
    fn line(&self, msg: &str) {
        self.push(format!("line {msg}"));
    }
    fn advance(&self, by: Duration) {
        self.push(format!("advance {} ms", by.as_millis()));
    }
    fn finish(&self) {
        self.push("finish".into());
    }
}

impl Recorder {
    fn push(&self, e: String) {
        self.events.lock().unwrap().push(e);
    }
}

#[test]
fn progress_goes_to_the_observer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = Registry {
        experiments: vec![
            mock("mock.metrics", Behaviour::Metrics, &calls),
            mock("mock.skipped", Behaviour::Skipped, &calls),
        ],
        hard_limit: short_limit,
        on_overrun: Arc::new(|_: &runner::Overrun| {}),
        topology: None,
        kind_clock: None,
    };
    let rec = Recorder::default();
    runner::run_with(&config("", 2), registry, &rec).unwrap();
    let ev = rec.events.into_inner().unwrap();
    // Two experiments of 50 ms, twice each: the bar's total, and each one's share of it.
    assert_eq!(
        ev.first().map(String::as_str),
        Some("begin 200 ms"),
        "{ev:?}"
    );
    assert_eq!(ev.last().map(String::as_str), Some("finish"), "{ev:?}");
    assert_eq!(ev.iter().filter(|e| *e == "threads").count(), 1, "{ev:?}");
    let advances: Vec<&String> = ev.iter().filter(|e| e.starts_with("advance")).collect();
    assert_eq!(advances, ["advance 100 ms", "advance 100 ms"], "{ev:?}");
    assert!(
        ev.contains(&"message [2/2] mock.skipped (run 2/2)".to_string()),
        "{ev:?}"
    );
    let done: Vec<&String> = ev
        .iter()
        .filter(|e| e.starts_with("line [") && !e.contains("warning"))
        .collect();
    assert_eq!(done.len(), 2, "one line per experiment: {ev:?}");
    assert!(
        done[0].starts_with("line [1/2] mock.metrics ok ("),
        "{ev:?}"
    );
    assert!(
        done[1].contains("mock.skipped skipped") && done[1].contains("needs a mock device"),
        "{ev:?}"
    );
}

#[test]
fn a_pattern_matching_no_mock_is_a_usage_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let registry = Registry {
        experiments: vec![mock("mock.metrics", Behaviour::Metrics, &calls)],
        hard_limit: short_limit,
        on_overrun: Arc::new(|_: &runner::Overrun| {}),
        topology: None,
        kind_clock: None,
    };
    match runner::run_with(&config("cpu.*", 1), registry, &runner::Silent) {
        Err(runner::RunError::Usage(e)) => assert!(e.contains("mock.metrics"), "{e}"),
        other => panic!("expected a usage error, got {:?}", other.err()),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn helper_threads_avoid_the_measured_cpu() {
    let allowed = platform::allowed_cpus();
    if allowed.len() < 2 {
        common::skip(
            "helper_threads_avoid_the_measured_cpu",
            "one allowed CPU: nowhere else to put the helpers",
        );
        return;
    }
    let cpu = *allowed.last().unwrap();
    let w = runner::off_cpu(cpu, &allowed, || Watchdog::start(Arc::new(|_: &str| {})));
    let a = w
        .thread_affinity()
        .expect("the watchdog reports its affinity");
    assert!(!a.is_empty() && !a.contains(&cpu), "{a:?} vs CPU {cpu}");
    assert_eq!(
        platform::allowed_cpus(),
        allowed,
        "the caller's affinity is restored"
    );

    // Control: a watchdog started after pinning, as before, shares the measured CPU.
    platform::pin_to_cpu(cpu).unwrap();
    let late = Watchdog::start(Arc::new(|_: &str| {}));
    platform::set_affinity(&allowed).unwrap();
    assert_eq!(late.thread_affinity(), Some(vec![cpu]));
}

/// The runner grades every experiment that ran, as it is wired: the grade's level is its
/// worst reason, a VM is at least B, each C condition a repetition saw is also a note of
/// that repetition; skipped and failed experiments have none.
#[test]
fn experiments_that_ran_are_graded() {
    use osmeter::results::GradeLevel;
    let (r, _, _) = run_mocks("mock.metrics,mock.premise,mock.error,mock.skipped", 2);
    for id in ["mock.metrics", "mock.premise"] {
        let e = r.experiment(id).unwrap();
        let g = e
            .grade
            .as_ref()
            .unwrap_or_else(|| panic!("{id} has no grade"));
        let worst = g.reasons.iter().map(|x| x.level).max();
        assert_eq!(g.level, worst.unwrap_or(GradeLevel::A), "{id}: {g:?}");
        if r.machine.virtualization.is_vm {
            assert!(g.reasons.iter().any(|x| x.code == "vm"), "{id}: {g:?}");
        }
        for x in g.reasons.iter().filter(|x| x.level == GradeLevel::C) {
            let text = x
                .text
                .split_once(" of 2: ")
                .map(|(_, t)| t)
                .unwrap_or(&x.text);
            assert!(
                e.notes.iter().any(|n| n.ends_with(text)),
                "{id}: C reason {text:?} not among the notes {:?}",
                e.notes
            );
        }
    }
    for id in ["mock.error", "mock.skipped"] {
        assert!(r.experiment(id).unwrap().grade.is_none(), "{id}");
    }
    // The document keeps the grade at experiments[].grade.{level, reasons}.
    let v = serde_json::to_value(&r).unwrap();
    let g = &v["experiments"][0]["grade"];
    assert!(
        ["A", "B", "C"].contains(&g["level"].as_str().unwrap()),
        "{g}"
    );
    assert!(g["reasons"].is_array());
}

/// Issue 21 item 2, the runner as wired: on a CPU with two kinds of core (a made-up
/// topology over two CPUs of this machine), a per-kind experiment runs on a CPU of each
/// kind, the other kind's metrics suffixed, each converted to cycles at its own kind's
/// clock and predicted from it; an experiment that is not per-kind runs once.
#[test]
fn two_kinds_of_core_give_both_sets_of_figures() {
    use osmeter::machine::{CpuPlace, Topology};
    let allowed = platform::allowed_cpus();
    if allowed.len() < 2 {
        common::skip(
            "two_kinds_of_core_give_both_sets_of_figures",
            "needs two allowed CPUs",
        );
        return;
    }
    let (e_cpu, p_cpu) = (allowed[0], allowed[1]);
    let place = |cpu: usize, core: usize, kind: &str| CpuPlace {
        cpu,
        package: Some(0),
        core: Some(core),
        node: Some(0),
        llc: Some(0),
        kind: Some(kind.into()),
        siblings: vec![],
        max_mhz: None,
    };
    let topology = Topology {
        cpus: vec![
            place(e_cpu, 0, "efficiency"),
            place(p_cpu, 1, "performance"),
        ],
        cores: Some(2),
        allowed: allowed.clone(),
        chosen_cpu: Some(p_cpu),
        source: "test".into(),
        ..Default::default()
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let per_kind = |id: &'static str| {
        let mut m = Mock {
            meta: Spec {
                id,
                title: "mock",
                description: "a mock experiment",
                method: "none",
                needs: Needs::NONE,
                bottleneck: Bottleneck::Chain,
                per_core_kind: true,
                subtracts_loop: false,
                budget: None,
            },
            budget: Duration::from_millis(50),
            behaviour: Behaviour::Kinds,
            calls: calls.clone(),
        };
        if id == "mock.once" {
            m.meta.per_core_kind = false;
        }
        Box::new(m) as Box<dyn Experiment>
    };
    let registry = Registry {
        experiments: vec![
            per_kind("mock.kinds"),
            per_kind("mock.reader"),
            per_kind("mock.once"),
        ],
        hard_limit: short_limit,
        on_overrun: Arc::new(|_: &runner::Overrun| {}),
        topology: Some(topology),
        // The other kind's clock: 1 GHz, which the run's CPU (measured) is not.
        kind_clock: Some(|_| Some(1.0e9)),
    };
    let r = runner::run_with(&config("", 2), registry, &runner::Silent).unwrap();
    // Two kinds x two runs for the per-kind ones, two runs for the other.
    assert_eq!(calls.load(Ordering::SeqCst), 4 + 4 + 2);
    let kinds = &r.machine.cpu.core_kinds;
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(
        (
            kinds[0].kind.as_str(),
            kinds[0].cpu,
            kinds[0].suffix.as_str()
        ),
        ("performance", p_cpu, "")
    );
    assert_eq!(
        (
            kinds[1].kind.as_str(),
            kinds[1].cpu,
            kinds[1].suffix.as_str()
        ),
        ("efficiency", e_cpu, "_efficiency")
    );
    let (p_hz, e_hz) = (kinds[0].core_clock_hz, kinds[1].core_clock_hz);
    assert_eq!(r.machine.cpu.core_clock_hz, p_hz);
    assert_eq!(e_hz, Some(1.0e9));
    assert!(p_hz.is_none_or(|h| (h - 1.0e9).abs() > 1e6), "{p_hz:?}");
    let e = r.experiment("mock.kinds").unwrap();
    assert_eq!(e.status, Status::Ok, "{:?}", e.reason);
    let names: Vec<&str> = e.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu",
            "chosen",
            "ran_on",
            "clock_ghz",
            "earlier_cpu",
            "one",
            "cpu_efficiency",
            "chosen_efficiency",
            "ran_on_efficiency",
            "clock_ghz_efficiency",
            "earlier_cpu_efficiency",
            "one_efficiency"
        ]
    );
    let med = |e: &osmeter::results::ExperimentResult, n: &str| e.metric(n).unwrap().summary.median;
    assert_eq!(med(e, "cpu"), p_cpu as f64);
    assert_eq!(med(e, "cpu_efficiency"), e_cpu as f64);
    // The machine each set sees has its CPU chosen: its kind's caches and partners.
    assert_eq!(med(e, "chosen"), p_cpu as f64);
    assert_eq!(med(e, "chosen_efficiency"), e_cpu as f64);
    if cfg!(target_os = "linux") {
        assert_eq!(med(e, "ran_on"), p_cpu as f64);
        assert_eq!(med(e, "ran_on_efficiency"), e_cpu as f64);
    }
    // Each set at its own kind's clock: the context's, the cycles and the prediction.
    if let (Some(p_hz), Some(e_hz)) = (p_hz, e_hz) {
        for (suffix, hz) in [("", p_hz), ("_efficiency", e_hz)] {
            let ghz = hz / 1e9;
            assert_eq!(med(e, &format!("clock_ghz{suffix}")), ghz);
            let one = e.metric(&format!("one{suffix}")).unwrap();
            let cyc = one.cycles.as_ref().unwrap().core.unwrap();
            assert!((cyc - ghz).abs() < 1e-9 * ghz, "{suffix}: {cyc} vs {ghz}");
            assert_eq!(one.prediction.as_ref().unwrap().value, ghz, "{suffix}");
        }
    }
    // Checks, series and findings say which kind they are of.
    let checks: Vec<&str> = e.checks.iter().map(|c| c.name.as_str()).collect();
    assert!(
        checks.contains(&"run 1: mock premise")
            && checks.iter().any(
                |c| c.starts_with("efficiency core (CPU") && c.ends_with("run 1: mock premise")
            ),
        "{checks:?}"
    );
    let series: Vec<&str> = e.series.iter().map(|s| s.name.as_str()).collect();
    assert!(
        series.contains(&"efficiency core: curve (run 2 of 2)"),
        "{series:?}"
    );
    let f = e
        .findings
        .iter()
        .find(|f| f.from == ["cpu_efficiency"])
        .expect("the efficiency finding names its suffixed metric");
    assert!(
        f.text.contains(&format!("ran on CPU {e_cpu}")),
        "{}",
        f.text
    );
    assert!(
        e.notes.iter().any(|n| n.contains("figures per core kind")),
        "{:?}",
        e.notes
    );
    // Earlier results as each kind reads them: its own kind's.
    let rd = r.experiment("mock.reader").unwrap();
    assert_eq!(med(rd, "earlier_cpu"), p_cpu as f64);
    assert_eq!(med(rd, "earlier_cpu_efficiency"), e_cpu as f64);
    // Not per-kind: once, today's names only.
    let once = r.experiment("mock.once").unwrap();
    assert!(once.metrics.iter().all(|m| !m.name.contains("efficiency")));
    assert_eq!(med(once, "cpu"), p_cpu as f64);
}
