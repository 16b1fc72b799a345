//! The client side of the peer protocol: address parsing, the handshake, and one test
//! session per connection. Every failure becomes one clear line naming the peer.

use super::protocol::{self as p, FrameError, FrameType, RefuseCode, Request};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why talking to a peer failed.
#[derive(Debug)]
pub enum PeerError {
    BadAddress(String),
    Unreachable(SocketAddr, io::Error),
    WrongVersion {
        addr: SocketAddr,
        server: u16,
        message: String,
    },
    BadToken(SocketAddr, String),
    Refused(SocketAddr, String),
    NotAPeer(SocketAddr, String),
    Broken(SocketAddr, String),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::BadAddress(s) => write!(f, "{s}"),
            PeerError::Unreachable(a, e) => write!(
                f,
                "cannot reach the peer at {a}: {e} (is `osmeter serve` running there and reachable?)"
            ),
            PeerError::WrongVersion { addr, server, .. } => write!(
                f,
                "protocol version mismatch: the peer at {addr} speaks osmeter protocol {server}, this osmeter speaks {}; run the same osmeter version on both hosts",
                p::VERSION
            ),
            PeerError::BadToken(a, m) => write!(
                f,
                "the peer at {a} refused our token ({m}); pass the token its `osmeter serve --token` uses with --peer-token"
            ),
            PeerError::Refused(a, m) => write!(f, "the peer at {a} refused the test: {m}"),
            PeerError::NotAPeer(a, m) => {
                write!(f, "the service at {a} is not an osmeter serve ({m})")
            }
            PeerError::Broken(a, m) => write!(f, "the connection to the peer at {a} broke: {m}"),
        }
    }
}

impl std::error::Error for PeerError {}

/// Splits `HOST[:PORT]` (IPv6 as `[ADDR]:PORT` or a bare address) without resolving it.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub(crate) fn parse_peer(spec: &str) -> Result<(String, u16), PeerError> {
    let bad = |why: &str| PeerError::BadAddress(format!("bad --peer '{spec}': {why}"));
    let s = spec.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
        match after {
            "" => (h.to_string(), p::DEFAULT_PORT),
            a => (
                h.to_string(),
                parse_port(
                    a.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':PORT' after ']'"))?,
                )
                .ok_or_else(|| bad("port must be 1-65535"))?,
            ),
        }
    } else if s.matches(':').count() > 1 {
        (s.to_string(), p::DEFAULT_PORT) // a bare IPv6 address
    } else if let Some((h, port)) = s.split_once(':') {
        (
            h.to_string(),
            parse_port(port).ok_or_else(|| bad("port must be 1-65535"))?,
        )
    } else {
        (s.to_string(), p::DEFAULT_PORT)
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad("missing or malformed host"));
    }
    Ok((host, port))
}

/// Parses and resolves `HOST[:PORT]`, preferring IPv4 (the ICMP comparison is IPv4 only).
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub(crate) fn resolve_peer(spec: &str) -> Result<SocketAddr, PeerError> {
    let (host, port) = parse_peer(spec)?;
    let bad = |why: &str| PeerError::BadAddress(format!("bad --peer '{spec}': {why}"));
    let addrs: Vec<SocketAddr> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve: {e}")))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| bad("resolves to no address"))
}

#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
fn parse_port(s: &str) -> Option<u16> {
    s.parse::<u16>().ok().filter(|&p| p > 0)
}

/// A client for one peer.
#[derive(Debug, Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub token: Option<String>,
    pub timeout: Duration,
    /// Protocol version sent in Hello (differs from `VERSION` only in tests).
    pub version: u16,
}

/// An accepted test session: the control connection, the port the test uses (UDP echo
/// and connect target) and the server's welcome.
pub struct Session {
    pub stream: TcpStream,
    pub port: u16,
    pub welcome: p::Welcome,
    pub addr: SocketAddr,
}

impl Client {
    pub fn new(addr: SocketAddr, token: Option<String>) -> Client {
        Client {
            addr,
            token,
            timeout: Duration::from_secs(5),
            version: p::VERSION,
        }
    }

    fn broken(&self, e: impl std::fmt::Display) -> PeerError {
        PeerError::Broken(self.addr, e.to_string())
    }

