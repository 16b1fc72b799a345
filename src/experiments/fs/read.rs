//! fs.read: per-block (4 KiB) read time vs file size, sequential and random, uncached
//! and cached. The sweep here is shared with fs.remote-read.

use super::{memory_limits, on_disk, predict_cached, predict_uncached};
use crate::clock::Deadline;
use crate::experiments::kit::files::{
    direct_works, evict_check, make_file, read_through, reopen, BlockReader, BlockTimes,
    DeviceReads, Pattern, RepeatedCheck, Timing, BLOCK, MIB, MIN_SAMPLES,
};
use crate::experiments::predict::Predictions;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::pagecache;
use crate::results::{Check, Prediction};
use crate::rng::Rng;
use crate::scratch::Scratch;
use crate::units::{doublings, fmt_bytes, fmt_ns};
use std::fs::File;
use std::time::Duration;

pub struct Read;

const CAP: PerProfile<u64> = PerProfile::new(4 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB);

/// Reading time per (size, pattern) pass: uncached, cached.
const SLICES: PerProfile<(Duration, Duration)> = PerProfile::new(
    (ms(40), ms(10)),
    (ms(60), ms(15)),
    (ms(400), ms(80)),
    (ms(1000), ms(200)),
);

pub(crate) struct SweepPlan<'c> {
    pub sizes: Vec<u64>,
    pub uncached: Duration,
    pub cached: Duration,
    pub label: &'static str,
    /// No new size is started past this, so a busy machine cannot overstay the budget.
    pub deadline: Option<Deadline<'c>>,
}

impl<'c> SweepPlan<'c> {
    pub fn new(ctx: &'c Context, largest: u64, label: &'static str, within: Duration) -> Self {
        let (uncached, cached) = SLICES.get(ctx.profile);
        SweepPlan {
            sizes: doublings(MIB, largest.max(MIB)),
            uncached,
            cached,
            label,
            deadline: Some(ctx.harness(1).deadline(within)),
        }
    }
}

pub(crate) struct SweepPass {
    pub size: u64,
    pub cached: bool,
    pub pattern: Pattern,
    pub times: BlockTimes,
}

impl SweepPass {
    pub fn median(&self) -> f64 {
        crate::stats::median(&self.times.per_block_ns)
    }
}

/// A size's passes, in the order their metrics are reported: (cached, pattern).
pub(crate) const PASSES: [(bool, Pattern); 4] = [
    (false, Pattern::Sequential),
    (false, Pattern::Random),
    (true, Pattern::Sequential),
    (true, Pattern::Random),
];

pub(crate) fn metric_name(cached: bool, pattern: Pattern) -> String {
    let how = if cached { "cached" } else { "uncached" };
    format!("{how}_{}", pattern.name())
}

/// fs.read's models for a sweep's `passes`, named with `prefix`.
pub(crate) fn predict_sweep(p: &mut Predictions, prefix: &str, passes: &[(bool, Pattern)]) {
    let dir = p.ctx().options.scratch_dir.clone();
    let dir = dir.unwrap_or_else(|| ".".into());
    for &(cached, pattern) in passes {
        let name = format!("{prefix}{}", metric_name(cached, pattern));
        if cached {
            predict_cached(p, &name);
        } else {
            predict_uncached(p, &name, &dir, pattern);
        }
    }
}

pub(crate) struct Sweep<'a> {
    ctx: &'a Context<'a>,
    pub plan: SweepPlan<'a>,
    pub points: Vec<SweepPass>,
    notes: Vec<String>,
    /// Whether O_DIRECT works, known once the first file exists.
    direct: Option<bool>,
    evicted: RepeatedCheck,
    resident: RepeatedCheck,
    device: DeviceReads,
    bigbuf: Vec<u8>,
}

