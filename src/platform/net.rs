//! Socket plumbing for the network experiments: addresses and options they set up
//! untimed, and the interface a local address belongs to. Both systems share the calls.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

/// A TCP socket for `addr`, not yet connected. With `reset` it resets instead of lingering
/// when closed (SO_LINGER 0); without, it is made as lmbench's lat_connect makes it
/// (SO_REUSEADDR) and closes normally (FIN, then TIME_WAIT).
pub(crate) fn tcp_socket(addr: &SocketAddr, reset: bool) -> io::Result<OwnedFd> {
    let fam = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let fd = super::socket(fam, libc::SOCK_STREAM, 0)?;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let r = match reset {
        true => set_option(&fd, libc::SO_LINGER, &linger),
        false => set_option(&fd, libc::SO_REUSEADDR, &(1 as libc::c_int)),
    };
    r.map(|()| fd)
}

/// setsockopt(SOL_SOCKET, `opt`) to `val`.
fn set_option<T>(fd: &OwnedFd, opt: libc::c_int, val: &T) -> io::Result<()> {
    set_option_at(fd, libc::SOL_SOCKET, opt, val)
}

fn set_option_at<T>(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    let val = val as *const T as *const libc::c_void;
    // SAFETY: val points to a live T of the size passed; fd is an open socket.
    match unsafe { libc::setsockopt(fd.as_raw_fd(), level, opt, val, len) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The peer's listener on `addr`; the unspecified IPv6 address (`::`) takes IPv4 clients
/// too, whatever the system's default (Linux's `net.ipv6.bindv6only`, and Windows, make
/// IPv6 sockets IPv6-only).
pub(crate) fn tcp_listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    if !matches!(addr, SocketAddr::V6(a) if a.ip().is_unspecified()) {
        return std::net::TcpListener::bind(addr);
    }
    let fd = super::socket(libc::AF_INET6, libc::SOCK_STREAM, 0)?;
    set_option(&fd, libc::SO_REUSEADDR, &(1 as libc::c_int))?;
    set_option_at(
        &fd,
        libc::IPPROTO_IPV6,
        libc::IPV6_V6ONLY,
        &(0 as libc::c_int),
    )?;
    let raw = RawAddr::new(&addr);
    // SAFETY: raw holds a valid address of its length; fd is an open socket.
    if unsafe { libc::bind(fd.as_raw_fd(), raw.ptr(), raw.len()) } != 0
        || unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(fd.into())
}

/// An ICMP socket: unprivileged (SOCK_DGRAM) or raw.
pub(crate) fn icmp_socket(raw: bool) -> io::Result<OwnedFd> {
    let ty = if raw {
        libc::SOCK_RAW
    } else {
        libc::SOCK_DGRAM
    };
    super::socket(libc::AF_INET, ty, libc::IPPROTO_ICMP)
}

/// A socket address as connect(2) takes it, built once, outside what is timed.
pub(crate) struct RawAddr {
    ss: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    pub(crate) fn new(addr: &SocketAddr) -> RawAddr {
        // SAFETY: an all-zero sockaddr_storage is valid; we fill the family-specific view.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr.s6_addr = a.ip().octets();
                sin6.sin6_scope_id = a.scope_id();
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            ss,
            len: len as libc::socklen_t,
        }
    }
    pub(crate) fn ptr(&self) -> *const libc::sockaddr {
        &self.ss as *const _ as *const libc::sockaddr
    }
    pub(crate) fn len(&self) -> libc::socklen_t {
        self.len
    }
}

/// The interface holding a local address (getifaddrs).
pub(crate) fn interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a non-null node of the list getifaddrs returned, valid until freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family says its type.
        let addr = unsafe {
            match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(IpAddr::from(
                        u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                    ))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a non-null NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: head came from a successful getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// A UDP socket on any local port, connected to `dest`.
pub(crate) fn udp_to(dest: SocketAddr) -> io::Result<UdpSocket> {
    let any: IpAddr = match dest {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let s = UdpSocket::bind((any, 0))?;
    s.connect(dest)?;
    Ok(s)
}

/// The local interface traffic to `dest` leaves through, and the address it leaves from
/// (connecting a UDP socket only consults the routing table; nothing is sent).
pub(crate) fn route_interface(dest: SocketAddr) -> Option<(String, IpAddr)> {
    let s = udp_to(dest).ok()?;
    let local = s.local_addr().ok()?.ip();
    if local.is_loopback() {
        return Some(("lo".into(), local));
    }
    interface_of(local).map(|n| (n, local))
}
