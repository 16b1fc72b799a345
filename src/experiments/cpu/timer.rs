//! cpu.timer: what one fenced timestamp pair costs.

use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome};
use crate::results::{Check, Prediction};

pub struct Timer;

const METHOD: &str = match (cfg!(target_arch = "x86_64"), cfg!(target_arch = "aarch64")) {
    (true, _) => crate::method!("cpu.timer", 1),
    (_, true) => crate::method!("cpu.timer", 2),
    _ => crate::method!("cpu.timer", 3),
};

/// Why a pair costs more wall time than lands inside a region (a hypervisor intercepts
/// CPUID: Intel SDM vol. 3C 26.1.2; AMD APM vol. 2 15.9).
fn expensive(ctx: &Context) -> &'static str {
    match (cfg!(target_arch = "x86_64"), cfg!(target_arch = "aarch64")) {
        (true, _) if ctx.machine.virtualization.is_vm => {
            "the serialising instructions are expensive here (a virtual machine: the hypervisor intercepts CPUID)"
        }
        (true, _) => "the serialising instructions are expensive here",
        (_, true) => "the barriers (ISB) and counter reads of a pair cost far more than the region between them",
        _ => "the clock reads cost more than the interval they bracket",
    }
}

const SPEC: Spec = Spec {
    id: "cpu.timer",
    title: "Timestamp read cost",
    description: "cost of one serialised timestamp read pair (inside the region, and in wall time)",
    method: METHOD,
    budget: Some(PerProfile::new(ms(120), ms(400), ms(3000), ms(9000))),
    // Serialised counter reads: the core's clock, not its issue rate; nothing subtracted.
    subtracts_loop: false,
    ..Spec::CORE_LOOP
};

