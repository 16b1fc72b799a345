//! mem.pagefault: service time of a major page fault (a page read from disk on first
//! touch of a file mapping), and of a minor fault (first touch of fresh anonymous memory).

use crate::experiments::kit::files::{device_basis, device_of, make_file, DeviceReads};
use crate::experiments::kit::{memory_cap, rss_baseline, rss_check, thread_faults, Pages, Region};
use crate::experiments::predict::Predictions;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::harness::SampleSpec;
use crate::results::{Bottleneck, Check, Prediction};
use crate::rng::Rng;
use crate::units::{fmt_bytes, fmt_ns};
use anyhow::Context as _;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub struct PageFault;

const MINOR_BATCH: usize = 32;

/// Why a major fault gets no prediction: the device behind `path` and its class.
fn device_unknown(path: &std::path::Path) -> String {
    let none = "the scratch folder's device is not found in sysfs";
    device_of(path).map_or(none.into(), |d| device_basis(&d))
}

/// A read-only shared mapping of a file (address, length), unmapped on drop.
struct FileMap(*mut u8, usize);

impl FileMap {
    fn new(file: &std::fs::File, len: usize) -> anyhow::Result<FileMap> {
        // SAFETY: a fresh read-only mapping of an open file of at least `len` bytes.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of the scratch file");
        }
        let map = FileMap(p as *mut u8, len);
        // SAFETY: advisory call on the mapping just made: no readahead around faults.
        if unsafe { libc::madvise(p, len, libc::MADV_RANDOM) } != 0 {
            return Err(std::io::Error::last_os_error()).context("madvise(MADV_RANDOM)");
        }
        Ok(map)
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
    }
}

/// (file for major faults, anonymous region for minor faults).
pub(super) const SIZES: PerProfile<(u64, u64)> = PerProfile::new(
    (8 << 20, 16 << 20),
    (64 << 20, 64 << 20),
    (256 << 20, 256 << 20),
    (1 << 30, 512 << 20),
);

const MINOR_BATCHES: PerProfile<usize> = PerProfile::new(15, 41, 101, 101);

/// Minor faults in batches, and the premise that they happened.
fn minor_faults(ctx: &Context, region_bytes: usize, out: &mut Outcome) -> anyhow::Result<()> {
    let ps = crate::pagecache::page_size();
    let pages = region_bytes / ps;
    let want = MINOR_BATCHES.get(ctx.profile);
    let (mut faults, mut touched) = (0u64, 0u64);
    let mut region: Option<Region> = None;
    let mut at = pages; // no region yet: the first batch makes one
    let spec = SampleSpec::new(want, ctx.budget / 4).detect_preemption(true);
    let s = ctx.harness(1).try_sample_with(
        &spec,
        // Untimed: a fresh region when this one is used up, and the fault count before.
        || -> anyhow::Result<(*mut u8, u64)> {
            if at + MINOR_BATCH > pages {
                // One region at a time; base pages, as a huge-page fault would map 2 MiB.
                region = None;
                region = Some(Region::new(region_bytes, Pages::Base)?);
                at = 0;
            }
            let base = region.as_ref().map_or(std::ptr::null_mut(), |r| r.as_ptr());
            // SAFETY: at + MINOR_BATCH <= pages, so the offset lies inside the live region.
            let batch = unsafe { base.add(at * ps) };
            at += MINOR_BATCH;
            Ok((batch, thread_faults().0))
        },
        |&mut (batch, _)| {
            for k in 0..MINOR_BATCH {
                // SAFETY: inside the live region; each batch is handed out once.
                unsafe { std::ptr::write_volatile(batch.add(k * ps), 1u8) };
            }
            Ok(())
        },
        |(_, min0), _| {
            faults += thread_faults().0.saturating_sub(min0);
            touched += MINOR_BATCH as u64;
        },
    )?;
    out.check(Check::premise(
        "minor faults happened",
        touched > 0 && faults as f64 >= 0.9 * touched as f64,
        format!("{faults} minor faults counted (getrusage) for {touched} first touches"),
    ));
    for n in &s.notes {
        out.notes.push(format!("minor faults: {n}"));
    }
    let what =
        "first write to a page of fresh anonymous memory (allocate, zero, map), batches of 32";
    let per_fault = s.ns.iter().map(|v| v / MINOR_BATCH as f64).collect();
    out.metric("minor_fault", "ns", what, per_fault);
    Ok(())
}

