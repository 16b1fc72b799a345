//! The operating system, behind one small interface (like fio's `os/`): pin or hint a
//! thread to a CPU, which CPU am I on, allowed CPUs, uncached open and read, evicting a
//! file's pages, page residency, per-thread fault counters, children that die with the
//! parent, randomness, huge-page advice, a raw monotonic clock and sysctl facts.
//!
//! Experiments, the I/O toolkit, scratch and the peer call these and never name a Linux-
//! or macOS-only libc item. Where a system cannot do something the answer says so
//! (`Pinning::Unsupported`, `Support::Unsupported`) and the caller marks its premise.
//! Shared logic lives here; `linux.rs` and `macos.rs` hold only the system calls.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
use macos as imp;
pub(crate) mod net;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("osmeter supports Linux and macOS only");

/// Name of the system this build targets; the Windows command line's refusal names it
/// and is tested on Unix too.
#[cfg(test)]
pub(crate) const SYSTEM: &str = imp::SYSTEM;
/// Whether a datagram ICMP socket's echo replies keep the id sent (so it must be checked).
pub(crate) const ICMP_DGRAM_KEEPS_ID: bool = imp::ICMP_DGRAM_KEEPS_ID;

/// How firmly a thread can be held on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    /// The scheduler never runs the thread elsewhere (sched_setaffinity).
    Hard,
    /// A preference the scheduler may ignore.
    Hint { reason: String },
    /// No way to choose the CPU at all.
    Unsupported { reason: String },
}

impl Pinning {
    #[cfg(test)]
    pub(crate) fn is_hard(&self) -> bool {
        matches!(self, Pinning::Hard)
    }
    /// Why the thread may run elsewhere, when it may.
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            Pinning::Hard => None,
            Pinning::Hint { reason } | Pinning::Unsupported { reason } => Some(reason),
        }
    }
}

/// Whether an optional operation was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Support {
    #[cfg_attr(target_os = "macos", allow(dead_code))] // macOS can do none of them
    Done,
    Unsupported {
        reason: String,
    },
}

/// What pinning this system offers (what `pin_to_cpu` answers when it succeeds).
pub(crate) fn pin_support() -> Pinning {
    #[cfg(test)]
    if HINT_PINNING.with(|h| h.get()) {
        return Pinning::Hint {
            reason: "this system's pinning is a preference the scheduler may ignore".into(),
        };
    }
    imp::pin_support()
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread the system says its pinning is only a hint (as macOS's
    /// QoS classes are), so no placement premise can rest on it.
    pub(crate) static HINT_PINNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What answers clock_gettime without entering the kernel here, for text: the vDSO that
/// Linux maps into every process, or the commpage macOS's libSystem reads the clock from.
pub(crate) fn user_clock() -> &'static str {
    #[cfg(test)]
    if AS_MACOS.with(|m| m.get()) {
        return "the commpage";
    }
    if cfg!(target_os = "macos") {
        "the commpage"
    } else {
        "the vDSO"
    }
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread the system answers `user_clock` as macOS does.
    pub(crate) static AS_MACOS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Why this process must not measure, when it runs translated (Rosetta 2 runs an x86_64
/// build on Apple silicon: the core-clock chains and every cycle figure would time
/// translated code). None where it runs natively.
pub fn translated() -> Option<&'static str> {
    imp::translated().then_some(
        "osmeter runs under Rosetta 2 (sysctl.proc_translated = 1): its timings would be of \
         translated code; run the aarch64-apple-darwin build",
    )
}

/// Holds the calling thread on `cpu` as firmly as the system allows.
pub fn pin_to_cpu(cpu: usize) -> io::Result<Pinning> {
    imp::pin_to_cpu(cpu)
}

/// Lets the calling thread run on any of `cpus` again (no-op where pinning is unsupported).
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    imp::set_affinity(cpus)
}

/// CPUs this thread may run on.
pub fn allowed_cpus() -> Vec<usize> {
    imp::allowed_cpus().unwrap_or_else(|| (0..online_cpus()).collect())
}

/// The CPU the calling thread runs on now, where the system tells.
pub(crate) fn current_cpu() -> Option<usize> {
    let c = current_cpu_raw();
    (c >= 0).then_some(c as usize)
}

/// As `current_cpu`, -1 when unknown. Async-signal-safe (for forked children).
pub(crate) fn current_cpu_raw() -> i32 {
    #[cfg(test)]
    if CPU_UNKNOWN.with(|c| c.get()) {
        return -1;
    }
    imp::current_cpu_raw()
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread (and children forked from it) the system does not say
    /// which CPU a thread runs on, as on macOS.
    pub(crate) static CPU_UNKNOWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The NUMA node of the page at `addr` (touched memory only), where the system tells.
pub(crate) fn node_of_page(addr: *const u8) -> Option<usize> {
    imp::node_of_page(addr)
}

/// A CPU set prepared before a fork, so the child can pin itself without allocating.
pub(crate) struct CpuMask(imp::Mask);

impl CpuMask {
    pub(crate) fn single(cpu: usize) -> io::Result<CpuMask> {
        imp::mask_single(cpu).map(CpuMask)
    }
    /// Pins the calling thread to the mask; true when done (false where unsupported).
    /// Async-signal-safe: a forked child may call it.
    pub(crate) fn pin_self(&self) -> bool {
        imp::pin_self(&self.0)
    }
}

pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf with a valid name has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no memory effects.
    unsafe { libc::geteuid() == 0 }
}

/// A monotonic clock in ns that no time adjustment slews (CLOCK_MONOTONIC_RAW on Linux,
/// mach_absolute_time scaled by mach_timebase_info on macOS).
pub(crate) fn raw_clock_ns() -> u64 {
    imp::raw_clock_ns()
}

/// CPU time the calling thread has used, in ns (CLOCK_THREAD_CPUTIME_ID, POSIX).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// True when the last failed call was interrupted by a signal. Async-signal-safe.
pub(crate) fn interrupted() -> bool {
    io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
}

/// A pipe (read end, write end), both close-on-exec.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = imp::pipe_cloexec()?;
    // SAFETY: both descriptors were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(r), OwnedFd::from_raw_fd(w)) })
}

