//! `io xor`: the XOR of all 32-bit little-endian words of a file (a final partial word
//! zero-padded), read as fast as the machine allows.
//!
//! How it goes fast (docs/IO.md explains the choices and docs/VALIDATION.md has the measurements behind them):
//! - the file's cache state is probed with mincore; a mostly cached file is mapped
//!   (no copy into user buffers) and XORed straight from the page cache where the cache
//!   holds large folios the kernel maps with one PMD entry each; each thread's first
//!   chunk counts its page faults to find out. In small folios the page-table entries
//!   cost more than a copy, and the thread preads the rest into a 128 KiB buffer that
//!   stays in L2. An uncached file is read by two threads, each
//!   a sequential buffered stream over its half with its own readahead (faster than
//!   O_DIRECT on the disks measured), or with O_DIRECT when the load average exceeds
//!   the CPUs (buffered reads cost ~3x its CPU time);
//! - where mincore hides the cache state (files the user neither owns nor may write),
//!   non-blocking 1-byte reads probe it instead;
//! - mapped chunks and O_DIRECT blocks are handed out by an atomic counter, so threads
//!   share the work and a slow request does not stall the others;
//! - the XOR kernel keeps 16 independent 64-bit lanes (vectorised by the compiler; an
//!   AVX2 build of the same code is picked at run time where the CPU has it).
//!
//! XOR is associative and commutative, so partial results combine in any order. A piece
//! starting at byte offset `o` contributes its own word-XOR rotated by `8 * (o % 4)` bits,
//! which keeps the result right even for pieces that do not start on a word boundary.

use super::{open_input, os_err, rate};
use crate::error;
use crate::pagecache::{self, AlignedBuf};
use crate::platform::HugePages;
use crate::units::fmt_bytes;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Pick from the file's cache state and what the platform supports.
    Auto,
    /// Map the file and XOR the page cache in place.
    Mmap,
    /// pread() into aligned buffers.
    Read,
    /// pread() with O_DIRECT (bypassing the page cache).
    Direct,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Mmap => "mmap",
            Method::Read => "read",
            Method::Direct => "direct",
        }
    }
}

/// Default chunk per request for each method (measured; see docs/IO.md).
const MMAP_CHUNK: usize = 8 << 20;
/// Cached reads copy into a per-thread buffer this small, so the copy's stores and the
/// XOR's loads stay in the core's L2 (256 KiB or more on every CPU the tool targets):
/// memory is read once, by the kernel's copy.
const CACHED_BUF: usize = 128 << 10;
/// A mapped chunk is cheap when its first touch needed at most one fault per this many
/// bytes: most of it is in large folios mapped with one PMD entry each (2 MiB per
/// fault). Fault-around over small folios maps 64 KiB per fault, one PTE per page
/// (measured both sides of this line: docs/IO.md, "io xor").
const CHEAP_BYTES_PER_FAULT: u64 = 256 << 10;
/// A thread that reads maps again after at most this many chunks, to see whether the folios
/// got larger (where they never do, one chunk in 8 pays for the dearer mapping).
const REPROBE: u64 = 8;
/// Uncached buffered reads: fewer, larger copies per readahead stream (less CPU).
const STREAM_BLOCK: usize = 4 << 20;
/// Uncached buffered reads: readahead streams (two beat one and four on a virtio disk).
const UNCACHED_STREAMS: usize = 2;
const DIRECT_BLOCK: usize = 4 << 20;
/// A file at least this much cached is read through the page cache.
const CACHED_FRACTION: f64 = 0.5;
/// O_DIRECT reads keep at least this many requests in flight (threads mostly wait).
const DIRECT_MIN_THREADS: usize = 4;
/// O_DIRECT buffers and offsets are aligned to this (covers 512 B and 4 KiB sectors).
const DIRECT_ALIGN: usize = 4096;
/// A cached run whose threads got less of the CPU than this says so.
const MIN_CPU_SHARE: f64 = 0.75;

pub struct XorConfig {
    pub file: PathBuf,
    pub threads: Option<usize>,
    pub method: Method,
    pub block_size: Option<u64>,
    pub cold: bool,
}

