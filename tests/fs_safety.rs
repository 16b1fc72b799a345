//! Safety of the file experiments, through the binary: interrupted runs leave nothing
//! behind, memory-backed scratch space is refused, a full disk is refused without writing,
//! bad directories are usage errors. Relations only, never timings.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn osmeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_osmeter"))
}

fn tmp() -> tempfile::TempDir {
    // Under the target folder: a disk, never /tmp (often tmpfs).
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no memory effects.
    unsafe { libc::geteuid() == 0 }
}

/// Runs the selection with --json and returns the parsed results.
fn run_json(args: &[&str]) -> (serde_json::Value, std::process::Output) {
    let out_dir = tmp();
    let o = osmeter()
        .args(["run", "--json", "--no-history", "--out"])
        .arg(out_dir.path())
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (v, o)
}

fn experiment<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap()
}

/// Starts a long fs.read, waits for its scratch folder, sends `sig`, and checks that
/// the scratch directory is empty afterwards.
fn interrupted_run_leaves_nothing(sig: i32) {
    let scratch = tmp();
    let out = tmp();
    let mut child = osmeter()
        .args([
            "run",
            "--only",
            "fs.read",
            "--profile",
            "standard",
            "--quiet",
            "--no-history",
            "--scratch-dir",
        ])
        .arg(scratch.path())
        .arg("--out")
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while entries(scratch.path()).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "scratch folder never appeared"
        );
        assert!(child.try_wait().unwrap().is_none(), "run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    // In the middle of writing and reading files.
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: kill with a valid pid of our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + sig), "{status:?}");
    let left = entries(scratch.path());
    assert!(left.is_empty(), "left behind after signal {sig}: {left:?}");
}

#[test]
fn sigint_leaves_nothing_behind() {
    interrupted_run_leaves_nothing(libc::SIGINT);
}

#[test]
fn sigterm_leaves_nothing_behind() {
    interrupted_run_leaves_nothing(libc::SIGTERM);
}

#[test]
fn tmpfs_scratch_is_refused_and_untouched() {
    let shm = Path::new("/dev/shm");
    let Ok(info) = osmeter::scratch::fs_info(shm) else {
        common::skip("tmpfs_scratch_is_refused_and_untouched", "no /dev/shm");
        return;
    };
    if !info.memory_backed {
        common::skip(
            "tmpfs_scratch_is_refused_and_untouched",
            "/dev/shm is not memory-backed here",
        );
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let (v, o) = run_json(&[
        "--only",
        "fs.read,fs.cache-size,fs.contention",
        "--profile",
        "smoke",
        "--scratch-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for id in ["fs.read", "fs.cache-size", "fs.contention"] {
        let e = experiment(&v, id);
        assert_eq!(e["status"], "skipped", "{id}: {e}");
        let reason = e["reason"].as_str().unwrap();
        assert!(reason.contains("memory-backed"), "{reason}");
    }
    assert!(entries(dir.path()).is_empty(), "nothing written on tmpfs");
}

#[test]
fn full_disk_gives_a_clear_message_and_writes_nothing() {
    const FULL: &str = "full_disk_gives_a_clear_message_and_writes_nothing";
    if !is_root() {
        common::skip(FULL, "needs root to loop-mount a tiny ext4 image");
        return;
    }
    for tool in ["mkfs.ext4", "mount", "umount"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            common::skip(FULL, &format!("{tool} not installed"));
            return;
        }
    }
    let work = tmp();
    let img = work.path().join("tiny.img");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
    assert!(ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img)));
    if !ok(Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt))
    {
        common::skip(FULL, "cannot loop-mount here");
        return;
    }
    // Unmount even if an assertion fails.
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let before = entries(&mnt);
    let (v, o) = run_json(&[
        "--only",
        "fs.read,fs.cache-size,fs.contention",
        "--profile",
        "smoke",
        "--scratch-dir",
        mnt.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for id in ["fs.read", "fs.cache-size", "fs.contention"] {
        let e = experiment(&v, id);
        assert_eq!(e["status"], "skipped", "{id}: {e}");
        let reason = e["reason"].as_str().unwrap();
        assert!(
            reason.contains("not enough free space") && reason.contains("half"),
            "{reason}"
        );
    }
    assert_eq!(entries(&mnt), before, "nothing written");
}

#[test]
fn bad_directories_are_usage_errors() {
    let file = tmp();
    let f = file.path().join("plain-file");
    std::fs::write(&f, b"x").unwrap();
    for args in [
        vec!["--scratch-dir", "/nonexistent/osmeter"],
        vec!["--scratch-dir", f.to_str().unwrap()],
        vec!["--remote-dir", f.to_str().unwrap()],
        vec!["--remote-dir", "/nonexistent/osmeter"],
    ] {
        let o = osmeter()
            .args([
                "run",
                "--only",
                "fs.read",
                "--profile",
                "smoke",
                "--no-history",
            ])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains(args[0]) && !err.contains("panicked"), "{err}");
    }
    assert_eq!(
        entries(file.path()).len(),
        1,
        "the plain file alone, untouched"
    );
}