/// Runs the sweep in `scratch`: each size read uncached and cached, in both patterns.
pub(crate) fn sweep<'a>(
    ctx: &'a Context,
    scratch: &Scratch,
    plan: SweepPlan<'a>,
) -> anyhow::Result<Sweep<'a>> {
    let mut rng = Rng::new(0x05ee_d0f5 ^ plan.sizes.len() as u64);
    let mut s = Sweep {
        ctx,
        plan,
        points: Vec::new(),
        notes: Vec::new(),
        direct: None,
        evicted: RepeatedCheck::default(),
        resident: RepeatedCheck::default(),
        device: DeviceReads::new(ctx, scratch.dir()),
        bigbuf: vec![0u8; MIB as usize],
    };
    for size in s.plan.sizes.clone() {
        anyhow::ensure!(!crate::scratch::stopping(), "interrupted");
        if !s.points.is_empty() && s.plan.deadline.is_some_and(|d| d.passed()) {
            s.notes.push(format!(
                "stopped before {} by the time budget (the machine is slow or busy)",
                fmt_bytes(size as f64)
            ));
            break;
        }
        s.size(scratch, size, &mut rng)?;
    }
    Ok(s)
}

impl Sweep<'_> {
    /// The four passes of one size; the random uncached one reads a fresh file, uncached.
    fn size(&mut self, scratch: &Scratch, size: u64, rng: &mut Rng) -> anyhow::Result<()> {
        let (ctx, label) = (self.ctx, self.plan.label);
        let sz = fmt_bytes(size as f64);
        (ctx.progress)(&format!("{label}: writing {sz}"));
        let name = format!("{label}-{size}");
        let f = make_file(scratch, &name, size, rng.next_u64())?;
        let direct = *self.direct.get_or_insert_with(|| direct_works(&f.file));
        let order = rng.permutation((size / BLOCK as u64) as usize);
        let fr = make_file(scratch, &format!("{name}-r"), size, rng.next_u64())?;
        for (pattern, file) in [(Pattern::Sequential, &f.file), (Pattern::Random, &fr.file)] {
            (ctx.progress)(&format!("{label}: {sz} uncached {}", pattern.name()));
            self.uncached(file, size, pattern, &order, direct)?;
        }
        let fd = reopen(&f.file, false, false)?;
        // Read the whole file until every page is resident (three tries at most).
        for _ in 0..3 {
            read_through(&fd, size, &mut self.bigbuf)?;
            if pagecache::residency(&fd)?.0 == size / pagecache::page_size() as u64 {
                break;
            }
        }
        for pattern in [Pattern::Sequential, Pattern::Random] {
            (ctx.progress)(&format!("{label}: {sz} cached {}", pattern.name()));
            self.cached(&fd, size, pattern, &order)?;
        }
        Ok(())
    }

    /// One uncached pass: evicted, O_DIRECT where it works, each block read at most once.
    fn uncached(
        &mut self,
        file: &File,
        size: u64,
        pattern: Pattern,
        order: &[u32],
        direct: bool,
    ) -> anyhow::Result<()> {
        let sz = fmt_bytes(size as f64);
        let c = evict_check(self.ctx, file, &format!("{sz} file"), !bypasses(direct))?;
        self.evicted.add(&c);
        let fd = reopen(file, direct, false)?;
        if !direct {
            // No readahead for the random order.
            crate::platform::advise(&fd, pattern.access());
        }
        // The largest size gives the metrics: it gets three times as long.
        let last = Some(&size) == self.plan.sizes.last();
        let slice = self.plan.uncached * if last { 3 } else { 1 };
        let reader = BlockReader::new(&fd, size, pattern, order, Timing::EachRead)?;
        let before = self.device.counter();
        let times = reader.time(self.ctx, slice)?;
        let bytes = times.blocks * BLOCK as u64;
        self.device.add(before, self.device.counter(), bytes);
        let n = times.per_block_ns.len();
        self.record(size, false, pattern, times);
        if n < MIN_SAMPLES {
            let pat = pattern.name();
            let note = format!("{sz} uncached {pat}: only {n} trials (every block read once)");
            self.notes.push(note);
        }
        Ok(())
    }

    /// One cached pass in ~0.2 ms chunks, every page resident throughout (three tries).
    fn cached(
        &mut self,
        fd: &File,
        size: u64,
        pattern: Pattern,
        order: &[u32],
    ) -> anyhow::Result<()> {
        let (sz, pat) = (fmt_bytes(size as f64), pattern.name());
        let chunks = Timing::Chunks(Duration::from_micros(200));
        for attempt in 1..=3 {
            let before = pagecache::residency(fd)?;
            let reader = BlockReader::new(fd, size, pattern, order, chunks)?;
            let times = reader.time(self.ctx, self.plan.cached)?;
            let after = pagecache::residency(fd)?;
            let whole = before.0 == before.1 && after.0 == after.1;
            if !whole && attempt < 3 {
                read_through(fd, size, &mut self.bigbuf)?;
                continue;
            }
            let ((b0, b1), a0) = (before, after.0);
            self.resident.record(whole, || {
                format!("{sz} {pat}: {b0} of {b1} pages resident before, {a0} after (memory pressure evicted the file)")
            });
            if whole && attempt > 1 {
                self.notes.push(format!(
                    "{sz} cached {pat}: pages were evicted during a pass by memory pressure; measured again"
                ));
            }
            self.record(size, true, pattern, times);
            break;
        }
        Ok(())
    }

    /// Keeps a pass, with the harness's notes on it.
    fn record(&mut self, size: u64, cached: bool, pattern: Pattern, times: BlockTimes) {
        let (sz, name) = (fmt_bytes(size as f64), metric_name(cached, pattern));
        let pass = format!("{sz} {name}");
        let notes = times.notes.iter().map(|n| format!("{pass}: {n}"));
        self.notes.extend(notes);
        self.points.push(SweepPass {
            size,
            cached,
            pattern,
            times,
        });
    }

    fn direct(&self) -> bool {
        self.direct.unwrap_or(false)
    }

    pub fn get(&self, size: u64, cached: bool, pattern: Pattern) -> Option<&SweepPass> {
        self.points
            .iter()
            .find(|p| p.size == size && p.cached == cached && p.pattern == pattern)
    }

    pub fn largest(&self) -> u64 {
        self.points.iter().map(|p| p.size).max().unwrap_or(0)
    }

    fn checks(&self) -> [Check; 3] {
        let direct = self.direct();
        let ev = &self.evicted;
        let (ok, n, all, last) = (ev.passed, ev.total, ev.all(), &ev.last_failure);
        let (support, bypass) = match (direct, bypasses(direct)) {
            (true, true) => ("", " (O_DIRECT bypasses it anyway)"),
            (true, false) => ("", " (uncached reads here serve pages already cached)"),
            (false, _) => ("O_DIRECT not supported here; ", ""),
        };
        let detail = match all {
            true => format!("{support}{ok} of {n} passes started with no page cached"),
            false => format!("{ok} of {n} verified; last: {last}{bypass}"),
        };
        // Where uncached reads bypass the cache the eviction is only a sanity check.
        let evicted = "files evicted before uncached passes (mincore)";
        let eviction = match bypasses(direct) {
            true => Check::sanity(evicted, all, detail),
            false => Check::premise(EVICTED_UNCACHED, all, detail),
        };
        let res = &self.resident;
        let (ok, n) = (res.passed, res.total);
        let detail = format!("{ok} of {n} cached passes fully resident");
        let name = "cached reads: every page resident before and after (mincore)";
        [self.device.check(), eviction, res.premise(name, detail)]
    }
}

