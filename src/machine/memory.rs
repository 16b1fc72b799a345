//! Memory facts: size (/proc/meminfo), huge pages, NUMA, and as root the DIMMs
//! (`dmidecode -t memory`) from which the theoretical peak bandwidth follows.

use super::cpu::bracketed;
use super::facts::FactRoot;
use super::{find_program, parse_list};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub swap_total_bytes: Option<u64>,
    /// Base page size.
    pub page_bytes: Option<u64>,
    /// Transparent huge pages mode: "always", "madvise" or "never".
    pub thp_enabled: Option<String>,
    pub thp_defrag: Option<String>,
    /// Size of a PMD-mapped transparent huge page (hpage_pmd_size): 2 MiB with 4 KiB
    /// pages, 32 MiB with 16 KiB pages, 512 MiB with 64 KiB pages (arm64).
    pub huge_page_bytes: Option<u64>,
    pub numa_nodes: Option<usize>,
    /// Populated memory modules (as root with dmidecode; empty otherwise).
    pub dimms: Vec<Dimm>,
    /// Memory slots on the board (populated or not), when dmidecode says.
    pub dimm_slots: Option<usize>,
    pub dimms_populated: Option<usize>,
    /// Memory channels in use; see `channels_source` for how they were counted.
    pub channels: Option<usize>,
    pub channels_source: Option<String>,
    /// Transfer rate the modules run at (the slowest populated module), MT/s.
    pub speed_mts: Option<u64>,
    /// Data bus width per channel, bits (without ECC bits).
    pub data_width_bits: Option<u64>,
    /// "DDR4", "DDR5", ...
    pub memory_type: Option<String>,
    /// Theoretical peak = speed x width/8 x channels, when all three are known.
    pub peak_bandwidth_bytes_per_s: Option<f64>,
    /// The formula with its inputs when known, else why it is not.
    pub peak_bandwidth_note: String,
}

/// One populated memory module, from an SMBIOS type 17 record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Dimm {
    pub locator: String,
    pub bank_locator: Option<String>,
    pub size_bytes: Option<u64>,
    pub kind: Option<String>,
    /// Rated speed, MT/s.
    pub speed_mts: Option<u64>,
    /// Speed it is configured to run at, MT/s.
    pub configured_speed_mts: Option<u64>,
    pub data_width_bits: Option<u64>,
    pub total_width_bits: Option<u64>,
    pub manufacturer: Option<String>,
    pub part_number: Option<String>,
}

/// The DIMM section of `dmidecode -t memory`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DmiMemory {
    pub slots: usize,
    pub populated: Vec<Dimm>,
}

/// Parses /proc/meminfo into (name, bytes) for the "kB" lines.
pub fn parse_meminfo(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let mut it = v.split_whitespace();
        let n: u64 = it.next()?.parse().ok()?;
        Some(match it.next() {
            Some("kB") => n * 1024,
            _ => n,
        })
    })
}

/// A dmidecode value that means "nothing here".
fn known(v: &str) -> Option<&str> {
    let v = v.trim();
    let lower = v.to_ascii_lowercase();
    let unknown = v.is_empty()
        || [
            "unknown",
            "not specified",
            "not provided",
            "none",
            "no module installed",
        ]
        .contains(&lower.as_str())
        || lower.starts_with("not ")
        || lower.contains("empty");
    (!unknown).then_some(v)
}

/// "3200 MT/s" or "2400 MHz" -> 3200 / 2400 (DDR dmidecode calls MT/s "MHz" before 3.2).
fn parse_speed(v: &str) -> Option<u64> {
    known(v)?.split_whitespace().next()?.parse().ok()
}

/// "64 bits" -> 64.
fn parse_bits(v: &str) -> Option<u64> {
    known(v)?.split_whitespace().next()?.parse().ok()
}

/// "16 GB", "16384 MB", "512 kB" -> bytes.
fn parse_dmi_size(v: &str) -> Option<u64> {
    let mut it = known(v)?.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    let mult: u64 = match it.next()?.to_ascii_lowercase().as_str() {
        "b" | "bytes" => 1,
        "kb" => 1 << 10,
        "mb" => 1 << 20,
        "gb" => 1 << 30,
        "tb" => 1 << 40,
        _ => return None,
    };
    (n > 0).then(|| n * mult)
}

