//! `--export openmetrics|github-benchmark|csv` of `osmeter report` and `osmeter run`,
//! each validated against its format by something other than osmeter:
//! - openmetrics: the Prometheus client library's text parsers (prometheus_client, both
//!   the 0.0.4 text parser and the OpenMetrics one), pip-installed into a virtual
//!   environment cached in the cargo target folder (CARGO_TARGET_TMPDIR/exports-venv);
//!   skips with the reason without python3 + venv or PyPI, and fails then under
//!   OSMETER_REQUIRE_ALL_TESTS;
//! - github-benchmark: a JSON Schema written from the action's `BenchmarkResult` type
//!   (benchmark-action/github-action-benchmark, src/extract.ts: name, value, unit,
//!   range?, extra?; read by `extractCustomBenchmarkResult` as a JSON array), checked
//!   with the jsonschema crate;
//! - csv: Python's csv module.
//!
//! Every ok metric must be in the openmetrics and the github-benchmark exports.

mod common;

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The venv is made once per test binary.
static VENV: Mutex<()> = Mutex::new(());

fn osmeter() -> Command {
    let mut c = Command::cargo_bin("osmeter").unwrap();
    c.env(
        "OSMETER_HISTORY_DB",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("exports-history.sqlite"),
    );
    c
}

/// python from a venv with prometheus_client, made on first use.
fn python() -> Result<PathBuf, String> {
    let _g = VENV.lock().unwrap_or_else(|e| e.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exports-venv");
    let bin = venv.join("bin/python");
    let done = venv.join("osmeter-test-ready-v1");
    if bin.exists() && done.exists() {
        return Ok(bin);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let py = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or("no python3")?;
    let run = |c: &mut std::process::Command, what: &str| -> Result<(), String> {
        let o = c.output().map_err(|e| format!("{what}: {e}"))?;
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
    };
    run(
        std::process::Command::new(py)
            .args(["-m", "venv"])
            .arg(&venv),
        "python3 -m venv (install python3-venv)",
    )?;
    run(
        std::process::Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "prometheus_client",
        ]),
        "pip install prometheus_client",
    )
    .inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&venv);
    })?;
    std::fs::write(&done, "").map_err(|e| e.to_string())?;
    Ok(bin)
}

/// Parses `prom` with both of prometheus_client's parsers and `csv` with Python's csv
/// module; returns {"samples": [[name, labels], ...], "csv_rows": N}.
const CHECK_PY: &str = r#"
import csv, json, sys
from prometheus_client.parser import text_string_to_metric_families as text_parser
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parser
text = open(sys.argv[1]).read()
fams = list(text_parser(text))
om = list(om_parser(text))
samples = [[s.name, s.labels, s.value] for f in fams for s in f.samples]
assert len(samples) == sum(len(f.samples) for f in om), "the two parsers disagree"
assert all(f.type == "gauge" for f in fams), [f.type for f in fams]
rows = list(csv.reader(open(sys.argv[2], newline=""))) if len(sys.argv) > 2 else []
print(json.dumps({"samples": samples, "csv_rows": rows}))
"#;

fn check_with_python(prom: &Path, csv: Option<&Path>) -> Option<Value> {
    let py = match python() {
        Ok(p) => p,
        Err(e) => {
            common::skip("exports (Prometheus parser)", &e);
            return None;
        }
    };
    let mut c = std::process::Command::new(py);
    c.arg("-c").arg(CHECK_PY).arg(prom);
    if let Some(f) = csv {
        c.arg(f);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "the reference parser rejected {}: {}",
        prom.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// The action's custom-JSON entry (`BenchmarkResult` in its src/extract.ts).
fn bench_schema() -> Value {
    serde_json::json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name", "value", "unit"],
            "additionalProperties": false,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "value": {"type": "number"},
                "unit": {"type": "string"},
                "range": {"type": "string"},
                "extra": {"type": "string"}
            }
        }
    })
}

