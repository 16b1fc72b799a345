//! cpu.loop: the cost of one iteration of the harness's measured loop.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::opaque::repeat;
use crate::results::{Check, Prediction};
use std::time::Duration;

pub struct LoopCost;

const META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: "cpu.loop",
    title: "Loop iteration cost",
    description: "cost of one iteration of a loop whose body the compiler cannot remove",
    method: "The harness's canonical loop (`repeat`: register-only; the counter passes through an empty asm statement \
        each iteration, so the loop cannot be removed, unrolled or collapsed, and nothing is stored) with an empty body, calibrated to the profile's trial length; per-iteration \
        time is trial time less clock overhead, divided by iterations. This is the loop overhead subtracted from \
        every other per-operation figure.",
    needs: crate::experiments::Needs::NONE,
    // The sentinel's issue kernel is this very loop.
    bottleneck: crate::results::Bottleneck::Issue,
};

impl Experiment for LoopCost {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &META
    }
    fn budget(&self, p: Profile) -> Duration {
        p.scale(Duration::from_millis(500))
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let (ghz, src) = super::core_ghz(ctx);
        vec![(
            "iteration".into(),
            Prediction::new(
                1.0 / ghz,
                "1 cycle / f_core (increment, compare and branch issue together)",
            )
            .input("f_core", ghz * 1e9, "Hz", src),
        )]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = ctx.cpu_harness(1);
        let m = h.measure_raw(1.0, |n| repeat(n, || ()));
        out.measured("iteration", "one iteration of the empty measured loop", &m);
        let med = m.median_ns();
        out.check(Check::sanity(
            "plausible",
            med > 0.0 && med < 100.0,
            format!("{med:.3} ns per iteration"),
        ));
        if let Some(hz) = ctx.machine.cpu.core_clock_hz {
            out.check(iteration_premise(med, hz / 1e9));
        }
        Ok(out)
    }
}

/// The counter's decrement depends on the previous one, so an iteration cannot take less
/// than one core cycle. Less means the loop was unrolled or collapsed, or the core clock
/// estimate is wrong; either way the figure is not the loop it claims to be.
fn iteration_premise(iter_ns: f64, core_ghz: f64) -> Check {
    let cycles = iter_ns * core_ghz;
    Check::premise(
        "at least one core cycle per iteration",
        // 0.8: timing noise and a core clock read slightly high.
        cycles >= 0.8,
        format!("{cycles:.2} core cycles per iteration at {core_ghz:.2} GHz"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_premise_fails_below_one_cycle() {
        // 0.31 ns at 3.2 GHz: one cycle.
        assert!(iteration_premise(0.31, 3.2).passed);
        // An unrolled loop (a quarter of a cycle per counted iteration).
        assert!(!iteration_premise(0.08, 3.2).passed);
        // A core clock read 4x too low.
        assert!(!iteration_premise(0.31, 0.8).passed);
    }
}
