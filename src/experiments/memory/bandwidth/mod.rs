//! mem.bandwidth: read, write and copy bandwidth of main memory, one thread and 1..N.

mod checks;
mod kernel;
mod numa;
mod predict;
mod text;

use crate::experiments::kit::team::Team;
use crate::experiments::kit::{self, measure_trials, Pages, Region};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Profile, Spec};
use crate::harness::HarnessConfig;
use crate::machine::Topology;
use crate::results::Prediction;
use crate::units::fmt_bytes;
use checks::{Placed, Together};
use kernel::Part;
use predict::team_peak;
use std::time::Duration;
pub(crate) use text::rfo_shown;

pub struct MemBandwidth;

/// Bytes each thread moves per iteration of a trial.
const BLOCK: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
    /// x86-64 only.
    WriteNt,
    Copy,
    /// Not vectorised: what simple C loops and `sysbench memory` do.
    ReadScalar,
    WriteScalar,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::WriteNt => "write_nt",
            Op::Copy => "copy",
            Op::ReadScalar => "read_scalar",
            Op::WriteScalar => "write_scalar",
        }
    }
    fn describe(&self) -> &'static str {
        match self {
            Op::Read => "load and add every 8-byte word (8 independent accumulators)",
            Op::Write => "store every 8-byte word (ordinary stores)",
            Op::WriteNt => "non-temporal 16-byte stores of every word (MOVNTDQ, then SFENCE)",
            Op::Copy => {
                "memcpy (copy_from_slice); bytes copied per second, each read once and written once"
            }
            Op::ReadScalar => {
                "one volatile 8-byte load per loop iteration (not vectorised, like sysbench memory)"
            }
            Op::WriteScalar => {
                "one volatile 8-byte store per loop iteration (like sysbench memory)"
            }
        }
    }
}

/// Thread counts measured: 1..N, thinned to powers of two plus N on large machines.
fn thread_counts(n: usize, profile: Profile) -> Vec<usize> {
    let mut v: Vec<usize> = match profile {
        Profile::Smoke => vec![1, n.min(2)],
        _ if n <= 8 || profile == Profile::Thorough => (1..=n).collect(),
        _ => (0..)
            .map(|k| 1 << k)
            .take_while(|&t| t < n)
            .chain([n])
            .collect(),
    };
    v.dedup();
    v
}

fn ops() -> Vec<Op> {
    let mut v = vec![Op::Read, Op::Write, Op::WriteNt, Op::Copy];
    v.retain(|&op| cfg!(target_arch = "x86_64") || op != Op::WriteNt);
    v
}

/// A figure planned: an operation, its threads, and whether on huge pages (in metric order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Figure {
    op: Op,
    threads: usize,
    huge: bool,
}

impl Figure {
    fn name(&self) -> String {
        let pages = if self.huge { "_thp" } else { "" };
        format!("{}{pages}_{}t", self.op.name(), self.threads)
    }
}

/// By thread count (one thread also scalar), then one thread's streams on huge pages.
fn figures(n: usize, profile: Profile) -> Vec<Figure> {
    let fig = |threads, huge| move |&op: &Op| Figure { op, threads, huge };
    let full = profile != Profile::Smoke;
    let mut v = Vec::new();
    for k in thread_counts(n, profile) {
        v.extend(ops().iter().map(fig(k, false)));
        if k == 1 && full {
            v.extend([Op::ReadScalar, Op::WriteScalar].iter().map(fig(1, false)));
        }
    }
    if full {
        v.extend([Op::Read, Op::Write, Op::Copy].iter().map(fig(1, true)));
    }
    v
}

const SPEC: Spec = Spec {
    id: "mem.bandwidth",
    title: "Memory bandwidth",
    description: "read, write (and non-temporal write) and copy bandwidth on a buffer far larger than the last-level cache, 1..N threads",
    method: crate::method!("mem.bandwidth"),
    bottleneck: crate::results::Bottleneck::Copy,
    budget: Some(PerProfile::new(ms(900), ms(2_000), ms(40_000), ms(120_000))),
    ..Spec::MEMORY
};

