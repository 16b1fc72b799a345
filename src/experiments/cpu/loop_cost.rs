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
            .machine("f_core", ghz * 1e9, "Hz", src),
        )]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = ctx.cpu_harness(1);
        let m = h.measure_raw(1.0, |n| repeat(n, || ()));
        out.measured("iteration", "one iteration of the empty measured loop", &m);
        out.pool(ctx);
        let med = out.median("iteration");
        out.check(Check::sanity(
            "plausible",
            med > 0.0 && med < 100.0,
            format!("{med:.3} ns per iteration"),
        ));
        Ok(out)
    }
}
