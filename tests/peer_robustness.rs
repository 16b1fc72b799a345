//! The peer under abuse: random and truncated frames, abrupt disconnects, a wrong token
//! and a wrong protocol version, against a real `osmeter serve` process on loopback.
//! Traffic goes only to 127.0.0.1.

mod common;

use osmeter::peer::client::{Client, PeerError};
use osmeter::peer::protocol::{self as p, Request};
use proptest::prelude::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const TOKEN: &str = "robustness-token";

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

fn start(args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .arg("serve")
        .args(args)
        // The peer exits when this pipe closes: the shared server in a static is never
        // dropped, and must not outlive the test process.
        .arg("--parent-watch")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start osmeter serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    Serve { child, addr, log }
}

/// One server for all property cases; it exits with the test process (--parent-watch).
fn shared() -> &'static Mutex<Serve> {
    static S: OnceLock<Mutex<Serve>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(start(&[
            "--port",
            "0",
            "--token",
            TOKEN,
            "--idle-timeout",
            "5",
        ]))
    })
}

/// Byte streams a broken or hostile client might send.
fn abuse() -> impl Strategy<Value = Vec<u8>> {
    let hello = common::peer_frame(
        1,
        &p::Hello {
            version: p::VERSION,
            token: TOKEN.into(),
        }
        .encode(),
    );
    let h2 = hello.clone();
    prop_oneof![
        // Pure garbage.
        proptest::collection::vec(any::<u8>(), 0..3000),
        // A good hello then a random (often invalid) request payload.
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(move |r| {
            let mut v = hello.clone();
            v.extend(common::peer_frame(4, &r));
            v
        }),
        // A valid session cut anywhere (truncated frames).
        (0usize..200, 0u8..5).prop_map(move |(cut, kind)| {
            let req = match kind {
                0 => Request::Echo {
                    size: 8,
                    pin_cpu: -1,
                },
                1 => Request::Sink { interval_ms: 10 },
                2 => Request::Source {
                    duration_ms: 200,
                    write_size: 4096,
                },
                3 => Request::UdpEcho { max_size: 8 },
                _ => Request::ConnectTarget { max_accepts: 5 },
            };
            let mut v = h2.clone();
            v.extend(common::peer_frame(4, &req.encode()));
            v.extend_from_slice(&[1u8; 40]);
            v.truncate(cut.min(v.len()));
            v
        }),
        // Frame headers with random types and lengths (some huge).
        (
            any::<u8>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(t, len, body)| {
                let mut v = b"OM".to_vec();
                v.push(t);
                v.extend_from_slice(&len.to_be_bytes());
                v.extend(body);
                v
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn serve_survives_abuse_and_keeps_serving(bytes in abuse(), reset in any::<bool>()) {
        let s = shared().lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(mut c) = TcpStream::connect(s.addr) {
            let _ = c.write_all(&bytes);
            if reset {
                // Abrupt: close at once (unread replies make the kernel send a reset).
                drop(c);
            } else {
                let _ = c.shutdown(Shutdown::Write);
                let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
                let mut sink = Vec::new();
                let _ = c.read_to_end(&mut sink);
            }
        }
        common::peer_echo_works(s.addr, TOKEN);
        let mut s = s;
        prop_assert!(matches!(s.child.try_wait(), Ok(None)), "serve exited");
    }
}

#[test]
fn wrong_token_and_wrong_version_are_refused_clearly() {
    let s = start(&["--port", "0", "--token", TOKEN]);
    let echo = Request::Echo {
        size: 1,
        pin_cpu: -1,
    };

    let err = Client::new(s.addr, Some("wrong".into()))
        .open(&echo)
        .err()
        .expect("wrong token refused");
    assert!(matches!(err, PeerError::BadToken(..)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("refused our token") && text.contains("--peer-token"),
        "{text}"
    );

    let err = Client::new(s.addr, None).open(&echo).err().unwrap();
    assert!(err.to_string().contains("requires a token"), "{err}");

    let mut c = Client::new(s.addr, Some(TOKEN.into()));
    c.version = p::VERSION + 1;
    let err = c.open(&echo).err().expect("wrong version refused");
    assert!(
        matches!(err, PeerError::WrongVersion { server, .. } if server == p::VERSION),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("protocol version mismatch")
            && text.contains(&format!("speaks osmeter protocol {}", p::VERSION)),
        "{text}"
    );

    // Still serving, and the refusals were logged on one line each.
    common::peer_echo_works(s.addr, TOKEN);
    std::thread::sleep(Duration::from_millis(200));
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("refused: wrong token"), "{log}");
    assert!(log.contains("refused: protocol version mismatch"), "{log}");
}

#[test]
fn a_service_that_is_not_a_peer_is_named() {
    // A listener that answers like a web server.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = l.accept() {
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let err = Client::new(addr, None)
        .open(&Request::Echo {
            size: 1,
            pin_cpu: -1,
        })
        .err()
        .unwrap();
    assert!(matches!(err, PeerError::NotAPeer(..)), "{err}");
    assert!(err.to_string().contains("not an osmeter serve"), "{err}");
}

#[test]
fn default_bind_is_loopback_only() {
    // The default port may be taken on a shared machine; --port 0 keeps the default bind.
    let s = start(&["--port", "0"]);
    assert!(s.addr.ip().is_loopback(), "{}", s.addr);
    assert_eq!(s.addr.ip().to_string(), "127.0.0.1");
}

#[test]
fn bad_serve_options_are_one_line_usage_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_osmeter"))
        .args(["serve", "--bind", "not-an-ip"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--bind"), "{err}");
}

/// `osmeter serve ARGS` with OSMETER_SERVE_TOKEN as given (None: unset).
fn serve_cmd(args: &[&str], env_token: Option<&str>) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_osmeter"));
    c.arg("serve").args(args).env_remove("OSMETER_SERVE_TOKEN");
    if let Some(t) = env_token {
        c.env("OSMETER_SERVE_TOKEN", t);
    }
    c
}

/// Starts serve, reads its "listening on" line, kills it; returns the line and stderr.
fn listens(mut c: Command) -> (String, String) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start osmeter serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // stderr up to its own "listening on" line (written after stdout's), then kill.
    let mut err = String::new();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    while !err.contains("listening on") {
        if stderr.read_line(&mut err).unwrap_or(0) == 0 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (line, err)
}

#[test]
fn off_loopback_without_a_token_is_refused_in_one_line() {
    for bind in ["0.0.0.0", "::"] {
        let out = serve_cmd(&["--bind", bind, "--port", "0"], None)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bind}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("token"), "{err}");
        assert!(out.stdout.is_empty());
    }
    // An empty token is no token.
    let out = serve_cmd(&["--bind", "0.0.0.0", "--port", "0"], Some(""))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn off_loopback_serves_with_a_token_or_with_no_token_and_a_warning() {
    let (line, err) = listens(serve_cmd(
        &["--bind", "0.0.0.0", "--port", "0", "--no-token"],
        None,
    ));
    assert!(
        line.starts_with("osmeter serve listening on 0.0.0.0:"),
        "{line}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("warning") && l.contains("no token")),
        "{err}"
    );
    for (args, env) in [
        (
            &["--bind", "0.0.0.0", "--port", "0", "--token", "t"][..],
            None,
        ),
        (&["--bind", "0.0.0.0", "--port", "0"][..], Some("t")),
    ] {
        let (line, err) = listens(serve_cmd(args, env));
        assert!(
            line.starts_with("osmeter serve listening on 0.0.0.0:"),
            "{line}"
        );
        assert!(!err.contains("warning"), "{err}");
        assert!(err.contains("token required"), "{err}");
    }
    // Loopback needs neither.
    let (line, err) = listens(serve_cmd(&["--bind", "127.0.0.1", "--port", "0"], None));
    assert!(
        line.starts_with("osmeter serve listening on 127.0.0.1:"),
        "{line}"
    );
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn session_limit_refuses_as_busy() {
    let s = start(&["--port", "0", "--max-sessions", "1"]);
    let c = Client::new(s.addr, None);
    let held = c
        .open(&Request::Echo {
            size: 1,
            pin_cpu: -1,
        })
        .unwrap();
    let err = c
        .open(&Request::Echo {
            size: 1,
            pin_cpu: -1,
        })
        .err()
        .expect("second session refused");
    assert!(err.to_string().contains("busy"), "{err}");
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    // The slot is free again.
    let _ok = c
        .open(&Request::Echo {
            size: 1,
            pin_cpu: -1,
        })
        .unwrap();
}
