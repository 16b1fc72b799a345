//! A real second host: a network namespace joined to this one by a veth pair, with
//! `osmeter serve` running inside it. The net experiments run against it with --peer
//! (loopback and remote figures side by side, and the peer's own description), then the
//! veth is shaped with tbf to known rates and net.bandwidth's remote figures must report
//! each rate within 10%. Everything is removed afterwards, also when the test fails.
//!
//! Needs root and iproute2 (ip, tc); skips with a message otherwise. Traffic goes only to
//! the addresses of the veth pair this test creates (10.213.0.0/16, a /30 per process).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "namespace-test";

fn run(cmd: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .map_err(|e| format!("{}: {e}", cmd.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The namespace, the veth pair and the peer; Drop removes all of them, also on panic.
struct Host2 {
    ns: String,
    veth_host: String,
    veth_ns: String,
    host_ip: String,
    ns_ip: String,
    serve: Option<Child>,
}

impl Host2 {
    fn create() -> Result<Host2, String> {
        // Tests of this binary run in parallel in one process: a counter tells them apart.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        // A /30 unique per process id and counter (mod 16384): concurrent runs never collide.
        let p = (pid * 4 + k) % 16384;
        let (a, b) = (p >> 6, (p & 63) << 2);
        let h = Host2 {
            ns: format!("osmns{pid}x{k}"),
            veth_host: format!("osmh{pid}x{k}"),
            veth_ns: format!("osmn{pid}x{k}"),
            host_ip: format!("10.213.{a}.{}", b + 1),
            ns_ip: format!("10.213.{a}.{}", b + 2),
            serve: None,
        };
        // From here on Drop cleans up whatever was made.
        run(&["ip", "netns", "add", &h.ns])?;
        run(&[
            "ip",
            "link",
            "add",
            &h.veth_host,
            "type",
            "veth",
            "peer",
            "name",
            &h.veth_ns,
        ])?;
        run(&["ip", "link", "set", &h.veth_ns, "netns", &h.ns])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/30", h.host_ip),
            "dev",
            &h.veth_host,
        ])?;
        run(&["ip", "link", "set", &h.veth_host, "up"])?;
        run(&[
            "ip",
            "-n",
            &h.ns,
            "addr",
            "add",
            &format!("{}/30", h.ns_ip),
            "dev",
            &h.veth_ns,
        ])?;
        run(&["ip", "-n", &h.ns, "link", "set", &h.veth_ns, "up"])?;
        run(&["ip", "-n", &h.ns, "link", "set", "lo", "up"])?;
        Ok(h)
    }

    /// Starts `osmeter serve` inside the namespace, bound to its veth address.
    fn start_serve(&mut self) -> Result<SocketAddr, String> {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                env!("CARGO_BIN_EXE_osmeter"),
                "serve",
            ])
            .args([
                "--bind",
                &self.ns_ip,
                "--port",
                "0",
                "--token",
                TOKEN,
                "--quiet",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start serve: {e}"))?;
        let out = child.stdout.take();
        self.serve = Some(child);
        let mut line = String::new();
        BufReader::new(out.ok_or("no stdout")?)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        line.trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("serve printed {line:?}"))
    }

    /// Shapes both directions (egress of each veth end) to `mbit` Mbit/s.
    fn shape(&self, mbit: u32) -> Result<(), String> {
        let rate = format!("{mbit}mbit");
        // Burst of at least one timer tick at this rate and a 64 KiB GSO segment.
        let burst = format!("{}kb", (mbit as u64 * 1_000_000 / 8 / 100 / 1024).max(128));
        let tbf = [
            "root", "tbf", "rate", &rate, "burst", &burst, "latency", "50ms",
        ];
        let mut host = vec!["tc", "qdisc", "replace", "dev", &self.veth_host];
        host.extend(tbf);
        run(&host)?;
        let mut ns = vec![
            "tc",
            "-n",
            &self.ns,
            "qdisc",
            "replace",
            "dev",
            &self.veth_ns,
        ];
        ns.extend(tbf);
        run(&ns)?;
        Ok(())
    }
}

