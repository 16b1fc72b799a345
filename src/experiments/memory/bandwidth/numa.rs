//! mem.bandwidth on machines with several NUMA nodes (docs/METHODOLOGY.md, mem.bandwidth,
//! "Several NUMA nodes"): one thread reading memory first touched on another node, and
//! the load latency from a CPU of each node to memory of each node (the node matrix).

use super::kernel::{team, touch, Part};
use super::{Op, Placed, Streams, BLOCK};
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

/// Runs `f` on a thread pinned to `cpu`; records pin failures and moves in `placed`.
fn on_cpu<R: Send>(placed: &mut Placed, what: &str, cpu: usize, f: impl FnOnce() -> R + Send) -> R {
    use crate::platform::{current_cpu, pin_to_cpu, Pinning};
    let (r, pin, after) = std::thread::scope(|s| {
        s.spawn(|| {
            let pin = pin_to_cpu(cpu);
            let r = f();
            (r, pin, current_cpu())
        })
        .join()
        .expect("placement thread panicked")
    });
    placed.teams += 1;
    match pin {
        Ok(Pinning::Hard) => {}
        Ok(p) => {
            if placed.unknown.is_none() {
                placed.unknown = Some(p.reason().unwrap_or("no hard pinning").to_string());
            }
        }
        Err(e) => placed
            .misplaced
            .push(format!("{what}: could not pin to CPU {cpu} ({e})")),
    }
    match after {
        Some(c) if c != cpu => placed
            .misplaced
            .push(format!("{what}: placed on CPU {cpu}, ended on CPU {c}")),
        Some(_) => {}
        None => {
            if placed.unknown.is_none() {
                placed.unknown = Some("this system does not say which CPU a thread runs on".into());
            }
        }
    }
    r
}

/// Remote read bandwidth and the node latency matrix. `nodes` are (node, CPUs in spread
/// order), this thread's node first.
pub(super) fn per_node(
    run: &mut Streams,
    nodes: &[(usize, Vec<usize>)],
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let ctx = run.ctx;
    let home = nodes[0].0;
    let name_of = |prefix: &str, b: usize| {
        if nodes.len() == 2 {
            format!("{prefix}_remote")
        } else {
            format!("{prefix}_remote_node{b}")
        }
    };
    // Read bandwidth of this thread (on the home node) from another node's memory.
    for (b, cpus_b) in &nodes[1..] {
        let region = Region::new(run.size, Pages::Base)?;
        let part = Part {
            base: region.as_ptr() as usize,
            len: run.size / BLOCK * BLOCK,
        };
        let name = format!("{}_1t", name_of("read", *b));
        (ctx.progress)(&format!("{name}: memory faulted in on node {b}"));
        on_cpu(&mut run.placed, &name, cpus_b[0], || touch(part));
        run.placed.pages_on_nodes(vec![Some(*b)], &[part]);
        let q = team(ctx, Op::Read, &[part], run.cpus, run.spec, false);
        run.placed.add(&name, &q);
        let q = q.m;
        run.preempted += q.preempted;
        run.kept += q.per_op_ns.len();
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
    // Load latency, CPU node x memory node: a random single-cycle chase over a buffer
    // far larger than the last-level cache, laid (first touched) on the memory node.
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
        on_cpu(&mut run.placed, &what, cpus_b[0], || {
            lay_at(base, line, &next)
        });
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
            let m = on_cpu(&mut run.placed, &what, cpus_a[0], move || {
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
                    name_of("latency", *b)
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