/// (experiment, metric) of every ok metric with a finite median.
fn ok_metrics(results: &Value) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for e in results["experiments"].as_array().unwrap() {
        if e["status"] != "ok" {
            continue;
        }
        for m in e["metrics"].as_array().unwrap() {
            if m["summary"]["median"].as_f64().is_some_and(f64::is_finite) {
                v.push((
                    e["id"].as_str().unwrap().to_string(),
                    m["name"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    v.sort();
    v
}

/// Checks the three exports of `results` found at `prom`, `gh` (+ its -bigger file) and `csv`.
fn check_exports(results: &Value, prom: &Path, gh: &Path, csv: &Path) {
    let want = ok_metrics(results);
    assert!(!want.is_empty());

    // github-benchmark: the action's shape, both files, every ok metric once.
    let schema = jsonschema::validator_for(&bench_schema()).unwrap();
    let bigger = gh.with_file_name(format!(
        "{}-bigger.json",
        gh.file_stem().unwrap().to_string_lossy()
    ));
    let mut names = Vec::new();
    for (f, smaller) in [(gh, true), (bigger.as_path(), false)] {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let errors: Vec<String> = schema.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", f.display());
        for e in doc.as_array().unwrap() {
            let unit = e["unit"].as_str().unwrap();
            assert_eq!(unit.starts_with("ns"), smaller, "{e} in {}", f.display());
            names.push(e["name"].as_str().unwrap().to_string());
        }
    }
    names.sort();
    let want_names: Vec<String> = want.iter().map(|(e, m)| format!("{e}/{m}")).collect();
    assert_eq!(names, want_names);

    // openmetrics and csv, through the reference parsers.
    let Some(parsed) = check_with_python(prom, Some(csv)) else {
        return;
    };
    let mut got: Vec<(String, String)> = parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s[0].as_str().unwrap().ends_with("_info"))
        .map(|s| {
            let l = &s[1];
            assert_eq!(l["host"], results["machine"]["hostname"]);
            (
                l["experiment"].as_str().unwrap().to_string(),
                l["metric"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, want);
    let info: Vec<&Value> = parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0] == "osmeter_run_info")
        .collect();
    assert_eq!(info.len(), 1);
    assert_eq!(info[0][1]["fingerprint"].as_str().unwrap().len(), 8);
    let n_exp = results["experiments"].as_array().unwrap().len();
    let exp_info = parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[0] == "osmeter_experiment_info")
        .count();
    assert_eq!(exp_info, n_exp);

    // csv: a header and one row per metric, every row as wide as the header.
    let rows = parsed["csv_rows"].as_array().unwrap();
    let n_metrics: usize = results["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metrics"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows.len(), n_metrics + 1);
    let width = rows[0].as_array().unwrap().len();
    assert!(rows.iter().all(|r| r.as_array().unwrap().len() == width));
}

#[test]
fn report_exports_the_fixtures_in_every_format() {
    for fixture in ["smoke-6d34f9f", "cpu-2026-11-23"] {
        let d = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/results")
            .join(fixture)
            .join("results.json");
        let (prom, gh, csv) = (
            d.path().join("osmeter.prom"),
            d.path().join("bench.json"),
            d.path().join("metrics.csv"),
        );
        osmeter()
            .arg("report")
            .arg(&src)
            .arg("--out")
            .arg(d.path().join("report"))
            .arg("--quiet")
            .args(["--export", "openmetrics"])
            .arg(&prom)
            .args(["--export", "github-benchmark"])
            .arg(&gh)
            .args(["--export", "csv"])
            .arg(&csv)
            .assert()
            .success();
        let results: Value = serde_json::from_str(&std::fs::read_to_string(&src).unwrap()).unwrap();
        check_exports(&results, &prom, &gh, &csv);
    }
}

#[test]
fn existing_files_are_kept_and_the_textfile_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results/smoke-6d34f9f/results.json");
    let csv = d.path().join("mine.csv");
    std::fs::write(&csv, "my data").unwrap();
    let out = osmeter()
        .arg("report")
        .arg(&src)
        .arg("--out")
        .arg(d.path().join("r"))
        .arg("--quiet")
        .args(["--export", "csv"])
        .arg(&csv)
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
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), "my data");
    // Refused before anything was written.
    assert!(!d.path().join("r").exists());

    let bad = osmeter()
        .arg("report")
        .arg(&src)
        .args(["--export", "yaml", "x.yaml"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));

    let prom = d.path().join("osmeter.prom");
    std::fs::write(&prom, "stale 1\n").unwrap();
    osmeter()
        .arg("report")
        .arg(&src)
        .arg("--out")
        .arg(d.path().join("r"))
        .arg("--quiet")
        .args(["--export", "openmetrics"])
        .arg(&prom)
        .assert()
        .success();
    let t = std::fs::read_to_string(&prom).unwrap();
    assert!(t.starts_with("# HELP") && t.ends_with("# EOF\n"));
    // Only the three files: no temporary file left beside the textfile.
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn a_quick_run_exports_every_ok_metric() {
    let d = tempfile::tempdir().unwrap();
    let (prom, gh, csv) = (
        d.path().join("osmeter.prom"),
        d.path().join("bench.json"),
        d.path().join("metrics.csv"),
    );
    osmeter()
        .args([
            "run",
            "--profile",
            "quick",
            "--only",
            "cpu.timer,cpu.syscall,mem.bandwidth",
            "--no-history",
            "--quiet",
            "--out",
        ])
        .arg(d.path().join("out"))
        .args(["--export", "openmetrics"])
        .arg(&prom)
        .args(["--export", "github-benchmark"])
        .arg(&gh)
        .args(["--export", "csv"])
        .arg(&csv)
        .assert()
        .success();
    let results_file = walk(&d.path().join("out"));
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(results_file).unwrap()).unwrap();
    check_exports(&results, &prom, &gh, &csv);
}

/// The results.json under `dir` (one run folder).
fn walk(dir: &Path) -> PathBuf {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path().join("results.json");
        if p.exists() {
            return p;
        }
    }
    panic!("no results.json under {}", dir.display());
}
