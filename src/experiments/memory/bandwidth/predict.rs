//! mem.bandwidth's predictions: one core from mem.latency's sequential chase, a team only
//! below the DIMMs' peak where that is known.

use super::{buffer, figures, numa, placement_topology, Op};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::{Context, Profile};
use crate::machine::topology::CpuPlace;
use crate::machine::Topology;
use crate::results::Prediction;
use crate::units::fmt_bytes;
use std::collections::BTreeSet;

/// The DIMMs' theoretical peak of the sockets `cpus` are on (`per_socket`).
pub(super) fn team_peak(ctx: &Context, topo: &Topology, cpus: &[usize]) -> Peak {
    let m = &ctx.machine.memory;
    let peak = m.peak_bandwidth_bytes_per_s.ok_or(&m.peak_bandwidth_note)?;
    let src = format!("machine: {}", m.peak_bandwidth_note);
    Ok(per_socket(topo, cpus, peak, src))
}

/// The DIMMs' peak and its source, or why it is unknown.
pub(super) type Peak = Result<(f64, String), String>;

const COPY_UNKNOWN: &str = "memcpy picks its stores by size and CPU (rep movsb, vector or \
    non-temporal stores), so whether each destination line is first read for ownership (2 \
    fills per line, or 1) is not known here, and no measured primitive prices the copy";
const NT_UNKNOWN: &str = "non-temporal stores fill no line: their rate is how fast the \
    write-combining buffers drain to memory, which no measured primitive or table entry gives";

pub(super) fn streams(ctx: &Context, profile: Profile) -> Vec<(String, Prediction)> {
    let allowed = &ctx.machine.cpu.allowed_cpus;
    let cpus = allowed.len().max(1);
    let n = buffer(ctx.machine, profile, cpus).map_or(cpus, |b| b.1);
    let topo = placement_topology(ctx);
    let line = crate::experiments::kit::line_bytes(&ctx.machine.data_caches()) as f64;
    let line = Input::machine("line", Some(line), "bytes", "machine: cache line size", "");
    let mut p = Predictions::new(ctx);
    let seq = sequential(&p, ctx);
    for f in figures(n, profile) {
        let name = f.name();
        match (f.threads, f.op) {
            (1, Op::Copy) => p.withhold(&[&name], COPY_UNKNOWN),
            (1, Op::WriteNt) => p.withhold(&[&name], NT_UNKNOWN),
            (1, op) => p.state(&name, &[&line, &seq], |v| one_core(op, v[0] / v[1] * 1e9)),
            (k, op) if k == n => {
                let peak = team_peak(ctx, &topo, &topo.spread(allowed, k));
                p.add(&name, team_bound(op, k, peak));
            }
            // Intermediate teams are a series, not metrics.
            _ => {}
        }
    }
    numa::predictions(&mut p, &topo, allowed);
    p.done()
}

/// mem.latency's sequential chase, missing where its description puts it within twice the
/// last-level cache: a chase the cache holds gives the cache's rate, not memory's.
fn sequential(p: &Predictions, ctx: &Context) -> Input {
    let seq = p.earlier("mem.latency", &["dram_sequential"]).positive();
    let Some(m) = ctx.earlier.metric("mem.latency", "dram_sequential") else {
        return seq;
    };
    let llc = crate::experiments::kit::llc_or_assumed(&ctx.machine.data_caches()).0 as f64;
    let Some(s) = chase_size(&m.description).filter(|&s| s < 2.0 * llc) else {
        return seq;
    };
    let (at, cache) = (fmt_bytes(s), fmt_bytes(llc));
    let why = format!(
        "mem.latency's sequential chase ran at {at}, within twice the last-level cache \
         ({cache}): its rate is the cache's, not memory's"
    );
    Input::missing("dram_sequential", why)
}

/// The size after the last " at " of a description ("... at 16.0 MiB (address order)").
fn chase_size(description: &str) -> Option<f64> {
    let mut w = description.rsplit(" at ").next()?.split_whitespace();
    let v: f64 = w.next()?.parse().ok()?;
    let unit = w.next()?;
    let k = ["B", "KiB", "MiB", "GiB", "TiB"]
        .iter()
        .position(|u| *u == unit)?;
    Some(v * 1024f64.powi(k as i32))
}

