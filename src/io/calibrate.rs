//! `io calibrate`: find a block count whose read takes between --min and --max, doubling
//! from 1 block (then bisecting if a doubling jumps over the window), never past the
//! file's size.
//!
//! Each probe is cold by default: the file is evicted (verified with mincore) before the
//! probe, so the count says how much of the *device* fits in the window; a warm count
//! would only measure memory copies and change from run to run with the cache state.
//! `--warm` reads the range once untimed before each probe instead.

use super::read::{evict, read_blocks, DIRECT_ALIGN};
use super::{check_block, open_input, os_err};
use crate::error;
use crate::pagecache::AlignedBuf;
use crate::units::fmt_bytes;
use std::io::Seek;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Probes after the doubling overshot the window.
const MAX_BISECT: usize = 8;

#[derive(serde::Serialize, Clone)]
pub struct Probe {
    pub count: u64,
    pub seconds: f64,
    /// Pages still cached after eviction (0 = verified cold); None for warm probes.
    pub resident_pages_after_evict: Option<u64>,
}

pub struct CalibrateOutcome {
    pub file: PathBuf,
    pub block: u64,
    pub min: Duration,
    pub max: Duration,
    pub warm: bool,
    pub count: u64,
    pub seconds: f64,
    pub reached: bool,
    pub max_count: u64,
    pub probes: Vec<Probe>,
}

pub fn run(
    path: &Path,
    block_size: u64,
    min: Duration,
    max: Duration,
    warm: bool,
) -> error::Result<CalibrateOutcome> {
    let block = check_block(block_size)?;
    if min >= max {
        return super::usage(format!(
            "--min ({min:?}) must be shorter than --max ({max:?})"
        ));
    }
    let (mut file, size) = open_input(path, 0)?;
    let max_count = size / block_size;
    if max_count == 0 {
        return super::usage(format!(
            "{}: {} is smaller than one block of {}",
            path.display(),
            fmt_bytes(size as f64),
            fmt_bytes(block_size as f64)
        ));
    }
    let mut buf = AlignedBuf::new(block, DIRECT_ALIGN)
        .map_err(|e| super::Error::runtime(format!("buffer: {e}")))?;
    let mut probes: Vec<Probe> = Vec::new();
    let mut probe = |count: u64| -> error::Result<f64> {
        let mut resident = None;
        if warm {
            file.rewind().map_err(|e| os_err(path, "seek", e))?;
            read_blocks(&file, path, &mut buf, count, None)?;
        } else {
            resident = Some(evict(&file, path)?.resident_pages);
        }
        file.rewind().map_err(|e| os_err(path, "seek", e))?;
        let (_, _, secs) = read_blocks(&file, path, &mut buf, count, None)?;
        probes.push(Probe {
            count,
            seconds: secs,
            resident_pages_after_evict: resident,
        });
        Ok(secs)
    };
    let (lo_s, hi_s) = (min.as_secs_f64(), max.as_secs_f64());
    let mut count = 1u64;
    let mut below: Option<u64> = None; // largest count known to read faster than --min
    let (count, seconds, reached) = loop {
        let t = probe(count)?;
        if t >= lo_s && t <= hi_s {
            break (count, t, true);
        }
        if t < lo_s {
            if count == max_count {
                break (count, t, false);
            }
            below = Some(count);
            count = count.saturating_mul(2).min(max_count);
            continue;
        }
        // Too slow: bisect between the last fast count and this one.
        let mut lo = below.unwrap_or(0);
        let mut hi = count;
        let mut best = (count, t);
        let mut found = false;
        for _ in 0..MAX_BISECT {
            if hi - lo <= 1 {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            let tm = probe(mid)?;
            if tm < lo_s {
                lo = mid;
            } else if tm > hi_s {
                hi = mid;
                best = (mid, tm);
            } else {
                best = (mid, tm);
                found = true;
                break;
            }
        }
        break (best.0, best.1, found);
    };
    Ok(CalibrateOutcome {
        file: path.to_path_buf(),
        block: block_size,
        min,
        max,
        warm,
        count,
        seconds,
        reached,
        max_count,
        probes,
    })
}

impl CalibrateOutcome {
    pub fn print(&self, json: bool) {
        if json {
            super::print_json(&serde_json::json!({
                "command": "calibrate",
                "file": self.file.display().to_string(),
                "block_bytes": self.block,
                "window_ns": [self.min.as_nanos() as f64, self.max.as_nanos() as f64],
                "cache": if self.warm { "warm" } else { "cold" },
                "count": self.count,
                "bytes": self.count * self.block,
                "seconds": self.seconds,
                "ns": self.seconds * 1e9,
                "bytes_per_s": super::rate(self.count * self.block, self.seconds),
                "in_window": self.reached,
                "max_count": self.max_count,
                "probes": self.probes,
            }));
            return;
        }
        let cache = if self.warm {
            "warm (range read once, untimed, before each probe)"
        } else {
            "cold (file evicted and checked with mincore before each probe)"
        };
        println!("probes: {cache}");
        for p in &self.probes {
            let note = match p.resident_pages_after_evict {
                Some(0) | None => String::new(),
                Some(r) => format!("  (eviction left {r} pages cached)"),
            };
            println!("  {:>12} blocks  {:>10.6} s{note}", p.count, p.seconds);
        }
        let window = format!("[{:?}, {:?}]", self.min, self.max);
        if self.reached {
            println!(
                "count {} ({} of {}) reads in {:.3} s, inside {window}",
                self.count,
                fmt_bytes((self.count * self.block) as f64),
                fmt_bytes(self.block as f64),
                self.seconds
            );
        } else if self.count == self.max_count && self.seconds < self.min.as_secs_f64() {
            println!(
                "the file is too small for {window}: the largest count it allows, {} ({}), reads in {:.3} s",
                self.count,
                fmt_bytes((self.count * self.block) as f64),
                self.seconds
            );
        } else {
            println!(
                "no count landed in {window} (the read time jumps across it); closest: {} blocks in {:.3} s",
                self.count, self.seconds
            );
        }
    }
}
