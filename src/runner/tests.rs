//! The runner's own tests: merging, judging, per-kind runs.

use super::kinds::kind_source;
use super::*;
use crate::results::Check;
use crate::units::fmt_ns;

fn with(checks: Vec<Check>) -> ExperimentResult {
    let mut r = ExperimentResult {
        checks,
        ..ExperimentResult::new("x.y", "t", "")
    };
    let mut o = crate::experiments::Outcome::default();
    o.metric("m", "ns", "", vec![1.0, 2.0]);
    r.metrics = o.metrics;
    judge(r)
}

/// A note every repetition made (a withheld prediction's reason) is kept once and
/// unlabelled; one not made in every repetition keeps its run's label.
#[test]
fn notes_made_in_every_repetition_are_kept_once() {
    let run = |notes: &[&str]| ExperimentResult {
        notes: notes.iter().map(|n| n.to_string()).collect(),
        ..ExperimentResult::new("x.y", "t", "")
    };
    let merged = merge_repeats(vec![
        run(&["no prediction for m: why", "host condition: a"]),
        run(&["no prediction for m: why", "host condition: b"]),
    ]);
    assert_eq!(
        merged.notes,
        [
            "no prediction for m: why",
            "run 1: host condition: a",
            "run 2: host condition: b"
        ]
    );
    // The same condition seen in both runs: once, true of both.
    let merged = merge_repeats(vec![run(&["x"]), run(&["x", "y"])]);
    assert_eq!(merged.notes, ["x", "run 2: y"]);
}

/// A run that was not measured is the result shown: the host conditions graded are
/// the ones seen around it, each with its note, not those of a run whose figures went.
#[test]
fn a_kept_invalid_run_is_graded_by_what_was_seen_around_it() {
    use crate::results::{GradeLevel, GradeReason};
    let seen = |t: &str| {
        vec![GradeReason {
            code: "issue_rate".into(),
            level: GradeLevel::C,
            text: t.into(),
        }]
    };
    let run = |status: Status, note: &str| ExperimentResult {
        status,
        notes: vec![format!("host condition: {note}")],
        ..ExperimentResult::new("x.y", "t", "")
    };
    for bad in [0, 1] {
        let mut reps = vec![run(Status::Ok, "a"), run(Status::Ok, "b")];
        reps[bad] = run(Status::Invalid, ["a", "b"][bad]);
        let observed = kept_observations(&reps, vec![seen("a"), seen("b")]);
        let merged = merge_repeats(reps);
        assert_eq!(observed.len(), 1);
        let text = &observed[0][0].text;
        assert_eq!(text, ["a", "b"][bad]);
        assert!(merged.notes.iter().any(|n| n.ends_with(text.as_str())));
    }
    // All measured: every repetition's observations.
    let reps = vec![run(Status::Ok, "a"), run(Status::Ok, "b")];
    assert_eq!(
        kept_observations(&reps, vec![seen("a"), seen("b")]).len(),
        2
    );
}

