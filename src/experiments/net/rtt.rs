//! net.rtt: round-trip time of a small message over TCP and UDP to the peer, and of an
//! ICMP echo the kernel answers itself, each as a distribution of single round trips.

use super::{describe_cpus, each_target, main_cpu, percentiles, predict_each, sample, PeerTarget};
use crate::analysis::Separation;
use crate::experiments::kit::place::Place;
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome};
use crate::harness::SampleSpec;
use crate::machine::CrossPlan;
use crate::peer::protocol::{EchoReport, Request};
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::io::{Read, Write};
use std::iter::zip;
use std::net::SocketAddr;
use std::time::Duration;

pub struct Rtt;

const TCP_MSG: usize = 1;
const UDP_MSG: usize = 8;

const MAX_SAMPLES: PerProfile<usize> = PerProfile::new(2_000, 20_000, 100_000, 300_000);
const WARMUP: PerProfile<usize> = PerProfile::new(50, 500, 500, 500);

/// Round trips the client made in an echo session, and replies unlike the message sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoCount {
    pub round_trips: u64,
    pub mismatched: u64,
}

/// Premise: every reply equalled the message sent (its bytes change every round trip, so
/// a stale reply differs) and the peer echoed as many messages as the client sent.
pub fn echo_check(name: &str, c: EchoCount, peer_messages: u64, where_: &str) -> Check {
    let (n, bad, echoed) = (c.round_trips, c.mismatched, peer_messages);
    let detail = format!("{n} round trips, {bad} replies differing from the message sent, {echoed} messages echoed by the peer; {where_}");
    let name = format!("{name}: the peer echoed every round trip");
    Check::premise(&name, n > 0 && bad == 0 && echoed == n, detail)
}

/// One TCP echo session: round trips (ns), the peer's report, the count, the client's places.
fn tcp_echo(
    ctx: &Context,
    t: &PeerTarget,
    pin_cpu: i32,
    budget: Duration,
) -> anyhow::Result<(Vec<f64>, EchoReport, EchoCount, Place)> {
    let mut s = t.client.open(&Request::Echo {
        size: TCP_MSG as u32,
        pin_cpu,
    })?;
    s.stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let (mut msg, mut back) = ([0x5au8; TCP_MSG], [0u8; TCP_MSG]);
    let stream = &mut s.stream;
    let mut count = EchoCount::default();
    let mut once = || -> std::io::Result<()> {
        msg[0] = count.round_trips as u8;
        stream.write_all(&msg)?;
        stream.read_exact(&mut back)?;
        count.round_trips += 1;
        if back != msg {
            count.mismatched += 1;
        }
        Ok(())
    };
    for _ in 0..WARMUP.get(ctx.profile) {
        once()?;
    }
    let mut client = Place::new(ctx.cpu);
    let spec = SampleSpec::new(MAX_SAMPLES.get(ctx.profile), budget);
    let v = ctx
        .harness(1)
        .try_sample_with(&spec, || Ok(client.look()), |_| once(), |_, _| {})?
        .ns;
    Ok((v, s.finish_echo()?, count, client))
}

/// Premise of a pinned figure: the client stayed on its CPU and the peer on the CPU it
/// was asked for, each in more than 99% of the round trips.
pub(crate) fn placement_check(
    name: &str,
    client: &Place,
    pin: usize,
    peer_pinned: bool,
    peer: &[(u32, u64)],
) -> Check {
    let peer_on = main_cpu(peer).is_some_and(|(c, s)| c as usize == pin && s > 0.99);
    let (cpu, off, looks) = (client.cpu, client.off(), client.looks);
    let client_on = looks > 0 && off * 100 < looks;
    let unpinned = if peer_pinned { "" } else { " (could not pin)" };
    let ran = describe_cpus(peer);
    let detail = format!("client asked for CPU {cpu}, off it in {off} of {looks} round trips; peer asked for CPU {pin}{unpinned}, ran on {ran}");
    let name = format!("{name}: client and peer ran where asked");
    Check::premise(&name, client_on && peer_pinned && peer_on, detail)
}

