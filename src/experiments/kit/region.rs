//! Anonymous memory regions with huge-page advice, and the facts and caps that size them.

use crate::machine::Cache;
use crate::units::fmt_bytes;
use anyhow::{bail, Context as _};

/// Cache line size: from the machine's caches, else 64 bytes.
pub(crate) fn line_bytes(caches: &[Cache]) -> usize {
    caches
        .iter()
        .map(|c| c.line_bytes as usize)
        .find(|&l| l.is_power_of_two() && (16..=1024).contains(&l))
        .unwrap_or(64)
}

pub(crate) fn llc_bytes(caches: &[Cache]) -> Option<u64> {
    caches.iter().map(|c| c.size_bytes).max()
}

/// The last-level cache taken where the machine lists none: larger than any shipping L3
/// but the stacked-cache parts', so sizes meant to be beyond the cache are beyond it.
pub(crate) const UNKNOWN_LLC: u64 = 256 << 20;

/// The last-level cache size, or `UNKNOWN_LLC` with a note saying it was assumed.
pub(crate) fn llc_or_assumed(caches: &[Cache]) -> (u64, Option<String>) {
    let Some(b) = llc_bytes(caches) else {
        let note = format!(
            "the machine lists no cache sizes: the last-level cache is taken to be {}, \
             so working sets meant to be beyond it are judged against that",
            fmt_bytes(UNKNOWN_LLC as f64)
        );
        return (UNKNOWN_LLC, Some(note));
    };
    (b, None)
}

/// What one run may use: `want` within `Profile::memory_limit`; an error if `min` does not fit.
pub(crate) fn memory_cap(
    machine: &crate::machine::Machine,
    profile: crate::experiments::Profile,
    want: u64,
    min: u64,
) -> anyhow::Result<u64> {
    let avail = machine.memory_budget_bytes();
    let limit = profile.memory_limit(avail);
    if avail == 0 {
        return Ok(want.min(limit).max(min));
    }
    let cap = want.min(limit);
    if cap < min {
        let [avail, min, limit] = [avail, min, limit].map(|b| fmt_bytes(b as f64));
        let name = profile.name();
        bail!("only {avail} of memory available (MemAvailable, cgroup limit); this experiment needs at least {min} (the {name} profile uses at most {limit} of it)");
    }
    Ok(cap)
}

/// The largest power-of-two working set within `ceiling` that fits the memory cap with its
/// permutation, and the cap.
pub(crate) fn largest_set(
    machine: &crate::machine::Machine,
    profile: crate::experiments::Profile,
    ceiling: u64,
    line: usize,
) -> anyhow::Result<(u64, u64)> {
    let line = line as u64;
    let want = ceiling.saturating_add(4 * (ceiling / line));
    let cap = memory_cap(machine, profile, want, 8 << 20)?;
    let fit = (cap / (line + 4) * line).min(ceiling);
    Ok((1u64 << (63 - fit.leading_zeros()), cap))
}

pub(crate) fn thp_available(m: &crate::machine::Machine) -> bool {
    matches!(m.memory.thp_enabled.as_deref(), Some("always" | "madvise"))
}

/// x86-64's and 4 KiB-page arm64's.
const HUGE_PAGE_DEFAULT: usize = 2 << 20;

/// The PMD huge-page size (hpage_pmd_size), or 2 MiB where the kernel does not say.
pub fn huge_page(m: &crate::machine::Machine) -> usize {
    m.memory
        .huge_page_bytes
        .filter(|&b| b.is_power_of_two())
        .map_or(HUGE_PAGE_DEFAULT, |b| b as usize)
}

/// Why a region of `len` bytes cannot get huge pages, when it is smaller than one.
pub fn too_small_for_huge_pages(m: &crate::machine::Machine, len: usize) -> Option<String> {
    let hp = huge_page(m);
    (len < hp).then(|| {
        let [len, hp] = [len, hp].map(|b| fmt_bytes(b as f64));
        format!("the region ({len}) is smaller than one huge page ({hp}, /sys/kernel/mm/transparent_hugepage/hpage_pmd_size)")
    })
}

/// Base pages (MADV_NOHUGEPAGE, even when THP is "always") or transparent huge pages
/// (MADV_HUGEPAGE, where the kernel can provide them).
pub(crate) use crate::platform::HugePages as Pages;

/// A fresh anonymous read-write mapping of `len` bytes, `MAP_PRIVATE` or `MAP_SHARED`.
pub(super) fn anonymous(len: usize, sharing: i32) -> std::io::Result<*mut u8> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = sharing | libc::MAP_ANONYMOUS;
    // SAFETY: a new mapping at an address the kernel picks; no existing memory is affected.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
    if map == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(map as *mut u8)
}

/// An anonymous private mapping aligned so huge pages can back all of it, unmapped on drop.
pub(crate) struct Region {
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
    /// Aligned to 2 MiB.
    pub fn new(len: usize, pages: Pages) -> anyhow::Result<Region> {
        Region::aligned(len, pages, HUGE_PAGE_DEFAULT)
    }

