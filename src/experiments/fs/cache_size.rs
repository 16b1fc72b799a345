//! fs.cache-size: how much file data the page cache holds. Files of growing size are
//! read twice; where the second read stops being served from memory is the capacity.

use super::{memory_limits, on_disk};
use crate::experiments::kit::files::{
    append, make_file, read_through, reopen, DeviceReads, BLOCK, MIB,
};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::pagecache;
use crate::results::{Bound, Check, Prediction};
use crate::scratch::ScratchFile;
use std::fs::File;

pub struct CacheSize;

/// Largest file; thorough also goes to 1.5 x RAM where the disk allows.
const CAP: PerProfile<u64> = PerProfile::new(64 * MIB, 1024 * MIB, 8192 * MIB, 8192 * MIB);

const FIRST_SIZE: PerProfile<u64> = PerProfile::new(4 * MIB, 16 * MIB, 16 * MIB, 16 * MIB);

/// Share of the file resident before a second read for it to count as from memory.
const RESIDENT_MIN: f64 = 0.97;
/// Bisection stops when the bracket is this narrow (ratio of sizes).
const RESOLUTION: f64 = 1.06;

/// Sizes on a 1 MiB grid, exact enough to tell neighbours apart.
fn fmt_mib(b: u64) -> String {
    if b >= 10 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", b.div_ceil(MIB))
    }
}

#[derive(Debug, Clone)]
struct SizeProbe {
    size: u64,
    /// ns per byte of the first read (after eviction) and of the second.
    first: f64,
    second: f64,
    /// Share of [0, size) resident after the first read (before the second).
    resident: f64,
    resident_bytes: f64,
    evicted: bool,
    seconds: f64,
}

/// Whether a probe's second read came from memory: resident and, where timing tells, fast.
fn served(p: &SizeProbe, threshold: Option<f64>) -> bool {
    p.resident >= RESIDENT_MIN && threshold.map_or(true, |t| p.second <= t)
}

/// A size between two, geometrically, on a 1 MiB grid.
fn midpoint(lo: u64, hi: u64) -> u64 {
    let m = ((lo as f64) * (hi as f64)).sqrt();
    ((m / MIB as f64).round() as u64).max(1) * MIB
}

fn cache_prediction(ctx: &Context) -> Prediction {
    let limits = memory_limits(ctx.machine);
    let Some(value) = limits.iter().map(|l| l.1).min() else {
        return Prediction::withheld("neither MemAvailable nor a memory cgroup limit is known");
    };
    let p = Prediction::new(
        value as f64,
        "min(MemAvailable, memory cgroup limit): free memory plus reclaimable cache, capped by the cgroup whose page cache is charged",
    );
    let add = |p: Prediction, (name, v, src): (&str, u64, String)| {
        p.machine(name, v as f64, "bytes", src)
    };
    limits.into_iter().fold(p, add)
}

const SPEC: Spec = Spec {
    id: "fs.cache-size",
    title: "File (page) cache size",
    description: "files of growing size read twice; where the second read stops coming from memory is the page cache's size",
    method: crate::method!("fs.cache-size"),
    needs: Needs {
        disk_bytes: 1024 * MIB,
        ..Needs::NONE
    },
    budget: Some(PerProfile::new(ms(3_000), ms(3_000), ms(120_000), ms(900_000))),
    // The device and the cache's size (the cached rate declares `Copy`).
    ..Spec::DEVICE
};