/// Round trips `once` says were answered timed into `out`, lost ones noted; false when no
/// warm-up was answered. An ICMP loss costs a long timeout: its warm-up ends after three in
/// a row, and it takes at most 100 warm-ups and half the samples.
fn lossy(
    ctx: &Context,
    t: &PeerTarget,
    out: &mut Outcome,
    icmp: bool,
    desc: &str,
    budget: Duration,
    mut once: impl FnMut() -> std::io::Result<bool>,
) -> std::io::Result<bool> {
    let (mut warm, mut max) = (WARMUP.get(ctx.profile), MAX_SAMPLES.get(ctx.profile));
    if icmp {
        (warm, max) = (warm.min(100), max / 2);
    }
    let (mut any, mut run) = (false, 0);
    for _ in 0..warm {
        if once()? {
            (any, run) = (true, 0);
        } else {
            run += 1;
        }
        if icmp && run >= 3 {
            break;
        }
    }
    if !any {
        return Ok(false);
    }
    let mut answered = Vec::new();
    let v = sample(ctx, max, budget, || {
        answered.push(once()?);
        Ok(())
    })?;
    let (name, what) = match icmp {
        true => (t.name("icmp"), "echoes unanswered"),
        false => (t.name("udp"), "datagrams lost"),
    };
    match answered.iter().filter(|&&a| !a).count() {
        0 => {}
        n => out.notes.push(format!("{name}: {n} {what} (not timed)")),
    }
    let kept = zip(v, answered).filter_map(|(x, a)| a.then_some(x));
    out.distribution(&name, "ns", desc, kept.collect());
    Ok(true)
}

/// UDP round trips to the peer's echo port; lost datagrams are counted, not timed.
fn udp(ctx: &Context, t: &PeerTarget, budget: Duration, out: &mut Outcome) -> anyhow::Result<()> {
    // Dropping this control connection, on return, ends the peer's UDP echo.
    let s = t.client.open(&Request::UdpEcho {
        max_size: UDP_MSG as u32,
    })?;
    let dest = SocketAddr::new(t.client.addr.ip(), s.port);
    let sock = super::udp_to(dest)?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut seq: u64 = 0;
    let mut buf = [0u8; 64];
    let once = || -> std::io::Result<bool> {
        seq += 1;
        sock.send(&seq.to_be_bytes())?;
        loop {
            match sock.recv(&mut buf) {
                Ok(n) if n == UDP_MSG && buf[..8] == seq.to_be_bytes() => return Ok(true),
                Ok(_) => continue, // a late reply to an earlier, timed-out datagram
                Err(e) if crate::peer::protocol::is_timeout(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    };
    let desc = format!("UDP ping-pong of {UDP_MSG} bytes with {}", t.label);
    if !lossy(ctx, t, out, false, &desc, budget, once)? {
        anyhow::bail!("no UDP reply from {dest} (a firewall may drop UDP)");
    }
    Ok(())
}

/// ICMP echoes, answered by the peer's kernel; why not, when none could be sent or answered.
fn icmp(ctx: &Context, t: &PeerTarget, budget: Duration, out: &mut Outcome) -> Result<(), String> {
    let std::net::IpAddr::V4(ip) = t.client.addr.ip() else {
        return Err("ICMP echo is implemented for IPv4 peers only".into());
    };
    let mut p = super::icmp::Pinger::open(ip, Duration::from_millis(500))?;
    let desc = format!("ICMP echo to {ip} via a {}, answered by the kernel", p.kind);
    let mut seq: u16 = 0;
    let once = || {
        seq = seq.wrapping_add(1);
        p.ping(seq)
    };
    match lossy(ctx, t, out, true, &desc, budget, once) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "no ICMP echo reply from {ip} (echo replies disabled or filtered)"
        )),
        Err(e) => Err(format!("ICMP echo failed: {e}")),
    }
}

const SPEC: Spec = Spec {
    id: "net.rtt",
    title: "Network round-trip time",
    description: "TCP and UDP ping-pong of a small message with the peer, and ICMP echo, as distributions (p50/p90/p99)",
    method: crate::method!("net.rtt"),
    budget: Some(PerProfile::scaled(ms(2500))),
    // A network round trip: the link, the stack and the peer's wake-up.
    ..Spec::NETWORK
};

