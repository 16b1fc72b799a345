//! End-to-end tests of the reports, the history and compare, through the binary.
//! The HTML report is opened in headless Chromium when /usr/bin/chromium exists (.ci/run
//! installs Debian's `chromium`); without it those checks are skipped with a message.

mod common;

use assert_cmd::Command;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn osmeter(db: &Path) -> Command {
    let mut c = Command::cargo_bin("osmeter").unwrap();
    c.env("OSMETER_HISTORY_DB", db);
    c
}

/// Runs `osmeter report --quiet ARGS` to success and returns the CPU time it used.
fn report_cpu_time(db: &Path, args: &[&std::ffi::OsStr]) -> Duration {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("osmeter"));
    cmd.env("OSMETER_HISTORY_DB", db)
        .args(["report", "--quiet"])
        .args(args);
    let (ok, cpu) = common::run_for_cpu_time(cmd);
    assert!(ok, "osmeter report failed");
    cpu
}

/// Where tests leave files for a person to look at (screenshots).
fn output_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-e2e");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The one results folder inside `out`.
fn results_folder(out: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

fn smoke_run(out: &Path, db: &Path, only: &str) {
    osmeter(db)
        .args([
            "run",
            "--profile",
            "smoke",
            "--quiet",
            "--only",
            only,
            "--out",
        ])
        .arg(out)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
}

/// Static checks that the page cannot fetch anything and needs no script.
fn assert_self_contained(html: &str) {
    assert!(html.contains(
        r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">"#
    ));
    assert!(
        !html.to_ascii_lowercase().contains("<script"),
        "the report needs no script"
    );
    for attr in ["src=", "href="] {
        for (i, _) in html.match_indices(attr) {
            let v = &html[i + attr.len()..(i + attr.len() + 12).min(html.len())];
            let v = v.trim_start_matches(['"', '\'']).to_ascii_lowercase();
            assert!(
                !(v.starts_with("http") || v.starts_with("//")),
                "external reference in {attr}{v}"
            );
        }
    }
    assert!(!html.contains("url(http"), "external reference in CSS");
}

/// Opens a page in headless Chromium; returns (stderr log, DOM). None when absent.
fn chromium(page: &Path, screenshot: Option<&Path>) -> Option<(String, String)> {
    if !common::have_chromium("chromium checks") {
        return None;
    }
    let (dom, mut log) = common::chromium(page, &["--dump-dom".to_string()]);
    if let Some(s) = screenshot {
        let (_, l2) = common::chromium(
            page,
            &[
                format!("--screenshot={}", s.display()),
                "--window-size=1280,4000".to_string(),
            ],
        );
        log.push_str(&l2);
        assert!(s.exists(), "no screenshot written: {l2}");
    }
    Some((log, dom))
}

#[test]
fn smoke_run_report_opens_cleanly_in_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("history.sqlite");
    let out = tmp.path().join("out");
    smoke_run(&out, &db, "cpu.*");
    let folder = results_folder(&out);
    for f in ["results.json", "report.md", "report.html"] {
        assert!(folder.join(f).is_file(), "{f} missing");
    }
    let svgs = std::fs::read_dir(&folder)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count();
    assert!(svgs >= 1, "the cpu.call series gets a plot file");
    let html = std::fs::read_to_string(folder.join("report.html")).unwrap();
    assert_self_contained(&html);
    for id in ["cpu.timer", "cpu.loop", "cpu.call", "cpu.syscall"] {
        assert!(
            html.contains(&format!("id=\"exp-{}\"", id.replace('.', "-"))),
            "{id}"
        );
    }
    assert!(html.contains("<svg"));
    let md = std::fs::read_to_string(folder.join("report.md")).unwrap();
    assert!(md.contains("## Predicted vs measured") && md.contains("| cpu.syscall"));

    // Re-render into another folder, within the time bar.
    let again = tmp.path().join("again");
    let cpu = report_cpu_time(
        &db,
        &["--out".as_ref(), again.as_os_str(), folder.as_os_str()],
    );
    assert!(
        cpu < Duration::from_secs(2),
        "re-rendering took {cpu:?} of CPU time"
    );
    assert!(again.join("report.html").is_file() && again.join("report.md").is_file());

    let shot = output_dir().join("report.png");
    if let Some((log, dom)) = chromium(&folder.join("report.html"), Some(&shot)) {
        assert!(
            dom.contains("Predicted vs measured") && dom.contains("<svg"),
            "DOM not rendered"
        );
        let problems = common::page_problems(&log);
        assert!(
            problems.is_empty(),
            "console errors or blocked loads: {problems:#?}"
        );
        eprintln!("screenshot: {}", shot.display());
    }
}

