//! The peer: the protocol, the server behind `osmeter serve` (its arguments are parsed in
//! commands::serve), the client, and the loopback peer that `osmeter run` starts as a
//! separate process (docs/PEER.md).

pub mod client;
#[cfg(unix)]
pub(crate) mod local;
pub mod protocol;
pub(crate) mod server;
