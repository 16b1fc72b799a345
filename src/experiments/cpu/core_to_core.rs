//! cpu.core-to-core: how long a cache line takes to travel between two CPUs, for pairs
//! of allowed CPUs (as nviennot's core-to-core-latency and Intel MLC's `--c2c_latency`).

use crate::experiments::kit::place::Place;
use crate::experiments::kit::team::Team;
use crate::experiments::kit::{Pages, Region};
use crate::experiments::predict::Predictions;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::machine::{PartnerClass, Topology};
use crate::results::Check;
use crate::units::fmt_ns;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Duration;

pub(crate) struct CoreToCore;

/// Round trips per trial: tens of microseconds, short against a time slice.
const ROUND_TRIPS: u64 = 500;
/// Trials per pair at most, and at least (past the pair's share of the budget).
const MAX_TRIALS: usize = 201;
const MIN_TRIALS: usize = 5;
const QUICK_PER_CLASS: usize = 3;
const ALL_PAIRS_UP_TO: usize = 64;
/// Pairs per class sampled, and the allowed CPUs up to which every pair is measured.
const SAMPLING: PerProfile<(usize, usize)> = PerProfile::new(
    (1, 0),
    (QUICK_PER_CLASS, 0),
    (ALL_PAIRS_UP_TO, ALL_PAIRS_UP_TO),
    (2 * ALL_PAIRS_UP_TO, 2 * ALL_PAIRS_UP_TO),
);

const SPEC: Spec = Spec {
    id: "cpu.core-to-core",
    title: "Core-to-core cache-line latency",
    description: "two pinned threads bounce one cache line with compare-and-swap, for pairs of allowed CPUs: one-way latency matrix and per topology class (like nviennot's core-to-core-latency)",
    method: crate::method!("cpu.core-to-core"),
    needs: Needs {
        min_cpus: 2,
        ..Needs::NONE
    },
    // A line moving between two CPUs: no sentinel kernel on one CPU shares it.
    bottleneck: crate::results::Bottleneck::None,
    budget: Some(PerProfile::new(ms(400), ms(800), ms(20_000), ms(60_000))),
    ..Spec::MEMORY
};

