//! The wire protocol between `osmeter run` and `osmeter serve`.
//!
//! Every control message is a frame: the magic bytes `OM`, a type byte, a big-endian u32
//! payload length, then the payload. Frames are capped at `MAX_FRAME` bytes so a peer can
//! never be made to allocate much. The first frame of a session is always `Hello`
//! (protocol version + token); its layout must never change, so that any two versions
//! can at least tell each other they differ.
//!
//! After the handshake the client sends one `Request`; the server answers `Ready` (or
//! `Refuse`), then both sides run the test's data phase (raw bytes for TCP echo and the
//! streams, datagrams for UDP, fresh connections for connect), and the server may finish
//! with a `Report` frame.

use std::io::{self, Read, Write};

/// Bumped whenever any frame or data phase changes meaning.
pub const VERSION: u16 = 1;
/// Port `osmeter serve` listens on when none is given.
pub(crate) const DEFAULT_PORT: u16 = 9197;
pub(crate) const MAGIC: [u8; 2] = *b"OM";
/// Largest control frame payload either side accepts.
pub(crate) const MAX_FRAME: usize = 64 * 1024;
/// Largest token accepted in a Hello.
pub(crate) const MAX_TOKEN: usize = 256;
/// Largest echo message and UDP datagram.
pub(crate) const MAX_MESSAGE: u32 = 64 * 1024;
/// Largest single write the server makes in a source stream.
pub(crate) const MAX_WRITE: u32 = 4 * 1024 * 1024;
/// At most this many interval samples in a report.
pub(crate) const MAX_INTERVALS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FrameType {
    Hello = 1,
    Welcome = 2,
    Refuse = 3,
    Request = 4,
    Ready = 5,
    Report = 6,
}

impl FrameType {
    fn from_u8(b: u8) -> Option<FrameType> {
        Some(match b {
            1 => FrameType::Hello,
            2 => FrameType::Welcome,
            3 => FrameType::Refuse,
            4 => FrameType::Request,
            5 => FrameType::Ready,
            6 => FrameType::Report,
            _ => return None,
        })
    }
}

/// Why a server refused a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RefuseCode {
    WrongVersion = 1,
    BadToken = 2,
    Busy = 3,
    BadRequest = 4,
    Limit = 5,
}

impl RefuseCode {
    pub(crate) fn from_u8(b: u8) -> RefuseCode {
        match b {
            1 => RefuseCode::WrongVersion,
            2 => RefuseCode::BadToken,
            3 => RefuseCode::Busy,
            5 => RefuseCode::Limit,
            _ => RefuseCode::BadRequest,
        }
    }
}

/// Errors reading a frame; each says what was wrong in one line.
#[derive(Debug)]
pub(crate) enum FrameError {
    Io(io::Error),
    /// The stream ended before any byte of a frame.
    Closed,
    /// The stream ended inside a frame.
    Truncated,
    BadMagic([u8; 2]),
    UnknownType(u8),
    TooLarge(usize),
    Malformed(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) if is_timeout(e) => write!(f, "timed out"),
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::Truncated => write!(f, "connection closed inside a frame"),
            FrameError::BadMagic(m) => write!(
                f,
                "not an osmeter frame (starts with {:?})",
                String::from_utf8_lossy(m)
            ),
            FrameError::UnknownType(t) => write!(f, "unknown frame type {t}"),
            FrameError::TooLarge(n) => {
                write!(f, "frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
            }
            FrameError::Malformed(what) => write!(f, "malformed {what}"),
        }
    }
}

impl std::error::Error for FrameError {}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Reads exactly `buf.len()` bytes; Ok(false) when the stream ended before the first byte.
pub(crate) fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<bool, FrameError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(FrameError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(true)
}

pub(crate) fn write_frame(w: &mut impl Write, t: FrameType, payload: &[u8]) -> io::Result<()> {
    debug_assert!(payload.len() <= MAX_FRAME);
    let mut buf = Vec::with_capacity(7 + payload.len());
    buf.extend_from_slice(&MAGIC);
    buf.push(t as u8);
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)?;
    w.flush()
}

