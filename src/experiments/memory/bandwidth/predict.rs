//! mem.bandwidth's predictions: a core's stream rate from mem.latency's sequential chase,
//! times the cores, capped by the DIMMs' peak where it is known.

use super::{figures, placement_topology, Op};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::Context;
use crate::results::Prediction;

/// Theoretical peak of the DIMMs (speed x width x channels), or why it is unknown.
pub(super) fn dimm_peak(ctx: &Context) -> Result<(f64, String), String> {
    let m = &ctx.machine.memory;
    match m.peak_bandwidth_bytes_per_s {
        Some(peak) => Ok((peak, format!("machine: {}", m.peak_bandwidth_note))),
        None => Err(m.peak_bandwidth_note.clone()),
    }
}

/// Per line of an operation's bytes: the line fills it needs from memory (a store reads
/// its line for ownership, a copy fills source and destination, a non-temporal store
/// none) and the lines crossing the bus for the DIMMs' cap (fills plus write-backs).
fn lines_per_line(op: Op) -> (f64, f64) {
    match op {
        Op::Read | Op::ReadScalar => (1.0, 1.0),
        Op::Write | Op::WriteScalar => (1.0, 2.0),
        Op::Copy => (2.0, 3.0),
        Op::WriteNt => (0.0, 1.0),
    }
}

/// One core streams no slower than mem.latency's sequential chase brings in lines; an
/// operation needing k fills per line gets 1/k of that; N physical cores N times it,
/// capped by the DIMMs' peak over the bus lines each line costs, where that is known.
pub(super) fn predict_streams(ctx: &Context) -> Vec<(String, Prediction)> {
    let n = ctx.machine.cpu.allowed_cpus.len().max(1);
    let topo = placement_topology(ctx);
    let allowed = &ctx.machine.cpu.allowed_cpus;
    let line = crate::experiments::kit::line_bytes(&ctx.machine.data_caches()) as f64;
    let mut p = Predictions::new(ctx);
    let seq = p.earlier("mem.latency", &["dram_sequential"]);
    let peak = dimm_peak(ctx);
    for f in figures(n, ctx.profile) {
        let k = f.threads;
        let cpus = topo.spread(allowed, k);
        let cores = k - topo.describe_cpus(&cpus).smt_shared.len();
        let cap = peak
            .as_ref()
            .ok()
            .map(|(p, s)| per_socket(&topo, &cpus, *p, s.clone()));
        p.add(
            &f.name(),
            stream_prediction(f.op, k, cores, line, &seq, cap),
        );
    }
    p.done()
}

/// One stream figure's prediction (see `predict_streams`), or why there is none.
pub(super) fn stream_prediction(
    op: Op,
    threads: usize,
    cores: usize,
    line: f64,
    seq: &Input,
    cap: Option<(f64, String)>,
) -> Prediction {
    let Some(t) = seq.value().filter(|t| *t > 0.0) else {
        return without_chase(op, threads, seq, cap);
    };
    let fills = lines_per_line(op).0;
    let one = line / t * 1e9;
    let (per_core, what) = if fills > 0.0 {
        let s = if fills > 1.0 { "s" } else { "" };
        (one / fills, format!("{fills} line fill{s} per line"))
    } else {
        (
            one,
            "no fill (no read for ownership), so at least the one-fill rate: a lower bound".into(),
        )
    };
    let rate = per_core * cores as f64;
    let scope = if cores > 1 {
        format!(
            "; x {cores} physical cores, each streaming as one does (the memory's own limit is \
             in the model only where the DIMM peak is known), so not a bound"
        )
    } else {
        String::new()
    };
    let p = Prediction::new(
        rate,
        format!(
            "line / dram_sequential / fills ({what}): one core receives one line per step of \
             mem.latency's sequential chase, where each load waits for the last and only the \
             prefetcher keeps lines in flight, so a stream that does not wait is no slower{scope}"
        ),
    );
    let p = seq
        .attach(p)
        .machine("line", line, "bytes", "machine: cache line size (sysfs)")
        .method(
            "fills",
            fills,
            "fills/line",
            "method: line fills per line of the operation's bytes (read 1, store 1 for ownership, copy 2, non-temporal 0)",
        )
        .machine(
            "cores",
            cores as f64,
            "cores",
            "machine: physical cores the threads run on (Topology::spread; SMT siblings share one)",
        );
    // One core's stream is no slower than the chase it is built from: a lower bound. Over
    // several cores the product assumes the memory keeps up, which nothing here bounds.
    let p = if cores == 1 { p.lower_bound() } else { p };
    match cap {
        Some(cap) if threads > 1 => dimm_capped(p, rate, op, cap),
        _ => p,
    }
}

