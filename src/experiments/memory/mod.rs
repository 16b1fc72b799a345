//! Memory experiments (SPEC section 4): load latency per working-set size with detected
//! cache levels, bandwidth, and page-fault service time.
//!
//! Shared here: a small PRNG, Sattolo's single-cycle permutation, anonymous mappings with
//! huge-page advice, and the machine facts these experiments need, with sysfs/procfs
//! fallbacks while the machine module does not provide them.

use super::Experiment;
use anyhow::{bail, Context as _};

pub mod bandwidth;
pub mod latency;
pub mod pagefault;

/// In run order: latency first (bandwidth and page-fault findings use its DRAM figure).
pub fn experiments() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(latency::Latency),
        Box::new(bandwidth::Bandwidth),
        Box::new(pagefault::PageFault),
    ]
}

/// SplitMix64: small, fast and good enough to shuffle; seeded per run so each run walks a
/// different permutation.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Seeded from the time and the process id.
    pub fn from_entropy() -> Rng {
        let t = crate::clock::monotonic_raw_ns();
        Rng(t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (bound > 0), by multiply-high; the bias is below 2^-32 for
    /// the bounds used here.
    pub fn below(&mut self, bound: usize) -> usize {
        ((self.next_u64() as u128 * bound as u128) >> 64) as usize
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Sattolo's algorithm: a uniformly random cyclic permutation of 0..n, as `next[i]`.
/// Unlike a plain shuffle, following `next` from any node visits all n nodes before it
/// returns (a shuffle can leave short cycles that fit in a cache).
pub fn sattolo(n: usize, rng: &mut Rng) -> Vec<u32> {
    let mut next: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i); // j < i: never a fixed point, always one cycle
        next.swap(i, j);
    }
    next
}

/// Length of the cycle through node 0 (n for a single cycle over n nodes).
pub fn cycle_length(next: &[u32]) -> usize {
    if next.is_empty() {
        return 0;
    }
    let mut i = next[0] as usize;
    let mut len = 1;
    while i != 0 && len <= next.len() {
        i = next[i] as usize;
        len += 1;
    }
    len
}

/// A cache as sysfs describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheFact {
    pub level: u32,
    pub kind: String,
    pub size_bytes: u64,
    pub line_bytes: u64,
}

/// Data and unified caches from the machine description, ordered by level.
/// FALLBACK: reads sysfs itself while `machine.cpu.caches` is empty (before the machine
/// module fills it); once it is filled this uses it unchanged.
pub fn data_caches(machine: &crate::machine::Machine) -> Vec<CacheFact> {
    let mut v: Vec<CacheFact> = if machine.cpu.caches.is_empty() {
        sysfs_caches_fallback()
    } else {
        machine
            .cpu
            .caches
            .iter()
            .map(|c| CacheFact {
                level: c.level,
                kind: c.kind.clone(),
                size_bytes: c.size_bytes,
                line_bytes: c.line_bytes,
            })
            .collect()
    };
    v.retain(|c| c.kind != "Instruction" && c.size_bytes > 0);
    v.sort_by_key(|c| (c.level, c.size_bytes));
    v.dedup_by_key(|c| c.level);
    v
}

/// FALLBACK for an empty `machine.cpu.caches`: cpu0's caches from sysfs.
fn sysfs_caches_fallback() -> Vec<CacheFact> {
    let mut v = Vec::new();
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let Ok(dir) = std::fs::read_dir(base) else {
        return v;
    };
    for e in dir.flatten() {
        if !e.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let level = read("level").parse().unwrap_or(0);
        let size = crate::units::parse_size(&read("size")).unwrap_or(0);
        let line = read("coherency_line_size").parse().unwrap_or(0);
        v.push(CacheFact {
            level,
            kind: read("type"),
            size_bytes: size,
            line_bytes: line,
        });
    }
    v
}

/// Cache line size: from the machine's caches, else 64 bytes.
pub fn line_bytes(caches: &[CacheFact]) -> usize {
    caches
        .iter()
        .map(|c| c.line_bytes as usize)
        .find(|&l| l.is_power_of_two() && (16..=1024).contains(&l))
        .unwrap_or(64)
}

