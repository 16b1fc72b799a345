//! Memory experiments: load latency per working-set size with detected cache levels,
//! bandwidth, loaded latency and page-fault service time.

use super::Experiment;

pub(crate) mod bandwidth;
pub mod latency;
pub(crate) mod loaded_latency;
pub(crate) mod pagefault;
#[cfg(test)]
mod tests;

/// In run order: latency first (bandwidth and page-fault findings use its DRAM figure),
/// loaded-latency after both (it predicts from them).
pub(crate) fn experiments() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(latency::Latency),
        Box::new(bandwidth::MemBandwidth),
        Box::new(loaded_latency::LoadedLatency),
        Box::new(pagefault::PageFault),
    ]
}