#[test]
fn the_chromium_check_would_see_an_external_fetch() {
    // A control for the test above: an external image must show up in the log.
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("bad.html");
    std::fs::write(
        &page,
        r#"<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"></head><body><img src="http://127.0.0.1:9/x.png"></body></html>"#,
    )
    .unwrap();
    if let Some((log, _)) = chromium(&page, None) {
        assert!(
            !common::page_problems(&log).is_empty(),
            "blocked fetch not logged: {log}"
        );
    }
}

#[test]
fn comparing_a_run_with_itself_finds_no_significant_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("history.sqlite");
    let out = tmp.path().join("out");
    smoke_run(&out, &db, "cpu.*");
    let file = results_folder(&out).join("results.json");
    let a = file.to_str().unwrap();
    for args in [vec![a, a], vec![a, "1"], vec!["1", "1", a]] {
        let o = osmeter(&db)
            .arg("compare")
            .args(&args)
            .arg("--json")
            .assert()
            .success();
        let v: Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
        let metrics = v["metrics"].as_array().unwrap();
        assert!(metrics.len() >= 10, "{}", metrics.len());
        for m in metrics {
            assert_eq!(m["significant"], json!(false), "{m}");
        }
        assert_eq!(v["significant"], json!(0));
        assert!(v["rule"].as_str().unwrap().contains("do not overlap"));
    }
    let text = osmeter(&db).args(["compare", a, a]).assert().success();
    let s = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(
        s.contains("0 of ") && s.contains("differ significantly"),
        "{s}"
    );
}

#[test]
fn two_concurrent_runs_both_land_in_the_history() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("h").join("history.sqlite");
    let bin = assert_cmd::cargo::cargo_bin("osmeter");
    let children: Vec<_> = (0..3)
        .map(|i| {
            std::process::Command::new(&bin)
                .env("OSMETER_HISTORY_DB", &db)
                .args([
                    "run",
                    "--profile",
                    "smoke",
                    "--quiet",
                    "--only",
                    "cpu.timer",
                    "--out",
                ])
                .arg(tmp.path().join(format!("out{i}")))
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let o = osmeter(&db).args(["history", "--json"]).assert().success();
    let v: Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3, "{v}");
    let text = osmeter(&db).arg("history").assert().success();
    let s = String::from_utf8_lossy(&text.get_output().stdout).into_owned();
    assert!(
        s.contains("smoke") && s.contains("cpu") || s.contains("smoke"),
        "{s}"
    );

    // --no-history leaves the history alone.
    osmeter(&db)
        .args([
            "run",
            "--profile",
            "smoke",
            "--quiet",
            "--no-history",
            "--only",
            "cpu.timer",
            "--out",
        ])
        .arg(tmp.path().join("out-nohist"))
        .assert()
        .success();
    let o = osmeter(&db).args(["history", "--json"]).assert().success();
    let v: Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
}

