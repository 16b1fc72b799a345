//! Ground truth for fs.cache-size: inside a memory cgroup limited to L the page cache
//! cannot hold more than L, so the reported knee must lie within 25% of L. Needs root and
//! a memory cgroup controller (v1, or v2 with memory delegated); otherwise it says why it
//! skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// A child memory cgroup, removed on drop (also when the test fails).
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    fn new(limit: u64) -> Result<Cgroup, String> {
        let name = format!("osmeter-test-{}-{}", std::process::id(), limit / MIB);
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.contains("memory"))
        {
            (v2.join(&name), "memory.max")
        } else {
            return Err(
                "no memory cgroup controller available (v1 memory or v2 with memory delegated)"
                    .into(),
            );
        };
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = Cgroup { dir };
        std::fs::write(cg.dir.join(limit_file), limit.to_string())
            .map_err(|e| format!("cannot set the limit: {e}"))?;
        Ok(cg)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The child has exited; its page cache is reparented when the group goes.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("warning: could not remove {}", self.dir.display());
    }
}

fn knee_in_cgroup(limit: u64) -> Result<f64, String> {
    let cg = Cgroup::new(limit)?;
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let scratch = tempfile::tempdir_in(&tmp).map_err(|e| e.to_string())?;
    let out = tempfile::tempdir_in(&tmp).map_err(|e| e.to_string())?;
    let procs = cg.dir.join("cgroup.procs");
    // The shell joins the cgroup, then becomes osmeter, so every page it caches is charged.
    // `--host-cache none`: in a VM the cold read's device premise is otherwise unverified,
    // and this test is about the knee, not the host's cache.
    // The standard profile: quick's 12 s ran out before 1 GiB on a loaded machine and
    // reported only a lower bound; the search stops at its resolution anyway.
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1" && exec "$2" run --profile standard --only fs.cache-size --json --no-history --out "$3" --scratch-dir "$4" --host-cache none"#)
        .arg("sh")
        .arg(&procs)
        .arg(env!("CARGO_BIN_EXE_osmeter"))
        .arg(out.path())
        .arg(scratch.path())
        .output()
        .map_err(|e| e.to_string())?;
    assert!(
        o.status.success(),
        "osmeter failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| e.to_string())?;
    let e = &doc["experiments"][0];
    assert_eq!(e["status"], "ok", "{}", e["reason"]);
    let metrics = e["metrics"].as_array().unwrap();
    let knee = metrics
        .iter()
        .find(|m| m["name"] == "cache_size")
        .unwrap_or_else(|| {
            let names: Vec<_> = metrics.iter().map(|m| m["name"].to_string()).collect();
            panic!(
                "no knee found in a cgroup limited to {} MiB; metrics: {names:?}",
                limit / MIB
            )
        });
    // Nothing is left in the scratch folder.
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    Ok(knee["summary"]["median"].as_f64().unwrap())
}

#[test]
fn cache_size_knee_matches_a_cgroup_limit() {
    const TEST: &str = "cache_size_knee_matches_a_cgroup_limit";
    if !common::is_root() {
        common::skip(TEST, "creating a memory cgroup needs root");
        return;
    }
    for limit in [256 * MIB, 512 * MIB] {
        match knee_in_cgroup(limit) {
            Ok(knee) => {
                let ratio = knee / limit as f64;
                eprintln!(
                    "limit {} MiB: knee {:.0} MiB ({ratio:.2})",
                    limit / MIB,
                    knee / MIB as f64
                );
                assert!(
                    (0.75..=1.25).contains(&ratio),
                    "knee {knee} vs limit {limit}"
                );
            }
            Err(why) => {
                common::skip(TEST, &why);
                return;
            }
        }
    }
}
