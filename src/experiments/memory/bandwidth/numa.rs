//! mem.bandwidth on several NUMA nodes: remote read bandwidth and the node-to-node load
//! latency matrix.

use super::kernel::{touch, Part};
use super::{Op, Streams, BLOCK};
use crate::experiments::kit::team::Team;
use crate::experiments::kit::{measure_raw, Pages, Region};
use crate::experiments::Outcome;
use crate::results::Series;
use crate::rng::{sattolo, Rng};
use crate::units::fmt_bytes;

/// Measurement configurations `per_node` adds for `nodes` nodes: a remote read per other
/// node and a chase per (CPU node, memory node) pair.
pub(super) fn configs(nodes: usize) -> usize {
    nodes.saturating_sub(1) + nodes * nodes
}

/// Loads per iteration of the chase loop.
const UNROLL: u64 = 8;

/// Follows the chain `iters * UNROLL` steps from `p`.
///
/// # Safety
/// `p` must point into a chain laid by `lay_at`: each node's first word holds the address
/// of another node of the same live chain.
#[inline(never)]
unsafe fn chase(mut p: *const u8, iters: u64) -> *const u8 {
    for _ in 0..iters {
        for _ in 0..UNROLL {
            // SAFETY: guaranteed by the caller; volatile keeps every dependent load.
            p = unsafe { std::ptr::read_volatile(p as *const *const u8) };
        }
    }
    p
}

/// Lays a chain of `next.len()` nodes `stride` bytes apart from `base`: node i points to
/// node next[i]. Written by the calling thread, so the pages sit on its node.
fn lay_at(base: usize, stride: usize, next: &[u32]) {
    for (i, &j) in next.iter().enumerate() {
        // SAFETY: the caller's region holds next.len() * stride bytes from base (checked
        // by `per_node`); stride >= 8 and base is page-aligned, so each slot is aligned
        // and disjoint.
        unsafe {
            ((base + i * stride) as *mut usize).write(base + j as usize * stride);
        }
    }
}

/// Runs `f` on a thread pinned to `cpu`; records where it ran in `placed`.
fn on_cpu<R: Send>(run: &mut Streams, what: &str, cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    let (r, placed) = Team::once(run.ctx.clock, cpu, f);
    run.placed.add(what, &placed);
    r
}

/// Remote read bandwidth and the node latency matrix. `nodes` are (node, CPUs in spread
/// order), this thread's node first.
pub(super) fn per_node(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    remote_reads(run, nodes, out)?;
    latency_matrix(run, nodes, out)
}

/// `read_remote` or `read_remote_node3` style names: the node only when there are several.
fn remote_name(prefix: &str, nodes: usize, b: usize) -> String {
    if nodes == 2 {
        format!("{prefix}_remote")
    } else {
        format!("{prefix}_remote_node{b}")
    }
}

/// Read bandwidth of this thread (on the home node) from each other node's memory.
fn remote_reads(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let ctx = run.ctx;
    let home = nodes[0].0;
    for (b, cpus_b) in &nodes[1..] {
        let region = Region::new(run.size, Pages::Base)?;
        let part = Part {
            base: region.as_ptr() as usize,
            len: run.size / BLOCK * BLOCK,
        };
        let name = format!("{}_1t", remote_name("read", nodes.len(), *b));
        (ctx.progress)(&format!("{name}: memory faulted in on node {b}"));
        on_cpu(run, &name, cpus_b[0], || touch(part));
        run.placed.pages_on_nodes(vec![Some(*b)], &[part]);
        let q = run.stream(&name, Op::Read, &[part], false);
        out.metric(
            &name,
            "bytes/s",
            &format!(
                "{}, 1 thread on CPU {} (node {home}) reading {} first touched by CPU {} (node {b})",
                Op::Read.describe(),
                run.cpus[0],
                fmt_bytes(part.len as f64),
                cpus_b[0]
            ),
            q.per_op_ns.iter().map(|ns| 1e9 / ns).collect(),
        );
    }
    Ok(())
}

/// Load latency, CPU node x memory node: a random single-cycle chase over a buffer far
/// larger than the last-level cache, laid (first touched) on the memory node.
fn latency_matrix(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let ctx = run.ctx;
    let home = nodes[0].0;
    let line = crate::experiments::kit::line_bytes(&ctx.machine.data_caches()).max(8);
    let llc =
        crate::experiments::kit::llc_bytes(&ctx.machine.data_caches()).unwrap_or(32 << 20) as usize;
    let size = (4 * llc).max(64 << 20).min(run.size);
    let lines = size / line;
    let next = sattolo(lines, &mut Rng::new(0x6e75_6d61));
    let mut rows: Vec<Vec<[f64; 2]>> = vec![Vec::new(); nodes.len()];
    for (b, cpus_b) in nodes {
        let region = Region::new(lines * line, Pages::Base)?;
        let base = region.as_ptr() as usize;
        let what = format!("latency chain on node {b}");
        on_cpu(run, &what, cpus_b[0], || lay_at(base, line, &next));
        run.placed.pages_on_nodes(
            vec![Some(*b)],
            &[Part {
                base,
                len: lines * line,
            }],
        );
        for (ai, (a, cpus_a)) in nodes.iter().enumerate() {
            (ctx.progress)(&format!("latency from node {a} to node {b}"));
            let (clock, spec) = (ctx.clock, run.spec);
            let what = format!("latency from node {a} to node {b}");
            let m = on_cpu(run, &what, cpus_a[0], move || {
                let mut p = base as *const u8;
                let m = measure_raw(clock, spec, UNROLL as f64, |iters| {
                    // SAFETY: `lay_at` laid a single-cycle chain over the region, which
                    // lives until after this scoped thread is joined.
                    p = unsafe { chase(p, iters) };
                });
                std::hint::black_box(p);
                m
            });
            run.preempted += m.preempted;
            run.kept += m.per_op_ns.len();
            rows[ai].push([*b as f64, m.median_ns()]);
            if *a == home {
                let name = if *b == home {
                    "latency_local".to_string()
                } else {
                    remote_name("latency", nodes.len(), *b)
                };
                out.metric(
                    &name,
                    "ns",
                    &format!(
                        "one dependent load, CPU {} (node {a}) chasing a random cycle over {} of base pages first touched on node {b}",
                        cpus_a[0],
                        fmt_bytes(size as f64)
                    ),
                    m.per_op_ns.clone(),
                );
            }
        }
    }
    for (ai, (a, _)) in nodes.iter().enumerate() {
        out.series.push(Series {
            name: format!("latency_from_node{a}"),
            x_unit: "node".into(),
            y_unit: "ns".into(),
            points: std::mem::take(&mut rows[ai]),
        });
    }
    Ok(())
}