pub(crate) fn read_frame(r: &mut impl Read) -> Result<(FrameType, Vec<u8>), FrameError> {
    let mut head = [0u8; 7];
    if !read_full(r, &mut head)? {
        return Err(FrameError::Closed);
    }
    if head[..2] != MAGIC {
        return Err(FrameError::BadMagic([head[0], head[1]]));
    }
    let t = FrameType::from_u8(head[2]).ok_or(FrameError::UnknownType(head[2]))?;
    let len = u32::from_be_bytes([head[3], head[4], head[5], head[6]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut payload = vec![0u8; len];
    if len > 0 && !read_full(r, &mut payload)? {
        return Err(FrameError::Truncated);
    }
    Ok((t, payload))
}

/// A cursor over a payload that never panics on short input.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Cursor { buf, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Malformed(self.what));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, FrameError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn i32(&mut self) -> Result<i32, FrameError> {
        Ok(self.u32()? as i32)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
}

/// The first frame of every session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub token: Vec<u8>,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.version.to_be_bytes().to_vec();
        v.extend_from_slice(&self.token);
        v
    }
    pub(crate) fn decode(p: &[u8]) -> Result<Hello, FrameError> {
        let mut c = Cursor::new(p, "hello");
        let version = c.u16()?;
        let token = c.rest().to_vec();
        if token.len() > MAX_TOKEN {
            return Err(FrameError::Malformed("hello (token too long)"));
        }
        Ok(Hello { version, token })
    }
}

/// The server's answer to a good Hello: its version, CPU count and a description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub version: u16,
    pub cpus: u16,
    pub info: String,
}

impl Welcome {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = self.version.to_be_bytes().to_vec();
        v.extend_from_slice(&self.cpus.to_be_bytes());
        v.extend_from_slice(self.info.as_bytes());
        v
    }
    pub(crate) fn decode(p: &[u8]) -> Result<Welcome, FrameError> {
        let mut c = Cursor::new(p, "welcome");
        Ok(Welcome {
            version: c.u16()?,
            cpus: c.u16()?,
            info: String::from_utf8_lossy(c.rest()).into_owned(),
        })
    }
}

/// A refusal: a code, the server's protocol version, and a message for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refuse {
    pub code: RefuseCode,
    pub server_version: u16,
    pub message: String,
}

impl Refuse {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.code as u8];
        v.extend_from_slice(&self.server_version.to_be_bytes());
        let msg = self.message.as_bytes();
        v.extend_from_slice(&msg[..msg.len().min(1024)]);
        v
    }
    pub(crate) fn decode(p: &[u8]) -> Result<Refuse, FrameError> {
        let mut c = Cursor::new(p, "refusal");
        Ok(Refuse {
            code: RefuseCode::from_u8(c.u8()?),
            server_version: c.u16()?,
            message: String::from_utf8_lossy(c.rest()).into_owned(),
        })
    }
}

/// What the client asks the server to do in this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Echo fixed-size messages on this connection until the client shuts down its side;
    /// `pin_cpu` >= 0 asks the server to run the session on that CPU.
    Echo { size: u32, pin_cpu: i32 },
    /// Read and discard until the client shuts down; report bytes per interval.
    Sink { interval_ms: u32 },
    /// Write `write_size` chunks for `duration_ms`, then shut down.
    Source { duration_ms: u32, write_size: u32 },
    /// Echo datagrams up to `max_size` on a fresh UDP port while this connection lives.
    UdpEcho { max_size: u32 },
    /// Accept and close connections on a fresh TCP port while this connection lives.
    ConnectTarget { max_accepts: u32 },
    /// Describe the peer's machine: `Ready`, then a `Report` holding a `HostInfo`. A peer
    /// older than this request refuses it as malformed (the protocol's version did not
    /// change: every other request means what it did).
    Describe,
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match *self {
            Request::Echo { size, pin_cpu } => {
                v.push(1);
                v.extend_from_slice(&size.to_be_bytes());
                v.extend_from_slice(&pin_cpu.to_be_bytes());
            }
            Request::Sink { interval_ms } => {
                v.push(2);
                v.extend_from_slice(&interval_ms.to_be_bytes());
            }
            Request::Source {
                duration_ms,
                write_size,
            } => {
                v.push(3);
                v.extend_from_slice(&duration_ms.to_be_bytes());
                v.extend_from_slice(&write_size.to_be_bytes());
            }
            Request::UdpEcho { max_size } => {
                v.push(4);
                v.extend_from_slice(&max_size.to_be_bytes());
            }
            Request::ConnectTarget { max_accepts } => {
                v.push(5);
                v.extend_from_slice(&max_accepts.to_be_bytes());
            }
            Request::Describe => v.push(6),
        }
        v
    }
    pub(crate) fn decode(p: &[u8]) -> Result<Request, FrameError> {
        let mut c = Cursor::new(p, "request");
        Ok(match c.u8()? {
            1 => Request::Echo {
                size: c.u32()?,
                pin_cpu: c.i32()?,
            },
            2 => Request::Sink {
                interval_ms: c.u32()?,
            },
            3 => Request::Source {
                duration_ms: c.u32()?,
                write_size: c.u32()?,
            },
            4 => Request::UdpEcho { max_size: c.u32()? },
            5 => Request::ConnectTarget {
                max_accepts: c.u32()?,
            },
            6 => Request::Describe,
            _ => return Err(FrameError::Malformed("request (unknown kind)")),
        })
    }
}