/// Shortest trial and trials per figure.
const TRIALS: PerProfile<(Duration, usize)> =
    PerProfile::new((ms(1), 5), (ms(2), 11), (ms(4), 21), (ms(4), 31));
/// The buffer wanted, within the profile's memory cap (planned from memory, not caches).
const BUFFER: PerProfile<u64> = PerProfile::new(64 << 20, 256 << 20, 2 << 30, 8 << 30);

impl Experiment for MemBandwidth {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict::streams(ctx, ctx.profile)
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let (llc, assumed) = kit::llc_or_assumed(&ctx.machine.data_caches());
        out.notes.extend(assumed);
        // The CPUs the process may use (gathered before the runner pinned this thread).
        let mut allowed = ctx.machine.cpu.allowed_cpus.clone();
        if allowed.is_empty() {
            allowed = vec![ctx.cpu];
        }
        let (size, n) = buffer(ctx.machine, ctx.profile, allowed.len())?;
        let (buffer, available) = (fmt_bytes(size as f64), ctx.machine.memory_budget_text());
        out.notes
            .push(format!("memory cap {buffer} (the buffer); {available}"));
        if n < allowed.len() {
            out.notes.push(format!(
                "at most {n} threads of {} CPUs: the memory cap holds {n} parts of 4 MiB",
                allowed.len()
            ));
        }
        if (size as u64) < 4 * llc {
            out.notes.push(format!(
                "the buffer ({buffer}) is less than 4x the last-level cache ({}): some trials may find data in the cache",
                fmt_bytes(llc as f64)
            ));
        }
        // Thread k on cpus[k]: this CPU first, one per core node by node, SMT siblings last.
        let topo = placement_topology(ctx);
        let cpus = topo.spread(&allowed, n);
        let rss0 = kit::rss_baseline();
        let plan = figures(n, ctx.profile);
        let thp = kit::thp_available(ctx.machine) && ctx.profile != Profile::Smoke;
        let nodes = topo.nodes_of(&allowed);
        let numa = nodes.len() > 1;
        // NUMA adds a remote read per other node and a chase per pair of nodes.
        let k = nodes.len();
        let configs =
            plan.iter().filter(|f| thp || !f.huge).count() + if numa { k - 1 + k * k } else { 0 };
        let (min_trial, trials) = TRIALS.get(ctx.profile);
        let spec = HarnessConfig::short_trials(min_trial, trials)
            // The rest faults each team's buffer and starts its threads.
            .for_budget(ctx.budget.mul_f64(0.75), configs);
        let mut run = Streams {
            ctx,
            topo: &topo,
            cpus: &cpus,
            spec: &spec,
            size,
            preempted: 0,
            kept: 0,
            placed: Placed::default(),
        };
        run.by_threads(&plan, numa, &mut out)?;
        if thp {
            run.huge_pages(&plan, &mut out)?;
        } else if ctx.profile != Profile::Smoke {
            out.notes.push("transparent huge pages are not available (/sys/kernel/mm/transparent_hugepage/enabled is 'never' or missing): base pages only".into());
        }
        if numa {
            numa::remote_reads(&mut run, &nodes, &mut out)?;
            numa::latency_matrix(&mut run, &nodes, &mut out)?;
        }
        out.check(kit::rss_check(rss0, size as u64));
        out.notes.push(format!(
            "{} trials were preempted by other tasks, or had threads that did not run together, and were repeated; {} undisturbed trials kept",
            run.preempted, run.kept
        ));
        for c in std::mem::take(&mut run.placed).checks(numa) {
            out.check(c);
        }
        let peak = team_peak(ctx, &topo, &cpus);
        // The series are this run's; the conclusions quote the pooled metrics.
        out.pool(ctx);
        text::conclusions(&mut out, n, peak);
        Ok(out)
    }
}

/// The topology with this thread's CPU as the chosen one (it may be `--cpu`).
fn placement_topology(ctx: &Context) -> Topology {
    let mut t = ctx.machine.topology.clone();
    if t.chosen_cpu != Some(ctx.cpu) {
        t.choose(ctx.cpu, "the CPU this run measures on");
    }
    t
}

