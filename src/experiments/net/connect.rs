//! net.connect: the cost of connect() until established and of close(), one connection
//! at a time, as distributions (setup is heavy-tailed: SYN queue, timer retries).

use super::{each_target, percentiles, predict_each, sample, PeerTarget};
use crate::experiments::predict::Predictions;
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome};
use crate::peer::protocol::Request;
use crate::platform::net::{tcp_socket, RawAddr};
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
const MAX_OPEN_CLOSE: PerProfile<usize> = PerProfile::new(125, 1_000, 2_500, 5_000);

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
        predict_each(ctx, |p, peer| predict_to(p, peer.is_some()))
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        each_target(ctx, measure, |out, t, _| {
            let p = |name: &str| percentiles(out, &t.name(name));
            if let (Some(c), Some(x)) = (p("connect"), p("close")) {
                let (label, tail) = (&t.label, c.p99 / c.p50);
                let [p50, p99, close] = [c.p50, c.p99, x.p50].map(fmt_ns);
                let text = format!("Opening a TCP connection to {label} takes {p50} (p99 {p99}, {tail:.1}x the median); closing it {close}.");
                out.finding(text, &[&t.name("connect"), &t.name("close")]);
            }
        })
    }
}

/// Lower bounds from net.rtt's ICMP echo with the same peer, which takes the path of SYN
/// and SYN-ACK (docs/methods/net.connect.md).
fn predict_to(p: &mut Predictions, remote: bool) {
    let prefix = if remote { "remote_" } else { "" };
    let echo = p
        .earlier("net.rtt", &[&format!("{prefix}icmp")])
        .named("icmp_echo");
    let sys = p.earlier("cpu.syscall", &["getppid"]);
    let bound = "TCP's own segment work, the ACK and the sockets' allocation are left out";
    let connect = format!("net.rtt {prefix}icmp less one getppid");
    let bounds = [
        ("connect", -1.0, format!("{connect} (the echo makes two calls, connect one)")),
        ("open_close", 1.0, format!("socket() and close() at least a kernel entry each (2 x getppid) + connect's bound ({connect})")),
    ];
    for (name, sign, formula) in bounds {
        p.state(name, &[&echo, &sys], |v| {
            let f = format!("{formula}; {bound}: a lower bound");
            Prediction::new(v[0] + sign * v[1], f).lower_bound()
        });
    }
    p.withhold(
        &["close"],
        if remote {
            "close with SO_LINGER 0 sends a reset and awaits nothing: against a remote peer it is \
             this host's socket teardown and one transmit, which nothing measured before it prices"
        } else {
            "close with SO_LINGER 0 hands its reset to the loopback peer's socket within the call: \
             one segment's trip and two sockets' teardown, and the ICMP echo's trip does not split \
             into a one-way share"
        },
    );
}

fn measure(ctx: &Context, t: &PeerTarget, out: &mut Outcome) -> anyhow::Result<()> {
    let max = MAX_CONNECTIONS.get(ctx.profile);
    let session = t.client.open(&Request::ConnectTarget {
        max_accepts: (max + MAX_OPEN_CLOSE.get(ctx.profile) + 200) as u32,
    })?;
    let dest = SocketAddr::new(t.client.addr.ip(), session.port);
    let timed = time_connections(ctx, &dest, max)?;
    drop(session);
    let n = timed[0].len();
    out.check(Check::sanity(
        &format!("{}enough connections for a distribution", t.prefix),
        n >= 100,
        format!("{n} connections (bound {max})"),
    ));
    for ((name, what), v) in TIMED.into_iter().zip(timed) {
        out.distribution(&t.name(name), "ns", &format!("{what}, {}", t.label), v);
    }
    Ok(())
}

/// The `TIMED` figures in ns to `dest`, within 80% of the budget, after an untimed warm-up.
fn time_connections(ctx: &Context, dest: &SocketAddr, max: usize) -> anyhow::Result<[Vec<f64>; 3]> {
    let raw = RawAddr::new(dest);
    let connect = |fd: &OwnedFd| {
        // SAFETY: raw holds a valid address of its length; fd is an open socket.
        match unsafe { libc::connect(fd.as_raw_fd(), raw.ptr(), raw.len()) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    let refused = |e: io::Error| anyhow::anyhow!("connect to {dest}: {e}");
    (ctx.progress)("connections");
    for _ in 0..max.min(100) / 2 {
        connect(&tcp_socket(dest, true)?).map_err(refused)?;
    }
    let oc_max = MAX_OPEN_CLOSE.get(ctx.profile);
    let [mut connects, mut closes, mut open_closes] = [max, max, oc_max].map(Vec::with_capacity);
    let budget = ctx.budget * 8 / 10;
    let until = ctx.harness(1).deadline(budget);
    while connects.len() < max && !until.passed() {
        // Sockets are made untimed in batches; each connect and close is timed alone.
        let batch: Vec<OwnedFd> = (0..64)
            .map(|_| tcp_socket(dest, true))
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
                let fd = tcp_socket(dest, false)?;
                connect(&fd)?;
                drop(fd);
                Ok(())
            });
            open_closes.extend(timed.map_err(refused)?);
        }
    }
    Ok([connects, closes, open_closes])
}