impl Experiment for CacheSize {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    /// Once: the figure is a size, not a time, and a run writes up to the cache's size.
    fn default_repeat(&self, _: Profile) -> usize {
        1
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        p.add("cache_size", cache_prediction(ctx));
        // A bound on the size is bounded by the size's prediction.
        for (metric, bound, what) in [
            ("cache_size_lower_bound", Bound::Upper, "a lower bound on that size (the search stopped first), so measured/predicted at or below 1 agrees"),
            ("cache_size_upper_bound", Bound::Lower, "an upper bound on that size (even the smallest size tried was not served), so measured/predicted at or above 1 agrees"),
        ] {
            let mut b = cache_prediction(ctx);
            if b.withheld.is_none() {
                b.formula.push_str(&format!("; this figure is {what}"));
                b.bound = Some(bound);
            }
            p.add(metric, b);
        }
        let reclaim = "what the cache keeps of a file larger than it depends on the kernel's \
                       reclaim policy (active and inactive lists, MGLRU generations), which no \
                       model here covers";
        p.withhold(&["resident_after_overflow"], reclaim);
        // A cached 1 MiB read is a copy from the page cache to the user buffer.
        let copy = p.earlier("mem.bandwidth", &["copy_1t"]).named("copy_rate");
        let f = "copy rate: a cached read copies from the page cache to the user buffer (the \
                 page-cache lookup per page is not in the model)";
        p.equal("cached_read_rate", &copy, f);
        // A cold 1 MiB read is fs.read's sequential pass in larger (no slower) requests.
        let seq = p.earlier("fs.read", &["uncached_seq"]);
        let block = Input::method("block", BLOCK as f64, "bytes", "method: fs.read's block");
        let f = "4096 B / fs.read uncached_seq: the rate of 4 KiB sequential reads from the \
                 device, a lower bound for 1 MiB reads (larger requests, fewer of them)";
        p.state("cold_read_rate", &[&seq, &block], |v| {
            Prediction::new(v[1] / v[0] * 1e9, f).lower_bound()
        });
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let start = ctx.harness(1).stopwatch();
        let s0 = FIRST_SIZE.get(ctx.profile);
        let (scratch, mut out) = match on_disk(ctx, s0)? {
            Ok(x) => x,
            Err(reason) => return Ok(Outcome::skipped(reason)),
        };
        // The search's limits (thorough: 1.5 x MemTotal, else 16 GiB), each with what it is.
        let p = ctx.profile;
        let ram = Some(ctx.machine.memory.total_bytes).filter(|&t| t > 0);
        let thorough = (p == Profile::Thorough).then(|| ram.unwrap_or(16 << 30) / 2 * 3);
        let cap = CAP.get(p).max(thorough.unwrap_or(0));
        let disk = scratch.remaining() / MIB * MIB;
        let cap_is = format!("the {} profile's cap of {}", p.name(), fmt_mib(cap));
        let disk_is = format!("half the free disk space ({})", fmt_mib(disk));
        let limits = [(cap, cap_is), (disk, disk_is)];
        let owner = make_file(scratch, "cache-size", 0, 0)?;
        let reader = reopen(&owner.file, false, false)?;
        let mut s = Search {
            ctx,
            owner,
            reader,
            device: DeviceReads::new(ctx, scratch.dir()),
            written: 0,
            buf: vec![0u8; MIB as usize],
            probes: Vec::new(),
            threshold: None,
            start,
            good: None,
            bad: None,
            stop_reason: None,
            note: None,
        };
        s.run(s0, &limits)?;
        out.notes.extend(s.note.iter().cloned());
        report_series(&mut out, &s.probes);
        report_rates(&mut out, &s);
        report_knee(&mut out, &s);
        Ok(out)
    }
}

struct Search<'a> {
    ctx: &'a Context<'a>,
    owner: ScratchFile,
    reader: File,
    /// The device's reads around the first size's cold read (`cold_read_rate`).
    device: DeviceReads,
    written: u64,
    buf: Vec<u8>,
    /// Every probe, the first size's first: its two reads give the cold and cached rates.
    probes: Vec<SizeProbe>,
    /// ns per byte below which a second read is from memory; None where timing cannot tell.
    threshold: Option<f64>,
    start: crate::clock::Stopwatch<'a>,
    /// The bracket: the largest size served and the smallest not served so far.
    good: Option<u64>,
    bad: Option<u64>,
    /// What stopped the doubling, and what cut bisection short.
    stop_reason: Option<String>,
    note: Option<String>,
}

