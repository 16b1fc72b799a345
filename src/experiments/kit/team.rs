//! A pinned thread team that steps by generation, with a start barrier and per-thread
//! start and stop stamps on the run's clock (bandwidth, numa, loaded-latency,
//! core-to-core).