/// Last-level cache size, if known.
pub fn llc_bytes(caches: &[CacheFact]) -> Option<u64> {
    caches.iter().map(|c| c.size_bytes).max()
}

/// MemAvailable in bytes: the machine description's figure, else /proc/meminfo (FALLBACK
/// while `machine.memory.available_bytes` is not filled).
pub fn mem_available(machine: &crate::machine::Machine) -> u64 {
    if machine.memory.available_bytes > 0 {
        return machine.memory.available_bytes;
    }
    meminfo_field("MemAvailable").unwrap_or(0)
}

/// A /proc/meminfo field in bytes.
pub fn meminfo_field(name: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.split(':').next() == Some(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory a run of an experiment may use: never more than a quarter of MemAvailable.
/// Errors when even `min` does not fit.
pub fn memory_cap(machine: &crate::machine::Machine, want: u64, min: u64) -> anyhow::Result<u64> {
    let avail = mem_available(machine);
    if avail == 0 {
        // Unknown: stay small rather than risk the machine.
        return Ok(want.min(256 << 20).max(min));
    }
    let cap = want.min(avail / 4);
    if cap < min {
        bail!(
            "only {} of memory available (MemAvailable); this experiment needs at least {} (a quarter of what is available)",
            crate::units::fmt_bytes(avail as f64),
            crate::units::fmt_bytes(min as f64 * 4.0)
        );
    }
    Ok(cap)
}

/// Whether transparent huge pages can be requested with madvise.
pub fn thp_available() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .map(|s| s.contains("[always]") || s.contains("[madvise]"))
        .unwrap_or(false)
}

pub const HUGE_PAGE: usize = 2 << 20;

/// Page backing requested for an anonymous mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// MADV_NOHUGEPAGE: base pages even when THP is "always".
    Base,
    /// MADV_HUGEPAGE: transparent huge pages where the kernel can provide them.
    Huge,
}

/// An anonymous private mapping, 2 MiB-aligned so huge pages can back all of it,
/// unmapped on drop.
pub struct Region {
    map: *mut u8,
    map_len: usize,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: Region owns its mapping exclusively, like a Vec<u8>.
unsafe impl Send for Region {}
// SAFETY: shared references only give out raw pointers; writers go through &mut.
unsafe impl Sync for Region {}

impl Region {
    pub fn new(len: usize, pages: Pages) -> anyhow::Result<Region> {
        if len == 0 {
            bail!("empty region");
        }
        let map_len = len + HUGE_PAGE;
        // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("mmap of {}", crate::units::fmt_bytes(len as f64)));
        }
        let map = map as *mut u8;
        let off = (HUGE_PAGE - (map as usize % HUGE_PAGE)) % HUGE_PAGE;
        // SAFETY: off < HUGE_PAGE, so ptr..ptr+len lies inside the mapping.
        let ptr = unsafe { map.add(off) };
        let advice = match pages {
            Pages::Base => libc::MADV_NOHUGEPAGE,
            Pages::Huge => libc::MADV_HUGEPAGE,
        };
        // SAFETY: advisory call on the mapping made above. Failure (e.g. no THP support)
        // leaves base pages, which `huge_bytes` reports.
        unsafe { libc::madvise(map as *mut libc::c_void, map_len, advice) };
        Ok(Region {
            map,
            map_len,
            ptr,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+len is inside the live mapping, zero-filled by the kernel, and
        // &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Writes one byte per page so every page is backed before timing starts.
    pub fn prefault(&mut self) {
        let ps = crate::pagecache::page_size();
        let s = self.as_mut_slice();
        for i in (0..s.len()).step_by(ps) {
            s[i] = 1;
        }
    }

    /// Bytes of this mapping backed by transparent huge pages (from /proc/self/smaps).
    pub fn huge_bytes(&self) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (lo, hi) = (self.map as usize, self.map as usize + self.map_len);
        let mut inside = false;
        let mut total = 0u64;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a < hi && b > lo;
                    continue;
                }
            }
            if inside {
                if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                    total += kb * 1024;
                }
            }
        }
        Some(total)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// Faults of the calling thread so far: (minor, major), from getrusage(RUSAGE_THREAD).
