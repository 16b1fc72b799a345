//! The net helpers, and the experiments' predictions as the runner asks for them (`Experiment::predict` in
//! a context whose earlier results a test records), on loopback and against a `--peer`.

use super::{bandwidth::NetBandwidth, connect::Connect, rtt::Rtt};
use super::{describe_cpus, main_cpu, route_interface};
use crate::experiments::testing::{recorded, World};
use crate::experiments::{Experiment, Outcome};
use crate::results::{Bound, Prediction};
use std::collections::BTreeMap;

/// A `--peer` on loopback: its route leaves through `lo`, which reports no link speed.
const PEER: &str = "127.0.0.1:9";

/// An earlier result of `id` whose metrics read the given medians.
fn earlier(id: &str, metrics: &[(&str, f64)]) -> crate::results::ExperimentResult {
    let mut o = Outcome::default();
    for (name, v) in metrics {
        o.metric(name, "", "", vec![*v; 9]);
    }
    recorded(id, o)
}

fn predict(w: &World, exp: &dyn Experiment) -> BTreeMap<String, Prediction> {
    w.with_ctx(|ctx| exp.predict(ctx)).into_iter().collect()
}

fn withheld<'p>(p: &'p BTreeMap<String, Prediction>, metric: &str) -> &'p str {
    let x = &p[metric];
    x.withheld
        .as_deref()
        .unwrap_or_else(|| panic!("{metric} predicted: {x:?}"))
}

/// Issue 34 item 7: no figure of this host's memory prices a network link. A remote peer
/// whose route reports no link speed gets no bandwidth prediction, with the reason, and
/// loopback none from copy_1t; where the interface reports a speed the line rate less
/// framing is an upper bound; a virtual device's speed is nominal and prices nothing.
#[test]
fn bandwidth_from_the_link_or_withheld() {
    let clock = crate::clock::MockClock::new(1);
    let mut w = World::live(&clock);
    w.earlier = vec![earlier("mem.bandwidth", &[("copy_1t", 2e10)])];
    w.options.peer = Some(PEER.into());
    w.machine.network.retain(|n| n.name != "lo");
    let mut lo = crate::machine::network::Nic {
        name: "lo".into(),
        loopback: true,
        mtu: Some(1500),
        ..Default::default()
    };
    w.machine.network.push(lo.clone());
    let p = predict(&w, &NetBandwidth);
    for m in ["send", "receive", "send_bits", "receive_bits"] {
        assert!(withheld(&p, m).contains("cache-resident"), "{m}");
        let why = withheld(&p, &format!("remote_{m}"));
        assert!(why.contains("lo, which reports no link speed"), "{why}");
    }
    assert_eq!(p.len(), 8, "{p:?}");

    lo.speed_mbit_s = Some(1000);
    w.machine.network.pop();
    w.machine.network.push(lo.clone());
    let why = withheld(&predict(&w, &NetBandwidth), "remote_send").to_string();
    assert!(why.contains("nominal"), "{why}");

    lo.loopback = false;
    w.machine.network.pop();
    w.machine.network.push(lo);
    let p = predict(&w, &NetBandwidth);
    let line = 1e9 / 8.0 * 1460.0 / 1538.0;
    for (m, k) in [("remote_send", 1.0), ("remote_receive_bits", 8.0)] {
        let x = &p[m];
        assert_eq!(x.bound, Some(Bound::Upper), "{m}: {x:?}");
        assert!(
            (x.value / (k * line) - 1.0).abs() < 1e-9,
            "{m}: {}",
            x.value
        );
        assert!(!x.inputs.contains_key("copy_bandwidth"), "{x:?}");
    }
}

