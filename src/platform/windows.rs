//! The platform layer on Windows, where only `osmeter serve` is built: the part of the
//! interface the peer calls (CPU count, thread affinity, the current CPU, socket
//! readiness), under the same names as `mod.rs` offers on Linux and macOS. Nothing that
//! measures runs here, so nothing else is offered.

use std::io;
use std::os::windows::io::AsRawSocket;
use std::time::Duration;
use windows_sys::Win32::Networking::WinSock::{WSAPoll, POLLRDNORM, SOCKET, WSAPOLLFD};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetCurrentProcessorNumber, GetCurrentThread, SetProcessAffinityMask,
    SetThreadAffinityMask,
};

/// Name of the system this build targets, for messages.
pub(crate) const SYSTEM: &str = "Windows";

/// Logical processors of the machine (of its first processor group beyond 64).
pub(crate) fn online_cpus() -> usize {
    // SAFETY: SYSTEM_INFO is plain data; GetSystemInfo fills the struct it is given.
    let info = unsafe {
        let mut info: SYSTEM_INFO = std::mem::zeroed();
        GetSystemInfo(&mut info);
        info
    };
    (info.dwNumberOfProcessors as usize).max(1)
}

/// An affinity mask of `cpus` (those below 64: one processor group).
fn mask_of(cpus: &[usize]) -> io::Result<usize> {
    let mask = cpus
        .iter()
        .filter(|&&c| c < usize::BITS as usize)
        .fold(0usize, |m, &c| m | 1 << c);
    if mask == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no CPU below 64 in the set",
        ));
    }
    Ok(mask)
}

/// How firmly a thread is held on a CPU: an affinity mask is always hard here (the same
/// name as the Unix layer's answer, which also has Hint and Unsupported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pinning {
    Hard,
}

/// Holds the calling thread on `cpu` (a thread affinity mask: the scheduler never runs
/// the thread elsewhere, as sched_setaffinity on Linux).
pub fn pin_to_cpu(cpu: usize) -> io::Result<Pinning> {
    let mask = mask_of(&[cpu])?;
    // SAFETY: the pseudo-handle of the calling thread is always valid; no memory is passed.
    let previous = unsafe { SetThreadAffinityMask(GetCurrentThread(), mask) };
    if previous == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Pinning::Hard)
}

/// Lets the process (and so every thread it starts later) run on `cpus`. On Windows a
/// new thread takes the process's affinity, not its creator's, so the process's is set.
pub(crate) fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    let mask = mask_of(cpus)?;
    // SAFETY: the pseudo-handle of the current process is always valid; no memory is passed.
    if unsafe { SetProcessAffinityMask(GetCurrentProcess(), mask) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU the calling thread runs on now (its number within its processor group).
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments, no memory effects.
    Some(unsafe { GetCurrentProcessorNumber() } as usize)
}

/// Whether a socket (a stream or a listener) is readable (data, a pending connection or a
/// hang-up) within `timeout`; false on timeout or error. WSAPoll is Windows's poll.
pub(crate) fn socket_readable(s: &impl AsRawSocket, timeout: Duration) -> bool {
    let mut pfd = WSAPOLLFD {
        fd: s.as_raw_socket() as SOCKET,
        events: POLLRDNORM,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfd is one valid WSAPOLLFD on the stack for the duration of the call, and
    // its socket is open (borrowed from `s`).
    let r = unsafe { WSAPoll(&mut pfd, 1, ms) };
    r > 0
}
