//! "Uncached" only when shown: a scratch folder on a file system with no block device
//! behind it (an overlayfs mounted by the test, as containers have) gives fs.read's
//! uncached figures with status `unverified`, never `ok` (docs/methods/fs.read.md).
//! Needs root (mount); skips otherwise, and fails under OSMETER_REQUIRE_ALL_TESTS=1.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// An overlayfs over folders of a temporary directory; unmounted on drop, also when the
/// test fails (the directory is removed after).
struct Overlay {
    dir: tempfile::TempDir,
    mounted: bool,
}

impl Overlay {
    fn mount() -> Result<Overlay, String> {
        // Under the target folder: a disk, never /tmp (often tmpfs).
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let mut o = Overlay {
            dir,
            mounted: false,
        };
        for d in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(o.dir.path().join(d)).map_err(|e| e.to_string())?;
        }
        let p = |d: &str| o.dir.path().join(d).display().to_string();
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            p("lower"),
            p("upper"),
            p("work")
        );
        let out = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(o.merged())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t overlay failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        o.mounted = true;
        Ok(o)
    }

    fn merged(&self) -> PathBuf {
        self.dir.path().join("merged")
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if self.mounted {
            let m = self.merged();
            let ok = Command::new("umount")
                .arg(&m)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                // Busy (a child still exiting): detach it so the folder can go.
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
    }
}

fn is_mount_point(p: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = p.display().to_string();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(p.as_str()))
}

#[test]
fn uncached_reads_without_a_block_device_are_unverified() {
    const NAME: &str = "uncached_reads_without_a_block_device_are_unverified";
    if !common::is_root() {
        common::skip(NAME, "needs root to mount an overlayfs");
        return;
    }
    let ov = match Overlay::mount() {
        Ok(o) => o,
        Err(why) => {
            common::skip(NAME, &why);
            return;
        }
    };
    let merged = ov.merged();
    assert!(is_mount_point(&merged), "overlay not mounted");
    let out = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args([
            "run",
            "--profile",
            "smoke",
            "--only",
            "fs.read",
            "--json",
            "--no-history",
            "--quiet",
            "--out",
        ])
        .arg(out.path())
        .arg("--scratch-dir")
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = &v["experiments"][0];
    assert_eq!(e["id"], "fs.read");
    assert_eq!(e["status"], "unverified", "{e}");
    let reason = e["reason"].as_str().unwrap();
    assert!(
        reason.contains("sectors-read counter") && reason.contains("overlay"),
        "{reason}"
    );
    // The figures are there, measured, under their names.
    let names: Vec<&str> = e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"uncached_seq"), "{names:?}");
    let c = e["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["unverified"] == true)
        .unwrap_or_else(|| panic!("no unverified check: {e}"));
    assert_eq!(c["passed"], false);
    // The reports say so too.
    let folder = if out.path().join("report.md").is_file() {
        out.path().to_path_buf()
    } else {
        std::fs::read_dir(out.path())
            .unwrap()
            .map(|d| d.unwrap().path())
            .find(|p| p.join("report.md").is_file())
            .expect("a results folder")
    };
    let md = std::fs::read_to_string(folder.join("report.md")).unwrap();
    assert!(md.contains("fs.read (unverified)"), "report.md");
    assert!(md.contains("NOT VERIFIED"), "report.md");
    drop(ov);
    assert!(!is_mount_point(&merged), "overlay left mounted");
}
