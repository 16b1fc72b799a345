//! `io xor` and `io read` on a file whose page-cache state mincore hides: since Linux 5.2
//! mincore reports every page resident for a file the caller neither owns nor may write.
//! Run as `nobody` (setpriv) on a root-owned file, so these need root.

mod common;

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const NOBODY: &str = "65534";

/// `osmeter ARGS --json`, as nobody when `as_nobody`; the JSON object it printed.
fn osm_json(as_nobody: bool, args: &[&str]) -> Value {
    osm_json_with(env!("CARGO_BIN_EXE_osmeter").as_ref(), as_nobody, args)
}

/// `osm_json` with the binary at `bin` (a copy nobody can reach).
fn osm_json_with(bin: &Path, as_nobody: bool, args: &[&str]) -> Value {
    let mut c = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ]);
        c.arg(bin);
        c
    } else {
        Command::new(bin)
    };
    let out = c.args(args).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} (nobody: {as_nobody}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Evicts `path` as its owner (root), where mincore can verify it (then reads only
/// its first 4 KiB).
fn evict(path: &str) {
    let v = osm_json(
        false,
        &["io", "read", path, "-b", "4K", "-c", "1", "--cold"],
    );
    assert_eq!(v["cold"], true, "eviction as the owner: {v}");
}

/// Whether nobody can reach and read `path` (the build folder may be private).
fn nobody_can_read(path: &Path) -> bool {
    Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "head",
            "-c1",
        ])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn residency_is_unknown_for_files_the_user_may_not_write() {
    const TEST: &str = "residency_is_unknown_for_files_the_user_may_not_write";
    if !common::is_root() {
        return common::skip(
            TEST,
            "needs root to run osmeter as nobody on a root-owned file",
        );
    }
    // The file and a copy of the binary where nobody can reach them.
    let dir = match common::tempdir_others_can_enter() {
        Ok(d) => d,
        Err(e) => return common::skip(TEST, &e),
    };
    let bin = dir.path().join("osmeter");
    std::fs::copy(env!("CARGO_BIN_EXE_osmeter"), &bin).unwrap();
    // Over 64 MiB, so residency is sampled (the path large files take), plus an odd tail.
    let data = common::random_bytes((72 << 20) + 3, 11);
    let want = format!("{:08x}", common::xor_reference(&data));
    let file = dir.path().join("root-owned");
    std::fs::write(&file, &data).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    if !nobody_can_read(&file) {
        return common::skip(TEST, "nobody cannot read a file under CARGO_TARGET_TMPDIR");
    }
    let f = file.to_str().unwrap();

    // The owner sees the truth: evicted means (almost) nothing cached.
    evict(f);
    let own = osm_json(false, &["io", "xor", f]);
    assert!(
        own["resident_fraction_at_start"].as_f64().unwrap() < 0.5,
        "{own}"
    );
    assert!(own["residency_unknown"].is_null(), "{own}");

    // nobody: mincore would say 1.0; the check catches it and xor probes instead.
    evict(f);
    let v = osm_json_with(&bin, true, &["io", "xor", f]);
    assert!(v["resident_fraction_at_start"].is_null(), "{v}");
    assert!(
        v["residency_unknown"].as_str().unwrap().contains("mincore"),
        "{v}"
    );
    assert!(v["cached_probe"].as_f64().unwrap() < 0.5, "{v}");
    assert_ne!(v["method"], "mmap", "an evicted file is not mapped: {v}");
    assert_eq!(v["xor"], want.as_str());

    // Now cached (the run above read it): the probe sees that too.
    let v = osm_json_with(&bin, true, &["io", "xor", f]);
    assert!(v["cached_probe"].as_f64().unwrap() >= 0.5, "{v}");
    // The cached path: mapped or read into cache-resident buffers by folio shape, and
    // its note says how the chunks went (the uncached streams write no such note).
    assert!(v["method"] == "mmap" || v["method"] == "read", "{v}");
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("chunks mapped")),
        "{v}"
    );
    assert_eq!(v["xor"], want.as_str());

    // io read --cold cannot verify the eviction for nobody and says so.
    let r = osm_json_with(
        &bin,
        true,
        &["io", "read", f, "-b", "4K", "-c", "1", "--cold"],
    );
    assert!(r["cold"].is_null(), "{r}");
    assert!(r["eviction"]["residency_unknown"].is_string(), "{r}");
    assert!(r["resident_fraction_at_start"].is_null(), "{r}");

    // A file nobody may write: the kernel shows the truth, and the rule agrees (were it
    // wrong, this evicted file would read as fully cached).
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    evict(f);
    let v = osm_json_with(&bin, true, &["io", "xor", f]);
    assert!(v["residency_unknown"].is_null(), "{v}");
    assert!(
        v["resident_fraction_at_start"].as_f64().unwrap() < 0.5,
        "{v}"
    );
    assert_eq!(v["xor"], want.as_str());
}
