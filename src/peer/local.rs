//! The loopback peer `osmeter run` starts for itself: `osmeter serve` in a separate
//! process on an ephemeral port, with a random token, killed and reaped when dropped.
//! The child also exits when our end of its stdin closes, so even a killed run leaves
//! no peer behind.

use super::server::{ServeConfig, Server, ServerHandle};
use anyhow::{anyhow, Context as _};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub enum LocalPeer {
    Process {
        child: Child,
        addr: SocketAddr,
        token: String,
        log: Arc<Mutex<Vec<String>>>,
    },
    /// Used only when no osmeter binary can be found (e.g. inside library tests).
    InProcess { server: ServerHandle, token: String },
}

/// The osmeter binary: OSMETER_EXE, this executable when it is osmeter, or the osmeter
/// next to a test binary in target/*/deps.
pub fn osmeter_exe() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OSMETER_EXE") {
        return Some(PathBuf::from(p));
    }
    let me = std::env::current_exe().ok()?;
    if me.file_name().is_some_and(|n| n == "osmeter") {
        return Some(me);
    }
    let dir = me.parent()?;
    [dir.join("osmeter"), dir.parent()?.join("osmeter")]
        .into_iter()
        .find(|p| p.is_file())
}

fn random_token() -> String {
    let mut b = [0u8; 16];
    if crate::platform::random_bytes(&mut b).is_err() {
        // Weak but harmless fallback: the token only keeps other local clients out.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (t ^ (std::process::id() as u128) << 64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl LocalPeer {
    /// Starts the peer; `cpus` is the set it may run on (the run pins itself to one).
    pub fn start(cpus: &[usize]) -> anyhow::Result<LocalPeer> {
        let token = random_token();
        let Some(exe) = osmeter_exe() else {
            let cfg = ServeConfig {
                bind: SocketAddr::from(([127, 0, 0, 1], 0)),
                token: Some(token.clone()),
                max_sessions: 64,
                log: false,
                ..Default::default()
            };
            let server = Server::bind(cfg)?.spawn()?;
            return Ok(LocalPeer::InProcess { server, token });
        };
        let affinity: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
        let mut child = Command::new(&exe)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0"])
            .args(["--max-sessions", "64", "--parent-watch"])
            .args(["--affinity", &affinity.join(",")])
            .env("OSMETER_SERVE_TOKEN", &token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start the loopback peer {}", exe.display()))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let log = Arc::new(Mutex::new(Vec::new()));
        // From here on Drop kills and reaps the child, whatever fails next.
        let mut peer = LocalPeer::Process {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token,
            log: log.clone(),
        };
        if let Some(err) = stderr {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock() {
                        if l.len() >= 50 {
                            l.remove(0);
                        }
                        l.push(line);
                    }
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(out) = stdout {
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(out).read_line(&mut line);
                let _ = tx.send(line);
            });
        }
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let parsed = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse::<SocketAddr>().ok());
        match (&mut peer, parsed) {
            (LocalPeer::Process { addr, .. }, Some(a)) => *addr = a,
            _ => {
                std::thread::sleep(Duration::from_millis(50));
                return Err(anyhow!(
                    "the loopback peer did not start: {}",
                    peer.last_log().unwrap_or_else(|| "no output".into())
                ));
            }
        }
        Ok(peer)
    }

    pub fn addr(&self) -> SocketAddr {
        match self {
            LocalPeer::Process { addr, .. } => *addr,
            LocalPeer::InProcess { server, .. } => server.addr,
        }
    }

    pub fn token(&self) -> &str {
        match self {
            LocalPeer::Process { token, .. } | LocalPeer::InProcess { token, .. } => token,
        }
    }

    /// Process id of a separate peer process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            LocalPeer::Process { child, .. } => Some(child.id()),
            LocalPeer::InProcess { .. } => None,
        }
    }

    pub fn last_log(&self) -> Option<String> {
        match self {
            LocalPeer::Process { log, .. } => log.lock().ok()?.last().cloned(),
            LocalPeer::InProcess { .. } => None,
        }
    }

    /// False once a peer process has exited.
    pub fn alive(&mut self) -> bool {
        match self {
            LocalPeer::Process { child, .. } => matches!(child.try_wait(), Ok(None)),
            LocalPeer::InProcess { .. } => true,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            LocalPeer::Process { addr, .. } => {
                format!("loopback peer {addr} (osmeter serve, separate process)")
            }
            LocalPeer::InProcess { server, .. } => format!(
                "loopback peer {} (in-process thread: no osmeter binary found)",
                server.addr
            ),
        }
    }
}

impl Drop for LocalPeer {
    fn drop(&mut self) {
        if let LocalPeer::Process { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