pub struct XorOutcome {
    pub file: PathBuf,
    pub xor: u32,
    pub bytes: u64,
    pub seconds: f64,
    pub method: Method,
    pub threads: usize,
    pub block: usize,
    /// mincore's cached fraction at start; None when mincore hides it.
    pub resident_fraction: Option<f64>,
    pub residency_unknown: Option<String>,
    /// Cached fraction by non-blocking read probes (only when mincore hides it).
    pub cached_probe: Option<f64>,
    /// CPU time of the run, all threads, user + system.
    pub cpu_seconds: f64,
    pub simd: &'static str,
    pub eviction: Option<pagecache::Eviction>,
    pub notes: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// The XOR kernel.

/// Word-XOR of `data` as if it started at a word boundary; the tail is zero-padded.
#[inline(always)]
fn xor_body(data: &[u8]) -> u32 {
    const LANES: usize = 16;
    let mut acc = [0u64; LANES];
    let mut chunks = data.chunks_exact(LANES * 8);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&c[i * 8..i * 8 + 8]);
            *a ^= u64::from_le_bytes(w);
        }
    }
    let a = acc.iter().fold(0u64, |x, y| x ^ y);
    // A little-endian u64 holds two consecutive words: low half first.
    let mut x = (a as u32) ^ ((a >> 32) as u32);
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        x ^= u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 4];
        w[..tail.len()].copy_from_slice(tail);
        x ^= u32::from_le_bytes(w);
    }
    x
}

/// Portable build of the kernel (SSE2 on x86-64, NEON on aarch64).
pub fn xor_portable(data: &[u8]) -> u32 {
    xor_body(data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn xor_avx2(data: &[u8]) -> u32 {
    xor_body(data)
}

/// Which kernel `xor_words` uses on this CPU.
pub fn simd_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
        "sse2"
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

/// Word-XOR of `data` (starting at a word boundary, tail zero-padded), fastest kernel.
pub fn xor_words(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { xor_avx2(data) };
        }
    }
    xor_portable(data)
}

/// The contribution of a piece that starts at byte `offset` of the file.
pub fn at_offset(piece_xor: u32, offset: u64) -> u32 {
    piece_xor.rotate_left(8 * (offset % 4) as u32)
}

/// Naive reference: one word at a time, for tests.
#[cfg(test)]
pub fn xor_reference(data: &[u8]) -> u32 {
    let mut x = 0u32;
    for (i, &b) in data.iter().enumerate() {
        x ^= (b as u32) << (8 * (i % 4));
    }
    x
}

// ---------------------------------------------------------------------------------------
// The readers.

/// Runs `work(state, block_index)` over `nblocks` blocks on `threads` threads that claim
/// blocks from a shared counter; returns the XOR of all results.
fn parallel<S>(
    threads: usize,
    nblocks: u64,
    init: impl Fn() -> error::Result<S> + Sync,
    work: impl Fn(&mut S, u64) -> error::Result<u32> + Sync,
) -> error::Result<u32> {
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let one = || -> error::Result<u32> {
        let mut state = init()?;
        let mut acc = 0u32;
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(acc);
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= nblocks {
                return Ok(acc);
            }
            match work(&mut state, i) {
                Ok(x) => acc ^= x,
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    };
    if threads <= 1 {
        return one();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(one)).collect();
        let mut acc = 0u32;
        let mut err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(x)) => acc ^= x,
                Ok(Err(e)) => err = err.or(Some(e)),
                Err(_) => err = err.or(Some(super::Error::runtime("a reader thread panicked"))),
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(acc),
        }
    })
}

/// pread until `buf` is full or end of file; returns the bytes read.
fn pread_full(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> error::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the destination is the unfilled tail of `buf`, valid for writes.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                (offset + got as u64) as libc::off_t,
            )
        };
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
        got += n as usize;
    }
    Ok(got)
}

/// XOR with O_DIRECT pread into per-thread aligned buffers.
fn xor_direct(
    file: &File,
    path: &Path,
    size: u64,
    block: usize,
    threads: usize,
) -> error::Result<u32> {
    let nblocks = size.div_ceil(block as u64);
    parallel(
        threads,
        nblocks,
        || {
            AlignedBuf::new(block, DIRECT_ALIGN)
                .map_err(|e| super::Error::runtime(format!("buffer: {e}")))
        },
        |buf, i| {
            let off = i * block as u64;
            let want = (size - off).min(block as u64) as usize;
            // O_DIRECT lengths must be aligned; the read stops at end of file anyway.
            let ask = want.next_multiple_of(DIRECT_ALIGN).min(block);
            let got = pread_full(file, path, &mut buf[..ask], off)?;
            if got < want {
                return super::runtime(format!("{}: file shrank while being read", path.display()));
            }
            Ok(at_offset(xor_words(&buf[..want]), off))
        },
    )
}

