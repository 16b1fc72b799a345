//! End-to-end tests of `osmeter io` through the binary: XOR correctness against a naive
//! reference for every access method, error handling (exit codes, one-line messages),
//! write safety, JSON shapes and the plausibility of a sweep. No exact timings.

mod common;

use assert_cmd::Command;
use proptest::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A scratch folder on the build's disk (target/tmp), not /tmp (often tmpfs).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn osm() -> Command {
    Command::cargo_bin("osmeter").unwrap()
}

fn json_of(args: &[&str]) -> Value {
    let out = osm().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn xor_of(path: &Path, extra: &[&str]) -> String {
    let p = path.to_str().unwrap();
    let mut args = vec!["io", "xor", p, "--json"];
    args.extend_from_slice(extra);
    let v = json_of(&args);
    v["xor"].as_str().unwrap().to_string()
}

fn write_file(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

const METHODS: [&[&str]; 8] = [
    &[],
    &["--method", "mmap"],
    &["--method", "mmap", "--threads", "2", "--block-size", "4K"],
    &["--method", "read", "--threads", "1"],
    &["--method", "read", "--threads", "3", "--block-size", "4K"],
    &["--method", "read", "--threads", "4", "--block-size", "1K"],
    &["--method", "direct", "--threads", "2", "--block-size", "8K"],
    &["--cold"],
];

#[test]
fn xor_matches_reference_on_edge_sizes_with_every_method() {
    let dir = scratch();
    for n in [0usize, 1, 2, 3, 4, 5, 4095, 4096, 4097, (1 << 20) + 3] {
        let data = common::random_bytes(n, n as u64 + 1);
        let f = write_file(dir.path(), &format!("f{n}"), &data);
        let want = format!("{:08x}", common::xor_reference(&data));
        for m in METHODS {
            assert_eq!(xor_of(&f, m), want, "size {n}, args {m:?}");
        }
    }
}

#[test]
fn xor_of_empty_file_is_zero_and_json_has_the_fields() {
    let dir = scratch();
    let f = write_file(dir.path(), "empty", &[]);
    let v = json_of(&["io", "xor", f.to_str().unwrap(), "--json"]);
    assert_eq!(v["xor"], "00000000");
    assert_eq!(v["bytes"], 0);
    assert!(v["seconds"].as_f64().unwrap() >= 0.0);
    assert!(v["bytes_per_s"].is_number());
    // Text output: the hex first.
    let out = osm()
        .args(["io", "xor", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("00000000"));
}

#[test]
fn xor_json_hex_is_8_lowercase_digits() {
    let dir = scratch();
    let f = write_file(dir.path(), "x", &[0xff, 0xee, 0xdd, 0xcc, 0xab]);
    let x = xor_of(&f, &[]);
    // ff ee dd cc -> 0xccddeeff; ab (zero-padded) -> 0x000000ab.
    assert_eq!(x, "ccddee54");
    assert_eq!(x.len(), 8);
    assert!(x
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(
        x,
        format!(
            "{:08x}",
            common::xor_reference(&[0xff, 0xee, 0xdd, 0xcc, 0xab])
        )
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn xor_matches_reference_on_random_files(n in 0usize..300_000, seed in any::<u64>(), m in 0usize..METHODS.len()) {
        let dir = scratch();
        let data = common::random_bytes(n, seed);
        let f = write_file(dir.path(), "p", &data);
        prop_assert_eq!(xor_of(&f, METHODS[m]), format!("{:08x}", common::xor_reference(&data)));
    }
}

/// Runs and expects failure with `code` and a single `osmeter: error:` line.
fn fails(args: &[&str], code: i32) -> String {
    let out = osm().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.starts_with("osmeter: error: "), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn bad_sizes_and_durations_are_usage_errors() {
    let dir = scratch();
    let f = write_file(dir.path(), "f", &common::random_bytes(8192, 1));
    let p = f.to_str().unwrap();
    let out = dir.path().join("new");
    let o = out.to_str().unwrap();
    for bad in ["0", "-1", "4Q", "abc", "1.5", ""] {
        fails(&["io", "read", p, "--block-size", bad], 2);
        fails(&["io", "write", o, "--block-size", bad, "--count", "1"], 2);
        fails(&["io", "write", o, "--block-size", "4K", "--count", bad], 2);
        fails(&["io", "calibrate", p, "--block-size", bad], 2);
        fails(&["io", "sweep", p, "--to", bad], 2);
        fails(&["io", "xor", p, "--block-size", bad], 2);
    }
    assert!(!out.exists(), "failed writes must not create files");
    fails(&["io", "calibrate", p, "-b", "4K", "--min", "5q"], 2);
    fails(
        &[
            "io",
            "calibrate",
            p,
            "-b",
            "4K",
            "--min",
            "2s",
            "--max",
            "1s",
        ],
        2,
    );
    fails(&["io", "syscalls", p, "--time", "0s"], 2);
    fails(&["io", "xor", p, "--threads", "0"], 2);
    fails(&["io", "xor", p, "--threads", "-1"], 2);
    fails(&["io", "read", p, "-b", "4K", "--count", "3"], 2); // only 2 blocks
    fails(&["io", "read", p, "-b", "100", "--direct"], 2);
    fails(&["io", "read", p, "-b", "2G"], 2); // beyond the buffer limit
    fails(&["io", "sweep", p, "--from", "8K", "--to", "4K"], 2);
    fails(&["io", "sweep", p, "--repeat", "2"], 2);
    // count x block size overflows 64 bits; 8 EiB fits in 64 bits but not on the disk.
    let e = fails(&["io", "write", o, "-b", "1G", "--count", "16G"], 2);
    assert!(e.contains("overflow"), "{e}");
    let e = fails(&["io", "write", o, "-b", "1G", "--count", "8G"], 1);
    assert!(e.contains("not enough free space"), "{e}");
    assert!(!out.exists());
}

#[test]
fn missing_files_directories_and_unreadable_files() {
    let dir = scratch();
    let d = dir.path().to_str().unwrap();
    let missing = dir.path().join("nope");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["io", "read", m, "-b", "4K"],
        vec!["io", "xor", m],
        vec!["io", "calibrate", m, "-b", "4K"],
        vec!["io", "sweep", m],
        vec!["io", "syscalls", m, "--no-compare"],
    ] {
        let e = fails(&args, 2);
        assert!(e.contains("No such file"), "{e}");
    }
    for args in [
        vec!["io", "read", d, "-b", "4K"],
        vec!["io", "xor", d],
        vec!["io", "write", d, "-b", "4K", "-c", "1"],
        vec!["io", "write", d, "-b", "4K", "-c", "1", "--force"],
    ] {
        let e = fails(&args, 2);
        assert!(e.contains("directory"), "{e}");
    }
    // Unreadable: as root, permission bits do not stop reads, but a write-only sysctl
    // refuses even root; otherwise a chmod 000 file.
    let unreadable = if unsafe_is_root() {
        PathBuf::from("/proc/sys/vm/drop_caches")
    } else {
        use std::os::unix::fs::PermissionsExt;
        let f = write_file(dir.path(), "secret", b"abcd");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
        f
    };
    if unreadable.exists() {
        let u = unreadable.to_str().unwrap();
        let e = fails(&["io", "xor", u], 1);
        assert!(e.contains("ermission denied"), "{e}");
        fails(&["io", "read", u, "-b", "4K"], 1);
    } else {
        common::skip(
            "unreadable file",
            &format!(
                "{} is absent: the permission case is not tried",
                unreadable.display()
            ),
        );
    }
    // Devices and FIFOs have no size to read.
    fails(&["io", "xor", "/dev/null"], 2);
}

fn unsafe_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

#[test]
fn full_disk_is_a_runtime_error_and_the_device_survives() {
    // /dev/full answers every write with ENOSPC.
    if !Path::new("/dev/full").exists() {
        return common::skip(
            "full_disk_is_a_runtime_error_and_the_device_survives",
            "no /dev/full here",
        );
    }
    let e = fails(
        &["io", "write", "/dev/full", "-b", "4K", "-c", "4", "--force"],
        1,
    );
    assert!(e.contains("No space left"), "{e}");
    assert!(Path::new("/dev/full").exists());
    // Without --force an existing path is refused before anything is written.
    fails(&["io", "write", "/dev/full", "-b", "4K", "-c", "4"], 2);
}

#[test]
fn write_refuses_existing_files_unless_forced() {
    let dir = scratch();
    let f = write_file(dir.path(), "keep", b"precious");
    let p = f.to_str().unwrap();
    let e = fails(&["io", "write", p, "-b", "4K", "-c", "2"], 2);
    assert!(e.contains("--force"), "{e}");
    assert_eq!(std::fs::read(&f).unwrap(), b"precious");
    let v = json_of(&["io", "write", p, "-b", "4K", "-c", "2", "--force", "--json"]);
    assert_eq!(v["bytes"], 8192);
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 8192);
}

#[test]
fn write_then_read_json_shapes() {
    let dir = scratch();
    let f = dir.path().join("w");
    let p = f.to_str().unwrap();
    let w = json_of(&[
        "io",
        "write",
        p,
        "--block-size",
        "64K",
        "--count",
        "16",
        "--json",
    ]);
    for k in [
        "bytes",
        "seconds",
        "bytes_per_s",
        "block_bytes",
        "blocks",
        "fsync_seconds",
    ] {
        assert!(w[k].is_number(), "write json lacks {k}: {w}");
    }
    assert_eq!(w["bytes"], 1 << 20);
    let data = std::fs::read(&f).unwrap();
    assert_eq!(data.len(), 1 << 20);
    // Non-trivial data: blocks differ and bytes are spread.
    assert_ne!(data[..65536], data[65536..131072]);
    assert!(data.iter().filter(|&&b| b == 0).count() < 20_000);

    let r = json_of(&["io", "read", p, "-b", "4K", "--json"]);
    assert_eq!(r["bytes"], 1 << 20);
    assert_eq!(r["blocks"], 256);
    assert!(r["bytes_per_s"].as_f64().unwrap() > 0.0);
    let r = json_of(&[
        "io", "read", p, "-b", "1K", "--count", "1K", "--cold", "--json",
    ]);
    assert_eq!(r["bytes"], 1 << 20);
    assert!(r["eviction"]["total_pages"].is_number());
    let r = json_of(&[
        "io", "read", p, "-b", "64K", "-c", "3", "--direct", "--json",
    ]);
    assert_eq!(r["bytes"], 3 * 65536);
}

#[test]
fn calibrate_finds_a_count_or_says_the_file_is_too_small() {
    let dir = scratch();
    let f = write_file(dir.path(), "c", &common::random_bytes(1 << 20, 5));
    let p = f.to_str().unwrap();
    let v = json_of(&[
        "io",
        "calibrate",
        p,
        "-b",
        "4K",
        "--min",
        "1ns",
        "--max",
        "10s",
        "--json",
    ]);
    assert_eq!(v["in_window"], true, "{v}");
    assert_eq!(v["count"], 1, "1 block already takes more than 1 ns");
    assert_eq!(v["cache"], "cold");
    let v = json_of(&[
        "io",
        "calibrate",
        p,
        "-b",
        "4K",
        "--min",
        "1m",
        "--max",
        "2m",
        "--json",
    ]);
    assert_eq!(v["in_window"], false);
    assert_eq!(v["count"], 256, "stops at the file's size: {v}");
    assert_eq!(v["max_count"], 256);
    let probes = v["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 9, "1, 2, 4 ... 256");
    let out = osm()
        .args([
            "io",
            "calibrate",
            p,
            "-b",
            "4K",
            "--min",
            "1m",
            "--max",
            "2m",
            "--warm",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("largest count"));
}

#[test]
fn sweep_is_plausible_and_writes_a_plot() {
    let dir = scratch();
    let f = write_file(dir.path(), "s", &common::random_bytes(4 << 20, 9));
    let plot = dir.path().join("plot.svg");
    let v = json_of(&[
        "io",
        "sweep",
        f.to_str().unwrap(),
        "--from",
        "512",
        "--to",
        "128K",
        "--max-bytes",
        "4M",
        "--point-time",
        "30ms",
        "--plot",
        plot.to_str().unwrap(),
        "--json",
    ]);
    let curves = v["curves"].as_array().unwrap();
    assert_eq!(curves.len(), 2);
    for c in curves {
        let pts = c["points"].as_array().unwrap();
        assert_eq!(pts.len(), 9, "512 B .. 128 KiB");
        let med = |i: usize| pts[i]["summary"]["median"].as_f64().unwrap();
        // Plausibility, not timing: 256x larger blocks are not slower.
        assert!(med(8) > med(0), "{}: {} vs {}", c["cache"], med(8), med(0));
        assert_eq!(pts[0]["summary"]["n"], 3);
        assert!(c["knee_block_bytes"].is_number() || c["knee_block_bytes"].is_null());
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("cold") && svg.contains("warm"));
    assert!(svg.contains("block size (bytes"));
}

#[test]
fn syscalls_json_shape() {
    let dir = scratch();
    let f = write_file(dir.path(), "y", &common::random_bytes(1000, 2));
    let v = json_of(&[
        "io",
        "syscalls",
        f.to_str().unwrap(),
        "--time",
        "100ms",
        "--no-compare",
        "--json",
    ]);
    assert!(v["read_1byte_per_s"]["median"].as_f64().unwrap() > 1000.0);
    assert!(v["lseek_per_s"]["median"].as_f64().unwrap() > 1000.0);
    assert!(
        v["eof_rewinds"].as_u64().unwrap() > 0,
        "1000-byte file wraps"
    );
}

#[test]
fn syscalls_compares_with_cpu_syscall_through_the_harness() {
    let dir = scratch();
    let f = write_file(dir.path(), "z", &common::random_bytes(1 << 16, 3));
    let v = json_of(&[
        "io",
        "syscalls",
        f.to_str().unwrap(),
        "--time",
        "200ms",
        "--json",
    ]);
    let c = &v["cpu_syscall"];
    let g = c["getppid_ns"].as_f64().expect("getppid measured");
    let w = c["write_devnull_0_ns"].as_f64().expect("write(0) measured");
    assert!(g > 1.0 && g < 1e6 && w > 1.0 && w < 1e6, "{c}");
    assert!(c["pinned_cpu"].is_u64(), "{c}");
    // A 1-byte read does all getppid does and more (fd, page cache, copy).
    let r = c["read_rate_over_getppid_rate"].as_f64().unwrap();
    assert!(r > 0.0 && r < 1.5, "{c}");
}

/// Multi-GiB check (run by hand: cargo test --release --test io -- --ignored).
#[test]
#[ignore]
fn xor_matches_reference_on_a_3_gib_file() {
    let dir = tempfile::tempdir_in(".").unwrap();
    let f = dir.path().join("big");
    let mut want = 0u32;
    {
        use std::io::Write;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&f).unwrap());
        let chunk = 1 << 20;
        for i in 0..3 * 1024 {
            let d = common::random_bytes(chunk, i);
            want ^= common::xor_reference(&d);
            w.write_all(&d).unwrap();
        }
        // An odd tail so the last word is partial.
        let tail = [1u8, 2, 3];
        want ^= common::xor_reference(&tail);
        w.write_all(&tail).unwrap();
    }
    let want = format!("{want:08x}");
    for m in [&[][..], &["--method", "read"], &["--cold"]] {
        assert_eq!(xor_of(&f, m), want, "{m:?}");
    }
}

#[test]
fn interrupted_write_leaves_no_partial_file() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let dir = scratch();
        let file = dir.path().join("big.bin");
        // 2 GiB: far more than is written before the signal arrives.
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_osmeter"))
            .args(["io", "write", "-b", "1M", "-c", "2048"])
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) < (8 << 20) {
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                return common::skip(
                    "interrupted_write_leaves_no_partial_file",
                    &format!("the writer ended before the signal ({st}): {err}"),
                );
            }
            assert!(t0.elapsed().as_secs() < 30, "the write never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: sending a signal to our own child process, which is still running.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + sig), "exit status {status:?}");
        assert!(!file.exists(), "signal {sig} left the partial file behind");
    }
}