impl Search<'_> {
    /// Doubles from the first size until one is not served or a limit stops it, then bisects.
    fn run(&mut self, s0: u64, limits: &[(u64, String)]) -> anyhow::Result<()> {
        // Cold vs cached rates from the first size tell whether timing can separate them;
        // where they do, the threshold between them does not change this size's place.
        let base = self.probe(s0)?;
        let contrast = base.first / base.second;
        self.threshold = (contrast >= 3.0).then(|| (base.first * base.second).sqrt());
        let budget = format!("the time budget ({:.0} s)", self.ctx.budget.as_secs_f64());
        while let (Some(g), None) = (self.good, self.bad) {
            let last = self.probes.last().map_or(0.0, |p| p.seconds);
            let limit = limits.iter().find(|l| g * 2 > l.0).map(|l| l.1.clone());
            self.stop_reason =
                limit.or_else(|| (!self.time_left(last * 2.5)).then(|| budget.clone()));
            if self.stop_reason.is_some() {
                break;
            }
            self.probe(g * 2)?;
        }
        while let (Some(g), Some(b)) = (self.good, self.bad) {
            let mid = midpoint(g, b);
            if b as f64 / g as f64 <= RESOLUTION || mid <= g || mid >= b {
                break;
            }
            let est = self
                .at(b)
                .map_or(0.0, |p| p.seconds * mid as f64 / b as f64);
            if !self.time_left(est) {
                let (gm, bm) = (fmt_mib(g), fmt_mib(b));
                self.note = Some(format!(
                    "bisection stopped by the time budget at [{gm}, {bm}]"
                ));
                break;
            }
            self.probe(mid)?;
        }
        Ok(())
    }

    fn time_left(&self, est: f64) -> bool {
        self.start.elapsed_ns() * 1e-9 + est < self.ctx.budget.as_secs_f64() * 0.85
    }

    /// Makes the file at least `size` long, evicts it, reads [0, size) twice, places it.
    fn probe(&mut self, size: u64) -> anyhow::Result<SizeProbe> {
        let t = self.ctx.harness(1).stopwatch();
        if size > self.written {
            (self.ctx.progress)(&format!("writing up to {}", fmt_mib(size)));
            self.owner.grow_booking(size)?;
            append(&self.owner.file, self.written, size, 0x5eed)?;
            self.written = size;
            // `append` may set F_NOCACHE on the description the reader shares (macOS, N1).
            self.reader = reopen(&self.owner.file, false, false)?;
        }
        (self.ctx.progress)(&format!("reading {} twice", fmt_mib(size)));
        let ev = pagecache::evict(&self.owner.file, self.ctx.options.drop_caches)?;
        let before = self.device.counter();
        let first = self.read_timed(size)?;
        if self.probes.is_empty() {
            self.device.add(before, self.device.counter(), size);
        }
        let (res, total) = pagecache::residency_range(&self.reader, 0, size)?;
        let mut second = self.read_timed(size)?;
        // A resident file read slowly is likelier a busy machine: best of up to three.
        if let Some(t) = self.threshold {
            for _ in 0..2 {
                if res * 100 < total * 97 || second <= t {
                    break;
                }
                second = second.min(self.read_timed(size)?);
            }
        }
        let p = SizeProbe {
            size,
            first,
            second,
            resident: res as f64 / total.max(1) as f64,
            resident_bytes: (res * pagecache::page_size() as u64) as f64,
            evicted: ev.verified(),
            seconds: t.elapsed_ns() * 1e-9,
        };
        let end = match served(&p, self.threshold) {
            true => &mut self.good,
            false => &mut self.bad,
        };
        *end = Some(size);
        self.probes.push(p.clone());
        Ok(p)
    }

    fn read_timed(&mut self, size: u64) -> anyhow::Result<f64> {
        let t = self.ctx.harness(1).stopwatch();
        read_through(&self.reader, size, &mut self.buf)?;
        Ok(t.elapsed_ns() / size as f64)
    }

    fn at(&self, size: u64) -> Option<&SizeProbe> {
        self.probes.iter().find(|p| p.size == size)
    }
}

fn report_series(out: &mut Outcome, probes: &[SizeProbe]) {
    let mut sorted = probes.to_vec();
    sorted.sort_by_key(|p| p.size);
    type Of = fn(&SizeProbe) -> f64;
    let curves: [(&str, &str, Of); 4] = [
        ("second_read_ns_per_byte_vs_size", "ns", |p| p.second),
        ("first_read_ns_per_byte_vs_size", "ns", |p| p.first),
        ("resident_fraction_vs_size", "fraction", |p| p.resident),
        ("resident_bytes_vs_size", "bytes", |p| p.resident_bytes),
    ];
    for (name, unit, f) in curves {
        let points = sorted.iter().map(|p| [p.size as f64, f(p)]).collect();
        out.plot(name, "bytes", unit, points);
    }
}

/// The eviction check, the first size's cold and cached rates, and what decided "served".
fn report_rates(out: &mut Outcome, s: &Search) {
    let seconds = s.start.elapsed_ns() * 1e-9;
    let (base, n) = (&s.probes[0], s.probes.len());
    let contrast = base.first / base.second;
    let evicted = s.probes.iter().filter(|p| p.evicted).count();
    let detail = format!("{evicted} of {n} probes started with no page cached");
    let name = "file evicted before every first read (mincore)";
    out.check(Check::sanity(name, evicted == n, detail));
    out.check(s.device.check());
    let first = fmt_mib(base.size);
    let desc = format!("second read of the first size ({first}), from memory");
    let rate = vec![1e9 / base.second];
    // From memory: copies, not the device.
    out.metric("cached_read_rate", "bytes/s", &desc, rate)
        .shares(crate::results::Bottleneck::Copy);
    let desc = format!("first read of the first size ({first}) after eviction, 1 MiB reads");
    out.metric("cold_read_rate", "bytes/s", &desc, vec![1e9 / base.first]);
    let decided = match s.threshold {
        Some(t) => format!(" and second read <= {t:.3} ns/byte"),
        None => format!(" (cold/cached contrast only {contrast:.1}x, so residency alone decides)"),
    };
    let share = RESIDENT_MIN * 100.0;
    let note =
        format!("probed {n} sizes in {seconds:.1} s; served = resident >= {share:.0}%{decided}");
    out.notes.push(note);
    if s.threshold.is_none() {
        let (cold, cached) = (1.0 / base.first, 1.0 / base.second);
        let text = format!("A cold read ({cold:.2} GB/s) is only {contrast:.1}x slower than a cached one ({cached:.2} GB/s) here, so time per byte cannot show the knee; residency (mincore) alone decides.");
        out.finding(text, &["cold_read_rate", "cached_read_rate"]);
    }
}