/// Buffered XOR as `threads` sequential streams: each thread reads one contiguous
/// region of the file through its own descriptor, so each has its own readahead state
/// (threads taking turns on one descriptor's blocks confuse its readahead).
fn xor_streams(path: &Path, size: u64, block: usize, threads: usize) -> error::Result<u32> {
    let per = size.div_ceil(threads as u64).next_multiple_of(block as u64);
    let regions = size.div_ceil(per);
    parallel(
        threads,
        regions,
        || {
            AlignedBuf::new(block, DIRECT_ALIGN)
                .map_err(|e| super::Error::runtime(format!("buffer: {e}")))
        },
        |buf, r| {
            let start = r * per;
            let end = (start + per).min(size);
            let (file, _) = open_input(path, 0)?;
            crate::platform::advise(&file, crate::platform::Access::Sequential);
            let mut acc = 0u32;
            let mut off = start;
            while off < end {
                let want = (end - off).min(block as u64) as usize;
                let got = pread_full(&file, path, &mut buf[..want], off)?;
                if got < want {
                    return super::runtime(format!(
                        "{}: file shrank while being read",
                        path.display()
                    ));
                }
                acc ^= at_offset(xor_words(&buf[..want]), off);
                off += want as u64;
            }
            Ok(acc)
        },
    )
}

/// A read-only shared mapping of a whole file, unmapped on drop.
struct Mapping {
    addr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new(file: &File, path: &Path, len: usize) -> error::Result<Mapping> {
        // SAFETY: a fresh read-only shared mapping of an open file; unmapped in drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(os_err(path, "mmap failed", std::io::Error::last_os_error()));
        }
        // Where the page cache holds 2 MiB folios (ext4, xfs... on recent kernels), let
        // the kernel map each with one PMD entry instead of 512 PTEs: building and
        // tearing down page tables is most of the cost of reading through mmap.
        // Sequential advice helps readahead for pages that are not cached. Hints only.
        // SAFETY: advice on exactly the mapping made above.
        unsafe {
            crate::platform::advise_huge_pages(addr as *mut u8, len, HugePages::Huge);
            libc::madvise(addr, len, libc::MADV_SEQUENTIAL);
        }
        Ok(Mapping { addr, len })
    }
}

// SAFETY: the mapping is read-only and owned; concurrent reads of it are sound.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`; no slice of it outlives
        // the Mapping (readers are scoped threads joined before drop).
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// How a cached file's chunks are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cached {
    /// XOR straight from the mapping.
    Map,
    /// pread() into a cache-resident buffer, then XOR that.
    Read,
    /// Map while each mapped chunk's faults say mapping is cheap, else Read (and
    /// try mapping again now and then).
    Probe,
}

/// Whether mapping `bytes` that took `faults` on first touch was cheap (large folios,
/// PMD-mapped): then mapping beats copying; otherwise the per-page entries cost more
/// than the copy into a cache-resident buffer (docs/IO.md, "io xor").
fn mapping_is_cheap(bytes: u64, faults: u64) -> bool {
    faults.saturating_mul(CHEAP_BYTES_PER_FAULT) <= bytes
}

/// Chunks to read before mapping again: none while mapping is cheap, else doubling
/// from 1 up to REPROBE, so a thread returns to mapping soon where cheap and expensive
/// stretches alternate, and pays a probe only every REPROBE-th chunk where they never end.
fn next_wait(cheap: bool, wait: u64) -> u64 {
    if cheap {
        0
    } else {
        (wait * 2).clamp(1, REPROBE)
    }
}

/// What the cached readers did: chunks mapped and read, and the probes' faults.
#[derive(Default)]
struct ReaderTally {
    mapped: AtomicU64,
    read: AtomicU64,
    probe_bytes: AtomicU64,
    probe_faults: AtomicU64,
}

struct CachedReader {
    mode: Cached,
    buf: Option<AlignedBuf>,
    /// Probe: whether this thread's last mapped chunk was cheap, chunks read since the
    /// last probe, and how many to read before the next (doubling up to REPROBE).
    map_ok: bool,
    since: u64,
    wait: u64,
}