impl Experiment for CoreToCore {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, crate::results::Prediction)> {
        // Every class metric the run will name, as `report` names them from the same plan.
        let plan = plan(&ctx.machine.topology, &ctx.allowed_cpus(), ctx.profile);
        let names = metric_names(&plan.pairs.iter().map(|x| x.2).collect::<Vec<_>>());
        let names: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
        let mut p = Predictions::new(ctx);
        p.withhold(
            &names,
            "no experiment before it moves a cache line between cores, and the parts table \
             names no published core-to-core latency for any part",
        );
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let plan = plan(&ctx.machine.topology, &ctx.allowed_cpus(), ctx.profile);
        if plan.pairs.is_empty() {
            return Ok(Outcome::skipped(
                "only one CPU is allowed: there is no pair to bounce a line between (allow at least 2 CPUs)",
            ));
        }
        let mut out = Outcome::default();
        let share = ctx.budget.mul_f64(0.8) / plan.pairs.len() as u32;
        let (mut results, mut failed) = (Vec::new(), None);
        for &(a, b, class) in &plan.pairs {
            let r = bounce(ctx, a, b, share).map_err(|e| format!("{e:#}"));
            let said = r
                .as_ref()
                .map_or_else(String::clone, |r| fmt_ns(r.one_way()));
            (ctx.progress)(&format!("CPU {a} <-> CPU {b}: {said}"));
            match r {
                Ok(r) => results.push((a, b, class, r)),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        out.notes
            .extend(failed.map(|e| format!("a pair could not run: {e}")));
        let pin = crate::platform::pinning_premise_failure(&crate::platform::pin_support());
        out.check(placement_check(pin, &results));
        let mut rows: std::collections::BTreeMap<usize, Vec<[f64; 2]>> = Default::default();
        for (a, b, _, r) in &results {
            rows.entry(*a).or_default().push([*b as f64, r.one_way()]);
        }
        for (a, points) in rows {
            out.plot(&format!("one_way_from_cpu{a}"), "cpu", "ns", points);
        }
        let classes = class_metrics(&results, &mut out);
        let (n, total) = (results.len(), plan.total);
        out.notes.push(match plan.per_class {
            Some(k) => format!(
                "{n} of {total} pairs measured: up to {k} per topology class, spread over the class"
            ),
            None => format!("all {n} pairs measured"),
        });
        out.pool(ctx);
        findings(&classes, &mut out);
        Ok(out)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PairPlan {
    pub(crate) pairs: Vec<(usize, usize, Option<PartnerClass>)>,
    pub(crate) total: usize,
    pub(crate) per_class: Option<usize>,
}

/// Every pair, or `per_class` of each class spread evenly over it (first, last, between).
pub(crate) fn plan(t: &Topology, allowed: &[usize], profile: Profile) -> PairPlan {
    let all = t.pairs(allowed);
    let (total, n) = (all.len(), allowed.iter().collect::<BTreeSet<_>>().len());
    let (k, all_up_to) = SAMPLING.get(profile);
    let pairs: Vec<_> = match n <= all_up_to {
        true => all,
        false => (all.chunk_by(|x, y| x.2 == y.2))
            .flat_map(|class| {
                let (len, take) = (class.len(), k.min(class.len()));
                (0..take).map(move |s| class[s * (len - 1) / (take - 1).max(1)])
            })
            .collect(),
    };
    let per_class = (pairs.len() < total).then_some(k);
    PairPlan {
        pairs,
        total,
        per_class,
    }
}

/// Metric names per class: the nearest on another core (else the only one) keeps `one_way`.
pub(crate) fn metric_names(
    classes: &[Option<PartnerClass>],
) -> Vec<(Option<PartnerClass>, String)> {
    let present: Vec<Option<PartnerClass>> = std::iter::once(None)
        .chain(PartnerClass::ALL.iter().map(|&c| Some(c)))
        .filter(|k| classes.contains(k))
        .collect();
    let other_core = |k: &Option<PartnerClass>| k.is_some_and(|k| k != PartnerClass::SmtSibling);
    let named = present.iter().position(other_core).unwrap_or(0);
    let names = present.iter().enumerate().map(|(i, &k)| match i == named {
        true => (k, "one_way".to_string()),
        false => (
            k,
            format!("one_way_{}", k.map_or("unclassed", |c| c.name())),
        ),
    });
    names.collect()
}

#[derive(Debug, Clone, Default)]
struct Bounce {
    trials: Vec<f64>,
    places: [Place; 2],
}

impl Bounce {
    fn one_way(&self) -> f64 {
        crate::stats::median(&self.trials)
    }
}

/// The cache line, alone on its 128 bytes (adjacent-line prefetch works in pairs).
#[repr(align(128))]
struct PingLine(AtomicU64);

/// Bounces a line between `a` (first touch, timing) and `b` for about `share`.
fn bounce(ctx: &Context, a: usize, b: usize, share: Duration) -> anyhow::Result<Bounce> {
    let clock = ctx.clock;
    let on_a = || {
        let mut region = Region::new(crate::pagecache::page_size(), Pages::Base)?;
        // First touch on `a`: the page (and the line) start here.
        region.as_mut_slice()[0] = 0;
        // SAFETY: the region is page-aligned, larger than a PingLine, and outlives the
        // team, whose threads are joined before `Team::run` returns.
        let line = unsafe { &*(region.as_ptr() as *const PingLine) };
        line.0.store(0, Release);
        // Member t turns 2k + t into 2k + t + 1; the timer (0) then waits for the last answer.
        let member = |t: usize| {
            let mut v = t as u64;
            move |n: u64| {
                for _ in 0..n {
                    while line.0.compare_exchange(v, v + 1, AcqRel, Relaxed).is_err() {
                        std::hint::spin_loop();
                    }
                    v += 2;
                }
                while t == 0 && line.0.load(Acquire) != v {
                    std::hint::spin_loop();
                }
            }
        };
        let (trials, placed) = Team::run(clock, &[a, b], member, |step| {
            step(ROUND_TRIPS / 5); // warm-up: both spinning, line bouncing
            let deadline = crate::clock::Deadline::after(clock, share);
            let mut trials = Vec::new();
            while trials.len() < MAX_TRIALS && (trials.len() < MIN_TRIALS || !deadline.passed()) {
                let ticks = step(ROUND_TRIPS).slowest();
                trials.push(clock.ticks_to_ns(ticks as f64) / (2 * ROUND_TRIPS) as f64);
            }
            trials
        });
        let side = |i: usize| placed.places.get(i).copied().unwrap_or_default();
        Ok(Bounce {
            trials,
            places: [side(0), side(1)],
        })
    };
    Team::once(clock, a, on_a).0
}

/// The premise: pinning is hard and every look found both threads on their CPUs.
fn placement_check(pin: Option<String>, ok: &[PairResult]) -> Check {
    let moved: Vec<String> = ok
        .iter()
        .filter(|(.., r)| r.places.iter().any(|p| p.off() > 0))
        .map(|(a, b, _, r)| {
            let [(oa, la), (ob, lb)] = r.places.map(|p| (p.off(), p.looks));
            format!("{a}<->{b}: {oa} of {la} looks off CPU {a}, {ob} of {lb} off CPU {b}")
        })
        .collect();
    let looks: u64 = ok.iter().flat_map(|r| r.3.places).map(|p| p.looks).sum();
    let detail = match &pin {
        Some(w) => w.clone(),
        None if moved.is_empty() => format!(
            "{} pairs, {looks} getcpu looks, all on the pinned CPUs",
            ok.len()
        ),
        None => moved.join("; "),
    };
    Check::premise(
        "both threads on their CPUs for the whole measurement",
        pin.is_none() && moved.is_empty() && !ok.is_empty(),
        detail,
    )
}

type PairResult = (usize, usize, Option<PartnerClass>, Bounce);

/// One metric per topology class, trials of its pairs pooled: (class, metric name).
fn class_metrics(ok: &[PairResult], out: &mut Outcome) -> Vec<(Option<PartnerClass>, String)> {
    let names = metric_names(&ok.iter().map(|r| r.2).collect::<Vec<_>>());
    for (class, name) in &names {
        let members: Vec<_> = ok.iter().filter(|r| r.2 == *class).collect();
        let trials = members.iter().flat_map(|r| r.3.trials.iter().copied());
        let mut pairs: Vec<String> = members.iter().map(|r| format!("{}-{}", r.0, r.1)).collect();
        if pairs.len() > 6 {
            pairs.truncate(6);
            pairs.push("...".into());
        }
        let medians = members.iter().map(|r| r.3.one_way());
        let lo = fmt_ns(medians.clone().fold(f64::INFINITY, f64::min));
        let hi = fmt_ns(medians.fold(f64::NEG_INFINITY, f64::max));
        let description = format!(
            "one-way cache-line latency, {} ({} pair(s): {}; pair medians {lo} to {hi}), trials pooled",
            class.map_or("unclassed (topology unknown)", |c| c.name()),
            members.len(),
            pairs.join(", "),
        );
        out.metric(name, "ns", &description, trials.collect());
    }
    names
}

/// Nearest against farthest class ("x times" only with the intervals apart), or the only one.
fn findings(classes: &[(Option<PartnerClass>, String)], out: &mut Outcome) {
    let by_class: Vec<_> = classes
        .iter()
        .map(|(c, n)| (*c, out.median(n), n))
        .collect();
    let class = |c: Option<PartnerClass>, none| c.map_or(none, |c| c.name());
    let near = by_class.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let far = by_class.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let (Some(near), Some(far)) = (near, far) else {
        return;
    };
    if by_class.len() < 2 {
        let text = format!(
            "A cache line crosses {} in {} one way (half a compare-and-swap round trip).",
            class(near.0, "between the CPUs"),
            fmt_ns(near.1)
        );
        return out.finding(text, &[near.2.as_str()]);
    }
    let (n, f) = (near.2.as_str(), far.2.as_str());
    let apart = out.separation(f, n) == crate::analysis::Separation::Above;
    let text = format!(
        "A cache line crosses {} in {} one way and {} in {} ({}).",
        class(near.0, "unclassed pairs"),
        fmt_ns(near.1),
        class(far.0, "unclassed pairs"),
        fmt_ns(far.1),
        match apart {
            true => format!("{:.1}x, beyond both 95% intervals", far.1 / near.1),
            false => "within noise of each other: their 95% intervals overlap".into(),
        }
    );
    match apart {
        true => out.finding_salient(text, &[n, f], far.1 / near.1),
        false => out.finding(text, &[n, f]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::facts::FactRoot;
    use crate::machine::Machine;
    use std::path::Path;

    fn topology(name: &str) -> Topology {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines")
            .join(name);
        Machine::gather_from(&FactRoot::recorded(dir)).topology
    }

    fn classes(p: &PairPlan) -> Vec<(Option<&'static str>, usize)> {
        let mut v: Vec<(Option<&'static str>, usize)> = Vec::new();
        for &(_, _, c) in &p.pairs {
            let c = c.map(PartnerClass::name);
            match v.iter_mut().find(|x| x.0 == c) {
                Some(x) => x.1 += 1,
                None => v.push((c, 1)),
            }
        }
        v
    }

    #[test]
    fn quick_samples_three_pairs_per_class_on_two_sockets() {
        let t = topology("xeon-two-socket");
        let n = t.allowed.len();
        let p = plan(&t, &t.allowed, Profile::Quick);
        assert_eq!(p.total, n * (n - 1) / 2);
        assert_eq!(p.per_class, Some(QUICK_PER_CLASS));
        assert_eq!(
            classes(&p),
            vec![
                (Some("smt_sibling"), 3),
                (Some("same_llc"), 3),
                (Some("other_package"), 3)
            ]
        );
        for &(a, b, c) in &p.pairs {
            assert!(a < b);
            assert_eq!(t.pair_class(a, b), c);
        }
        // Spread over the class: the first and last pair of each class are in.
        let all = t.pairs(&t.allowed);
        let other: Vec<_> = all
            .iter()
            .filter(|x| x.2 == Some(PartnerClass::OtherPackage))
            .collect();
        assert!(p.pairs.contains(other[0]) && p.pairs.contains(other.last().unwrap()));
        // Standard: every pair (this machine has no more than the bound).
        assert!(n <= ALL_PAIRS_UP_TO);
        let s = plan(&t, &t.allowed, Profile::Standard);
        assert_eq!((s.pairs.len(), s.per_class), (p.total, None));
        // Smoke: one per class.
        assert_eq!(plan(&t, &t.allowed, Profile::Smoke).pairs.len(), 3);
    }

    #[test]
    fn two_ccx_have_an_other_llc_class() {
        let t = topology("amd-two-ccx");
        let p = plan(&t, &t.allowed, Profile::Quick);
        assert_eq!(
            classes(&p),
            vec![
                (Some("smt_sibling"), 3),
                (Some("same_llc"), 3),
                (Some("other_llc"), 3)
            ]
        );
        let names: Vec<String> = metric_names(&p.pairs.iter().map(|x| x.2).collect::<Vec<_>>())
            .into_iter()
            .map(|x| x.1)
            .collect();
        assert_eq!(
            names,
            ["one_way_smt_sibling", "one_way", "one_way_other_llc"]
        );
    }

    #[test]
    fn hybrid_laptop_pairs_by_its_topology() {
        let t = topology("intel-hybrid-laptop");
        let p = plan(&t, &t.allowed, Profile::Quick);
        let all = t.pairs(&t.allowed);
        // Every class present among all pairs is sampled, at most 3 each.
        let mut want: Vec<Option<PartnerClass>> = all.iter().map(|x| x.2).collect();
        want.dedup();
        let got: Vec<Option<PartnerClass>> = {
            let mut g: Vec<_> = p.pairs.iter().map(|x| x.2).collect();
            g.dedup();
            g
        };
        assert_eq!(got, want);
        assert!(classes(&p).iter().all(|c| c.1 <= QUICK_PER_CLASS));
        assert!(p.pairs.len() < all.len());
    }

    #[test]
    fn a_single_cpu_has_no_pair_and_unknown_topology_is_unclassed() {
        let t = topology("xeon-two-socket");
        assert!(plan(&t, &[3], Profile::Quick).pairs.is_empty());
        let none = Topology::default();
        let p = plan(&none, &[0, 1, 2], Profile::Standard);
        assert_eq!(p.pairs.len(), 3);
        assert!(p.pairs.iter().all(|x| x.2.is_none()));
        assert_eq!(metric_names(&[None]), vec![(None, "one_way".to_string())]);
    }

    #[test]
    fn large_machines_sample_in_standard() {
        // 2 packages x 40 cores x 2 threads: above the bound, so standard samples.
        let mut raw = Vec::new();
        for cpu in 0..160usize {
            let core = cpu % 80;
            let pkg = (core / 40) as u32;
            raw.push(crate::machine::topology::RawCpu {
                cpu,
                package: Some(pkg),
                core_key: Some(format!("{core}")),
                siblings: vec![core, core + 80],
                llc_key: Some((3, format!("p{pkg}"))),
                node: Some(pkg as usize),
                ..Default::default()
            });
        }
        let all: Vec<usize> = (0..160).collect();
        let t = crate::machine::topology::build(raw, &all, "test");
        let s = plan(&t, &all, Profile::Standard);
        assert_eq!(s.per_class, Some(ALL_PAIRS_UP_TO));
        assert_eq!(
            classes(&s),
            vec![
                (Some("smt_sibling"), 64),
                (Some("same_llc"), 64),
                (Some("other_package"), 64)
            ]
        );
        assert_eq!(s.total, 160 * 159 / 2);
    }

    /// Issue 34: every class metric the run will name (suffixed too) has a specific reason.
    #[test]
    fn every_class_metric_has_a_reason() {
        let clock = crate::clock::MockClock::new(1);
        let mut w = crate::experiments::testing::World::live(&clock);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/machines/amd-two-ccx");
        w.machine = Machine::gather_from(&FactRoot::recorded(dir));
        w.machine.cpu.allowed_cpus = w.machine.topology.allowed.clone();
        let got = w.with_ctx(|ctx| CoreToCore.predict(ctx));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["one_way_smt_sibling", "one_way", "one_way_other_llc"]
        );
        for (n, p) in &got {
            let why = p.withheld.as_deref().unwrap_or("");
            assert!(why.contains("core-to-core latency"), "{n}: {why}");
        }
    }

    /// Issue 34: the farthest class against the nearest as "Nx" only beyond both
    /// intervals; within noise it says so and is not ranked by the ratio.
    #[test]
    fn the_class_ratio_needs_separate_intervals() {
        let run = |far: Vec<f64>| {
            let mut o = Outcome::default();
            let near: Vec<f64> = (0..20).map(|i| 40.0 + i as f64).collect();
            o.metric("one_way", "ns", "", near);
            o.metric("one_way_other_llc", "ns", "", far);
            let classes = [
                (Some(PartnerClass::SameLlc), "one_way".to_string()),
                (
                    Some(PartnerClass::OtherLlc),
                    "one_way_other_llc".to_string(),
                ),
            ];
            findings(&classes, &mut o);
            o.findings.pop().unwrap()
        };
        let apart = run(vec![120.0; 20]);
        assert!(
            apart.text.contains("x, beyond both 95% intervals"),
            "{}",
            apart.text
        );
        let noisy = run((0..20).map(|i| 42.0 + i as f64).collect());
        assert!(
            noisy.text.contains("within noise") && !noisy.text.contains("x,"),
            "{}",
            noisy.text
        );
        assert!(noisy.salience.is_none(), "{:?}", noisy.salience);
    }

    #[test]
    fn placement_premise_fails_when_a_thread_moved_or_pinning_is_soft() {
        let seen = Place {
            looks: 4,
            ..Place::default()
        };
        let good = Bounce {
            trials: vec![100.0],
            places: [seen; 2],
        };
        let moved = Bounce {
            places: [seen, Place { blind: 1, ..seen }],
            ..good.clone()
        };
        let a = (0, 1, Some(PartnerClass::SameLlc), good);
        let b = (0, 2, Some(PartnerClass::SameLlc), moved);
        assert!(placement_check(None, std::slice::from_ref(&a)).passed);
        let c = placement_check(None, &[a.clone(), b]);
        assert!(
            !c.passed && c.premise && c.detail.contains("0<->2"),
            "{}",
            c.detail
        );
        let c = placement_check(Some("hint only".into()), &[a]);
        assert!(!c.passed && c.detail.contains("hint only"), "{}", c.detail);
        assert!(!placement_check(None, &[]).passed, "nothing measured");
    }

    #[test]
    fn a_pair_bounces_on_this_machine() {
        let cpus = crate::platform::allowed_cpus();
        if cpus.len() < 2 {
            assert!(
                std::env::var_os("OSMETER_REQUIRE_ALL_TESTS").is_none(),
                "OSMETER_REQUIRE_ALL_TESTS: one CPU allowed, no pair to bounce between"
            );
            eprintln!("skipped: one CPU allowed, no pair to bounce between");
            return;
        }
        let m = Machine::default();
        let clock = crate::clock::detect(None).0;
        let scratch = std::sync::OnceLock::new();
        let earlier: Vec<crate::results::ExperimentResult> = Vec::new();
        let ctx = Context {
            profile: Profile::Smoke,
            machine: &m,
            clock: &clock,
            cpu: cpus[0],
            budget: Duration::from_millis(100),
            earlier: &earlier,
            options: &Default::default(),
            loop_ticks: 0.0,
            progress: &|_| {},
            scratch_cell: &scratch,
            repetition: crate::experiments::Repetition::SINGLE,
        };
        let r = bounce(&ctx, cpus[0], cpus[1], Duration::from_millis(20)).unwrap();
        assert!(r.trials.len() >= MIN_TRIALS);
        // Physically: more than a nanosecond, less than a millisecond one way.
        let v = r.one_way();
        assert!(v > 1.0 && v < 1e6, "{v}");
        assert!(r.places.iter().all(|p| p.looks >= 2), "{:?}", r.places);
    }
}
