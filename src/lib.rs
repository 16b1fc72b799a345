//! osmeter: what a machine and its OS really cost, measured honestly.
//!
//! The binary (`main.rs`) is a thin layer over this library: `runner` plans and runs
//! experiments on the shared `harness` and `clock`, `results` is the document they
//! produce, and `report` renders it.

pub mod clock;
pub mod experiments;
pub mod harness;
pub mod machine;
pub mod peer;
pub mod report;
pub mod results;
pub mod runner;
pub mod stats;
pub mod sys;
pub mod units;