/// Why every figure here is a lower bound.
const STACK: &str = "the protocol stack's path has no published cost in the parts table";

/// Why a remote peer's round trips get no prediction.
const REMOTE: &str = "a remote peer: its host's system calls and wake-ups and the path to it \
                      have no figure measured there or published, and this host's figures would \
                      price it as loopback";

fn lower(value: f64, formula: &str) -> Prediction {
    Prediction::new(value, format!("{formula}, a lower bound: {STACK}")).lower_bound()
}

impl Experiment for Rtt {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict_each(ctx, |p, peer| match peer {
            None => predict_loopback(p),
            Some(_) => p.withhold(&["tcp", "udp", "icmp"], REMOTE),
        })
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        each_target(ctx, measure, |o, t, plans| findings(o, t, plans))
    }
}

/// The loopback peer on a CPU of its own for the pinned figures: one per partner class.
pub(super) fn cross_plans(ctx: &Context) -> Vec<CrossPlan> {
    let allowed = &ctx.machine.cpu.allowed_cpus;
    ctx.machine.topology.cross_cpu_plans(ctx.cpu, allowed)
}

/// Lower bounds (docs/methods/net.rtt.md); the unpinned peer may run on the client's CPU
/// or another, so it gets the cheaper.
fn predict_loopback(p: &mut Predictions) {
    let sys = p.earlier("cpu.syscall", &["getppid"]);
    let calls = |n: f64| {
        let why = "method: the calls one round trip makes";
        Input::method("system_calls", n, "calls", why)
    };
    let four = calls(4.0);
    let sw = p.earlier("cpu.thread-switch", &["switch"]).positive();
    let why = "method: to the peer and back on one CPU";
    let two = Input::method("switches", 2.0, "switches", why);
    let pipe = p.earlier("cpu.thread-switch", &["pipe_cost"]);
    let plans = cross_plans(p.ctx());
    let wakes: Vec<Input> = plans
        .iter()
        .map(|plan| {
            let rt = format!("pipe_round_trip_cross_cpu{}", plan.suffix);
            let measured = p.earlier("cpu.thread-switch", &[&rt]);
            let why = match measured.why_missing().or(pipe.why_missing()) {
                Some(why) => why.to_string(),
                None => format!("cpu.thread-switch's {rt} was not above its pipe_cost"),
            };
            let v = measured.value().zip(pipe.value()).map(|(r, q)| r - q);
            let source = format!("measured: cpu.thread-switch {rt} less pipe_cost");
            let name = format!("cross_cpu_wake_ups{}", plan.suffix);
            Input::measured(&name, v.filter(|w| *w > 0.0), "ns", source, why)
        })
        .collect();
    let same = [&sys, &four, &sw, &two];
    let one_cpu = |v: &[f64]| lower(4.0 * v[0] + 2.0 * v[2], "4 x getppid + 2 x thread switch");
    if crate::platform::pin_support().reason().is_none() && !plans.is_empty() {
        p.state("tcp_same_cpu", &same, one_cpu);
        for (plan, w) in plans.iter().zip(&wakes) {
            let name = format!("tcp_cross_cpu{}", plan.suffix);
            or_calls(p, [&sys, &four], &name, &[w], |v| {
                lower(4.0 * v[0] + v[2], "4 x getppid + 2 cross-CPU wake-ups")
            });
        }
    }
    let either: Vec<&Input> = [&sw, &two].into_iter().chain(&wakes).collect();
    for name in ["tcp", "udp"] {
        if plans.is_empty() {
            // No other CPU: the peer shares the client's.
            p.state(name, &same, one_cpu);
            continue;
        }
        or_calls(p, [&sys, &four], name, &either, |v| {
            let cross = v[4..].iter().copied().fold(f64::INFINITY, f64::min);
            lower(
                4.0 * v[0] + (2.0 * v[2]).min(cross),
                "4 x getppid + the cheaper of 2 thread switches (the peer on the client's \
                 CPU) and 2 cross-CPU wake-ups (on another: the scheduler places it)",
            )
        });
    }
    // An ICMP echo is answered by the peer's kernel: the client's send and receive only.
    p.state("icmp", &[&sys, &calls(2.0)], |v| {
        lower(2.0 * v[0], "2 x getppid")
    });
}