/// One core at `rate` (line / dram_sequential): a bound for a vectorised read; a point for
/// a scalar loop (the core's issue may be the limit) and for stores.
fn one_core(op: Op, rate: f64) -> Prediction {
    let chase = "line / dram_sequential: one core receives one line per step of \
        mem.latency's sequential chase, where each load waits for the last and only the \
        prefetcher keeps lines in flight";
    let why = match op {
        Op::Read => "a stream whose loads do not wait for each other is no slower: a lower bound",
        Op::ReadScalar => {
            "the scalar loop issues one load per word, 8 per 64-byte line, so the \
            core, not memory, may set its rate: a point, not a bound"
        }
        _ => {
            "a store fills its line as a load does (the read for ownership) and the write-back \
            shares the bus; a core that streams stores without reading them is faster: a \
            point, not a bound"
        }
    };
    let p = Prediction::new(rate, format!("{chase}; {why}"));
    match op {
        Op::Read => p.lower_bound(),
        _ => p,
    }
}

/// A team of `k`: bounded only by the DIMMs' peak over the bus lines a line of `op` needs.
fn team_bound(op: Op, k: usize, peak: Peak) -> Prediction {
    let (peak, src) = match peak {
        Ok(p) => p,
        Err(why) => {
            return Prediction::withheld(format!(
                "{k} threads share the memory system, which no measured figure prices (one \
                 core's rate times {k} ignores it); only the DIMMs' peak would bound them, and \
                 it is unknown: {why}"
            ))
        }
    };
    let bus = if op == Op::Copy { 2.0 } else { 1.0 };
    Prediction::new(
        peak / bus,
        format!(
            "the DIMMs' peak / {bus} bus line(s) per line of the operation's bytes, an upper \
             bound (each line crosses the bus at least once, a copy's twice; a read for \
             ownership, where the core does one, adds more)"
        ),
    )
    .upper_bound()
    .machine("dimm_peak", peak, "bytes/s", src)
    .method(
        "bus_lines",
        bus,
        "lines",
        "method: the fewest memory-bus lines per line of the operation's bytes",
    )
}

