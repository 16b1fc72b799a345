//! The arguments that say where and against what a measuring command runs, shared by
//! `run` and `watch` so both accept the same peer, names, scratch folder and host-cache
//! assertion, spelled and checked alike.

use crate::error::{Error, Result};
use crate::experiments::RunOptions;
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
pub(super) struct Args {
    /// Pin single-threaded work to this CPU (default: the topology's choice, a performance
    /// core other than CPU 0's core; `osmeter machine` shows it and why).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Remote peer for network experiments (HOST[:PORT]; default: loopback).
    #[arg(long)]
    peer: Option<String>,
    /// Shared token for the peer.
    #[arg(long)]
    peer_token: Option<String>,
    /// How reports and the history name the --peer host (e.g. its inventory name).
    #[arg(long, requires = "peer")]
    peer_name: Option<String>,
    /// How reports and the history name this host (default: its hostname).
    #[arg(long)]
    host_name: Option<String>,
    /// Where file experiments write (default: a new folder under the current directory).
    #[arg(long)]
    scratch_dir: Option<PathBuf>,
    /// In a VM: assert the host serves its disk uncached (qemu/libvirt cache=none), so
    /// uncached reads the guest's disk counter saw count as proven (default: unverified).
    #[arg(long, value_name = "MODE", value_parser = ["none"])]
    host_cache: Option<String>,
}

impl Args {
    /// The run options these arguments give, with the command's own remote folder and
    /// cache-dropping choice; a malformed --peer is a usage error before anything runs.
    pub(super) fn options(
        &self,
        remote_dir: Option<PathBuf>,
        drop_caches: bool,
    ) -> Result<RunOptions> {
        if let Some(Err(e)) = self.peer.as_deref().map(crate::peer::client::parse_peer) {
            return Err(Error::usage(e.to_string()));
        }
        Ok(RunOptions {
            peer: self.peer.clone(),
            peer_token: self.peer_token.clone(),
            host_name: self.host_name.clone(),
            peer_name: self.peer_name.clone(),
            remote_dir,
            scratch_dir: self.scratch_dir.clone(),
            drop_caches,
            host_cache_none: self.host_cache.is_some(),
        })
    }
}