pub fn thread_faults() -> (u64, u64) {
    // SAFETY: a zeroed rusage is a valid output buffer for getrusage.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return (0, 0);
        }
        (ru.ru_minflt as u64, ru.ru_majflt as u64)
    }
}

/// Resets this process's peak RSS (VmHWM) and returns the current RSS, so that
/// `rss_check` can compare the growth with an announced cap.
pub fn rss_baseline() -> Option<u64> {
    // Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_bytes("VmRSS:")
}

fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with(field))?;
    l.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// Peak RSS growth since `rss_baseline` against the announced cap.
pub fn rss_check(base: Option<u64>, cap: u64) -> crate::results::Check {
    use crate::units::fmt_bytes;
    let name = "memory use within the announced cap";
    match (base, status_bytes("VmHWM:")) {
        (Some(b), Some(p)) => {
            let grew = p.saturating_sub(b);
            // 16 MiB slack for the run's own stacks, allocator and results.
            crate::results::Check::sanity(
                name,
                grew <= cap + (16 << 20),
                format!(
                    "peak resident set grew by {} against a cap of {} (VmHWM in /proc/self/status)",
                    fmt_bytes(grew as f64),
                    fmt_bytes(cap as f64)
                ),
            )
        }
        _ => crate::results::Check::sanity(
            name,
            true,
            format!(
                "cap {}; peak RSS not readable here, allocations sized to the cap",
                fmt_bytes(cap as f64)
            ),
        ),
    }
}

/// Involuntary context switches of the calling thread so far (getrusage RUSAGE_THREAD).
pub fn thread_preemptions() -> u64 {
    // SAFETY: a zeroed rusage is a valid output buffer for getrusage.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return 0;
        }
        ru.ru_nivcsw as u64
    }
}

/// How long and how often `measure_quiet` measures.
#[derive(Debug, Clone)]
pub struct QuietSpec {
    /// Shortest trial: long against the clock's overhead, short against a scheduler
    /// time slice, so that most trials run without being preempted on a busy machine.
    pub min_trial: std::time::Duration,
    pub trials: usize,
    /// Wall time for calibration and trials together.
    pub budget: std::time::Duration,
}

/// Trials of one measurement, with the preempted ones counted.
#[derive(Debug, Clone)]
pub struct Quiet {
    /// ns per operation of each kept trial (clock overhead subtracted).
    pub per_op_ns: Vec<f64>,
    pub iters: u64,
    /// Trials set aside because the thread was preempted while they ran.
    pub preempted: usize,
    pub notes: Vec<String>,
}

impl Quiet {
    pub fn median(&self) -> f64 {
        crate::stats::median(&self.per_op_ns)
    }
}

/// Measures `body(iters)` (`ops_per_iter` operations per iteration) in trials of at least
/// `min_trial`. A trial during which the thread was preempted (its involuntary context
/// switch count moved) timed another task too: it is set aside and counted, and another
/// trial is run, within the budget. When too few undisturbed trials fit in the budget,
/// the preempted ones are kept and a note says so. The harness does not know about
/// preemption; memory figures on a busy machine need it.
pub fn measure_quiet(
    clock: &dyn crate::clock::Clock,
    spec: &QuietSpec,
    ops_per_iter: f64,
    mut body: impl FnMut(u64),
) -> Quiet {
    let overhead = clock.overhead_ticks();
    measure_trials(clock, spec, ops_per_iter, |iters| {
        let c0 = thread_preemptions();
        let t0 = clock.start();
        body(iters);
        let t1 = clock.stop();
        let quiet = thread_preemptions() == c0;
        (t1.wrapping_sub(t0) as f64 - overhead, quiet)
    })
}

