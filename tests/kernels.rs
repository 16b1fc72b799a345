//! Register-only CPU kernels, the core clock, predictions' inputs and net.connect's
//! open_close: relations and plausibility, never exact timings.

mod common;

use osmeter::results::Status;

/// Every earlier metric a prediction reads must be one some experiment emits: a prediction
/// naming a metric nobody produces silently falls back to a model forever.
/// Ran and kept its figures: ok, or unverified (a premise this host cannot check, as a
/// VM's uncached reads).
fn measured(e: &osmeter::results::ExperimentResult) -> bool {
    matches!(e.status, Status::Ok | Status::Unverified)
}

#[test]
fn predictions_read_metrics_that_exist() {
    let machine = osmeter::machine::Machine::gather();
    let clock = osmeter::clock::MockClock::new(0);
    let options = osmeter::experiments::RunOptions::default();
    let (reads, _) = osmeter::experiments::predict_all(&machine, &clock, &options, &[false, true]);
    assert!(
        reads.contains(&("cpu.syscall".to_string(), "getppid".to_string())),
        "the probe sees predictions' lookups: {reads:?}"
    );
    let ids: std::collections::BTreeSet<&str> = reads.iter().map(|(e, _)| e.as_str()).collect();
    let only = ids.iter().copied().collect::<Vec<_>>().join(",");
    let r = common::smoke(&only);
    // Some metrics exist only in larger profiles (mem.latency's dram_thp): look again in quick.
    let missing: Vec<&(String, String)> = reads
        .iter()
        .filter(|(id, m)| {
            r.experiment(id)
                .is_some_and(|e| measured(e) && e.metric(m).is_none())
        })
        .collect();
    let quick = (!missing.is_empty()).then(|| {
        let ids: std::collections::BTreeSet<&str> =
            missing.iter().map(|(e, _)| e.as_str()).collect();
        quick_run(&ids.into_iter().collect::<Vec<_>>().join(","))
    });
    for (id, metric) in &reads {
        let e = r
            .experiment(id)
            .unwrap_or_else(|| panic!("a prediction reads {id}/{metric}: no experiment {id}"));
        if !measured(e) {
            common::skip(
                "predictions_read_metrics_that_exist",
                &format!(
                    "{id} did not run here ({:?}): cannot check {id}/{metric}",
                    e.reason
                ),
            );
            continue;
        }
        if e.metric(metric).is_some() {
            continue;
        }
        let q = quick
            .as_ref()
            .and_then(|q| q.experiment(id))
            .unwrap_or_else(|| panic!("{id} missing from the quick run"));
        if q.metric(metric).is_some() {
            continue;
        }
        // A metric that depends on a kernel feature or a permission (net.rtt's ICMP echo)
        // says so in the experiment's notes.
        let why = |n: &String| n.contains("not available") || n.contains(": skipped: ");
        if q.notes.iter().any(why) {
            common::skip(
                "predictions_read_metrics_that_exist",
                &format!("{id}/{metric} not measurable here: {:?}", q.notes),
            );
            continue;
        }
        panic!(
            "a prediction reads {id}/{metric}, which {id} does not emit (it emits {:?})",
            q.metrics.iter().map(|m| &m.name).collect::<Vec<_>>()
        );
    }
}

fn quick_run(only: &str) -> osmeter::results::RunResults {
    common::run_profile(osmeter::experiments::Profile::Quick, only)
}

/// The register-only loop takes about one core cycle per iteration (a dependent decrement),
/// and a call costs more than an iteration.
#[test]
fn loop_and_call_in_core_cycles() {
    let r = common::smoke("cpu.loop,cpu.call");
    let it = common::median(&r, "cpu.loop", "iteration");
    let call = common::median(&r, "cpu.call", "args_0");
    let Some(hz) = r.machine.cpu.core_clock_hz else {
        common::skip(
            "loop_and_call_in_core_cycles",
            "no core clock estimate on this architecture",
        );
        return;
    };
    let cycles = it * hz / 1e9;
    // Loose upper bound: a shared machine; the lower bound is physics.
    assert!(
        (0.8..20.0).contains(&cycles),
        "{cycles} cycles per iteration"
    );
    assert!(call > 0.0 && call < 100.0, "call {call} ns");
    // Every check passes but the issue rate, which a busy core (other tests run beside
    // this one) fails honestly: then its text names the condition.
    let e = r.experiment("cpu.loop").unwrap();
    for c in &e.checks {
        assert!(
            c.passed
                || (c.name == "issued at the core's rate"
                    && c.detail.contains("core cycles per iteration where")),
            "the loop's checks: {:?}",
            e.checks
        );
    }
}

/// The core clock is plausible and, where cpufreq knows the maximum, not above it.
#[test]
fn core_clock_within_the_maximum() {
    let Some(c) = osmeter::clock::measure_core_clock() else {
        common::skip(
            "core_clock_within_the_maximum",
            "no core clock chain on this architecture",
        );
        return;
    };
    assert!(c.hz > 2e8 && c.hz < 8e9, "{c:?}");
    let m = osmeter::machine::Machine::gather();
    match m.cpu.max_mhz {
        // 10%: one timed window may be short a few interrupts' worth of time, never more.
        Some(max) => assert!(c.hz < max * 1e6 * 1.10, "{c:?} above cpufreq max {max} MHz"),
        // A machine fact, not a missing test prerequisite: the range check above still ran.
        None => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "core_clock_within_the_maximum: no cpufreq cpuinfo_max_freq (usual in VMs): only the range was checked"
            );
        }
    }
}

/// open_close spans socket() + connect() + close(), so it costs at least what connect alone
/// costs (medians, with slack for noise).
#[test]
fn connect_open_close_spans_connect() {
    let r = common::smoke("net.connect");
    let e = r.experiment("net.connect").expect("net.connect in the run");
    if e.status == Status::Skipped {
        common::skip(
            "connect_open_close_spans_connect",
            &format!("{:?}", e.reason),
        );
        return;
    }
    let connect = common::median(&r, "net.connect", "connect");
    let oc = common::median(&r, "net.connect", "open_close");
    assert!(
        oc > 0.8 * connect,
        "open_close {oc} ns, connect {connect} ns"
    );
    assert!(
        oc < 100.0 * connect,
        "open_close {oc} ns, connect {connect} ns"
    );
    let m = e.metric("open_close").unwrap();
    assert!(m.summary.n >= 16, "{} open_close samples", m.summary.n);
}
