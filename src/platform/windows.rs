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

/// The peer's listener, under the name the Unix layer gives it.
pub(crate) mod net {
    use std::io;
    use std::net::{SocketAddr, TcpListener};
    use std::os::windows::io::{FromRawSocket, RawSocket};
    use windows_sys::Win32::Networking::WinSock as ws;

    /// Listens on `addr`; the unspecified IPv6 address (`::`) takes IPv4 clients too.
    /// Windows makes an IPv6 socket IPv6-only by default (Linux does not), so the option
    /// is cleared before the bind, which std offers no way to do.
    pub(crate) fn tcp_listen(addr: SocketAddr) -> io::Result<TcpListener> {
        let SocketAddr::V6(a) = addr else {
            return TcpListener::bind(addr);
        };
        if !a.ip().is_unspecified() {
            return TcpListener::bind(addr);
        }
        let err = || io::Error::from_raw_os_error(unsafe { ws::WSAGetLastError() });
        // SAFETY: WSADATA is plain data WSAStartup fills; the call only counts a user of
        // Winsock (std starts it lazily, and each start is matched by none here: it lives
        // as long as the process, as std's does).
        let mut data: ws::WSADATA = unsafe { std::mem::zeroed() };
        if unsafe { ws::WSAStartup(0x202, &mut data) } != 0 {
            return Err(err());
        }
        let flags = ws::WSA_FLAG_OVERLAPPED | ws::WSA_FLAG_NO_HANDLE_INHERIT;
        // SAFETY: no pointers are passed (no protocol info); the result is checked.
        let s = unsafe {
            ws::WSASocketW(
                ws::AF_INET6 as i32,
                ws::SOCK_STREAM,
                ws::IPPROTO_TCP,
                std::ptr::null(),
                0,
                flags,
            )
        };
        if s == ws::INVALID_SOCKET {
            return Err(err());
        }
        // SAFETY: s is a socket we just made and own; the listener closes it on every path.
        let listener = unsafe { TcpListener::from_raw_socket(s as RawSocket) };
        let off: i32 = 0;
        let sa = ws::SOCKADDR_IN6 {
            sin6_family: ws::AF_INET6,
            sin6_port: a.port().to_be(),
            sin6_flowinfo: 0,
            sin6_addr: ws::IN6_ADDR {
                u: ws::IN6_ADDR_0 {
                    Byte: a.ip().octets(),
                },
            },
            Anonymous: ws::SOCKADDR_IN6_0 {
                sin6_scope_id: a.scope_id(),
            },
        };
        // SAFETY: `off` and `sa` live on the stack for the calls and their sizes are passed.
        unsafe {
            let opt = &off as *const i32 as *const u8;
            if ws::setsockopt(s, ws::IPPROTO_IPV6, ws::IPV6_V6ONLY, opt, 4) != 0 {
                return Err(err());
            }
            let len = std::mem::size_of::<ws::SOCKADDR_IN6>() as i32;
            if ws::bind(s, &sa as *const _ as *const ws::SOCKADDR, len) != 0 {
                return Err(err());
            }
            if ws::listen(s, 128) != 0 {
                return Err(err());
            }
        }
        Ok(listener)
    }
}

/// This machine as Windows describes it: the registry's processor name and product name,
/// GetSystemInfo's and GetLogicalProcessorInformation's counts, GlobalMemoryStatusEx's
/// memory, and the adapter holding `local` (GetAdaptersAddresses: its name, transmit
/// link speed and MTU).
pub(crate) fn host_info(local: std::net::IpAddr) -> crate::peer::protocol::HostInfo {
    use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
    const CPU: &str = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0";
    const OS: &str = r"SOFTWARE\Microsoft\Windows NT\CurrentVersion";
    let mut notes = Vec::new();
    // SAFETY: MEMORYSTATUSEX is plain data with its length set, as the call requires.
    let memory = unsafe {
        let mut m: MEMORYSTATUSEX = std::mem::zeroed();
        m.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
        (GlobalMemoryStatusEx(&mut m) != 0).then_some(m.ullTotalPhys)
    };
    let build = registry(OS, "CurrentBuildNumber");
    let os_version = match (build, registry(OS, "DisplayVersion")) {
        (Some(b), Some(d)) => Some(format!("build {b} ({d})")),
        (b, _) => b.map(|b| format!("build {b}")),
    };
    let nic = adapter_of(local);
    match &nic {
        None => notes.push(format!("no adapter holds {local}")),
        Some((name, None, _)) => notes.push(format!("{name} reports no link speed")),
        _ => {}
    }
    crate::peer::protocol::HostInfo {
        hostname: std::env::var("COMPUTERNAME").ok(),
        cpu_model: registry(CPU, "ProcessorNameString").map(|s| s.trim().to_string()),
        logical_cpus: Some(online_cpus() as u64),
        physical_cores: physical_cores(),
        memory_bytes: memory,
        os: registry(OS, "ProductName"),
        os_version,
        arch: Some(std::env::consts::ARCH.to_string()),
        nic_speed_mbit_s: nic.as_ref().and_then(|n| n.1),
        nic_mtu: nic.as_ref().map(|n| n.2 as u64),
        nic: nic.map(|n| n.0),
        notes,
    }
}

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