/// Issue 34 item 7: connect is a handshake the peer's kernel answers, not net.rtt's TCP
/// round trip with the peer's wake-ups; it is bounded by the same peer's ICMP echo less
/// one call. close awaits nothing and gets no half round trip on either target.
#[test]
fn connect_from_the_echo_not_the_round_trip() {
    let clock = crate::clock::MockClock::new(1);
    let mut w = World::live(&clock);
    let rtt = [
        ("tcp", 50_000.0),
        ("icmp", 6_000.0),
        ("remote_tcp", 90_000.0),
    ];
    w.earlier = vec![
        earlier("cpu.syscall", &[("getppid", 100.0)]),
        earlier("net.rtt", &rtt),
    ];
    w.options.peer = Some(PEER.into());
    let p = predict(&w, &Connect);
    let connect = &p["connect"];
    assert_eq!(connect.bound, Some(Bound::Lower), "{connect:?}");
    assert_eq!(connect.value, 5_900.0);
    assert_eq!(connect.inputs["icmp_echo"].source, "measured: net.rtt icmp");
    assert_eq!(p["open_close"].value, 6_100.0);
    assert!(p.values().all(|x| !x.inputs.contains_key("tcp_round_trip")));
    assert!(withheld(&p, "close").contains("loopback"));
    assert!(withheld(&p, "remote_close").contains("remote peer"));
    // The remote bounds take the remote echo, never the loopback one.
    assert!(withheld(&p, "remote_connect").contains("net.rtt's remote_icmp"));
}

/// Issue 34 item 7: the unpinned peer may run on the client's CPU or on another, so the
/// unpinned round trips are bounded by the cheaper placement (here the cross-CPU wake-ups,
/// 1000 ns against two 1000 ns switches), and every pinned class is predicted; a remote
/// peer is never priced at this host's figures.
#[test]
fn unpinned_round_trips_take_the_cheaper_placement() {
    let clock = crate::clock::MockClock::new(1);
    let mut w = World::live(&clock);
    let plans = w.with_ctx(super::rtt::cross_plans);
    let mut switch = vec![("switch".to_string(), 1_000.0), ("pipe_cost".into(), 500.0)];
    for plan in &plans {
        let name = format!("pipe_round_trip_cross_cpu{}", plan.suffix);
        switch.push((name, 1_500.0));
    }
    let switch: Vec<(&str, f64)> = switch.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    w.earlier = vec![
        earlier("cpu.syscall", &[("getppid", 100.0)]),
        earlier("cpu.thread-switch", &switch),
    ];
    w.options.peer = Some(PEER.into());
    let p = predict(&w, &Rtt);
    let (same, cross) = (400.0 + 2_000.0, 400.0 + 1_000.0);
    let unpinned = if plans.is_empty() { same } else { cross };
    for m in ["tcp", "udp"] {
        assert_eq!(p[m].value, unpinned, "{m}: {:?}", p[m]);
        assert_eq!(p[m].bound, Some(Bound::Lower));
    }
    if crate::platform::pin_support().reason().is_none() && !plans.is_empty() {
        assert_eq!(p["tcp_same_cpu"].value, same);
        for plan in &plans {
            assert_eq!(p[&format!("tcp_cross_cpu{}", plan.suffix)].value, cross);
        }
    }
    for m in ["remote_tcp", "remote_udp", "remote_icmp"] {
        assert!(withheld(&p, m).contains("remote peer"), "{m}");
    }
}

#[test]
fn loopback_routes_through_lo() {
    let (iface, ip) = route_interface("127.0.0.1:9".parse().unwrap()).unwrap();
    assert_eq!(iface, "lo");
    assert!(ip.is_loopback());
    let m = crate::machine::Machine::gather();
    let nic = |name: &str| m.network.iter().find(|n| n.name == name);
    // Loopback reports no link speed; a made-up name is no NIC.
    assert_eq!(nic("lo").and_then(|n| n.speed_mbit_s), None);
    assert!(nic("../etc").is_none());
}

#[test]
fn cpu_descriptions() {
    assert_eq!(describe_cpus(&[(1, 1), (0, 3)]), "CPU 0 (75%), CPU 1 (25%)");
    assert_eq!(main_cpu(&[(1, 1), (0, 3)]), Some((0, 0.75)));
    assert_eq!(main_cpu(&[]), None);
}