/// The machine's peak per package `cpus` use, or per node under sub-NUMA clustering.
pub(super) fn per_socket(t: &Topology, cpus: &[usize], peak: f64, src: String) -> (f64, String) {
    let packages = t.packages.unwrap_or(1);
    let by_node =
        t.numa_nodes.is_some_and(|n| n > packages) && t.cpus.iter().all(|c| c.node.is_some());
    let (units, what) = if by_node {
        (t.numa_nodes.unwrap_or(1), "NUMA node")
    } else {
        (packages, "socket")
    };
    if units < 2 {
        return (peak, src);
    }
    let unit = |p: &CpuPlace| {
        if by_node {
            p.node
        } else {
            p.package.map(|x| x as usize)
        }
    };
    let used: BTreeSet<usize> = cpus.iter().filter_map(|&c| unit(t.place(c)?)).collect();
    let k = used.len().clamp(1, units);
    (
        peak * k as f64 / units as f64,
        format!(
            "{src}; the peak of the {k} of {units} {what}s the threads ran on (the machine's peak / {units} per {what}, assuming each has the same share of the memory channels)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::memory::latency::sequential_description;
    use crate::experiments::testing::{recorded, World};
    use crate::results::Bound;

    /// The size is read back from mem.latency's own description of the chase, as written.
    #[test]
    fn the_chase_size_reads_back_from_mem_latency_s_description() {
        for b in [
            16.0 * 1024.0,
            3.0 * 1024f64.powi(2),
            256.0 * 1024f64.powi(2),
            64.0 * 1024f64.powi(3),
        ] {
            let d = sequential_description(64, &fmt_bytes(b));
            let got = chase_size(&d).unwrap_or(f64::NAN);
            assert!((got / b - 1.0).abs() < 0.01, "{d}: {got}");
        }
    }

    /// A 2-socket server of 64 cores (no SMT, a node per socket), after a mem.latency that
    /// measured a 2 ns sequential chase (32 GB/s per core: 2 TB/s for 64 cores uncapped).
    fn server(w: &mut World, peak: Option<f64>) {
        use crate::machine::topology::{build, RawCpu};
        let raw = (0..64usize).map(|c| RawCpu {
            cpu: c,
            package: Some((c / 32) as u32),
            core_key: Some(c.to_string()),
            llc_key: Some((3, (c / 32).to_string())),
            node: Some(c / 32),
            ..Default::default()
        });
        let all: Vec<usize> = (0..64).collect();
        w.machine.topology = build(raw.collect(), &all, "test");
        w.machine.cpu.allowed_cpus = all;
        w.machine.memory.peak_bandwidth_bytes_per_s = peak;
        let mut o = crate::experiments::Outcome::default();
        let seq = &sequential_description(64, &fmt_bytes(64.0 * 1024f64.powi(3)));
        o.metric("dram_sequential", "ns", seq, vec![2.0; 5]);
        o.metric("dram", "ns", "", vec![100.0; 5]);
        w.earlier = vec![recorded("mem.latency", o)];
    }

    /// Threads of a figure "OP_Nt".
    fn threads(name: &str) -> usize {
        let t = name.rsplit('_').next().unwrap_or("");
        t.trim_end_matches('t').parse().unwrap_or(0)
    }

    /// On a many-core server no team figure is a point of cores x one core's rate: without
    /// the DIMMs' peak each is withheld, with it each is an upper bound at or below the
    /// peak, built from no chase figure (so no other core kind's).
    #[test]
    fn a_64_core_team_is_never_cores_times_one_core() {
        let clock = crate::clock::MockClock::new(1);
        let mut w = World::live(&clock);
        for peak in [None, Some(400e9)] {
            server(&mut w, peak);
            let v = w.with_ctx(|ctx| streams(ctx, Profile::Standard));
            let teams: Vec<_> = v.iter().filter(|(n, _)| threads(n) > 1).collect();
            // read, write and copy; write_nt too where the target has non-temporal stores.
            assert!(teams.len() >= 3, "{v:?}");
            for (n, p) in teams {
                match peak {
                    None => {
                        let why = p.withheld.as_deref().unwrap_or("");
                        assert!(why.contains("DIMMs' peak"), "{n}: {p:?}");
                    }
                    Some(pk) => {
                        assert_eq!(p.bound, Some(Bound::Upper), "{n}: {p:?}");
                        assert!(p.value <= pk, "{n}: {p:?}");
                        assert!(!p.inputs.contains_key("dram_sequential"), "{n}");
                    }
                }
            }
            let get = |n: &str| &v.iter().find(|(m, _)| m == n).unwrap().1;
            // One core: the read a lower bound at 32 GB/s, stores a point, copy and
            // non-temporal stores withheld for want of a model.
            let read = get("read_1t");
            assert_eq!(read.bound, Some(Bound::Lower));
            assert!((read.value - 32e9).abs() < 1e3, "{read:?}");
            assert_eq!(get("write_1t").bound, None);
            assert_eq!(get("read_scalar_1t").bound, None);
            assert!(get("copy_1t")
                .withheld
                .as_deref()
                .unwrap()
                .contains("memcpy"));
            if cfg!(target_arch = "x86_64") {
                assert!(get("write_nt_1t").withheld.is_some());
            }
            // Two nodes: the local chase restates mem.latency's, the remote one is bounded
            // below by it, the remote read is withheld with its reason.
            assert!(get("latency_local").consistency);
            assert_eq!(get("latency_remote").bound, Some(Bound::Lower));
            let remote = get("read_remote_1t").withheld.as_deref().unwrap();
            assert!(remote.contains("interconnect"), "{remote}");
        }
    }

    /// A sequential chase that a cache holds is no memory rate: one core's streams are
    /// then withheld, saying so.
    #[test]
    fn a_chase_within_the_cache_prices_no_stream() {
        let clock = crate::clock::MockClock::new(1);
        let mut w = World::live(&clock);
        let mut o = crate::experiments::Outcome::default();
        let seq = &sequential_description(64, &fmt_bytes(16.0 * 1024.0));
        o.metric("dram_sequential", "ns", seq, vec![2.0; 5]);
        w.earlier = vec![recorded("mem.latency", o)];
        let v = w.with_ctx(|ctx| streams(ctx, Profile::Quick));
        let read = &v.iter().find(|(m, _)| m == "read_1t").unwrap().1;
        let why = read.withheld.as_deref().unwrap_or("");
        assert!(
            why.contains("within twice the last-level cache"),
            "{read:?}"
        );
        assert_eq!(chase_size("random chase at 1.5 GiB, base pages"), None);
        assert_eq!(
            chase_size("x at 1.5 GiB (y)"),
            Some(1.5 * (1u64 << 30) as f64)
        );
    }
}