/// Whether reads miss even cached pages: O_DIRECT does, macOS's F_NOCACHE does not (N3).
fn bypasses(direct: bool) -> bool {
    direct && crate::platform::uncached_bypasses_cache()
}

const EVICTED_UNCACHED: &str =
    "uncached reads: evicted with posix_fadvise(DONTNEED) and verified with mincore";

/// A sweep's checks, notes, series and metrics, named with `prefix` (checks with "side: ").
pub(crate) fn report(out: &mut Outcome, s: &Sweep, prefix: &str) {
    let side = match prefix.trim_end_matches('_') {
        "" => String::new(),
        side => format!("{side}: "),
    };
    for c in s.checks() {
        let name = format!("{side}{}", c.name);
        out.check(Check { name, ..c });
    }
    let notes = s.notes.iter().map(|n| format!("{side}{n}"));
    out.notes.extend(notes);
    let largest = s.largest();
    for (cached, pattern) in PASSES {
        let name = format!("{prefix}{}", metric_name(cached, pattern));
        let passes = s
            .points
            .iter()
            .filter(|p| (p.cached, p.pattern) == (cached, pattern));
        let points = passes.map(|p| [p.size as f64, p.median()]).collect();
        out.plot(&format!("{name}_vs_size"), "bytes", "ns", points);
        let Some(p) = s.get(largest, cached, pattern) else {
            continue;
        };
        let how = describe(cached, pattern, s.direct(), pagecache::page_size());
        let at = fmt_bytes(largest as f64);
        let desc = format!("{how}, {at} file ({} blocks read)", p.times.blocks);
        let raw = p.times.per_block_ns.clone();
        if cached {
            // A cached block is a system call and a 4 KiB copy from memory.
            out.metric(&name, "ns", &desc, raw)
                .shares(crate::results::Bottleneck::Copy);
        } else {
            // Uncached reads are timed one by one: keep their distribution.
            out.distribution(&name, "ns", &desc, raw);
        }
    }
    for pattern in [Pattern::Sequential, Pattern::Random] {
        let med = |cached| {
            s.get(largest, cached, pattern)
                .map_or(f64::NAN, |p| p.median())
        };
        let (u, c) = (med(false), med(true));
        let (cs, us) = (fmt_ns(c), fmt_ns(u));
        let detail = format!("cached {cs} vs uncached {us} ({:.1}x)", u / c);
        let name = format!("{side}cached {} faster than uncached", pattern.name());
        out.check(Check::sanity(&name, c < u, detail));
    }
}