/// A string value under HKEY_LOCAL_MACHINE.
fn registry(key: &str, value: &str) -> Option<String> {
    use windows_sys::Win32::System::Registry::{RegGetValueW, HKEY_LOCAL_MACHINE, RRF_RT_REG_SZ};
    let (k, v) = (wide(key), wide(value));
    let mut buf = [0u16; 512];
    let mut bytes = std::mem::size_of_val(&buf) as u32;
    // SAFETY: key and value are NUL-terminated UTF-16; buf holds `bytes` bytes, and the
    // call writes at most that many (with a terminating NUL) or fails.
    let r = unsafe {
        RegGetValueW(
            HKEY_LOCAL_MACHINE,
            k.as_ptr(),
            v.as_ptr(),
            RRF_RT_REG_SZ,
            std::ptr::null_mut(),
            buf.as_mut_ptr().cast(),
            &mut bytes,
        )
    };
    if r != 0 {
        return None;
    }
    let n = (bytes as usize / 2).min(buf.len());
    let s = String::from_utf16_lossy(&buf[..n]);
    Some(s.trim_end_matches('\0').to_string()).filter(|s| !s.is_empty())
}

/// Physical cores: GetLogicalProcessorInformation's processor-core entries.
fn physical_cores() -> Option<u64> {
    use windows_sys::Win32::System::SystemInformation::{
        GetLogicalProcessorInformation, RelationProcessorCore,
        SYSTEM_LOGICAL_PROCESSOR_INFORMATION as Info,
    };
    let mut len: u32 = 0;
    // SAFETY: a null buffer with length 0 only asks for the length needed.
    unsafe { GetLogicalProcessorInformation(std::ptr::null_mut(), &mut len) };
    let n = len as usize / std::mem::size_of::<Info>();
    if n == 0 {
        return None;
    }
    // SAFETY: Info is plain data; the buffer holds n entries of `len` bytes in all.
    let mut v: Vec<Info> = vec![unsafe { std::mem::zeroed() }; n];
    if unsafe { GetLogicalProcessorInformation(v.as_mut_ptr(), &mut len) } == 0 {
        return None;
    }
    let got = (len as usize / std::mem::size_of::<Info>()).min(n);
    let cores = v[..got]
        .iter()
        .filter(|i| i.Relationship == RelationProcessorCore)
        .count();
    (cores > 0).then_some(cores as u64)
}

/// The adapter holding `local`: its friendly name, transmit link speed in Mbit/s (None
/// when Windows says unknown) and MTU.
fn adapter_of(local: std::net::IpAddr) -> Option<(String, Option<u64>, u32)> {
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        GetAdaptersAddresses, GAA_FLAG_SKIP_ANYCAST, GAA_FLAG_SKIP_DNS_SERVER,
        GAA_FLAG_SKIP_MULTICAST, IP_ADAPTER_ADDRESSES_LH,
    };
    use windows_sys::Win32::Networking::WinSock::AF_UNSPEC;
    let flags = GAA_FLAG_SKIP_ANYCAST | GAA_FLAG_SKIP_MULTICAST | GAA_FLAG_SKIP_DNS_SERVER;
    let mut len: u32 = 32 * 1024;
    let mut buf: Vec<u64> = Vec::new(); // u64: the list's structures need 8-byte alignment
    for _ in 0..3 {
        buf = vec![0u64; len as usize / 8 + 1];
        // SAFETY: buf holds at least `len` bytes, aligned for the structures written.
        let r = unsafe {
            GetAdaptersAddresses(
                AF_UNSPEC as u32,
                flags,
                std::ptr::null(),
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        match r {
            0 => break,
            windows_sys::Win32::Foundation::ERROR_BUFFER_OVERFLOW => {
                buf.clear();
                continue;
            }
            _ => return None,
        }
    }
    if buf.is_empty() {
        return None;
    }
    let mut a = buf.as_ptr() as *const IP_ADAPTER_ADDRESSES_LH;
    while !a.is_null() {
        // SAFETY: a is null or a node of the list GetAdaptersAddresses wrote into buf,
        // which lives until the end of this function; so are its unicast nodes.
        let ad = unsafe { &*a };
        let mut u = ad.FirstUnicastAddress;
        while !u.is_null() {
            // SAFETY: as above.
            let ua = unsafe { &*u };
            if unsafe { sockaddr_ip(ua.Address.lpSockaddr) } == Some(local) {
                // SAFETY: FriendlyName is null or a NUL-terminated UTF-16 string in buf.
                let name = unsafe { wide_str(ad.FriendlyName) };
                let speed = Some(ad.TransmitLinkSpeed)
                    .filter(|&s| s > 0 && s != u64::MAX)
                    .map(|s| s / 1_000_000);
                return Some((name, speed, ad.Mtu));
            }
            u = ua.Next;
        }
        a = ad.Next;
    }
    None
}

/// The address in a SOCKADDR of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` is null or points to a socket address as long as its family says.
unsafe fn sockaddr_ip(
    sa: *const windows_sys::Win32::Networking::WinSock::SOCKADDR,
) -> Option<std::net::IpAddr> {
    use windows_sys::Win32::Networking::WinSock::{AF_INET, AF_INET6, SOCKADDR_IN, SOCKADDR_IN6};
    if sa.is_null() {
        return None;
    }
    match (*sa).sa_family {
        AF_INET => {
            let sin = &*(sa as *const SOCKADDR_IN);
            Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.S_un.S_addr)).into())
        }
        AF_INET6 => {
            let sin6 = &*(sa as *const SOCKADDR_IN6);
            Some(std::net::Ipv6Addr::from(sin6.sin6_addr.u.Byte).into())
        }
        _ => None,
    }
}

/// A NUL-terminated UTF-16 string ("" for null).
///
/// # Safety
/// `p` is null or points to a NUL-terminated UTF-16 string.
unsafe fn wide_str(p: *const u16) -> String {
    if p.is_null() {
        return String::new();
    }
    let mut n = 0;
    while *p.add(n) != 0 {
        n += 1;
    }
    String::from_utf16_lossy(std::slice::from_raw_parts(p, n))
}