/// The server's go-ahead; `port` is the fresh UDP or TCP port where the test needs one.
pub(crate) fn encode_ready(port: u16) -> Vec<u8> {
    port.to_be_bytes().to_vec()
}

pub(crate) fn decode_ready(p: &[u8]) -> Result<u16, FrameError> {
    Cursor::new(p, "ready").u16()
}

/// The end of an echo: round trips served and on which CPUs the server ran them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EchoReport {
    pub messages: u64,
    /// The server pinned itself as asked.
    pub pinned: bool,
    /// (cpu, round trips observed on it), sampled at every message.
    pub cpus: Vec<(u32, u64)>,
}

impl EchoReport {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = self.messages.to_be_bytes().to_vec();
        v.push(self.pinned as u8);
        let n = self.cpus.len().min(1024);
        v.extend_from_slice(&(n as u32).to_be_bytes());
        for (cpu, count) in &self.cpus[..n] {
            v.extend_from_slice(&cpu.to_be_bytes());
            v.extend_from_slice(&count.to_be_bytes());
        }
        v
    }
    pub(crate) fn decode(p: &[u8]) -> Result<EchoReport, FrameError> {
        let mut c = Cursor::new(p, "echo report");
        let messages = c.u64()?;
        let pinned = c.u8()? != 0;
        let n = c.u32()? as usize;
        if n > 1024 {
            return Err(FrameError::Malformed("echo report (too many CPUs)"));
        }
        let mut cpus = Vec::with_capacity(n);
        for _ in 0..n {
            cpus.push((c.u32()?, c.u64()?));
        }
        Ok(EchoReport {
            messages,
            pinned,
            cpus,
        })
    }
}

/// The end of a sink: bytes received, and (elapsed ns since the first byte, cumulative
/// bytes) at each interval boundary, measured on the receiving side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SinkReport {
    pub bytes: u64,
    pub elapsed_ns: u64,
    pub marks: Vec<(u64, u64)>,
}

impl SinkReport {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = self.bytes.to_be_bytes().to_vec();
        v.extend_from_slice(&self.elapsed_ns.to_be_bytes());
        let n = self.marks.len().min(MAX_INTERVALS);
        v.extend_from_slice(&(n as u32).to_be_bytes());
        for (t, b) in &self.marks[..n] {
            v.extend_from_slice(&t.to_be_bytes());
            v.extend_from_slice(&b.to_be_bytes());
        }
        v
    }
    #[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
    pub(crate) fn decode(p: &[u8]) -> Result<SinkReport, FrameError> {
        let mut c = Cursor::new(p, "sink report");
        let bytes = c.u64()?;
        let elapsed_ns = c.u64()?;
        let n = c.u32()? as usize;
        if n > MAX_INTERVALS {
            return Err(FrameError::Malformed("sink report (too many intervals)"));
        }
        let mut marks = Vec::with_capacity(n);
        for _ in 0..n {
            marks.push((c.u64()?, c.u64()?));
        }
        Ok(SinkReport {
            bytes,
            elapsed_ns,
            marks,
        })
    }
}

/// What a peer says about its machine, each field only where its system says (a
/// `Describe` report). On the wire: `key=value` lines, unknown keys ignored, so that
/// either side may add keys without a new protocol version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    pub hostname: Option<String>,
    pub cpu_model: Option<String>,
    pub logical_cpus: Option<u64>,
    pub physical_cores: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// "Linux 6.1.0-18-amd64", "Windows 10 Pro".
    pub os: Option<String>,
    /// The distribution, or Windows's version and build ("10.0.19045").
    pub os_version: Option<String>,
    pub arch: Option<String>,
    /// The interface the client's control connection arrived on, its link speed and MTU.
    pub nic: Option<String>,
    pub nic_speed_mbit_s: Option<u64>,
    pub nic_mtu: Option<u64>,
    /// What the peer could not tell, and why.
    pub notes: Vec<String>,
}

impl HostInfo {
    fn pairs(&self) -> Vec<(&'static str, Option<String>)> {
        let num = |v: Option<u64>| v.map(|n| n.to_string());
        vec![
            ("hostname", self.hostname.clone()),
            ("cpu_model", self.cpu_model.clone()),
            ("logical_cpus", num(self.logical_cpus)),
            ("physical_cores", num(self.physical_cores)),
            ("memory_bytes", num(self.memory_bytes)),
            ("os", self.os.clone()),
            ("os_version", self.os_version.clone()),
            ("arch", self.arch.clone()),
            ("nic", self.nic.clone()),
            ("nic_speed_mbit_s", num(self.nic_speed_mbit_s)),
            ("nic_mtu", num(self.nic_mtu)),
        ]
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let clean = |v: &str| v.replace(['\n', '\r'], " ");
        let mut s = String::new();
        for (k, v) in self.pairs() {
            if let Some(v) = v {
                s.push_str(&format!("{k}={}\n", clean(&v)));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("note={}\n", clean(n)));
        }
        let mut v = s.into_bytes();
        v.truncate(MAX_FRAME);
        v
    }

