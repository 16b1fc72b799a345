//! `osmeter io ...`: the block-size I/O toolkit's arguments. The tools themselves
//! (write, read, calibrate, sweep, syscalls, xor) live in crate::io and print their own
//! outcome, as text or one JSON object.

use crate::io::{calibrate, read, sweep, syscalls, write, xor};
use crate::units::{parse_duration, parse_size};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub(super) const EXAMPLES: &str = "Examples:
  osmeter io write big.dat -b 1M -c 1024     a 1 GiB file of pseudo-random data
  osmeter io read big.dat -b 64K --cold      read it back uncached (evicted first)
  osmeter io calibrate big.dat -b 4K         the block count whose cold read takes 5-15 s
  osmeter io sweep big.dat                   MiB/s against block size, cold and warm
  osmeter io syscalls big.dat                read(1 byte) and lseek per call
  osmeter io xor big.dat                     the fast whole-file XOR reader
See `osmeter io SUBCOMMAND --help` for each tool's options.";

/// `osmeter io ...` subcommands.
#[derive(clap::Subcommand)]
pub(super) enum IoCmd {
    /// Write COUNT blocks of BLOCK_SIZE bytes of pseudo-random data, fsync, report MiB/s.
    Write {
        file: PathBuf,
        /// Block size (units: 4K, 1M, 1GiB; K/M/G are powers of 1024).
        #[arg(long, short = 'b', value_parser = parse_size, allow_hyphen_values = true)]
        block_size: u64,
        /// Number of blocks (units allowed: 1K = 1024 blocks).
        #[arg(long, short = 'c', value_parser = parse_size, allow_hyphen_values = true)]
        count: u64,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Read COUNT blocks (default: the whole file) with read(), report MiB/s.
    Read {
        file: PathBuf,
        #[arg(long, short = 'b', value_parser = parse_size, allow_hyphen_values = true)]
        block_size: u64,
        #[arg(long, short = 'c', value_parser = parse_size, allow_hyphen_values = true)]
        count: Option<u64>,
        /// Evict the file from the page cache first (verified with mincore).
        #[arg(long)]
        cold: bool,
        /// Read with O_DIRECT (bypasses the page cache; block size a multiple of 4 KiB).
        #[arg(long)]
        direct: bool,
        #[arg(long)]
        json: bool,
    },
    /// Find a block count whose (cold) read time lands in [--min, --max] by doubling.
    Calibrate {
        file: PathBuf,
        #[arg(long, short = 'b', value_parser = parse_size, allow_hyphen_values = true)]
        block_size: u64,
        /// Lower end of the time window (500ms, 5s, 1m...).
        #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "5s")]
        min: Duration,
        /// Upper end of the time window.
        #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s")]
        max: Duration,
        /// Probe with the file as cached as it gets instead of evicting before each probe.
        #[arg(long)]
        warm: bool,
        #[arg(long)]
        json: bool,
    },
    /// Read throughput per block size (powers of two), cold and warm, table + SVG plot.
    Sweep {
        file: PathBuf,
        /// Smallest block size.
        #[arg(long, value_parser = parse_size, allow_hyphen_values = true, default_value = "1")]
        from: u64,
        /// Largest block size.
        #[arg(long, value_parser = parse_size, allow_hyphen_values = true, default_value = "256K")]
        to: u64,
        /// Which cache states to measure.
        #[arg(long, value_enum, default_value = "both")]
        cache: sweep::CacheMode,
        /// Repetitions per point (at least 3).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// At most this many bytes per point and repetition.
        #[arg(long, value_parser = parse_size, allow_hyphen_values = true, default_value = "64M")]
        max_bytes: u64,
        /// Time budget per point and repetition (small blocks stop early).
        #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "250ms")]
        point_time: Duration,
        /// Where to write the SVG plot (default: ./osmeter-sweep-FILENAME.svg, never
        /// overwriting an existing file).
        #[arg(long)]
        plot: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// read() calls per second with 1-byte reads, and lseek() calls per second.
    Syscalls {
        file: PathBuf,
        /// Wall time per measurement (10 trials each; rates are per second of CPU time).
        #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "1s")]
        time: Duration,
        /// Skip the cpu.syscall (getppid) comparison.
        #[arg(long)]
        no_compare: bool,
        #[arg(long)]
        json: bool,
    },
    /// XOR of all 32-bit little-endian words of FILE, as fast as the machine allows.
    Xor {
        file: PathBuf,
        /// Threads (default: allowed CPUs for cached files, more for O_DIRECT).
        #[arg(long, short = 't')]
        threads: Option<usize>,
        /// Access method (auto picks from the file's cache state).
        #[arg(long, value_enum, default_value = "auto")]
        method: xor::Method,
        /// Block (chunk) size per request (default depends on the method).
        #[arg(long, short = 'b', value_parser = parse_size, allow_hyphen_values = true)]
        block_size: Option<u64>,
        /// Evict FILE from the page cache first (verified; not timed).
        #[arg(long)]
        cold: bool,
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `osmeter io` command and maps its outcome to an exit code.
pub(super) fn run(cmd: IoCmd) -> ExitCode {
    let r = match cmd {
        IoCmd::Write {
            file,
            block_size,
            count,
            force,
            json,
        } => write::run(&file, block_size, count, force).map(|o| o.print(json)),
        IoCmd::Read {
            file,
            block_size,
            count,
            cold,
            direct,
            json,
        } => read::run(&file, block_size, count, cold, direct).map(|o| o.print(json)),
        IoCmd::Calibrate {
            file,
            block_size,
            min,
            max,
            warm,
            json,
        } => calibrate::run(&file, block_size, min, max, warm).map(|o| o.print(json)),
        IoCmd::Sweep {
            file,
            from,
            to,
            cache,
            repeat,
            max_bytes,
            point_time,
            plot,
            json,
        } => sweep::run(&sweep::SweepConfig {
            file,
            from,
            to,
            cache,
            repeat,
            max_bytes,
            point_time,
            plot,
        })
        .map(|o| o.print(json)),
        IoCmd::Syscalls {
            file,
            time,
            no_compare,
            json,
        } => syscalls::run(&file, time, !no_compare).map(|o| o.print(json)),
        IoCmd::Xor {
            file,
            threads,
            method,
            block_size,
            cold,
            json,
        } => xor::run(&xor::XorConfig {
            file,
            threads,
            method,
            block_size,
            cold,
        })
        .map(|o| o.print(json)),
    };
    crate::error::exit(r)
}