    fn answer(
        &self,
        stream: &mut TcpStream,
        stage: &str,
    ) -> Result<(FrameType, Vec<u8>), PeerError> {
        match p::read_frame(stream) {
            Ok((FrameType::Refuse, payload)) => {
                let r = p::Refuse::decode(&payload)
                    .map_err(|e| PeerError::NotAPeer(self.addr, e.to_string()))?;
                Err(match r.code {
                    RefuseCode::WrongVersion => PeerError::WrongVersion {
                        addr: self.addr,
                        server: r.server_version,
                        message: r.message,
                    },
                    RefuseCode::BadToken => PeerError::BadToken(self.addr, r.message),
                    _ => PeerError::Refused(self.addr, r.message),
                })
            }
            Ok(x) => Ok(x),
            Err(
                e
                @ (FrameError::BadMagic(_) | FrameError::UnknownType(_) | FrameError::TooLarge(_)),
            ) => Err(PeerError::NotAPeer(
                self.addr,
                format!("it answered with {e}"),
            )),
            Err(FrameError::Closed) => Err(PeerError::NotAPeer(
                self.addr,
                format!("it closed the connection {stage}"),
            )),
            Err(e) => Err(self.broken(format!("{e} {stage}"))),
        }
    }

    /// Connects and shakes hands.
    fn hello(&self) -> Result<(TcpStream, p::Welcome), PeerError> {
        let mut stream = TcpStream::connect_timeout(&self.addr, self.timeout)
            .map_err(|e| PeerError::Unreachable(self.addr, e))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(self.timeout))
            .and_then(|_| stream.set_write_timeout(Some(self.timeout)))
            .map_err(|e| self.broken(e))?;
        let hello = p::Hello {
            version: self.version,
            token: self.token.clone().unwrap_or_default().into_bytes(),
        };
        p::write_frame(&mut stream, FrameType::Hello, &hello.encode())
            .map_err(|e| self.broken(e))?;
        let (t, payload) = self.answer(&mut stream, "after our hello")?;
        if t != FrameType::Welcome {
            return Err(PeerError::NotAPeer(
                self.addr,
                format!("expected welcome, got {t:?}"),
            ));
        }
        let welcome = p::Welcome::decode(&payload)
            .map_err(|e| PeerError::NotAPeer(self.addr, e.to_string()))?;
        Ok((stream, welcome))
    }

    /// Sends `req` on a welcomed connection and reads the go-ahead's port.
    fn request(&self, stream: &mut TcpStream, req: &Request) -> Result<u16, PeerError> {
        p::write_frame(stream, FrameType::Request, &req.encode()).map_err(|e| self.broken(e))?;
        let (t, payload) = self.answer(stream, "after our request")?;
        if t != FrameType::Ready {
            return Err(PeerError::NotAPeer(
                self.addr,
                format!("expected ready, got {t:?}"),
            ));
        }
        p::decode_ready(&payload).map_err(|e| PeerError::NotAPeer(self.addr, e.to_string()))
    }

    /// Connects, shakes hands and starts one test.
    pub fn open(&self, req: &Request) -> Result<Session, PeerError> {
        let (mut stream, welcome) = self.hello()?;
        let port = self.request(&mut stream, req)?;
        Ok(Session {
            stream,
            port,
            welcome,
            addr: self.addr,
        })
    }

    /// The peer's description of its machine. A peer older than the request refuses it
    /// (Ok with the reason: not an error of the run); Err when the peer cannot be asked.
    pub fn describe(&self) -> Result<Result<p::HostInfo, String>, PeerError> {
        let (mut stream, welcome) = self.hello()?;
        match self.request(&mut stream, &Request::Describe) {
            Ok(_) => {}
            Err(PeerError::Refused(..)) => {
                return Ok(Err(format!(
                    "the peer did not describe itself (version {}, protocol {}: older than the request)",
                    welcome.info, welcome.version
                )))
            }
            Err(e) => return Err(e),
        }
        match p::read_frame(&mut stream) {
            Ok((FrameType::Report, payload)) => Ok(Ok(p::HostInfo::decode(&payload))),
            Ok((t, _)) => Err(self.broken(format!("expected its description, got {t:?}"))),
            Err(e) => Err(self.broken(format!("{e} waiting for its description"))),
        }
    }
}

impl Session {
    fn broken(&self, e: impl std::fmt::Display) -> PeerError {
        PeerError::Broken(self.addr, e.to_string())
    }