/// Parses the output of `dmidecode -t memory` (or `-t 16,17`).
pub fn parse_dmidecode(s: &str) -> DmiMemory {
    let mut out = DmiMemory::default();
    for record in s.split("\n\n") {
        let mut lines = record.lines().skip_while(|l| !l.starts_with("Handle "));
        lines.next();
        let Some(title) = lines.next() else { continue };
        let fields: Vec<(&str, &str)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let get = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        match title.trim() {
            // System ROM and cache arrays also appear as type 16; count system memory only.
            "Physical Memory Array" if get("Use").map_or(true, |u| u == "System Memory") => {
                out.slots += get("Number Of Devices")
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
            }
            "Memory Device" => {
                let size = get("Size").and_then(parse_dmi_size);
                if size.is_none() {
                    continue; // an empty slot
                }
                out.populated.push(Dimm {
                    locator: get("Locator").unwrap_or("").to_string(),
                    bank_locator: get("Bank Locator").and_then(known).map(str::to_string),
                    size_bytes: size,
                    kind: get("Type").and_then(known).map(str::to_string),
                    speed_mts: get("Speed").and_then(parse_speed),
                    configured_speed_mts: get("Configured Memory Speed")
                        .or_else(|| get("Configured Clock Speed"))
                        .and_then(parse_speed),
                    data_width_bits: get("Data Width").and_then(parse_bits),
                    total_width_bits: get("Total Width").and_then(parse_bits),
                    manufacturer: get("Manufacturer").and_then(known).map(str::to_string),
                    part_number: get("Part Number").and_then(known).map(str::to_string),
                });
            }
            _ => {}
        }
    }
    out
}

/// The channel a module sits on, when its locators name one ("ChannelA-DIMM0",
/// "P0 CHANNEL A", "P0_Node0_Channel0_Dimm0"): everything up to the channel's name,
/// so that channels on different sockets stay distinct.
pub fn channel_key(d: &Dimm) -> Option<String> {
    for s in [Some(d.locator.as_str()), d.bank_locator.as_deref()]
        .into_iter()
        .flatten()
    {
        let l = s.to_ascii_lowercase();
        if let Some(i) = l.find("channel") {
            let rest = &l[i + "channel".len()..];
            let rest = rest.trim_start_matches([' ', '_', '-']);
            let id: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            if !id.is_empty() {
                return Some(format!("{}channel {id}", &l[..i]));
            }
        }
    }
    None
}

/// Speed, width, channels and the peak they imply, or the reason it is unknown.
pub fn summarize_dimms(m: &mut Memory, dmi: &DmiMemory) {
    m.dimm_slots = (dmi.slots > 0).then_some(dmi.slots);
    m.dimms_populated = Some(dmi.populated.len());
    m.dimms = dmi.populated.clone();
    if dmi.populated.is_empty() {
        m.peak_bandwidth_note = "dmidecode lists no populated memory module (usual in VMs)".into();
        return;
    }
    m.speed_mts = dmi
        .populated
        .iter()
        .filter_map(|d| d.configured_speed_mts.or(d.speed_mts))
        .min();
    m.data_width_bits = dmi.populated.iter().filter_map(|d| d.data_width_bits).min();
    let kinds: BTreeSet<&str> = dmi
        .populated
        .iter()
        .filter_map(|d| d.kind.as_deref())
        .collect();
    m.memory_type = (!kinds.is_empty()).then(|| kinds.into_iter().collect::<Vec<_>>().join("+"));
    let keys: Option<BTreeSet<String>> = dmi.populated.iter().map(channel_key).collect();
    match keys {
        Some(k) => {
            m.channels = Some(k.len());
            m.channels_source = Some("distinct channels named by the DIMM locators".into());
        }
        None => {
            m.channels = Some(dmi.populated.len());
            m.channels_source = Some(
                "assumed one module per channel (the locators name no channel); an upper bound"
                    .into(),
            );
        }
    }
    match (m.speed_mts, m.data_width_bits, m.channels) {
        (Some(s), Some(w), Some(c)) => {
            let peak = s as f64 * 1e6 * (w as f64 / 8.0) * c as f64;
            m.peak_bandwidth_bytes_per_s = Some(peak);
            m.peak_bandwidth_note = format!(
                "{s} MT/s x {w} bits/8 x {c} channel{} = {:.1} GB/s",
                if c == 1 { "" } else { "s" },
                peak / 1e9
            );
        }
        (s, w, _) => {
            let mut missing = Vec::new();
            if s.is_none() {
                missing.push("speed");
            }
            if w.is_none() {
                missing.push("data width");
            }
            m.peak_bandwidth_note = format!(
                "dmidecode does not report the modules' {}",
                missing.join(" or ")
            );
        }
    }
}