/// socket(2) with close-on-exec set.
pub(crate) fn socket(domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
    let fd = imp::socket_cloexec(domain, ty, protocol)?;
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` with `opts` so that reads bypass the page cache (O_DIRECT on Linux,
/// F_NOCACHE on macOS). Fails where the file system refuses.
pub(crate) fn open_uncached(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    imp::open_uncached(opts, path)
}

/// Another descriptor for an open file, possibly with other flags, by path (also works
/// when the file is already unlinked).
///
/// On macOS opening /dev/fd/N is dup(): the new descriptor shares the open file
/// description, and so F_NOCACHE and F_RDAHEAD, with `file` and every other reopen of it.
/// The cache mode asked for here is therefore set explicitly (a cached reopen clears
/// F_NOCACHE) and holds for all of them until the next reopen: callers that alternate
/// cached and uncached reads reopen before each pass. On Linux /proc/self/fd/N opens a new
/// description.
pub fn reopen(file: &File, uncached: bool, write: bool) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    #[cfg(all(test, target_os = "linux"))]
    if DARWIN_FILES.with(|d| d.get()) {
        return imp::reopen_sharing(file, uncached);
    }
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    let path = imp::fd_path(file.as_raw_fd());
    if uncached {
        open_uncached(&o, Path::new(&path))
    } else {
        let f = o.open(path)?;
        imp::set_cached(&f)?;
        Ok(f)
    }
}

#[cfg(test)]
thread_local! {
    /// Test seam (review N1, N3): on this thread files behave as on macOS. A reopen shares
    /// the open file description and its status flags with the original (on Linux dup() +
    /// F_SETFL ±O_DIRECT, as /dev/fd and F_NOCACHE do there), and uncached reads do not
    /// bypass pages already cached (`uncached_bypasses_cache` is false).
    pub(crate) static DARWIN_FILES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether an uncached read misses the page cache even for pages already in it: Linux's
/// O_DIRECT does; macOS's F_NOCACHE serves them from the cache, so there only a verified
/// eviction makes the reads uncached.
pub(crate) fn uncached_bypasses_cache() -> bool {
    #[cfg(test)]
    if DARWIN_FILES.with(|d| d.get()) {
        return false;
    }
    imp::UNCACHED_BYPASSES_CACHE
}

/// Whether reads through `file` bypass the page cache (its description's O_DIRECT).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn reads_uncached(file: &File) -> bool {
    imp::reads_uncached(file)
}

/// Read-ahead advice for a whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Normal,
    Random,
    Sequential,
}

/// Advises the kernel how a file will be read (posix_fadvise on Linux, F_RDAHEAD on macOS).
pub(crate) fn advise(file: &File, access: Access) {
    imp::advise(file, access)
}

/// Asks the system to drop a file's clean pages from the page cache. Callers verify with
/// `residency`; `Unsupported` means the next read cannot be called uncached.
pub(crate) fn evict_file(file: &File) -> io::Result<Support> {
    imp::evict_file(file)
}

/// The windows (offset, length) a file of `len` bytes is mapped in, one at a time, to
/// evict it by mapping (macOS: mmap MAP_SHARED + msync MS_INVALIDATE, as vmtouch does):
/// at most `window` bytes each (bounded address space), page-aligned offsets, covering
/// the file exactly once. Shared so Linux tests it.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn eviction_windows(len: u64, window: u64, page: u64) -> Vec<(u64, u64)> {
    let window = (window / page).max(1) * page;
    (0..len.div_ceil(window))
        .map(|i| (i * window, window.min(len - i * window)))
        .collect()
}

/// Drops the whole page cache (root only, and only when the user asked for it).
/// Returns how it was done.
pub(crate) fn drop_all_caches() -> io::Result<&'static str> {
    imp::drop_all_caches()
}

/// Page residency of a mapping: one byte per page in `vec`, bit 0 set when resident.
///
/// # Safety
/// `addr..addr+len` must be a mapping of this process; `vec` must hold a byte per page.
pub(crate) unsafe fn mincore(
    addr: *mut libc::c_void,
    len: usize,
    vec: &mut [u8],
) -> io::Result<()> {
    imp::mincore(addr, len, vec)
}

/// Why `mincore` says nothing about `file`'s cache for this process, when it does not
/// (Linux 5.2+: files the caller neither owns nor may write read as all resident).
pub(crate) fn residency_hidden(file: &File) -> Option<String> {
    imp::residency_hidden(file)
}

/// Whether the byte at `offset` of `file` is in the page cache, asked with a 1-byte read
/// that may not wait for I/O (preadv2 RWF_NOWAIT on Linux): unlike mincore it answers for
/// every readable file. A miss starts readahead there. Err: not supported here.
pub(crate) fn cached_nowait(file: &File, offset: u64) -> io::Result<bool> {
    imp::cached_nowait(file, offset)
}

/// The C library this process runs on, asked at run time (the installed one, not the one
/// built against): "glibc 2.36"; "musl", which has no version call; "libSystem" on macOS.
pub(crate) fn c_library() -> String {
    imp::c_library()
}

/// The 1-minute load average (runnable, and on Linux uninterruptible, tasks); None when
/// the system does not say.
pub(crate) fn load_average() -> Option<f64> {
    let mut l = [0f64; 1];
    // SAFETY: getloadavg writes at most 1 value into the 1-element array.
    (unsafe { libc::getloadavg(l.as_mut_ptr(), 1) } == 1).then_some(l[0])
}

/// Whether a socket (a stream or a listener) is readable (data, a pending connection or a
/// hang-up) within `timeout`; false on timeout or error.
pub(crate) fn socket_readable(s: &impl std::os::fd::AsRawFd, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfd is one valid pollfd on the stack for the duration of the call.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    r > 0
}

/// Fault and involuntary-switch counters of the calling thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThreadUsage {
    pub minor_faults: u64,
    pub major_faults: u64,
    /// This thread's involuntary switches (Linux RUSAGE_THREAD); on macOS the times it
    /// was off its CPU for more than `OFF_CPU_PREEMPTED_NS` (see `OffCpuCounter`).
    pub involuntary_switches: u64,
    /// false where only whole-process fault counters exist (macOS): other threads count too.
    pub per_thread: bool,
}

pub(crate) fn thread_usage() -> io::Result<ThreadUsage> {
    imp::thread_usage()
}

/// Off-CPU time between two reads above which a thread counts as preempted where the
/// system has no per-thread involuntary-switch counter (macOS: XNU's ru_nivcsw counts
/// every Mach wait of every thread). A scheduler preemption lasts far longer; clock and
/// CPU-time granularity (1 us on XNU) far less.
pub const OFF_CPU_PREEMPTED_NS: u64 = 20_000;

/// Counts preemptions of one thread from (wall, thread CPU time) readings: each reading
/// after which the thread had been off its CPU for more than `OFF_CPU_PREEMPTED_NS`
/// since the previous one adds one. Wall minus CPU time only grows while the thread
/// waits, so a computing thread's count rises exactly when something took its CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpuCounter {
    last_off_ns: Option<u64>,
    count: u64,
}

impl OffCpuCounter {
    pub fn update(&mut self, wall_ns: u64, cpu_ns: u64) -> u64 {
        let off = wall_ns.saturating_sub(cpu_ns);
        if let Some(last) = self.last_off_ns {
            if off.saturating_sub(last) > OFF_CPU_PREEMPTED_NS {
                self.count += 1;
            }
        }
        self.last_off_ns = Some(off);
        self.count
    }
}

/// In a forked child: end when the parent dies (PR_SET_PDEATHSIG on Linux). Elsewhere the
/// child must watch a pipe from the parent for end of file; the error says so.
/// Async-signal-safe: nothing is allocated, the reason is static.
pub fn die_with_parent() -> Result<(), &'static str> {
    imp::die_with_parent()
}

/// Waits for our child `pid` (killing it first when `kill`), retrying on EINTR; returns its
/// wait status. Plain POSIX, here so every experiment that forks reaps the same way.
pub(crate) fn reap(pid: libc::pid_t, kill: bool) -> io::Result<libc::c_int> {
    if kill {
        // SAFETY: pid is our own unreaped child, so the signal cannot reach anyone else.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut status = 0;
    loop {
        // SAFETY: status is a valid int to write to.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Installs `handler` for signal `sig`, or ignores `sig` when None; SA_RESTART, so a
/// read the handler interrupts resumes. Plain POSIX; async-signal-safe (forked children).
pub(crate) fn catch_signal(sig: i32, handler: Option<extern "C" fn(libc::c_int)>) -> bool {
    // SAFETY: an all-zero sigaction is a valid value; its fields are set below.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler.map_or(libc::SIG_IGN, |h| h as libc::sighandler_t);
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: sa is initialised; sigemptyset and sigaction only read and write it.
    unsafe {
        libc::sigemptyset(&mut sa.sa_mask) == 0
            && libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0
    }
}

/// Sends `sig` to process `pid` (kill(2); 0 checks the target only). Async-signal-safe.
#[inline(always)]
pub(crate) fn send_signal(pid: i64, sig: i32) -> bool {
    // SAFETY: kill takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// A signal blocked in a single-threaded process and waited for: `wait` suspends with
/// the mask as it was before, `sig` unblocked, so a signal sent before the wait is not
/// lost (it stays pending). Async-signal-safe.
pub(crate) struct SignalWait(libc::sigset_t);

impl SignalWait {
    /// Blocks `sig` (sigprocmask: the process has one thread).
    pub(crate) fn block(sig: i32) -> Option<SignalWait> {
        // SAFETY: zeroed sigsets are valid storage; the calls below only fill them.
        let (mut set, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
        // SAFETY: set and old are valid sigsets of this frame.
        let ok = unsafe {
            libc::sigemptyset(&mut set) == 0
                && libc::sigaddset(&mut set, sig) == 0
                && libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old) == 0
                && libc::sigdelset(&mut old, sig) == 0
        };
        ok.then_some(SignalWait(old))
    }

    /// Returns once a handler for a signal unblocked in the wait mask has run.
    #[inline(always)]
    pub(crate) fn wait(&self) {
        // SAFETY: self.0 is a valid sigset; sigsuspend returns after a handler ran.
        unsafe { libc::sigsuspend(&self.0) };
    }
}

/// Fills `buf` from the system's random source.
pub(crate) fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    imp::random_bytes(buf)
}

/// Transparent huge pages for an anonymous mapping: on, off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HugePages {
    Base,
    Huge,
}

/// Huge-page advice for a mapping.
///
/// # Safety
/// `addr..addr+len` must be a mapping of this process.
pub(crate) unsafe fn advise_huge_pages(addr: *mut u8, len: usize, pages: HugePages) -> Support {
    imp::advise_huge_pages(addr, len, pages)
}

/// Drops the page-table entries of part of a shared file mapping now (the page cache
/// keeps the pages; touching the range again faults them back). Linux: MADV_DONTNEED.
/// macOS: Unsupported (there MADV_DONTNEED deactivates the cached pages instead, pushing
/// the file towards eviction); the entries go with the final munmap.
///
/// # Safety
/// `addr..addr+len` must lie in a shared file mapping of this process that nothing
/// borrows any more.
pub(crate) unsafe fn drop_mapped_range(addr: *mut u8, len: usize) -> Support {
    imp::drop_mapped_range(addr, len)
}

/// getppid and getpid through the kernel every time (no library caching), for the
/// system-call experiment.
#[inline(always)]
pub(crate) fn raw_getppid() -> i64 {
    imp::raw_getppid()
}

#[inline(always)]
pub(crate) fn raw_getpid() -> i64 {
    imp::raw_getpid()
}

/// Major and minor number of a device id (st_dev).
pub(crate) fn dev_major_minor(dev: u64) -> (u64, u64) {
    imp::dev_major_minor(dev)
}

/// File system of a path: Linux gives statfs's magic number, macOS its type name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FsKind {
    #[cfg_attr(target_os = "macos", allow(dead_code))] // statfs gives a number on Linux only
    Magic(u64),
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))] // statfs names it on macOS only
    Name(String),
}

pub(crate) fn fs_kind(path: &Path) -> io::Result<FsKind> {
    imp::fs_kind(path)
}

/// A sysctl value by name as `sysctl(8)` prints it (decimal integers, text, a loadavg
/// struct as `{ 1.20 1.31 1.45 }`), decoded by the OID's declared type (macOS machine
/// facts); None elsewhere, when absent, or of a type osmeter does not read.
pub fn sysctl_text(name: &str) -> Option<String> {
    imp::sysctl_text(name)
}

/// XNU's CTLTYPE_* (the low 4 bits of an OID's kind, sys/sysctl.h).
pub const CTLTYPE_INT: u32 = 2;
pub const CTLTYPE_STRING: u32 = 3;
pub const CTLTYPE_QUAD: u32 = 4;
pub const CTLTYPE_OPAQUE: u32 = 5;

/// Decodes a sysctl value from the raw bytes the kernel returned and the OID's kind and
/// format string (what `{0, 4, mib...}` answers: "I", "IU", "Q", "QU", "A", "S,loadavg").
/// Integers are native-endian, 4 bytes for CTLTYPE_INT and 8 for CTLTYPE_QUAD, possibly
/// several (hw.cacheconfig), printed space-separated. Shared so Linux tests it.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn decode_sysctl(raw: &[u8], kind: u32, fmt: &str) -> Option<String> {
    let unsigned = fmt.contains('U');
    let ints = |width: usize| -> Option<String> {
        if raw.is_empty() || raw.len() % width != 0 {
            return None;
        }
        let v: Vec<String> = raw
            .chunks_exact(width)
            .map(|c| match (width, unsigned) {
                (4, false) => i32::from_ne_bytes(c.try_into().unwrap_or_default()).to_string(),
                (4, true) => u32::from_ne_bytes(c.try_into().unwrap_or_default()).to_string(),
                (_, false) => i64::from_ne_bytes(c.try_into().unwrap_or_default()).to_string(),
                (_, true) => u64::from_ne_bytes(c.try_into().unwrap_or_default()).to_string(),
            })
            .collect();
        Some(v.join(" "))
    };
    match kind & 0xf {
        CTLTYPE_STRING => {
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            let s = String::from_utf8_lossy(&raw[..end]).trim().to_string();
            (!s.is_empty()).then_some(s)
        }
        CTLTYPE_INT => ints(4),
        CTLTYPE_QUAD => ints(8),
        CTLTYPE_OPAQUE if fmt == "S,loadavg" => {
            // struct loadavg { fixpt_t ldavg[3]; long fscale; }: 3 u32, padding, i64.
            let fscale = i64::from_ne_bytes(raw.get(16..24)?.try_into().ok()?);
            if fscale <= 0 {
                return None;
            }
            let l: Vec<String> = raw[..12]
                .chunks_exact(4)
                .map(|c| {
                    let v = u32::from_ne_bytes(c.try_into().unwrap_or_default());
                    format!("{:.2}", v as f64 / fscale as f64)
                })
                .collect();
            Some(format!("{{ {} }}", l.join(" ")))
        }
        _ => None,
    }
}

/// Premise text for a measurement that needs a thread held on one CPU: None when the
/// pinning is hard, else why the figure is not a same-CPU figure.
pub(crate) fn pinning_premise_failure(p: &Pinning) -> Option<String> {
    p.reason()
        .map(|r| format!("the tasks were not pinned ({r}); the figure is an unpinned measurement"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seam of review N1: a reader reopened before another reopen asks for uncached
    /// reads shares that flag (fs.cache-size's old sequence), until a cached reopen clears
    /// it for all; on Linux proper each reopen is a description of its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn darwin_reopens_share_the_uncached_flag() {
        let path = std::env::temp_dir().join(format!("osmeter-n1-{}", std::process::id()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        for darwin in [false, true] {
            DARWIN_FILES.with(|d| d.set(darwin));
            let reader = reopen(&f, false, false).unwrap();
            let Ok(writer) = reopen(&f, true, true) else {
                return crate::experiments::testing::skip(
                    "darwin_reopens_share_the_uncached_flag",
                    "the temporary directory refuses O_DIRECT",
                );
            };
            drop(writer);
            assert_eq!(reads_uncached(&reader), darwin, "darwin {darwin}");
            let _ = reopen(&f, false, false).unwrap();
            assert!(!reads_uncached(&reader));
        }
        DARWIN_FILES.with(|d| d.set(false));
        assert!(uncached_bypasses_cache());
    }

    #[test]
    fn pipe_carries_a_byte_and_is_cloexec() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let (r, w) = pipe().unwrap();
        // SAFETY: fcntl F_GETFD on open descriptors has no memory effects.
        for fd in [r.as_raw_fd(), w.as_raw_fd()] {
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            assert!(fl & libc::FD_CLOEXEC != 0);
        }
        let (mut r, mut w) = (File::from(r), File::from(w));
        w.write_all(b"x").unwrap();
        let mut b = [0u8];
        r.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
    }

    #[test]
    fn randomness_is_not_constant() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        random_bytes(&mut a).unwrap();
        random_bytes(&mut b).unwrap();
        assert_ne!(a, b);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_just_written_file_reads_as_cached_through_the_raw_preadv2() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        // Written through the cache, so present; Err only where RWF_NOWAIT is unsupported.
        match cached_nowait(&f, 4096) {
            Ok(cached) => assert!(cached),
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL)
                ),
                "{e}"
            ),
        }
    }

    #[test]
    fn raw_clock_advances() {
        let t0 = raw_clock_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let d = raw_clock_ns() - t0;
        assert!((2_000_000..2_000_000_000).contains(&d), "{d}");
    }

    #[test]
    fn allowed_cpus_include_the_current_one() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        if pin_support().is_hard() {
            let c = current_cpu().expect("this system reports the current CPU");
            assert!(allowed.contains(&c), "{c} not in {allowed:?}");
        }
    }

    #[test]
    fn pinning_premise_fails_unless_hard() {
        assert_eq!(pinning_premise_failure(&Pinning::Hard), None);
        let u = Pinning::Unsupported {
            reason: "no pinning here".into(),
        };
        assert!(pinning_premise_failure(&u)
            .unwrap()
            .contains("no pinning here"));
        let h = Pinning::Hint {
            reason: "a hint".into(),
        };
        assert!(pinning_premise_failure(&h).is_some());
    }

    #[test]
    fn thread_usage_counts_new_faults() {
        let before = thread_usage().unwrap();
        let v = vec![1u8; 8 << 20];
        std::hint::black_box(&v);
        let after = thread_usage().unwrap();
        assert!(after.minor_faults > before.minor_faults);
    }

    #[test]
    fn sysctl_values_decode_as_xnu_returns_them() {
        // hw.logicalcpu: CTLTYPE_INT "I", 4 bytes. 56 must not read as '8' (byte 0x38).
        let d = |raw: &[u8], k, f| decode_sysctl(raw, k, f);
        assert_eq!(d(&56i32.to_ne_bytes(), CTLTYPE_INT, "I"), Some("56".into()));
        assert_eq!(d(&10i32.to_ne_bytes(), CTLTYPE_INT, "I"), Some("10".into()));
        // hw.perflevel0.l2cachesize is an INT; 65536 has NUL bytes a string read cut short.
        assert_eq!(
            d(&65536i32.to_ne_bytes(), CTLTYPE_INT, "I"),
            Some("65536".into())
        );
        // hw.cachelinesize, hw.l2cachesize, hw.memsize: CTLTYPE_QUAD "Q", 8 bytes.
        assert_eq!(
            d(&128i64.to_ne_bytes(), CTLTYPE_QUAD, "Q"),
            Some("128".into())
        );
        assert_eq!(
            d(&(12u64 << 20).to_ne_bytes(), CTLTYPE_QUAD, "Q"),
            Some("12582912".into())
        );
        assert_eq!(
            d(&(1u64 << 63).to_ne_bytes(), CTLTYPE_QUAD, "QU"),
            Some("9223372036854775808".into())
        );
        // hw.cacheconfig: an array of quads, printed space-separated as sysctl(8) does.
        let mut cc = Vec::new();
        for v in [10u64, 1, 2, 0] {
            cc.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(d(&cc, CTLTYPE_QUAD, "Q"), Some("10 1 2 0".into()));
        // machdep.cpu.brand_string: CTLTYPE_STRING "A", NUL-terminated.
        assert_eq!(
            d(b"Apple M1 Pro\0", CTLTYPE_STRING, "A"),
            Some("Apple M1 Pro".into())
        );
        assert_eq!(d(b"\0", CTLTYPE_STRING, "A"), None);
        // A size that fits neither width, an unknown kind, a node: nothing.
        assert_eq!(d(&[1, 2, 3], CTLTYPE_INT, "I"), None);
        assert_eq!(d(&[1, 2, 3, 4, 5], CTLTYPE_QUAD, "Q"), None);
        assert_eq!(d(&[], CTLTYPE_INT, "I"), None);
        assert_eq!(d(&[1, 0, 0, 0], 1, "N"), None);
        // vm.loadavg: struct loadavg, fscale 2048.
        let mut la = Vec::new();
        for v in [2048u32 * 3 / 2, 1024, 2048] {
            la.extend_from_slice(&v.to_ne_bytes());
        }
        la.extend_from_slice(&[0; 4]);
        la.extend_from_slice(&2048i64.to_ne_bytes());
        assert_eq!(
            d(&la, CTLTYPE_OPAQUE, "S,loadavg"),
            Some("{ 1.50 0.50 1.00 }".into())
        );
        assert_eq!(d(&la[..12], CTLTYPE_OPAQUE, "S,loadavg"), None);
        assert_eq!(d(&la, CTLTYPE_OPAQUE, "S,xsw_usage"), None);
    }

    #[test]
    fn eviction_windows_cover_the_file_once() {
        assert!(eviction_windows(0, 64 << 20, 4096).is_empty());
        assert_eq!(eviction_windows(1, 64 << 20, 4096), [(0, 1)]);
        let w = eviction_windows((150 << 20) + 5, 64 << 20, 16384);
        assert_eq!(
            w,
            [
                (0, 64 << 20),
                (64 << 20, 64 << 20),
                (128 << 20, (22 << 20) + 5)
            ]
        );
        // Offsets stay page-aligned when the window is not a page multiple.
        let w = eviction_windows(100_000, 10_000, 4096);
        assert!(w.iter().all(|(o, _)| o % 4096 == 0));
        assert_eq!(w.iter().map(|(_, l)| l).sum::<u64>(), 100_000);
        assert!(w.windows(2).all(|p| p[0].0 + p[0].1 == p[1].0));
    }

    #[test]
    fn off_cpu_time_counts_preemptions() {
        let mut c = OffCpuCounter::default();
        // Computing: wall and CPU time advance together (1 us of jitter).
        assert_eq!(c.update(1_000_000, 400_000), 0);
        assert_eq!(c.update(1_010_000, 409_000), 0);
        // A 5 ms preemption between two reads.
        assert_eq!(c.update(1_020_000 + 5_000_000, 419_000), 1);
        // Computing again: the count holds.
        assert_eq!(c.update(6_030_000, 429_000), 1);
        // Many small gaps never add up to a preemption: each is compared with the last.
        for i in 1..100u64 {
            assert_eq!(c.update(6_030_000 + i * 10_000, 429_000 + i * 9_000), 1);
        }
        // Live, on a computing thread: no preemption counted over a short busy loop
        // unless the machine really took the CPU (then wall - CPU grew by > 20 us).
        let mut live = OffCpuCounter::default();
        let read = || (raw_clock_ns(), thread_cpu_ns());
        let (w0, c0) = read();
        live.update(w0, c0);
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        let (w1, c1) = read();
        let n = live.update(w1, c1);
        let off = (w1 - w0).saturating_sub(c1 - c0);
        assert_eq!(n, u64::from(off > OFF_CPU_PREEMPTED_NS), "{off} ns off CPU");
    }
}
