//! Small, safe wrappers over the system calls the core needs (CPU affinity, CPU lists).

use std::io;

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn online_cpus() -> usize {
    // SAFETY: sysconf with a valid name has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// CPUs in this thread's affinity mask.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..online_cpus()).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU number out of range",
        ));
    }
    // SAFETY: the set is a valid local; sched_setaffinity reads size_of::<cpu_set_t>() bytes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Restores the calling thread's affinity to a list of CPUs.
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as in pin_to_cpu.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and has no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and has no memory effects.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the byte at `offset` of `file` is in the page cache, asked with a 1-byte
/// read that may not wait for I/O (preadv2 with RWF_NOWAIT): unlike mincore, it answers
/// for every readable file. A miss starts readahead there. Err: not supported here.
#[cfg(target_os = "linux")]
pub fn cached_nowait(file: &std::fs::File, offset: u64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    let iov = libc::iovec {
        iov_base: &mut byte as *mut u8 as *mut libc::c_void,
        iov_len: 1,
    };
    loop {
        // SAFETY: one iovec over a live local byte; preadv2 writes at most 1 byte there.
        let n = unsafe {
            libc::preadv2(
                file.as_raw_fd(),
                &iov,
                1,
                offset as libc::off_t,
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

#[cfg(not(target_os = "linux"))]
pub fn cached_nowait(_file: &std::fs::File, _offset: u64) -> io::Result<bool> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Tells the kernel `len` bytes from `offset` of `file` will be read sequentially
/// (Linux doubles the readahead window). A hint: where unsupported, nothing happens.
pub fn advise_sequential(file: &std::fs::File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: advisory call on an open descriptor; touches no memory.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_SEQUENTIAL,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Asks for huge page-table entries (2 MiB) over a file mapping where the page cache
/// holds huge folios. A hint: where unsupported, nothing happens.
///
/// # Safety
/// `addr..addr + len` must be a mapping the caller owns.
pub unsafe fn advise_huge_pages(addr: *mut libc::c_void, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the caller owns the range; the advice changes no contents.
    unsafe {
        libc::madvise(addr, len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len);
}

/// The open flag that bypasses the page cache (O_DIRECT); Err where there is none.
pub fn direct_open_flag() -> io::Result<i32> {
    #[cfg(target_os = "linux")]
    return Ok(libc::O_DIRECT);
    #[cfg(not(target_os = "linux"))]
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no O_DIRECT on this system",
    ))
}

/// The 1-minute load average; None when the system does not say.
pub fn load_average() -> Option<f64> {
    let mut l = [0f64; 1];
    // SAFETY: getloadavg writes at most 1 value into the 1-element array.
    (unsafe { libc::getloadavg(l.as_mut_ptr(), 1) } == 1).then_some(l[0])
}