/// XOR of a cached file, chunks claimed by `threads` threads; `m` is needed unless
/// `mode` is `Read`. Nothing on the per-chunk path allocates or reads a clock: a
/// probing thread reads its fault counter twice, once, and a reading thread allocates
/// its buffer once.
#[allow(clippy::too_many_arguments)]
fn xor_cached(
    file: &File,
    path: &Path,
    m: Option<&Mapping>,
    size: u64,
    chunk: usize,
    buf: usize,
    threads: usize,
    mode: Cached,
    tally: &ReaderTally,
) -> error::Result<u32> {
    let nblocks = size.div_ceil(chunk as u64);
    let mode = if m.is_none() { Cached::Read } else { mode };
    parallel(
        threads,
        nblocks,
        || {
            Ok(CachedReader {
                mode,
                buf: None,
                map_ok: false,
                since: 0,
                wait: 0,
            })
        },
        |st, i| {
            let off = i * chunk as u64;
            let n = (size - off).min(chunk as u64) as usize;
            match (st.mode, m) {
                (Cached::Map, Some(m)) => {
                    tally.mapped.fetch_add(1, Ordering::Relaxed);
                    Ok(xor_map_chunk(m, off as usize, n))
                }
                // Map while mapping stays cheap; while reading, try it again after
                // 1, 2, 4... up to REPROBE chunks: folio shapes vary along a file
                // (readahead starts with small folios and grows them; files written
                // in 1 MiB pieces mix 2 MiB folios with small ones).
                (Cached::Probe, Some(m)) if st.map_ok || st.since >= st.wait => {
                    let before = crate::platform::thread_usage();
                    let x = xor_map_chunk(m, off as usize, n);
                    let after = crate::platform::thread_usage();
                    st.map_ok = match (before, after) {
                        (Ok(b), Ok(a)) if b.per_thread => {
                            let faults =
                                a.minor_faults + a.major_faults - b.minor_faults - b.major_faults;
                            tally.probe_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            tally.probe_faults.fetch_add(faults, Ordering::Relaxed);
                            mapping_is_cheap(n as u64, faults)
                        }
                        // No per-thread counter: no evidence that mapping is cheap.
                        _ => false,
                    };
                    st.since = 0;
                    st.wait = next_wait(st.map_ok, st.wait);
                    tally.mapped.fetch_add(1, Ordering::Relaxed);
                    Ok(x)
                }
                _ => {
                    st.since += 1;
                    tally.read.fetch_add(1, Ordering::Relaxed);
                    if st.buf.is_none() {
                        st.buf = Some(
                            AlignedBuf::new(buf, DIRECT_ALIGN)
                                .map_err(|e| super::Error::runtime(format!("buffer: {e}")))?,
                        );
                    }
                    let b = st.buf.as_mut().expect("allocated just above");
                    xor_read_chunk(file, path, b, off, n)
                }
            }
        },
    )
}

/// XOR of `n` bytes of the mapping at `off`, whose entries are dropped afterwards.
fn xor_map_chunk(m: &Mapping, off: usize, n: usize) -> u32 {
    let base = m.addr as usize;
    // SAFETY: off..off+n lies inside the read-only mapping, which outlives the scoped
    // reader threads. (Truncating the file meanwhile would raise SIGBUS; that is the
    // documented cost of mmap.)
    let data = unsafe { std::slice::from_raw_parts((base + off) as *const u8, n) };
    let x = at_offset(xor_words(data), off as u64);
    // Drop this chunk's page-table entries now, in this thread, rather than in one
    // serial munmap at the end (13 ms of ~140 for a 2 GiB file in 4 KiB entries). The
    // page cache keeps the pages. Where unsupported, munmap drops them.
    // SAFETY: a range inside the live shared mapping; `data` is not used after this.
    unsafe { crate::platform::drop_mapped_range((base + off) as *mut u8, n) };
    x
}

/// XOR of `n` bytes at `off`, read with pread into `buf` a buffer at a time.
fn xor_read_chunk(
    file: &File,
    path: &Path,
    buf: &mut [u8],
    off: u64,
    n: usize,
) -> error::Result<u32> {
    let mut acc = 0u32;
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(buf.len());
        let at = off + done as u64;
        let got = pread_full(file, path, &mut buf[..want], at)?;
        if got < want {
            return super::runtime(format!("{}: file shrank while being read", path.display()));
        }
        acc ^= at_offset(xor_words(&buf[..want]), at);
        done += want;
    }
    Ok(acc)
}

// ---------------------------------------------------------------------------------------
// The command.

