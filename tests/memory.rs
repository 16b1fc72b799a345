//! Memory experiments: physical plausibility and relations, never exact timings.

mod common;

use assert_cmd::Command;
use osmeter::rng::{cycle_length, sattolo, Rng};
use proptest::prelude::*;
use serde_json::Value;
use std::sync::OnceLock;

proptest! {
    #[test]
    fn sattolo_is_a_single_cycle(n in 1usize..5000, seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let next = sattolo(n, &mut rng);
        prop_assert_eq!(cycle_length(&next), n);
        // And a permutation: every node has exactly one predecessor.
        let mut seen = vec![false; n];
        for &j in &next {
            prop_assert!(!seen[j as usize]);
            seen[j as usize] = true;
        }
    }
}

/// Runs `osmeter run --profile smoke` on the given experiments and returns the JSON.
/// One run at a time: two would compete for the CPUs the bandwidth test measures.
fn run(only: &str, extra: &[&str]) -> Value {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir_in(".").unwrap();
    let mut cmd = Command::cargo_bin("osmeter").unwrap();
    cmd.args([
        "run",
        "--profile",
        "smoke",
        "--only",
        only,
        "--json",
        "--no-history",
    ])
    .arg("--out")
    .arg(out.path())
    .args(extra);
    let o = cmd.output().unwrap();
    assert!(
        o.status.code() == Some(0),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The memory experiments in smoke, run once for all tests of this file.
fn smoke() -> &'static Value {
    static R: OnceLock<Value> = OnceLock::new();
    R.get_or_init(|| run("mem.*", &[]))
}

fn experiment<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("{id} missing"))
}

fn median(e: &Value, metric: &str) -> Option<f64> {
    e["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == metric)?["summary"]["median"]
        .as_f64()
}

#[test]
fn memory_experiments_run_in_smoke() {
    let r = smoke();
    for id in ["mem.latency", "mem.bandwidth", "mem.pagefault"] {
        let e = experiment(r, id);
        // A VM's host may answer the major faults' reads from its cache: unverified, and
        // said so, unless the user asserts --host-cache none.
        let host_cached = id == "mem.pagefault"
            && e["status"] == "unverified"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("--host-cache none"));
        assert!(e["status"] == "ok" || host_cached, "{id}: {}", e["reason"]);
    }
}

#[test]
fn latency_curve_is_broadly_non_decreasing() {
    let e = experiment(smoke(), "mem.latency");
    let s = e["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "random")
        .unwrap();
    let y: Vec<f64> = s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_f64().unwrap())
        .collect();
    assert!(y.len() >= 10, "{y:?}");
    assert!(y.iter().all(|v| v.is_finite() && *v > 0.0), "{y:?}");
    // No point far below what smaller working sets already cost (noise only adds time).
    for i in 3..y.len() {
        let mut prev = y[i - 3..i].to_vec();
        prev.sort_by(f64::total_cmp);
        assert!(y[i] >= 0.6 * prev[1], "point {i} drops: {y:?}");
    }
    assert!(
        y[y.len() - 1] > 5.0 * y[0],
        "memory not slower than L1: {y:?}"
    );
}

#[test]
fn l1_latency_is_below_dram_latency() {
    let e = experiment(smoke(), "mem.latency");
    // The detected L1 level, else the smallest working set (an unoptimised build's loop
    // overhead can blur the first plateau).
    let first = e["series"][0]["points"][0][1].as_f64();
    let l1 = median(e, "l1d").or(first).expect("l1 latency");
    let dram = median(e, "dram").expect("dram");
    assert!(l1 > 0.0 && l1 < dram, "l1d {l1} ns, dram {dram} ns");
    let notes = e["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap_or("")
            .contains("chains verified before timing")),
        "{notes:?}"
    );
}

#[test]
fn two_threads_do_not_read_slower_than_one() {
    let e = experiment(smoke(), "mem.bandwidth");
    let one = median(e, "read_1t").expect("read_1t");
    assert!(one > 1e8, "read bandwidth {one} bytes/s is implausible");
    // An unoptimised build's read loop is CPU-bound, not memory-bound: nothing to compare.
    // Nor when the run itself says the 2-thread figure includes other tasks' time.
    let busy = e["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap_or("").starts_with("read_2t: only"));
    if let (Some(two), false, false) = (median(e, "read_2t"), cfg!(debug_assertions), busy) {
        // Noise on a shared machine: allow 25% below.
        assert!(two >= 0.75 * one, "2 threads {two} < 1 thread {one}");
    }
}

#[test]
fn major_faults_are_counted() {
    let e = experiment(smoke(), "mem.pagefault");
    let major = median(e, "major_fault").expect("major_fault");
    let minor = median(e, "minor_fault").expect("minor_fault");
    assert!(major > minor, "major {major} ns <= minor {minor} ns");
}

#[test]
fn page_faults_on_tmpfs_are_refused() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() || !osmeter::scratch::fs_info(shm).is_ok_and(|f| f.memory_backed) {
        return common::skip(
            "page_faults_on_tmpfs_are_refused",
            "/dev/shm is not a memory-backed file system here",
        );
    }
    let r = run("mem.pagefault", &["--scratch-dir", "/dev/shm"]);
    let e = experiment(&r, "mem.pagefault");
    assert!(
        e["status"] == "invalid" || e["status"] == "skipped",
        "{}",
        e["status"]
    );
    assert!(
        e["reason"].as_str().unwrap_or("").contains("tmpfs"),
        "{}",
        e["reason"]
    );
    assert!(median(e, "major_fault").is_none());
}