/// `name` from the calls and `extra`, or from the calls alone where an extra input is missing.
fn or_calls(
    p: &mut Predictions,
    calls: [&Input; 2],
    name: &str,
    extra: &[&Input],
    f: impl FnOnce(&[f64]) -> Prediction,
) {
    match extra.iter().find_map(|i| i.why_missing()) {
        None => p.state(name, &[&calls[..], extra].concat(), f),
        Some(why) => p.state(name, &calls, |v| {
            let f = format!("4 x getppid ({why}; a lower bound: {STACK})");
            Prediction::new(4.0 * v[0], f).lower_bound()
        }),
    }
}

/// One target's round trips into `out`; the cross-CPU plans it measured.
fn measure(ctx: &Context, t: &PeerTarget, out: &mut Outcome) -> anyhow::Result<Vec<CrossPlan>> {
    if let Some(pid) = t.local.as_ref().and_then(|p| p.pid()) {
        out.notes.push(format!("loopback peer process id {pid}"));
    }
    // Pinned figures only on loopback: a remote peer's CPUs are not this machine's.
    let plans = match crate::platform::pin_support().reason() {
        _ if t.remote() => vec![],
        Some(why) => {
            out.notes.push(format!(
                "no pinned TCP figures: they need client and peer held on chosen CPUs, and {why}"
            ));
            vec![]
        }
        None => cross_plans(ctx),
    };
    let parts = if plans.is_empty() { 4 } else { 5 + plans.len() };
    let slice = ctx.budget * 8 / 10 / parts as u32;
    let client_cpu = ctx.cpu;
    let nodelay = format!("TCP_NODELAY ping-pong of {TCP_MSG} byte with {}", t.label);
    let mut runs = vec![(t.name("tcp"), None, nodelay)];
    if !plans.is_empty() {
        let what = "peer pinned to the client's CPU".into();
        runs.push(("tcp_same_cpu".into(), Some(client_cpu), what));
    }
    runs.extend(plans.iter().map(|p| {
        let what = format!("peer pinned to another CPU, {}", p.class_name());
        (format!("tcp_cross_cpu{}", p.suffix), Some(p.cpu), what)
    }));
    for (name, pin, what) in runs {
        (ctx.progress)(&name);
        let budget = if pin.is_none() { slice * 2 } else { slice };
        let (v, report, count, client) = tcp_echo(ctx, t, pin.map_or(-1, |c| c as i32), budget)?;
        let (messages, cpus) = (report.messages, &report.cpus);
        let peer_cpus = describe_cpus(cpus);
        let where_ = match (pin, main_cpu(cpus)) {
            (Some(pin), _) => format!("peer pinned to CPU {pin}"),
            _ if t.remote() => format!(
                "client on CPU {client_cpu} of this host, peer on its own host ({peer_cpus} there)"
            ),
            (None, Some((c, share))) => format!(
                "client pinned to CPU {client_cpu}, peer unpinned ran on {peer_cpus}: {} for {:.0}% of round trips",
                if c as usize == client_cpu { "same CPU" } else { "different CPUs" },
                share * 100.0
            ),
            (None, None) => format!("client pinned to CPU {client_cpu}, peer CPU unknown"),
        };
        out.check(echo_check(&name, count, messages, &where_));
        let Some(pin) = pin else {
            out.distribution(&name, "ns", &format!("{what}; {where_}"), v);
            continue;
        };
        let placed = placement_check(&name, &client, pin, report.pinned, cpus);
        if placed.passed {
            let desc = format!("TCP round trip, client on CPU {client_cpu}, {what} ({pin})");
            out.distribution(&name, "ns", &desc, v);
        } else {
            out.notes.push(format!(
                "{name}: not reported, client or peer did not stay on its CPU ({client_cpu}, {pin})"
            ));
        }
        out.check(placed);
    }
    (ctx.progress)("UDP round trips");
    if let Err(e) = udp(ctx, t, slice, out) {
        out.notes
            .push(format!("{}: not measured: {e:#}", t.name("udp")));
    }
    (ctx.progress)("ICMP echo");
    if let Err(why) = icmp(ctx, t, slice, out) {
        out.notes
            .push(format!("{}: skipped: {why}", t.name("icmp")));
        out.check(Check::sanity(&t.name(crate::grade::ICMP_CHECK), false, why));
    }
    Ok(plans)
}

