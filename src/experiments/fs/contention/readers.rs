//! fs.contention's readers: forked children, their CPUs and one round.

use super::*;
use crate::platform::CpuMask;
use crate::scratch::{Scratch, ScratchFile};

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct ReaderResult {
    /// None read where a read failed.
    blocks: u64,
    ns: u64,
}

pub(super) struct Readers<'c> {
    ctx: &'c Context<'c>,
    files: Vec<File>,
    /// The scratch files, evicted before each round without O_DIRECT.
    owners: Vec<ScratchFile>,
    bufs: Vec<AlignedBuf>,
    children: Children<'c, ReaderResult>,
    pub(super) order: Vec<usize>,
    cpus: Vec<CpuMask>,
    nblocks: Vec<u64>,
    /// O_DIRECT works: readers may wrap around their file.
    pub(super) direct: bool,
    /// Blocks each reader read so far: where it goes on, so no block is read twice.
    cursor: Vec<u64>,
    /// (P, spread of the readers' start times in ns) per round.
    spreads: Vec<(usize, u64)>,
    /// Per-block times of every reader and round, per P.
    pub(super) per_p: Vec<(usize, Vec<f64>)>,
    /// [P, median over rounds of the summed block rate].
    pub(super) aggregate: Vec<[f64; 2]>,
    /// Evictions before rounds (only without O_DIRECT).
    evictions: RepeatedCheck,
    device: DeviceReads,
}

impl<'c> Readers<'c> {
    /// A reader per file of `sizes`, reader i on the i-th CPU of `reader_order` (modulo).
    pub(super) fn new(
        ctx: &'c Context<'c>,
        scratch: &Scratch,
        sizes: &[u64],
    ) -> anyhow::Result<Self> {
        let (n, mut rng) = (sizes.len(), Rng::new(0xc0de));
        let owners = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                (ctx.progress)(&format!("writing file {}/{n}", i + 1));
                make_file(scratch, &format!("contention-{i}"), size, rng.next_u64())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let direct = direct_works(&owners[0].file);
        let files: Vec<File> = owners
            .iter()
            .map(|o| reopen(&o.file, direct, false))
            .collect::<Result<_, _>>()?;
        for f in files.iter().filter(|_| !direct) {
            crate::platform::advise(f, crate::platform::Access::Random);
        }
        let mut allowed = ctx.machine.cpu.allowed_cpus.clone();
        allowed.retain(|&c| CpuMask::single(c).is_ok());
        if allowed.is_empty() {
            allowed = vec![ctx.cpu];
        }
        let order = reader_order(&ctx.machine.topology, ctx.cpu, &allowed);
        Ok(Readers {
            ctx,
            bufs: (0..n)
                .map(|_| AlignedBuf::new(BLOCK, BLOCK))
                .collect::<Result<_, _>>()?,
            children: Children::new(n, ctx.clock)?,
            cpus: order
                .iter()
                .map(|&c| CpuMask::single(c))
                .collect::<Result<_, _>>()?,
            order,
            nblocks: sizes.iter().map(|b| b / BLOCK as u64).collect(),
            files,
            owners,
            direct,
            cursor: vec![0; n],
            spreads: Vec::new(),
            per_p: Vec::new(),
            aggregate: Vec::new(),
            evictions: RepeatedCheck::default(),
            device: DeviceReads::new(ctx, scratch.dir()),
        })
    }