#[test]
fn bad_inputs_are_one_line_errors_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("history.sqlite");
    let corrupt = tmp.path().join("corrupt.json");
    std::fs::write(&corrupt, "{ not json").unwrap();
    let future = tmp.path().join("future.json");
    std::fs::write(&future, r#"{"schema_version": 99}"#).unwrap();
    let other = tmp.path().join("other.json");
    std::fs::write(&other, r#"{"hello": 1}"#).unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["report".into(), "/nonexistent/results.json".into()],
            "No such file",
        ),
        (
            vec!["report".into(), corrupt.display().to_string()],
            "not valid JSON",
        ),
        (
            vec!["report".into(), future.display().to_string()],
            "unknown results schema version 99",
        ),
        (
            vec!["report".into(), other.display().to_string()],
            "no schema_version",
        ),
        (
            vec!["compare".into(), "12345".into(), "12346".into()],
            "no run with id 12345",
        ),
        (
            vec!["compare".into(), "nope".into(), "nope".into()],
            "not a history id",
        ),
        (
            vec![
                "compare".into(),
                corrupt.display().to_string(),
                corrupt.display().to_string(),
            ],
            "not valid JSON",
        ),
    ];
    for (args, want) in cases {
        let o = osmeter(&db).args(&args).assert().code(2);
        let err = String::from_utf8_lossy(&o.get_output().stderr).into_owned();
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"));
    }
}

// ---------------------------------------------------------------------------------------
// A synthetic document with every experiment the report knows about, to exercise each
// plot and finding and the time bar without running a full suite. Its numbers are made
// up (and say so in the host name); only the shape matters here.

fn summary(median: f64, spread: f64) -> Value {
    json!({"n": 15, "median": median, "mean": median, "stddev": spread, "min": median - 2.0 * spread,
           "max": median + 3.0 * spread, "ci95": [median - spread, median + spread],
           "cov": spread / median, "outliers": 0})
}

fn metric(name: &str, unit: &str, median: f64, pred: Option<f64>) -> Value {
    let mut m = json!({"name": name, "unit": unit, "summary": summary(median, median * 0.02),
                       "raw": (0..15).map(|i| median * (1.0 + 0.001 * i as f64)).collect::<Vec<_>>()});
    if let Some(p) = pred {
        m["prediction"] = json!({"value": p, "formula": "model", "inputs": {"f_core": {"value": 3e9, "unit": "Hz", "source": "machine"}}});
    }
    m
}

fn exp(id: &str, metrics: Vec<Value>, series: Vec<Value>) -> Value {
    json!({"id": id, "area": id.split('.').next().unwrap(), "title": format!("{id} (synthetic)"),
           "status": "ok", "method": "synthetic", "duration_s": 1.0,
           "metrics": metrics, "series": series, "checks": [{"name": "premise", "passed": true, "detail": "ok"}],
           "findings": [], "notes": []})
}

fn series(name: &str, xu: &str, yu: &str, pts: Vec<[f64; 2]>) -> Value {
    json!({"name": name, "x_unit": xu, "y_unit": yu, "points": pts})
}

