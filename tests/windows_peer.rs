//! The Windows peer under Wine: `osmeter serve` cross-built for x86_64-pc-windows-gnu,
//! started under Wine on loopback in a Wine prefix of its own, answers the Linux client's
//! quick `net.rtt` (TCP and UDP), `net.bandwidth` and `net.connect` (beside loopback),
//! describes its machine from Windows's APIs, serves IPv4 and IPv6 clients on `--bind ::`,
//! refuses a wrong token with one line on both sides, keeps serving after garbage, and
//! leaves nothing running.
//! Timings under Wine mean nothing; the protocol, the limits and the shutdown are tested.
//!
//! The Windows binary is built here with cargo (a no-op when `.ci/run` built it first);
//! without Wine, the Windows target or mingw-w64 the test skips, saying what is missing.

mod common;

use osmeter::peer::client::{Client, PeerError};
use osmeter::peer::protocol::{self as p, Request};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const TEST: &str = "windows_peer";
const TARGET: &str = "x86_64-pc-windows-gnu";
const TOKEN: &str = "wine-peer-token";

fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The Windows build of osmeter, built or brought up to date with cargo in this test's
/// target folder; Err says what is missing.
fn windows_exe() -> Result<PathBuf, String> {
    let linux = Path::new(env!("CARGO_BIN_EXE_osmeter"));
    let target_dir = linux
        .parent()
        .and_then(Path::parent)
        .ok_or("no target folder")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .args(["build", "--release", "--target", TARGET, "--bin", "osmeter"])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        return Err(format!(
            "cargo build --target {TARGET} failed ({}); needs `rustup target add {TARGET}` \
             and mingw-w64 (apt: gcc-mingw-w64-x86-64)",
            last.unwrap_or("no message").trim()
        ));
    }
    Ok(target_dir.join(TARGET).join("release").join("osmeter.exe"))
}

/// Runs a command to its end, killing it past `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let id = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            // SAFETY: kill on the pid of a child this test started and has not reaped.
            unsafe { libc::kill(id as i32, libc::SIGKILL) };
            panic!("{cmd:?} still running after {limit:?}");
        }
    }
}

/// A Wine prefix and an application folder in a temporary folder; dropping it ends
/// every process of the prefix.
struct Wine {
    dir: tempfile::TempDir,
    wine: PathBuf,
    wineserver: PathBuf,
}

impl Wine {
    fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }
    fn app(&self) -> PathBuf {
        self.dir.path().join("app")
    }
    fn osmeter(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.wine);
        c.arg(self.app().join("osmeter.exe"))
            .args(args)
            .current_dir(self.app())
            .env("WINEPREFIX", self.prefix())
            .env("WINEDEBUG", "-all")
            // No Mono or Gecko install prompt while the prefix is created.
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=");
        c
    }
    fn kill_all(&self) {
        let _ = Command::new(&self.wineserver)
            .arg("-k")
            .env("WINEPREFIX", self.prefix())
            .stderr(Stdio::null())
            .status();
    }
    /// Processes whose environment names this prefix (the program, wineserver, services).
    fn processes(&self) -> Vec<String> {
        let needle = format!("WINEPREFIX={}", self.prefix().display());
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if env.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                found.push(format!(
                    "{}: {}",
                    e.file_name().to_string_lossy(),
                    cmd.trim()
                ));
            }
        }
        found
    }
}