/// Cached fraction of `PROBES` evenly spaced bytes, asked with reads that may not wait
/// for I/O (`platform::cached_nowait`): the fallback when mincore cannot be believed. A miss
/// starts readahead at its spot, harmless here since the whole file is read next.
/// None when the file system does not support such reads.
fn probe_cached(file: &File, size: u64) -> Option<f64> {
    const PROBES: u64 = 64;
    if size == 0 {
        return Some(1.0);
    }
    let mut hits = 0;
    for i in 0..PROBES {
        if crate::platform::cached_nowait(file, size / PROBES * i).ok()? {
            hits += 1;
        }
    }
    Some(hits as f64 / PROBES as f64)
}

/// The method for an uncached file. Buffered readahead streams are faster than O_DIRECT
/// when CPUs are free, but cost more CPU time (page-cache allocation and the copy): with
/// more runnable tasks than CPUs the threads wait for a CPU, and O_DIRECT is faster
/// (docs/IO.md, "io xor").
fn uncached_method(load: f64, cpus: usize) -> Method {
    if load > cpus as f64 {
        Method::Direct
    } else {
        Method::Read
    }
}

pub fn run(cfg: &XorConfig) -> error::Result<XorOutcome> {
    let block_arg = check_args(cfg)?;
    let path = cfg.file.as_path();
    let mut notes = Vec::new();
    let (file, _) = open_input(path, 0)?;
    let eviction = if cfg.cold {
        Some(evict_first(&file, path, &mut notes)?)
    } else {
        None
    };
    // The timed region starts before the cache-state probe and ends after unmapping:
    // choosing the method and mapping the file are part of what a reader pays.
    let span = super::Span::start();
    let size = file.metadata().map_err(|e| os_err(path, "stat", e))?.len();
    let state = cache_state(&file, size, &mut notes);
    let plan = plan(cfg, &file, size, block_arg, &state, &mut notes)?;
    let xor = plan.xor(&file, path, size)?;
    let (method, block) = plan.chosen(&mut notes);
    let (threads, uncached) = (plan.threads, plan.uncached);
    drop(plan);
    let (seconds, cpu_seconds) = (span.seconds(), span.cpu_seconds());
    if !uncached {
        notes.extend(cpu_share_note(size, seconds, cpu_seconds, threads));
    }
    Ok(XorOutcome {
        file: cfg.file.clone(),
        xor,
        bytes: size,
        seconds,
        method,
        threads,
        block,
        resident_fraction: state.residency.as_ref().ok().copied(),
        residency_unknown: state.residency.err(),
        cached_probe: state.probe,
        cpu_seconds,
        simd: simd_name(),
        eviction,
        notes,
    })
}

/// --threads and --block-size checked; the block size when given.
fn check_args(cfg: &XorConfig) -> error::Result<Option<usize>> {
    if cfg.threads == Some(0) {
        return super::usage("--threads must be at least 1");
    }
    if let Some(t) = cfg.threads {
        if t > 1024 {
            return super::usage("--threads must be at most 1024");
        }
    }
    cfg.block_size.map(super::check_block).transpose()
}

/// --cold: evicts the file (not timed); an unverified eviction becomes a note.
fn evict_first(
    file: &File,
    path: &Path,
    notes: &mut Vec<String>,
) -> error::Result<pagecache::Eviction> {
    let e = pagecache::evict(file, false)
        .map_err(|e| super::Error::runtime(format!("{}: eviction: {e:#}", path.display())))?;
    if !e.verified() {
        notes.push(format!("eviction not verified: {}", e.describe()));
    }
    Ok(e)
}

/// The file's cache state at start: mincore's fraction, else non-blocking read probes.
struct CacheState {
    residency: Result<f64, String>,
    probe: Option<f64>,
    /// What the method is chosen from (unknown counts as uncached).
    estimate: f64,
}

fn cache_state(file: &File, size: u64, notes: &mut Vec<String>) -> CacheState {
    let residency = pagecache::sampled_residency(file, size);
    // Where mincore cannot be believed, ask the page cache with non-blocking reads;
    // where those are not supported either, assume uncached (streams are the method
    // that does tolerably in both states).
    let probe = match &residency {
        Ok(_) => None,
        Err(why) => {
            let p = probe_cached(file, size);
            notes.push(match p {
                Some(f) => format!(
                    "cache state from non-blocking reads ({:.0}% of probes cached): {why}",
                    f * 100.0
                ),
                None => format!("cache state unknown, assumed uncached: {why}"),
            });
            p
        }
    };
    let estimate = residency.as_ref().ok().copied().or(probe).unwrap_or(0.0);
    CacheState {
        residency,
        probe,
        estimate,
    }
}

