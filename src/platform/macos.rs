//! macOS system calls for the platform layer. macOS has no CPU pinning, no per-thread fault
//! or involuntary-switch counters and no parent-death signal: those answer `Unsupported`
//! (or whole-process figures, marked; off-CPU time for preemption) and the experiments say
//! so. A file is evicted by mapping it and msync(MS_INVALIDATE), as vmtouch does.

use super::{Access, FsKind, HugePages, Pinning, Support, ThreadUsage};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

#[cfg(test)]
pub const SYSTEM: &str = "macOS";
/// Darwin leaves the echo id of datagram ICMP sockets as sent, and delivers other
/// processes' replies too.
pub const ICMP_DGRAM_KEEPS_ID: bool = true;
/// F_NOCACHE reads of pages already cached are served from the cache (fio issue #48).
pub const UNCACHED_BYPASSES_CACHE: bool = false;

const NO_PINNING: &str = "macOS offers no CPU pinning; the scheduler places threads";
const QOS_HINT: &str = "macOS offers no CPU pinning; the thread asked for the performance \
                        cores (QoS class user-interactive), which the scheduler may ignore";

/// Nothing to prepare: macOS cannot pin.
pub type Mask = ();

/// sys/qos.h: QOS_CLASS_USER_INTERACTIVE (libc does not export the QoS API).
const QOS_CLASS_USER_INTERACTIVE: libc::c_uint = 0x21;

extern "C" {
    fn pthread_set_qos_class_self_np(
        qos: libc::c_uint,
        relative_priority: libc::c_int,
    ) -> libc::c_int;
}

pub fn pin_support() -> Pinning {
    Pinning::Hint {
        reason: QOS_HINT.into(),
    }
}

/// 1 when this process is an x86_64 build translated by Rosetta 2.
pub fn translated() -> bool {
    sysctl_text("sysctl.proc_translated").as_deref() == Some("1")
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
    // The closest macOS comes: user-interactive threads run on performance cores when
    // they can (Apple's "Tuning your code's performance for Apple silicon").
    // SAFETY: sets the calling thread's QoS class; no memory arguments.
    if unsafe { pthread_set_qos_class_self_np(QOS_CLASS_USER_INTERACTIVE, 0) } != 0 {
        return Ok(Pinning::Unsupported {
            reason: NO_PINNING.into(),
        });
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

/// macOS has no NUMA placement to ask about.
pub fn node_of_page(_addr: *const u8) -> Option<usize> {
    None
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

/// Clears F_NOCACHE, which a /dev/fd reopen shares with its original (fdesc_open dup()s).
pub fn set_cached(file: &File) -> io::Result<()> {
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_NOCACHE, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn advise(file: &File, access: Access) {
    let on = i32::from(access != Access::Random);
    // SAFETY: fcntl on an open descriptor; no memory arguments.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_RDAHEAD, on) };
}

/// Evicts a file's pages without root the way vmtouch does on macOS: map it shared,
/// window by window, and msync(MS_SYNC | MS_INVALIDATE) each window, which writes dirty
/// pages back and drops the file's pages from the cache. Callers verify with mincore.
pub fn evict_file(file: &File) -> io::Result<Support> {
    let len = file.metadata()?.len();
    for (off, n) in super::eviction_windows(len, 64 << 20, super::page_size() as u64) {
        // SAFETY: a fresh shared read-only mapping of the file's own range; nothing else
        // uses it, and it is unmapped before the next window.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                n as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off as libc::off_t,
            );
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            // MS_SYNC first writes dirty pages back, so invalidating never drops data.
            let rc = libc::msync(p, n as usize, libc::MS_SYNC | libc::MS_INVALIDATE);
            let e = io::Error::last_os_error();
            libc::munmap(p, n as usize);
            if rc != 0 {
                return Err(e);
            }
        }
    }
    Ok(Support::Done)
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
    // XNU's ru_nivcsw is the task's switches minus BSD sleeps: every Mach wait of every
    // thread (the watchdog's, the ticker's) counts. Count this thread's off-CPU spells
    // instead (super::OffCpuCounter).
    thread_local! {
        static OFF_CPU: std::cell::Cell<super::OffCpuCounter> = Default::default();
    }
    let (wall, cpu) = (raw_clock_ns(), super::thread_cpu_ns());
    let involuntary = OFF_CPU.with(|c| {
        let mut v = c.get();
        let n = v.update(wall, cpu);
        c.set(v);
        n
    });
    Ok(ThreadUsage {
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        involuntary_switches: involuntary,
        per_thread: false,
    })
}

pub fn die_with_parent() -> Result<(), &'static str> {
    Err("macOS has no parent-death signal; the child watches its pipe from the parent")
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

pub fn drop_mapped_range(_addr: *mut u8, _len: usize) -> Support {
    Support::Unsupported {
        reason: "macOS's MADV_DONTNEED deactivates cached file pages rather than dropping \
                 the mapping's entries"
            .into(),
    }
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

/// XNU's getpid system call number (bsd/kern/syscalls.master).
const SYS_GETPID: libc::c_int = 20;

/// Through the kernel: libSystem's getpid() returns a pid cached in user space
/// (Libsyscall custom/__getpid.s), which would time a load, not a system call.
#[inline(always)]
pub fn raw_getpid() -> i64 {
    // SAFETY: syscall(SYS_getpid) takes no arguments, touches no memory, cannot fail.
    unsafe { libc::syscall(SYS_GETPID) as i64 }
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

/// The MIB of a sysctl name.
fn sysctl_mib(name: &str) -> Option<Vec<libc::c_int>> {
    let c = std::ffi::CString::new(name).ok()?;
    // XNU's CTL_MAXNAME (sys/sysctl.h); libc does not export it for Apple targets.
    let mut mib = [0 as libc::c_int; 12];
    let mut len: libc::size_t = mib.len();
    // SAFETY: mib is writable for `len` ints; sysctlnametomib writes at most that many.
    if unsafe { libc::sysctlnametomib(c.as_ptr(), mib.as_mut_ptr(), &mut len) } != 0 {
        return None;
    }
    Some(mib[..len.min(mib.len())].to_vec())
}

/// sysctl(3) by MIB into a buffer sized by a first call.
fn sysctl_by_mib(mib: &mut [libc::c_int]) -> Option<Vec<u8>> {
    let mut len: libc::size_t = 0;
    // SAFETY: a null buffer asks for the size only; len is a valid size_t.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            mib.len() as libc::c_uint,
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
    // SAFETY: buf is writable for len bytes; sysctl writes at most len and updates it.
    let rc = unsafe {
        libc::sysctl(
            mib.as_mut_ptr(),
            mib.len() as libc::c_uint,
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

/// The value, decoded by the OID's declared type: {0, 4, mib...} answers a u32 kind
/// followed by the NUL-terminated format string (as sysctl(8) asks, XNU kern_newsysctl.c).
pub fn sysctl_text(name: &str) -> Option<String> {
    let mut mib = sysctl_mib(name)?;
    let mut q = vec![0, 4];
    q.extend_from_slice(&mib);
    let fmt = sysctl_by_mib(&mut q)?;
    let kind = u32::from_ne_bytes(fmt.get(..4)?.try_into().ok()?);
    let f = super::decode_sysctl(&fmt[4..], super::CTLTYPE_STRING, "A").unwrap_or_default();
    super::decode_sysctl(&sysctl_by_mib(&mut mib)?, kind, &f)
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

pub fn c_library() -> String {
    "libSystem".into()
}