    pub fn decode(p: &[u8]) -> HostInfo {
        let mut h = HostInfo::default();
        for line in String::from_utf8_lossy(p).lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let (text, num) = (Some(v.trim().to_string()), v.trim().parse().ok());
            match k {
                "hostname" => h.hostname = text,
                "cpu_model" => h.cpu_model = text,
                "logical_cpus" => h.logical_cpus = num,
                "physical_cores" => h.physical_cores = num,
                "memory_bytes" => h.memory_bytes = num,
                "os" => h.os = text,
                "os_version" => h.os_version = text,
                "arch" => h.arch = text,
                "nic" => h.nic = text,
                "nic_speed_mbit_s" => h.nic_speed_mbit_s = num,
                "nic_mtu" => h.nic_mtu = num,
                "note" if h.notes.len() < 32 => h.notes.push(v.trim().to_string()),
                _ => {}
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        let h = Hello {
            version: VERSION,
            token: b"secret".to_vec(),
        };
        write_frame(&mut buf, FrameType::Hello, &h.encode()).unwrap();
        let (t, p) = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(t, FrameType::Hello);
        assert_eq!(Hello::decode(&p).unwrap(), h);
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut big = b"OM\x01".to_vec();
        big.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert!(matches!(
            read_frame(&mut big.as_slice()),
            Err(FrameError::TooLarge(_))
        ));
        let short = b"OM\x01\x00\x00\x00\x05ab".to_vec();
        assert!(matches!(
            read_frame(&mut short.as_slice()),
            Err(FrameError::Truncated)
        ));
        assert!(matches!(
            read_frame(&mut &b"GET / HTTP/1.1\r\n"[..]),
            Err(FrameError::BadMagic(_))
        ));
        assert!(matches!(read_frame(&mut &b""[..]), Err(FrameError::Closed)));
    }

    #[test]
    fn requests_and_reports_round_trip() {
        for r in [
            Request::Echo {
                size: 1,
                pin_cpu: -1,
            },
            Request::Sink { interval_ms: 100 },
            Request::Source {
                duration_ms: 1000,
                write_size: 1 << 17,
            },
            Request::UdpEcho { max_size: 64 },
            Request::ConnectTarget { max_accepts: 10 },
            Request::Describe,
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        let e = EchoReport {
            messages: 5,
            pinned: true,
            cpus: vec![(0, 3), (1, 2)],
        };
        assert_eq!(EchoReport::decode(&e.encode()).unwrap(), e);
        let s = SinkReport {
            bytes: 9,
            elapsed_ns: 10,
            marks: vec![(1, 2), (3, 4)],
        };
        assert_eq!(SinkReport::decode(&s.encode()).unwrap(), s);
        let h = HostInfo {
            cpu_model: Some("Intel(R) Core(TM) i7\nx".into()),
            memory_bytes: Some(1 << 34),
            nic_speed_mbit_s: Some(1000),
            notes: vec!["no NIC speed".into()],
            ..Default::default()
        };
        let back = HostInfo::decode(&h.encode());
        assert_eq!(back.cpu_model.as_deref(), Some("Intel(R) Core(TM) i7 x"));
        assert_eq!(
            (back.memory_bytes, back.nic_speed_mbit_s),
            (Some(1 << 34), Some(1000))
        );
        assert_eq!(back.notes, h.notes);
        // Unknown keys and lines without '=' are ignored (a newer peer's keys).
        let h = HostInfo::decode(b"future_key=1\ngarbage\nos=Windows 10 Pro\nnic_mtu=x");
        assert_eq!((h.os.as_deref(), h.nic_mtu), (Some("Windows 10 Pro"), None));
    }

    proptest! {
        #[test]
        fn decoders_never_panic(p in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Hello::decode(&p);
            let _ = Welcome::decode(&p);
            let _ = Refuse::decode(&p);
            let _ = Request::decode(&p);
            let _ = EchoReport::decode(&p);
            let _ = SinkReport::decode(&p);
            let _ = HostInfo::decode(&p);
            let _ = decode_ready(&p);
            let _ = read_frame(&mut p.as_slice());
        }
    }
}