/// How the file will be read: method, request size, threads, and what they read from.
struct XorPlan {
    method: Method,
    /// Per request: the chunk a thread claims, or for cached reads the buffer.
    block: usize,
    threads: usize,
    uncached: bool,
    /// Auto on a cached file: each thread's first chunk decides mapping or reading.
    probe: bool,
    mapping: Option<Mapping>,
    direct_file: Option<File>,
    tally: ReaderTally,
}

fn plan(
    cfg: &XorConfig,
    file: &File,
    size: u64,
    block_arg: Option<usize>,
    state: &CacheState,
    notes: &mut Vec<String>,
) -> error::Result<XorPlan> {
    let path = cfg.file.as_path();
    let cpus = crate::platform::allowed_cpus().len().max(1);
    let cached = state.estimate >= CACHED_FRACTION;
    // Mapping is cheap only where the cache holds PMD-mapped large folios; a thread
    // finds out from its first chunk's faults. Without per-thread fault counters
    // (macOS) there is no such evidence, and read() has a bounded cost everywhere.
    let probe = cfg.method == Method::Auto
        && cached
        && crate::platform::thread_usage().is_ok_and(|u| u.per_thread);
    let mut method = match cfg.method {
        Method::Auto if probe => Method::Mmap,
        Method::Auto if cached => Method::Read,
        Method::Auto => {
            // Runnable and uninterruptible tasks; unknown counts as idle.
            let load = crate::platform::load_average().unwrap_or(0.0);
            let m = uncached_method(load, cpus);
            if m == Method::Direct {
                notes.push(format!(
                    "uncached on a busy machine (load {load:.1} on {cpus} CPU(s)): O_DIRECT, \
                     which needs a third of the CPU time of buffered reads"
                ));
            }
            m
        }
        m => m,
    };
    let len = usize::try_from(size)
        .map_err(|_| super::Error::runtime("file larger than the address space"))?;
    let mapping = if method == Method::Mmap && size > 0 {
        Some(Mapping::new(file, path, len)?)
    } else {
        None
    };
    let mut direct_file = None;
    if method == Method::Direct {
        match super::open_input_uncached(path) {
            Ok((f, _)) => direct_file = Some(f),
            Err(e) => {
                notes.push(format!("O_DIRECT refused ({e}); buffered reads instead"));
                method = Method::Read;
            }
        }
        if let Some(b) = block_arg {
            if b % DIRECT_ALIGN != 0 {
                return super::usage(format!(
                    "--block-size {b}: O_DIRECT needs a multiple of {DIRECT_ALIGN} bytes"
                ));
            }
        }
    }
    let uncached = !cached;
    let block = block_arg.unwrap_or(match method {
        Method::Mmap => MMAP_CHUNK,
        Method::Direct => DIRECT_BLOCK,
        _ if uncached => STREAM_BLOCK,
        _ => CACHED_BUF,
    });
    let default_threads = match method {
        Method::Direct => cpus.max(DIRECT_MIN_THREADS),
        _ if uncached => UNCACHED_STREAMS,
        _ => cpus,
    };
    let claimed = if method == Method::Read && !uncached {
        cached_read_chunk(block)
    } else {
        block
    };
    let nblocks = size.div_ceil(claimed as u64).max(1);
    let threads = (cfg.threads.unwrap_or(default_threads) as u64).min(nblocks) as usize;
    Ok(XorPlan {
        method,
        block,
        threads,
        uncached,
        probe,
        mapping,
        direct_file,
        tally: ReaderTally::default(),
    })
}

impl XorPlan {
    /// The method and request size most of the file went through, with a note on what
    /// the probes saw.
    fn chosen(&self, notes: &mut Vec<String>) -> (Method, usize) {
        if !self.probe {
            return (self.method, self.block);
        }
        let t = &self.tally;
        let (mapped, read) = (
            t.mapped.load(Ordering::Relaxed),
            t.read.load(Ordering::Relaxed),
        );
        let (bytes, faults) = (
            t.probe_bytes.load(Ordering::Relaxed),
            t.probe_faults.load(Ordering::Relaxed),
        );
        let seen = format!(
            "{mapped} of {} chunks mapped, {faults} page fault(s) for {} ({} per fault)",
            mapped + read,
            fmt_bytes(bytes as f64),
            fmt_bytes(bytes as f64 / faults.max(1) as f64)
        );
        let why = "mapped where the cache holds PMD-mapped large folios, read with pread \
                   into cache-resident buffers where small folios make page-table entries \
                   cost more than a copy";
        notes.push(format!("{seen}: {why}"));
        // The method most of the file went through, with its request size.
        if mapped >= read {
            (Method::Mmap, self.block)
        } else {
            (Method::Read, CACHED_BUF)
        }
    }
}