impl Drop for Host2 {
    fn drop(&mut self) {
        if let Some(mut c) = self.serve.take() {
            // `ip netns exec` execs the binary, so this is serve itself.
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting the namespace destroys its veth end and with it the pair.
        let _ = run(&["ip", "netns", "del", &self.ns]);
        let _ = run(&["ip", "link", "del", &self.veth_host]);
    }
}

/// Runs osmeter against the peer and returns the results document.
fn osmeter(peer: SocketAddr, only: &str, profile: &str) -> serde_json::Value {
    osmeter_in(peer, only, profile, &tempfile::tempdir().unwrap())
}

/// As `osmeter`, its results folder in `out_dir`.
fn osmeter_in(
    peer: SocketAddr,
    only: &str,
    profile: &str,
    out_dir: &tempfile::TempDir,
) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args([
            "run",
            "--profile",
            profile,
            "--only",
            only,
            "--json",
            "--no-history",
        ])
        .args(["--peer", &peer.to_string(), "--peer-token", TOKEN])
        .arg("--out")
        .arg(out_dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "osmeter failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap()
}

fn experiment<'a>(r: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    r["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap()
}

fn median(e: &serde_json::Value, metric: &str) -> f64 {
    e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == metric)
        .unwrap_or_else(|| panic!("no metric {metric} in {e}"))["summary"]["median"]
        .as_f64()
        .unwrap()
}

fn metric<'a>(e: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no metric {name} in {e}"))
}

