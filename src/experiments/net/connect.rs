//! net.connect: the cost of connect() until established and of close(), one connection
//! at a time, as distributions (setup is heavy-tailed: SYN queue, timer retries).

use super::{sample, target};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::peer::protocol::Request;
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Connect;

/// At most this many connections per run: with SO_LINGER 0 none lingers in TIME_WAIT,
/// but the bound keeps even a misbehaving kernel far from the ephemeral port range.
const MAX_CONNECTIONS: PerProfile<usize> = PerProfile::new(500, 4_000, 10_000, 20_000);

/// open_close connections close normally and each leaves a port in TIME_WAIT for a minute:
/// a quarter of the bound above keeps back-to-back runs far below the ~28,000 ephemeral ports.
fn max_open_close(p: Profile) -> usize {
    MAX_CONNECTIONS.get(p) / 4
}

/// A socket, not yet connected. With `reset` it resets instead of lingering when closed
/// (SO_LINGER 0); without, it is made as lmbench's lat_connect makes it (SO_REUSEADDR) and
/// closes normally (FIN, then TIME_WAIT).
fn socket_for(addr: &SocketAddr, reset: bool) -> io::Result<OwnedFd> {
    let fam = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let fd = crate::platform::socket(fam, libc::SOCK_STREAM, 0)?;
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
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    let val = val as *const T as *const libc::c_void;
    // SAFETY: val points to a live T of the size passed; fd is an open socket.
    match unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, opt, val, len) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// sockaddr storage for connect().
fn raw_addr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
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
    (ss, len as libc::socklen_t)
}

/// What `time_connections` times, in its order.
const TIMED: [(&str, &str); 3] = [
    ("connect", "connect() until established"),
    ("close", "close() with SO_LINGER 0 (reset, no TIME_WAIT)"),
    (
        "open_close",
        "socket() + connect() + ordinary close(), as lmbench lat_connect times it",
    ),
];

const SPEC: Spec = Spec {
    id: "net.connect",
    title: "TCP connection setup and teardown",
    description: "connect() until established and close(), over thousands of connections to the peer, as distributions",
    method: crate::method!("net.connect"),
    // Quick keeps room for starting the loopback peer on a busy machine.
    budget: Some(PerProfile::new(ms(300), ms(1200), ms(7500), ms(22500))),
    // The network stack and the peer.
    ..Spec::NETWORK
};

impl Experiment for Connect {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        // Segments the protocol fixes, each priced at what net.rtt measured for one trip of
        // a segment through both stacks (half its TCP round trip, with the same peer).
        let mut p = Predictions::new(ctx);
        let rtt = p.earlier("net.rtt", &["tcp"]).named("tcp_round_trip");
        let trips = |n: f64, what: &str| {
            Input::method("segment_trips", n, "trips", format!("method: {what}"))
        };
        let handshake = trips(2.0, "connect waits for SYN and SYN-ACK");
        p.state("connect", &[&rtt, &handshake], |v| {
            Prediction::new(
                v[0],
                "one round trip (SYN out, SYN-ACK back) = net.rtt tcp; that round trip also \
                 holds the peer's read and write, which a handshake does not need, and leaves \
                 out the socket's setup: a model, not a bound",
            )
        });
        let reset = trips(1.0, "close with SO_LINGER 0 sends one reset");
        p.state("close", &[&rtt, &reset], |v| {
            Prediction::new(
                v[0] / 2.0,
                "one segment (the reset) sent, none awaited: half of net.rtt tcp",
            )
        });
        let sys = p.earlier("cpu.syscall", &["getppid"]);
        let whole = trips(3.0, "SYN and SYN-ACK, then one FIN");
        p.state("open_close", &[&rtt, &whole, &sys], |v| {
            Prediction::new(
                v[2] + 1.5 * v[0],
                "socket() as one kernel entry (getppid) + connect (one round trip) + close \
                 (one FIN sent, none awaited: half a round trip); the socket's allocation \
                 is not in the model",
            )
        });
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let t = target(ctx, &mut out)?;
        let label = t.label.clone();
        let max = MAX_CONNECTIONS.get(ctx.profile);
        let session = t.client.open(&Request::ConnectTarget {
            max_accepts: (max + max_open_close(ctx.profile) + 200) as u32,
        })?;
        let dest = SocketAddr::new(t.addr().ip(), session.port);
        let timed = time_connections(ctx, &dest, max)?;
        drop(session);
        let n = timed[0].len();
        out.check(Check::sanity(
            "enough connections for a distribution",
            n >= 100,
            format!("{n} connections (bound {max})"),
        ));
        for ((name, what), v) in TIMED.into_iter().zip(timed) {
            out.distribution(name, "ns", &format!("{what}, {label}"), v);
        }
        out.pool(ctx);
        let p = |name: &str| out.get(name).and_then(|m| m.summary.percentiles.clone());
        if let (Some(c), Some(x)) = (p("connect"), p("close")) {
            out.finding(
                format!(
                    "Opening a TCP connection to {label} takes {} (p99 {}, {:.1}x the median); closing it {}.",
                    fmt_ns(c.p50),
                    fmt_ns(c.p99),
                    c.p99 / c.p50,
                    fmt_ns(x.p50)
                ),
                &["connect", "close"],
            );
        }
        Ok(out)
    }
}