/// NUMA nodes from /sys/devices/system/node/online.
fn numa_nodes(root: &FactRoot) -> Option<usize> {
    let n = parse_list(&root.read("/sys/devices/system/node/online")?).len();
    (n > 0).then_some(n)
}

pub fn gather(root: &FactRoot) -> Memory {
    let meminfo = root.read("/proc/meminfo").unwrap_or_default();
    // The page size is no file; a recorded machine's stays unknown.
    // SAFETY: sysconf with a valid name has no memory effects.
    let page = if root.is_live() {
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
    } else {
        -1
    };
    let thp = "/sys/kernel/mm/transparent_hugepage";
    let mut m = Memory {
        total_bytes: parse_meminfo(&meminfo, "MemTotal").unwrap_or(0),
        available_bytes: parse_meminfo(&meminfo, "MemAvailable")
            .or_else(|| parse_meminfo(&meminfo, "MemFree"))
            .unwrap_or(0),
        swap_total_bytes: parse_meminfo(&meminfo, "SwapTotal"),
        page_bytes: (page > 0).then_some(page as u64),
        thp_enabled: root
            .read_trim(format!("{thp}/enabled"))
            .and_then(|s| bracketed(&s)),
        thp_defrag: root
            .read_trim(format!("{thp}/defrag"))
            .and_then(|s| bracketed(&s)),
        huge_page_bytes: root.read_u64(format!("{thp}/hpage_pmd_size")),
        numa_nodes: numa_nodes(root),
        ..Default::default()
    };
    if root.is_sysctl_machine() {
        let (total, page, available) = from_sysctl(&|k| root.sysctl(k));
        m.total_bytes = total.unwrap_or(0);
        m.page_bytes = page.or(m.page_bytes);
        m.available_bytes = available.unwrap_or(0);
        m.peak_bandwidth_note = "DIMM facts come from dmidecode, which macOS does not have".into();
        return m;
    }
    if !root.is_live() {
        m.peak_bandwidth_note =
            "DIMM facts come from running dmidecode, which a snapshot does not record".into();
        return m;
    }
    if !crate::platform::is_root() {
        m.peak_bandwidth_note =
            "DIMM facts need root and dmidecode (run `sudo osmeter machine`)".into();
        return m;
    }
    let Some(dmidecode) = find_program("dmidecode") else {
        m.peak_bandwidth_note =
            "DIMM facts need dmidecode (install it, e.g. `apt install dmidecode`)".into();
        return m;
    };
    // One quick invocation; it reads the SMBIOS table from sysfs or /dev/mem.
    match std::process::Command::new(dmidecode)
        .args(["-t", "memory"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    {
        Ok(o) => summarize_dimms(
            &mut m,
            &parse_dmidecode(&String::from_utf8_lossy(&o.stdout)),
        ),
        Err(e) => m.peak_bandwidth_note = format!("dmidecode could not run: {e}"),
    }
    m
}

/// A Mac's memory from its sysctl values: (total, page size, available). Available is
/// what the kernel could hand out without paging anything in: free (speculative pages
/// included, XNU vm_statistics.h) plus file-backed pageable pages (clean cache), the
/// counterpart of Linux's MemAvailable; none when either count is missing.
pub fn from_sysctl(
    get: &dyn Fn(&str) -> Option<String>,
) -> (Option<u64>, Option<u64>, Option<u64>) {
    let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u64>().ok());
    let total = num("hw.memsize").filter(|&v| v > 0);
    let page = num("hw.pagesize").filter(|&v| v > 0);
    let available = match (
        page,
        num("vm.page_free_count"),
        num("vm.page_pageable_external_count"),
    ) {
        (Some(p), Some(free), Some(file)) => Some((free + file) * p),
        _ => None,
    };
    (
        total,
        page,
        available.map(|a| total.map_or(a, |t| a.min(t))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_memory_from_sysctl() {
        let v = |k: &str| {
            match k {
                "hw.memsize" => Some("17179869184"),
                "hw.pagesize" => Some("16384"),
                "vm.page_free_count" => Some("100000"),
                "vm.page_pageable_external_count" => Some("50000"),
                _ => None,
            }
            .map(str::to_string)
        };
        assert_eq!(
            from_sysctl(&v),
            (Some(16 << 30), Some(16384), Some(150_000 * 16384))
        );
        assert_eq!(from_sysctl(&|_| None), (None, None, None));
    }

    const MEMINFO: &str = "MemTotal:       24684096 kB
MemFree:        23103392 kB
MemAvailable:   24182600 kB
SwapTotal:             0 kB
HugePages_Total:       0
";

    // Two populated modules on two channels, two empty slots, and a non-memory array.
    const DMIDECODE: &str = "# dmidecode 3.4
Getting SMBIOS data from sysfs.
SMBIOS 3.3.0 present.

Handle 0x0010, DMI type 16, 23 bytes
Physical Memory Array
\tLocation: System Board Or Motherboard
\tUse: System Memory
\tError Correction Type: None
\tMaximum Capacity: 64 GB
\tNumber Of Devices: 4

Handle 0x0011, DMI type 16, 23 bytes
Physical Memory Array
\tLocation: System Board Or Motherboard
\tUse: Flash Memory
\tNumber Of Devices: 1

Handle 0x0012, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x0010
\tTotal Width: Unknown
\tData Width: Unknown
\tSize: No Module Installed
\tForm Factor: Unknown
\tLocator: ChannelA-DIMM0
\tBank Locator: BANK 0
\tType: Unknown
\tSpeed: Unknown
\tManufacturer: Not Specified
\tConfigured Memory Speed: Unknown

Handle 0x0013, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x0010
\tTotal Width: 64 bits
\tData Width: 64 bits
\tSize: 16 GB
\tForm Factor: DIMM
\tLocator: ChannelA-DIMM1
\tBank Locator: BANK 1
\tType: DDR4
\tType Detail: Synchronous Unbuffered (Unregistered)
\tSpeed: 3200 MT/s
\tManufacturer: Kingston
\tPart Number: KHX3200C16D4/16GX
\tRank: 2
\tConfigured Memory Speed: 2933 MT/s

Handle 0x0014, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x0010
\tTotal Width: Unknown
\tData Width: Unknown
\tSize: No Module Installed
\tLocator: ChannelB-DIMM0
\tBank Locator: BANK 2
\tType: Unknown
\tSpeed: Unknown

Handle 0x0015, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x0010
\tTotal Width: 72 bits
\tData Width: 64 bits
\tSize: 16384 MB
\tLocator: ChannelB-DIMM1
\tBank Locator: BANK 3
\tType: DDR4
\tSpeed: 3200 MT/s
\tManufacturer: Kingston
\tPart Number: KHX3200C16D4/16GX
\tConfigured Memory Speed: 3200 MT/s
";

    // An older dmidecode (MHz, "Configured Clock Speed") on a board without channel names.
    const DMIDECODE_OLD: &str = "Handle 0x1100, DMI type 17, 40 bytes
Memory Device
\tData Width: 64 bits
\tSize: 8192 MB
\tLocator: DIMM 0
\tBank Locator: Not Specified
\tType: DDR3
\tSpeed: 1600 MHz
\tConfigured Clock Speed: 1333 MHz

Handle 0x1101, DMI type 17, 40 bytes
Memory Device
\tData Width: 64 bits
\tSize: 8192 MB
\tLocator: DIMM 1
\tType: DDR3
\tSpeed: 1600 MHz
";

    #[test]
    fn meminfo() {
        assert_eq!(parse_meminfo(MEMINFO, "MemTotal"), Some(24684096 * 1024));
        assert_eq!(
            parse_meminfo(MEMINFO, "MemAvailable"),
            Some(24182600 * 1024)
        );
        assert_eq!(parse_meminfo(MEMINFO, "SwapTotal"), Some(0));
        assert_eq!(parse_meminfo(MEMINFO, "HugePages_Total"), Some(0));
        assert_eq!(parse_meminfo(MEMINFO, "Mem"), None);
        assert_eq!(parse_meminfo("", "MemTotal"), None);
    }

    #[test]
    fn dmidecode_populated_and_empty_slots() {
        let d = parse_dmidecode(DMIDECODE);
        assert_eq!(d.slots, 4);
        assert_eq!(d.populated.len(), 2);
        let a = &d.populated[0];
        assert_eq!(a.locator, "ChannelA-DIMM1");
        assert_eq!(a.size_bytes, Some(16 << 30));
        assert_eq!(a.kind.as_deref(), Some("DDR4"));
        assert_eq!(a.speed_mts, Some(3200));
        assert_eq!(a.configured_speed_mts, Some(2933));
        assert_eq!(a.data_width_bits, Some(64));
        assert_eq!(a.total_width_bits, Some(64));
        assert_eq!(d.populated[1].size_bytes, Some(16 << 30));
        assert_eq!(d.populated[1].total_width_bits, Some(72));

        let mut m = Memory::default();
        summarize_dimms(&mut m, &d);
        assert_eq!(m.dimms_populated, Some(2));
        assert_eq!(m.dimm_slots, Some(4));
        assert_eq!(m.channels, Some(2));
        assert_eq!(m.speed_mts, Some(2933)); // the slower, configured speed
        assert_eq!(m.data_width_bits, Some(64));
        assert_eq!(m.memory_type.as_deref(), Some("DDR4"));
        let peak = m.peak_bandwidth_bytes_per_s.unwrap();
        assert!((peak - 2933e6 * 8.0 * 2.0).abs() < 1.0);
        assert!(m.peak_bandwidth_note.contains("2933 MT/s"));
    }

    #[test]
    fn dmidecode_old_format_assumes_a_channel_per_module() {
        let d = parse_dmidecode(DMIDECODE_OLD);
        assert_eq!(d.slots, 0);
        assert_eq!(d.populated.len(), 2);
        assert_eq!(d.populated[0].bank_locator, None);
        let mut m = Memory::default();
        summarize_dimms(&mut m, &d);
        assert_eq!(m.dimm_slots, None);
        assert_eq!(m.speed_mts, Some(1333));
        assert_eq!(m.channels, Some(2));
        assert!(m.channels_source.as_deref().unwrap().contains("assumed"));
        assert!(m.peak_bandwidth_bytes_per_s.is_some());
    }

    #[test]
    fn dmidecode_in_a_vm_gives_a_reason() {
        let d = parse_dmidecode(
            "# dmidecode 3.4\nScanning /dev/mem for entry point.\n/dev/mem: No such file\n",
        );
        assert_eq!(d, DmiMemory::default());
        let mut m = Memory::default();
        summarize_dimms(&mut m, &d);
        assert_eq!(m.peak_bandwidth_bytes_per_s, None);
        assert!(m.peak_bandwidth_note.contains("no populated"));
    }

    #[test]
    fn missing_speed_gives_a_reason() {
        let d = DmiMemory {
            slots: 1,
            populated: vec![Dimm {
                locator: "DIMM0".into(),
                size_bytes: Some(1 << 30),
                data_width_bits: Some(64),
                ..Default::default()
            }],
        };
        let mut m = Memory::default();
        summarize_dimms(&mut m, &d);
        assert_eq!(m.peak_bandwidth_bytes_per_s, None);
        assert!(m.peak_bandwidth_note.contains("speed"));
    }

    #[test]
    fn channel_keys() {
        let d = |loc: &str, bank: Option<&str>| Dimm {
            locator: loc.into(),
            bank_locator: bank.map(Into::into),
            ..Default::default()
        };
        assert_eq!(
            channel_key(&d("ChannelA-DIMM1", Some("BANK 1"))).as_deref(),
            Some("channel a")
        );
        assert_eq!(
            channel_key(&d("DIMM 0", Some("P0 CHANNEL A"))).as_deref(),
            Some("p0 channel a")
        );
        assert_eq!(
            channel_key(&d("P0_Node0_Channel1_Dimm0", None)).as_deref(),
            Some("p0_node0_channel 1")
        );
        assert_eq!(channel_key(&d("DIMM 0", Some("BANK 0"))), None);
    }
}
