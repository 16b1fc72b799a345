//! What an experiment is, as data: its `Spec`, per-profile values and its method page.

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
    /// Smoke 1/5, quick 1/2 (its runs add up to the profile's 60 s), standard 5x, thorough 15x.
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

pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One `const` per experiment: a family default (`..Spec::CORE_LOOP`) and what differs.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Stable id such as `cpu.syscall`; the part before the dot is the area.
    pub id: &'static str,
    pub title: &'static str,
    /// One line for `osmeter list`.
    pub description: &'static str,
    /// `method!(id)`.
    pub method: &'static str,
    pub needs: Needs,
    /// The sentinel component sharing its figures' bottleneck (a metric may name its own):
    /// compare discounts differences by that component's move only.
    pub bottleneck: Bottleneck,
    /// Figures of one core: run once per kind of core, the other kinds' metrics suffixed
    /// with their kind (docs/METHODOLOGY.md, "Core kinds").
    pub per_core_kind: bool,
    /// Its figures have the loop overhead subtracted, so a slow one at the run's start
    /// grades them (and no other experiment's).
    pub subtracts_loop: bool,
    /// `None` when it follows from the plan (`Experiment::budget` overridden).
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
    pub const CORE_LOOP: Spec = Spec {
        bottleneck: Bottleneck::Chain,
        per_core_kind: true,
        subtracts_loop: true,
        ..Spec::BASE
    };
    /// Switches, task creation, wake-ups.
    pub const SCHEDULER: Spec = Spec {
        bottleneck: Bottleneck::Chain,
        ..Spec::BASE
    };
    pub const MEMORY: Spec = Spec {
        bottleneck: Bottleneck::Chase,
        ..Spec::BASE
    };
    pub const DEVICE: Spec = Spec::BASE;
    pub const NETWORK: Spec = Spec {
        needs: Needs {
            peer: true,
            ..Needs::NONE
        },
        ..Spec::BASE
    };

    pub(crate) fn area(&self) -> &'static str {
        self.id.split('.').next().unwrap_or("")
    }
}

/// Paragraph `n` (one line) of a method page, the `# id: title` heading being paragraph 0.
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

/// The first paragraph of `docs/methods/$id.md` (or paragraph `$n`, per architecture).
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
