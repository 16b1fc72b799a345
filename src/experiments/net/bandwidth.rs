//! net.bandwidth: a timed TCP stream in each direction with large writes, its rate taken
//! on the receiving side in fixed intervals (the first, slow-start interval dropped).

use super::{each_target, predict_each, PeerTarget};
use crate::clock::Stopwatch;
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::{spec::ms, PerProfile, Spec};
use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::Harness;
use crate::machine::network::Nic;
use crate::peer::protocol::{is_timeout, Request};
use crate::results::{Check, Prediction};
use crate::units::fmt_bandwidth;
use std::io::{Read, Write};
use std::time::Duration;

pub struct NetBandwidth;

/// Size of each write and read (iperf3's default for TCP).
const CHUNK: usize = 128 * 1024;

/// Stream length per direction and the sampling interval.
const PLAN: PerProfile<(Duration, Duration)> = PerProfile::new(
    (ms(150), ms(15)),
    (ms(1500), ms(100)),
    (ms(5000), ms(250)),
    (ms(10000), ms(500)),
);

/// Per-interval rates in bytes/s from (elapsed ns, cumulative bytes) marks, dropping the
/// first interval (slow start, pipe filling) and tail fragments shorter than half one.
pub(crate) fn interval_rates(marks: &[(u64, u64)], interval: Duration) -> Vec<f64> {
    let min_ns = interval.as_nanos() as f64 / 2.0;
    marks
        .windows(2)
        .skip(1)
        .filter_map(|w| {
            let dt = w[1].0.saturating_sub(w[0].0) as f64;
            let db = w[1].1.saturating_sub(w[0].1) as f64;
            (dt >= min_ns).then(|| db / dt * 1e9)
        })
        .collect()
}

/// Client to peer: we write, the peer counts what arrives.
fn send(h: &Harness, t: &PeerTarget, dur: Duration, interval: Duration) -> anyhow::Result<Marks> {
    let mut s = t.client.open(&Request::Sink {
        interval_ms: interval.as_millis().max(1) as u32,
    })?;
    s.stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let buf = vec![0xa5u8; CHUNK];
    let end = h.deadline(dur);
    while !end.passed() {
        s.stream.write_all(&buf)?;
    }
    let r = s.finish_sink(Duration::from_secs(30))?;
    Ok((r.marks, r.bytes, r.elapsed_ns))
}

/// Peer to client: the peer writes for `dur`, we count what arrives.
fn receive(
    h: &Harness,
    t: &PeerTarget,
    dur: Duration,
    interval: Duration,
) -> anyhow::Result<Marks> {
    let mut s = t.client.open(&Request::Source {
        duration_ms: dur.as_millis() as u32,
        write_size: CHUNK as u32,
    })?;
    s.stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut buf = vec![0u8; CHUNK];
    let (mut marks, mut total, mut next) = (Vec::new(), 0u64, 0.0);
    // The stream's clock starts on its first byte: connection setup is not transfer time.
    let mut first: Option<Stopwatch> = None;
    let interval_ns = interval.as_nanos() as f64;
    loop {
        let n = match s.stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => {
                anyhow::bail!("the peer at {} stopped sending", t.client.addr)
            }
            Err(e) => return Err(e.into()),
        };
        let t0 = *first.get_or_insert_with(|| h.stopwatch());
        total += n as u64;
        let el = t0.elapsed_ns();
        if el >= next {
            marks.push((el as u64, total));
            next = el + interval_ns;
        }
    }
    let el = first.map(|t| t.elapsed_ns()).unwrap_or_default() as u64;
    marks.push((el, total));
    Ok((marks, total, el))
}

/// The link's line rate less framing, an upper bound, where the route to the `--peer`
/// host leaves through a device that reports a speed; otherwise withheld with the reason.
fn predict_to(p: &mut Predictions, peer: Option<&str>) {
    let metrics = ["send", "receive", "send_bits", "receive_bits"];
    let Some(spec) = peer else {
        return p.withhold(
            &metrics,
            "loopback: each byte is copied into and out of socket buffers that stay in cache, \
             and no cache-resident copy rate is measured before it (mem.bandwidth's copy_1t \
             copies a buffer far larger than the caches)",
        );
    };
    let route = crate::peer::client::resolve_peer(spec)
        .ok()
        .and_then(super::route_interface);
    let Some((iface, _)) = route else {
        return p.withhold(&metrics, "the route to the peer could not be read");
    };
    let nic = p.ctx().machine.network.iter().find(|n| n.name == iface);
    let why = match nic {
        None => format!("the route leaves through {iface}, which the machine description does not list"),
        Some(n) if n.speed_mbit_s.is_none() => format!(
            "the route leaves through {iface}, which reports no link speed, and no figure measured \
             on this host prices the path to the peer"
        ),
        Some(n) if n.virtual_device || n.loopback => format!(
            "the route leaves through {iface}, a virtual device whose reported speed is nominal, not a limit"
        ),
        Some(n) => return line_rate(p, &metrics, &iface, n),
    };
    p.withhold(&metrics, &why);
}

