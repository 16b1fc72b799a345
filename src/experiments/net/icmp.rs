//! ICMP echo for the kernel-level round trip: an unprivileged ICMP socket (SOCK_DGRAM,
//! allowed by net.ipv4.ping_group_range) or a raw socket (root / CAP_NET_RAW). IPv4 only.

use crate::platform::net::icmp_socket;
use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::Duration;

/// An ICMP socket connected to one host. It is held as a `UdpSocket`: std makes plain
/// connect, send and recv calls, which an ICMP socket takes as any datagram socket does.
pub struct Pinger {
    sock: UdpSocket,
    /// Whether replies carry our echo id: raw sockets see every echo; Linux rewrites the
    /// id of SOCK_DGRAM pings to the socket's port and filters replies itself; Darwin
    /// does neither (`platform::ICMP_DGRAM_KEEPS_ID`).
    check_id: bool,
    id: u16,
    pub kind: &'static str,
}

fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in b.chunks(2) {
        sum += u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]) as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Pinger {
    /// Opens an ICMP socket to `dest`, or says why it cannot and how to allow it.
    pub fn open(dest: Ipv4Addr, timeout: Duration) -> Result<Pinger, String> {
        let (fd, raw, kind) = match icmp_socket(false) {
            Ok(fd) => (fd, false, "unprivileged ICMP socket (SOCK_DGRAM)"),
            Err(e1) => match icmp_socket(true) {
                Ok(fd) => (fd, true, "raw ICMP socket"),
                Err(_) => {
                    let range =
                        crate::machine::network::ping_group_range().unwrap_or_else(|| "?".into());
                    return Err(format!(
                        "ICMP echo not permitted ({e1}): needs root/CAP_NET_RAW for a raw socket, or this user's group in net.ipv4.ping_group_range (now '{range}'; e.g. sysctl -w net.ipv4.ping_group_range='0 2147483647')"
                    ));
                }
            },
        };
        let sock = UdpSocket::from(fd);
        sock.connect((dest, 0))
            .and_then(|()| sock.set_read_timeout(Some(timeout)))
            .map_err(|e| format!("ICMP socket setup failed: {e}"))?;
        Ok(Pinger {
            sock,
            check_id: raw || crate::platform::ICMP_DGRAM_KEEPS_ID,
            id: (std::process::id() as u16) ^ 0x4f4d,
            kind,
        })
    }

    /// Sends one echo request; Ok(true) when its reply came back, Ok(false) on timeout.
    pub fn ping(&mut self, seq: u16) -> io::Result<bool> {
        let mut pkt = [0u8; 16];
        pkt[0] = 8; // echo request
        pkt[4..6].copy_from_slice(&self.id.to_be_bytes());
        pkt[6..8].copy_from_slice(&seq.to_be_bytes());
        pkt[8..16].copy_from_slice(b"osmeter!");
        let c = checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
        self.sock.send(&pkt)?;
        let mut buf = [0u8; 256];
        loop {
            match self.sock.recv(&mut buf) {
                Ok(n) if is_echo_reply(&buf[..n], self.id, seq, self.check_id) => return Ok(true),
                Ok(_) => {}
                Err(e) if crate::peer::protocol::is_timeout(&e) => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a received datagram is the echo reply to (id, seq). Raw sockets, and Darwin's
/// datagram ICMP sockets unless IP_STRIPHDR is set, deliver the IPv4 header first (its
/// first nibble is 4: no ICMP echo reply starts so); Linux's datagram sockets do not.
/// Our own requests (type 8) seen on loopback are not replies.
pub fn is_echo_reply(msg: &[u8], id: u16, seq: u16, check_id: bool) -> bool {
    let icmp = match msg.first() {
        Some(b) if b >> 4 == 4 => {
            let ihl = (b & 0x0f) as usize * 4;
            if ihl < 20 {
                return false;
            }
            msg.get(ihl..).unwrap_or(&[])
        }
        _ => msg,
    };
    icmp.len() >= 8
        && icmp[0] == 0
        && (!check_id || icmp[4..6] == id.to_be_bytes())
        && icmp[6..8] == seq.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(id: u16, seq: u16) -> Vec<u8> {
        let mut p = vec![0u8, 0, 0, 0];
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(b"osmeter!");
        p
    }

    fn with_ip_header(icmp: &[u8], ihl_words: u8) -> Vec<u8> {
        // A header of at least 20 bytes whatever length it claims (a bogus IHL too).
        let mut p = vec![0u8; (ihl_words as usize * 4).max(20)];
        p[0] = 0x40 | ihl_words;
        p[9] = 1; // protocol ICMP
        p.extend_from_slice(icmp);
        p
    }

    #[test]
    fn echo_replies_with_and_without_an_ip_header() {
        let r = reply(0x1234, 7);
        // Linux SOCK_DGRAM: bare ICMP, id rewritten by the kernel (not checked).
        assert!(is_echo_reply(&r, 0x9999, 7, false));
        assert!(!is_echo_reply(&r, 0x9999, 8, false));
        // Darwin SOCK_DGRAM and raw sockets: the IP header first, the id ours.
        let h = with_ip_header(&r, 5);
        assert!(is_echo_reply(&h, 0x1234, 7, true));
        assert!(
            !is_echo_reply(&h, 0x4321, 7, true),
            "another process's echo"
        );
        assert!(
            is_echo_reply(&with_ip_header(&r, 6), 0x1234, 7, true),
            "IP options"
        );
        // Our own request on loopback, a truncated reply, a bogus header length.
        let mut req = r.clone();
        req[0] = 8;
        assert!(!is_echo_reply(&with_ip_header(&req, 5), 0x1234, 7, true));
        assert!(!is_echo_reply(&h[..24], 0x1234, 7, true));
        assert!(!is_echo_reply(&with_ip_header(&r, 2), 0x1234, 7, true));
        assert!(!is_echo_reply(&[], 0, 0, false));
    }

    #[test]
    fn checksum_of_a_known_packet() {
        // Echo request id 1 seq 1, no payload: checksum 0xf7fd.
        let p = [8u8, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(checksum(&p), 0xf7fd);
    }

    #[test]
    fn loopback_ping_works_or_says_why() {
        match Pinger::open(Ipv4Addr::LOCALHOST, Duration::from_secs(1)) {
            Ok(mut p) => assert!(p.ping(1).unwrap()),
            Err(why) => assert!(why.contains("ping_group_range"), "{why}"),
        }
    }
}