fn synthetic_document() -> Value {
    let kib = 1024.0;
    let lat: Vec<[f64; 2]> = (0..81)
        .map(|i| {
            let s = kib * 2f64.powf(i as f64 / 4.0);
            let y = if s <= 48.0 * kib {
                1.2
            } else if s <= 2048.0 * kib {
                4.0
            } else if s <= 32768.0 * kib {
                14.0
            } else {
                95.0
            };
            [s, y]
        })
        .collect();
    let mut rtt_raw: Vec<f64> = (0..20000)
        .map(|i| 20000.0 + 3000.0 * ((i * 7919 % 1000) as f64 / 1000.0).powi(4) * 10.0)
        .collect();
    rtt_raw.sort_by(f64::total_cmp);
    let mut tcp = metric("tcp", "ns", 21000.0, Some(18000.0));
    tcp["raw"] = json!(rtt_raw);
    tcp["summary"]["percentiles"] = json!({"p50": 21000.0, "p90": 40000.0, "p99": 51000.0});
    let mut udp = metric("udp", "ns", 19000.0, Some(17000.0));
    udp["summary"]["percentiles"] = json!({"p50": 19000.0, "p90": 24000.0, "p99": 30000.0});
    let sizes: Vec<f64> = (0..8).map(|i| 1048576.0 * 2f64.powi(i)).collect();
    let fsr = |base: f64| {
        sizes
            .iter()
            .map(|s| [*s, base * (1.0 + s / 1e9)])
            .collect::<Vec<_>>()
    };
    let cont: Vec<[f64; 2]> = (1..=10)
        .map(|p| {
            let p = p as f64;
            [
                p,
                if p <= 4.0 {
                    80000.0 + 2000.0 * p
                } else {
                    88000.0 + 40000.0 * (p - 4.0)
                },
            ]
        })
        .collect();
    let sweep = |peak: f64| {
        (0..19)
            .map(|i| {
                let b = 2f64.powi(i);
                [b, peak * b / (b + 4096.0)]
            })
            .collect::<Vec<_>>()
    };
    let mut experiments = vec![
        exp(
            "cpu.syscall",
            vec![
                metric("getppid", "ns", 90.0, Some(80.0)),
                metric("clock_gettime_vdso", "ns", 20.0, None),
            ],
            vec![],
        ),
        exp(
            "cpu.call",
            vec![metric("args_0", "ns", 1.2, Some(1.0))],
            vec![],
        ),
        exp(
            "cpu.thread-switch",
            vec![metric("switch", "ns", 1500.0, Some(1200.0))],
            vec![],
        ),
        exp(
            "cpu.process-switch",
            vec![metric("switch", "ns", 1900.0, Some(1500.0))],
            vec![],
        ),
        exp(
            "cpu.thread-create",
            vec![metric("create_join", "ns", 15000.0, Some(10000.0))],
            vec![],
        ),
        exp(
            "cpu.process-create",
            vec![
                metric("fork_exit_wait", "ns", 90000.0, Some(60000.0)),
                metric("spawn_exec", "ns", 400000.0, None),
            ],
            vec![],
        ),
        exp(
            "mem.latency",
            vec![
                metric("l1d", "ns", 1.2, Some(1.3)),
                metric("dram", "ns", 95.0, Some(90.0)),
            ],
            vec![
                series("random", "bytes", "ns", lat.clone()),
                series(
                    "sequential_stride_64B",
                    "bytes",
                    "ns",
                    lat.iter().map(|p| [p[0], (p[1] / 8.0).max(1.0)]).collect(),
                ),
            ],
        ),
        exp(
            "mem.bandwidth",
            vec![
                metric("read", "bytes/s", 12e9, Some(20e9)),
                metric("copy", "bytes/s", 8e9, Some(10e9)),
            ],
            vec![
                series("read", "threads", "bytes/s", vec![[1.0, 12e9], [2.0, 19e9]]),
                series("write", "threads", "bytes/s", vec![[1.0, 9e9], [2.0, 14e9]]),
            ],
        ),
        exp(
            "mem.pagefault",
            vec![
                metric("major_fault", "ns", 60000.0, Some(50000.0)),
                metric("minor_fault", "ns", 600.0, Some(500.0)),
            ],
            vec![],
        ),
        exp(
            "net.rtt",
            vec![tcp, udp, metric("remote_tcp", "ns", 250000.0, None)],
            vec![],
        ),
        exp(
            "net.bandwidth",
            vec![metric("send", "bytes/s", 4e9, Some(5e9))],
            vec![],
        ),
        exp(
            "fs.read",
            vec![
                metric("uncached_seq", "ns", 30000.0, Some(25000.0)),
                metric("uncached_random", "ns", 120000.0, Some(100000.0)),
                metric("cached_seq", "ns", 900.0, Some(1000.0)),
                metric("cached_random", "ns", 1100.0, Some(1000.0)),
            ],
            vec![
                series("uncached_seq_vs_size", "bytes", "ns", fsr(30000.0)),
                series("uncached_random_vs_size", "bytes", "ns", fsr(120000.0)),
                series("cached_seq_vs_size", "bytes", "ns", fsr(900.0)),
                series("cached_random_vs_size", "bytes", "ns", fsr(1100.0)),
            ],
        ),
        exp(
            "fs.contention",
            vec![metric("per_block_p1", "ns", 82000.0, Some(80000.0))],
            vec![series("per_block_vs_processes", "processes", "ns", cont)],
        ),
        exp(
            "fs.block-sweep",
            vec![],
            vec![
                series("cold", "bytes", "bytes/s", sweep(2e9)),
                series("warm", "bytes", "bytes/s", sweep(9e9)),
            ],
        ),
    ];
    // Bulk: a quick run has many more metrics than the above; pad to a realistic size.
    for k in 0..12 {
        experiments.push(exp(
            &format!("pad.e{k}"),
            (0..8)
                .map(|i| metric(&format!("m{i}"), "ns", 100.0 + i as f64, Some(100.0)))
                .collect(),
            vec![series("curve", "bytes", "ns", lat.clone())],
        ));
    }
    experiments.push(json!({"id": "fs.remote-read", "area": "fs", "title": "Remote file reads", "status": "skipped",
        "reason": "no --remote-dir given: mount a network file system and pass --remote-dir PATH", "method": "", "duration_s": 0.0}));
    experiments.push(json!({"id": "net.icmp", "area": "net", "title": "ICMP echo", "status": "invalid",
        "reason": "premise failed: echo replies came from a different host", "method": "", "duration_s": 0.1}));
    json!({
        "schema_version": 1, "tool": {"name": "osmeter", "version": "0.1.0"},
        "started_at": "2026-01-01T00:00:00Z", "duration_s": 55.0,
        "config": {"profile": "quick", "statistics": {"outlier_rule": "rule", "ci_method": "ci"}},
        "machine": {"hostname": "synthetic-fixture",
                    "cpu": {"model": "Synthetic CPU", "logical_cpus": 2, "core_clock_hz": 3.0e9,
                            "caches": [{"level": 1, "kind": "Data", "size_bytes": 49152, "line_bytes": 64, "shared_cpus": 1},
                                       {"level": 1, "kind": "Instruction", "size_bytes": 32768, "line_bytes": 64, "shared_cpus": 1},
                                       {"level": 2, "kind": "Unified", "size_bytes": 2097152, "line_bytes": 64, "shared_cpus": 1},
                                       {"level": 3, "kind": "Unified", "size_bytes": 33554432, "line_bytes": 64, "shared_cpus": 2}]},
                    "memory": {"total_bytes": 25769803776.0, "peak_bandwidth_bytes_per_s": 25.6e9}},
        "warnings": ["synthetic data: every number here is made up"],
        "experiments": experiments
    })
}