#[test]
fn smoke_run_relations_and_cleanup() {
    let scratch = tmp();
    // fs.contention's readers must start within 10% of a 60 ms round; on a loaded 2-CPU
    // host three readers sometimes cannot, and the run is rightly invalid. That premise
    // alone failing is taken again, up to three runs in all, and said.
    let mut tries = 0;
    let (v, o) = loop {
        tries += 1;
        let (v, o) = run_json(&[
            "--only",
            "fs.read,fs.contention,fs.cache-size,fs.remote-read",
            "--profile",
            "smoke",
            "--scratch-dir",
            scratch.path().to_str().unwrap(),
        ]);
        let reason = v["experiments"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["id"] == "fs.contention"))
            .and_then(|e| e["reason"].as_str())
            .unwrap_or("")
            .to_string();
        if tries < 3 && reason.starts_with("premise failed: readers released together") {
            eprintln!("retrying the smoke run ({tries} of 3): {reason}");
            continue;
        }
        break (v, o);
    };
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let med = |e: &serde_json::Value, m: &str| {
        e["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == m)
            .map(|x| x["summary"]["median"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no metric {m}: {e}"))
    };
    // In a VM with a virtual disk the host may answer uncached reads from its cache, which
    // no guest counter tells apart: unverified, naming --host-cache none.
    let host_cached = |e: &serde_json::Value| {
        e["status"] == "unverified"
            && e["reason"]
                .as_str()
                .is_some_and(|r| r.contains("--host-cache none"))
    };
    let read = experiment(&v, "fs.read");
    assert!(read["status"] == "ok" || host_cached(read), "{read}");
    for p in ["seq", "random"] {
        let (c, u) = (
            med(read, &format!("cached_{p}")),
            med(read, &format!("uncached_{p}")),
        );
        assert!(c > 0.0 && c < u, "{p}: cached {c} ns vs uncached {u} ns");
    }
    assert!(read["series"].as_array().unwrap().len() >= 4);
    let cont = experiment(&v, "fs.contention");
    // Smoke's files are sized from fs.read's per-block time but bounded at 64 MiB in all,
    // so a device (or host cache) faster than that bound allows reads blocks again, and a
    // block read twice makes the run unverified (docs/methods/fs.contention.md): that
    // is the one reason allowed besides ok.
    let reread = cont["reason"].as_str().is_some_and(|r| {
        r.starts_with("premise not verified here: each block read at most once:")
            && !["reached the device", "released together", "evicted"]
                .iter()
                .any(|other| r.contains(other))
    });
    assert!(
        cont["status"] == "ok" || (cont["status"] == "unverified" && reread) || host_cached(cont),
        "{cont}"
    );
    assert!(med(cont, "per_block_p1") > 0.0);
    assert!(med(cont, "per_block_pmax") > 0.0);
    let cs = experiment(&v, "fs.cache-size");
    assert!(cs["status"] == "ok" || host_cached(cs), "{cs}");
    let remote = experiment(&v, "fs.remote-read");
    assert_eq!(remote["status"], "skipped");
    assert!(remote["reason"].as_str().unwrap().contains("--remote-dir"));
    assert!(
        entries(scratch.path()).is_empty(),
        "scratch removed after the run"
    );
}