/// Cached reads: threads claim chunks of this size and read each a buffer at a time.
fn cached_read_chunk(buf: usize) -> usize {
    MMAP_CHUNK.max(buf)
}

impl XorPlan {
    fn xor(&self, file: &File, path: &Path, size: u64) -> error::Result<u32> {
        if size == 0 {
            return Ok(0);
        }
        let (block, threads) = (self.block, self.threads);
        match self.method {
            Method::Mmap => {
                let mode = if self.probe {
                    Cached::Probe
                } else {
                    Cached::Map
                };
                let m = self.mapping.as_ref();
                xor_cached(
                    file,
                    path,
                    m,
                    size,
                    block,
                    CACHED_BUF,
                    threads,
                    mode,
                    &self.tally,
                )
            }
            Method::Read if !self.uncached => {
                let chunk = cached_read_chunk(block);
                xor_cached(
                    file,
                    path,
                    None,
                    size,
                    chunk,
                    block,
                    threads,
                    Cached::Read,
                    &self.tally,
                )
            }
            Method::Direct => match &self.direct_file {
                Some(f) => xor_direct(f, path, size, block, threads),
                None => xor_streams(path, size, block, threads),
            },
            _ => xor_streams(path, size, block, threads),
        }
    }
}

/// Premise of a cached run: its threads had the CPUs. On a busy machine they wait for
/// them, and the throughput measures the CPU share, not the memory system.
fn cpu_share_note(size: u64, seconds: f64, cpu_seconds: f64, threads: usize) -> Option<String> {
    let cpu_share = cpu_seconds / (seconds * threads as f64);
    (threads > 0 && cpu_share < MIN_CPU_SHARE).then(|| {
        format!(
            "the {threads} thread(s) ran only {:.0}% of the time (other work held the CPUs): \
             this throughput is bounded by CPU share, {} per CPU-second",
            cpu_share * 100.0,
            crate::units::fmt_bandwidth(rate(size, cpu_seconds))
        )
    })
}

impl XorOutcome {
    pub fn bytes_per_s(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }

