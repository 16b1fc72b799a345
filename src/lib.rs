//! osmeter: what a machine and its OS really cost, measured honestly.
//!
//! The binary (`main.rs`) only calls `commands::main`: `commands` parses each subcommand
//! and calls the rest, where `runner` plans and runs experiments on the shared `harness`
//! and `clock`, `results` is the document they produce, and `report` renders it.
//!
//! On Windows only the peer is built (`osmeter serve`, `commands::serve_only`): `error`,
//! `peer`, the serve command and the Windows platform layer; everything that measures
//! is Unix-only.

#[cfg(unix)]
pub(crate) mod analysis;
#[cfg(unix)]
pub mod clock;
pub mod commands;
#[cfg(unix)]
pub(crate) mod compare;
pub(crate) mod error;
#[cfg(unix)]
pub mod experiments;
#[cfg(unix)]
pub mod findings;
#[cfg(unix)]
pub(crate) mod grade;
#[cfg(unix)]
pub(crate) mod harness;
#[cfg(unix)]
pub(crate) mod history;
#[cfg(unix)]
pub(crate) mod io;
#[cfg(unix)]
pub mod machine;
#[cfg(unix)]
pub(crate) mod opaque;
#[cfg(unix)]
pub(crate) mod pagecache;
pub mod peer;
#[cfg(unix)]
pub mod platform;
#[cfg(windows)]
#[path = "platform/windows.rs"]
pub mod platform;
#[cfg(unix)]
pub mod report;
#[cfg(unix)]
pub mod results;
#[cfg(unix)]
pub mod rng;
#[cfg(unix)]
pub mod runner;
#[cfg(unix)]
pub mod scratch;
#[cfg(unix)]
pub(crate) mod sentinel;
#[cfg(unix)]
pub(crate) mod stats;
#[cfg(unix)]
pub(crate) mod units;
#[cfg(unix)]
pub(crate) mod watch;
