//! mem.loaded-latency's predictions: the idle chase from mem.latency, the peaks from
//! mem.bandwidth's figures for the same team, misses in flight by Little's law.

use super::{MIX_READS, MIX_WRITES};
use crate::experiments::kit;
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::Context;
use crate::results::Prediction;

const KNEE_UNMODELLED: &str = "where latency starts to rise depends on the memory \
    controller's queueing, which no measured primitive or table entry describes";

pub(super) fn predictions(ctx: &Context) -> Vec<(String, Prediction)> {
    let mut p = Predictions::new(ctx);
    let n = ctx.machine.cpu.allowed_cpus.len().max(1);
    let thp = kit::thp_available(ctx.machine);
    // mem.latency's DRAM figures most like the chase's, first first.
    let idle = p.earlier("mem.latency", &["dram_thp", "dram"][(!thp) as usize..]);
    let name = idle.name().to_string();
    let same = format!("mem.latency's {name}: the same chase, idle");
    p.same("idle_latency", &idle, same);
    let bound = format!(
        "mem.latency's {name}, a lower bound: a chase whose misses queue behind the load \
         threads' is never faster than the idle one (the queueing is not in the model)"
    );
    p.at_least("loaded_latency", &idle, &bound);
    p.at_least("loaded_latency_mix", &idle, bound);
    p.withhold(&["knee_bandwidth", "knee_bandwidth_mix"], KNEE_UNMODELLED);
    // The load threads' team: its read, and the first read and write pair measured.
    let (reads, writes) = (team_figures("read", n, thp), team_figures("write", n, thp));
    let bw = |m: &str| p.earlier("mem.bandwidth", &[m]);
    let pairs = reads.iter().zip(&writes).map(|(r, w)| [bw(r), bw(w)]);
    let pairs: Vec<[Input; 2]> = pairs.collect();
    let both = pairs.iter().find(|m| m.iter().all(|i| i.value().is_some()));
    let mix = both.unwrap_or(&pairs[0]).clone();
    let reads: Vec<&str> = reads.iter().map(String::as_str).collect();
    let read = p.earlier("mem.bandwidth", &reads);
    let line = kit::line_bytes(&ctx.machine.data_caches()) as f64;
    let line = Input::machine("line", Some(line), "bytes", "machine: cache line size", "");
    peaks(&mut p, n.saturating_sub(1).max(1), &read, &mix);
    misses(&mut p, &idle, &read, &mix, &line);
    p.done()
}

/// The same team's read for reads; for the mix, `mix_bandwidth` of its read and write.
fn peaks(p: &mut Predictions, k: usize, read: &Input, [r, w]: &[Input; 2]) {
    let name = read.name();
    let same = format!("mem.bandwidth's {name}: the read of as many threads as load threads ({k})");
    p.same("peak_bandwidth", read, same);
    let (rn, wn) = (r.name(), w.name());
    let text = format!(
        "3 / (2 / {rn} + 1 / {wn}): of every three lines two at mem.bandwidth's read rate and \
         one at its write rate (ordinary stores, whatever they cost there), {k} thread(s)"
    );
    let mix = |v: &[f64]| Prediction::new(mix_bandwidth(v[0], v[1]), text);
    p.state("peak_bandwidth_mix", &[r, w], mix);
}

/// Little's law on the team's bandwidths and the idle chase, on the mix's counted lines.
fn misses(p: &mut Predictions, idle: &Input, read: &Input, [ri, wi]: &[Input; 2], line: &Input) {
    let law = |of: &str, bw: &str, are: &str| {
        format!(
            "Little's law{of}: {bw} x {} / line (the idle latency for the loaded one, \
             which alone would make it low; but the {are} mem.bandwidth's, which the loaded \
             team may not reach: not a bound)",
            idle.name()
        )
    };
    let text = law("", read.name(), "bandwidth is");
    let little = |v: &[f64]| Prediction::new(v[0] / v[2] * v[1] * 1e-9, text);
    p.state("loaded_outstanding_misses", &[read, idle, line], little);
    let bw = format!("3 / (2 / {} + 1 / {})", ri.name(), wi.name());
    let text = law(" on the counted lines", &bw, "bandwidths are");
    let mix = |v: &[f64]| Prediction::new(mix_bandwidth(v[0], v[1]) / v[3] * v[2] * 1e-9, text);
    p.state("loaded_outstanding_misses_mix", &[ri, wi, idle, line], mix);
}

pub(super) fn outstanding(bandwidth: f64, line: usize, latency_ns: f64) -> f64 {
    bandwidth / line as f64 * latency_ns * 1e-9
}

/// mem.bandwidth's `op` figures for the load threads' team, most like it first (docs/methods).
pub(super) fn team_figures(op: &str, allowed: usize, thp: bool) -> Vec<String> {
    let k = allowed.saturating_sub(1).max(1);
    match (k, thp) {
        (1, true) => vec![format!("{op}_thp_1t"), format!("{op}_1t")],
        (1, false) => vec![format!("{op}_1t")],
        _ => vec![format!("{op}_{k}t"), format!("{op}_{allowed}t")],
    }
}

/// The mix's bandwidth: of every three lines two take a read's time and one a write's.
pub(super) fn mix_bandwidth(read: f64, write: f64) -> f64 {
    (MIX_READS + MIX_WRITES) as f64 / (MIX_READS as f64 / read + MIX_WRITES as f64 / write)
}
