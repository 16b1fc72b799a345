//! cpu.timer: what one fenced timestamp pair costs.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::results::{Check, Prediction};
use std::time::Duration;

pub struct Timer;

const META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: "cpu.timer",
    title: "Timestamp read cost",
    description: "cost of one serialised timestamp read pair (inside the region, and in wall time)",
    method: "Many empty regions between the start sequence (CPUID; RDTSC on x86-64) and the stop sequence (RDTSCP; CPUID); \
        the ticks each empty region reports are what every measurement carries and has subtracted. Separately, the \
        wall-clock cost of a whole start+stop pair including the serialising instructions, timed over a calibrated \
        number of back-to-back pairs.",
    needs: crate::experiments::Needs::NONE,
};

impl Experiment for Timer {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &META
    }
    fn budget(&self, p: Profile) -> Duration {
        p.scale(Duration::from_millis(600))
    }
    /// None: the only figures available before this runs are the clock's own start-up
    /// measurements of the same regions, and a prediction equal to the measurement by
    /// construction says nothing. Serialising instructions (CPUID, RDTSCP) cost what the
    /// core or the hypervisor makes them cost; no earlier primitive predicts that.
    fn predict(&self, _ctx: &Context) -> Vec<(String, Prediction)> {
        vec![]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        out.notes.push(
            "no independent prediction: before this experiment only the clock's start-up measurement of the same \
             regions exists, which would match by construction"
                .into(),
        );
        let c = ctx.clock;
        // Empty regions, in batches: each batch's median is one trial.
        let n_trials = ctx.profile.harness().trials;
        let deadline = crate::clock::Deadline::after(c, ctx.budget / 2);
        let mut trials = Vec::new();
        let mut all_positive = true;
        for _ in 0..n_trials {
            let mut v: Vec<u64> = (0..1000)
                .map(|_| {
                    let a = c.start();
                    let b = c.stop();
                    b.wrapping_sub(a)
                })
                .collect();
            v.sort_unstable();
            all_positive &= v[0] > 0 || c.name() == "monotonic_raw";
            trials.push(c.ticks_to_ns(v[v.len() / 2] as f64));
            if deadline.passed() {
                break;
            }
        }
        out.metric(
            "read_pair",
            "ns",
            "ticks inside an empty start/stop region (median of 1000 per trial)",
            trials,
        );
        out.check(Check::sanity(
            "counter advances",
            all_positive,
            "every batch had a non-zero minimum region",
        ));

        let h = ctx.cpu_harness(2);
        let m = h.measure_raw(1.0, |n| {
            for _ in 0..n {
                // Kept in registers: a store per read would add store-forwarding effects.
                crate::opaque::keep(c.start());
                crate::opaque::keep(c.stop());
            }
        });
        out.measured(
            "fenced_pair_wall",
            "wall time of one whole start+stop pair, serialising instructions included",
            &m,
        );
        let region = out.metrics[0].summary.median;
        let wall = out.metrics[1].summary.median;
        if wall > 5.0 * region {
            out.finding(
                format!(
                    "A fenced timestamp pair takes {} of wall time but only {} of it lands inside a measurement: \
                     the serialising instructions are expensive here (CPUID traps to the hypervisor in VMs), so \
                     trials must be long, as the harness ensures.",
                    crate::units::fmt_ns(wall),
                    crate::units::fmt_ns(region)
                ),
                &["read_pair", "fenced_pair_wall"],
            );
        }
        Ok(out)
    }
}