#[test]
fn a_full_synthetic_report_has_every_plot_and_finding_and_renders_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("history.sqlite");
    let file = tmp.path().join("results.json");
    std::fs::write(&file, serde_json::to_string(&synthetic_document()).unwrap()).unwrap();
    let took = report_cpu_time(&db, &[file.as_os_str()]);
    assert!(
        took < Duration::from_secs(2),
        "rendering took {took:?} of CPU time"
    );
    eprintln!("rendered the synthetic report in {took:?} of CPU time");
    let html = std::fs::read_to_string(tmp.path().join("report.html")).unwrap();
    assert_self_contained(&html);
    let svg = |name: &str| std::fs::read_to_string(tmp.path().join(name)).unwrap_or_default();
    let lat = svg("plot-mem-latency-load-to-use-latency-vs-working-set-size.svg");
    assert!(
        lat.contains("L1d 48.0 KiB") && lat.contains("L3 32.0 MiB") && !lat.contains("L1i"),
        "{lat}"
    );
    assert!(svg("plot-net-rtt-distribution.svg").contains("samples at or below"));
    assert!(svg("plot-fs-contention-per-block-vs-processes.svg").contains("fitted model"));
    assert!(svg("plot-fs-read-time-per-block-vs-file-size.svg").contains("cached seq"));
    assert!(svg("plot-fs-block-sweep-throughput-vs-block-size.svg").contains("block size"));
    assert!(svg("plot-mem-bandwidth-throughput-vs-threads.svg").contains("theoretical peak"));
    // Cache levels and the contention fit are stated by mem.latency and fs.contention
    // themselves (the synthetic document has no experiment findings), never re-derived.
    for gone in ["plateaus", "transition after", "two regimes"] {
        assert!(!html.contains(gone), "re-derived finding: {gone}");
    }
    for want in [
        "process context switch costs 1.27x",
        "fork + exit + wait costs 6.00x",
        "procedure call without arguments",
        "major page fault",
        "remote tcp",
        "uncached seq takes",
        "throughput stops improving at",
        "bandwidth: ",
        "no --remote-dir given",
        "premise failed: echo replies",
    ] {
        assert!(html.contains(want), "missing: {want}");
    }
    // Keep the rendered pages and plots where a person can look at them.
    let keep = output_dir().join("synthetic");
    let _ = std::fs::remove_dir_all(&keep);
    std::fs::create_dir_all(&keep).unwrap();
    for e in std::fs::read_dir(tmp.path()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, keep.join(p.file_name().unwrap())).unwrap();
        }
    }
    if let Some((log, _)) = chromium(
        &tmp.path().join("report.html"),
        Some(&output_dir().join("synthetic.png")),
    ) {
        let problems = common::page_problems(&log);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}

