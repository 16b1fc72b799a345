//! `osmeter report` re-renders old results files (schema version 1) unchanged.
//!
//! Each folder under tests/fixtures/results holds a results.json written by an earlier
//! osmeter and the report.md, report.html and terminal summary that osmeter rendered from
//! it (main at 6d34f9f, `osmeter report FILE --out DIR` with no COLUMNS and stdout not a
//! terminal, so 100 columns; the three lines naming the written files are left out).
//! `smoke-6d34f9f` is a smoke run of that commit with every metric's raw values cut to the
//! first 40 before rendering (to keep the fixture small; Python's json module, which keeps
//! integers and floats apart as serde wrote them); `cpu-2026-11-23` is an earlier
//! cpu.* run whose machine has no topology yet; `quick-7c5d72d` is a quick run of 7c5d72d
//! (raw values cut the same way) whose prediction inputs carry their kinds, so the
//! closing table splits it. The renderings are the current renderer's: a change to a
//! report regenerates them with `OSMETER_REGENERATE_FIXTURES=1 cargo test --test
//! report_fixtures`, and its diff must hold only what the change meant to add.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("results.json").is_file())
        .collect();
    v.sort();
    assert!(v.len() >= 2, "fixtures missing in {}", dir.display());
    v
}

/// The first line where two renderings differ, for a readable failure.
fn first_difference(name: &str, got: &str, want: &str) -> Option<String> {
    if got == want {
        return None;
    }
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    let i = (0..g.len().max(w.len()))
        .find(|&i| g.get(i) != w.get(i))
        .unwrap_or(0);
    Some(format!(
        "{name}: line {} differs\n  got:  {:?}\n  want: {:?}",
        i + 1,
        g.get(i),
        w.get(i)
    ))
}

/// Set to rewrite the expected renderings from the current renderer (then review the
/// diff: it must hold only what the change meant to add).
const REGENERATE: &str = "OSMETER_REGENERATE_FIXTURES";

#[test]
fn old_results_render_unchanged() {
    let regenerate = std::env::var_os(REGENERATE).is_some();
    let mut failures = Vec::new();
    for dir in fixtures() {
        let mut r = osmeter::results::load::load(&dir).expect("fixture loads");
        // As `osmeter report` does.
        r.findings = osmeter::findings::compute(&r);
        let out = tempfile::tempdir().unwrap();
        osmeter::report::write_reports(out.path(), &r).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        for file in ["report.md", "report.html"] {
            let got = std::fs::read_to_string(out.path().join(file)).unwrap();
            if regenerate {
                std::fs::write(dir.join(file), &got).unwrap();
            }
            let want = std::fs::read_to_string(dir.join(file)).unwrap();
            failures.extend(first_difference(&format!("{name}/{file}"), &got, &want));
        }
        let got = osmeter::report::terminal::render(&r, Some(100));
        if regenerate {
            std::fs::write(dir.join("terminal.txt"), &got).unwrap();
        }
        let want = std::fs::read_to_string(dir.join("terminal.txt")).unwrap();
        failures.extend(first_difference(&format!("{name}/terminal"), &got, &want));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An old file survives reading and writing back (what `run --json` and history store):
/// nothing dropped or changed, and nothing added but nulls for facts the file predates.
#[test]
fn old_results_round_trip() {
    fn contained(old: &Value, new: &Value, at: &str, bad: &mut Vec<String>) {
        match (old, new) {
            (Value::Object(o), Value::Object(n)) => {
                for (k, v) in o {
                    match n.get(k) {
                        Some(nv) => contained(v, nv, &format!("{at}/{k}"), bad),
                        None => bad.push(format!("{at}/{k} dropped")),
                    }
                }
                for (k, v) in n {
                    if !o.contains_key(k) && !v.is_null() {
                        bad.push(format!("{at}/{k} added: {v}"));
                    }
                }
            }
            (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
                for (i, (a, b)) in o.iter().zip(n).enumerate() {
                    contained(a, b, &format!("{at}/{i}"), bad);
                }
            }
            (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
            _ if old == new => {}
            _ => bad.push(format!("{at}: {old} became {new}")),
        }
    }
    for dir in fixtures() {
        let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
        let old: Value = serde_json::from_str(&text).unwrap();
        let r = osmeter::results::load::from_str(&text).unwrap();
        let new = serde_json::to_value(&r).unwrap();
        // The typed config writes back exactly as read, key order included.
        assert_eq!(
            serde_json::to_string_pretty(&r.config).unwrap(),
            serde_json::to_string_pretty(&old["config"]).unwrap(),
            "{}",
            dir.display()
        );
        let mut bad = Vec::new();
        contained(&old, &new, "", &mut bad);
        assert!(bad.is_empty(), "{}: {}", dir.display(), bad.join("; "));
    }
}
