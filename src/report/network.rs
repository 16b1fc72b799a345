//! The `--peer` run's own section, for every renderer: the peer's machine as it described
//! itself, and each network figure on loopback beside the same figure against the peer,
//! with remote/loopback and, for bandwidth, the share of the link's speed reached (the
//! slower of this host's interface on the route and the peer's, where either says).
//! Empty for a run without `--peer`.

use super::plot::esc;
use crate::results::{PeerRecord, RunResults};
use crate::units::{fmt_bytes, fmt_value};
use std::fmt::Write;

/// One figure on both targets.
pub(crate) struct Pair {
    pub experiment: String,
    pub metric: String,
    pub unit: String,
    pub loopback: f64,
    pub remote: f64,
    /// The remote figure as a share of the link's speed (bandwidths only).
    pub link_share: Option<f64>,
}

impl Pair {
    pub(crate) fn ratio(&self) -> f64 {
        self.remote / self.loopback
    }
}

/// The link's speed in bits/s and what it is: the slower of the two interfaces that say.
pub(crate) fn link(p: &PeerRecord) -> Option<(f64, String)> {
    let local = p.local_nic_speed_mbit_s.map(|s| {
        (
            s,
            format!("this host's {}", p.local_nic.as_deref().unwrap_or("?")),
        )
    });
    let m = p.machine.as_ref();
    let remote = m.and_then(|m| m.nic_speed_mbit_s).map(|s| {
        let nic = m.and_then(|m| m.nic.as_deref()).unwrap_or("?");
        (s, format!("the peer's {nic}"))
    });
    let (mbit, what) = [local, remote].into_iter().flatten().min_by_key(|x| x.0)?;
    Some((mbit as f64 * 1e6, format!("{what}, {mbit} Mbit/s")))
}

/// Every `remote_` figure of the net experiments beside its loopback one.
pub(crate) fn pairs(r: &RunResults) -> Vec<Pair> {
    let link = r.config.peer().and_then(link).map(|l| l.0);
    let mut v = Vec::new();
    for e in r.experiments.iter().filter(|e| e.id.starts_with("net.")) {
        for m in &e.metrics {
            let Some(base) = m.name.strip_prefix("remote_") else {
                continue;
            };
            let Some(l) = e.metric(base).filter(|l| l.unit == m.unit) else {
                continue;
            };
            let bits = match m.unit.as_str() {
                "bytes/s" => Some(8.0),
                "bits/s" => Some(1.0),
                _ => None,
            };
            v.push(Pair {
                experiment: e.id.clone(),
                metric: base.to_string(),
                unit: m.unit.clone(),
                loopback: l.summary.median,
                remote: m.summary.median,
                link_share: bits.zip(link).map(|(k, l)| k * m.summary.median / l),
            });
        }
    }
    v
}

/// The peer and its machine, as key and text.
pub(crate) fn peer_facts(p: &PeerRecord) -> Vec<(String, String)> {
    let mut v = vec![(
        "peer".to_string(),
        format!(
            "{} ({})",
            p.name.as_deref().unwrap_or("?"),
            p.address
                .clone()
                .flatten()
                .unwrap_or_else(|| "not resolved".into())
        ),
    )];
    match &p.machine {
        Some(m) => {
            let cores = match (m.logical_cpus, m.physical_cores) {
                (Some(l), Some(c)) => format!("{l} logical CPUs on {c} cores"),
                (Some(l), None) => format!("{l} logical CPUs"),
                _ => "CPU count not said".into(),
            };
            let mem = m.memory_bytes.map(|b| fmt_bytes(b as f64));
            let parts = [
                m.hostname.clone(),
                m.cpu_model.clone(),
                Some(cores),
                mem.map(|m| format!("{m} memory")),
            ];
            let os = [m.os.clone(), m.os_version.clone(), m.arch.clone()];
            let join = |x: &[Option<String>]| x.iter().flatten().cloned().collect::<Vec<_>>();
            v.push(("peer machine".into(), join(&parts).join(", ")));
            v.push(("peer system".into(), join(&os).join(", ")));
            let nic = match (&m.nic, m.nic_speed_mbit_s) {
                (Some(n), Some(s)) => format!("{n}, {s} Mbit/s"),
                (Some(n), None) => format!("{n}, link speed not reported"),
                _ => "not identified".into(),
            };
            let mtu = m.nic_mtu.map(|x| format!(", MTU {x}")).unwrap_or_default();
            v.push(("peer interface".into(), format!("{nic}{mtu}")));
            for n in m.notes.iter().flatten() {
                v.push(("peer note".into(), n.clone()));
            }
        }
        None => v.push((
            "peer machine".into(),
            p.undescribed
                .clone()
                .unwrap_or_else(|| "not described".into()),
        )),
    }
    let local = match (&p.local_nic, p.local_nic_speed_mbit_s) {
        (Some(n), Some(s)) => format!("{n}, {s} Mbit/s"),
        (Some(n), None) => format!("{n}, link speed not reported"),
        _ => "not found".into(),
    };
    v.push(("this host's interface to it".into(), local));
    if let Some((_, what)) = link(p) {
        v.push(("link speed".into(), what));
    }
    v
}

/// The share of the link; above 100% the reported speed is no limit (a virtual
/// interface's, such as veth's 10000 Mbit/s, is nominal), and is said so.
fn share(p: &Pair) -> String {
    match p.link_share {
        Some(s) if s > 1.0 => format!(
            "{:.0}% (above the reported speed: no limit here)",
            100.0 * s
        ),
        Some(s) => format!("{:.0}%", 100.0 * s),
        None => String::new(),
    }
}