/// Issue 34 item 7, through a real second host: the veth's speed is nominal, so the remote
/// bandwidth gets no prediction (and no copy rate stands in), with the reason; connect is
/// bounded by the same peer's ICMP echo, not net.rtt's round trip; the unpinned round
/// trip's bound is no higher than either pinned placement's.
fn predictions_against_the_namespace_host(r: &serde_json::Value, host: &Host2) {
    let bw = experiment(r, "net.bandwidth");
    let notes = bw["notes"].to_string();
    for m in ["send", "receive_bits", "remote_send", "remote_receive_bits"] {
        assert!(metric(bw, m)["prediction"].is_null(), "{m}: {bw}");
    }
    let why = format!(
        "no prediction for remote_send: the route leaves through {}, a virtual device",
        host.veth_host
    );
    assert!(notes.contains(&why), "{notes}");
    let c = experiment(r, "net.connect");
    for (m, echo) in [("connect", "icmp"), ("remote_connect", "remote_icmp")] {
        let p = &metric(c, m)["prediction"];
        if p.is_null() {
            // ICMP refused: the bound is withheld with net.rtt's echo as the reason.
            assert!(c["notes"].to_string().contains(echo), "{m}: {c}");
            continue;
        }
        assert_eq!(p["bound"], "lower", "{m}: {p}");
        let want = format!("measured: net.rtt {echo}");
        assert_eq!(
            p["inputs"]["icmp_echo"]["source"],
            want.as_str(),
            "{m}: {p}"
        );
        assert!(p["inputs"].get("tcp_round_trip").is_none(), "{m}: {p}");
    }
    let rtt = experiment(r, "net.rtt");
    let bound = |m: &str| metric(rtt, m)["prediction"]["value"].as_f64();
    let tcp = bound("tcp").expect("a bound for the unpinned tcp");
    for m in ["tcp_same_cpu", "tcp_cross_cpu"] {
        if let Some(b) = rtt["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == m)
        {
            let b = b["prediction"]["value"].as_f64().unwrap_or(f64::INFINITY);
            assert!(tcp <= b, "unpinned bound {tcp} above {m}'s {b}");
        }
    }
    assert!(metric(rtt, "remote_tcp")["prediction"].is_null(), "{rtt}");
}

/// The namespace host, or None after `common::skip` says what is missing.
fn namespace_host(test: &str) -> Option<Host2> {
    if !common::is_root() {
        common::skip(
            test,
            "needs root to create a network namespace and veth pair",
        );
        return None;
    }
    if !have("ip") || !have("tc") {
        common::skip(test, "needs iproute2 (ip and tc)");
        return None;
    }
    match Host2::create() {
        Ok(h) => Some(h),
        Err(e) => {
            common::skip(test, &format!("cannot create the namespace host: {e}"));
            None
        }
    }
}

#[test]
fn net_experiments_against_a_namespace_host() {
    const TEST: &str = "net_experiments_against_a_namespace_host";
    let Some(mut host) = namespace_host(TEST) else {
        return;
    };
    let peer = host.start_serve().expect("serve in the namespace");
    assert_eq!(peer.ip().to_string(), host.ns_ip);

    // Unshaped, quick: every net experiment measures loopback and the peer, each figure
    // labelled with its target, and the report sets them side by side with their ratio.
    let dir = tempfile::tempdir().unwrap();
    // The primitives first, so the net predictions have their inputs.
    let only = "cpu.syscall,cpu.thread-switch,net.*";
    let r = osmeter_in(peer, only, "quick", &dir);
    let pairs = [
        ("net.rtt", "tcp"),
        ("net.rtt", "udp"),
        ("net.bandwidth", "send_bits"),
        ("net.bandwidth", "receive_bits"),
        ("net.connect", "connect"),
    ];
    for id in ["net.rtt", "net.bandwidth", "net.connect"] {
        let e = experiment(&r, id);
        assert_eq!(e["status"], "ok", "{id}: {e}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("remote peer {peer}"))
                && text.contains("loopback peer 127.0.0.1"),
            "{id} not labelled with both targets: {text}"
        );
    }
    let report = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path().join("report.md")).unwrap())
        .next()
        .expect("a results folder");
    for (id, m) in pairs {
        let e = experiment(&r, id);
        let (local, remote) = (median(e, m), median(e, &format!("remote_{m}")));
        // One kernel serves both ends of either path: the veth adds a device hop and a
        // namespace, not a factor of ten either way.
        let ratio = remote / local;
        eprintln!("{id} {m}: loopback {local:.0}, remote {remote:.0}, remote/loopback {ratio:.2}");
        assert!(ratio > 0.1 && ratio < 10.0, "{id} {m}: {ratio}");
        let row = format!("| {id} | {m} | ");
        let line = report.lines().find(|l| l.starts_with(&row));
        let shown = format!("{ratio:.2}x");
        assert!(
            line.is_some_and(|l| l.contains(&shown)),
            "{row}... {shown} not in the report's loopback and remote table:\n{report}"
        );
    }
    predictions_against_the_namespace_host(&r, &host);
    // The veth reports a speed on both ends: the bandwidth rows give a share of the link.
    let send = report
        .lines()
        .find(|l| l.starts_with("| net.bandwidth | send_bits |"));
    assert!(send.is_some_and(|l| l.contains('%')), "{report}");
    // The peer described its machine: the namespace's side of the veth, this kernel.
    let m = &r["config"]["peer"]["machine"];
    eprintln!("peer machine: {m}");
    assert_eq!(m["nic"], host.veth_ns.as_str(), "{m}");
    assert!(m["nic_speed_mbit_s"].as_u64().is_some_and(|s| s > 0), "{m}");
    assert!(m["logical_cpus"].as_u64().is_some_and(|n| n >= 1), "{m}");
    assert!(
        m["memory_bytes"].as_u64().is_some_and(|b| b > 1 << 26),
        "{m}"
    );
    assert!(
        m["os"].as_str().is_some_and(|o| o.starts_with("Linux")),
        "{m}"
    );
    assert!(
        m["cpu_model"].as_str().is_some_and(|c| !c.is_empty()),
        "{m}"
    );
    assert_eq!(r["config"]["peer"]["local_nic"], host.veth_host.as_str());
    assert!(report.contains("- **peer machine**: "), "{report}");

    // Shaped: net.bandwidth must report the tbf rate within 10% in both directions.
    for mbit in [50u32, 200] {
        host.shape(mbit).expect("tc tbf");
        let r = osmeter(peer, "net.bandwidth", "quick");
        let e = experiment(&r, "net.bandwidth");
        assert_eq!(e["status"], "ok", "{e}");
        let want = mbit as f64 * 1e6;
        for m in ["remote_send_bits", "remote_receive_bits"] {
            let got = median(e, m);
            eprintln!(
                "tbf {mbit} Mbit/s: {m} {:.1} Mbit/s ({:+.1}%)",
                got / 1e6,
                100.0 * (got / want - 1.0)
            );
            assert!(
                (got / want - 1.0).abs() < 0.10,
                "{m}: {:.1} Mbit/s against a {mbit} Mbit/s shaper",
                got / 1e6
            );
        }
    }
    drop(host);
    std::thread::sleep(Duration::from_millis(10));
}

