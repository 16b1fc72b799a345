//! `osmeter serve`: the peer network experiments talk to.
//!
//! One thread per session, a hard cap on sessions, a size cap on every frame, a time cap
//! on every test and an idle timeout on every read, so that no client (garbage, truncated
//! frames, a stalled or vanished peer) can crash it, hang it or make it allocate much.
//! Rejected and broken clients are logged on one line each to stderr. It never touches
//! the file system.

use super::protocol::{self as p, FrameError, FrameType, Refuse, RefuseCode, Request};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    pub token: Option<String>,
    pub max_sessions: usize,
    /// Longest any one test may run.
    pub max_duration: Duration,
    /// A session that sends nothing for this long is dropped.
    pub idle_timeout: Duration,
    /// A new connection must say Hello within this.
    pub handshake_timeout: Duration,
    /// Log rejected and broken clients to stderr.
    pub log: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], p::DEFAULT_PORT)),
            token: None,
            max_sessions: 16,
            max_duration: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            log: true,
        }
    }
}

/// Connections being refused for lack of a session slot, beyond which they are dropped.
const MAX_REFUSING: usize = 4;

pub struct Server {
    listener: TcpListener,
    cfg: Arc<ServeConfig>,
    active: Arc<AtomicUsize>,
    refusing: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

/// Decrements a counter when a session thread ends, however it ends.
struct ConnSlot(Arc<AtomicUsize>);
impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    /// Listens on `cfg.bind`; an unspecified IPv6 address (`::`) takes IPv4 clients too.
    pub fn bind(cfg: ServeConfig) -> io::Result<Server> {
        let listener = crate::platform::net::tcp_listen(cfg.bind)?;
        Ok(Server {
            listener,
            cfg: Arc::new(cfg),
            active: Arc::new(AtomicUsize::new(0)),
            refusing: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until stopped (only an in-process handle stops it).
    pub fn serve(&self) {
        while !self.stop.load(Ordering::SeqCst) {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off rather than spin.
                    log(&self.cfg, None, &format!("accept failed: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            self.dispatch(stream, peer);
        }
    }

    fn dispatch(&self, stream: TcpStream, peer: SocketAddr) {
        let cfg = self.cfg.clone();
        if self.active.fetch_add(1, Ordering::SeqCst) < cfg.max_sessions {
            let slot = ConnSlot(self.active.clone());
            let spawned = std::thread::Builder::new()
                .name("osmeter-session".into())
                .spawn(move || {
                    let _slot = slot;
                    if let Err(e) = session(stream, peer, &cfg) {
                        log(&cfg, Some(peer), &e);
                    }
                });
            if let Err(e) = spawned {
                log(
                    &self.cfg,
                    Some(peer),
                    &format!("dropped: cannot start a thread: {e}"),
                );
            }
            return;
        }
        self.active.fetch_sub(1, Ordering::SeqCst);
        if self.refusing.fetch_add(1, Ordering::SeqCst) < MAX_REFUSING {
            let slot = ConnSlot(self.refusing.clone());
            let max = cfg.max_sessions;
            let spawned = std::thread::Builder::new()
                .name("osmeter-refuse".into())
                .spawn(move || {
                    let _slot = slot;
                    let msg = format!("busy: {max} sessions already running");
                    let _ = refuse_after_hello(stream, &cfg, RefuseCode::Busy, &msg);
                    log(&cfg, Some(peer), &format!("refused: {msg}"));
                });
            if spawned.is_err() {
                log(&self.cfg, Some(peer), "dropped: busy");
            }
        } else {
            self.refusing.fetch_sub(1, Ordering::SeqCst);
            log(
                &self.cfg,
                Some(peer),
                "dropped: too many connections at once",
            );
        }
    }

    /// Runs the server on a background thread; dropping the handle stops it.
    #[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let addr = self.local_addr()?;
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name("osmeter-serve".into())
            .spawn(move || self.serve())?;
        Ok(ServerHandle {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// An in-process server (tests, and a fallback when the binary cannot be found).
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn log(cfg: &ServeConfig, peer: Option<SocketAddr>, msg: &str) {
    if cfg.log {
        match peer {
            Some(p) => eprintln!("osmeter serve: {p}: {msg}"),
            None => eprintln!("osmeter serve: {msg}"),
        }
    }
}

fn refuse(stream: &mut TcpStream, code: RefuseCode, message: &str) -> io::Result<()> {
    let r = Refuse {
        code,
        server_version: p::VERSION,
        message: message.into(),
    };
    p::write_frame(stream, FrameType::Refuse, &r.encode())
}

/// Reads the client's Hello (so closing does not reset the connection before the client
/// reads the answer), then refuses.
fn refuse_after_hello(
    mut stream: TcpStream,
    cfg: &ServeConfig,
    code: RefuseCode,
    msg: &str,
) -> io::Result<()> {
    stream.set_read_timeout(Some(cfg.handshake_timeout.min(Duration::from_secs(1))))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let _ = p::read_frame(&mut stream);
    refuse(&mut stream, code, msg)?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

fn frame_err(stage: &str, e: FrameError) -> String {
    match e {
        FrameError::Closed => format!("broken: disconnected {stage}"),
        FrameError::Io(ref io) if p::is_timeout(io) => format!("broken: idle timeout {stage}"),
        e => format!("broken: {e} {stage}"),
    }
}

/// Runs one session; Err is the one-line log message.
fn session(mut stream: TcpStream, peer: SocketAddr, cfg: &ServeConfig) -> Result<(), String> {
    let io_err = |e: io::Error| format!("broken: {e}");
    stream
        .set_read_timeout(Some(cfg.handshake_timeout))
        .map_err(io_err)?;
    stream
        .set_write_timeout(Some(cfg.idle_timeout))
        .map_err(io_err)?;
    let (t, payload) =
        p::read_frame(&mut stream).map_err(|e| frame_err("before the handshake", e))?;
    if t != FrameType::Hello {
        let _ = refuse(
            &mut stream,
            RefuseCode::BadRequest,
            "expected a hello frame",
        );
        return Err(format!("refused: expected hello, got {t:?}"));
    }
    let hello = match p::Hello::decode(&payload) {
        Ok(h) => h,
        Err(e) => {
            let _ = refuse(&mut stream, RefuseCode::BadRequest, &e.to_string());
            return Err(format!("refused: {e}"));
        }
    };
    if hello.version != p::VERSION {
        let msg = format!(
            "protocol version mismatch: this server speaks osmeter protocol {}, the client {}",
            p::VERSION,
            hello.version
        );
        let _ = refuse(&mut stream, RefuseCode::WrongVersion, &msg);
        return Err(format!("refused: {msg}"));
    }
    if let Some(tok) = &cfg.token {
        if !constant_time_eq(tok.as_bytes(), &hello.token) {
            let msg = if hello.token.is_empty() {
                "this server requires a token"
            } else {
                "wrong token"
            };
            let _ = refuse(&mut stream, RefuseCode::BadToken, msg);
            return Err(format!("refused: {msg}"));
        }
    }
    let welcome = p::Welcome {
        version: p::VERSION,
        cpus: crate::platform::online_cpus().min(u16::MAX as usize) as u16,
        info: format!("osmeter {}", env!("CARGO_PKG_VERSION")),
    };
    p::write_frame(&mut stream, FrameType::Welcome, &welcome.encode()).map_err(io_err)?;

    stream
        .set_read_timeout(Some(cfg.idle_timeout))
        .map_err(io_err)?;
    let (t, payload) =
        p::read_frame(&mut stream).map_err(|e| frame_err("waiting for a request", e))?;
    let req = match (t, Request::decode(&payload)) {
        (FrameType::Request, Ok(r)) => r,
        (FrameType::Request, Err(e)) => {
            let _ = refuse(&mut stream, RefuseCode::BadRequest, &e.to_string());
            return Err(format!("refused: {e}"));
        }
        (t, _) => {
            let _ = refuse(&mut stream, RefuseCode::BadRequest, "expected a request");
            return Err(format!("refused: expected a request, got {t:?}"));
        }
    };
    if let Err(msg) = validate(&req, cfg) {
        let _ = refuse(&mut stream, RefuseCode::Limit, &msg);
        return Err(format!("refused: {msg}"));
    }
    match req {
        Request::Echo { size, pin_cpu } => echo(stream, cfg, size as usize, pin_cpu),
        Request::Sink { interval_ms } => sink(stream, cfg, interval_ms),
        Request::Source {
            duration_ms,
            write_size,
        } => source(stream, duration_ms, write_size as usize),
        Request::UdpEcho { max_size } => udp_echo(stream, peer, cfg, max_size as usize),
        Request::ConnectTarget { max_accepts } => connect_target(stream, cfg, max_accepts),
        Request::Describe => describe(stream),
    }
}

/// Answers `Describe`: this machine, and the interface the client's connection arrived on.
fn describe(mut stream: TcpStream) -> Result<(), String> {
    let local = stream.local_addr().map_err(|e| format!("broken: {e}"))?;
    ready(&mut stream, 0)?;
    let info = host_info(canon(local.ip()));
    p::write_frame(&mut stream, FrameType::Report, &info.encode())
        .map_err(|e| format!("broken: {e} sending the description"))
}

/// This machine as `osmeter machine` describes it.
#[cfg(unix)]
fn host_info(local: IpAddr) -> p::HostInfo {
    let m = crate::machine::Machine::gather();
    let iface = crate::platform::net::interface_of(local);
    let nic = iface
        .as_ref()
        .and_then(|i| m.network.iter().find(|n| &n.name == i));
    let mut notes = Vec::new();
    match (&iface, nic) {
        (None, _) => notes.push(format!("no interface holds {local}")),
        (Some(i), n) if n.and_then(|n| n.speed_mbit_s).is_none() => {
            notes.push(format!("{i} reports no link speed"))
        }
        _ => {}
    }
    p::HostInfo {
        hostname: Some(m.hostname.clone()),
        cpu_model: Some(m.cpu.model.clone()).filter(|s| !s.is_empty()),
        logical_cpus: Some(m.cpu.logical_cpus as u64),
        physical_cores: m.cpu.physical_cores.map(|c| c as u64),
        memory_bytes: Some(m.memory.total_bytes).filter(|&b| b > 0),
        os: Some(m.os.kernel.clone()),
        os_version: m.os.distribution.clone(),
        arch: Some(m.os.arch.clone()),
        nic: iface,
        nic_speed_mbit_s: nic.and_then(|n| n.speed_mbit_s),
        nic_mtu: nic.and_then(|n| n.mtu),
        notes,
    }
}

#[cfg(windows)]
fn host_info(local: IpAddr) -> p::HostInfo {
    crate::platform::host_info(local)
}

fn validate(req: &Request, cfg: &ServeConfig) -> Result<(), String> {
    let max_ms = cfg.max_duration.as_millis().min(u32::MAX as u128) as u32;
    match *req {
        Request::Echo { size, .. } | Request::UdpEcho { max_size: size }
            if size == 0 || size > p::MAX_MESSAGE =>
        {
            Err(format!(
                "message size {size} outside 1..={} bytes",
                p::MAX_MESSAGE
            ))
        }
        Request::Sink { interval_ms } if interval_ms == 0 || interval_ms > max_ms => {
            Err(format!("interval {interval_ms} ms outside 1..={max_ms} ms"))
        }
        Request::Source {
            duration_ms,
            write_size,
        } if duration_ms > max_ms || write_size == 0 || write_size > p::MAX_WRITE => Err(format!(
            "stream of {duration_ms} ms in {write_size}-byte writes exceeds the limits ({max_ms} ms, 1..={} bytes)",
            p::MAX_WRITE
        )),
        _ => Ok(()),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn ready(stream: &mut TcpStream, port: u16) -> Result<(), String> {
    p::write_frame(stream, FrameType::Ready, &p::encode_ready(port))
        .map_err(|e| format!("broken: {e}"))
}

fn echo(mut stream: TcpStream, cfg: &ServeConfig, size: usize, pin_cpu: i32) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    // Only a hard pin counts: macOS answers Ok(Unsupported), which pins nothing.
    let pinned = pin_cpu >= 0
        && matches!(
            crate::platform::pin_to_cpu(pin_cpu as usize),
            Ok(crate::platform::Pinning::Hard)
        );
    ready(&mut stream, 0)?;
    let mut buf = vec![0u8; size];
    let mut report = p::EchoReport {
        pinned,
        ..Default::default()
    };
    let mut cpus: Vec<u64> = Vec::new();
    let began = Instant::now();
    loop {
        match p::read_full(&mut stream, &mut buf) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(frame_err("in an echo", e)),
        }
        stream
            .write_all(&buf)
            .map_err(|e| format!("broken: {e} in an echo"))?;
        report.messages += 1;
        if let Some(c) = crate::platform::current_cpu() {
            if c < 1024 {
                if cpus.len() <= c {
                    cpus.resize(c + 1, 0);
                }
                cpus[c] += 1;
            }
        }
        // Checking the clock every message would add to the round trip; every 256 is enough.
        if report.messages % 256 == 0 && began.elapsed() > cfg.max_duration {
            return Err(format!(
                "limit: echo ran past the {} s maximum; closed",
                cfg.max_duration.as_secs()
            ));
        }
    }
    report.cpus = cpus
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(c, &n)| (c as u32, n))
        .collect();
    p::write_frame(&mut stream, FrameType::Report, &report.encode())
        .map_err(|e| format!("broken: {e} sending the echo report"))
}

fn sink(mut stream: TcpStream, cfg: &ServeConfig, interval_ms: u32) -> Result<(), String> {
    ready(&mut stream, 0)?;
    // 128 KiB like the client and iperf3: a larger buffer falls out of L2 and slows the copy.
    let mut buf = vec![0u8; 128 * 1024];
    let interval = Duration::from_millis(interval_ms as u64);
    let mut total: u64 = 0;
    let mut first: Option<Instant> = None;
    let mut next_mark = Duration::ZERO;
    let mut report = p::SinkReport::default();
    let limit = cfg.max_duration + Duration::from_secs(5);
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if p::is_timeout(&e) => return Err("broken: idle timeout in a sink".into()),
            Err(e) => return Err(format!("broken: {e} in a sink")),
        };
        let t0 = *first.get_or_insert_with(Instant::now);
        total += n as u64;
        let el = t0.elapsed();
        if el >= next_mark {
            if report.marks.len() < p::MAX_INTERVALS {
                report.marks.push((el.as_nanos() as u64, total));
            }
            next_mark = el + interval;
        }
        if el > limit {
            return Err(format!(
                "limit: stream ran past the {} s maximum; closed",
                cfg.max_duration.as_secs()
            ));
        }
    }
    report.bytes = total;
    report.elapsed_ns = first.map(|t| t.elapsed().as_nanos() as u64).unwrap_or(0);
    if report.marks.len() < p::MAX_INTERVALS {
        report.marks.push((report.elapsed_ns, total));
    }
    p::write_frame(&mut stream, FrameType::Report, &report.encode())
        .map_err(|e| format!("broken: {e} sending the sink report"))
}

fn source(mut stream: TcpStream, duration_ms: u32, write_size: usize) -> Result<(), String> {
    ready(&mut stream, 0)?;
    let buf: Vec<u8> = (0..write_size).map(|i| i as u8).collect();
    let end = Instant::now() + Duration::from_millis(duration_ms as u64);
    while Instant::now() < end {
        if let Err(e) = stream.write_all(&buf) {
            return Err(if p::is_timeout(&e) {
                "broken: client stopped reading a stream".into()
            } else {
                format!("broken: {e} in a stream")
            });
        }
    }
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

/// True when the control connection has closed (or misbehaved) and the test should end.
fn control_gone(stream: &mut TcpStream) -> bool {
    if !crate::platform::socket_readable(&*stream, Duration::ZERO) {
        return false;
    }
    let mut b = [0u8; 64];
    // Any byte on a control connection in this phase is a protocol error: end too.
    !matches!(stream.read(&mut b), Err(ref e) if p::is_timeout(e))
}

fn udp_echo(
    mut stream: TcpStream,
    peer: SocketAddr,
    cfg: &ServeConfig,
    max_size: usize,
) -> Result<(), String> {
    let local = stream.local_addr().map_err(|e| format!("broken: {e}"))?;
    let udp = UdpSocket::bind(any_port(local))
        .map_err(|e| format!("failed: cannot bind a UDP socket: {e}"))?;
    let port = udp.local_addr().map_err(|e| e.to_string())?.port();
    udp.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| e.to_string())?;
    ready(&mut stream, port)?;
    let mut buf = vec![0u8; p::MAX_MESSAGE as usize + 1];
    let began = Instant::now();
    let mut last = Instant::now();
    let mut served: u64 = 0;
    let mut strangers: u64 = 0;
    loop {
        match udp.recv_from(&mut buf) {
            Ok((n, from)) => {
                // Answer only the client's own address: never a reflector for others.
                if same_ip(from.ip(), peer.ip()) && n <= max_size {
                    let _ = udp.send_to(&buf[..n], from);
                    served += 1;
                    last = Instant::now();
                } else {
                    strangers += 1;
                }
                if served % 1024 != 0 {
                    continue;
                }
            }
            Err(e) if p::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            // Windows reports here the ICMP port-unreachable of an earlier reply (to a client
            // port already closed): not this socket's failure, so the session goes on.
            // Linux reports nothing of the kind on an unconnected socket.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => return Err(format!("broken: UDP: {e}")),
        }
        if control_gone(&mut stream) {
            break;
        }
        if began.elapsed() > cfg.max_duration {
            return Err("limit: UDP echo ran past the maximum duration; closed".into());
        }
        if last.elapsed() > cfg.idle_timeout {
            return Err("broken: idle timeout in a UDP echo".into());
        }
    }
    if strangers > 0 {
        log(
            cfg,
            Some(peer),
            &format!("ignored {strangers} datagrams from other addresses or oversized"),
        );
    }
    Ok(())
}

/// `local` on a free port, keeping an IPv6 address's scope (a link-local `fe80::` address
/// cannot be bound without its interface's); an IPv4 client of a dual-stack listener
/// (`::ffff:a.b.c.d`) gets an IPv4 socket, which Windows's IPv6-only default allows.
fn any_port(mut local: SocketAddr) -> SocketAddr {
    if let IpAddr::V4(v4) = canon(local.ip()) {
        return SocketAddr::new(v4.into(), 0);
    }
    local.set_port(0);
    local
}

/// An IPv4 address as itself, also when a dual-stack socket gives it as `::ffff:a.b.c.d`.
fn canon(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canon(a) == canon(b)
}

fn connect_target(
    mut stream: TcpStream,
    cfg: &ServeConfig,
    max_accepts: u32,
) -> Result<(), String> {
    let local = stream.local_addr().map_err(|e| format!("broken: {e}"))?;
    let listener = TcpListener::bind(any_port(local))
        .map_err(|e| format!("failed: cannot open a listener: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    ready(&mut stream, port)?;
    let began = Instant::now();
    let mut last = Instant::now();
    let mut accepted: u32 = 0;
    loop {
        if crate::platform::socket_readable(&listener, Duration::from_millis(100)) {
            loop {
                match listener.accept() {
                    // Closed at once: the client measures connect() and its own close().
                    Ok((c, _)) => {
                        drop(c);
                        accepted += 1;
                        last = Instant::now();
                        if accepted >= max_accepts {
                            return Ok(());
                        }
                    }
                    Err(e) if p::is_timeout(&e) => break,
                    // A connection reset before it was accepted (the client's SO_LINGER 0
                    // close): Linux says aborted, Windows reset, Wine not connected.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::ConnectionAborted
                                | io::ErrorKind::ConnectionReset
                                | io::ErrorKind::NotConnected
                        ) => {}
                    Err(e) => return Err(format!("broken: accept: {e}")),
                }
            }
        }
        if control_gone(&mut stream) {
            return Ok(());
        }
        if began.elapsed() > cfg.max_duration {
            return Err("limit: connect test ran past the maximum duration; closed".into());
        }
        if last.elapsed() > cfg.idle_timeout {
            return Err("broken: idle timeout in a connect test".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_sockets_keep_the_scope_and_take_ipv4_as_itself() {
        let ll: SocketAddr = "[fe80::1%7]:9197".parse().unwrap();
        let SocketAddr::V6(a) = any_port(ll) else {
            panic!("stays IPv6")
        };
        assert_eq!((a.scope_id(), a.port()), (7, 0));
        let mapped: SocketAddr = "[::ffff:10.0.0.2]:9197".parse().unwrap();
        assert_eq!(any_port(mapped), "10.0.0.2:0".parse().unwrap());
    }
}
