//! Helpers shared by the tests that drive the library.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::Write;

use osmeter::experiments::{Profile, RunOptions};
use osmeter::results::{RunResults, Status};
use osmeter::runner::{run, RunConfig, Silent};

/// A smoke-profile run of the selected experiments, writing nothing.
pub fn smoke(only: &str) -> RunResults {
    run_profile(Profile::Smoke, only)
}

/// A run of the selected experiments in `profile` (the runner writes nothing).
pub fn run_profile(profile: Profile, only: &str) -> RunResults {
    run_with(profile, only, RunOptions::default())
}

/// As `run_profile`, with the user's `options`.
pub fn run_with(profile: Profile, only: &str, options: RunOptions) -> RunResults {
    let cfg = RunConfig {
        profile,
        only: vec![only.into()],
        skip: vec![],
        cpu: None,
        options,
        repeat: Some(1),
    };
    match run(&cfg, &Silent) {
        Ok(r) => r,
        Err(e) => panic!("run failed: {e}"),
    }
}

/// The median of a metric of an experiment that must have run ok.
pub fn median(r: &RunResults, id: &str, metric: &str) -> f64 {
    let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
    assert_eq!(e.status, Status::Ok, "{id}: {:?}", e.reason);
    e.metric(metric)
        .unwrap_or_else(|| panic!("{id}/{metric} missing"))
        .summary
        .median
}

/// Set (to anything but "0") by `.ci/run`: a missing prerequisite fails the test there.
pub const REQUIRE_ALL: &str = "OSMETER_REQUIRE_ALL_TESTS";

/// Whether a missing prerequisite must fail the test rather than skip it.
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Skips `test` because a prerequisite (root, a tool, a kernel feature) is missing.
///
/// Writes to the process's stderr directly rather than through `eprintln!`, which the
/// test harness captures and hides for passing tests; under OSMETER_REQUIRE_ALL_TESTS it
/// panics instead, so CI proves every test really ran.
pub fn skip(test: &str, why: &str) {
    skip_or_fail(require_all(), test, why)
}

/// `skip` with the require-all setting given, so the mechanism itself can be tested.
pub fn skip_or_fail(require_all: bool, test: &str, why: &str) {
    if require_all {
        panic!("{test}: prerequisite missing and {REQUIRE_ALL} is set: {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Reproducible pseudo-random bytes (xorshift), for files whose content must vary.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// Naive XOR reference for `io xor`: one little-endian word at a time, the tail
/// zero-padded.
pub fn xor_reference(d: &[u8]) -> u32 {
    let mut x = 0u32;
    for w in d.chunks(4) {
        let mut b = [0u8; 4];
        b[..w.len()].copy_from_slice(w);
        x ^= u32::from_le_bytes(b);
    }
    x
}

/// Whether every folder from `/` down to `p` lets other users pass (o+x).
pub fn searchable_by_others(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.ancestors().all(|a| {
        std::fs::metadata(a)
            .map(|m| m.permissions().mode() & 0o001 != 0)
            .unwrap_or(false)
    })
}

/// A mode-0755 temp folder that another user (nobody) can enter: under
/// CARGO_TARGET_TMPDIR where that is reachable, else in the system's temp folder (a
/// clone inside a mode-0700 folder puts the target folder out of other users' reach).
/// None, with the reason, when neither is.
pub fn tempdir_others_can_enter() -> Result<tempfile::TempDir, String> {
    use std::os::unix::fs::PermissionsExt;
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let t = if searchable_by_others(target_tmp) {
        tempfile::tempdir_in(target_tmp)
    } else {
        tempfile::Builder::new().prefix("osmeter-test.").tempdir()
    }
    .map_err(|e| e.to_string())?;
    let parent = t.path().parent().unwrap_or(t.path());
    if !searchable_by_others(parent) {
        return Err(format!(
            "neither {} nor {} can be entered by other users",
            target_tmp.display(),
            parent.display()
        ));
    }
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    Ok(t)
}

/// A correct client's echo session against the peer at `addr`: 20 messages of 16
/// bytes come back unchanged; the peer's welcome.
pub fn peer_echo_works(
    addr: std::net::SocketAddr,
    token: &str,
) -> osmeter::peer::protocol::Welcome {
    use std::io::{Read, Write};
    let c = osmeter::peer::client::Client::new(addr, Some(token.into()));
    let mut s = c
        .open(&osmeter::peer::protocol::Request::Echo {
            size: 16,
            pin_cpu: -1,
        })
        .expect("a correct client is served");
    let msg = [7u8; 16];
    let mut back = [0u8; 16];
    for _ in 0..20 {
        s.stream.write_all(&msg).unwrap();
        s.stream.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    let welcome = s.welcome.clone();
    assert_eq!(s.finish_echo().unwrap().messages, 20);
    welcome
}

/// A raw protocol frame (magic, type, big-endian length, payload), for sending the
/// peer what a broken or hostile client would.
pub fn peer_frame(t: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = b"OM".to_vec();
    v.push(t);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Runs `cmd` to its end; whether it succeeded, and the CPU time (user + system) it used.
/// A speed bar on CPU time holds on a busy machine, where wall time also counts the time
/// the command waited for a CPU.
// The child is reaped by wait4 below, which std's Child cannot see.
#[allow(clippy::zombie_processes)]
pub fn run_for_cpu_time(mut cmd: std::process::Command) -> (bool, std::time::Duration) {
    let child = cmd
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("starting the command");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid output buffer; the pid is this process's own child,
    // not yet waited for, so wait4 reaps exactly it.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        let r = libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru);
        assert_eq!(r, child.id() as libc::pid_t, "wait4");
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = tv(ru.ru_utime) + tv(ru.ru_stime);
    (
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        std::time::Duration::from_secs_f64(cpu),
    )
}

/// Where the browser checks look for Chromium (Debian's package).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Whether Chromium is there; when not, says so as a skip under `test`.
pub fn have_chromium(test: &str) -> bool {
    let there = std::path::Path::new(CHROMIUM).exists();
    if !there {
        skip(
            test,
            &format!("{CHROMIUM} is absent (apt-get install chromium); browser checks not run"),
        );
    }
    there
}

/// Opens `page` in headless Chromium with a throwaway profile and the `extra` flags
/// (e.g. --dump-dom, --screenshot=FILE); returns (stdout, stderr), stderr being the log.
pub fn chromium(page: &std::path::Path, extra: &[String]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Console errors and blocked or failed loads, as Chromium logs them.
pub fn page_problems(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.contains("CONSOLE")
                || l.contains("Refused to")
                || l.contains("Content Security Policy")
                || l.contains("net::ERR")
        })
        .map(|l| l.to_string())
        .collect()
}

/// The production part of a source file: up to its `#[cfg(test)]` module; nothing for a
/// test-only file (`tests.rs`, or one that opens with `#![cfg(test)]`).
pub fn production(path: &str, src: &str) -> String {
    let test_only = src.lines().any(|l| l.trim() == "#![cfg(test)]");
    if test_only || path.ends_with("/tests.rs") {
        return String::new();
    }
    let lines: Vec<&str> = src.lines().collect();
    for (k, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("#[cfg(test)]") {
            let next = lines.get(k + 1).map_or("", |n| n.trim_start());
            let next = next.strip_prefix("pub(crate) ").unwrap_or(next);
            if next.starts_with("mod ") && next.ends_with('{') {
                return lines[..k].join("\n");
            }
        }
    }
    src.to_string()
}
