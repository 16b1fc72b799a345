//! Memory experiments: load latency per working-set size with detected cache levels,
//! bandwidth, loaded latency and page-fault service time.

pub(crate) mod bandwidth;
pub mod latency;
pub(crate) mod loaded_latency;
pub(crate) mod pagefault;
#[cfg(test)]
mod tests;
