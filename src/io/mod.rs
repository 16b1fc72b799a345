//! The block-size I/O toolkit (`osmeter io`, docs/IO.md;
//! its arguments are parsed in commands::io): write and read a file with
//! a chosen block size, calibrate a block count, sweep block sizes cold and warm, count
//! read/lseek calls per second, and XOR a whole file as fast as the machine allows.
//!
//! Errors (`crate::error`): bad values (sizes, durations), missing files, directories and
//! other non-regular files are usage errors (exit 2); permission, I/O and full-disk errors
//! are runtime errors (exit 1). Every error is one line.

pub mod calibrate;
pub mod read;
pub mod sweep;
pub mod syscalls;
pub mod write;
pub mod xor;

use crate::clock::{Deadline, HwClock, Stopwatch};
use crate::error;
use crate::harness::{Harness, HarnessConfig};
use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// Largest block size: one buffer of it is allocated per thread.
pub const MAX_BLOCK: u64 = 1 << 30;

pub use crate::error::{os_err, plain, runtime, usage, Error};

// Timing. io commands read no clock themselves: spans and deadlines come from the clock
// module's Stopwatch and Deadline on the run's clock, trials from the harness
// (docs/ARCHITECTURE.md, "One timing path"). The adapter below only adds what a one-shot
// command needs: the clock detected once, and the process's CPU time for multi-threaded
// spans (the harness's CPU-time mode covers the calling thread only).

/// The counter every io figure is timed with, detected (and calibrated) once.
pub fn clock() -> &'static HwClock {
    static CLOCK: OnceLock<HwClock> = OnceLock::new();
    // Only the counter: its description (and the invariance hint) is for the run's report.
    CLOCK.get_or_init(|| crate::clock::detect(None).0)
}

/// A harness on `clock()` with `loop_ticks` of loop overhead per iteration.
pub fn harness(cfg: HarnessConfig, loop_ticks: f64) -> Harness<'static> {
    Harness::new(clock(), cfg, loop_ticks)
}

/// A deadline `d` from now on `clock()`.
pub fn deadline(d: Duration) -> Deadline<'static> {
    Deadline::after(clock(), d)
}

/// One timed span of a command: wall time on `clock()` and the process's CPU time.
pub struct Span {
    wall: Stopwatch<'static>,
    cpu0: f64,
}

impl Span {
    pub fn start() -> Span {
        // Detect the clock first: its calibration spins, and is no part of the span.
        let clock = clock();
        Span {
            cpu0: process_cpu_seconds(),
            wall: Stopwatch::start(clock),
        }
    }

    /// Wall seconds since `start`.
    pub fn seconds(&self) -> f64 {
        self.wall.elapsed_ns() * 1e-9
    }

    /// CPU seconds of every thread of the process since `start`.
    pub fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds() - self.cpu0
    }
}

/// CPU time used by this process so far (all threads, user + system), in seconds.
fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given and reads nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Opens an existing regular file for reading (optionally with extra open flags) and
/// returns it with its size.
pub fn open_input(path: &Path, flags: i32) -> error::Result<(File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let len = input_len(path)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| os_err(path, "cannot open for reading", e))?;
    Ok((f, len))
}

/// As `open_input`, with reads that bypass the page cache (O_DIRECT, F_NOCACHE).
pub fn open_input_uncached(path: &Path) -> error::Result<(File, u64)> {
    let len = input_len(path)?;
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    let f = crate::platform::open_uncached(&o, path)
        .map_err(|e| os_err(path, "cannot open for reading", e))?;
    Ok((f, len))
}

/// The size of an existing regular file; a usage error for anything else.
fn input_len(path: &Path) -> error::Result<u64> {
    let md = std::fs::metadata(path).map_err(|e| os_err(path, "cannot open", e))?;
    if md.is_dir() {
        return usage(format!("{}: is a directory, not a file", path.display()));
    }
    if !md.is_file() {
        return usage(format!(
            "{}: not a regular file (devices, FIFOs and sockets have no size to read)",
            path.display()
        ));
    }
    Ok(md.len())
}

/// Checks a block size against the toolkit's limit.
pub fn check_block(b: u64) -> error::Result<usize> {
    if b > MAX_BLOCK {
        return usage(format!(
            "block size {} is larger than the limit of {} (one buffer of it is allocated)",
            crate::units::fmt_bytes(b as f64),
            crate::units::fmt_bytes(MAX_BLOCK as f64)
        ));
    }
    Ok(b as usize)
}

/// bytes / seconds, 0 when nothing was timed.
pub fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs
    } else {
        0.0
    }
}

/// "123.4 MiB/s (129.4 MB/s)".
pub fn fmt_mib_s(bps: f64) -> String {
    format!("{:.1} MiB/s ({:.1} MB/s)", bps / 1048576.0, bps / 1e6)
}

/// Prints a JSON value on one line (stdout).
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string(v).unwrap_or_else(|_| "{}".into())
    );
}