    /// Aligned to `huge` bytes (`huge_page`).
    pub fn aligned(len: usize, pages: Pages, huge: usize) -> anyhow::Result<Region> {
        if len == 0 {
            bail!("empty region");
        }
        if !huge.is_power_of_two() {
            bail!("huge-page size {huge} is not a power of two");
        }
        let map_len = len + huge;
        let map = anonymous(map_len, libc::MAP_PRIVATE)
            .with_context(|| format!("mmap of {}", fmt_bytes(len as f64)))?;
        let off = (huge - (map as usize % huge)) % huge;
        // SAFETY: off < huge, so ptr..ptr+len lies inside the mapping.
        let ptr = unsafe { map.add(off) };
        // SAFETY: advice on the mapping made above. Failure (e.g. no THP support) leaves
        // base pages, which `huge_bytes` reports.
        unsafe { crate::platform::advise_huge_pages(map, map_len, pages) };
        #[cfg(test)]
        if crate::experiments::seams::get().prefaulted {
            let ps = crate::pagecache::page_size();
            for i in (0..map_len).step_by(ps) {
                // SAFETY: i < map_len, inside the writable mapping made above.
                unsafe { std::ptr::write_volatile(map.add(i), 0) };
            }
        }
        Ok(Region {
            map,
            map_len,
            ptr,
            len,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+len is inside the live mapping, zero-filled by the kernel, and
        // &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Writes one byte per page so every page is backed before timing starts.
    pub(crate) fn prefault(&mut self) {
        let ps = crate::pagecache::page_size();
        let s = self.as_mut_slice();
        for i in (0..s.len()).step_by(ps) {
            s[i] = 1;
        }
    }

    /// Bytes of this mapping backed by transparent huge pages.
    pub(crate) fn huge_bytes(&self) -> Option<u64> {
        let lo = self.map as usize;
        crate::machine::process::huge_bytes_in(lo, lo + self.map_len)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// (minor, major) faults of the calling thread so far (of the process where the system
/// has no per-thread counters).
pub(crate) fn thread_faults() -> (u64, u64) {
    crate::platform::thread_usage()
        .map(|u| (u.minor_faults, u.major_faults))
        .unwrap_or((0, 0))
}

/// Resets this process's peak RSS (VmHWM) and returns the current RSS, for `rss_check`.
pub(crate) fn rss_baseline() -> Option<u64> {
    crate::machine::process::reset_peak_rss()?;
    crate::machine::process::status_bytes("VmRSS:")
}

/// Peak RSS growth since `rss_baseline` against the announced cap.
pub(crate) fn rss_check(base: Option<u64>, cap: u64) -> crate::results::Check {
    let cap_text = fmt_bytes(cap as f64);
    let (ok, detail) = match (base, crate::machine::process::status_bytes("VmHWM:")) {
        (Some(b), Some(p)) => {
            let grew = p.saturating_sub(b);
            // 16 MiB slack for the run's own stacks, allocator and results.
            let ok = grew <= cap + (16 << 20);
            let grew = fmt_bytes(grew as f64);
            let detail = format!("peak resident set grew by {grew} against a cap of {cap_text} (VmHWM in /proc/self/status)");
            (ok, detail)
        }
        _ => (
            true,
            format!("cap {cap_text}; peak RSS not readable here, allocations sized to the cap"),
        ),
    };
    crate::results::Check::sanity(crate::grade::CAP_CHECK, ok, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thp_from_the_description() {
        let mut m = crate::machine::Machine::default();
        assert!(!thp_available(&m), "unknown is not available");
        for (mode, ok) in [("always", true), ("madvise", true), ("never", false)] {
            m.memory.thp_enabled = Some(mode.into());
            assert_eq!(thp_available(&m), ok, "{mode}");
        }
    }

    #[test]
    fn caches_are_read() {
        let m = crate::machine::Machine::gather();
        let c = m.data_caches();
        // Where the description found caches (sysfs has them on most machines).
        if m.cpu.caches.iter().any(|c| c.size_bytes > 0) {
            assert!(!c.is_empty());
            assert!(c.iter().all(|c| c.kind != "Instruction"));
            assert!(c.windows(2).all(|w| w[0].level < w[1].level));
        }
        assert!(line_bytes(&c).is_power_of_two());
    }

    #[test]
    fn huge_page_size_from_the_description() {
        let mut m = crate::machine::Machine::default();
        assert_eq!(huge_page(&m), 2 << 20, "unknown: 2 MiB");
        m.memory.huge_page_bytes = Some(512 << 20); // 64 KiB-page arm64 kernels
        assert_eq!(huge_page(&m), 512 << 20);
        let why = too_small_for_huge_pages(&m, 128 << 20).unwrap();
        assert!(
            why.contains("128.0 MiB") && why.contains("512.0 MiB"),
            "{why}"
        );
        assert!(too_small_for_huge_pages(&m, 1 << 30).is_none());
        m.memory.huge_page_bytes = Some(3 << 20);
        assert_eq!(huge_page(&m), 2 << 20, "not a power of two: ignored");
        let r = Region::aligned(1 << 20, Pages::Base, 32 << 20).unwrap();
        assert_eq!(r.as_ptr() as usize % (32 << 20), 0);
        assert!(Region::aligned(1 << 20, Pages::Base, 3 << 20).is_err());
    }

    #[test]
    fn regions_are_aligned_and_zeroed() {
        let mut r = Region::new(3 << 20, Pages::Base).unwrap();
        assert_eq!(r.as_ptr() as usize % HUGE_PAGE_DEFAULT, 0);
        assert!(r.as_mut_slice().iter().all(|&b| b == 0));
        r.prefault();
        assert!(r.huge_bytes().is_some());
    }
}