/// How an uncached pass read where O_DIRECT worked (fs.contention's readers read so too).
pub(crate) const DIRECT: &str = "through O_DIRECT";

/// How a pass read, and the page behind each block where pages are larger.
fn describe(cached: bool, pattern: Pattern, direct: bool, page: usize) -> String {
    let how = match (cached, direct, pattern) {
        (true, ..) => "cached (one value per ~0.2 ms of reads)",
        (false, true, _) => "uncached through O_DIRECT (one value per read)",
        (false, false, Pattern::Sequential) => "uncached, evicted first, readahead (one per read)",
        (false, false, Pattern::Random) => "uncached, evicted first, no readahead (one per read)",
    };
    let whole = match (cached, direct) {
        _ if page <= BLOCK => String::new(),
        (true, _) => format!("; each copied from a {} KiB page", page / 1024),
        (false, false) => format!("; each brings a whole {} KiB page in", page / 1024),
        (false, true) => String::new(),
    };
    format!("time per 4 KiB read, {how}, {}{whole}", pattern.describe())
}

const SPEC: Spec = Spec {
    id: "fs.read",
    title: "File read time per 4 KiB block vs file size",
    description: "per-block read time vs file size: sequential read() and random pread(), uncached and cached",
    method: crate::method!("fs.read"),
    needs: Needs {
        disk_bytes: 2 * CAP.get(Profile::Quick),
        ..Needs::NONE
    },
    // The device (cached reads declare `Copy` per metric).
    ..Spec::DEVICE
};

impl Experiment for Read {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        let (u, c) = SLICES.get(p);
        let n = doublings(MIB, CAP.get(p)).len() as u32;
        // Passes (the largest size's uncached three times as long), writing at ~200 MB/s.
        (u + c) * 2 * n + u * 4 + Duration::from_secs_f64(2.0 * CAP.get(p) as f64 / 200e6)
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        predict_sweep(&mut p, "", &PASSES);
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mem = memory_limits(ctx.machine).iter().map(|l| l.1).min();
        let mem = mem.unwrap_or(u64::MAX);
        // The cached pass needs the file in memory: at most a quarter of what is free.
        let cap = CAP.get(ctx.profile);
        let mut largest = cap.min(mem / 4);
        if largest < MIB {
            return Ok(Outcome::skipped(format!(
                "too little memory for a cached 1 MiB file (available {})",
                fmt_bytes(mem as f64)
            )));
        }
        let (scratch, mut out) = match on_disk(ctx, MIB)? {
            Ok(x) => x,
            Err(reason) => return Ok(Outcome::skipped(reason)),
        };
        // Two files of each size at a time, within the allowance.
        while largest > MIB && 2 * largest > scratch.remaining() {
            largest /= 2;
        }
        if largest < cap {
            let [at, cap] = [largest, cap].map(|b| fmt_bytes(b as f64));
            let note =
                format!("largest file {at} (profile cap {cap}), limited by free space or memory");
            out.notes.push(note);
        }
        let plan = SweepPlan::new(ctx, largest, "read", ctx.budget * 2);
        let s = sweep(ctx, scratch, plan)?;
        report(&mut out, &s, "");
        out.pool(ctx);
        findings(&mut out, &s);
        Ok(out)
    }
}