fn parts_of(region: &Region, t: usize) -> Vec<Part> {
    let (base, len) = (region.as_ptr() as usize, region.len() / t / BLOCK * BLOCK);
    (0..t)
        .map(|k| Part {
            base: base + k * len,
            len,
        })
        .collect()
}

/// The buffer and the most threads that get parts of at least 4 blocks (two per copy half).
pub(super) fn buffer(
    machine: &crate::machine::Machine,
    profile: Profile,
    cpus: usize,
) -> anyhow::Result<(usize, usize)> {
    let want = BUFFER.get(profile).max((4 * BLOCK * cpus) as u64);
    let cap = kit::memory_cap(machine, profile, want, 4 * BLOCK as u64)?;
    let n = cpus.clamp(1, cap as usize / (4 * BLOCK));
    Ok(((cap as usize / (BLOCK * n)) * BLOCK * n, n))
}

struct Streams<'a, 'c> {
    ctx: &'a Context<'c>,
    topo: &'a Topology,
    cpus: &'a [usize],
    spec: &'a HarnessConfig,
    size: usize,
    preempted: usize,
    kept: usize,
    placed: Placed,
}

impl Streams<'_, '_> {
    /// A team's trials of `op`, first start to last stop; a metric when described.
    fn figure(
        &mut self,
        out: &mut Outcome,
        name: &str,
        op: Op,
        parts: &[Part],
        first_touch: bool,
        what: Option<&str>,
    ) -> f64 {
        let member = |t: usize| {
            if first_touch {
                kernel::touch(parts[t]);
            }
            let mut pos = 0usize;
            move |blocks: u64| {
                let pattern = 0x0123_4567_89ab_cdefu64;
                std::hint::black_box(kernel::work(op, parts[t], &mut pos, blocks, pattern));
            }
        };
        let (clock, spec, bytes) = (self.ctx.clock, self.spec, (BLOCK * parts.len()) as f64);
        let mut together = Together::NONE;
        let (m, placed) = Team::run(clock, &self.cpus[..parts.len()], member, |step| {
            measure_trials(clock, spec, bytes, |blocks| {
                let s = step(blocks);
                (s.span(), together.kept(&s))
            })
        });
        self.placed.add(name, &placed);
        self.placed
            .together(name, parts.len(), together, m.undisturbed);
        self.preempted += m.preempted;
        self.kept += m.per_op_ns.len();
        for note in &m.notes {
            out.notes.push(format!("{name}: {note}"));
        }
        let bw: Vec<f64> = m.per_op_ns.iter().map(|ns| 1e9 / ns).collect();
        let median = crate::stats::median(&bw);
        if let Some(what) = what {
            out.metric(name, "bytes/s", what, bw);
        }
        median
    }

    /// Every count on a fresh buffer: a metric for one thread and for all, the rest a series.
    fn by_threads(&mut self, plan: &[Figure], numa: bool, out: &mut Outcome) -> anyhow::Result<()> {
        let (ctx, n, buffer) = (self.ctx, self.cpus.len(), fmt_bytes(self.size as f64));
        let mut medians: Vec<(Op, [f64; 2])> = Vec::new();
        for t in thread_counts(n, ctx.profile) {
            // Each thread faults its own part in: its pages sit on its reader's node.
            (ctx.progress)(&format!("{t} thread(s) fault in their parts"));
            let region = Region::new(self.size, Pages::Base)?;
            let (parts, cpus) = (parts_of(&region, t), &self.cpus[..t]);
            let placed = self.topo.describe_cpus(cpus);
            let on = if t == 1 {
                format!("on CPU {}", cpus[0])
            } else {
                let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
                let smt = match placed.smt_shared.len() {
                    0 => "one per physical core".to_string(),
                    k => format!("{k} of them SMT siblings of another's core"),
                };
                format!("on CPUs {}, {smt}", list.join(","))
            };
            let shown = t == 1 || t == n;
            let here = plan.iter().filter(|f| f.threads == t && !f.huge);
            for (i, f) in here.enumerate() {
                (ctx.progress)(&format!("{} with {t} thread(s)", f.op.name()));
                let what = format!("{}, {t} thread(s) {on}, {buffer} buffer", f.op.describe());
                let what = shown.then_some(what);
                let med = self.figure(out, &f.name(), f.op, &parts, i == 0, what.as_deref());
                medians.push((f.op, [t as f64, med]));
                if let Some(note) = placed.shared_note().filter(|_| shown && i == 0) {
                    out.notes.push(format!("{t} threads: {note}"));
                }
            }
            if numa {
                let node = |&c: &usize| self.topo.place(c)?.node;
                let nodes: Vec<_> = cpus.iter().map(node).collect();
                self.placed.pages_on_nodes(&nodes, &parts);
            }
        }
        for op in ops() {
            let points = medians.iter().filter(|m| m.0 == op).map(|m| m.1).collect();
            let name = format!("{}_by_threads", op.name());
            out.plot(&name, "threads", "bytes/s", points);
        }
        // The metrics in the order of the operations, then thread counts.
        out.metrics
            .sort_by_key(|m| plan.iter().find(|f| f.name() == m.name).copied());
        Ok(())
    }

