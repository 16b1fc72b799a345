//! Network interfaces (/sys/class/net): link speed, MTU, driver, state.

use super::facts::FactRoot;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// net.ipv4.ping_group_range as "LOW HIGH" (who may open unprivileged ICMP sockets);
/// read when ICMP is refused, to say why.
pub fn ping_group_range() -> Option<String> {
    FactRoot::live()
        .read("/proc/sys/net/ipv4/ping_group_range")
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Nic {
    pub name: String,
    pub loopback: bool,
    /// No backing device (bridge, veth, ifb, tun...).
    pub virtual_device: bool,
    /// Link speed as the driver reports it, Mbit/s (`None` when unknown, e.g. virtio).
    pub speed_mbit_s: Option<u64>,
    /// The same in canonical units, bytes/s.
    pub link_bytes_per_s: Option<f64>,
    pub mtu: Option<u64>,
    pub driver: Option<String>,
    /// "up", "down", "unknown" (loopback reports unknown).
    pub operstate: Option<String>,
}

/// The sysfs speed file: Mbit/s, or -1 / an error / absurd values when unknown.
pub fn parse_speed(s: &str) -> Option<u64> {
    let v: i64 = s.trim().parse().ok()?;
    // Drivers without a link report -1 or 0xffffffff (as u32); neither is a speed.
    (v > 0 && v < u32::MAX as i64).then_some(v as u64)
}

fn nic(root: &FactRoot, name: &str) -> Nic {
    let d = Path::new("/sys/class/net").join(name);
    // type 772 is ARPHRD_LOOPBACK.
    let loopback = root.read_u64(d.join("type")) == Some(772) || name == "lo";
    let speed = root
        .read_trim(d.join("speed"))
        .and_then(|s| parse_speed(&s));
    Nic {
        name: name.to_string(),
        loopback,
        virtual_device: !root.exists(d.join("device")),
        speed_mbit_s: speed,
        link_bytes_per_s: speed.map(|m| m as f64 * 1e6 / 8.0),
        mtu: root.read_u64(d.join("mtu")),
        driver: root
            .read_link(d.join("device/driver"))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
        operstate: root.read_trim(d.join("operstate")),
    }
}

pub fn gather(root: &FactRoot) -> Vec<Nic> {
    root.list("/sys/class/net")
        .iter()
        .map(|n| nic(root, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(parse_speed("10000\n"), Some(10000));
        assert_eq!(parse_speed("-1"), None);
        assert_eq!(parse_speed("0"), None);
        assert_eq!(parse_speed("4294967295"), None);
        assert_eq!(parse_speed(""), None);
    }

    #[test]
    fn loopback_is_found_and_marked() {
        let nics = gather(&FactRoot::live());
        if let Some(lo) = nics.iter().find(|n| n.name == "lo") {
            assert!(lo.loopback && lo.virtual_device);
        }
    }
}
