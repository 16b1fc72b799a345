//! osmeter: what a machine and its OS really cost, measured honestly.
//!
//! The binary (`main.rs`) only calls `commands::main`: `commands` parses each subcommand
//! and calls the rest, where `runner` plans and runs experiments on the shared `harness`
//! and `clock`, `results` is the document they produce, and `report` renders it.

pub mod analysis;
pub mod clock;
pub mod commands;
pub mod compare;
pub mod error;
pub mod experiments;
pub mod findings;
pub mod harness;
pub mod history;
pub mod io;
pub mod machine;
pub mod opaque;
pub mod pagecache;
pub mod peer;
pub mod platform;
pub mod report;
pub mod results;
pub mod rng;
pub mod runner;
pub mod scratch;
pub mod sentinel;
pub mod stats;
pub mod units;