/// The line rate of `n` less the least framing: TCP payload per frame (IP 20 + TCP 20 of
/// headers at least) over its bits on the wire (Ethernet 14, FCS 4, preamble 8, gap 12).
fn line_rate(p: &mut Predictions, metrics: &[&str], iface: &str, n: &Nic) {
    let fact = |name, v: Option<f64>, unit, what| {
        Input::machine(name, v, unit, format!("machine: {iface} {what}"), "")
    };
    let bits = n.speed_mbit_s.map(|m| m as f64 * 1e6);
    let speed = fact("link_speed", bits, "bits/s", "link speed");
    let mtu = fact("mtu", Some(n.mtu.unwrap_or(1500) as f64), "bytes", "MTU");
    const F: &str = "link speed / 8 x (MTU - 40) / (MTU + 38): the line rate less the least \
                     IP, TCP and Ethernet overhead, an upper bound";
    for metric in metrics {
        let (k, f) = match metric.ends_with("_bits") {
            true => (8.0, format!("8 x ({F})")),
            false => (1.0, F.to_string()),
        };
        p.state(metric, &[&speed, &mtu], |v| {
            Prediction::new(k * v[0] / 8.0 * ((v[1] - 40.0) / (v[1] + 38.0)), f).upper_bound()
        });
    }
}

const SPEC: Spec = Spec {
    id: "net.bandwidth",
    title: "TCP bandwidth",
    description: "a timed TCP stream to and from the peer with 128 KiB writes; bytes/s and Gbit/s against the link speed",
    method: crate::method!("net.bandwidth"),
    // The link.
    ..Spec::NETWORK
};

impl Experiment for NetBandwidth {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        PLAN.get(p).0 * 2 + Duration::from_millis(if p == Profile::Smoke { 150 } else { 500 })
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict_each(ctx, predict_to)
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        // Peak bandwidth needs sender and receiver on separate CPUs when there are two:
        // let the scheduler place this thread (as iperf3 is placed) for the streams.
        let cpus = &ctx.machine.cpu.allowed_cpus;
        let unpinned = cpus.len() > 1 && crate::platform::set_affinity(cpus).is_ok();
        // `streams` fails unless both directions were measured.
        let res = each_target(ctx, streams, |out, t, _| {
            let names = [t.name("send"), t.name("receive")];
            let [send, receive] = names.each_ref().map(|name| {
                let med = out.median(name);
                let gbit = med * 8.0 / 1e9;
                format!("{name} {} ({gbit:.2} Gbit/s)", fmt_bandwidth(med))
            });
            let text = format!("TCP bandwidth with {}: {send}, {receive}.", t.label);
            out.finding(text, &[&names[0], &names[1]]);
        });
        if !unpinned {
            return res;
        }
        let _ = crate::platform::pin_to_cpu(ctx.cpu);
        let mut out = res?;
        out.notes.push(format!(
            "streams ran with this thread unpinned (CPUs {cpus:?}) so that sender and receiver can run in parallel"
        ));
        Ok(out)
    }
}

/// A stream in one direction: its (elapsed ns, cumulative bytes) marks, bytes and ns in all.
type Stream = fn(&Harness, &PeerTarget, Duration, Duration) -> anyhow::Result<Marks>;
type Marks = (Vec<(u64, u64)>, u64, u64);

fn streams(ctx: &Context, t: &PeerTarget, out: &mut Outcome) -> anyhow::Result<()> {
    let (dur, interval) = PLAN.get(ctx.profile);
    let label = &t.label;
    let h = ctx.harness(1);
    let ways: [(&str, &str, Stream); 2] = [
        ("send", "client -> peer", send),
        ("receive", "peer -> client", receive),
    ];
    for (base, dir, stream) in ways {
        let name = &t.name(base);
        (ctx.progress)(name);
        let (marks, bytes, ns) = stream(&h, t, dur, interval)?;
        let rates = interval_rates(&marks, interval);
        let n = rates.len();
        if n < 3 {
            anyhow::bail!("{name}: only {n} usable intervals in the stream");
        }
        let avg = bytes as f64 / ns as f64 * 1e9;
        let med = crate::stats::median(&rates);
        let (m, a) = (fmt_bandwidth(med), fmt_bandwidth(avg));
        out.check(Check::sanity(
            &format!("{name}: interval median agrees with the stream average"),
            (med / avg - 1.0).abs() < 0.25,
            format!("median {m} vs average {a} over the whole stream"),
        ));
        let bits: Vec<f64> = rates.iter().map(|r| r * 8.0).collect();
        let (kib, ms) = (CHUNK / 1024, interval.as_millis());
        let what =
            format!("TCP stream {dir} ({label}), {kib} KiB writes, per-{ms} ms interval rates");
        out.metric(name, "bytes/s", &what, rates);
        let what = format!("the same in bits/s ({dir}, {label})");
        out.metric(&format!("{name}_bits"), "bits/s", &what, bits);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_drop_the_first_interval_and_short_tails() {
        let ms = 1_000_000u64;
        // 1 MB per 100 ms = 10 MB/s; first interval slower, tail 10 ms.
        let marks = [
            (0, 0),
            (100 * ms, 100_000),
            (200 * ms, 1_100_000),
            (300 * ms, 2_100_000),
            (310 * ms, 2_200_000),
        ];
        let r = interval_rates(&marks, Duration::from_millis(100));
        assert_eq!(r.len(), 2);
        for x in r {
            assert!((x - 1e7).abs() < 1.0, "{x}");
        }
    }
}