/// Major faults, each page of `map` in `order` timed alone: (ns each, faults counted).
fn major_faults(
    ctx: &Context,
    map: &FileMap,
    order: &[usize],
    budget: Duration,
) -> anyhow::Result<(Vec<f64>, u64)> {
    let ps = crate::pagecache::page_size();
    let mut next = order.iter().copied();
    let mut sum = 0u8;
    let spec = SampleSpec::new(order.len(), budget).min_n(16);
    let (_, maj0) = thread_faults();
    let s = ctx.harness(1).try_sample_with(
        &spec,
        // max_n is the page count, so `order` never runs out.
        || Ok::<usize, anyhow::Error>(next.next().unwrap_or(0)),
        |&mut pg| {
            // SAFETY: pg < pages, so the byte lies inside the live read-only mapping.
            let b = unsafe { std::ptr::read_volatile(map.0.add(pg * ps)) };
            sum = sum.wrapping_add(b);
            Ok(())
        },
        |_, _| {},
    )?;
    let (_, maj1) = thread_faults();
    std::hint::black_box(sum);
    Ok((s.ns, maj1.saturating_sub(maj0)))
}

const SPEC: Spec = Spec {
    id: "mem.pagefault",
    title: "Page fault service time",
    description: "major faults on an evicted file mapping in random order (counted with getrusage), and minor faults on fresh anonymous memory",
    method: crate::method!("mem.pagefault"),
    needs: Needs {
        disk_bytes: SIZES.get(Profile::Quick).0,
        ..Needs::NONE
    },
    // A minor fault is kernel work at the core's clock (major faults declare `None`: the device).
    bottleneck: Bottleneck::Chain,
    budget: Some(PerProfile::new(ms(800), ms(1_250), ms(20_000), ms(60_000))),
    ..Spec::MEMORY
};

impl Experiment for PageFault {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        // Zeroing the page is cache-resident work no experiment prices (mem.bandwidth's
        // stores stream to DRAM), so only the kernel entry bounds the fault from below.
        let entry = p.earlier("cpu.syscall", &["getppid"]);
        let why = "cpu.syscall's getppid, a lower bound: a fault enters and leaves the kernel \
            as a system call does, then allocates, zeroes and maps a page, which are not in the \
            model (zeroing a page that stays in the cache has no measured rate here)";
        p.at_least("minor_fault", &entry, why);
        let here = std::env::current_dir().unwrap_or_default();
        let dir = ctx.options.scratch_dir.clone().unwrap_or(here);
        let majors = ["major_fault", "major_fault_per_byte"];
        p.withhold(&majors, &device_unknown(&dir));
        p.done()
    }

    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let (file_bytes, anon_bytes) = SIZES.get(ctx.profile);
        let ps = crate::pagecache::page_size();
        let cap = memory_cap(ctx.machine, ctx.profile, file_bytes + anon_bytes, 2 << 20)?;
        let anon = (anon_bytes.min(cap / 2) as usize / ps).max(MINOR_BATCH) * ps;
        let file_len = (file_bytes.min(cap - anon as u64) as usize / ps).max(16) * ps;
        let [total, region, file] = [anon + file_len, anon, file_len].map(|b| fmt_bytes(b as f64));
        let available = ctx.machine.memory_budget_text();
        out.notes.push(format!(
            "memory cap {total} ({region} anonymous region at a time + {file} file mapping); {available}"
        ));
        let rss0 = rss_baseline();

        (ctx.progress)("minor faults");
        minor_faults(ctx, anon, &mut out)?;

        let measured = major_section(ctx, file_len, &mut out)?;
        out.check(rss_check(rss0, (anon + file_len) as u64));
        out.pool(ctx);
        if measured {
            finding(ctx, &mut out);
        }
        Ok(out)
    }
}

/// The major-fault half: false on a memory-backed scratch directory, else true.
fn major_section(ctx: &Context, file_len: usize, out: &mut Outcome) -> anyhow::Result<bool> {
    let ps = crate::pagecache::page_size();
    let scratch = ctx.scratch()?;
    let fs = scratch.fs().clone();
    let memory =
        ": its pages live in memory and never fault in from a disk; use --scratch-dir on a disk";
    let why = if fs.memory_backed { memory } else { "" };
    let dir = scratch.dir().display();
    let detail = format!("{dir} is on {}{why}", fs.fs_type);
    let name = "scratch file system is disk-backed";
    out.check(Check::premise(name, !fs.memory_backed, detail));
    if fs.memory_backed {
        return Ok(false);
    }
    if fs.network {
        out.notes.push(format!(
            "the scratch directory is on a network file system ({}): a major fault here includes the network",
            fs.fs_type
        ));
    }
    (ctx.progress)("writing the file");
    let mut rng = Rng::from_entropy();
    let f = make_file(scratch, "pagefault", file_len as u64, rng.next_u64())?;
    (ctx.progress)("evicting the file from the page cache");
    let ev = crate::pagecache::evict(&f.file, ctx.options.drop_caches)?;
    let name = "file evicted from the page cache (mincore)";
    out.check(Check::premise(name, ev.verified(), ev.describe()));
    let map = FileMap::new(&f.file, file_len)?;
    let pages = file_len / ps;
    let mut order: Vec<usize> = (0..pages).collect();
    rng.shuffle(&mut order);

    (ctx.progress)("major faults");
    // The disk's sectors-read counter around the faults: a fault the page cache (or, in
    // a VM, the host's cache) answered reads nothing from it.
    let mut device = DeviceReads::new(ctx, scratch.dir());
    let before = device.counter();
    let (times, majors) = major_faults(ctx, &map, &order, ctx.budget.mul_f64(0.5))?;
    let n = times.len() as u64;
    device.add(before, device.counter(), n * ps as u64);
    out.check(device.check());
    let share = majors as f64 / n.max(1) as f64 * 100.0;
    let detail = format!(
        "{majors} major faults counted for {n} pages touched ({share:.0}%; at least 90% required)"
    );
    let held = majors as f64 >= 0.9 * n as f64;
    let name = "touches were major faults (getrusage)";
    out.check(Check::premise(name, held, detail));
    let per_byte: Vec<f64> = times.iter().map(|t| t / ps as f64).collect();
    let file = fmt_bytes(file_len as f64);
    let what = format!(
        "first read of a page of an evicted file mapping ({n} pages of a {file} file, random order, MADV_RANDOM, {})",
        fs.fs_type
    );
    // A major fault waits for the device, which no sentinel kernel shares.
    out.distribution("major_fault", "ns", &what, times)
        .shares(Bottleneck::None);
    let per_page = "major fault time divided by the page size";
    out.metric("major_fault_per_byte", "ns", per_page, per_byte)
        .per_operation()
        .shares(Bottleneck::None);
    Ok(true)
}