/// Every `experiment/name` a finding cites, with bare names belonging to its experiment.
fn unresolved_references(doc: &Value) -> Vec<String> {
    let exps = doc["experiments"].as_array().cloned().unwrap_or_default();
    let emits = |id: &str, name: &str| {
        exps.iter().any(|e| {
            e["id"] == id
                && ["metrics", "series"].iter().any(|k| {
                    e[*k]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|m| m["name"] == name))
                })
        })
    };
    let mut bad = Vec::new();
    let mut check = |owner: Option<&str>, f: &Value| {
        for r in f["from"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap_or("");
            let (id, name) = match (r.rsplit_once('/'), owner) {
                (Some((i, n)), _) => (i.to_string(), n.to_string()),
                (None, Some(o)) => (o.to_string(), r.to_string()),
                (None, None) => (String::new(), r.to_string()),
            };
            if id != "machine" && !emits(&id, &name) {
                bad.push(format!("{id}/{name}: {}", f["text"]));
            }
        }
    };
    for e in &exps {
        for f in e["findings"].as_array().into_iter().flatten() {
            check(e["id"].as_str(), f);
        }
    }
    for f in doc["findings"].as_array().into_iter().flatten() {
        check(None, f);
    }
    bad
}

#[test]
fn smoke_run_on_a_100_column_terminal_fits_and_shows_at_most_12_findings() {
    let test = "smoke_run_on_a_100_column_terminal_fits_and_shows_at_most_12_findings";
    if !Path::new("/usr/bin/script").exists() {
        return common::skip(
            test,
            "/usr/bin/script (util-linux) is absent: no pseudo-terminal",
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let bin = assert_cmd::cargo::cargo_bin("osmeter");
    // A real pseudo-terminal 100 columns wide; COLUMNS unset so the width comes from it.
    let cmd = format!(
        "stty cols 100 rows 50; {} run --profile smoke --no-history --out {}",
        bin.display(),
        out.display()
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("COLUMNS")
        .env("OSMETER_HISTORY_DB", tmp.path().join("h.sqlite"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    // Progress lines are redrawn with \r and escape sequences; only what stays counts.
    let ansi = |l: &str| {
        let mut s = String::new();
        let mut esc = false;
        for c in l.chars() {
            match (esc, c) {
                (false, '\u{1b}') => esc = true,
                (true, c) if c.is_ascii_alphabetic() => esc = false,
                (true, _) => {}
                (false, c) => s.push(c),
            }
        }
        s
    };
    let lines: Vec<String> = text
        .split('\n')
        .map(|l| ansi(l.rsplit('\r').find(|p| !p.is_empty()).unwrap_or("")))
        .collect();
    let widest = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(
        widest <= 100,
        "a line of {widest} columns:\n{}",
        lines
            .iter()
            .filter(|l| l.chars().count() > 100)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("experiment / metric")),
        "{text}"
    );
    let start = lines.iter().position(|l| l.starts_with("findings"));
    let findings: Vec<&String> = start
        .map(|s| {
            lines[s + 1..]
                .iter()
                .take_while(|l| l.starts_with("  "))
                .filter(|l| l.starts_with("  - "))
                .collect()
        })
        .unwrap_or_default();
    assert!(findings.len() <= 12, "{} findings", findings.len());
    let mut uniq = findings.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), findings.len(), "a finding is repeated");
    // Findings cite only metrics and series the run emitted.
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(results_folder(&out).join("results.json")).unwrap(),
    )
    .unwrap();
    let bad = unresolved_references(&doc);
    assert!(
        bad.is_empty(),
        "findings cite what no experiment emits: {bad:#?}"
    );
}

#[test]
fn a_finding_citing_a_renamed_metric_is_caught() {
    let doc = json!({"experiments": [
        {"id": "cpu.syscall", "metrics": [{"name": "getppid"}], "series": [],
         "findings": [{"text": "t", "from": ["getppid", "cpu.call/args_0"]}]},
        {"id": "cpu.call", "metrics": [{"name": "args_zero"}], "series": []}],
        "findings": [{"text": "x", "from": ["cpu.syscall/getppid"]}]});
    assert_eq!(unresolved_references(&doc).len(), 1);
}

/// Quick runs repeat each experiment twice unless told otherwise, and compare judges a
/// pair of such runs against the repetitions' spread, saying so per row.
#[test]
fn default_repeats_give_compare_run_to_run_noise() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("history.sqlite");
    let mut files = Vec::new();
    for k in 0..2 {
        let out = tmp.path().join(format!("out{k}"));
        osmeter(&db)
            .args([
                "run",
                "--profile",
                "quick",
                "--quiet",
                "--only",
                "cpu.timer,cpu.loop",
                "--out",
            ])
            .arg(&out)
            .timeout(Duration::from_secs(120))
            .assert()
            .success();
        let file = results_folder(&out).join("results.json");
        let r: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(r["config"]["repeat"], json!(2), "{}", r["config"]);
        for e in r["experiments"].as_array().unwrap() {
            for m in e["metrics"].as_array().unwrap() {
                assert_eq!(m["runs"].as_array().map(|v| v.len()), Some(2), "{m}");
            }
        }
        files.push(file);
    }
    let o = osmeter(&db)
        .arg("compare")
        .args(&files)
        .arg("--json")
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&o.get_output().stdout).unwrap();
    let rows = v["metrics"].as_array().unwrap();
    assert!(!rows.is_empty());
    for m in rows {
        let noise = &m["versus"][1]["noise"];
        assert_eq!(noise["source"], json!("repeats of 4 runs"), "{m}");
        assert_eq!(noise["runs"], json!(4), "{m}");
        // Zero when the repetitions agree exactly (a quantised figure such as a timer read).
        let t = noise["threshold"].as_f64().unwrap();
        assert!(t.is_finite() && t >= 0.0, "{m}");
    }
    // --repeat 1 still gives a single run, and compare then says it has only within-run noise.
    let out = tmp.path().join("single");
    osmeter(&db)
        .args([
            "run",
            "--profile",
            "quick",
            "--quiet",
            "--repeat",
            "1",
            "--only",
            "cpu.timer",
            "--out",
        ])
        .arg(&out)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let single = results_folder(&out).join("results.json");
    let r: Value = serde_json::from_slice(&std::fs::read(&single).unwrap()).unwrap();
    assert_eq!(r["config"]["repeat"], json!(1));
}

