//! This process's live state, read around measurements: resident pages and mappings,
//! transparent-huge-page backing of a range, peak RSS. Counters, not facts: they change
//! while a run goes, so they are functions here rather than fields of the description
//! (docs/ARCHITECTURE.md, machine). Linux only; elsewhere each answers `None`.

use super::facts::FactRoot;

/// Where `footprint` reads resident pages and mappings (named in prediction inputs).
pub const RESIDENT_SOURCE: &str = "/proc/self/statm (resident)";
pub const MAPPINGS_SOURCE: &str = "/proc/self/maps";

fn read(path: &str) -> Option<String> {
    FactRoot::live().read(path)
}

/// Resident pages and mappings of this process (0 when unreadable).
pub fn footprint() -> (f64, f64) {
    let rss = read("/proc/self/statm")
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    let vmas = read("/proc/self/maps")
        .map(|s| s.lines().count() as f64)
        .unwrap_or(0.0);
    (rss, vmas)
}

/// Bytes backed by transparent huge pages in the mappings overlapping `lo..hi`.
pub fn huge_bytes_in(lo: usize, hi: usize) -> Option<u64> {
    anon_huge_bytes(&read("/proc/self/smaps")?, lo, hi)
}

/// Sums `AnonHugePages:` over the smaps entries overlapping `lo..hi`.
pub fn anon_huge_bytes(smaps: &str, lo: usize, hi: usize) -> Option<u64> {
    let mut inside = false;
    let mut total = 0u64;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
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

/// Resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+); `None` when refused.
pub fn reset_peak_rss() -> Option<()> {
    // Writing 5 to clear_refs is what resets VmHWM.
    std::fs::write("/proc/self/clear_refs", "5").ok()
}

/// A `/proc/self/status` size field ("VmRSS:", "VmHWM:"...) in bytes.
pub fn status_bytes(field: &str) -> Option<u64> {
    let s = read("/proc/self/status")?;
    let l = s.lines().find(|l| l.starts_with(field))?;
    l.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_bytes_only_inside_the_range() {
        let smaps = "1000-3000 rw-p 00000000 00:00 0\nAnonHugePages:      2048 kB\n\
                     5000-6000 rw-p 00000000 00:00 0\nAnonHugePages:      4096 kB\n";
        assert_eq!(anon_huge_bytes(smaps, 0x2000, 0x2800), Some(2048 * 1024));
        assert_eq!(anon_huge_bytes(smaps, 0x3000, 0x5000), Some(0));
        assert_eq!(anon_huge_bytes(smaps, 0, 0x10000), Some(6144 * 1024));
    }

    #[test]
    fn this_process_has_a_footprint() {
        if !std::path::Path::new("/proc/self/statm").exists() {
            return; // not Linux: every answer is None by design
        }
        let (rss, vmas) = footprint();
        assert!(rss > 0.0 && vmas > 0.0);
        assert!(status_bytes("VmRSS:").is_some_and(|b| b > 0));
    }
}
