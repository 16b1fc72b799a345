//! Physical plausibility of the CPU figures and their relations. Never exact timings: this
//! runs on shared, noisy machines.

mod common;

use common::{median, smoke};

#[test]
fn basic_costs_are_plausible_and_ordered() {
    let r = smoke("cpu.timer,cpu.loop,cpu.call,cpu.syscall");
    let timer = median(&r, "cpu.timer", "read_pair");
    assert!(timer > 0.0 && timer < 1000.0, "timer pair {timer} ns");
    let lp = median(&r, "cpu.loop", "iteration");
    assert!(lp > 0.0 && lp < 100.0, "loop iteration {lp} ns");
    let sys = median(&r, "cpu.syscall", "getppid");
    assert!(
        sys > lp,
        "a system call ({sys} ns) must cost more than a loop iteration ({lp} ns)"
    );
    let vdso = median(&r, "cpu.syscall", "clock_gettime_vdso");
    assert!(vdso < sys * 2.0, "vDSO {vdso} ns vs syscall {sys} ns");
    // Call cost does not fall with more arguments (within noise). Both are a few cycles,
    // timed one after the other: a host that slowed the vCPU for the one and not the other
    // moves them by tens of percent, so the relation is taken again, up to three runs in
    // all, and said; a call that really got cheaper with arguments fails all three.
    let (mut c0, mut c7) = (
        median(&r, "cpu.call", "args_0"),
        median(&r, "cpu.call", "args_7"),
    );
    for again in 2..=3 {
        if c0 > 0.0 && c7 >= 0.7 * c0 {
            break;
        }
        eprintln!("args_0 {c0} ns, args_7 {c7} ns: taking cpu.call again ({again} of 3)");
        let r = smoke("cpu.call");
        (c0, c7) = (
            median(&r, "cpu.call", "args_0"),
            median(&r, "cpu.call", "args_7"),
        );
    }
    assert!(c0 > 0.0 && c7 >= 0.7 * c0, "args_0 {c0} ns, args_7 {c7} ns");
    assert!(sys > c0, "a system call costs more than a procedure call");
    // Every summary is internally consistent.
    for e in &r.experiments {
        for m in &e.metrics {
            let s = &m.summary;
            assert!(
                s.n > 0 && s.min <= s.median && s.median <= s.max,
                "{} {}: {s:?}",
                e.id,
                m.name
            );
            assert!(
                s.ci95[0] <= s.median && s.median <= s.ci95[1],
                "{} {}: {s:?}",
                e.id,
                m.name
            );
            assert_eq!(s.n, m.raw.len());
        }
    }
}

#[test]
fn machine_and_clock_are_described() {
    let r = smoke("cpu.loop");
    let clock = r.machine.clock.as_ref().expect("clock described");
    assert!(clock.frequency_hz > 1e6);
    let core = r.machine.cpu.core_clock_hz;
    if let Some(hz) = core {
        assert!(hz > 1e8 && hz < 1e10, "core clock {hz}");
    }
    let stats = r.config.statistics.as_ref().expect("statistics recorded");
    assert!(stats.outlier_rule.as_deref().unwrap().contains("MAD"));
}