/// A/B: the namespace host's link shaped from 400 to 200 Mbit/s between two quick
/// net.bandwidth runs; compare must flag both directions, and `--gate` call them
/// regressed and exit 3.
#[test]
fn compare_flags_a_halved_link() {
    const TEST: &str = "compare_flags_a_halved_link";
    let Some(mut host) = namespace_host(TEST) else {
        return;
    };
    let peer = host.start_serve().expect("serve in the namespace");
    let dir = tempfile::tempdir().unwrap();
    // The gate calls two runs of different trust grades inconclusive (for a link's
    // figure, leaving out the core's clock and issue rate): a pair whose grades differ
    // so (a busy or stolen CI host) is not the premise this test is about; it is
    // retaken, at most three times.
    let grade_of = |r: &serde_json::Value| {
        r["experiments"]
            .as_array()
            .and_then(|v| v.iter().find(|e| e["id"] == "net.bandwidth"))
            .map(|e| e["grade"].clone())
            .unwrap_or_default()
    };
    let mut files = Vec::new();
    for attempt in 1..=3 {
        files.clear();
        let mut grades = Vec::new();
        for mbit in [400u32, 200] {
            host.shape(mbit).expect("tc tbf");
            let r = osmeter(peer, "net.bandwidth", "quick");
            eprintln!("{mbit} Mbit/s: net.bandwidth grade {}", grade_of(&r));
            grades.push(grade_of(&r));
            let f = dir.path().join(format!("{mbit}.json"));
            std::fs::write(&f, r.to_string()).unwrap();
            files.push(f);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_osmeter"))
            .arg("compare")
            .args(&files)
            .args(["--gate", "--json"])
            .env("OSMETER_HISTORY_DB", dir.path().join("h.sqlite"))
            .output()
            .unwrap();
        let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let graded_apart = c["gate"]["rows"].as_array().is_some_and(|rows| {
            rows.iter().any(|r| {
                r["experiment"] == "net.bandwidth"
                    && r["reason"]
                        .as_str()
                        .is_some_and(|t| t.contains("trust grade"))
            })
        });
        if !graded_apart {
            break;
        }
        assert!(attempt < 3, "three pairs graded apart: {grades:?}");
        eprintln!("attempt {attempt}: the pair's trust grades differ; retaking it");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .env("OSMETER_HISTORY_DB", dir.path().join("h.sqlite"))
        .arg("compare")
        .args(&files)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["remote_send_bits", "remote_receive_bits"] {
        let m = c["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["experiment"] == "net.bandwidth" && m["metric"] == name)
            .unwrap_or_else(|| panic!("{name} not compared: {c}"));
        let v = &m["versus"][1];
        eprintln!(
            "400 -> 200 Mbit/s: {name} ratio {} ({})",
            v["ratio"], v["reason"]
        );
        assert_eq!(m["significant"], true, "{name}: {m}");
        let ratio = v["ratio"].as_f64().unwrap();
        assert!(ratio > 0.4 && ratio < 0.6, "{name}: ratio {ratio}");
        assert!(v["shift_ci95"][1].as_f64().unwrap() < 0.0, "{v}");
    }
    // The gate: both directions regressed (a bandwidth down is worse), exit 3, and the
    // summary leads with them. No history here: a link's figure shares no sentinel
    // component, so within-run noise decides.
    let out = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .env("OSMETER_HISTORY_DB", dir.path().join("h.sqlite"))
        .arg("compare")
        .args(&files)
        .args([
            "--gate",
            "--json",
            "--require",
            "net.bandwidth.remote_send,net.bandwidth.remote_receive",
        ])
        .output()
        .unwrap();
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let g = &c["gate"];
    for name in [
        "remote_send",
        "remote_receive",
        "remote_send_bits",
        "remote_receive_bits",
    ] {
        let r = g["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["experiment"] == "net.bandwidth" && r["metric"] == name)
            .unwrap_or_else(|| panic!("{name} not gated: {g}"));
        eprintln!(
            "gate 400 -> 200 Mbit/s: {name} {} ({})",
            r["verdict"], r["reason"]
        );
        assert_eq!(r["verdict"], "regressed", "{name}: {r}");
        assert_eq!(r["component"], "none", "{name}: {r}");
    }
    assert_eq!(out.status.code(), Some(3), "{g}");
    let text = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .env("OSMETER_HISTORY_DB", dir.path().join("h.sqlite"))
        .arg("compare")
        .args(&files)
        .arg("--gate")
        .output()
        .unwrap();
    assert_eq!(text.status.code(), Some(3));
    let text = String::from_utf8_lossy(&text.stdout);
    // After the gate's headline and its environment notes, the regressions come first.
    let first = text
        .lines()
        .skip_while(|l| !l.starts_with("gate B"))
        .skip(1)
        .find(|l| !l.starts_with("  environment:"));
    assert!(first.is_some_and(|l| l.starts_with("REGRESSED")), "{text}");
    drop(host);
}