#[test]
fn an_unverifiable_premise_is_unverified_and_a_failed_one_wins() {
    let ok = Check::premise("a", true, "fine");
    let unv = Check::unverified("device counter", "no block device");
    let bad = Check::premise("b", false, "broken");
    assert_eq!(with(vec![ok.clone()]).status, Status::Ok);
    let r = with(vec![ok.clone(), unv.clone()]);
    assert_eq!(r.status, Status::Unverified);
    assert!(r
        .reason
        .unwrap()
        .contains("device counter: no block device"));
    let r = with(vec![unv, bad]);
    assert_eq!(r.status, Status::Invalid);
    assert!(!r.reason.unwrap().contains("device counter"));
    // Serialized as "unverified"; old spellings unchanged.
    assert_eq!(
        serde_json::to_string(&Status::Unverified).unwrap(),
        "\"unverified\""
    );
    assert_eq!(
        serde_json::to_string(&Status::Invalid).unwrap(),
        "\"invalid\""
    );
    let c: Check = serde_json::from_str(r#"{"name":"n","passed":false,"detail":"d"}"#).unwrap();
    assert!(c.premise && !c.unverified);
    assert!(!serde_json::to_string(&ok).unwrap().contains("unverified"));
}

#[test]
fn another_kinds_measured_inputs_name_its_own_metrics() {
    let pk = ["cpu.syscall"];
    assert_eq!(
        kind_source("measured: cpu.syscall getppid", &pk, "_efficiency"),
        "measured: cpu.syscall getppid_efficiency"
    );
    // Not per-kind, or not a measured input: unchanged.
    for s in [
        "measured: mem.bandwidth copy_1t",
        "machine: effective core clock (dependent add chain)",
    ] {
        assert_eq!(kind_source(s, &pk, "_efficiency"), s);
    }
}

/// Issue 21 item 2, with real experiments as wired: a made-up two-kind topology over
/// two CPUs of this machine gives every metric of a per-kind experiment twice, the
/// second set suffixed and converted to cycles at the clock measured on its own CPU.
#[test]
fn real_experiments_report_both_kinds_each_at_its_own_clock() {
    use crate::machine::CpuPlace;
    let allowed = platform::allowed_cpus();
    if allowed.len() < 2 {
        eprintln!("SKIPPED real_experiments_report_both_kinds: needs two allowed CPUs");
        return;
    }
    let place = |cpu: usize, kind: &str| CpuPlace {
        cpu,
        core: Some(cpu),
        kind: Some(kind.into()),
        ..Default::default()
    };
    let topology = Topology {
        cpus: vec![
            place(allowed[0], "efficiency"),
            place(allowed[1], "performance"),
        ],
        allowed: allowed.clone(),
        chosen_cpu: Some(allowed[1]),
        source: "test".into(),
        ..Default::default()
    };
    let cfg = RunConfig {
        profile: Profile::Smoke,
        only: vec!["cpu.loop,cpu.syscall,cpu.core-to-core".into()],
        skip: vec![],
        cpu: None,
        options: RunOptions::default(),
        repeat: Some(1),
    };
    let registry = Registry {
        topology: Some(topology),
        // A clock the run's CPU cannot have: each set must be converted at its own.
        kind_clock: Some(|_| Some(1.0e9)),
        ..Registry::real()
    };
    let r = run_with(&cfg, registry, &Silent).expect("the run completes");
    let k = &r.machine.cpu.core_kinds;
    assert_eq!(k.len(), 2, "{k:?}");
    for id in ["cpu.loop", "cpu.syscall"] {
        let e = r.experiment(id).unwrap();
        if !e.status.measured() {
            eprintln!("{id} is {}: {:?}", e.status.as_str(), e.reason);
            continue;
        }
        let own: Vec<&crate::results::Metric> = e
            .metrics
            .iter()
            .filter(|m| !m.name.ends_with("_efficiency"))
            .collect();
        assert!(!own.is_empty(), "{id}");
        for m in own {
            let twin = e
                .metric(&format!("{}_efficiency", m.name))
                .unwrap_or_else(|| panic!("{id}: no {}_efficiency", m.name));
            for (x, hz) in [(m, k[0].core_clock_hz), (twin, k[1].core_clock_hz)] {
                let (Some(c), Some(hz)) = (x.cycles.as_ref().and_then(|c| c.core), hz) else {
                    continue;
                };
                let want = x.summary.median * hz / 1e9;
                assert!((c - want).abs() <= 1e-9 * want.abs(), "{id} {}", x.name);
            }
        }
    }
    // Not per-kind: today's names only.
    let c2c = r.experiment("cpu.core-to-core").unwrap();
    assert!(c2c.metrics.iter().all(|m| !m.name.contains("efficiency")));
}

/// Issue 20 item 2, with real experiments: a default (two-run) quick run's findings
/// quote the pooled medians the table shows, and each metric keeps both runs' own.
#[test]
fn a_two_run_quick_runs_findings_quote_the_tables_figures() {
    let cfg = RunConfig {
        profile: Profile::Quick,
        only: vec!["cpu.syscall,cpu.call,cpu.thread-switch".into()],
        skip: vec![],
        cpu: None,
        options: RunOptions::default(),
        repeat: None,
    };
    let r = run(&cfg, &Silent).expect("the run completes");
    let quotes = |id: &str, metrics: &[&str]| {
        let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
        if e.status != Status::Ok {
            eprintln!(
                "{id} is {}: {:?} (no findings to check)",
                e.status.as_str(),
                e.reason
            );
            return;
        }
        let text: String = e.findings.iter().map(|f| f.text.clone()).collect();
        for name in metrics {
            let m = e.metric(name).unwrap_or_else(|| panic!("{id} {name}"));
            assert_eq!(m.runs.len(), 2, "{id} {name}: both runs' medians kept");
            let pooled = fmt_ns(m.summary.median);
            assert!(
                text.contains(&pooled),
                "{id}: {pooled} ({name}) not in {text}"
            );
        }
    };
    quotes("cpu.syscall", &["getppid", "clock_gettime_vdso"]);
    // per_argument is quoted only when it stands beyond noise (the call finding's gate).
    quotes("cpu.call", &["args_0"]);
    quotes(
        "cpu.thread-switch",
        &["switch", "pipe_round_trip_same_cpu", "pipe_cost"],
    );
}

/// Every metric ends with a prediction or a reason: one the experiment stated nothing for
/// gets the runner's note, a withheld one its own reason, and a prediction of a metric
/// that did not appear is said too.
#[test]
fn every_metric_gets_a_prediction_or_a_reason() {
    let mut r = ExperimentResult::new("x.y", "t", "");
    let mut o = crate::experiments::Outcome::default();
    for m in ["predicted", "withheld", "unstated"] {
        o.metric(m, "ns", "", vec![1.0, 2.0]);
    }
    r.metrics = o.metrics;
    let p = crate::results::Prediction::new(1.5, "f");
    attach_predictions(
        &mut r,
        vec![
            ("predicted".into(), p.clone()),
            (
                "withheld".into(),
                crate::results::Prediction::withheld("no input"),
            ),
            ("absent".into(), p),
        ],
    );
    assert!(r.metric("predicted").unwrap().prediction.is_some());
    for want in [
        "no prediction for withheld: no input",
        "no prediction for unstated: no model in osmeter covers it",
        "absent was predicted but not measured in this run",
    ] {
        assert!(r.notes.iter().any(|n| n == want), "{want}: {:?}", r.notes);
    }
    assert_eq!(r.notes.len(), 3, "{:?}", r.notes);
}