impl Experiment for Timer {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = crate::experiments::predict::Predictions::new(ctx);
        p.withhold(
            &["read_pair", "fenced_pair_wall"],
            "no independent prediction: before this experiment only the clock's start-up \
             measurement of the same regions exists, which would match by construction",
        );
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let c = ctx.clock;
        // On a coarse counter the mean of the reads is the figure (clock::region_ticks).
        let step = crate::clock::coarse_step(c);
        read_pair(ctx, step, &mut out);
        let m = ctx.cpu_harness(2).measure_raw(1.0, |n| {
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
        out.pool(ctx);
        let (region, wall) = (out.median("read_pair"), out.median("fenced_pair_wall"));
        // NaN (no read_pair) compares false.
        if wall > 5.0 * region {
            let (w, r) = (crate::units::fmt_ns(wall), crate::units::fmt_ns(region));
            out.finding(
                format!(
                    "A fenced timestamp pair takes {w} of wall time but only {r} of it lands inside a \
                     measurement: {}, so trials must be long, as the harness ensures.",
                    expensive(ctx)
                ),
                &["read_pair", "fenced_pair_wall"],
            );
        }
        Ok(out)
    }
}

/// `read_pair` from batches of 1000 empty regions within half the budget.
fn read_pair(ctx: &Context, step: Option<f64>, out: &mut Outcome) {
    let (c, coarse) = (ctx.clock, step.is_some());
    let deadline = crate::clock::Deadline::after(c, ctx.budget / 2);
    let (mut trials, mut all_positive, mut advanced) = (Vec::new(), true, true);
    for _ in 0..ctx.profile.harness().trials {
        let first = c.now();
        let mut v: Vec<u64> = (0..1000)
            .map(|_| {
                let a = c.start();
                let b = c.stop();
                b.wrapping_sub(a)
            })
            .collect();
        advanced &= c.now() > first;
        let ticks = crate::clock::region_ticks(&mut v, step);
        all_positive &= v[0] > 0 || c.name() == "monotonic_raw";
        trials.push(c.ticks_to_ns(ticks));
        if deadline.passed() {
            break;
        }
    }
    let n = trials.len();
    if coarse && trials.iter().all(|&t| t == 0.0) {
        out.notes.push(format!(
            "read_pair: below the counter's resolution ({}): no empty region of {n} batches of 1000 \
             spanned a tick, so the counter cannot say what it costs",
            crate::clock::tick_text(c),
        ));
    } else {
        let how = if coarse {
            format!(
                "ticks inside an empty start/stop region (mean of 1000 per trial: the counter is coarse, {}, \
                 and the mean of quantised reads is unbiased)",
                crate::clock::tick_text(c)
            )
        } else {
            "ticks inside an empty start/stop region (median of 1000 per trial)".to_string()
        };
        out.metric("read_pair", "ns", &how, trials);
    }
    out.check(match coarse {
        true => Check::sanity("counter advances", advanced, "the counter moved across every batch of 1000 regions (a coarse counter's single region may read 0)"),
        false => Check::sanity("counter advances", all_positive, "every batch had a non-zero minimum region"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, CoarseClock};
    use crate::experiments::Profile;
    use std::time::Duration;

    /// A 24 MHz counter (Apple silicon's) built on CLOCK_MONOTONIC_RAW that also keeps
    /// the fine reading of every read, so a test can time the same regions both ways.
    struct Both {
        coarse: CoarseClock,
        reads: std::sync::Mutex<Vec<(u8, u64)>>,
    }

    impl Both {
        fn read(&self, kind: u8) -> u64 {
            let t = crate::clock::monotonic_raw_ns();
            self.reads.lock().unwrap().push((kind, t));
            self.coarse.ticks_at(t)
        }
    }

    impl Clock for Both {
        fn start(&self) -> u64 {
            self.read(b'S')
        }
        fn stop(&self) -> u64 {
            self.read(b'T')
        }
        fn now(&self) -> u64 {
            self.read(b'N')
        }
        fn ticks_per_ns(&self) -> f64 {
            self.coarse.ticks_per_ns()
        }
        fn overhead_ticks(&self) -> f64 {
            self.coarse.overhead_ticks()
        }
        fn name(&self) -> &'static str {
            "coarse"
        }
    }

    /// cpu.timer through a fake 24 MHz counter gives the read pair the fine clock gives
    /// for the very same regions: each read is stamped by both clocks at once, so the
    /// host's swings cancel and only the estimator is left. A region reads 0 or 1 tick;
    /// the mean of 1000 such reads differs from the fine mean by the rounding of its two
    /// ends, about 2% of a 30 ns pair per batch, less in the median of the batches. A
    /// median estimator would read a whole tick or 0 (+-40-100%); a figure never 0.
    #[test]
    fn a_24_mhz_counter_gives_the_true_read_pair() {
        let clock = Both {
            coarse: CoarseClock::new(24e6),
            reads: std::sync::Mutex::new(Vec::with_capacity(1 << 22)),
        };
        let machine = crate::machine::Machine::default();
        let options = crate::experiments::RunOptions::default();
        let scratch = std::sync::OnceLock::new();
        let ctx = Context {
            profile: Profile::Smoke,
            machine: &machine,
            clock: &clock,
            cpu: 0,
            budget: Duration::from_millis(300),
            earlier: &Vec::<crate::results::ExperimentResult>::new(),
            options: &options,
            loop_ticks: 0.0,
            progress: &|_| {},
            scratch_cell: &scratch,
            repetition: crate::experiments::Repetition::SINGLE,
        };
        let out = Timer.run(&ctx).unwrap();
        let reads = std::mem::take(&mut *clock.reads.lock().unwrap());
        // The read_pair batches: a now, 1000 start/stop pairs, a now. Each batch's truth
        // is the fine mean over the regions the estimator kept (coarse reads within
        // 2 ticks of the median), as clock::region_ticks keeps them.
        let mut truths = Vec::new();
        let mut i = 0;
        while i + 2001 < reads.len() {
            let batch = &reads[i + 1..i + 2001];
            let is_batch = reads[i].0 == b'N'
                && reads[i + 2001].0 == b'N'
                && batch.chunks(2).all(|p| p[0].0 == b'S' && p[1].0 == b'T');
            if !is_batch {
                i += 1;
                continue;
            }
            let tick = |t: u64| clock.coarse.ticks_at(t);
            let mut coarse: Vec<u64> = batch
                .chunks(2)
                .map(|p| tick(p[1].1) - tick(p[0].1))
                .collect();
            coarse.sort_unstable();
            let limit = coarse[coarse.len() / 2] + 2;
            let fine: Vec<f64> = batch
                .chunks(2)
                .filter(|p| tick(p[1].1) - tick(p[0].1) <= limit)
                .map(|p| (p[1].1 - p[0].1) as f64)
                .collect();
            truths.push(fine.iter().sum::<f64>() / fine.len() as f64);
            i += 2001;
        }
        assert!(
            !truths.is_empty(),
            "no batch of 1000 read pairs in the clock's log"
        );
        let truth = crate::stats::median(&truths);
        match out.metrics.iter().find(|m| m.name == "read_pair") {
            Some(m) => {
                assert_eq!(m.raw.len(), truths.len(), "one trial per batch");
                let got = m.summary.median;
                assert!(
                    got > 0.0 && (got / truth - 1.0).abs() < 0.07,
                    "read_pair {got} ns on the 24 MHz counter against {truth} ns on the fine \
                     clock for the same regions (one tick = {} ns)",
                    clock.ticks_to_ns(1.0)
                );
                assert!(m.description.contains("mean"), "{}", m.description);
            }
            None => assert!(
                truth < 41.7 / 50.0
                    && out
                        .notes
                        .iter()
                        .any(|n| n.contains("below the counter's resolution")
                            && n.contains("one tick = 41.7 ns")),
                "{:?}",
                out.notes
            ),
        }
        assert!(out.checks.iter().all(|c| c.passed), "{:?}", out.checks);
        assert!(out
            .findings
            .iter()
            .all(|f| !f.text.contains("CPUID") || cfg!(target_arch = "x86_64")));
    }
}
