//! fs.contention's readers: forked children, their CPUs and one round.

use super::*;
use crate::platform::CpuMask;
use crate::scratch::ScratchFile;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct ReaderResult {
    /// None read where a read failed.
    blocks: u64,
    ns: u64,
}

/// A reader after its release at `start`: reads its file from block `first` for `dur`.
///
/// # Safety
/// In a forked child: only async-signal-safe calls (pread, the run's clock), on `buf`,
/// BLOCK writable aligned bytes prepared before the fork.
pub(super) unsafe fn read_blocks(
    rd: &Readers<'_>,
    i: usize,
    first: u64,
    buf: *mut u8,
    start: u64,
    dur: Duration,
) -> ReaderResult {
    let (clock, fd, nblocks) = (rd.ctx.clock, rd.files[i].as_raw_fd(), rd.nblocks[i]);
    let until = Deadline::after(clock, dur);
    let (mut blocks, mut pos) = (0u64, first % nblocks.max(1));
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

/// The readers: their files, buffers and CPUs, and the children that read.
pub(super) struct Readers<'c> {
    ctx: &'c Context<'c>,
    files: Vec<File>,
    /// The scratch files, evicted before each round without O_DIRECT.
    owners: Vec<ScratchFile>,
    bufs: Vec<AlignedBuf>,
    children: Children<'c, ReaderResult>,
    /// The readers' CPUs in order.
    pub(super) order: Vec<usize>,
    cpus: Vec<CpuMask>,
    nblocks: Vec<u64>,
    /// O_DIRECT works: readers may wrap around their file.
    pub(super) direct: bool,
}

impl<'c> Readers<'c> {
    /// A reader per file (O_DIRECT where it works, else random advice); reader i on the i-th
    /// CPU of `reader_order`, modulo the allowed CPUs.
    pub(super) fn new(
        ctx: &'c Context<'c>,
        owners: Vec<ScratchFile>,
        sizes: &[u64],
    ) -> anyhow::Result<Self> {
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
            files,
            bufs: (0..owners.len())
                .map(|_| AlignedBuf::new(BLOCK, BLOCK))
                .collect::<Result<_, _>>()?,
            children: Children::new(owners.len(), ctx.clock)?,
            cpus: order
                .iter()
                .map(|&c| CpuMask::single(c))
                .collect::<Result<_, _>>()?,
            order,
            owners,
            nblocks: sizes.iter().map(|b| b / BLOCK as u64).collect(),
            direct,
        })
    }

    /// The rounds of `p` readers, added to `m`.
    pub(super) fn measure(&mut self, m: &mut ContentionRounds, p: usize) -> anyhow::Result<()> {
        let (dur, rounds) = ROUND.get(self.ctx.profile);
        let (mut vals, mut rates) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            (self.ctx.progress)(&format!("P = {p}, round {}/{rounds}", r + 1));
            if crate::scratch::stopping() {
                anyhow::bail!("interrupted");
            }
            if !self.direct {
                // Without O_DIRECT each round must start from disk: evict and verify.
                for o in self.owners.iter().take(p) {
                    let c = evict_check(self.ctx, &o.file, "reader file", true)?;
                    m.evictions.add(&c);
                }
            }
            let per_block = self.round(m, p, dur)?;
            rates.push(per_block.iter().map(|t| 1e9 / t).sum::<f64>());
            vals.extend(per_block);
        }
        m.aggregate.push([p as f64, crate::stats::median(&rates)]);
        m.per_p.push((p, vals));
        Ok(())
    }

    /// One round of `p` readers released together, from their cursors: ns per block each.
    fn round(
        &mut self,
        m: &mut ContentionRounds,
        p: usize,
        dur: Duration,
    ) -> anyhow::Result<Vec<f64>> {
        let bufs: Vec<*mut u8> = self.bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let (rd, first) = (&*self, &m.cursor);
        let before = m.device.counter();
        // SAFETY: each reader's body is `read_blocks`, async-signal-safe on its file and
        // the buffer prepared above.
        unsafe {
            rd.children.run(p, &rd.cpus, "reader process", |i, start| {
                read_blocks(rd, i, first[i], bufs[i], start, dur)
            })?
        };
        let (mut lo, mut hi, mut per_block, mut blocks) = (u64::MAX, 0, Vec::new(), 0);
        for i in 0..p {
            let (start, s) = rd.children.get(i);
            if s.blocks == 0 {
                anyhow::bail!("reader process {i} could not read its file");
            }
            per_block.push(s.ns as f64 / s.blocks as f64);
            m.cursor[i] += s.blocks;
            blocks += s.blocks;
            lo = lo.min(start);
            hi = hi.max(start);
        }
        m.device
            .add(before, m.device.counter(), blocks * BLOCK as u64);
        let spread = rd.ctx.clock.ticks_to_ns(hi.saturating_sub(lo) as f64) as u64;
        m.spreads.push((p, spread));
        Ok(per_block)
    }
}

/// The readers' CPUs: `Topology::spread` from `first`, the run's CPU, so P = 1 reads as
/// fs.read does; SMT siblings last.
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
