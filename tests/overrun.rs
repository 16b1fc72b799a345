//! An experiment that overruns its hard time limit, through the binary: the run ends, but
//! what it measured before is written as a normal run writes it (results folder,
//! results.json, reports), the hung experiment is failed with its reason, the ones after
//! it are skipped with theirs, its scratch folder is gone, and the exit code and the one
//! error line say what happened. The hang is the OSMETER_TEST_HANG seam (a process, not a
//! unit test, is what an overrun ends), whose hard limit is a second.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The exit code of a run an experiment overran (`error::EXIT_OVERRUN`).
const EXIT_OVERRUN: i32 = 5;

fn tmp() -> tempfile::TempDir {
    // Under the target folder: a disk, never /tmp (often tmpfs), for the scratch files.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn a_hung_experiment_fails_and_the_others_are_written() {
    let (out, scratch, cwd) = (tmp(), tmp(), tmp());
    // fs.read makes the run's scratch folder, which stays until the run ends; the hung
    // fs.contention comes after it and fs.cache-size after that.
    let o = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args(["run", "--profile", "smoke", "--quiet", "--no-history"])
        .args(["--only", "cpu.loop,fs.read,fs.contention,fs.cache-size"])
        .arg("--out")
        .arg(out.path())
        .arg("--scratch-dir")
        .arg(scratch.path())
        .current_dir(cwd.path())
        .env("OSMETER_TEST_HANG", "fs.contention")
        .env("OSMETER_HISTORY_DB", cwd.path().join("history.sqlite"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);

    let folders = entries(out.path());
    assert_eq!(
        folders.len(),
        1,
        "one results folder, got {folders:?}; stderr {err}"
    );
    let json = folders[0].join("results.json");
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no {}: {e}; stderr {err}", json.display()));
    for report in ["report.md", "report.html"] {
        assert!(folders[0].join(report).is_file(), "{report} missing");
    }
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exp = |id: &str| {
        v["experiments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing from {json:?}"))
            .clone()
    };
    let ids: Vec<&str> = v["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["cpu.loop", "fs.read", "fs.contention", "fs.cache-size"]
    );
    // Measured before the overrun: kept as measured.
    let lp = exp("cpu.loop");
    assert_eq!(lp["status"], "ok", "{lp}");
    assert!(!lp["metrics"].as_array().unwrap().is_empty());
    assert_ne!(exp("fs.read")["status"], "skipped", "{}", exp("fs.read"));
    let hung = exp("fs.contention");
    assert_eq!(hung["status"], "failed");
    let why = hung["reason"].as_str().unwrap();
    assert!(
        why.contains("exceeded its hard time limit of 1.0 s") && why.contains("budget"),
        "{why}"
    );
    let after = exp("fs.cache-size");
    assert_eq!(after["status"], "skipped");
    assert_eq!(
        after["reason"],
        "not run: the run ended after fs.contention overran its hard time limit"
    );

    // A distinct exit code and one error line naming the experiment and the folder.
    assert_eq!(o.status.code(), Some(EXIT_OVERRUN), "stderr {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("osmeter: error: experiment fs.contention exceeded")
            && lines[0].contains(&folders[0].display().to_string()),
        "{}",
        lines[0]
    );
    assert!(!err.contains("panicked"), "{err}");
    // The hung experiment's scratch folder is removed, as on Ctrl-C.
    assert_eq!(entries(scratch.path()), Vec::<PathBuf>::new());
}
