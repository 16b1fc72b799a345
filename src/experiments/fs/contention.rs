//! fs.contention: P processes, each reading its own file uncached, released together by
//! a barrier; per-block time vs P and a fitted (piecewise) linear model
//! (docs/METHODOLOGY.md, fs.contention).

use super::{direct_works, evict_check, fmt_b, make_file, reopen, Tally, BLOCK, MIB};
use crate::clock::{Clock, Deadline};
use crate::experiments::kit::children::Children;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile};
use crate::pagecache::AlignedBuf;
use crate::results::{Check, Prediction, Series};
use crate::rng::Rng;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub struct Contention;

/// Largest process count per profile.
const PMAX: PerProfile<usize> = PerProfile::new(3, 6, 16, 50);

/// Process counts tried: every P up to 8, then steps that keep about 20 points.
fn counts(p: Profile) -> Vec<usize> {
    let max = PMAX.get(p);
    let step = (max / 20).max(1);
    let mut v: Vec<usize> = (1..=max.min(8)).collect();
    let mut p = 8 + step.max(2);
    while p < max {
        v.push(p);
        p += step.max(2);
    }
    if *v.last().unwrap_or(&0) != max {
        v.push(max);
    }
    v
}

/// How long every process reads in one round, and rounds per P.
const ROUND: PerProfile<(Duration, usize)> =
    PerProfile::new((ms(60), 1), (ms(150), 2), (ms(300), 3), (ms(400), 3));

/// Per-block time the files are sized for when fs.read measured none in this run (a
/// virtual or flash disk); a faster device then reads blocks again, and the re-read
/// share is reported.
const FALLBACK_BLOCK_NS: f64 = 100_000.0;

/// Blocks a file holds beyond what its reader reads at fs.read's median pace (a reader
/// is not held to it: a host may read ahead of sequential readers).
const MARGIN: f64 = 1.25;

/// Most bytes the readers' files take together, per profile (written before the rounds;
/// the budget counts writing them at 400 MB/s).
const MAX_TOTAL: PerProfile<u64> = PerProfile::new(64 * MIB, 1536 * MIB, 4096 * MIB, 8192 * MIB);

/// Rounds reader j takes part in: every round of every P above j.
fn reader_rounds(p: Profile) -> Vec<u64> {
    let (_, rounds) = ROUND.get(p);
    let ps = counts(p);
    (0..PMAX.get(p))
        .map(|j| (ps.iter().filter(|&&n| n > j).count() * rounds) as u64)
        .collect()
}

