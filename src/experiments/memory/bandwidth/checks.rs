//! mem.bandwidth's premises: every thread on its own CPU, and on several nodes each
//! thread's memory on its own node.

use super::kernel::Part;
use crate::experiments::kit::team::TeamPlacement;
use crate::results::Check;

/// Where the teams ran and where their memory sat, gathered over the run.
#[derive(Default)]
pub(super) struct Placed {
    teams: usize,
    /// "read_2t: thread 1 ..." for every thread not where it was placed.
    misplaced: Vec<String>,
    /// Why placement could not be seen (no hard pinning, no current-CPU call).
    unknown: Option<String>,
    /// Pages sampled and pages found on another node than their reader's.
    pages: usize,
    pages_away: Vec<String>,
    pages_unknown: bool,
}

/// Pages sampled per part for the NUMA-node check.
const PAGE_SAMPLES: usize = 16;

impl Placed {
    /// Records where team `name`'s threads ran.
    pub(super) fn add(&mut self, name: &str, q: &TeamPlacement) {
        self.teams += 1;
        self.misplaced
            .extend(q.misplaced.iter().map(|m| format!("{name}: {m}")));
        if self.unknown.is_none() {
            self.unknown.clone_from(&q.unknown);
        }
    }

    /// Samples pages of each part against `nodes[k]`, its reader's node.
    pub(super) fn pages_on_nodes(&mut self, nodes: Vec<Option<usize>>, parts: &[Part]) {
        for (k, part) in parts.iter().enumerate() {
            let Some(want) = nodes.get(k).copied().flatten() else {
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
        let mut v = vec![if !self.misplaced.is_empty() {
            Check::premise(name, false, self.misplaced.join("; "))
        } else if let Some(why) = &self.unknown {
            Check::unverified(
                name,
                format!("{why}: threads may have shared a CPU, and a figure may be of fewer cores than its name says"),
            )
        } else {
            Check::premise(
                name,
                true,
                format!(
                    "{} teams, every thread on its own CPU at every check",
                    self.teams
                ),
            )
        }];
        if numa {
            let name = "each thread's memory on its own NUMA node (first touch; get_mempolicy on sampled pages)";
            v.push(if !self.pages_away.is_empty() {
                let k = self.pages_away.len();
                Check::premise(
                    name,
                    false,
                    format!(
                        "{k} of {} sampled pages away from their reader's node; first: {}",
                        self.pages, self.pages_away[0]
                    ),
                )
            } else if self.pages_unknown || self.pages == 0 {
                Check::unverified(name, "the kernel did not say which node holds the pages")
            } else {
                Check::premise(
                    name,
                    true,
                    format!("{} sampled pages, each on its reader's node", self.pages),
                )
            });
        }
        v
    }
}
