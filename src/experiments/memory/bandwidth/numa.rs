//! mem.bandwidth on several NUMA nodes: remote reads and the node-to-node latency matrix.

use super::kernel::{touch, Part};
use super::{parts_of, Op, Streams};
use crate::experiments::kit::team::Team;
use crate::experiments::kit::{self, measure_raw, Pages, Region};
use crate::experiments::memory::latency::{chase, lay, UNROLL};
use crate::experiments::predict::Predictions;
use crate::experiments::Outcome;
use crate::machine::Topology;
use crate::rng::{sattolo, Rng};
use crate::units::fmt_bytes;

/// Runs `f` on a thread pinned to `cpu`, recording where it ran.
fn on_cpu<R: Send>(run: &mut Streams, what: &str, cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    let (r, placed) = Team::once(run.ctx.clock, cpu, f);
    run.placed.add(what, &placed);
    r
}

const REMOTE_READ: &str = "a stream from another node's memory is limited by the \
    interconnect and how far ahead the prefetcher reaches across it, which no measured \
    primitive or table entry gives (mem.latency's chases are on this node's memory)";

/// The local chase is mem.latency's own (a consistency check), a remote one no faster.
pub(super) fn predictions(p: &mut Predictions, topo: &Topology, allowed: &[usize]) {
    let nodes = topo.nodes_of(allowed);
    if nodes.len() < 2 {
        return;
    }
    let dram = p.earlier("mem.latency", &["dram"]);
    let same = "mem.latency's dram: a random chase over base pages on this node, at its \
        largest size (the sizes may differ)";
    p.same("latency_local", &dram, same);
    for (b, _) in &nodes[1..] {
        let read = format!("{}_1t", remote_name("read", nodes.len(), *b));
        p.withhold(&[&read], REMOTE_READ);
        let remote = remote_name("latency", nodes.len(), *b);
        let why = "mem.latency's dram, a lower bound: a load from another node's memory \
            takes the local path and crosses the interconnect too";
        p.at_least(&remote, &dram, why);
    }
}

/// `read_remote`, or `read_remote_node3` when there are more than two nodes.
fn remote_name(prefix: &str, nodes: usize, b: usize) -> String {
    match nodes {
        2 => format!("{prefix}_remote"),
        _ => format!("{prefix}_remote_node{b}"),
    }
}

/// Read bandwidth of this thread (on node `nodes[0]`) from each other node's memory.
pub(super) fn remote_reads(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let ctx = run.ctx;
    let home = nodes[0].0;
    for (b, cpus_b) in &nodes[1..] {
        let region = Region::new(run.size, Pages::Base)?;
        let part = parts_of(&region, 1)[0];
        let name = format!("{}_1t", remote_name("read", nodes.len(), *b));
        (ctx.progress)(&format!("{name}: memory faulted in on node {b}"));
        on_cpu(run, &name, cpus_b[0], || touch(part));
        run.placed.pages_on_nodes(&[Some(*b)], &[part]);
        let what = format!(
            "{}, 1 thread on CPU {} (node {home}) reading {} first touched by CPU {} (node {b})",
            Op::Read.describe(),
            run.cpus[0],
            fmt_bytes(part.len as f64),
            cpus_b[0]
        );
        run.figure(out, &name, Op::Read, &[part], false, Some(&what));
    }
    Ok(())
}

/// Load latency, CPU node x memory node, of a random chase laid on the memory node.
pub(super) fn latency_matrix(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let ctx = run.ctx;
    let home = nodes[0].0;
    let caches = ctx.machine.data_caches();
    let line = kit::line_bytes(&caches).max(8);
    let llc = kit::llc_or_assumed(&caches).0 as usize;
    let size = (4 * llc).max(64 << 20).min(run.size);
    let len = size / line * line;
    let next = sattolo(size / line, &mut Rng::new(0x6e75_6d61));
    let (clock, spec) = (ctx.clock, run.spec);
    let mut rows: Vec<Vec<[f64; 2]>> = vec![Vec::new(); nodes.len()];
    for (b, cpus_b) in nodes {
        let mut region = Region::new(len, Pages::Base)?;
        let what = format!("latency chain on node {b}");
        on_cpu(run, &what, cpus_b[0], || lay(&mut region, line, &next));
        let base = region.as_ptr() as usize;
        run.placed
            .pages_on_nodes(&[Some(*b)], &[Part { base, len }]);
        for (ai, (a, cpus_a)) in nodes.iter().enumerate() {
            let what = format!("latency from node {a} to node {b}");
            (ctx.progress)(&what);
            let m = on_cpu(run, &what, cpus_a[0], move || {
                let mut p = base as *const u8;
                let m = measure_raw(clock, spec, UNROLL as f64, |iters| {
                    // SAFETY: `lay` laid a single-cycle chain over the region, which
                    // lives until after this scoped thread is joined.
                    p = unsafe { chase(p, iters) };
                });
                std::hint::black_box(p);
                m
            });
            run.preempted += m.preempted;
            run.kept += m.per_op_ns.len();
            rows[ai].push([*b as f64, m.median_ns()]);
            if *a != home {
                continue;
            }
            let name = match *b == home {
                true => "latency_local".to_string(),
                false => remote_name("latency", nodes.len(), *b),
            };
            let what = format!(
                "one dependent load, CPU {} (node {a}) chasing a random cycle over {} of base pages first touched on node {b}",
                cpus_a[0],
                fmt_bytes(size as f64)
            );
            out.metric(&name, "ns", &what, m.per_op_ns);
        }
    }
    for ((a, _), points) in nodes.iter().zip(rows) {
        out.plot(&format!("latency_from_node{a}"), "node", "ns", points);
    }
    Ok(())
}
