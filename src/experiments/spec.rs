//! What an experiment is, as data: its `Spec`, per-profile values, and the method text
//! from its page under `docs/methods/`.

use super::{Needs, Profile};
use crate::results::Bottleneck;
use std::time::Duration;

/// One value per profile (smoke, quick, standard, thorough), in place of a `match profile`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerProfile<T>(pub [T; 4]);

impl<T: Copy> PerProfile<T> {
    pub const fn new(smoke: T, quick: T, standard: T, thorough: T) -> Self {
        PerProfile([smoke, quick, standard, thorough])
    }

    pub const fn get(&self, p: Profile) -> T {
        self.0[p as usize]
    }
}

impl PerProfile<Duration> {
    /// A unit scaled per profile: smoke 1/5, quick 1/2 (its runs must add up to the
    /// profile's 60 s), standard 5x, thorough 15x.
    pub const fn scaled(unit: Duration) -> Self {
        let ns = unit.as_nanos() as u64;
        PerProfile([
            Duration::from_nanos(ns / 5),
            Duration::from_nanos(ns / 2),
            Duration::from_nanos(ns * 5),
            Duration::from_nanos(ns * 15),
        ])
    }
}

/// Milliseconds, for `PerProfile` tables.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What an experiment is, as data: one `const` per experiment, returned by
/// `Experiment::spec` and read by `osmeter list`, the runner and the results document.
/// Start from one of the family defaults (`..Spec::CORE_LOOP`) and set what differs.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Stable id such as `cpu.syscall`; the part before the dot is the area.
    pub id: &'static str,
    /// A heading for results and reports.
    pub title: &'static str,
    /// One line for `osmeter list`.
    pub description: &'static str,
    /// The method in brief, for results and reports: `method!(id)`, the first paragraph of
    /// `docs/methods/<id>.md`.
    pub method: &'static str,
    /// What it needs beyond an ordinary user on a quiet machine, for `osmeter list`.
    pub needs: Needs,
    /// The sentinel component that shares its figures' bottleneck (a metric may declare
    /// its own with `Metric::bottleneck`); compare discounts differences by that
    /// component's move only. `None` for device and network figures.
    pub bottleneck: Bottleneck,
    /// Figures of one core: on a CPU with more than one kind of core (hybrid Intel, ARM
    /// big.LITTLE, Apple perflevels) the runner runs it once on a CPU of each kind, the
    /// other kinds' metrics suffixed with their kind (docs/METHODOLOGY.md, "Core kinds").
    pub per_core_kind: bool,
    /// Its figures have the harness's loop overhead subtracted (`Harness::measure`): a loop
    /// overhead measured slow at the run's start grades them, and no other experiment's.
    pub subtracts_loop: bool,
    /// Wall-time budget per profile; `None` when it follows from the experiment's plan
    /// (it then overrides `Experiment::budget`).
    pub budget: Option<PerProfile<Duration>>,
}

impl Spec {
    const BASE: Spec = Spec {
        id: "",
        title: "",
        description: "",
        method: "",
        needs: Needs::NONE,
        bottleneck: Bottleneck::None,
        per_core_kind: false,
        subtracts_loop: false,
        budget: None,
    };
    /// One core's figures from the calibrated loop, loop overhead subtracted.
    pub const CORE_LOOP: Spec = Spec {
        bottleneck: Bottleneck::Chain,
        per_core_kind: true,
        subtracts_loop: true,
        ..Spec::BASE
    };
    /// Work that goes through the scheduler (switches, task creation, wake-ups).
    pub const SCHEDULER: Spec = Spec {
        bottleneck: Bottleneck::Chain,
        ..Spec::BASE
    };
    /// Loads and stores that reach the caches and memory.
    pub const MEMORY: Spec = Spec {
        bottleneck: Bottleneck::Chase,
        ..Spec::BASE
    };
    /// A disk or a file system: no sentinel component.
    pub const DEVICE: Spec = Spec::BASE;
    /// A link and a peer: no sentinel component.
    pub const NETWORK: Spec = Spec {
        needs: Needs {
            peer: true,
            ..Needs::NONE
        },
        ..Spec::BASE
    };

    /// `cpu`, `mem`, `net` or `fs`: the id's first part.
    pub(crate) fn area(&self) -> &'static str {
        self.id.split('.').next().unwrap_or("")
    }
}

/// Paragraph `n` of a method page, the `# id: title` heading being paragraph 0. The
/// method paragraphs stay on one line each so the report can quote them whole.
pub const fn paragraph(page: &'static str, n: usize) -> &'static str {
    let b = page.as_bytes();
    let (mut start, mut k) = (0, 0);
    while k < n {
        while start + 1 < b.len() && !(b[start] == b'\n' && b[start + 1] == b'\n') {
            start += 1;
        }
        start = if start + 2 <= b.len() {
            start + 2
        } else {
            b.len()
        };
        k += 1;
    }
    let mut end = start;
    while end < b.len() && b[end] != b'\n' {
        end += 1;
    }
    let (_, rest) = b.split_at(start);
    let (para, _) = rest.split_at(end - start);
    match std::str::from_utf8(para) {
        Ok(s) => s,
        Err(_) => "",
    }
}

/// The method text of experiment `$id`: the first paragraph of `docs/methods/$id.md`
/// (or paragraph `$n`, for a method that differs by architecture).
#[macro_export]
macro_rules! method {
    ($id:literal) => {
        $crate::method!($id, 1)
    };
    ($id:literal, $n:literal) => {
        $crate::experiments::spec::paragraph(
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/docs/methods/",
                $id,
                ".md"
            )),
            $n,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_count_from_the_heading() {
        let page = "# a.b: T\n\nThe method.\n\nOn arm.\n";
        assert_eq!(paragraph(page, 1), "The method.");
        assert_eq!(paragraph(page, 2), "On arm.");
        assert_eq!(paragraph(page, 0), "# a.b: T");
        assert_eq!(paragraph("# only a heading\n", 1), "");
    }

    #[test]
    fn scaled_budgets_follow_profile_scale() {
        let b = PerProfile::scaled(ms(1500));
        assert_eq!(b, PerProfile::new(ms(300), ms(750), ms(7500), ms(22500)));
        assert_eq!(b.get(Profile::Standard), ms(7500));
    }
}