/// The calibration and trial loop of `measure_quiet` over any trial that reports its
/// ticks and whether it ran undisturbed (used by multi-threaded bandwidth trials too).
pub fn measure_trials(
    clock: &dyn crate::clock::Clock,
    spec: &QuietSpec,
    ops_per_iter: f64,
    mut trial: impl FnMut(u64) -> (f64, bool),
) -> Quiet {
    let began = std::time::Instant::now();
    let min_ticks = clock.ns_to_ticks(spec.min_trial.as_nanos() as f64);
    let mut notes = Vec::new();
    // Calibrate (this also warms caches and TLBs): grow until a quiet trial is long enough.
    let mut iters = 1u64;
    loop {
        let (t, quiet) = trial(iters);
        if t >= min_ticks && quiet {
            break;
        }
        if began.elapsed() > spec.budget / 2 {
            notes.push(format!(
                "calibration stopped at half the {} ms budget with {iters} iterations per trial",
                spec.budget.as_millis()
            ));
            break;
        }
        if t < min_ticks {
            let f = if t > 0.0 {
                (min_ticks * 1.2 / t).clamp(2.0, 100.0)
            } else {
                100.0
            };
            iters = ((iters as f64 * f).ceil() as u64).min(1 << 40);
        }
    }
    trial(iters); // one more warm-up pass at the final length
    let mut kept = Vec::with_capacity(spec.trials);
    let mut preempted = Vec::new();
    while kept.len() < spec.trials {
        let spent = began.elapsed();
        if spent > spec.budget && kept.len() + preempted.len() >= 3 {
            break;
        }
        if spent > spec.budget * 2 && !(kept.is_empty() && preempted.is_empty()) {
            break;
        }
        let (t, quiet) = trial(iters);
        let ns = clock.ticks_to_ns(t.max(0.0)) / iters as f64 / ops_per_iter;
        if quiet {
            kept.push(ns);
        } else {
            preempted.push(ns);
            // Whoever ran meanwhile may have evicted our data: warm up again, untimed.
            trial(iters);
        }
    }
    let n_pre = preempted.len();
    if kept.len() < 3.min(spec.trials) {
        notes.push(format!(
            "only {} of {} trials ran without preemption within the budget: the preempted ones are kept, so this figure includes other tasks' time",
            kept.len(),
            kept.len() + n_pre
        ));
        kept.extend(preempted);
    } else if kept.len() < spec.trials {
        notes.push(format!(
            "budget reached after {} of {} trials",
            kept.len(),
            spec.trials
        ));
    }
    Quiet {
        per_op_ns: kept,
        iters,
        preempted: n_pre,
        notes,
    }
}

/// "1 KiB", "32 KiB" style label for a power-of-two-ish size, for metric and series names.
pub fn size_label(b: u64) -> String {
    if b >= 1 << 30 && b % (1 << 30) == 0 {
        format!("{}GiB", b >> 30)
    } else if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattolo_is_one_cycle() {
        let mut rng = Rng::new(1);
        for n in [1usize, 2, 3, 10, 1000] {
            let p = sattolo(n, &mut rng);
            assert_eq!(cycle_length(&p), n);
        }
    }

    #[test]
    fn a_plain_shuffle_can_leave_short_cycles() {
        // The reason for Sattolo: identity is a valid shuffle and has n cycles.
        let ident: Vec<u32> = (0..8).collect();
        assert_eq!(cycle_length(&ident), 1);
    }

    #[test]
    fn caches_are_read() {
        let m = crate::machine::Machine::default();
        let c = data_caches(&m);
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0").exists() {
            assert!(!c.is_empty());
            assert!(c.iter().all(|c| c.kind != "Instruction"));
            assert!(c.windows(2).all(|w| w[0].level < w[1].level));
        }
        assert!(line_bytes(&c).is_power_of_two());
    }

    #[test]
    fn regions_are_aligned_and_zeroed() {
        let mut r = Region::new(3 << 20, Pages::Base).unwrap();
        assert_eq!(r.as_ptr() as usize % HUGE_PAGE, 0);
        assert!(r.as_mut_slice().iter().all(|&b| b == 0));
        r.prefault();
        assert!(r.huge_bytes().is_some());
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(16 << 10), "16KiB");
        assert_eq!(size_label(512 << 20), "512MiB");
        assert_eq!(size_label(100), "100B");
    }
}
