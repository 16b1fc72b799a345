//! The command line through the binary: bad input gives one line and exit 2, real output
//! validates against the shipped JSON Schema.

use assert_cmd::Command;
use std::path::Path;

fn osmeter() -> Command {
    let mut c = Command::cargo_bin("osmeter").unwrap();
    // History goes in the build folder, never into the user's database or /tmp.
    c.env(
        "OSMETER_HISTORY_DB",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-history.sqlite"),
    );
    c
}

/// Runs with args and asserts exit code 2 and a single-line error on stderr.
fn usage_error(args: &[&str]) -> String {
    let out = osmeter().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: want one line, got {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// `run` and `watch` share their target arguments, so both refuse the same bad values.
#[test]
fn run_and_watch_share_the_target_arguments() {
    for cmd in ["run", "watch"] {
        let err = usage_error(&[cmd, "--host-cache", "writeback"]);
        assert!(err.contains("--host-cache"), "{cmd}: {err}");
        let err = usage_error(&[cmd, "--peer-name", "x"]);
        assert!(err.contains("--peer"), "{cmd}: {err}");
    }
}

#[test]
fn bad_profile() {
    let e = usage_error(&["run", "--profile", "nope"]);
    assert!(e.contains("nope"), "{e}");
}

#[test]
fn unknown_experiment_lists_valid_ids() {
    let e = usage_error(&["run", "--only", "no-such-thing"]);
    assert!(
        e.contains("cpu.syscall") && e.contains("no-such-thing"),
        "{e}"
    );
}

#[test]
fn cpu_out_of_range() {
    let e = usage_error(&["run", "--profile", "smoke", "--cpu", "999"]);
    assert!(e.contains("999"), "{e}");
}

#[test]
fn out_is_a_file() {
    let f = tempfile::NamedTempFile::new().unwrap();
    let e = usage_error(&[
        "run",
        "--profile",
        "smoke",
        "--only",
        "cpu.loop",
        "--out",
        f.path().to_str().unwrap(),
    ]);
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn out_unwritable() {
    // /proc is never writable, even for root.
    usage_error(&[
        "run",
        "--profile",
        "smoke",
        "--only",
        "cpu.loop",
        "--out",
        "/proc/osmeter-results",
    ]);
}

#[test]
fn unknown_subcommand_and_missing_scratch() {
    usage_error(&["frobnicate"]);
    usage_error(&[
        "run",
        "--profile",
        "smoke",
        "--only",
        "cpu.loop",
        "--scratch-dir",
        "/nonexistent/osmeter",
    ]);
}

#[test]
fn list_names_every_experiment() {
    let out = osmeter().args(["list", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    for id in ["cpu.timer", "cpu.loop", "cpu.call", "cpu.syscall"] {
        assert!(ids.contains(&id), "{ids:?}");
    }
    let out = osmeter().arg("list").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("cpu.syscall"));
}

#[test]
fn machine_description() {
    let out = osmeter().args(["machine", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["cpu"]["logical_cpus"].as_u64().unwrap() >= 1);
    let out = osmeter().arg("machine").output().unwrap();
    assert!(out.status.success() && !out.stdout.is_empty());
}

fn validate(doc: &serde_json::Value) {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/results.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

#[test]
fn real_output_validates_against_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let out = osmeter()
        .args([
            "run",
            "--profile",
            "smoke",
            "--only",
            "cpu.timer,cpu.loop,cpu.syscall",
            "--json",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    validate(&doc);
    assert_eq!(doc["experiments"].as_array().unwrap().len(), 3);
    // The results folder holds the same document.
    let folder = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("results.json")).unwrap())
            .unwrap();
    validate(&file);
    assert_eq!(file["experiments"], doc["experiments"]);
    // Every metric carries a prediction with a formula and typed inputs, or its experiment
    // says why it has none (cpu.timer; "no prediction for METRIC: why" in the notes).
    for e in doc["experiments"].as_array().unwrap() {
        let says_none = e.to_string().contains("no independent prediction");
        let notes = e["notes"].to_string();
        for m in e["metrics"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap();
            let withheld = notes.contains(&format!("no prediction for {name}: "));
            if let Some(inputs) = m["prediction"]["inputs"].as_object() {
                for (k, i) in inputs {
                    assert!(
                        i["kind"].is_string(),
                        "{} {name} input {k} has no kind",
                        e["id"]
                    );
                }
            }
            assert!(
                m["prediction"]["formula"].is_string() || says_none || withheld,
                "{} {} lacks a prediction and a reason",
                e["id"],
                m["name"]
            );
        }
    }
}

#[test]
fn schema_rejects_a_broken_document() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/results.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let bad = serde_json::json!({"schema_version": 1, "tool": {"name": "osmeter", "version": "x"}, "started_at": "yesterday",
        "duration_s": 1.0, "config": {"profile": "quick"}, "machine": {"hostname": "h", "cpu": {}},
        "experiments": [{"id": "cpu.x", "area": "cpu", "title": "t", "status": "invalid", "duration_s": 0.0,
                          "metrics": [], "series": [], "checks": [], "findings": []}]});
    let errs: Vec<String> = v.iter_errors(&bad).map(|e| e.to_string()).collect();
    assert!(errs.len() >= 2, "bad date and missing reason: {errs:?}");
}

#[test]
fn quiet_run_prints_nothing_and_table_run_prints_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = osmeter()
        .args([
            "run",
            "--profile",
            "smoke",
            "--only",
            "cpu.loop",
            "--quiet",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = osmeter()
        .args(["run", "--profile", "smoke", "--only", "cpu.loop", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("cpu.loop") && s.contains("ratio"), "{s}");
    // Not a terminal: plain progress lines on stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("[1/1] cpu.loop ok"));
}

#[test]
fn completions_for_bash_and_zsh_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let out = osmeter().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let s = String::from_utf8_lossy(&out.stdout);
        for sub in ["run", "compare", "io", "report", "completions", "man"] {
            assert!(s.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let bash = osmeter().args(["completions", "bash"]).output().unwrap();
    let s = String::from_utf8_lossy(&bash.stdout);
    assert!(s.contains("complete -F"), "not a bash completion script");
    assert!(s.contains("--profile"), "run's options are missing");
}

#[test]
fn bad_shell_is_one_line_and_exit_2() {
    let e = usage_error(&["completions", "cmd.exe"]);
    assert!(e.contains("cmd.exe"), "{e}");
}

#[test]
fn man_page_is_roff_with_every_subcommand() {
    let out = osmeter().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.starts_with(".ie") || s.contains(".TH osmeter"),
        "not roff: {s:.200}"
    );
    for sub in [
        "OSMETER RUN",
        "OSMETER COMPARE",
        "OSMETER IO",
        "\\-\\-profile",
    ] {
        assert!(s.contains(sub), "man page lacks {sub}");
    }
}

#[test]
fn help_of_run_io_and_compare_has_examples() {
    for sub in ["run", "io", "compare"] {
        let out = osmeter().args([sub, "--help"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(
            s.contains("Examples:") && s.contains(&format!("osmeter {sub} ")),
            "{sub} --help: {s}"
        );
    }
}
