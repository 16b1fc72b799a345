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

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("osmeter supports Linux and macOS only");

/// Name of the system this build targets; the Windows command line's refusal names it
/// and is tested on Unix too.
#[cfg(test)]
pub(crate) const SYSTEM: &str = imp::SYSTEM;

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
    imp::pin_support()
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
    imp::current_cpu_raw()
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
pub(crate) fn reopen(file: &File, uncached: bool, write: bool) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    let path = imp::fd_path(file.as_raw_fd());
    if uncached {
        open_uncached(&o, Path::new(&path))
    } else {
        o.open(path)
    }
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
    pub involuntary_switches: u64,
    /// false where only whole-process counters exist (macOS): other threads count too.
    pub per_thread: bool,
}

pub(crate) fn thread_usage() -> io::Result<ThreadUsage> {
    imp::thread_usage()
}

/// In a forked child: end when the parent dies (PR_SET_PDEATHSIG on Linux). Elsewhere the
/// child must watch a pipe from the parent for end of file; `Unsupported` says so.
/// Async-signal-safe.
pub(crate) fn die_with_parent() -> Support {
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

/// A sysctl string by name (macOS machine facts); None elsewhere or when absent.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))] // only macOS code reads sysctl
pub(crate) fn sysctl_string(name: &str) -> Option<String> {
    imp::sysctl_string(name)
}

/// A sysctl integer by name (macOS machine facts); None elsewhere or when absent.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))] // only macOS code reads sysctl
pub(crate) fn sysctl_u64(name: &str) -> Option<u64> {
    imp::sysctl_u64(name)
}

/// A sysctl string value: bytes up to the first NUL, trimmed. Shared so Linux tests it.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn sysctl_bytes_to_string(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = String::from_utf8_lossy(&b[..end]).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// A sysctl integer: 4 or 8 bytes in native order (hw.memsize is 8, most hw.* are 4).
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn sysctl_bytes_to_u64(b: &[u8]) -> Option<u64> {
    match b.len() {
        4 => Some(u32::from_ne_bytes(b.try_into().ok()?) as u64),
        8 => Some(u64::from_ne_bytes(b.try_into().ok()?)),
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
    fn sysctl_values_decode() {
        assert_eq!(
            sysctl_bytes_to_string(b"Apple M1\0"),
            Some("Apple M1".into())
        );
        assert_eq!(sysctl_bytes_to_string(b"\0"), None);
        assert_eq!(sysctl_bytes_to_u64(&64u32.to_ne_bytes()), Some(64));
        assert_eq!(
            sysctl_bytes_to_u64(&(24u64 << 30).to_ne_bytes()),
            Some(24 << 30)
        );
        assert_eq!(sysctl_bytes_to_u64(&[1, 2, 3]), None);
    }
}
