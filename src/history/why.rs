//! Why a series changed, when the recorded runs can tell: the conditions the trust grade
//! named for the experiment in each run (steal, a cgroup CPU quota, a busy SMT sibling,
//! a reduced issue rate, a moved clock, thermal throttling) and what the run itself
//! records (kernel, osmeter build, machine fingerprint). A condition is named at a
//! change only when the runs on the two sides differ in it: present in at least half of
//! the runs at the new level and in at most a quarter of those before (or the reverse,
//! when it went away); a kernel, build or machine only when the last run before and the
//! first at the new level differ. A condition present throughout is not a cause of
//! the change, and is not named.

use super::changes::Condition;
use crate::results::RunResults;
use std::collections::BTreeMap;

/// Grade codes that can move a figure between runs, with how a sentence names them.
const CODES: &[(&str, &str)] = &[
    ("steal", "steal"),
    ("cgroup_cpu", "cgroup CPU throttling"),
    ("smt_sibling_busy", "a busy SMT sibling"),
    ("issue_rate", "a reduced issue rate (a shared core)"),
    ("frequency", "a moved core clock"),
    ("throttle", "thermal throttling"),
];

/// Share of the runs at one level from which a condition counts as present, and up to
/// which as absent.
const PRESENT: f64 = 0.5;
const ABSENT: f64 = 0.25;

/// What one recorded run says about its conditions.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    pub kernel: String,
    pub build: String,
    pub fingerprint: String,
    /// The cgroup CPU quota in CPUs, when the run had one.
    pub cpu_limit: Option<f64>,
    /// Per experiment: the grade's condition codes, with the steal share (%) where the
    /// grade gave one.
    pub codes: BTreeMap<String, Vec<(String, Option<f64>)>>,
}

impl RunFacts {
    pub fn of(r: &RunResults) -> RunFacts {
        let build = format!(
            "osmeter {}{}",
            r.tool.version,
            r.tool
                .commit
                .as_deref()
                .map(|c| format!(" ({})", &c[..c.len().min(12)]))
                .unwrap_or_default()
        );
        let codes = r
            .experiments
            .iter()
            .map(|e| {
                let v = e
                    .grade
                    .iter()
                    .flat_map(|g| &g.reasons)
                    .map(|g| (g.code.clone(), steal_share(&g.text)))
                    .collect();
                (e.id.clone(), v)
            })
            .collect();
        RunFacts {
            kernel: r.machine.os.kernel.clone(),
            build,
            fingerprint: r.machine_fingerprint(),
            cpu_limit: r.machine.cgroup.cpu_limit,
            codes,
        }
    }

    fn has(&self, experiment: &str, code: &str) -> bool {
        self.codes
            .get(experiment)
            .is_some_and(|v| v.iter().any(|(c, _)| c == code))
    }

    fn steal(&self, experiment: &str) -> Option<f64> {
        self.codes
            .get(experiment)?
            .iter()
            .find(|(c, _)| c == "steal")?
            .1
    }
}

/// The steal share the grade's text states ("stole 12% of").
fn steal_share(text: &str) -> Option<f64> {
    let at = text.find("stole ")? + "stole ".len();
    let rest = &text[at..];
    let end = rest.find('%')?;
    rest[..end].trim().parse().ok()
}