    /// One thread's streams again on huge pages (the base page size's cost, by difference).
    fn huge_pages(&mut self, plan: &[Figure], out: &mut Outcome) -> anyhow::Result<()> {
        let (ctx, size) = (self.ctx, self.size);
        if let Some(why) = kit::too_small_for_huge_pages(ctx.machine, size) {
            out.notes.push(format!("no huge-page figures: {why}"));
            return Ok(());
        }
        (ctx.progress)("huge-page buffer");
        let mut region = Region::aligned(size, Pages::Huge, kit::huge_page(ctx.machine))?;
        region.prefault();
        region.as_mut_slice().fill(0x5a);
        let frac = region.huge_bytes().unwrap_or(0) as f64 / size as f64;
        let (backed, pct, buffer) = (frac >= 0.5, frac * 100.0, fmt_bytes(size as f64));
        out.check(crate::results::Check::sanity(
            "huge pages back the huge-page buffer",
            backed,
            format!("{pct:.0}% of {buffer} backed by transparent huge pages (AnonHugePages in /proc/self/smaps)"),
        ));
        if !backed {
            out.notes.push("the kernel did not back most of the huge-page buffer with huge pages (fragmented memory or THP defrag policy): no huge-page figures".into());
            return Ok(());
        }
        let part = parts_of(&region, 1);
        for f in plan.iter().filter(|f| f.huge) {
            (ctx.progress)(&format!("{} with 1 thread, huge pages", f.op.name()));
            let what = format!(
                "{}, 1 thread, {buffer} buffer on huge pages ({pct:.0}% backed)",
                f.op.describe()
            );
            self.figure(out, &f.name(), f.op, &part, false, Some(&what));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::kernel::{
        read_words, read_words_scalar, work, write_words, write_words_nt, write_words_scalar,
    };
    use super::predict::per_socket;
    use super::*;

    #[test]
    fn kernels_touch_every_word() {
        let v: Vec<u64> = (0..64).collect();
        // Sum per accumulator lane, xor-combined: equals the reference.
        let mut acc = [0u64; 8];
        for (i, x) in v.iter().enumerate() {
            acc[i % 8] = acc[i % 8].wrapping_add(*x);
        }
        assert_eq!(read_words(&v), acc.iter().fold(0, |a, &b| a ^ b));
        let mut w = vec![0u64; 64];
        write_words(&mut w, 7);
        assert!(w.iter().all(|&x| x == 7));
        let mut w = vec![0u64; 64];
        write_words_nt(&mut w, 9);
        assert!(w.iter().all(|&x| x == 9));
        write_words_scalar(&mut w, 4);
        assert!(w.iter().all(|&x| x == 4));
        assert_eq!(read_words_scalar(&v), (0..64).sum::<u64>());
    }

    #[test]
    fn work_wraps_within_the_part() {
        let r = Region::new(4 * BLOCK, Pages::Base).unwrap();
        let part = Part {
            base: r.as_ptr() as usize,
            len: 4 * BLOCK,
        };
        let mut pos = 0;
        work(Op::Write, part, &mut pos, 9, 3);
        assert!(pos <= 4 * BLOCK);
        let mut pos = 0;
        work(Op::Copy, part, &mut pos, 5, 0);
        assert!(pos <= 2 * BLOCK);
    }

    #[test]
    fn metrics_sort_by_operation_then_threads() {
        use Op::*;
        let fig = |op, threads| Figure {
            op,
            threads,
            huge: false,
        };
        let mut v = [
            fig(Copy, 1),
            fig(Read, 2),
            fig(Write, 1),
            fig(ReadScalar, 1),
            fig(Read, 1),
        ];
        v.sort();
        assert_eq!(
            v.iter().map(Figure::name).collect::<Vec<_>>(),
            [
                "read_1t",
                "read_2t",
                "write_1t",
                "copy_1t",
                "read_scalar_1t"
            ]
        );
    }

    #[test]
    fn the_dimm_peak_is_per_socket_used() {
        use crate::machine::facts::FactRoot;
        use crate::machine::Machine;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/xeon-two-socket");
        let t = Machine::gather_from(&FactRoot::recorded(dir)).topology;
        // Two threads on one node: half the machine's peak.
        let (p, why) = per_socket(&t, &t.spread(&t.allowed, 2), 100e9, "dmi".into());
        assert_eq!(p, 50e9);
        assert!(why.contains("1 of 2 sockets"), "{why}");
        // All threads: both sockets.
        let (p, _) = per_socket(&t, &t.spread(&t.allowed, 32), 100e9, "dmi".into());
        assert_eq!(p, 100e9);
        // One package: the machine's peak, its source unchanged.
        let one = crate::machine::Topology::default();
        assert_eq!(
            per_socket(&one, &[0, 1], 7e9, "x".into()),
            (7e9, "x".into())
        );
    }

    #[test]
    fn the_dimm_peak_is_per_node_where_nodes_split_sockets() {
        use crate::machine::facts::FactRoot;
        use crate::machine::Machine;
        // Recorded in the zoo: 2 sockets, 4 nodes (sub-NUMA clustering). A team on one
        // node has a quarter of the machine's channels, not a socket's half (N8).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/zoo-snc");
        let t = Machine::gather_from(&FactRoot::recorded(dir)).topology;
        let (p, why) = per_socket(&t, &[0, 1], 100e9, "dmi".into());
        assert_eq!(p, 25e9);
        assert!(why.contains("1 of 4 NUMA nodes"), "{why}");
        let (p, _) = per_socket(&t, &[0, 2, 4], 100e9, "dmi".into());
        assert_eq!(p, 75e9);
    }

    #[test]
    fn threads_elsewhere_fail_and_unknown_placement_is_unverified() {
        let team = |misplaced: Vec<String>, unknown: Option<String>| {
            crate::experiments::kit::team::TeamPlacement {
                misplaced,
                unknown,
                places: vec![],
            }
        };
        let mut p = Placed::default();
        p.add("read_2t", &team(vec![], None));
        let c = p.checks(false);
        assert!(c[0].passed && !c[0].unverified, "{:?}", c[0]);
        let mut p = Placed::default();
        p.add("read_2t", &team(vec![], Some("no hard pinning".into())));
        let c = p.checks(false);
        assert!(!c[0].passed && c[0].unverified, "{:?}", c[0]);
        let mut p = Placed::default();
        p.add(
            "read_2t",
            &team(vec!["thread 1 could not be pinned".into()], None),
        );
        let c = p.checks(true);
        assert!(
            !c[0].passed && c[0].premise && !c[0].unverified,
            "{:?}",
            c[0]
        );
        assert!(
            c[0].detail.starts_with("read_2t: thread 1"),
            "{}",
            c[0].detail
        );
        // No pages sampled on a NUMA machine: not verified.
        assert!(c[1].unverified, "{:?}", c[1]);
    }

    #[test]
    fn first_touched_pages_are_on_this_node() {
        // One node (or several): a page this thread wrote is on a node the kernel names,
        // and a wrong expectation fails the check.
        let r = Region::new(4 * BLOCK, Pages::Base).unwrap();
        let part = Part {
            base: r.as_ptr() as usize,
            len: 4 * BLOCK,
        };
        kernel::touch(part);
        let Some(node) = crate::platform::node_of_page(r.as_ptr()) else {
            return; // no NUMA support in this kernel (or macOS)
        };
        let mut p = Placed::default();
        p.pages_on_nodes(&[Some(node)], &[part]);
        assert!(p.checks(true)[1].passed);
        let mut p = Placed::default();
        p.pages_on_nodes(&[Some(node + 1)], &[part]);
        let c = &p.checks(true)[1];
        assert!(!c.passed && !c.unverified, "{c:?}");
    }

    #[test]
    fn thread_counts_cover_one_to_n() {
        assert_eq!(thread_counts(2, Profile::Quick), vec![1, 2]);
        assert_eq!(thread_counts(1, Profile::Quick), vec![1]);
        assert_eq!(thread_counts(1, Profile::Smoke), vec![1]);
        let v = thread_counts(64, Profile::Standard);
        assert_eq!((v[0], *v.last().unwrap()), (1, 64));
    }

    /// mem.bandwidth run here (smoke) with `plant` bending its world; None, after a note,
    /// where it cannot run a team of two.
    fn planted(
        test: &str,
        plant: impl FnOnce(&mut crate::experiments::seams::Seams),
    ) -> Option<crate::results::ExperimentResult> {
        if crate::platform::allowed_cpus().len() < 2 {
            crate::experiments::testing::skip(test, "one CPU allowed: no team of two threads");
            return None;
        }
        let clock = crate::clock::detect(None).0;
        let w = crate::experiments::testing::World::live(&clock);
        crate::experiments::seams::set(plant);
        let r = w.run(&MemBandwidth);
        crate::experiments::seams::set(|s| *s = crate::experiments::seams::Seams::NONE);
        Some(r)
    }

    const TOGETHER_CHECK: &str = "each team's threads ran together (all of them running for at least half of each kept trial's span, first start to last stop)";

    fn median_of(r: &crate::results::ExperimentResult, name: &str) -> f64 {
        let m = r.metrics.iter().find(|m| m.name == name);
        crate::stats::median(&m.unwrap_or_else(|| panic!("no {name}")).raw)
    }

    /// Two threads made to run one after the other: the trials are set aside and the
    /// result is invalid, and the two-thread figure is not twice the one-thread figure.
    #[test]
    fn threads_run_one_after_another_are_set_aside() {
        let test = "threads_run_one_after_another_are_set_aside";
        let Some(r) = planted(test, |s| s.serial_team = true) else {
            return;
        };
        crate::experiments::testing::assert_invalid_by(&r, TOGETHER_CHECK);
        let c = crate::experiments::testing::check(&r, TOGETHER_CHECK);
        assert!(c.detail.contains("read_2t: "), "{}", c.detail);
        let (apart, ran) = set_aside(c);
        assert!(ran > 0 && apart > 0, "{}", c.detail);
        let (one, two) = (median_of(&r, "read_1t"), median_of(&r, "read_2t"));
        assert!(two < 1.5 * one, "read_2t {two} against read_1t {one}");
    }

    /// "A of R trials" at the head of the check's detail.
    fn set_aside(c: &crate::results::Check) -> (usize, usize) {
        let mut w = c.detail.split_whitespace();
        let a = w.next().and_then(|x| x.parse().ok());
        let r = w.nth(1).and_then(|x| x.parse().ok());
        a.zip(r).unwrap_or_else(|| panic!("{}", c.detail))
    }

    /// A team left alone keeps trials whose threads ran together (on a busy machine some
    /// may be set aside, never all of them).
    #[test]
    fn threads_run_together_keep_their_trials() {
        let test = "threads_run_together_keep_their_trials";
        let Some(r) = planted(test, |_| {}) else {
            return;
        };
        let c = crate::experiments::testing::check(&r, TOGETHER_CHECK);
        let (apart, ran) = set_aside(c);
        assert!(ran > 0 && apart < ran, "{}", c.detail);
    }
}