fn page_text(ps: usize) -> String {
    if ps >= 1024 && ps % 1024 == 0 {
        format!("{} KiB", ps / 1024)
    } else {
        format!("{ps} B")
    }
}

/// Major against minor, against mem.latency's dram, and the minor fault's parts.
fn finding(ctx: &Context, out: &mut Outcome) {
    let ps = crate::pagecache::page_size();
    let (major, minor) = (out.median("major_fault"), out.median("minor_fault"));
    let mut text = format!(
        "A major fault costs {} ({} per byte, {:.0} MB/s of random {} reads); a minor fault {} ({}).",
        fmt_ns(major),
        fmt_ns(major / ps as f64),
        ps as f64 / major * 1e3,
        page_text(ps),
        fmt_ns(minor),
        match out.separation("minor_fault", "major_fault") {
            crate::analysis::Separation::Below => format!("{:.0}x less", major / minor),
            _ => "not less beyond both 95% intervals".to_string(),
        }
    );
    let mut from = vec!["major_fault", "minor_fault"];
    if let Some(d) = ctx.earlier_median("mem.latency", "dram") {
        from.push("mem.latency/dram");
        text.push_str(&format!(
            " That is the time of {:.0} loads of mem.latency's random chase at its largest size ({}).",
            major / d,
            fmt_ns(d)
        ));
    }
    let entry = ctx.earlier_median("cpu.syscall", "getppid");
    if let Some(e) = entry.filter(|&e| e < minor) {
        from.push("cpu.syscall/getppid");
        text.push_str(&format!(
            " Of the minor fault, a kernel entry (cpu.syscall's getppid, {}) is {:.0}%; allocating, zeroing and mapping the page, the other {}, are not broken down here.",
            fmt_ns(e),
            100.0 * e / minor,
            fmt_ns(minor - e)
        ));
    }
    out.finding(text, &from);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_without_sysfs_gives_no_figure() {
        let why = device_unknown(std::path::Path::new("/proc"));
        assert!(why.contains("not found in sysfs"), "{why}");
        assert_eq!(page_text(4096), "4 KiB");
        assert_eq!(page_text(65536), "64 KiB");
    }

    /// The minor fault is bounded below by a kernel entry alone: mem.bandwidth's DRAM
    /// store rate, earlier in the run, does not price zeroing a page the cache holds.
    #[test]
    fn minor_fault_is_a_kernel_entry_at_least() {
        use crate::experiments::testing::{recorded, World};
        let clock = crate::clock::MockClock::new(1);
        let mut w = World::live(&clock);
        let mut sys = Outcome::default();
        sys.metric("getppid", "ns", "", vec![80.0; 5]);
        let mut bw = Outcome::default();
        bw.metric("write_1t", "bytes/s", "", vec![10e9; 5]);
        w.earlier = vec![recorded("cpu.syscall", sys), recorded("mem.bandwidth", bw)];
        let v = w.with_ctx(|ctx| PageFault.predict(ctx));
        let p = &v.iter().find(|(m, _)| m == "minor_fault").unwrap().1;
        assert_eq!(p.bound, Some(crate::results::Bound::Lower), "{p:?}");
        assert_eq!(p.value, 80.0);
        assert!(!p.inputs.contains_key("store_bandwidth"), "{p:?}");
    }

    #[test]
    fn sizes_grow_with_the_profile() {
        let s: Vec<(u64, u64)> = Profile::ALL.iter().map(|&p| SIZES.get(p)).collect();
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }
}