/// The conditions that changed between `before` and `after` (the runs of the segment
/// before a change and of the one from it on, oldest first) for `experiment`.
pub fn explain(experiment: &str, before: &[&RunFacts], after: &[&RunFacts]) -> Vec<Condition> {
    let mut out = Vec::new();
    if before.is_empty() || after.is_empty() {
        return out;
    }
    let share = |runs: &[&RunFacts], code: &str| {
        runs.iter().filter(|r| r.has(experiment, code)).count() as f64 / runs.len() as f64
    };
    for (code, name) in CODES {
        let (b, a) = (share(before, code), share(after, code));
        let detail = |runs: &[&RunFacts]| match *code {
            "steal" => median(runs.iter().filter_map(|r| r.steal(experiment)))
                .map(|s| format!(" {s:.0}%"))
                .unwrap_or_default(),
            "cgroup_cpu" => median(runs.iter().filter_map(|r| r.cpu_limit))
                .map(|l| format!(" (a quota of {l:.2} CPUs)"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        if a >= PRESENT && b <= ABSENT {
            out.push(Condition {
                code: code.to_string(),
                text: format!("{name}{} from that run on", detail(after)),
            });
        } else if b >= PRESENT && a <= ABSENT {
            out.push(Condition {
                code: code.to_string(),
                text: format!("{name}{} until then, gone from that run on", detail(before)),
            });
        }
    }
    let (last, first) = (before[before.len() - 1], after[0]);
    for (code, what, x, y) in [
        ("kernel", "kernel", &last.kernel, &first.kernel),
        ("build", "build", &last.build, &first.build),
        ("machine", "machine", &last.fingerprint, &first.fingerprint),
    ] {
        if x != y {
            out.push(Condition {
                code: code.into(),
                text: format!("a different {what} at that run ({x} -> {y})"),
            });
        }
    }
    out
}

/// Fills in each change's conditions and sentence from the recorded runs on its two
/// sides (between the neighbouring changes). Runs whose document no longer loads count
/// as runs without conditions.
pub fn annotate(h: &super::History, all: &mut [super::changes::SeriesChanges]) {
    let mut facts: std::collections::HashMap<i64, RunFacts> = Default::default();
    for sc in all.iter_mut() {
        for p in &sc.series.points {
            facts.entry(p.run).or_insert_with(|| {
                h.get(p.run)
                    .ok()
                    .flatten()
                    .map(|r| RunFacts::of(&r))
                    .unwrap_or_default()
            });
        }
        let runs: Vec<&RunFacts> = sc.series.points.iter().map(|p| &facts[&p.run]).collect();
        let mut bounds: Vec<usize> = vec![0];
        bounds.extend(sc.changes.iter().map(|c| c.position - 1));
        bounds.push(runs.len());
        for (i, c) in sc.changes.iter_mut().enumerate() {
            let (lo, at, hi) = (bounds[i], bounds[i + 1], bounds[i + 2]);
            c.conditions = explain(&sc.series.experiment, &runs[lo..at], &runs[at..hi]);
            c.why = Some(sentence(
                &sc.series.experiment,
                &sc.series.metric,
                c.rel,
                &c.started_at,
                c.run,
                &c.conditions,
            ));
        }
    }
}

fn median(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    (!v.is_empty()).then(|| crate::stats::median(&v))
}

/// The change as one sentence: "cpu.syscall/getppid +40% since 2026-11-24T03:00:00Z
/// (run 12), with steal 12% from that run on".
pub fn sentence(
    experiment: &str,
    metric: &str,
    rel: f64,
    started_at: &str,
    run: i64,
    conditions: &[Condition],
) -> String {
    let with = if conditions.is_empty() {
        "with no condition seen to change at that run (steal, cgroup throttling, SMT sibling, \
         issue rate, clock, kernel, build and machine checked)"
            .to_string()
    } else {
        let v: Vec<&str> = conditions.iter().map(|c| c.text.as_str()).collect();
        format!("with {}", v.join(", "))
    };
    format!(
        "{experiment}/{metric} {:+.0}% since {started_at} (run {run}), {with}",
        100.0 * rel
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(codes: &[&str], limit: Option<f64>) -> RunFacts {
        RunFacts {
            kernel: "6.1".into(),
            build: "osmeter 0.1".into(),
            fingerprint: "m".into(),
            cpu_limit: limit,
            codes: [(
                "cpu.loop".to_string(),
                codes
                    .iter()
                    .map(|c| (c.to_string(), (*c == "steal").then_some(12.0)))
                    .collect(),
            )]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn a_step_with_nothing_changed_names_nothing() {
        // "busy" and "vm" throughout: present on both sides, so no cause.
        let b: Vec<RunFacts> = (0..7).map(|_| run(&["vm", "busy"], None)).collect();
        let a: Vec<RunFacts> = (0..5).map(|_| run(&["vm", "busy"], None)).collect();
        let c = explain(
            "cpu.loop",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>(),
        );
        assert!(c.is_empty(), "{c:?}");
        let s = sentence("cpu.loop", "iteration", 0.4, "t", 8, &c);
        assert!(s.contains("no condition seen"), "{s}");
    }

    #[test]
    fn throttling_from_the_change_on_is_named_with_its_quota() {
        let mut b: Vec<RunFacts> = (0..7).map(|_| run(&["vm"], None)).collect();
        // One stray run before does not stop it being named (at most a quarter).
        b[2] = run(&["vm", "cgroup_cpu"], Some(0.5));
        let a: Vec<RunFacts> = (0..5)
            .map(|_| run(&["vm", "cgroup_cpu"], Some(0.5)))
            .collect();
        let c = explain(
            "cpu.loop",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>(),
        );
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].code, "cgroup_cpu");
        assert!(c[0].text.contains("0.50 CPUs"), "{}", c[0].text);
        // Another experiment's conditions are not this one's.
        assert!(explain(
            "cpu.syscall",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>()
        )
        .is_empty());
    }

    #[test]
    fn steal_seen_in_some_runs_on_both_sides_is_not_a_cause() {
        let b: Vec<RunFacts> = (0..6)
            .map(|i| run(if i % 2 == 0 { &["steal"] } else { &[] }, None))
            .collect();
        let a: Vec<RunFacts> = (0..6).map(|_| run(&["steal"], None)).collect();
        let c = explain(
            "cpu.loop",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>(),
        );
        assert!(c.is_empty(), "{c:?}");
        // From none to all: named, with its share.
        let b: Vec<RunFacts> = (0..6).map(|_| run(&[], None)).collect();
        let c = explain(
            "cpu.loop",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>(),
        );
        assert_eq!(c[0].text, "steal 12% from that run on");
        let s = sentence("cpu.syscall", "getppid", 0.4, "2026-11-24T03:00:00Z", 9, &c);
        assert_eq!(
            s,
            "cpu.syscall/getppid +40% since 2026-11-24T03:00:00Z (run 9), with steal 12% from that run on"
        );
    }

    #[test]
    fn a_kernel_update_at_the_change_is_named() {
        let b: Vec<RunFacts> = (0..4).map(|_| run(&[], None)).collect();
        let mut a: Vec<RunFacts> = (0..4).map(|_| run(&[], None)).collect();
        for r in &mut a {
            r.kernel = "6.2".into();
        }
        let c = explain(
            "cpu.loop",
            &b.iter().collect::<Vec<_>>(),
            &a.iter().collect::<Vec<_>>(),
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].code, "kernel");
        assert!(c[0].text.contains("6.1 -> 6.2"));
    }

    #[test]
    fn the_steal_share_is_read_from_the_grade_text() {
        assert_eq!(
            steal_share("the hypervisor stole 12% of CPU 1's time during"),
            Some(12.0)
        );
        assert_eq!(steal_share("nothing"), None);
    }
}