const INTRO: &str = "Each network figure on loopback (this host's own peer process) and against the peer in the same run; remote/loopback is the ratio of the medians, and a bandwidth's share of the link is the remote figure over the slower interface's reported speed.";

/// The section as Markdown ("" without `--peer`).
pub(crate) fn markdown(r: &RunResults) -> String {
    let Some(p) = r.config.peer() else {
        return String::new();
    };
    let mut s = String::from("## Loopback and remote\n\n");
    for (k, v) in peer_facts(p) {
        let _ = writeln!(s, "- **{k}**: {}", v.replace('|', "\\|"));
    }
    let _ = writeln!(s, "\n{INTRO}\n");
    s.push_str("| experiment | metric | loopback | remote | remote/loopback | share of link |\n");
    s.push_str("| --- | --- | ---: | ---: | ---: | ---: |\n");
    for x in pairs(r) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2}x | {} |",
            x.experiment,
            x.metric,
            fmt_value(x.loopback, &x.unit),
            fmt_value(x.remote, &x.unit),
            x.ratio(),
            share(&x)
        );
    }
    s.push('\n');
    s
}

/// The section as HTML ("" without `--peer`).
pub(crate) fn html(r: &RunResults) -> String {
    let Some(p) = r.config.peer() else {
        return String::new();
    };
    let mut h = String::from("<h2 id=\"network\">Loopback and remote</h2><dl class=\"facts\">");
    for (k, v) in peer_facts(p) {
        let _ = write!(h, "<dt>{}</dt><dd>{}</dd>", esc(&k), esc(&v));
    }
    let _ = write!(
        h,
        "</dl><p>{}</p><table><thead><tr><th>experiment</th><th>metric</th><th>loopback</th>\
         <th>remote</th><th>remote/loopback</th><th>share of link</th></tr></thead><tbody>",
        esc(INTRO)
    );
    for x in pairs(r) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{:.2}x</td><td class=\"num\">{}</td></tr>",
            esc(&x.experiment),
            esc(&x.metric),
            esc(&fmt_value(x.loopback, &x.unit)),
            esc(&fmt_value(x.remote, &x.unit)),
            x.ratio(),
            share(&x)
        );
    }
    h.push_str("</tbody></table>\n");
    h
}

/// The section as terminal lines, each through `wrap` ("" without `--peer`).
pub(crate) fn terminal(r: &RunResults, wrap: impl Fn(&str) -> String) -> String {
    let Some(p) = r.config.peer() else {
        return String::new();
    };
    let mut s = String::new();
    for (k, v) in peer_facts(p) {
        s.push_str(&wrap(&format!("{k}: {v}")));
    }
    for x in pairs(r) {
        let link = match x.link_share {
            Some(_) => format!(", {} of the link", share(&x)),
            None => String::new(),
        };
        s.push_str(&wrap(&format!(
            "{} {}: loopback {}, remote {} ({:.2}x{link})",
            x.experiment,
            x.metric,
            fmt_value(x.loopback, &x.unit),
            fmt_value(x.remote, &x.unit),
            x.ratio()
        )));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, unit: &str, median: f64) -> serde_json::Value {
        serde_json::json!({"name": name, "unit": unit, "summary": {"n": 3, "median": median,
            "mean": median, "stddev": 0.0, "min": median, "max": median,
            "ci95": [median, median], "cov": 0.0, "outliers": 0}})
    }

    #[test]
    fn pairs_ratios_and_the_link_share() {
        let exp = |id: &str, metrics| {
            serde_json::json!({"id": id, "area": "net", "title": "t", "duration_s": 1.0,
                "status": "ok", "metrics": metrics})
        };
        let doc = serde_json::json!({"schema_version": 1,
          "tool": {"name": "osmeter", "version": "0"}, "started_at": "", "duration_s": 1.0,
          "machine": {},
          "config": {"peer": {"name": "b", "address": "10.0.0.2:9197", "local_nic": "eth0",
            "local_nic_speed_mbit_s": 10000, "machine": {"cpu_model": "Xeon", "logical_cpus": 4,
            "nic": "Ethernet", "nic_speed_mbit_s": 1000, "os": "Windows 10 Pro"}}},
          "experiments": [
            exp("net.bandwidth", serde_json::json!([m("send", "bytes/s", 4e9),
                m("remote_send", "bytes/s", 1e8)])),
            exp("net.rtt", serde_json::json!([m("tcp", "ns", 1e4),
                m("remote_tcp", "ns", 2.5e5), m("remote_udp", "ns", 1.0)]))]});
        let r: RunResults = serde_json::from_value(doc).unwrap();
        let v = pairs(&r);
        assert_eq!(v.len(), 2, "remote_udp has no loopback figure");
        // The slower interface (the peer's 1 Gbit/s) is the link: 800 Mbit/s is 80% of it.
        assert!((v[0].ratio() - 0.025).abs() < 1e-9);
        assert!((v[0].link_share.unwrap() - 0.8).abs() < 1e-9);
        assert!((v[1].ratio() - 25.0).abs() < 1e-9 && v[1].link_share.is_none());
        let md = markdown(&r);
        assert!(
            md.contains("| net.rtt | tcp |") && md.contains("25.00x"),
            "{md}"
        );
        assert!(md.contains("the peer's Ethernet, 1000 Mbit/s"), "{md}");
        assert!(md.contains("Xeon, 4 logical CPUs"), "{md}");
    }
}