/// The per-block time the files are sized for: the faster of fs.read's uncached
/// sequential and random medians measured earlier in the run, with its source; None when
/// fs.read gave neither. A reader's per-block time is a mean over its round, and the mean
/// of a latency with a slow tail is no lower than its median, and under steal well above it.
fn measured_block_ns(ctx: &Context) -> Option<(f64, String)> {
    ["uncached_seq", "uncached_random"]
        .iter()
        .filter_map(|&n| {
            let v = ctx.earlier_metric("fs.read", n)?.summary.median;
            (v.is_finite() && v > 0.0).then(|| (v, format!("fs.read {n} (median)")))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// Each reader's file: every block it may read in its rounds at `block_ns` per block, with
/// the margin, in whole MiB; scaled down together to fit `room` bytes. Returns the sizes
/// and whether they were cut to fit.
fn file_sizes(p: Profile, block_ns: f64, room: u64) -> (Vec<u64>, bool) {
    let (dur, _) = ROUND.get(p);
    let per_round = dur.as_nanos() as f64 / block_ns * MARGIN * BLOCK as f64;
    let want: Vec<u64> = reader_rounds(p)
        .iter()
        .map(|&r| (r as f64 * per_round).max(MIB as f64))
        .map(|b| (b as u64).div_ceil(MIB) * MIB)
        .collect();
    let total: u64 = want.iter().sum();
    if total <= room {
        return (want, false);
    }
    let scale = room as f64 / total as f64;
    let cut = want
        .iter()
        .map(|&b| ((b as f64 * scale) as u64 / MIB).max(1) * MIB)
        .collect();
    (cut, true)
}

/// The readers' file sizes for this run, and a note saying what they were sized for.
fn sizing(ctx: &Context, room: u64) -> (Vec<u64>, String) {
    let room = room.min(MAX_TOTAL.get(ctx.profile));
    let (block_ns, basis) = match measured_block_ns(ctx) {
        Some((ns, src)) => (ns, format!("{} per block measured by {src}", crate::units::fmt_ns(ns))),
        None => (
            FALLBACK_BLOCK_NS,
            format!(
                "{} per block assumed: fs.read's uncached per-block time was not measured in this run (or its result was not ok), so a faster device reads blocks again",
                crate::units::fmt_ns(FALLBACK_BLOCK_NS)
            ),
        ),
    };
    let (sizes, cut) = file_sizes(ctx.profile, block_ns, room);
    let mut note = format!(
        "reader files sized for every block a reader may read in its rounds at {basis} ({MARGIN}x margin): {} (reader 1) down to {} (reader {}), {} in all",
        fmt_b(sizes.first().copied().unwrap_or(0)),
        fmt_b(sizes.last().copied().unwrap_or(0)),
        sizes.len(),
        fmt_b(sizes.iter().sum())
    );
    if cut {
        note.push_str(&format!(
            "; cut down to fit {} (the profile's limit or the scratch space left), so blocks may be read again",
            fmt_b(room)
        ));
    }
    (sizes, note)
}

#[cfg(test)]
thread_local! {
    /// Test seam: files of this size on this thread (a few blocks: readers run past the end
    /// and read blocks again, as they do when the device is faster than the sizing assumes).
    pub(crate) static SMALL_FILES: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Largest spread of the readers' start times, as a share of a round, for them to count
/// as released together.
const RELEASE_SHARE: f64 = 0.10;

/// Premise "readers released together": in every round the readers' first timestamps
/// (on the run's clock, read right after the barrier) lie within 10% of the round's length.
/// `spreads` holds the largest minus the smallest start of each round, in ns.
pub(crate) fn release_check(spreads: &[(usize, u64)], round_ns: u64) -> Check {
    let limit = (round_ns as f64 * RELEASE_SHARE) as u64;
    let worst = spreads.iter().max_by_key(|s| s.1).copied();
    Check::premise(
        "readers released together",
        !spreads.is_empty() && worst.is_some_and(|w| w.1 <= limit),
        match worst {
            Some((p, w)) => format!(
                "largest spread of start times {} (P = {p}) over {} rounds, limit {} (10% of a round); each reader timestamps its start right after a pipe barrier the parent opens once all are ready",
                crate::units::fmt_ns(w as f64),
                spreads.len(),
                crate::units::fmt_ns(limit as f64)
            ),
            None => "no round ran".into(),
        },
    )
}

/// One reader's figures, written into its slot.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ReaderResult {
    blocks: u64,
    ns: u64,
    error: u64,
}

/// A reader's body after its release at `start`: reads `nblocks` blocks of `fd` from
/// block `first` into `buf` for at most `dur`, wrapping only with O_DIRECT.
///
/// # Safety
/// Runs in a forked child: only async-signal-safe calls (pread, the run's clock, whose
/// reads are plain instructions or clock_gettime), on `buf`, BLOCK writable aligned bytes
/// prepared before the fork.
unsafe fn read_blocks(
    rd: &Readers<'_>,
    i: usize,
    first: u64,
    buf: *mut u8,
    start: u64,
    dur: Duration,
) -> ReaderResult {
    let (clock, fd, nblocks) = (rd.clock, rd.files[i].as_raw_fd(), rd.nblocks[i]);
    let until = Deadline::after(clock, dur);
    let mut blocks = 0u64;
    let mut pos = first % nblocks.max(1);
    let mut error = 0u64;
    loop {
        if pos >= nblocks {
            // Without O_DIRECT a second pass would hit the cache: stop instead.
            if !rd.direct {
                break;
            }
            pos = 0;
        }
        let n = libc::pread(
            fd,
            buf as *mut libc::c_void,
            BLOCK,
            (pos * BLOCK as u64) as libc::off_t,
        );
        if n != BLOCK as isize {
            error = 1;
            break;
        }
        pos += 1;
        blocks += 1;
        if until.passed() {
            break;
        }
    }
    let ns = clock.ticks_to_ns(clock.now().saturating_sub(start) as f64) as u64;
    ReaderResult { blocks, ns, error }
}

/// What one round measured.
struct Round {
    /// ns per block, per reader.
    per_block: Vec<f64>,
    /// Blocks each reader read.
    blocks: Vec<u64>,
    /// Latest minus earliest start time.
    spread_ns: u64,
}

/// The readers' state: their files, buffers and CPUs, and the children that read.
struct Readers<'c> {
    clock: &'c dyn Clock,
    files: Vec<File>,
    bufs: Vec<AlignedBuf>,
    children: Children<'c, ReaderResult>,
    cpus: Vec<crate::platform::CpuMask>,
    /// Blocks in each reader's file.
    nblocks: Vec<u64>,
    /// O_DIRECT works: readers may wrap around their file.
    direct: bool,
}

/// One round: `p` children released together, reader i starting at block `first[i]`.
fn round_of(rd: &mut Readers<'_>, first: &[u64], p: usize, dur: Duration) -> anyhow::Result<Round> {
    let bufs: Vec<*mut u8> = rd.bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
    let rd = &*rd;
    // SAFETY: each reader's body is `read_blocks`, async-signal-safe on its file and the
    // buffer prepared above.
    unsafe {
        rd.children.run(p, &rd.cpus, "reader process", |i, start| {
            read_blocks(rd, i, first[i], bufs[i], start, dur)
        })?
    };
    let mut r = Round {
        per_block: Vec::with_capacity(p),
        blocks: Vec::with_capacity(p),
        spread_ns: 0,
    };
    let (mut lo, mut hi) = (u64::MAX, 0);
    for i in 0..p {
        let (start, s) = rd.children.get(i);
        if s.error != 0 || s.blocks == 0 {
            anyhow::bail!("reader process {i} could not read its file");
        }
        r.per_block.push(s.ns as f64 / s.blocks as f64);
        r.blocks.push(s.blocks);
        lo = lo.min(start);
        hi = hi.max(start);
    }
    r.spread_ns = rd.clock.ticks_to_ns(hi.saturating_sub(lo) as f64) as u64;
    Ok(r)
}

// The model is the one analysis of this question; figures draw the same fit.
pub(crate) use crate::analysis::fit;

const SPEC: crate::experiments::Spec = crate::experiments::Spec {
    id: "fs.contention",
    title: "Per-block read time with P processes reading at once",
    description: "P = 1..Pmax processes each reading its own file uncached, released together; per-block time vs P and a fitted model",
    method: crate::method!("fs.contention"),
    needs: Needs {
        disk_bytes: MAX_TOTAL.get(Profile::Quick),
        ..Needs::NONE
    },
    // The device shared by the readers.
    bottleneck: crate::results::Bottleneck::None,
    per_core_kind: false,
    subtracts_loop: false,
    budget: None,
};

impl Experiment for Contention {
    fn spec(&self) -> &crate::experiments::Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        let (d, r) = ROUND.get(p);
        let n = counts(p).len() as u32;
        // Rounds plus fork/teardown, and writing the files at 400 MB/s.
        (d + Duration::from_millis(30)) * r as u32 * n
            + Duration::from_secs_f64(MAX_TOTAL.get(p) as f64 / 400e6)
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let p = PMAX.get(ctx.profile) as f64;
        // Readers report elapsed / blocks, a mean: compare with fs.read's mean, not its
        // median (4 KiB latency has a long tail).
        let Some(t1) = ctx
            .earlier_metric("fs.read", "uncached_seq")
            .map(|m| m.summary.mean)
            .filter(|v| v.is_finite())
        else {
            let why = "fs.read uncached_seq was not measured in this run, and a device's read \
                       latency has no published figure in the parts table";
            return ["per_block_p1", "per_block_pmax", "model_slope"]
                .iter()
                .map(|n| (n.to_string(), Prediction::withheld(why)))
                .collect();
        };
        let src = "measured: fs.read uncached_seq (mean)";
        vec![
            (
                "per_block_p1".into(),
                Prediction::new(t1, "t1: one process alone reads as fs.read measured")
                    .measured("t1", t1, "ns", src),
            ),
            (
                "per_block_pmax".into(),
                Prediction::new(
                    p * t1,
                    "P x t1: the device serves one request at a time, so each reader waits for the other P-1",
                )
                .measured("t1", t1, "ns", src)
                .method("P", p, "processes", "method: the profile's Pmax"),
            ),
            (
                "model_slope".into(),
                Prediction::new(t1, "t1 per added process (one device queue)")
                    .measured("t1", t1, "ns", src),
            ),
            (
                "model_intercept".into(),
                Prediction::withheld(
                    "the one-queue model (P x t1) passes through zero at P = 0, and a ratio to \
                     zero means nothing",
                ),
            ),
            (
                "model_breakpoint".into(),
                Prediction::withheld("the one-queue model (P x t1) has no breakpoint"),
            ),
            (
                "model_slope_after".into(),
                Prediction::withheld("the one-queue model (P x t1) has no breakpoint"),
            ),
        ]
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        // Tests run experiments on parallel threads: readers forked by one run would hold
        // copies of another run's barrier pipes, and the two would wait on each other.
        #[cfg(test)]
        let _one_at_a_time = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let pm = PMAX.get(ctx.profile);
        let scratch = match super::disk_scratch(ctx, pm as u64 * MIB)? {
            Ok(s) => s,
            Err(reason) => return Ok(Outcome::skipped(reason)),
        };
        let (sizes, sizing_note) = sizing(ctx, scratch.remaining());
        #[cfg(test)]
        let sizes = match SMALL_FILES.with(|s| s.get()) {
            Some(b) => vec![b; pm],
            None => sizes,
        };
        let mut out = Outcome::default();
        out.notes.push(super::scratch_note(scratch));
        out.notes.push(sizing_note);
        super::note_vm_host_cache(ctx, &mut out);
        let mut rng = Rng::new(0xc0de);
        let mut owners = Vec::with_capacity(pm);
        for (i, &size) in sizes.iter().enumerate() {
            (ctx.progress)(&format!("writing file {}/{pm}", i + 1));
            owners.push(make_file(
                scratch,
                &format!("contention-{i}"),
                size,
                rng.next_u64(),
            )?);
        }
        let direct = direct_works(&owners[0].file);
        let files: Vec<File> = owners
            .iter()
            .map(|o| reopen(&o.file, direct, false))
            .collect::<Result<_, _>>()?;
        if !direct {
            for f in &files {
                crate::platform::advise(f, crate::platform::Access::Random);
            }
        }
        let (masks, cpu_order) = reader_cpus(ctx)?;
        let mut rd = Readers {
            clock: ctx.clock,
            files,
            bufs: (0..pm)
                .map(|_| AlignedBuf::new(BLOCK, BLOCK))
                .collect::<Result<_, _>>()?,
            children: Children::new(pm, ctx.clock)?,
            cpus: masks,
            nblocks: sizes.iter().map(|b| b / BLOCK as u64).collect(),
            direct,
        };
        let (dur, rounds) = ROUND.get(ctx.profile);
        let mut m = ContentionRounds {
            cursor: vec![0u64; pm],
            spreads: Vec::new(),
            per_p: Vec::new(),
            aggregate: Vec::new(),
            evictions: Tally::default(),
            device: super::DeviceReads::new(scratch.dir()),
        };
        let started = super::stopwatch(ctx);
        for p in counts(ctx.profile) {
            if m.per_p.len() >= 2 && started.elapsed() > ctx.budget * 2 {
                out.notes.push(format!(
                    "stopped before P = {p} by the time budget (the machine is slow or busy)"
                ));
                break;
            }
            measure_p(ctx, &mut rd, &owners, &mut m, p, dur, rounds)?;
        }
        let cpus = reader_cpu_count(ctx);
        drop(rd);
        drop(owners);
        if let Some(&(p, _)) = m.per_p.last() {
            out.notes
                .extend(sharing_note(&ctx.machine.topology, &cpu_order, p));
        }
        checks(&mut out, &m, direct, &sizes, dur);
        let failed: Vec<&str> = out
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        let withheld = (!failed.is_empty()).then(|| failed.join("; "));
        report(ctx, &mut out, m, cpus, withheld);
        out.notes.push(format!(
            "{pm} files ({} in all); {rounds} round(s) of {} ms per P",
            fmt_b(sizes.iter().sum()),
            dur.as_millis()
        ));
        Ok(out)
    }
}

/// Reader i runs on the i-th CPU of the placement order (`Topology::spread`: the run's
/// CPU first, so P = 1 reads as fs.read does, then one per physical core, node by node,
/// SMT siblings last), modulo the allowed CPUs: no two readers share a CPU while a free
/// one exists. Returns the masks and the CPU numbers.
fn reader_cpus(ctx: &Context) -> anyhow::Result<(Vec<crate::platform::CpuMask>, Vec<usize>)> {
    let mut allowed = ctx.machine.cpu.allowed_cpus.clone();
    allowed.retain(|&c| crate::platform::CpuMask::single(c).is_ok());
    if allowed.is_empty() {
        allowed = vec![ctx.cpu];
    }
    let cpus = reader_order(&ctx.machine.topology, ctx.cpu, &allowed);
    let masks = cpus
        .iter()
        .map(|&c| crate::platform::CpuMask::single(c))
        .collect::<Result<_, _>>()?;
    Ok((masks, cpus))
}

/// The readers' CPUs in order: `Topology::spread` with `first` as the chosen CPU.
fn reader_order(t: &crate::machine::Topology, first: usize, allowed: &[usize]) -> Vec<usize> {
    let mut t = t.clone();
    if t.chosen_cpu != Some(first) {
        t.choose(first, "the CPU this run measures on");
    }
    t.spread(allowed, allowed.len())
}

/// What the readers shared at the largest P measured: CPUs beyond the CPU count (their
/// per-block time then includes waiting for a CPU), else physical cores (SMT siblings).
fn sharing_note(t: &crate::machine::Topology, cpus: &[usize], p: usize) -> Option<String> {
    let n = cpus.len().max(1);
    if p > n {
        return Some(format!(
            "readers shared CPUs from P = {} on: {p} readers on {n} CPU{} ({}, reader i on the (i mod {n})-th), so the per-block times there include waiting for a CPU, not only for the device",
            n + 1,
            if n == 1 { "" } else { "s" },
            cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let s = t.describe_cpus(&cpus[..p]);
    s.smt_shared.first().map(|&(c, e)| {
        format!(
            "each reader had its own CPU, but at P = {p} {} reader{} shared a physical core with another (SMT siblings, first CPU {c} with CPU {e}): every core already had a reader",
            s.smt_shared.len(),
            if s.smt_shared.len() == 1 { "" } else { "s" }
        )
    })
}

/// Everything the rounds measured, and what the premise checks need.
struct ContentionRounds {
    /// Where each reader goes on (distinct blocks across rounds): blocks read so far.
    cursor: Vec<u64>,
    /// (P, spread of the readers' start times in ns) per round.
    spreads: Vec<(usize, u64)>,
    /// Per-block times of every reader and round, per P.
    per_p: Vec<(usize, Vec<f64>)>,
    /// [P, median over rounds of the summed block rate].
    aggregate: Vec<[f64; 2]>,
    /// Evictions before rounds (only without O_DIRECT).
    evictions: Tally,
    device: super::DeviceReads,
}

/// The rounds of one process count `p`.
fn measure_p(
    ctx: &Context,
    rd: &mut Readers<'_>,
    owners: &[crate::scratch::ScratchFile],
    m: &mut ContentionRounds,
    p: usize,
    dur: Duration,
    rounds: usize,
) -> anyhow::Result<()> {
    let mut vals = Vec::new();
    let mut rates = Vec::new();
    for r in 0..rounds {
        (ctx.progress)(&format!("P = {p}, round {}/{rounds}", r + 1));
        if crate::scratch::stopping() {
            anyhow::bail!("interrupted");
        }
        if !rd.direct {
            // Without O_DIRECT each round must start from disk: evict and verify.
            for o in owners.iter().take(p) {
                m.evictions
                    .add(&evict_check(ctx, &o.file, "reader file", true)?);
            }
        }
        let before = m.device.counter();
        let r = round_of(rd, &m.cursor, p, dur)?;
        m.device.add(
            before,
            m.device.counter(),
            r.blocks.iter().sum::<u64>() * BLOCK as u64,
        );
        for (c, b) in m.cursor.iter_mut().zip(&r.blocks) {
            *c += b;
        }
        m.spreads.push((p, r.spread_ns));
        rates.push(r.per_block.iter().map(|t| 1e9 / t).sum::<f64>());
        vals.extend(r.per_block);
    }
    m.aggregate.push([p as f64, crate::stats::median(&rates)]);
    m.per_p.push((p, vals));
    Ok(())
}

/// The premises: device reached, no block read twice, evictions verified, readers
/// released together.
fn checks(out: &mut Outcome, m: &ContentionRounds, direct: bool, sizes: &[u64], dur: Duration) {
    out.check(m.device.check());
    let reread: u64 = m
        .cursor
        .iter()
        .zip(sizes)
        .map(|(&c, &b)| c.saturating_sub(b / BLOCK as u64))
        .sum();
    let total: u64 = m.cursor.iter().sum();
    // A block read again can come from a cache below the file system (a device's or a
    // hypervisor's) that no counter here sees: the figures are then not shown to be the
    // device's, so the run is `unverified` (not `ok`, and not `invalid`: the first reads
    // were the device's).
    let detail = format!(
        "{} of {} blocks read were read before by the same reader (files of {} down to {}; a device or host cache can serve those)",
        reread,
        total,
        fmt_b(sizes.first().copied().unwrap_or(0)),
        fmt_b(sizes.last().copied().unwrap_or(0))
    );
    out.check(if reread == 0 {
        Check::premise("each block read at most once", true, detail)
    } else {
        Check::unverified("each block read at most once", detail)
    });
    if !direct {
        let ev = &m.evictions;
        out.check(Check::premise(
            "uncached reads: files evicted and verified (mincore) before every round",
            ev.all(),
            if ev.all() {
                format!("O_DIRECT not supported; {} of {} evictions verified (a file larger than a round's reads, random advice)", ev.passed, ev.total)
            } else {
                ev.last_failure.clone()
            },
        ));
    }
    out.check(release_check(&m.spreads, dur.as_nanos() as u64));
}

/// Series and metrics per P, then the fitted model (`cpus`: readers that each get a CPU
/// of their own; `withheld`: the checks that did not pass, which withhold the overlap figure).
fn report(
    ctx: &Context,
    out: &mut Outcome,
    m: ContentionRounds,
    cpus: usize,
    withheld: Option<String>,
) {
    let medians: Vec<(f64, f64)> = m
        .per_p
        .iter()
        .map(|(p, v)| (*p as f64, crate::stats::median(v)))
        .collect();
    out.series.push(Series {
        name: "per_block_vs_processes".into(),
        x_unit: "processes".into(),
        y_unit: "ns".into(),
        points: medians.iter().map(|&(x, y)| [x, y]).collect(),
    });
    out.series.push(Series {
        name: "aggregate_blocks_per_s_vs_processes".into(),
        x_unit: "processes".into(),
        y_unit: "1/s".into(),
        points: m.aggregate,
    });
    if let Some((_, v)) = m.per_p.first() {
        out.metric(
            "per_block_p1",
            "ns",
            "time per 4 KiB block, one process alone (one value per round)",
            v.clone(),
        );
    }
    if let Some((p, v)) = m.per_p.last() {
        out.metric(
            "per_block_pmax",
            "ns",
            &format!(
                "time per 4 KiB block with P = {p} processes (one value per process and round)"
            ),
            v.clone(),
        );
    }
    match fit(&medians) {
        Some(model) => report_model(ctx, out, &model, &medians, cpus, withheld.as_deref()),
        None => out.pool(ctx),
    }
}

/// The model and the end points as the table shows them after pooling the runs: each
/// fitted figure is its metric's pooled median (the fit itself is this run's).
fn pooled_model(
    out: &Outcome,
    m: &crate::analysis::Model,
    medians: &[(f64, f64)],
) -> (crate::analysis::Model, Vec<(f64, f64)>) {
    let or = |name: &str, v: f64| out.get(name).map_or(v, |x| x.summary.median);
    let model = crate::analysis::Model {
        intercept: or("model_intercept", m.intercept),
        slope: or("model_slope", m.slope),
        bend: m
            .bend
            .map(|(b, s2)| (or("model_breakpoint", b), or("model_slope_after", s2))),
        sse: m.sse,
    };
    let mut ends = medians.to_vec();
    let n = ends.len();
    if n > 0 {
        ends[0].1 = or("per_block_p1", ends[0].1);
        ends[n - 1].1 = or("per_block_pmax", ends[n - 1].1);
    }
    (model, ends)
}

/// The fitted model's metrics, its curve and the finding it supports (from the pooled
/// runs).
fn report_model(
    ctx: &Context,
    out: &mut Outcome,
    m: &crate::analysis::Model,
    medians: &[(f64, f64)],
    cpus: usize,
    withheld: Option<&str>,
) {
    out.metric(
        "model_intercept",
        "ns",
        "fitted per-block time at P = 0 (the model's constant)",
        vec![m.intercept],
    );
    out.metric(
        "model_slope",
        "ns",
        "fitted added per-block time per extra process (first segment)",
        vec![m.slope],
    );
    if let Some((b, s2)) = m.bend {
        out.metric(
            "model_breakpoint",
            "processes",
            "P where the fitted line bends",
            vec![b],
        );
        out.metric(
            "model_slope_after",
            "ns",
            "fitted added per-block time per extra process beyond the breakpoint",
            vec![s2],
        );
    }
    out.series.push(Series {
        name: "model_per_block_vs_processes".into(),
        x_unit: "processes".into(),
        y_unit: "ns".into(),
        points: medians.iter().map(|&(x, _)| [x, m.eval(x)]).collect(),
    });
    out.pool(ctx);
    let (m, medians) = &pooled_model(out, m, medians);
    let t1 = medians.first().map(|p| p.1).unwrap_or(f64::NAN);
    let (pl, tl) = medians.last().copied().unwrap_or((1.0, f64::NAN));
    let mut text = match m.bend {
        Some((b, s2)) => format!(
            "Per-block time is {} + {} x P up to P = {b:.0}, then rises {} per extra process; with {pl:.0} readers each block takes {} ({:.1}x one reader's {}).",
            crate::units::fmt_ns(m.intercept),
            crate::units::fmt_ns(m.slope),
            crate::units::fmt_ns(s2),
            crate::units::fmt_ns(tl),
            tl / t1,
            crate::units::fmt_ns(t1)
        ),
        None => format!(
            "Per-block time grows linearly, {} + {} x P; with {pl:.0} readers each block takes {} ({:.1}x one reader's {}).",
            crate::units::fmt_ns(m.intercept),
            crate::units::fmt_ns(m.slope),
            crate::units::fmt_ns(tl),
            tl / t1,
            crate::units::fmt_ns(t1)
        ),
    };
    text.push_str(&overlap_text(medians, cpus, withheld));
    out.finding(text, &["per_block_p1", "per_block_pmax", "model_slope"]);
}

/// How many distinct CPUs the readers are spread over (as `reader_cpus` picks them).
fn reader_cpu_count(ctx: &Context) -> usize {
    ctx.machine
        .cpu
        .allowed_cpus
        .iter()
        .filter(|&&c| crate::platform::CpuMask::single(c).is_ok())
        .count()
        .max(1)
}

/// The requests the device serves at once, P x t(1) / t(P), said only where it means that:
/// at the largest P whose readers each have a CPU of their own (beyond, readers also wait
/// for a CPU), never above P (per-block time cannot fall with more readers unless a cache
/// serves some), and not at all when a check of the run failed.
fn overlap_text(medians: &[(f64, f64)], cpus: usize, withheld: Option<&str>) -> String {
    if let Some(why) = withheld {
        return format!(" No overlap of requests is estimated: the check(s) {why} did not pass.");
    }
    let t1 = medians.first().map_or(f64::NAN, |p| p.1);
    let Some(&(pc, tc)) = medians.iter().rfind(|(p, _)| *p > 1.0 && *p <= cpus as f64) else {
        return format!(
            " No overlap of requests is estimated: with {cpus} CPU(s) for the readers, every P above 1 shares a CPU."
        );
    };
    let parallel = pc * t1 / tc;
    if !parallel.is_finite() {
        return String::new();
    }
    let shared = medians.last().is_some_and(|&(pl, _)| pl > pc);
    let beyond = if shared {
        format!(" Beyond P = {pc:.0} readers share the {cpus} CPUs, so those points include waiting for a CPU.")
    } else {
        String::new()
    };
    if parallel > pc * 1.05 {
        format!(
            " With {pc:.0} readers, each on its own CPU, each block took less time than with one ({:.2}x), which a device serving requests side by side cannot do: a cache served some reads, so no overlap is estimated.{beyond}",
            tc / t1
        )
    } else {
        format!(
            " With {pc:.0} readers, each on its own CPU, the device serves about {:.1} of their {pc:.0} requests at once (P x t(1) / t(P)).{beyond}",
            parallel.min(pc)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_take_cores_first_and_say_when_they_share() {
        use crate::machine::{facts::FactRoot, Machine};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/xeon-two-socket");
        let t = Machine::gather_from(&FactRoot::recorded(dir)).topology;
        let cpus = reader_order(&t, 1, &t.allowed);
        assert_eq!(
            &cpus[..2],
            [1, 2],
            "readers 0 and 1 on two cores, not SMT siblings"
        );
        assert_eq!(sharing_note(&t, &cpus, 16), None);
        let n = sharing_note(&t, &cpus, 17).unwrap();
        assert!(n.contains("SMT siblings") && n.contains("own CPU"), "{n}");
        let n = sharing_note(&t, &cpus, 40).unwrap();
        assert!(n.contains("shared CPUs from P = 33"), "{n}");
        // This machine's shape: two CPUs, no topology; P = 6 shares, P = 2 does not.
        let none = crate::machine::Topology::default();
        let cpus = reader_order(&none, 1, &[0, 1]);
        assert_eq!(cpus, [1, 0]);
        assert_eq!(sharing_note(&none, &cpus, 2), None);
        assert!(sharing_note(&none, &cpus, 6)
            .unwrap()
            .contains("6 readers on 2 CPUs"));
    }

    #[test]
    fn release_check_fails_on_a_late_reader() {
        let round = 150_000_000;
        assert!(release_check(&[(1, 0), (4, 200_000)], round).passed);
        // One reader started 20 ms after the others in a 150 ms round.
        let c = release_check(&[(1, 0), (4, 20_000_000)], round);
        assert!(!c.passed, "{}", c.detail);
        assert!(c.premise);
        assert!(!release_check(&[], round).passed);
    }

    #[test]
    fn overlap_is_bounded_by_p_and_cpus_and_withheld_after_a_failed_check() {
        // 3 readers on 2 CPUs: the figure comes from P = 2, the P = 3 point is flagged.
        let m = [(1.0, 100.0), (2.0, 120.0), (3.0, 200.0)];
        let t = overlap_text(&m, 2, None);
        assert!(
            t.contains("about 1.7 of their 2") && t.contains("share the 2 CPUs"),
            "{t}"
        );
        // Faster per block with more readers: not a device overlap (the 4.8 with 3 readers).
        let t = overlap_text(&[(1.0, 100.0), (2.0, 60.0), (3.0, 62.5)], 4, None);
        assert!(
            t.contains("a cache served some") && !t.contains("about"),
            "{t}"
        );
        let t = overlap_text(&m, 4, Some("each block read at most once"));
        assert!(
            t.contains("No overlap") && t.contains("at most once"),
            "{t}"
        );
        assert!(overlap_text(&m, 1, None).contains("No overlap"));
    }

    #[test]
    fn fit_finds_a_bend() {
        // Flat up to 4, then 100 per process.
        let pts: Vec<(f64, f64)> = (1..=12)
            .map(|p| {
                let p = p as f64;
                (p, 1000.0 + if p > 4.0 { 100.0 * (p - 4.0) } else { 0.0 })
            })
            .collect();
        let m = fit(&pts).unwrap();
        let (b, s2) = m.bend.expect("bent");
        assert!((b - 4.0).abs() < 1e-9, "{m:?}");
        assert!(m.slope.abs() < 1e-6 && (s2 - 100.0).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn fit_keeps_a_line_for_linear_data() {
        let pts: Vec<(f64, f64)> = (1..=10)
            .map(|p| (p as f64, 50.0 + 7.0 * p as f64))
            .collect();
        let m = fit(&pts).unwrap();
        assert!(m.bend.is_none());
        assert!((m.slope - 7.0).abs() < 1e-9);
    }

    /// Files hold every block a reader may read at the measured pace (reader 1 reads in
    /// every round), and are cut down together to fit the room.
    #[test]
    fn files_are_sized_from_the_block_time_and_cut_to_fit() {
        let (sizes, cut) = file_sizes(Profile::Quick, 28_000.0, u64::MAX);
        assert!(!cut);
        assert_eq!(sizes.len(), PMAX.get(Profile::Quick));
        let (dur, rounds) = ROUND.get(Profile::Quick);
        let reader1 = counts(Profile::Quick).len() * rounds;
        let blocks = reader1 as f64 * dur.as_nanos() as f64 / 28_000.0;
        assert!(sizes[0] as f64 >= blocks * BLOCK as f64, "{sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
        assert!(sizes.iter().all(|b| b % MIB == 0));
        // 100 us a block needs about a quarter of that.
        let (slow, _) = file_sizes(Profile::Quick, 100_000.0, u64::MAX);
        assert!(slow[0] * 3 < sizes[0], "{slow:?} {sizes:?}");
        let room = 300 * MIB;
        let (small, cut) = file_sizes(Profile::Quick, 28_000.0, room);
        assert!(cut);
        assert!(small.iter().sum::<u64>() <= room, "{small:?}");
        assert!(small.iter().all(|&b| b >= MIB));
    }

    /// As wired: the sizes come from fs.read's uncached per-block time measured earlier in
    /// the run (1 ms a block: 1 MiB files), and the note says so; without it, the fallback.
    #[test]
    fn sizing_reads_fs_read_from_earlier_in_the_run() {
        use crate::experiments::testing::World;
        let clock = crate::clock::CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let mut o = Outcome::default();
        o.metric("uncached_seq", "ns", "", vec![1e6; 20]);
        o.metric("uncached_random", "ns", "", vec![2e6; 20]);
        w.earlier
            .push(crate::experiments::testing::recorded("fs.read", o));
        let r = w.run(&Contention);
        if r.status == crate::results::Status::Skipped {
            return crate::experiments::testing::skip(
                "sizing_reads_fs_read_from_earlier_in_the_run",
                &format!("{:?}", r.reason),
            );
        }
        let note = r.notes.iter().find(|n| n.starts_with("reader files sized"));
        let note = note.unwrap_or_else(|| panic!("{:?}", r.notes));
        assert!(
            note.contains("1.00 ms per block measured by fs.read uncached_seq (median)")
                && note.contains("1.0 MiB (reader 1)"),
            "{note}"
        );
        let r = World::live(&clock).run(&Contention);
        assert!(
            r.notes
                .iter()
                .any(|n| n.starts_with("reader files sized") && n.contains("assumed")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn process_counts_cover_the_range() {
        for p in Profile::ALL {
            let c = counts(p);
            assert_eq!(c[0], 1);
            assert_eq!(*c.last().unwrap(), PMAX.get(p));
            assert!(c.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(PMAX.get(Profile::Thorough), 50);
    }
}