/// The capacity or a bound on it; at a knee, also what the cache kept past it.
fn report_knee(out: &mut Outcome, s: &Search) {
    let (name, value, desc, finding) = match (s.good, s.bad) {
        (Some(g), Some(b)) => {
            let (gm, bm) = (fmt_mib(g), fmt_mib(b));
            let desc = format!("largest file whose second read came from memory (the next size tried, {bm}, did not)");
            let finding = format!("The page cache held a {gm} file but not a {bm} one: its capacity for file data is about {gm} here.");
            ("cache_size", g, desc, finding)
        }
        (None, Some(b)) => {
            let desc = "even the smallest size tried was not served from memory".into();
            let finding = format!("Even a {} file was not kept in the page cache: it is smaller than the smallest size tried.", fmt_mib(b));
            ("cache_size_upper_bound", b, desc, finding)
        }
        (g, None) => {
            let g = g.unwrap_or(s.probes[0].size);
            let gm = fmt_mib(g);
            let why = s.stop_reason.as_deref().unwrap_or("the search limits");
            let desc = format!("larger than the largest size tried ({gm}), limited by {why}");
            let finding = format!("The page cache is larger than the largest size tried, {gm} (the search was stopped by {why}).");
            ("cache_size_lower_bound", g, desc, finding)
        }
    };
    out.metric(name, "bytes", &desc, vec![value as f64]);
    if let (Some(g), Some(pb)) = (s.good, s.bad.and_then(|b| s.at(b))) {
        let bm = fmt_mib(pb.size);
        let desc =
            format!("bytes of the {bm} file resident after its first read: what the cache kept");
        let kept = vec![pb.resident_bytes];
        out.metric("resident_after_overflow", "bytes", &desc, kept);
        if let Some(pg) = s.at(g) {
            let jump = pb.second / pg.second;
            let (sb, sg, gm) = (pb.second, pg.second, fmt_mib(g));
            let (rb, rg) = (pb.resident * 100.0, pg.resident * 100.0);
            let detail = format!("second read {sb:.3} ns/byte at {bm} vs {sg:.3} at {gm} ({jump:.1}x); residency {rb:.0}% vs {rg:.0}%");
            let (name, jumps) = ("time per byte jumps past the knee", jump >= 2.0);
            out.check(Check::sanity(name, jumps || s.threshold.is_none(), detail));
        }
    }
    out.finding(finding, &[name]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(size: u64, resident: f64, second: f64) -> SizeProbe {
        SizeProbe {
            size,
            first: 2.0,
            second,
            resident,
            resident_bytes: 0.0,
            evicted: true,
            seconds: 0.1,
        }
    }

    #[test]
    fn served_needs_residency_and_speed() {
        assert!(served(&probe(MIB, 1.0, 0.2), Some(0.6)));
        assert!(!served(&probe(MIB, 0.9, 0.2), Some(0.6)));
        assert!(!served(&probe(MIB, 1.0, 1.5), Some(0.6)));
        assert!(served(&probe(MIB, 1.0, 1.5), None));
    }

    /// Review N1: where reopens share the uncached flag (macOS's /dev/fd, the seam's dup +
    /// F_SETFL here), `append` before a probe must not leave the reader uncached. Before
    /// the fix the reader read through O_DIRECT here (unaligned: an error) and through
    /// F_NOCACHE on a Mac ("even a 4 MiB file was not kept", status ok).
    #[test]
    fn the_reader_reads_cached_where_reopens_share_flags() {
        use crate::experiments::testing::{skip, World};
        crate::platform::DARWIN_FILES.with(|d| d.set(true));
        let clock = crate::clock::CoarseClock::new(1e9);
        let r = World::live(&clock).run(&CacheSize);
        if r.status == crate::results::Status::Skipped {
            return skip(
                "the_reader_reads_cached_where_reopens_share_flags",
                &format!("{:?}", r.reason),
            );
        }
        assert_ne!(r.status, crate::results::Status::Failed, "{:?}", r.reason);
        assert!(
            r.metric("cache_size_upper_bound").is_none(),
            "{:?}",
            r.findings
        );
        let rate = |n: &str| r.metric(n).map_or(f64::NAN, |m| m.summary.median);
        assert!(
            rate("cached_read_rate") > rate("cold_read_rate"),
            "{:?}",
            r.metrics
        );
    }

    #[test]
    fn midpoints_are_between_on_a_mib_grid() {
        let m = midpoint(256 * MIB, 512 * MIB);
        assert!(m > 256 * MIB && m < 512 * MIB && m % MIB == 0);
    }
}