/// `p` (of `rate`) capped by the DIMMs' peak over the bus lines each line of `op` costs,
/// where that is lower.
fn dimm_capped(p: Prediction, rate: f64, op: Op, (peak, src): (f64, String)) -> Prediction {
    let bus = lines_per_line(op).1;
    if peak / bus >= rate {
        return p;
    }
    let cost = if bus > 1.0 {
        "fill and write-back"
    } else {
        "one transfer"
    };
    Prediction {
        value: peak / bus,
        formula: format!(
            "{}; capped by the DIMMs' peak / {bus} bus lines per line ({cost} each line costs)",
            p.formula
        ),
        ..p
    }
    .machine("dimm_peak", peak, "bytes/s", src)
    .method(
        "bus_lines",
        bus,
        "lines",
        "method: memory-bus lines per line of the operation's bytes",
    )
}

/// Without the sequential chase only the N-thread read keeps a bound: the DIMMs' peak.
fn without_chase(op: Op, threads: usize, seq: &Input, cap: Option<(f64, String)>) -> Prediction {
    match cap {
        Some((peak, src)) if threads > 1 && op == Op::Read => Prediction::new(
            peak,
            "the DIMMs' theoretical peak (an upper bound for N threads)",
        )
        .upper_bound()
        .machine("dimm_peak", peak, "bytes/s", src)
        .machine(
            "threads",
            threads as f64,
            "threads",
            "machine: CPUs this process may use",
        ),
        _ => Prediction::withheld(
            seq.why_missing()
                .unwrap_or("mem.latency's dram_sequential is not a positive time"),
        ),
    }
}

/// The DIMM peak of the sockets the N-thread team ran on: the machine's peak divided
/// among its packages (assuming each socket has the same modules), times the packages
/// used. One package: the machine's peak. Where NUMA nodes are finer than packages
/// (sub-NUMA clustering: each node has its share of a socket's channels), the share is
/// per node instead.
pub(super) fn per_socket(
    t: &crate::machine::Topology,
    cpus: &[usize],
    peak: f64,
    src: String,
) -> (f64, String) {
    let packages = t.packages.unwrap_or(1);
    let by_node =
        t.numa_nodes.is_some_and(|n| n > packages) && t.cpus.iter().all(|c| c.node.is_some());
    let (units, what) = if by_node {
        (t.numa_nodes.unwrap_or(1), "NUMA nodes")
    } else {
        (packages, "sockets")
    };
    if units < 2 {
        return (peak, src);
    }
    let mut used: Vec<usize> = cpus
        .iter()
        .filter_map(|&c| {
            let p = t.place(c)?;
            if by_node {
                p.node
            } else {
                p.package.map(|x| x as usize)
            }
        })
        .collect();
    used.sort();
    used.dedup();
    let k = used.len().clamp(1, units);
    (
        peak * k as f64 / units as f64,
        format!(
            "{src}; the peak of the {k} of {units} {what} the threads ran on (the machine's peak / {units} per {}, assuming each has the same share of the memory channels)",
            &what[..what.len() - 1]
        ),
    )
}