    pub(super) fn measure(&mut self, p: usize) -> anyhow::Result<()> {
        let (dur, rounds) = ROUND.get(self.ctx.profile);
        let (mut vals, mut rates) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            (self.ctx.progress)(&format!("P = {p}, round {}/{rounds}", r + 1));
            anyhow::ensure!(!crate::scratch::stopping(), "interrupted");
            if !self.direct {
                // Without O_DIRECT each round must start from disk: evict and verify.
                for o in self.owners.iter().take(p) {
                    let c = evict_check(self.ctx, &o.file, "reader file", true)?;
                    self.evictions.add(&c);
                }
            }
            let per_block = self.round(p, dur)?;
            rates.push(per_block.iter().map(|t| 1e9 / t).sum::<f64>());
            vals.extend(per_block);
        }
        self.aggregate
            .push([p as f64, crate::stats::median(&rates)]);
        self.per_p.push((p, vals));
        Ok(())
    }

    /// One round of `p` readers released together, from their cursors: ns per block each.
    fn round(&mut self, p: usize, dur: Duration) -> anyhow::Result<Vec<f64>> {
        let bufs: Vec<*mut u8> = self.bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let before = self.device.counter();
        let rd = &*self;
        // SAFETY: `read_blocks` is async-signal-safe on its file and the buffer above.
        unsafe {
            rd.children.run(p, &rd.cpus, "reader process", |i, start| {
                rd.read_blocks(i, bufs[i], start, dur)
            })?
        };
        let (mut lo, mut hi, mut per_block, mut blocks) = (u64::MAX, 0, Vec::new(), 0);
        for i in 0..p {
            let (start, s) = self.children.get(i);
            if s.blocks == 0 {
                anyhow::bail!("reader process {i} could not read its file");
            }
            per_block.push(s.ns as f64 / s.blocks as f64);
            self.cursor[i] += s.blocks;
            blocks += s.blocks;
            lo = lo.min(start);
            hi = hi.max(start);
        }
        let after = self.device.counter();
        self.device.add(before, after, blocks * BLOCK as u64);
        let spread = self.ctx.clock.ticks_to_ns(hi.saturating_sub(lo) as f64) as u64;
        self.spreads.push((p, spread));
        Ok(per_block)
    }

    /// Reader `i` after its release at `start`: reads its file from its cursor for `dur`.
    ///
    /// # Safety
    /// In a forked child: only async-signal-safe calls (pread, the run's clock), on `buf`,
    /// BLOCK writable aligned bytes prepared before the fork.
    unsafe fn read_blocks(
        &self,
        i: usize,
        buf: *mut u8,
        start: u64,
        dur: Duration,
    ) -> ReaderResult {
        let (clock, fd, nblocks) = (self.ctx.clock, self.files[i].as_raw_fd(), self.nblocks[i]);
        let until = Deadline::after(clock, dur);
        let (mut blocks, mut pos) = (0u64, self.cursor[i] % nblocks.max(1));
        loop {
            if pos >= nblocks {
                // Without O_DIRECT a second pass would hit the cache: stop instead.
                if !self.direct {
                    break;
                }
                pos = 0;
            }
            let off = (pos * BLOCK as u64) as libc::off_t;
            let n = libc::pread(fd, buf.cast(), BLOCK, off);
            if n != BLOCK as isize {
                return ReaderResult::default();
            }
            pos += 1;
            blocks += 1;
            if until.passed() {
                break;
            }
        }
        let ns = clock.ticks_to_ns(clock.now().saturating_sub(start) as f64) as u64;
        ReaderResult { blocks, ns }
    }

    pub(super) fn checks(&self, out: &mut Outcome, dur: Duration) {
        out.check(self.device.check());
        let reread = self.cursor.iter().zip(&self.nblocks);
        let reread: u64 = reread.map(|(&c, &b)| c.saturating_sub(b)).sum();
        let total: u64 = self.cursor.iter().sum();
        let size = |b: Option<&u64>| fmt_bytes((b.copied().unwrap_or(0) * BLOCK as u64) as f64);
        let (big, small) = (size(self.nblocks.first()), size(self.nblocks.last()));
        let detail = format!("{reread} of {total} blocks read were read before by the same reader (files of {big} down to {small}; a device or host cache can serve those)");
        // A block read again may come from a cache no counter sees: unverified, not invalid.
        let name = "each block read at most once";
        out.check(match reread {
            0 => Check::premise(name, true, detail),
            _ => Check::unverified(name, detail),
        });
        if !self.direct {
            let ev = &self.evictions;
            out.check(ev.premise(
                "uncached reads: files evicted and verified (mincore) before every round",
                format!("O_DIRECT not supported; {} of {} evictions verified (a file larger than a round's reads, random advice)", ev.passed, ev.total),
            ));
        }
        out.check(release_check(&self.spreads, dur.as_nanos() as u64));
    }
}

/// Largest spread of the readers' start times, as a share of a round.
const RELEASE_SHARE: f64 = 0.10;

/// Premise: every round's spread of start times (`spreads`, ns) within RELEASE_SHARE.
pub(super) fn release_check(spreads: &[(usize, u64)], round_ns: u64) -> Check {
    let limit = (round_ns as f64 * RELEASE_SHARE) as u64;
    let worst = spreads.iter().max_by_key(|s| s.1).copied();
    let (n, lim) = (spreads.len(), fmt_ns(limit as f64));
    let detail = worst.map_or("no round ran".into(), |(p, w)| {
        let w = fmt_ns(w as f64);
        format!("largest spread of start times {w} (P = {p}) over {n} rounds, limit {lim} (10% of a round); each reader timestamps its start right after a pipe barrier the parent opens once all are ready")
    });
    let together = worst.is_some_and(|w| w.1 <= limit);
    Check::premise("readers released together", together, detail)
}

/// The readers' CPUs: `Topology::spread` from the run's CPU (P = 1 reads as fs.read does).
pub(super) fn reader_order(
    t: &crate::machine::Topology,
    first: usize,
    allowed: &[usize],
) -> Vec<usize> {
    let mut t = t.clone();
    if t.chosen_cpu != Some(first) {
        t.choose(first, "the CPU this run measures on");
    }
    t.spread(allowed, allowed.len())
}

/// What the readers shared at the largest P measured: CPUs, else physical cores.
pub(super) fn sharing_note(
    t: &crate::machine::Topology,
    cpus: &[usize],
    p: usize,
) -> Option<String> {
    let plural = |k: usize| if k == 1 { "" } else { "s" };
    let n = cpus.len().max(1);
    if p > n {
        let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        let (s, first, list) = (plural(n), n + 1, list.join(", "));
        return Some(format!("readers shared CPUs from P = {first} on: {p} readers on {n} CPU{s} ({list}, reader i on the (i mod {n})-th), so the per-block times there include waiting for a CPU, not only for the device"));
    }
    let shared = t.describe_cpus(&cpus[..p]).smt_shared;
    let (k, s) = (shared.len(), plural(shared.len()));
    shared.first().map(|&(c, e)| {
        format!("each reader had its own CPU, but at P = {p} {k} reader{s} shared a physical core with another (SMT siblings, first CPU {c} with CPU {e}): every core already had a reader")
    })
}
