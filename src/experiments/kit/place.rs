//! Placement counters: whether a pinned thread stayed on its CPU throughout.

use crate::platform::{current_cpu, pin_to_cpu, Pinning};

pub(crate) const NO_CURRENT_CPU: &str = "this system does not say which CPU a thread runs on";

/// Looks at where the calling thread runs, against the CPU it was placed on.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Place {
    pub(crate) cpu: usize,
    pub(crate) looks: u64,
    /// Looks that found the thread on another CPU, and the last such CPU.
    pub(crate) away: u64,
    pub(crate) last_away: Option<usize>,
    /// Looks the system could not answer.
    pub(crate) blind: u64,
}

impl Place {
    pub(crate) fn new(cpu: usize) -> Self {
        Place {
            cpu,
            ..Place::default()
        }
    }

    /// Looks once; true when the thread is on its CPU.
    pub(crate) fn look(&mut self) -> bool {
        self.looks += 1;
        match current_cpu() {
            Some(c) if c == self.cpu => return true,
            Some(c) => {
                self.away += 1;
                self.last_away = Some(c);
            }
            None => self.blind += 1,
        }
        false
    }

    /// The looks made since `before` (this place earlier).
    pub(crate) fn since(&self, before: &Place) -> Place {
        let away = self.away - before.away;
        Place {
            cpu: self.cpu,
            looks: self.looks - before.looks,
            away,
            last_away: self.last_away.filter(|_| away > 0),
            blind: self.blind - before.blind,
        }
    }

    /// Looks that did not find the thread on its CPU (elsewhere or unanswered).
    pub(crate) fn off(&self) -> u64 {
        self.away + self.blind
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pinned {
    Hard,
    /// A hint only: why the placement is not known.
    Soft(String),
    Failed(String),
}

pub(crate) fn pin(cpu: usize) -> Pinned {
    match pin_to_cpu(cpu) {
        Ok(Pinning::Hard) => Pinned::Hard,
        Ok(p) => Pinned::Soft(p.reason().unwrap_or("no hard pinning").to_string()),
        Err(e) => Pinned::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::Place;

    /// A step's looks are its own: counts since the step began, and no CPU seen away
    /// before it named as where the thread went during it.
    #[test]
    fn looks_since_an_earlier_place_are_the_steps_own() {
        let before = Place {
            cpu: 1,
            looks: 4,
            away: 1,
            last_away: Some(3),
            blind: 1,
        };
        let quiet = Place { looks: 6, ..before };
        let d = quiet.since(&before);
        assert_eq!((d.looks, d.away, d.blind, d.last_away), (2, 0, 0, None));
        let moved = Place {
            looks: 7,
            away: 2,
            last_away: Some(0),
            ..before
        };
        let d = moved.since(&before);
        assert_eq!((d.looks, d.away, d.off(), d.last_away), (3, 1, 1, Some(0)));
    }
}