    /// Ends a data phase the client was sending in, and reads the server's report.
    fn finish(&mut self, what: &'static str, wait: Duration) -> Result<Vec<u8>, PeerError> {
        let _ = self.stream.flush();
        self.stream
            .shutdown(Shutdown::Write)
            .map_err(|e| self.broken(e))?;
        self.stream
            .set_read_timeout(Some(wait))
            .map_err(|e| self.broken(e))?;
        match p::read_frame(&mut self.stream) {
            Ok((FrameType::Report, payload)) => Ok(payload),
            Ok((t, _)) => Err(self.broken(format!("expected the {what}, got {t:?}"))),
            Err(e) => Err(self.broken(format!("{e} waiting for the {what}"))),
        }
    }

    pub fn finish_echo(mut self) -> Result<p::EchoReport, PeerError> {
        let payload = self.finish("echo report", Duration::from_secs(5))?;
        p::EchoReport::decode(&payload).map_err(|e| self.broken(e))
    }

    /// `wait` covers draining what is still queued on a slow link.
    #[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
    pub(crate) fn finish_sink(mut self, wait: Duration) -> Result<p::SinkReport, PeerError> {
        let payload = self.finish("sink report", wait)?;
        p::SinkReport::decode(&payload).map_err(|e| self.broken(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_syntax() {
        let d = p::DEFAULT_PORT;
        assert_eq!(parse_peer("host").unwrap(), ("host".into(), d));
        assert_eq!(parse_peer("10.0.0.1:80").unwrap(), ("10.0.0.1".into(), 80));
        assert_eq!(parse_peer("[::1]:81").unwrap(), ("::1".into(), 81));
        assert_eq!(parse_peer("::1").unwrap(), ("::1".into(), d));
        for bad in ["", ":80", "h:0", "h:x", "h:70000", "[::1", "[::1]x", "a b"] {
            let e = parse_peer(bad).err().unwrap().to_string();
            assert!(e.starts_with("bad --peer"), "{bad}: {e}");
        }
        assert_eq!(
            resolve_peer("127.0.0.1:5").unwrap(),
            "127.0.0.1:5".parse().unwrap()
        );
    }

    /// A peer of before the describe request: it welcomes, then refuses request kind 6 as
    /// the old server did ("malformed request (unknown kind)").
    fn old_peer() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = p::read_frame(&mut s).unwrap();
            let w = p::Welcome {
                version: p::VERSION,
                cpus: 2,
                info: "osmeter 0.0.9".into(),
            };
            p::write_frame(&mut s, FrameType::Welcome, &w.encode()).unwrap();
            let (_, req) = p::read_frame(&mut s).unwrap();
            assert_eq!(req, [6], "the describe request is kind 6");
            let r = p::Refuse {
                code: RefuseCode::BadRequest,
                server_version: p::VERSION,
                message: "malformed request (unknown kind)".into(),
            };
            p::write_frame(&mut s, FrameType::Refuse, &r.encode()).unwrap();
        });
        addr
    }

    #[test]
    fn an_older_peer_is_undescribed_not_an_error() {
        let said = Client::new(old_peer(), None).describe().unwrap();
        assert_eq!(
            said.unwrap_err(),
            "the peer did not describe itself (version osmeter 0.0.9, protocol 1: older than the request)"
        );
    }

    #[test]
    fn this_peer_describes_its_machine_on_both_families_of_a_dual_stack_bind() {
        use crate::peer::server::{ServeConfig, Server};
        let cfg = ServeConfig {
            bind: "[::]:0".parse().unwrap(),
            log: false,
            ..Default::default()
        };
        let srv = Server::bind(cfg).unwrap().spawn().unwrap();
        let port = srv.addr.port();
        for host in ["127.0.0.1", "[::1]"] {
            let addr: SocketAddr = format!("{host}:{port}").parse().unwrap();
            let h = Client::new(addr, None).describe().unwrap().unwrap();
            assert!(h.logical_cpus.is_some_and(|n| n >= 1), "{h:?}");
            assert!(h.memory_bytes.is_some_and(|b| b > 1 << 20), "{h:?}");
            assert!(h.os.is_some() && h.cpu_model.is_some(), "{h:?}");
            // The connection arrived on loopback, which reports no link speed.
            assert_eq!(h.nic.as_deref(), Some("lo"), "{host}: {h:?}");
            assert!(h.notes.iter().any(|n| n.contains("no link speed")), "{h:?}");
        }
    }
}