fn findings(out: &mut Outcome, t: &PeerTarget, plans: &[CrossPlan]) {
    let (tcp, icmp, label) = (t.name("tcp"), t.name("icmp"), &t.label);
    if let Some(p) = percentiles(out, &tcp) {
        let [p50, p90, p99] = [p.p50, p.p90, p.p99].map(fmt_ns);
        let text = format!("TCP round trip with {label}: p50 {p50}, p90 {p90}, p99 {p99}.");
        out.finding(text, &[&tcp]);
    }
    for plan in plans {
        let name = format!("tcp_cross_cpu{}", plan.suffix);
        let (Some(s), Some(c)) = (percentiles(out, "tcp_same_cpu"), percentiles(out, &name)) else {
            continue;
        };
        // Decided on the medians' 95% intervals; no wake-up is counted, so the text
        // compares placements and names no mechanism.
        let verdict = match out.separation(&name, "tcp_same_cpu") {
            Separation::Above => "the cross-CPU placement is slower beyond both 95% intervals",
            Separation::Overlap => "within noise of each other (their 95% intervals overlap)",
            Separation::Below => {
                "the cross-CPU placement is the faster one here, beyond both 95% intervals"
            }
        };
        let (class, ratio) = (plan.class_name(), c.p50 / s.p50);
        let [cross, same] = [c.p50, s.p50].map(fmt_ns);
        let text = format!("With the peer on another CPU ({class}) a round trip costs {cross} against {same} on the same CPU ({ratio:.2}x): {verdict}.");
        out.finding(text, &["tcp_same_cpu", name.as_str()]);
    }
    if let (Some(x), Some(y)) = (percentiles(out, &tcp), percentiles(out, &icmp)) {
        let (ip, echo, share) = (t.client.addr.ip(), fmt_ns(y.p50), 100.0 * y.p50 / x.p50);
        let text = format!("An ICMP echo to {ip} (answered by the kernel) takes {echo}, {share:.0}% of the TCP round trip's p50.");
        out.finding(text, &[&icmp, &tcp]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_check_fails_when_either_side_moved() {
        let client = |away: u64| Place {
            cpu: 1,
            looks: 1000,
            away,
            ..Place::default()
        };
        let on = |c: u32| vec![(c, 1000u64)];
        assert!(placement_check("x", &client(0), 0, true, &on(0)).passed);
        // The client left its CPU for 2% of the round trips.
        let c = placement_check("x", &client(20), 0, true, &on(0));
        assert!(!c.passed && c.premise, "{}", c.detail);
        // The peer ran on the client's CPU, or could not pin itself.
        assert!(!placement_check("x", &client(0), 0, true, &on(1)).passed);
        assert!(!placement_check("x", &client(0), 0, false, &on(0)).passed);
        // No samples at all is no evidence.
        assert!(!placement_check("x", &Place::new(1), 0, true, &on(0)).passed);
    }

    #[test]
    fn echo_check_fails_on_lost_or_wrong_replies() {
        let ok = EchoCount {
            round_trips: 1000,
            mismatched: 0,
        };
        assert!(echo_check("tcp", ok, 1000, "same CPU").passed);
        // The peer saw fewer messages than the client counted round trips.
        let c = echo_check("tcp", ok, 999, "same CPU");
        assert!(!c.passed && c.premise, "{}", c.detail);
        // A reply that was not the message just sent.
        let bad = EchoCount {
            round_trips: 1000,
            mismatched: 1,
        };
        assert!(!echo_check("tcp", bad, 1000, "").passed);
        assert!(!echo_check("tcp", EchoCount::default(), 0, "").passed);
    }
}