/// connect() on a socket to `dest`, timed by the caller.
fn connect_to(fd: &OwnedFd, ss: &libc::sockaddr_storage, len: libc::socklen_t) -> io::Result<()> {
    // SAFETY: ss holds a valid address of `len` bytes; fd is an open socket.
    let r = unsafe { libc::connect(fd.as_raw_fd(), ss as *const _ as *const libc::sockaddr, len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Up to `max` connects and closes to `dest`, and up to `max_open_close` whole
/// open-connect-closes among them, within 80% of the budget, after an untimed warm-up:
/// the `TIMED` figures in ns.
fn time_connections(ctx: &Context, dest: &SocketAddr, max: usize) -> anyhow::Result<[Vec<f64>; 3]> {
    let (ss, len) = raw_addr(dest);
    let connect = |fd: &OwnedFd| connect_to(fd, &ss, len);
    let refused = |e: io::Error| anyhow::anyhow!("connect to {dest}: {e}");
    (ctx.progress)("connections");
    for _ in 0..max.min(100) / 2 {
        connect(&socket_for(dest, true)?).map_err(refused)?;
    }
    let oc_max = max_open_close(ctx.profile);
    let [mut connects, mut closes, mut open_closes] = [max, max, oc_max].map(Vec::with_capacity);
    let budget = ctx.budget * 8 / 10;
    let until = ctx.harness(1).deadline(budget);
    while connects.len() < max && !until.passed() {
        // Sockets are made untimed in batches; each connect and close is timed alone.
        let batch: Vec<OwnedFd> = (0..64)
            .map(|_| socket_for(dest, true))
            .collect::<io::Result<_>>()?;
        let mut fds = batch.into_iter();
        let mut open = Vec::with_capacity(64);
        let timed = sample(ctx, 64, budget, || {
            let fd = fds.next().ok_or_else(|| io::Error::other("no socket"))?;
            connect(&fd)?;
            open.push(fd);
            Ok(())
        });
        connects.extend(timed.map_err(refused)?);
        let mut open = open.into_iter();
        closes.extend(sample(ctx, 64, budget, || {
            drop(open.next());
            Ok(())
        })?);
        if open_closes.len() < oc_max {
            let timed = sample(ctx, 32, budget, || {
                let fd = socket_for(dest, false)?;
                connect(&fd)?;
                drop(fd);
                Ok(())
            });
            open_closes.extend(timed.map_err(refused)?);
        }
    }
    Ok([connects, closes, open_closes])
}
