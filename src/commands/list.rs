//! `osmeter list`: every experiment with its needs and its cost per profile.

use crate::experiments::{self, Profile};
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

pub(super) fn run(a: Args) -> ExitCode {
    let all = experiments::registry();
    // Per-kind experiments run once per kind of core this machine lets the run use.
    let (_, topology) = crate::machine::cpu::gather(&crate::machine::FactRoot::live());
    let kinds = topology
        .kinds_of(&crate::platform::allowed_cpus())
        .len()
        .max(1);
    if a.json {
        let v: Vec<_> = all
            .iter()
            .map(|e| {
                let m = e.spec();
                serde_json::json!({
                    "id": m.id, "area": m.area(), "title": m.title, "description": m.description,
                    "needs": m.needs,
                    "per_core_kind": m.per_core_kind,
                    "budget_s": Profile::ALL.iter().map(|p| (p.name(), e.budget(*p).as_secs_f64())).collect::<BTreeMap<_, _>>(),
                    "default_repeat": Profile::ALL.iter().map(|p| (p.name(), e.default_repeat(*p))).collect::<BTreeMap<_, _>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    print!(
        "{}",
        text(
            &all,
            crate::report::terminal::terminal_width() as usize,
            kinds
        )
    );
    ExitCode::SUCCESS
}

/// Measured wall time of whole runs of each profile (all experiments, default runs), as a
/// basis for the typical wait; None where no reference run was timed. Measured on
/// REFERENCE_MACHINE with the binary of the commit that added them.
const REFERENCE_TOTAL_S: [(Profile, Option<f64>); 4] = [
    (Profile::Smoke, Some(4.1)),
    (Profile::Quick, Some(39.1)),
    (Profile::Standard, Some(303.8)),
    (Profile::Thorough, None),
];
/// Where and how REFERENCE_TOTAL_S was measured.
const REFERENCE_MACHINE: &str = "a 2-vCPU KVM guest (AMD EPYC, 32 MiB L3) while a \
     cargo build ran beside it (load average 2-3), so an upper-end typical";

/// A duration as a person reads it: "0.5 s", "45 s", "6.0 min".
fn human(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else {
        format!("{:.1} min", s / 60.0)
    }
}

/// The list, `width` columns wide: per experiment a line with its id and the most each
/// profile can take (on any number of kinds of core, which share the budget; `kinds` is
/// this machine's, for the note), then its description and
/// needs wrapped below (never cut, so a pipe gets all of it); then the totals and a
/// reference run's measured total.
fn text(all: &[Box<dyn experiments::Experiment>], width: usize, kinds: usize) -> String {
    use crate::report::terminal::wrap;
    let most = |e: &dyn experiments::Experiment, p: Profile| e.ceiling(p).as_secs_f64();
    let idw = all
        .iter()
        .map(|e| e.spec().id.len())
        .max()
        .unwrap_or(0)
        .max(10);
    let row = |first: &str, cells: &[String]| {
        let mut l = format!("{first:<idw$}");
        for c in cells {
            l.push_str(&format!(" {c:>9}"));
        }
        l.trim_end().to_string() + "\n"
    };
    let names: Vec<String> = Profile::ALL.iter().map(|p| p.name().to_string()).collect();
    let mut s = String::new();
    s.push_str(&wrap(
        "The most each experiment can take per profile: its budget times its default runs \
         (an upper bound; most finish well within it, see the reference run below).",
        width,
        "",
        "",
    ));
    s.push('\n');
    s.push_str(&row("experiment", &names));
    for e in all {
        let m = e.spec();
        let cells: Vec<String> = Profile::ALL
            .iter()
            .map(|p| human(most(e.as_ref(), *p)))
            .collect();
        s.push_str(&row(m.id, &cells));
        let needs = m.needs.describe();
        let mut about = if needs == "-" {
            m.description.to_string()
        } else {
            format!("{} (needs {needs})", m.description)
        };
        if m.per_core_kind {
            about.push_str(" [per core kind]");
        }
        s.push_str(&wrap(&about, width, "    ", "    "));
    }
    s.push('\n');
    let totals: Vec<String> = Profile::ALL
        .iter()
        .map(|p| human(all.iter().map(|e| most(e.as_ref(), *p)).sum()))
        .collect();
    s.push_str(&row("at most", &totals));
    let limits: Vec<String> = Profile::ALL
        .iter()
        .map(|p| human(p.time_limit().as_secs_f64()))
        .collect();
    s.push_str(&row("limit", &limits));
    let typical: Vec<String> = REFERENCE_TOTAL_S
        .iter()
        .map(|(_, t)| t.map(human).unwrap_or_else(|| "-".into()))
        .collect();
    s.push_str(&row("typical", &typical));
    s.push_str(&wrap(
        &format!(
            "at most: every experiment's budget times its default runs (smoke 1, other profiles \
             2 except fs.cache-size; --repeat overrides). limit: what 'at most' may add up to \
             for the profile on any machine. typical: the measured wall time of a \
             whole run of the profile on {REFERENCE_MACHINE} ('-': not timed); a faster or idle \
             machine waits less, and a selection (--only, --skip) only its experiments' share."
        ),
        width,
        "",
        "",
    ));
    s.push_str(&wrap(
        &format!(
            "[per core kind]: on a CPU with more than one kind of core (hybrid Intel, ARM \
             big.LITTLE, Apple perflevels) it runs once on a CPU of each kind, the kinds \
             sharing its budget, and reports each; this machine lets a run use {}.",
            if kinds == 1 {
                "one kind of core, so these run once here".to_string()
            } else {
                format!("{kinds} kinds of core")
            }
        ),
        width,
        "",
        "",
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_fits_the_width_and_keeps_every_word() {
        let all = experiments::registry();
        for width in [80, 100] {
            let t = text(&all, width, 1);
            let widest = t.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(widest <= width, "{widest} > {width}:\n{t}");
            let words: String = t.split_whitespace().collect::<Vec<_>>().join(" ");
            for e in &all {
                let m = e.spec();
                assert!(t.contains(m.id), "{}", m.id);
                let d: String = m
                    .description
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(words.contains(&d), "description of {} cut:\n{t}", m.id);
            }
        }
    }

    #[test]
    fn at_most_is_budget_times_runs_on_any_number_of_kinds() {
        let all = experiments::registry();
        let sum: f64 = all
            .iter()
            .map(|e| {
                (e.budget(Profile::Quick) * e.default_repeat(Profile::Quick) as u32).as_secs_f64()
            })
            .sum();
        // Kinds of core share a per-kind experiment's budget: two kinds change no row.
        let (one, two) = (text(&all, 100, 1), text(&all, 100, 2));
        for t in [&one, &two] {
            let line = t.lines().find(|l| l.starts_with("at most")).unwrap();
            assert!(line.contains(&human(sum)), "{line} vs {sum}");
        }
        let row = |t: &str, id: &str| t.lines().find(|l| l.starts_with(id)).unwrap().to_string();
        assert_eq!(row(&one, "mem.latency "), row(&two, "mem.latency "));
    }
}
