//! `osmeter history changes` on a history made from synthetic results files through
//! `osmeter history import`: a planted 15% shift of one metric from run 8 on is reported
//! at run 8 and nowhere else, and a metric that did not move has no change; and the same
//! over twelve jittered copies of one real quick run, with all its metrics.

use assert_cmd::Command;
use std::path::Path;

fn osmeter(db: &Path) -> Command {
    let mut c = Command::cargo_bin("osmeter").unwrap();
    c.env("OSMETER_HISTORY_DB", db);
    c
}

/// Normal noise from a seeded xorshift (Box-Muller), relative spread `cov`.
struct Noise(u64);
impl Noise {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn around(&mut self, level: f64, cov: f64) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        let g = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        level * (1.0 + cov * g)
    }
}

fn metric(name: &str, unit: &str, median: f64) -> String {
    format!(
        r#"{{"name":"{name}","unit":"{unit}","summary":{{"n":9,"median":{median},"mean":{median},"stddev":0,"min":{median},"max":{median},"ci95":[{median},{median}],"cov":0,"outliers":0}}}}"#
    )
}

/// A results document of host `host` started at minute `i`, with the two metrics.
fn doc(host: &str, i: usize, getppid: f64, l1: f64, bw: f64) -> String {
    format!(
        r#"{{"schema_version":1,"tool":{{"name":"osmeter","version":"0.1.0"}},"started_at":"2026-03-{:02}T10:00:00Z",
           "duration_s":60,"config":{{"profile":"quick"}},
           "machine":{{"hostname":"{host}","cpu":{{"model":"Test CPU","logical_cpus":4}},"memory":{{"total_bytes":8589934592}}}},
           "experiments":[
             {{"id":"cpu.syscall","area":"cpu","title":"t","status":"ok","duration_s":1,"metrics":[{}]}},
             {{"id":"mem.latency","area":"mem","title":"t","status":"ok","duration_s":1,"metrics":[{},{}]}}]}}"#,
        i + 1,
        metric("getppid", "ns", getppid),
        metric("l1", "ns", l1),
        metric("dram_bw", "bytes/s", bw),
    )
}

/// Twelve runs of `host` in folders run01..run12 under `dir`: getppid 15% slower from
/// the 8th run on, l1 and dram_bw flat; every figure with 2% noise.
fn twelve_runs(dir: &Path, host: &str, seed: u64) {
    let mut n = Noise(seed);
    for i in 0..12 {
        let shift = if i >= 7 { 1.15 } else { 1.0 };
        let f = dir.join(format!("{host}-run{:02}", i + 1));
        std::fs::create_dir_all(&f).unwrap();
        std::fs::write(
            f.join("results.json"),
            doc(
                host,
                i,
                n.around(80.0 * shift, 0.02),
                n.around(1.5, 0.02),
                n.around(2e10, 0.02),
            ),
        )
        .unwrap();
    }
}

