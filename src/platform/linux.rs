//! Linux system calls for the platform layer.

use super::{Access, FsKind, HugePages, Pinning, Support, ThreadUsage};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

#[cfg(test)]
pub const SYSTEM: &str = "Linux";
/// Linux rewrites the echo id of datagram ICMP sockets (to the socket's port).
pub const ICMP_DGRAM_KEEPS_ID: bool = false;
/// O_DIRECT reads go to the device even for pages already cached.
pub const UNCACHED_BYPASSES_CACHE: bool = true;

pub type Mask = libc::cpu_set_t;

pub fn pin_support() -> Pinning {
    Pinning::Hard
}

pub fn mask_single(cpu: usize) -> io::Result<Mask> {
    mask_of(&[cpu])
}

fn mask_of(cpus: &[usize]) -> io::Result<Mask> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {c} out of range"),
            ));
        }
        // SAFETY: c is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    Ok(set)
}

pub fn pin_self(m: &Mask) -> bool {
    // SAFETY: m is a valid cpu_set_t; sched_setaffinity reads size_of::<cpu_set_t>() bytes
    // and is a plain system call, so async-signal-safe.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), m) == 0 }
}

pub fn pin_to_cpu(cpu: usize) -> io::Result<Pinning> {
    if pin_self(&mask_single(cpu)?) {
        Ok(Pinning::Hard)
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    let keep: Vec<usize> = cpus
        .iter()
        .copied()
        .filter(|&c| c < libc::CPU_SETSIZE as usize)
        .collect();
    if pin_self(&mask_of(&keep)?) {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

pub fn current_cpu_raw() -> i32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    unsafe { libc::sched_getcpu() }
}

/// The NUMA node holding the page at `addr` (get_mempolicy with MPOL_F_NODE |
/// MPOL_F_ADDR); None when the kernel has no NUMA support or the page is not mapped.
pub fn node_of_page(addr: *const u8) -> Option<usize> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node` (a valid local); a null nodemask
    // with maxnode 0 asks for no mask; `addr` is only looked up, never dereferenced.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (r == 0 && node >= 0).then_some(node as usize)
}

pub fn raw_clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_RAW, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn pipe_cloexec() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

pub fn socket_cloexec(domain: i32, ty: i32, protocol: i32) -> io::Result<RawFd> {
    // SAFETY: socket has no memory arguments.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

pub fn open_uncached(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    opts.clone().custom_flags(libc::O_DIRECT).open(path)
}

/// Test seam: a reopen as /dev/fd makes on macOS. dup() shares the open file description,
/// and F_SETFL acts on the description, so the O_DIRECT set or cleared here holds for every
/// descriptor sharing it, as F_NOCACHE does there.
#[cfg(test)]
pub fn reopen_sharing(file: &File, uncached: bool) -> io::Result<File> {
    let f = file.try_clone()?;
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    let flags = match uncached {
        true => flags | libc::O_DIRECT,
        false => flags & !libc::O_DIRECT,
    };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// Whether reads through `file` bypass the page cache (O_DIRECT on its description).
#[cfg(test)]
pub fn reads_uncached(file: &File) -> bool {
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) & libc::O_DIRECT != 0 }
}

pub fn fd_path(fd: RawFd) -> String {
    format!("/proc/self/fd/{fd}")
}

/// A descriptor opened without O_DIRECT reads through the cache: nothing to clear.
pub fn set_cached(_file: &File) -> io::Result<()> {
    Ok(())
}

pub fn advise(file: &File, access: Access) {
    let a = match access {
        Access::Normal => libc::POSIX_FADV_NORMAL,
        Access::Random => libc::POSIX_FADV_RANDOM,
        Access::Sequential => libc::POSIX_FADV_SEQUENTIAL,
    };
    // SAFETY: advisory call on an open descriptor; it has no memory effects.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, a) };
}

pub fn evict_file(file: &File) -> io::Result<Support> {
    // SAFETY: advisory call on an open descriptor; offset 0 and len 0 mean the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Support::Done)
}

pub fn drop_all_caches() -> io::Result<&'static str> {
    // SAFETY: sync has no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "1")?;
    Ok("drop_caches")
}

pub fn mincore(addr: *mut libc::c_void, len: usize, vec: &mut [u8]) -> io::Result<()> {
    // SAFETY: the caller guarantees the mapping; vec has one byte per page of it.
    if unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn thread_usage() -> io::Result<ThreadUsage> {
    // SAFETY: a zeroed rusage is a valid output buffer for getrusage.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
            return Err(io::Error::last_os_error());
        }
        ru
    };
    Ok(ThreadUsage {
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        involuntary_switches: ru.ru_nivcsw as u64,
        per_thread: true,
    })
}

pub fn die_with_parent() -> Result<(), &'static str> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and has no memory effects;
    // it is async-signal-safe, so it may be called in a forked child.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } == 0 {
        Ok(())
    } else {
        Err("prctl(PR_SET_PDEATHSIG) failed")
    }
}

pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // The raw system call, not glibc's getrandom() (2.25+), so the binary loads on older
        // C libraries; a kernel older than 3.17 answers ENOSYS and /dev/urandom serves.
        // SAFETY: the destination is the unfilled rest of buf, and the kernel writes at most
        // its length there.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getrandom,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                0 as libc::c_uint,
            )
        };
        if n < 0 {
            if super::interrupted() {
                continue;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOSYS) {
                use std::io::Read;
                return File::open("/dev/urandom")?.read_exact(&mut buf[got..]);
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(())
}

pub fn advise_huge_pages(addr: *mut u8, len: usize, pages: HugePages) -> Support {
    let advice = match pages {
        HugePages::Base => libc::MADV_NOHUGEPAGE,
        HugePages::Huge => libc::MADV_HUGEPAGE,
    };
    // SAFETY: advisory call on a mapping the caller owns.
    if unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) } == 0 {
        Support::Done
    } else {
        Support::Unsupported {
            reason: format!("madvise: {}", io::Error::last_os_error()),
        }
    }
}

pub fn drop_mapped_range(addr: *mut u8, len: usize) -> Support {
    // SAFETY: the caller guarantees a shared file mapping nothing borrows; dropping its
    // entries only makes later accesses fault the cached pages in again.
    if unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) } == 0 {
        Support::Done
    } else {
        Support::Unsupported {
            reason: format!("madvise(MADV_DONTNEED): {}", io::Error::last_os_error()),
        }
    }
}

#[inline(always)]
pub fn raw_getppid() -> i64 {
    // SAFETY: getppid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getppid) as i64 }
}

#[inline(always)]
pub fn raw_getpid() -> i64 {
    // SAFETY: getpid takes no arguments and cannot fail; the raw call bypasses any caching.
    unsafe { libc::syscall(libc::SYS_getpid) as i64 }
}

pub fn dev_major_minor(dev: u64) -> (u64, u64) {
    (libc::major(dev) as u64, libc::minor(dev) as u64)
}

pub fn fs_kind(path: &Path) -> io::Result<FsKind> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: c is a valid NUL-terminated path; st is a zeroed plain-data struct statfs fills.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The field's type differs between targets.
        #[allow(clippy::unnecessary_cast)]
        Ok(FsKind::Magic(st.f_type as u64))
    }
}

/// Rosetta is a macOS matter.
pub fn translated() -> bool {
    false
}

/// Linux has no sysctl machine facts (they come from /proc and /sys).
pub fn sysctl_text(_name: &str) -> Option<String> {
    None
}

/// Since Linux 5.2 mincore reports every page of a file mapping resident unless the
/// caller owns the file, has CAP_FOWNER (root taken to have it) or may write it.
pub fn residency_hidden(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let owner = file.metadata().ok()?.uid();
    // SAFETY: geteuid has no preconditions and touches no memory.
    let me = unsafe { libc::geteuid() };
    if owner == me || me == 0 {
        return None;
    }
    // Write access with the effective ids, as the kernel checks it (a read-only mount
    // refuses too), on the descriptor's own path.
    let p = std::ffi::CString::new(fd_path(file.as_raw_fd())).ok()?;
    // SAFETY: p is a NUL-terminated path; faccessat only reads it.
    let writable =
        unsafe { libc::faccessat(libc::AT_FDCWD, p.as_ptr(), libc::W_OK, libc::AT_EACCESS) } == 0;
    (!writable).then(|| {
        format!(
            "mincore cannot see the page cache of a file this user (uid {me}) neither owns \
             (owner uid {owner}) nor may write: Linux 5.2+ reports every page of it resident"
        )
    })
}

pub fn cached_nowait(file: &File, offset: u64) -> io::Result<bool> {
    let mut byte = 0u8;
    let iov = libc::iovec {
        iov_base: &mut byte as *mut u8 as *mut libc::c_void,
        iov_len: 1,
    };
    loop {
        // The raw system call, not glibc's preadv2() (2.26+), so the binary loads on older C
        // libraries; a kernel older than 4.6 answers ENOSYS (older than 4.14, EOPNOTSUPP for
        // RWF_NOWAIT), which the caller takes as "not supported here". The kernel takes the
        // offset as two longs, low then high (the high one is 0 on 64-bit systems).
        let (lo, hi) = (
            offset as libc::c_ulong as libc::c_long,
            ((offset as u128) >> libc::c_ulong::BITS) as libc::c_long,
        );
        // SAFETY: one iovec over a live local byte; preadv2 writes at most 1 byte there.
        let n = unsafe {
            libc::syscall(
                libc::SYS_preadv2,
                file.as_raw_fd(),
                &iov as *const libc::iovec,
                1 as libc::c_int,
                lo,
                hi,
                libc::RWF_NOWAIT,
            )
        };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(false),
            _ => return Err(e),
        }
    }
}

#[cfg(target_env = "gnu")]
pub fn c_library() -> String {
    // SAFETY: gnu_get_libc_version takes nothing and returns a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    format!("glibc {}", v.to_string_lossy())
}

#[cfg(target_env = "musl")]
pub fn c_library() -> String {
    "musl".into()
}

#[cfg(not(any(target_env = "gnu", target_env = "musl")))]
pub fn c_library() -> String {
    "C library unknown".into()
}
