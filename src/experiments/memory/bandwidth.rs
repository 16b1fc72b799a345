//! mem.bandwidth (in progress).
use crate::experiments::{Context, Experiment, Outcome, Profile};
use std::time::Duration;
pub struct Bandwidth;
impl Experiment for Bandwidth {
    fn id(&self) -> &'static str {
        "mem.bandwidth"
    }
    fn title(&self) -> &'static str {
        "Memory bandwidth"
    }
    fn description(&self) -> &'static str {
        "x"
    }
    fn method(&self) -> &'static str {
        "x"
    }
    fn budget(&self, _p: Profile) -> Duration {
        Duration::from_secs(1)
    }
    fn run(&self, _ctx: &Context) -> anyhow::Result<Outcome> {
        Ok(Outcome::skipped("todo"))
    }
}