fn changes_json(db: &Path, args: &[&str]) -> serde_json::Value {
    let out = osmeter(db)
        .args(["history", "changes", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_planted_shift_is_reported_at_its_run_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("history.sqlite");
    twelve_runs(&d.path().join("collected"), "node1", 0x5eed);
    let out = osmeter(&db)
        .args(["history", "import"])
        .arg(d.path().join("collected"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported 12 run(s)"));

    let all = changes_json(&db, &[]);
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 3, "{all:#?}");
    for s in all {
        let path = format!("{}/{}", s["experiment"], s["metric"]).replace('"', "");
        let changes = s["changes"].as_array().unwrap();
        assert_eq!(s["points"].as_array().unwrap().len(), 12);
        assert_eq!(s["host"], "node1");
        if path == "cpu.syscall/getppid" {
            assert_eq!(changes.len(), 1, "{s:#}");
            let c = &changes[0];
            // A fresh history numbers the runs 1..12 in import (= start time) order.
            assert_eq!(c["position"], 8);
            assert_eq!(c["run"], 8);
            assert_eq!(c["started_at"], "2026-03-08T10:00:00Z");
            let rel = c["rel"].as_f64().unwrap();
            assert!((rel - 0.15).abs() < 0.04, "size {rel}");
            let ci = c["rel_ci95"].as_array().unwrap();
            let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
            assert!(lo > 0.05 && lo <= rel && rel <= hi, "interval [{lo}, {hi}]");
            assert!(c["p"].as_f64().unwrap() <= 0.05);
        } else {
            assert!(changes.is_empty(), "{path}: {s:#}");
        }
    }

    // The filter keeps one series; the table names the run, its date and the size.
    assert_eq!(
        changes_json(&db, &["--metric", "cpu.syscall/*"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let out = osmeter(&db)
        .args(["history", "changes", "--host", "node1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("8 (#8)"), "{text}");
    assert!(text.contains("2026-03-08T10:00:00Z"), "{text}");
    assert!(text.contains("1 change(s) in 3 series"), "{text}");

    // The history page: three plots, one change marker, and the file is never replaced.
    let page = d.path().join("history.html");
    osmeter(&db)
        .args(["history", "changes", "--html"])
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    assert_eq!(html.matches("stroke=\"#c62828\"").count(), 1);
    assert!(html.contains("run 8 (#8"));
    let again = osmeter(&db)
        .args(["history", "changes", "--html"])
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&page).unwrap(), html);

    // The fleet page of two of these runs shows the hosts' history with the change.
    let fleet = d.path().join("fleet.html");
    osmeter(&db)
        .args(["compare", "1", "12", "--html"])
        .arg(&fleet)
        .assert()
        .success();
    let html = std::fs::read_to_string(&fleet).unwrap();
    assert!(html.contains("<h2 id=\"history\">History</h2>"), "{html}");
    assert_eq!(
        html.matches("stroke=\"#c62828\" stroke-dasharray").count(),
        1
    );
}

#[test]
fn hosts_and_machines_are_separate_series() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("history.sqlite");
    twelve_runs(&d.path().join("a"), "node1", 7);
    twelve_runs(&d.path().join("b"), "node2", 8);
    osmeter(&db)
        .args(["history", "import"])
        .arg(d.path().join("a"))
        .arg(d.path().join("b"))
        .assert()
        .success();
    let all = changes_json(&db, &["--metric", "cpu.syscall/getppid"]);
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2);
    for s in all {
        let c = s["changes"].as_array().unwrap();
        assert_eq!(c.len(), 1, "{s:#}");
        assert_eq!(c[0]["position"], 8);
    }
    let one = changes_json(&db, &["--host", "node2", "--metric", "cpu.syscall/*"]);
    assert_eq!(one.as_array().unwrap().len(), 1);
    // Unknown host or pattern: one line, exit 2.
    let out = osmeter(&db)
        .args(["history", "changes", "--host", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1
    );
    let out = osmeter(&db)
        .args(["history", "changes", "--metric", "[x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_different_machine_under_the_same_name_is_not_a_change() {
    // Runs 8..12 come from other hardware under the same host name: they form their own
    // series (a new fingerprint) instead of a change point in the old one.
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("history.sqlite");
    let dir = d.path().join("c");
    twelve_runs(&dir, "node1", 9);
    for i in 8..=12 {
        let f = dir.join(format!("node1-run{i:02}/results.json"));
        let t = std::fs::read_to_string(&f)
            .unwrap()
            .replace("\"logical_cpus\":4", "\"logical_cpus\":8");
        std::fs::write(&f, t).unwrap();
    }
    osmeter(&db)
        .args(["history", "import"])
        .arg(&dir)
        .assert()
        .success();
    let all = changes_json(&db, &["--metric", "cpu.syscall/getppid"]);
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_ne!(all[0]["fingerprint"], all[1]["fingerprint"]);
    for s in all {
        assert!(s["changes"].as_array().unwrap().is_empty(), "{s:#}");
    }
}

/// The results document of one real run: tests/fixtures/history/quick is
/// `osmeter run --profile quick --no-history` of main at 1605f98 on a 2-vCPU VM (87
/// metrics in 17 experiments that ran ok), every metric's raw values cut to the first 40
/// to keep the file small (Python's json module; the history reads only the medians).
fn real_quick_run() -> serde_json::Value {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/history/quick/results.json");
    serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap()
}

/// Multiplies every figure of a metric (its summary and raw values) by `k`.
fn scale_metric(m: &mut serde_json::Value, k: f64) {
    let scale = |v: &mut serde_json::Value| {
        if let Some(x) = v.as_f64() {
            *v = serde_json::json!(x * k);
        }
    };
    let s = &mut m["summary"];
    for key in ["median", "mean", "min", "max", "stddev"] {
        scale(&mut s[key]);
    }
    for v in s["ci95"].as_array_mut().into_iter().flatten() {
        scale(v);
    }
    for v in m["raw"].as_array_mut().into_iter().flatten() {
        scale(v);
    }
}

/// Twelve runs made from `seed_run` in folders run01..run12 under `dir`: every metric of
/// every run multiplied by its own lognormal jitter of 2% sd, and cpu.syscall/getppid
/// 15% slower from the 8th run on; the runs start a day apart.
fn twelve_jittered_runs(seed_run: &serde_json::Value, dir: &Path, seed: u64) {
    let mut n = Noise(seed);
    for i in 0..12 {
        let mut r = seed_run.clone();
        r["started_at"] = format!("2026-03-{:02}T10:00:00Z", i + 1).into();
        for e in r["experiments"].as_array_mut().unwrap() {
            let id = e["id"].as_str().unwrap().to_string();
            for m in e["metrics"].as_array_mut().into_iter().flatten() {
                // A standard normal draw g, and the factor exp(0.02 g).
                let g = n.around(1.0, 1.0) - 1.0;
                let mut k = (0.02 * g).exp();
                if id == "cpu.syscall" && m["name"] == "getppid" && i >= 7 {
                    k *= 1.15;
                }
                scale_metric(m, k);
            }
        }
        let f = dir.join(format!("run{:02}", i + 1));
        std::fs::create_dir_all(&f).unwrap();
        std::fs::write(f.join("results.json"), r.to_string()).unwrap();
    }
}

/// The bar over a real run: twelve runs made from one real quick run, each metric with
/// 2% jitter of its own and getppid 15% slower from run 8. For each of 20 seeds the
/// shift is the one change of its series, at run 8, and at most 2 other series of the
/// run's 80-odd are flagged.
#[test]
fn a_real_quick_run_with_jitter_flags_the_shift_and_at_most_two_others() {
    let seed_run = real_quick_run();
    let mut counts = Vec::new();
    for seed in 1..=20u64 {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("history.sqlite");
        let dir = d.path().join("runs");
        twelve_jittered_runs(&seed_run, &dir, 0x5eed_0000 + seed);
        let out = osmeter(&db)
            .args(["history", "import"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let all = changes_json(&db, &[]);
        let all = all.as_array().unwrap();
        let mut others = Vec::new();
        let mut shift = None;
        for s in all {
            assert_eq!(s["points"].as_array().unwrap().len(), 12, "{s:#}");
            let path = format!("{}/{}", s["experiment"], s["metric"]).replace('"', "");
            let at: Vec<i64> = s["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["position"].as_i64().unwrap())
                .collect();
            if path == "cpu.syscall/getppid" {
                shift = Some(at);
            } else if !at.is_empty() {
                others.push(format!("{path} at {at:?}"));
            }
        }
        eprintln!(
            "seed {seed}: {} series, getppid changes at {:?}, {} other(s) flagged {others:?}",
            all.len(),
            shift,
            others.len()
        );
        assert_eq!(shift, Some(vec![8]), "seed {seed}: getppid");
        counts.push(others.len());
    }
    eprintln!("other series flagged per seed: {counts:?}");
    assert!(counts.iter().all(|&c| c <= 2), "{counts:?}");
}