/// The cached and uncached figures at the largest size, and whether position matters.
fn findings(out: &mut Outcome, s: &Sweep) {
    use crate::analysis::Separation;
    let names = PASSES.map(|(cached, pattern)| metric_name(cached, pattern));
    let [us, ur, cs, cr] = names.each_ref().map(|n| out.median(n));
    let [tus, tur, tcs, tcr] = [us, ur, cs, cr].map(fmt_ns);
    let (at, rs, rr) = (fmt_bytes(s.largest() as f64), us / cs, ur / cr);
    let how = match s.direct() {
        true => "O_DIRECT",
        false => "evicted, with readahead for sequential",
    };
    let text = format!("At {at}, a cached 4 KiB read costs {tcs} sequential / {tcr} random; uncached ({how}) it costs {tus} / {tur} ({rs:.0}x / {rr:.0}x the cached figures).");
    out.finding(text, &names.each_ref().map(String::as_str));
    // Whether position matters, from the intervals; the cause is not measured, so not named.
    let position = match out.separation("uncached_random", "uncached_seq") {
        Separation::Above => ", beyond both 95% intervals: the position of a read matters on this device as reached from here",
        Separation::Overlap => ", within noise of each other (their 95% intervals overlap): no cost of position shows here",
        Separation::Below => "; random reads are the faster ones here, beyond both 95% intervals",
    };
    let ratio = ur / us;
    let text = format!("Uncached random reads cost {ratio:.2}x sequential ones{position}.");
    out.finding(text, &["uncached_seq", "uncached_random"]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::{assert_invalid_by, skip, World};

    /// Review §2e: with 64 KiB pages and no O_DIRECT an uncached 4 KiB read brings a whole
    /// page in, and the description says so from the machine's page size.
    #[test]
    fn descriptions_name_the_page_where_it_is_larger_than_a_block() {
        let d = describe(false, Pattern::Sequential, false, 65536);
        assert!(
            d.contains("whole 64 KiB page") && d.contains("readahead"),
            "{d}"
        );
        assert!(describe(true, Pattern::Random, true, 65536).contains("from a 64 KiB page"));
        let d = describe(false, Pattern::Random, true, 65536);
        assert!(d.contains(DIRECT) && !d.contains("page"), "{d}");
        assert!(!describe(false, Pattern::Sequential, false, 4096).contains("page"));
    }

    /// Review N3: where uncached reads serve pages already cached (macOS's F_NOCACHE), a
    /// failed eviction makes the uncached figures invalid even though uncached reads work;
    /// before, it was a sanity check ("O_DIRECT bypasses it anyway") and the status ok.
    #[test]
    fn a_failed_eviction_is_a_premise_where_uncached_reads_see_the_cache() {
        crate::platform::DARWIN_FILES.with(|d| d.set(true));
        pagecache::CACHED_AT_EVICTION.with(|c| c.set(true));
        let clock = crate::clock::CoarseClock::new(1e9);
        let r = World::live(&clock).run(&Read);
        if r.status == crate::results::Status::Skipped {
            return skip(
                "a_failed_eviction_is_a_premise_where_uncached_reads_see_the_cache",
                &format!("{:?}", r.reason),
            );
        }
        assert_invalid_by(&r, EVICTED_UNCACHED);
        let c = crate::experiments::testing::check(&r, EVICTED_UNCACHED);
        assert!(
            c.detail.contains("serve pages already cached"),
            "{}",
            c.detail
        );
    }
}
