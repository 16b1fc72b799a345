//! Network experiments (docs/PEER.md): round trip, bandwidth and connection cost against
//! the loopback peer and, with `--peer`, a remote `osmeter serve` (metrics `remote_`...).

use super::predict::Predictions;
use super::{Context, Outcome};
use crate::peer::client::{resolve_peer, Client};
use crate::peer::local::LocalPeer;
use crate::results::Prediction;
use std::sync::{Arc, Mutex};

pub(crate) mod bandwidth;
pub(crate) mod connect;
mod icmp;
pub(crate) mod rtt;

/// Where the experiments send their traffic.
pub(crate) struct PeerTarget {
    pub client: Client,
    /// The loopback peer, held alive while the target is in use; None for a remote one.
    pub local: Option<Arc<LocalPeer>>,
    /// "loopback peer 127.0.0.1:40000 (...)" or "remote peer HOST (ADDR)".
    pub label: String,
    /// "" (loopback) or "remote_", in front of every metric and check name.
    pub prefix: &'static str,
}

impl PeerTarget {
    pub fn name(&self, metric: &str) -> String {
        format!("{}{metric}", self.prefix)
    }
    pub fn remote(&self) -> bool {
        self.local.is_none()
    }
}

static LOCAL_PEER: Mutex<Option<Arc<LocalPeer>>> = Mutex::new(None);
static CLEANUP: std::sync::Once = std::sync::Once::new();

/// Stops the shared loopback peer at exit; a killed run's peer exits when its stdin closes.
extern "C" fn stop_local_peer() {
    if let Ok(mut g) = LOCAL_PEER.try_lock() {
        g.take();
    }
}

/// The shared loopback peer, started on first use and restarted if it died.
fn local_peer(ctx: &Context) -> anyhow::Result<Arc<LocalPeer>> {
    let mut g = LOCAL_PEER
        .lock()
        .map_err(|_| anyhow::anyhow!("loopback peer lock poisoned"))?;
    // A peer some experiment still holds is alive by construction; check only ours.
    if g.as_mut()
        .and_then(Arc::get_mut)
        .is_some_and(|p| !p.alive())
    {
        *g = None;
    }
    if let Some(p) = g.as_ref() {
        return Ok(p.clone());
    }
    let peer = Arc::new(LocalPeer::start(&ctx.allowed_cpus())?);
    CLEANUP.call_once(|| {
        // SAFETY: registering a plain extern "C" fn with no arguments is always sound.
        unsafe { libc::atexit(stop_local_peer) };
    });
    *g = Some(peer.clone());
    Ok(peer)
}

/// The run's targets, each noted in `out`: the loopback peer, then the `--peer` host.
fn targets(ctx: &Context, out: &mut Outcome) -> anyhow::Result<Vec<PeerTarget>> {
    (ctx.progress)("starting the peer");
    let peer = local_peer(ctx)?;
    let mut v = vec![PeerTarget {
        client: Client::new(peer.addr(), Some(peer.token().to_string())),
        label: peer.describe(),
        local: Some(peer),
        prefix: "",
    }];
    if let Some(spec) = &ctx.options.peer {
        let addr = resolve_peer(spec)?;
        let label = if spec.trim() == addr.to_string() {
            format!("remote peer {addr}")
        } else {
            format!("remote peer {} ({addr})", spec.trim())
        };
        v.push(PeerTarget {
            client: Client::new(addr, ctx.options.peer_token.clone()),
            local: None,
            label,
            prefix: "remote_",
        });
    }
    out.notes
        .extend(v.iter().map(|t| format!("target: {}", t.label)));
    Ok(v)
}

/// Each target measured by `measure` with its share of the budget (the runner gives a
/// network experiment one budget per target), the metrics pooled, then `findings` per target.
pub(crate) fn each_target<M>(
    ctx: &Context,
    mut measure: impl FnMut(&Context, &PeerTarget, &mut Outcome) -> anyhow::Result<M>,
    mut findings: impl FnMut(&mut Outcome, &PeerTarget, &M),
) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let targets = targets(ctx, &mut out)?;
    let ctx = &Context {
        budget: ctx.budget / targets.len().max(1) as u32,
        ..*ctx
    };
    let mut measured = Vec::new();
    for t in &targets {
        measured.push(measure(ctx, t, &mut out)?);
    }
    out.pool(ctx);
    for (t, m) in targets.iter().zip(&measured) {
        findings(&mut out, t, m);
    }
    Ok(out)
}

/// `state`'s predictions for the loopback peer, then (`remote_` in front) for the `--peer` host.
pub(crate) fn predict_each(
    ctx: &Context,
    mut state: impl FnMut(&mut Predictions, Option<&str>),
) -> Vec<(String, Prediction)> {
    let remote = ctx.options.peer.as_deref().map(|s| (Some(s), "remote_"));
    let mut v = Vec::new();
    for (spec, prefix) in [(None, "")].into_iter().chain(remote) {
        let mut p = Predictions::new(ctx);
        state(&mut p, spec);
        for (name, x) in p.done() {
            v.push((format!("{prefix}{name}"), x));
        }
    }
    v
}

pub(crate) use crate::platform::net::{route_interface, udp_to};

/// Round trips per CPU as "CPU 0 (97%), CPU 1 (3%)".
pub(crate) fn describe_cpus(cpus: &[(u32, u64)]) -> String {
    let total: u64 = cpus.iter().map(|c| c.1).sum::<u64>().max(1);
    let mut v = cpus.to_vec();
    v.sort_by_key(|c| std::cmp::Reverse(c.1));
    v.iter()
        .map(|(c, n)| format!("CPU {c} ({:.0}%)", 100.0 * *n as f64 / total as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CPU a peer spent most round trips on and its share.
pub(crate) fn main_cpu(cpus: &[(u32, u64)]) -> Option<(u32, f64)> {
    let total: u64 = cpus.iter().map(|c| c.1).sum();
    cpus.iter()
        .max_by_key(|c| c.1)
        .filter(|_| total > 0)
        .map(|&(c, n)| (c, n as f64 / total as f64))
}

pub(crate) fn percentiles(out: &Outcome, name: &str) -> Option<crate::stats::Percentiles> {
    out.get(name)?.summary.percentiles.clone()
}

/// ns per call of `op`, up to `max_n` within `budget`, stopping at the first error; no
/// preemption check, as every operation here waits for another task.
pub(crate) fn sample(
    ctx: &Context,
    max_n: usize,
    budget: std::time::Duration,
    op: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<Vec<f64>> {
    let spec = crate::harness::SampleSpec::new(max_n, budget);
    Ok(ctx.harness(1).try_sample(&spec, op)?.ns)
}

#[cfg(test)]
mod tests;
