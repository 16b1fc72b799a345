//! `io read`: read N blocks of B bytes with read(), optionally cold (evicted first,
//! verified) or with O_DIRECT, and report the time and throughput.

use super::{check_block, fmt_mib_s, open_input, os_err, rate};
use crate::error;
use crate::pagecache::{self, AlignedBuf, Eviction};
use crate::units::fmt_bytes;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// O_DIRECT buffers and block sizes are aligned to this.
pub const DIRECT_ALIGN: usize = 4096;

/// Reads up to `count` blocks of `buf.len()` bytes sequentially from the current offset
/// with one read() per block (a short read ends the block; 0 ends the file). Stops early
/// when `deadline` passes. Returns (bytes, blocks, seconds).
pub fn read_blocks(
    file: &File,
    path: &Path,
    buf: &mut [u8],
    count: u64,
    deadline: Option<Duration>,
) -> error::Result<(u64, u64, f64)> {
    let fd = file.as_raw_fd();
    let span = super::Span::start();
    let until = deadline.map(super::deadline);
    let mut bytes = 0u64;
    let mut blocks = 0u64;
    while blocks < count {
        // SAFETY: buf is valid for buf.len() writable bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(os_err(path, "read failed", e));
        }
        if n == 0 {
            break;
        }
        bytes += n as u64;
        blocks += 1;
        // Checking the clock every 1024 blocks keeps its cost out of 1-byte reads.
        if let Some(d) = &until {
            if blocks % 1024 == 0 && d.passed() {
                break;
            }
        }
    }
    Ok((bytes, blocks, span.seconds()))
}

/// Evicts `file`, returning a one-line error when eviction is impossible.
pub fn evict(file: &File, path: &Path) -> error::Result<Eviction> {
    pagecache::evict(file, false)
        .map_err(|e| super::Error::runtime(format!("{}: eviction: {e:#}", path.display())))
}

/// Fraction of the file's pages in the page cache (sampled for files over 64 MiB);
/// Err(why) when mincore hides it for this file.
pub fn resident_fraction(file: &File) -> Result<f64, String> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    pagecache::sampled_residency(file, size)
}

pub struct ReadOutcome {
    pub file: PathBuf,
    pub block: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub direct: bool,
    pub resident_fraction: Result<f64, String>,
    pub eviction: Option<Eviction>,
}

pub fn run(
    path: &Path,
    block_size: u64,
    count: Option<u64>,
    cold: bool,
    direct: bool,
) -> error::Result<ReadOutcome> {
    let block = check_block(block_size)?;
    if direct && block % DIRECT_ALIGN != 0 {
        return super::usage(format!(
            "--direct needs a block size that is a multiple of {DIRECT_ALIGN} bytes, not {block}"
        ));
    }
    let (file, size) = open_input(path, 0)?;
    let full_blocks = size / block_size;
    let count = match count {
        Some(c) if c > full_blocks => {
            return super::usage(format!(
                "{}: {} holds only {full_blocks} whole block(s) of {}, not {c}",
                path.display(),
                fmt_bytes(size as f64),
                fmt_bytes(block_size as f64)
            ))
        }
        Some(c) => c,
        None => size.div_ceil(block_size),
    };
    let mut eviction = None;
    if cold {
        eviction = Some(evict(&file, path)?);
    }
    let resident = resident_fraction(&file);
    let file = if direct {
        super::open_input_uncached(path)
            .map_err(|e| super::Error::runtime(format!("O_DIRECT not supported here ({e})")))?
            .0
    } else {
        file
    };
    let mut buf = AlignedBuf::new(block, DIRECT_ALIGN)
        .map_err(|e| super::Error::runtime(format!("buffer: {e}")))?;
    let (bytes, blocks, seconds) = read_blocks(&file, path, &mut buf, count, None)?;
    Ok(ReadOutcome {
        file: path.to_path_buf(),
        block: block_size,
        blocks,
        bytes,
        seconds,
        direct,
        resident_fraction: resident,
        eviction,
    })
}

impl ReadOutcome {
    pub fn print(&self, json: bool) {
        let bps = rate(self.bytes, self.seconds);
        if json {
            super::print_json(&serde_json::json!({
                "command": "read",
                "file": self.file.display().to_string(),
                "block_bytes": self.block,
                "blocks": self.blocks,
                "bytes": self.bytes,
                "seconds": self.seconds,
                "ns": self.seconds * 1e9,
                "bytes_per_s": bps,
                "direct": self.direct,
                "resident_fraction_at_start": self.resident_fraction.as_ref().ok(),
                "residency_unknown": self.resident_fraction.as_ref().err(),
                // null when not asked for or not verifiable.
                "cold": self.eviction.as_ref().filter(|e| e.residency_unknown.is_none()).map(|e| e.verified()),
                "eviction": self.eviction,
            }));
            return;
        }
        println!(
            "read {} block(s) of {} = {} in {:.6} s: {}",
            self.blocks,
            fmt_bytes(self.block as f64),
            fmt_bytes(self.bytes as f64),
            self.seconds,
            fmt_mib_s(bps)
        );
        let how = if self.direct {
            "O_DIRECT (page cache bypassed)"
        } else {
            "read() through the page cache"
        };
        match &self.resident_fraction {
            Ok(f) => println!("{how}; {:.1}% of the file cached at start", f * 100.0),
            Err(why) => println!("{how}; cached fraction at start unknown: {why}"),
        }
        if let Some(e) = &self.eviction {
            let v = if e.residency_unknown.is_some() {
                "cold NOT verifiable"
            } else if e.verified() {
                "cold (verified)"
            } else {
                "NOT cold"
            };
            println!("{v}: {}", e.describe());
        }
    }
}