/// What stays on a pseudo-terminal, and every segment drawn (progress redraws included):
/// ANSI escapes stripped, lines split on \n and \r.
fn pty_text(raw: &str) -> (Vec<String>, Vec<String>) {
    let ansi = |l: &str| {
        let mut s = String::new();
        let mut esc = false;
        for c in l.chars() {
            match (esc, c) {
                (false, '\u{1b}') => esc = true,
                (true, c) if c.is_ascii_alphabetic() => esc = false,
                (true, _) => {}
                (false, c) => s.push(c),
            }
        }
        s
    };
    let stays = raw
        .split('\n')
        .map(|l| ansi(l.rsplit('\r').find(|p| !ansi(p).is_empty()).unwrap_or("")))
        .collect();
    let drawn = raw.split(['\n', '\r']).map(ansi).collect();
    (stays, drawn)
}

#[test]
fn a_smoke_run_at_100_columns_draws_nothing_wider_breaks_no_cell_and_warns_once() {
    let test = "a_smoke_run_at_100_columns_draws_nothing_wider_breaks_no_cell_and_warns_once";
    if !Path::new("/usr/bin/script").exists() {
        return common::skip(
            test,
            "/usr/bin/script (util-linux) is absent: no pseudo-terminal",
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let bin = assert_cmd::cargo::cargo_bin("osmeter");
    let cmd = format!(
        "stty cols 100 rows 50; {} run --profile smoke --only cpu.timer,cpu.loop,cpu.syscall \
         --no-history --out {}",
        bin.display(),
        out.display()
    );
    let o = std::process::Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let raw = String::from_utf8_lossy(&o.stdout).to_string();
    let (stays, drawn) = pty_text(&raw);
    let wide: Vec<&String> = drawn.iter().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "lines wider than 100 columns: {wide:#?}");
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(results_folder(&out).join("results.json")).unwrap(),
    )
    .unwrap();
    // Each warning once (its start fits the first line of its wrapped form).
    let warnings: Vec<&str> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    for w in &warnings {
        let start: String = format!("warning: {w}").chars().take(50).collect();
        let n = stays.iter().filter(|l| l.contains(&start)).count();
        assert_eq!(n, 1, "{start:?} printed {n} times:\n{}", stays.join("\n"));
    }
    // No cell broken: every metric has exactly one row of figures, its name whole either
    // in the row's first cell or alone on the line just above.
    let exps = doc["experiments"].as_array().unwrap();
    let ids: Vec<&str> = exps.iter().filter_map(|e| e["id"].as_str()).collect();
    let names: Vec<&str> = exps
        .iter()
        .flat_map(|e| e["metrics"].as_array().unwrap())
        .filter_map(|m| m["name"].as_str())
        .collect();
    let body: Vec<&String> = stays.iter().filter(|l| l.starts_with('│')).collect();
    let mut figure_rows = 0;
    for (i, l) in body.iter().enumerate() {
        let cells: Vec<&str> = l.trim_matches('│').split('┆').map(|c| c.trim()).collect();
        if cells.len() == 1 {
            let c = cells[0];
            let head = c.split(" (").next().unwrap();
            assert!(
                ids.contains(&head) || names.contains(&c) || c == "experiment / metric",
                "a line of a broken cell: {l:?}"
            );
            continue;
        }
        if cells[1] == "predicted" {
            continue;
        }
        figure_rows += 1;
        let name = if cells[0].is_empty() {
            body[i - 1].trim_matches('│').trim()
        } else {
            cells[0]
        };
        assert!(names.contains(&name), "a row without its whole name: {l:?}");
    }
    assert_eq!(
        figure_rows,
        names.len(),
        "{}",
        body.iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let findings = stays
        .iter()
        .skip_while(|l| !l.starts_with("findings"))
        .filter(|l| l.starts_with("  - "))
        .count();
    assert!(findings <= 12, "{findings} findings");
}

/// The summary of a full smoke run (the fixture) keeps every name whole at 80 and 100
/// columns and draws no line wider.
#[test]
fn the_summary_of_a_full_run_fits_80_and_100_columns_with_names_whole() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results/smoke-6d34f9f");
    let r = osmeter::results::load::load(&dir).unwrap();
    for width in [80u16, 100] {
        let t = osmeter::report::terminal::render(&r, Some(width));
        let widest = t.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= width as usize, "{widest} > {width}:\n{t}");
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with('│')).collect();
        for e in &r.experiments {
            for m in &e.metrics {
                let whole = rows
                    .iter()
                    .any(|l| l.trim_matches('│').split('┆').next().unwrap().trim() == m.name);
                assert!(whole, "{}/{} not whole at {width}:\n{t}", e.id, m.name);
            }
        }
        // Every row of figures has a median: no continuation rows.
        let figures = rows.iter().filter(|l| l.contains('┆')).count();
        let metrics: usize = r.experiments.iter().map(|e| e.metrics.len()).sum();
        assert_eq!(figures, metrics + 1, "{t}");
    }
}