    pub fn print(&self, json: bool) {
        if json {
            super::print_json(&serde_json::json!({
                "command": "xor",
                "file": self.file.display().to_string(),
                "xor": format!("{:08x}", self.xor),
                "bytes": self.bytes,
                "seconds": self.seconds,
                "ns": self.seconds * 1e9,
                "bytes_per_s": self.bytes_per_s(),
                "method": self.method.name(),
                "threads": self.threads,
                "block_bytes": self.block,
                "resident_fraction_at_start": self.resident_fraction,
                "residency_unknown": self.residency_unknown,
                "cached_probe": self.cached_probe,
                "cpu_seconds": self.cpu_seconds,
                "bytes_per_cpu_s": rate(self.bytes, self.cpu_seconds),
                "simd": self.simd,
                "eviction": self.eviction,
                "notes": self.notes,
            }));
            return;
        }
        println!("{:08x}  {}", self.xor, self.file.display());
        println!(
            "{} in {:.3} s = {}",
            fmt_bytes(self.bytes as f64),
            self.seconds,
            crate::units::fmt_bandwidth(self.bytes_per_s())
        );
        let cached = match self.resident_fraction {
            Some(f) => format!("{:.1}% of the file cached at start", f * 100.0),
            None => "cached fraction at start unknown (see note)".into(),
        };
        println!(
            "method {}, {} thread(s), {} per request, {} kernel; {cached}",
            self.method.name(),
            self.threads,
            fmt_bytes(self.block as f64),
            self.simd,
        );
        if let Some(e) = &self.eviction {
            println!("cold: {}", e.describe());
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn kernels_match_reference() {
        for n in [
            0, 1, 2, 3, 4, 5, 127, 128, 129, 255, 4095, 4096, 4097, 100_003,
        ] {
            let d = bytes(n, n as u64 + 7);
            let r = xor_reference(&d);
            assert_eq!(xor_portable(&d), r, "portable, n={n}");
            assert_eq!(xor_words(&d), r, "dispatched, n={n}");
        }
    }

    #[test]
    fn pieces_at_any_offset_combine() {
        let d = bytes(1000, 3);
        for cut in [1, 2, 3, 4, 5, 129, 998] {
            let x =
                at_offset(xor_words(&d[..cut]), 0) ^ at_offset(xor_words(&d[cut..]), cut as u64);
            assert_eq!(x, xor_reference(&d), "cut at {cut}");
        }
    }

    #[test]
    fn busy_machines_read_uncached_files_directly() {
        assert_eq!(uncached_method(0.5, 2), Method::Read);
        assert_eq!(uncached_method(2.0, 2), Method::Read);
        assert_eq!(uncached_method(9.0, 2), Method::Direct);
        assert_eq!(uncached_method(9.0, 16), Method::Read);
    }

    #[test]
    fn known_value() {
        assert_eq!(xor_reference(&[1, 2, 3, 4, 5]), 0x0403_0204);
        assert_eq!(xor_words(&[]), 0);
    }

    #[test]
    fn cached_readers_match_reference_on_odd_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let page = crate::platform::page_size();
        let sizes = [
            0,
            1,
            3,
            page - 1,
            page + 1,
            CACHED_BUF + 5,
            3 * page + CACHED_BUF * 2 + 7,
        ];
        for (k, &n) in sizes.iter().enumerate() {
            let d = bytes(n, k as u64 + 41);
            let want = xor_reference(&d);
            let path = dir.path().join(format!("f{n}"));
            std::fs::write(&path, &d).unwrap();
            let file = File::open(&path).unwrap();
            let m = (n > 0).then(|| Mapping::new(&file, &path, n).unwrap());
            // Chunks of 3 pages, buffers of 1000 bytes: pieces end mid-word.
            for mode in [Cached::Map, Cached::Read, Cached::Probe] {
                for threads in [1, 3] {
                    let t = ReaderTally::default();
                    let got = xor_cached(
                        &file,
                        &path,
                        m.as_ref(),
                        n as u64,
                        3 * page,
                        1000,
                        threads,
                        mode,
                        &t,
                    )
                    .unwrap();
                    assert_eq!(got, want, "size {n}, {mode:?}, {threads} thread(s)");
                }
            }
            // And through the command, every method the cached path takes.
            for method in [Method::Auto, Method::Mmap, Method::Read] {
                let cfg = XorConfig {
                    file: path.clone(),
                    threads: None,
                    method,
                    block_size: None,
                    cold: false,
                };
                assert_eq!(run(&cfg).unwrap().xor, want, "size {n}, {method:?}");
            }
        }
    }

    #[test]
    fn small_folios_make_mapping_expensive() {
        // 2 MiB folios: 4 faults for 8 MiB; 4 KiB folios with fault-around: 128.
        assert!(mapping_is_cheap(8 << 20, 4));
        assert!(mapping_is_cheap(8 << 20, 0));
        assert!(!mapping_is_cheap(8 << 20, 128));
        assert!(!mapping_is_cheap(3, 1));
        // A chunk mixing 2 MiB folios with small ones (a file written 1 MiB at a time,
        // ~570 KiB per fault measured) maps faster than it reads; 64 KiB per fault
        // (fault-around over small folios) does not.
        assert!(mapping_is_cheap(8 << 20, 14));
        assert!(!mapping_is_cheap(8 << 20, 64));
    }

    #[test]
    fn reprobing_backs_off_to_every_reprobe_th_chunk() {
        let mut wait = 0;
        let mut seen = vec![];
        for _ in 0..6 {
            wait = next_wait(false, wait);
            seen.push(wait);
        }
        assert_eq!(seen, [1, 2, 4, 8, 8, 8]);
        assert_eq!(next_wait(true, 8), 0);
    }

    #[test]
    fn cpu_share_premise_can_fail() {
        // Two threads for 1 s had 2 CPU-seconds: no note; 0.5 CPU-seconds: a note.
        assert_eq!(cpu_share_note(1 << 30, 1.0, 1.9, 2), None);
        let n = cpu_share_note(1 << 30, 1.0, 0.5, 2).expect("a starved run says so");
        assert!(n.contains("25%"), "{n}");
    }
}