impl Drop for Wine {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Wine set up to run the Windows binary, or why it cannot be.
fn wine_with(exe: &Path) -> Result<Wine, String> {
    let wine = on_path("wine")
        .or_else(|| on_path("wine64"))
        .ok_or("Wine is not installed (apt: wine64 wine)")?;
    let wineserver = on_path("wineserver").ok_or("wineserver is not on PATH (apt: wine)")?;
    let w = Wine {
        dir: tempfile::tempdir().map_err(|e| e.to_string())?,
        wine,
        wineserver,
    };
    std::fs::create_dir(w.app()).map_err(|e| e.to_string())?;
    std::fs::copy(exe, w.app().join("osmeter.exe")).map_err(|e| e.to_string())?;
    // The first start creates the prefix (tens of seconds).
    let version = |w: &Wine| {
        let out = output_within(w.osmeter(&["--version"]), Duration::from_secs(300));
        (String::from_utf8_lossy(&out.stdout).into_owned(), out)
    };
    let (text, out) = version(&w);
    if text.starts_with("osmeter ") {
        return Ok(w);
    }
    // Wine before 9 has no bcryptprimitives.dll, which Rust's std imports: build the shim
    // beside the binary (the application folder is searched first).
    let gcc = on_path("x86_64-w64-mingw32-gcc").ok_or_else(|| {
        format!(
            "Wine cannot start osmeter.exe ({}) and mingw-w64 is missing to build the \
             bcryptprimitives shim",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wine/bcryptprimitives.c");
    let built = Command::new(gcc)
        .args(["-shared", "-O2", "-o"])
        .arg(w.app().join("bcryptprimitives.dll"))
        .arg(src)
        .arg("-ladvapi32")
        .output()
        .map_err(|e| e.to_string())?;
    if !built.status.success() {
        return Err(format!(
            "building the bcryptprimitives shim failed: {}",
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    let (text, out) = version(&w);
    if !text.starts_with("osmeter ") {
        return Err(format!(
            "Wine cannot start osmeter.exe even with the shim: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(w)
}

/// `osmeter serve` under Wine, its stderr collected line by line.
struct Serve {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(w: &Wine) -> Serve {
    serve_on(w, "127.0.0.1")
}

fn serve_on(w: &Wine, bind: &str) -> Serve {
    let mut child = w
        .osmeter(&[
            "serve",
            "--bind",
            bind,
            "--port",
            "0",
            "--token",
            TOKEN,
            "--idle-timeout",
            "10",
            "--parent-watch",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start osmeter.exe serve under Wine");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(120));
    let mut s = Serve {
        child,
        addr: "127.0.0.1:0".parse().unwrap(),
        log,
    };
    let line = line.unwrap_or_else(|_| panic!("no listening line in 120 s: {:?}", s.log));
    let want = match bind.contains(':') {
        true => format!("osmeter serve listening on [{bind}]:"),
        false => format!("osmeter serve listening on {bind}:"),
    };
    assert!(line.starts_with(&want), "{line:?} {:?}", s.log);
    s.addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    s
}

fn results_json(out: &Path) -> serde_json::Value {
    let folder = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("results.json").is_file())
        .expect("a results folder");
    serde_json::from_slice(&std::fs::read(folder.join("results.json")).unwrap()).unwrap()
}

fn run_client(addr: SocketAddr, token: &str, only: &str, out: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_osmeter"));
    c.args(["run", "--profile", "quick", "--only", only])
        .arg("--peer")
        .arg(addr.to_string())
        .args(["--peer-token", token, "--peer-name", "wine-peer"])
        .args(["--no-history", "--quiet", "--out"])
        .arg(out);
    output_within(c, Duration::from_secs(300))
}

#[test]
fn the_windows_peer_under_wine_serves_the_linux_client() {
    if let Err(why) = on_path("wine")
        .or_else(|| on_path("wine64"))
        .ok_or("Wine is not installed (apt: wine64 wine)")
    {
        return common::skip(TEST, why);
    }
    let exe = match windows_exe() {
        Ok(e) => e,
        Err(why) => return common::skip(TEST, &why),
    };
    let w = match wine_with(&exe) {
        Ok(w) => w,
        Err(why) => return common::skip(TEST, &why),
    };
    let mut s = serve(&w);
    let welcome = common::peer_echo_works(s.addr, TOKEN);
    assert!(welcome.info.starts_with("osmeter "), "{welcome:?}");

    // The quick net.* from the Linux binary: every experiment ok.
    let out = w.dir.path().join("out");
    let run = run_client(s.addr, TOKEN, "net.rtt,net.bandwidth,net.connect", &out);
    let doc = results_json(&out);
    let summary: Vec<_> = doc["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["id"].clone(), e["status"].clone(), e["reason"].clone()))
        .collect();
    assert!(
        run.status.success(),
        "{}: {summary:?} {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    for id in ["net.rtt", "net.bandwidth", "net.connect"] {
        let e = doc["experiments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {summary:?}"));
        assert_eq!(e["status"], "ok", "{id}: {summary:?}");
    }
    let rtt = doc["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "net.rtt")
        .unwrap();
    let names: Vec<&str> = rtt["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    // Loopback and the Windows peer, side by side.
    for n in ["tcp", "udp", "remote_tcp", "remote_udp"] {
        assert!(names.contains(&n), "{n}: {names:?}");
    }
    let peer = &doc["config"]["peer"];
    assert_eq!(peer["name"], "wine-peer", "{peer}");
    assert_eq!(peer["address"], s.addr.to_string(), "{peer}");
    // It described itself from Windows's APIs (what Wine answers is printed).
    let m = &peer["machine"];
    eprintln!("the Windows peer under Wine describes itself as {m}");
    assert!(m["logical_cpus"].as_u64().is_some_and(|n| n >= 1), "{peer}");
    assert!(
        m["memory_bytes"].as_u64().is_some_and(|b| b > 1 << 26),
        "{peer}"
    );
    assert!(
        m["os"].as_str().is_some_and(|o| o.contains("Windows")),
        "{peer}"
    );
    assert_eq!(m["arch"], "x86_64", "{peer}");

    // `--bind ::` serves IPv4 and IPv6 clients, control, UDP and connect sockets alike.
    dual_stack(&w);

    // A wrong token: one line on the client (the library's error and the run's reason)...
    let err = Client::new(s.addr, Some("wrong".into()))
        .open(&Request::Echo {
            size: 16,
            pin_cpu: -1,
        })
        .err()
        .expect("a wrong token is refused");
    assert!(matches!(err, PeerError::BadToken(..)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("refused our token") && !text.contains('\n'),
        "{text}"
    );
    let bad_out = w.dir.path().join("out-wrong-token");
    let run = run_client(s.addr, "wrong", "net.rtt", &bad_out);
    assert_eq!(run.status.code(), Some(1), "a failed experiment exits 1");
    let doc = results_json(&bad_out);
    let reason = doc["experiments"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("refused our token") && !reason.contains('\n'),
        "{reason}"
    );
    // ...and one line each on the peer.
    std::thread::sleep(Duration::from_millis(300));
    let refused: Vec<String> = s
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("wrong token"))
        .cloned()
        .collect();
    assert!(refused.len() >= 2, "{:?}", s.log.lock().unwrap());
    for l in &refused {
        assert!(
            l.starts_with("osmeter serve: 127.0.0.1:") && l.ends_with(": refused: wrong token"),
            "{l}"
        );
    }

    // Garbage leaves it serving.
    let hello = common::peer_frame(
        1,
        &p::Hello {
            version: p::VERSION,
            token: TOKEN.into(),
        }
        .encode(),
    );
    let mut echo_cut = hello.clone();
    echo_cut.extend(common::peer_frame(
        4,
        &Request::Echo {
            size: 64,
            pin_cpu: -1,
        }
        .encode(),
    ));
    echo_cut.extend_from_slice(&[1u8; 10]);
    let mut huge = b"OM\x01".to_vec();
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    let mut bad_request = hello.clone();
    bad_request.extend(common::peer_frame(4, &common::random_bytes(40, 7)));
    let abuse: Vec<Vec<u8>> = vec![
        common::random_bytes(3000, 1),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        huge,
        hello[..5].to_vec(),
        bad_request,
        echo_cut,
        Vec::new(),
    ];
    for (i, bytes) in abuse.iter().enumerate() {
        let mut c = TcpStream::connect(s.addr).expect("connect");
        let _ = c.write_all(bytes);
        if i % 2 == 0 {
            drop(c); // abrupt
        } else {
            let _ = c.shutdown(Shutdown::Write);
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = c.read_to_end(&mut Vec::new());
        }
        common::peer_echo_works(s.addr, TOKEN);
        assert!(
            matches!(s.child.try_wait(), Ok(None)),
            "serve exited after abuse {i}: {:?}",
            s.log.lock().unwrap()
        );
    }

    // Shutdown: closing stdin ends the peer (--parent-watch), then the prefix's wineserver
    // and services are ended; nothing of the prefix may remain.
    drop(s.child.stdin.take());
    let began = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "serve still running 60 s after its stdin closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "serve ended with {status}");
    w.kill_all();
    let began = Instant::now();
    loop {
        let left = w.processes();
        if left.is_empty() {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "still running 30 s after wineserver -k: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Windows peer on `--bind ::`: over 127.0.0.1 and over ::1, an echo, a description, a
/// UDP round trip and a connection to its connect target (Windows makes IPv6 sockets
/// IPv6-only unless told otherwise; Wine passes the option to Linux's sockets).
fn dual_stack(w: &Wine) {
    let s = serve_on(w, "::");
    for host in ["127.0.0.1", "[::1]"] {
        let addr: SocketAddr = format!("{host}:{}", s.addr.port()).parse().unwrap();
        common::peer_echo_works(addr, TOKEN);
        let c = Client::new(addr, Some(TOKEN.into()));
        let h = c.describe().expect("asked").expect("described");
        assert!(
            h.os.as_deref().is_some_and(|o| o.contains("Windows")),
            "{h:?}"
        );
        let u = c.open(&Request::UdpEcho { max_size: 8 }).expect("UDP echo");
        let udp = std::net::UdpSocket::bind(SocketAddr::new(
            match addr {
                SocketAddr::V4(_) => "0.0.0.0".parse().unwrap(),
                SocketAddr::V6(_) => "::".parse().unwrap(),
            },
            0,
        ))
        .unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let dest = SocketAddr::new(addr.ip(), u.port);
        let mut back = [0u8; 16];
        let answered = (0..5).any(|_| {
            udp.send_to(b"12345678", dest).unwrap();
            matches!(udp.recv_from(&mut back), Ok((8, _)))
        });
        assert!(answered, "{host}: no UDP echo from {dest}: {:?}", s.log);
        drop(u);
        let t = c
            .open(&Request::ConnectTarget { max_accepts: 4 })
            .expect("connect target");
        let dest = SocketAddr::new(addr.ip(), t.port);
        TcpStream::connect_timeout(&dest, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{host}: connect to {dest}: {e} {:?}", s.log));
        eprintln!("--bind :: served {host}: echo, description, UDP, connect");
    }
}
