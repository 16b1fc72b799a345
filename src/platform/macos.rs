//! macOS system calls for the platform layer. macOS has no CPU pinning, no per-file page
//! cache eviction, no per-thread fault counters and no parent-death signal: those answer
//! `Unsupported` (or whole-process figures, marked) and the experiments say so.

use super::{Access, FsKind, HugePages, Pinning, Support, ThreadUsage};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

#[cfg(test)]
pub const SYSTEM: &str = "macOS";
const NO_PINNING: &str = "macOS offers no CPU pinning; the scheduler places threads";

/// Nothing to prepare: macOS cannot pin.
pub type Mask = ();

pub fn pin_support() -> Pinning {
    Pinning::Unsupported {
        reason: NO_PINNING.into(),
    }
}

pub fn mask_single(_cpu: usize) -> io::Result<Mask> {
    Ok(())
}

pub fn pin_self(_m: &Mask) -> bool {
    false
}

pub fn pin_to_cpu(cpu: usize) -> io::Result<Pinning> {
    if cpu >= super::online_cpus() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} out of range"),
        ));
    }
    Ok(pin_support())
}

pub fn set_affinity(_cpus: &[usize]) -> io::Result<()> {
    Ok(())
}

pub fn allowed_cpus() -> Option<Vec<usize>> {
    None
}

pub fn current_cpu_raw() -> i32 {
    -1
}

// libc marks the mach calls deprecated in favour of the mach2 crate; one call each does
// not justify another dependency.
#[allow(deprecated)]
pub fn raw_clock_ns() -> u64 {
    use std::sync::OnceLock;
    static TB: OnceLock<(u64, u64)> = OnceLock::new();
    let &(numer, denom) = TB.get_or_init(|| {
        let mut tb = libc::mach_timebase_info { numer: 0, denom: 0 };
        // SAFETY: tb is a valid, writable mach_timebase_info.
        let rc = unsafe { libc::mach_timebase_info(&mut tb) };
        if rc != 0 || tb.denom == 0 {
            (1, 1)
        } else {
            (tb.numer as u64, tb.denom as u64)
        }
    });
    // SAFETY: mach_absolute_time takes no arguments and has no memory effects.
    let t = unsafe { libc::mach_absolute_time() };
    (t as u128 * numer as u128 / denom as u128) as u64
}

fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory arguments.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn pipe_cloexec() -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid array of two ints for pipe to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for fd in fds {
        if let Err(e) = set_cloexec(fd) {
            // SAFETY: closing the two descriptors just opened.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(e);
        }
    }
    Ok((fds[0], fds[1]))
}

pub fn socket_cloexec(domain: i32, ty: i32, protocol: i32) -> io::Result<RawFd> {
    // SAFETY: socket has no memory arguments.
    let fd = unsafe { libc::socket(domain, ty, protocol) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    if let Err(e) = set_cloexec(fd) {
        // SAFETY: closing the descriptor just opened.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

pub fn open_uncached(opts: &OpenOptions, path: &Path) -> io::Result<File> {
    let f = opts.open(path)?;
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_NOCACHE, 1) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

pub fn fd_path(fd: RawFd) -> String {
    format!("/dev/fd/{fd}")
}

pub fn advise(file: &File, access: Access) {
    let on = i32::from(access != Access::Random);
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDAHEAD, on) };
}

pub fn evict_file(_file: &File) -> io::Result<Support> {
    Ok(Support::Unsupported {
        reason: "macOS cannot evict one file from the cache; only F_NOCACHE reads or `purge` \
                 (root, --drop-caches) are uncached"
            .into(),
    })
}

pub fn drop_all_caches() -> io::Result<&'static str> {
    let st = std::process::Command::new("/usr/sbin/purge").status()?;
    if !st.success() {
        return Err(io::Error::other(format!("purge failed: {st}")));
    }
    Ok("purge")
}

pub fn mincore(addr: *mut libc::c_void, len: usize, vec: &mut [u8]) -> io::Result<()> {
    // SAFETY: the caller guarantees the mapping; vec has one byte per page of it.
    if unsafe { libc::mincore(addr, len, vec.as_mut_ptr() as *mut libc::c_char) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn thread_usage() -> io::Result<ThreadUsage> {
    // SAFETY: a zeroed rusage is a valid output buffer for getrusage.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return Err(io::Error::last_os_error());
        }
        ru
    };
    Ok(ThreadUsage {
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        involuntary_switches: ru.ru_nivcsw as u64,
        per_thread: false,
    })
}

pub fn die_with_parent() -> Support {
    Support::Unsupported {
        reason: "macOS has no parent-death signal; the child watches its pipe from the parent"
            .into(),
    }
}

pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    // getentropy returns at most 256 bytes per call.
    for chunk in buf.chunks_mut(256) {
        // SAFETY: chunk is writable for its length (at most 256).
        if unsafe { libc::getentropy(chunk.as_mut_ptr() as *mut libc::c_void, chunk.len()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn advise_huge_pages(_addr: *mut u8, _len: usize, _pages: HugePages) -> Support {
    Support::Unsupported {
        reason: "macOS has no transparent huge-page advice".into(),
    }
}

#[inline(always)]
pub fn raw_getppid() -> i64 {
    // SAFETY: getppid takes no arguments and cannot fail; macOS does not cache it.
    unsafe { libc::getppid() as i64 }
}

#[inline(always)]
pub fn raw_getpid() -> i64 {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { libc::getpid() as i64 }
}

pub fn dev_major_minor(dev: u64) -> (u64, u64) {
    // macOS dev_t: 8 bits of major, 24 of minor.
    ((dev >> 24) & 0xff, dev & 0xff_ffff)
}

pub fn fs_kind(path: &Path) -> io::Result<FsKind> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: c is a valid NUL-terminated path; st is a zeroed plain-data struct statfs fills.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        st
    };
    let name: Vec<u8> = st
        .f_fstypename
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as u8)
        .collect();
    Ok(FsKind::Name(String::from_utf8_lossy(&name).into_owned()))
}

fn sysctl_raw(name: &str) -> Option<Vec<u8>> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut len: libc::size_t = 0;
    // SAFETY: a null buffer asks for the size only; len is a valid size_t.
    let rc = unsafe {
        libc::sysctlbyname(
            c.as_ptr(),
            std::ptr::null_mut(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 || len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len];
    // SAFETY: buf is writable for len bytes; sysctlbyname writes at most len and updates it.
    let rc = unsafe {
        libc::sysctlbyname(
            c.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    buf.truncate(len);
    Some(buf)
}

pub fn sysctl_string(name: &str) -> Option<String> {
    super::sysctl_bytes_to_string(&sysctl_raw(name)?)
}

pub fn sysctl_u64(name: &str) -> Option<u64> {
    super::sysctl_bytes_to_u64(&sysctl_raw(name)?)
}

/// macOS's mincore has no rule hiding other users' files.
pub fn residency_hidden(_file: &File) -> Option<String> {
    None
}

pub fn cached_nowait(_file: &File, _offset: u64) -> io::Result<bool> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no non-blocking buffered reads on macOS",
    ))
}
