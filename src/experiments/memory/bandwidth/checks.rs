//! mem.bandwidth's premises: every thread on its own CPU, a team's threads running
//! together, and on several nodes each thread's memory on its own node.

use super::kernel::Part;
use crate::experiments::kit::team::{Step, TeamPlacement};
use crate::results::Check;

/// Threads of unequal speed overlap for most of a trial's span; threads run in turn, not at all.
const TOGETHER: f64 = 0.5;

#[derive(Debug, Clone, Copy)]
pub(super) struct Together {
    ran: usize,
    apart: usize,
    least: f64,
}

impl Together {
    pub(super) const NONE: Together = Together {
        ran: 0,
        apart: 0,
        least: 1.0,
    };

    /// Counts a step; whether it is kept (a preempted one is set aside as such, not apart).
    pub(super) fn kept(&mut self, s: &Step) -> bool {
        let share = s.overlap();
        let apart = s.quiet && share < TOGETHER;
        self.ran += 1;
        if s.quiet {
            self.least = self.least.min(share);
        }
        self.apart += usize::from(apart);
        s.quiet && !apart
    }

    /// Why a team failed: as many trials set aside as kept (then running apart is the rule).
    fn failure((name, t, kept): &(String, Together, usize)) -> Option<String> {
        (t.apart > 0 && t.apart >= *kept).then(|| format!(
            "{name}: in {} of {} trials its threads ran together for less than {:.0}% of the trial's span (least {:.0}%), against {kept} undisturbed trials kept",
            t.apart,
            t.ran,
            TOGETHER * 100.0,
            t.least * 100.0,
        ))
    }
}

/// Where the teams ran and where their memory sat, gathered over the run.
#[derive(Default)]
pub(super) struct Placed {
    teams: usize,
    misplaced: Vec<String>,
    unknown: Option<String>,
    /// Pages sampled, and those on another node than their reader's.
    pages: usize,
    pages_away: Vec<String>,
    pages_unknown: bool,
    /// Teams of several threads: name, trials together or apart, and undisturbed trials kept.
    together: Vec<(String, Together, usize)>,
}

/// Pages sampled per part for the NUMA-node check.
const PAGE_SAMPLES: usize = 16;

impl Placed {
    pub(super) fn add(&mut self, name: &str, q: &TeamPlacement) {
        self.teams += 1;
        self.misplaced
            .extend(q.misplaced.iter().map(|m| format!("{name}: {m}")));
        self.unknown = self.unknown.take().or_else(|| q.unknown.clone());
    }

    pub(super) fn together(&mut self, name: &str, threads: usize, t: Together, kept: usize) {
        if threads > 1 {
            self.together.push((name.to_string(), t, kept));
        }
    }

    /// Samples pages of each part against its reader's node, where known.
    pub(super) fn pages_on_nodes(&mut self, nodes: &[Option<usize>], parts: &[Part]) {
        for (k, (part, &want)) in parts.iter().zip(nodes).enumerate() {
            let Some(want) = want else {
                continue;
            };
            let step = (part.len / PAGE_SAMPLES).max(1);
            for i in 0..PAGE_SAMPLES.min(part.len) {
                let addr = (part.base + i * step) as *const u8;
                self.pages += 1;
                match crate::platform::node_of_page(addr) {
                    Some(n) if n == want => {}
                    Some(n) => self.pages_away.push(format!(
                        "a page of part {k} of {} is on node {n}, not on node {want}",
                        parts.len()
                    )),
                    None => self.pages_unknown = true,
                }
            }
        }
    }

    pub(super) fn checks(self, numa: bool) -> Vec<Check> {
        let name =
            "every thread ran on the CPU it was placed on (current CPU read around every trial)";
        let failed = (!self.misplaced.is_empty()).then(|| self.misplaced.join("; "));
        let unknown = self.unknown.map(|why| format!("{why}: threads may have shared a CPU, and a figure may be of fewer cores than its name says"));
        let passed = format!(
            "{} teams, every thread on its own CPU at every check",
            self.teams
        );
        let mut v = vec![premise(name, failed, unknown, passed)];
        if numa {
            let name = "each thread's memory on its own NUMA node (first touch; get_mempolicy on sampled pages)";
            let (k, n) = (self.pages_away.len(), self.pages);
            let failed = self.pages_away.first().map(|first| {
                format!("{k} of {n} sampled pages away from their reader's node; first: {first}")
            });
            let unknown = (self.pages_unknown || n == 0)
                .then(|| "the kernel did not say which node holds the pages".to_string());
            let passed = format!("{n} sampled pages, each on its reader's node");
            v.push(premise(name, failed, unknown, passed));
        }
        let name = "each team's threads ran together (all of them running for at least half of each kept trial's span, first start to last stop)";
        let teams = self.together.len();
        let ran: usize = self.together.iter().map(|x| x.1.ran).sum();
        let apart: usize = self.together.iter().map(|x| x.1.apart).sum();
        let counts = format!("{apart} of {ran} trials of {teams} teams of more than one thread set aside and repeated (calibration and warm-up included; a preempted trial is set aside as such, not counted here; a team fails when as many of its trials ran apart as it kept undisturbed: then running apart is the rule, not an accident)");
        let failed: Vec<String> = self.together.iter().filter_map(Together::failure).collect();
        let failed = (!failed.is_empty()).then(|| format!("{counts}: {}", failed.join("; ")));
        let none = "no team of more than one thread ran".to_string();
        let passed = if teams == 0 { none } else { counts };
        v.push(premise(name, failed, None, passed));
        v
    }
}

/// A premise that failed with a detail, else could not be seen (and why), else held.
fn premise(name: &str, failed: Option<String>, unknown: Option<String>, passed: String) -> Check {
    match (failed, unknown) {
        (Some(detail), _) => Check::premise(name, false, detail),
        (None, Some(why)) => Check::unverified(name, why),
        (None, None) => Check::premise(name, true, passed),
    }
}
