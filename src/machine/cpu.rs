//! CPU facts: model, topology, flags, caches (sysfs), frequency policy, mitigations.

use super::{format_list, parse_list, read, read_trim, read_u64};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

const SYS_CPU: &str = "/sys/devices/system/cpu";

/// Flags worth showing: time-stamp counter behaviour, virtualisation, vector width.
#[cfg(not(target_arch = "aarch64"))]
const FLAGS_OF_INTEREST: &[&str] = &[
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "rdtscp",
    "hypervisor",
    "ht",
    "sse4_2",
    "avx",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "aes",
    "sha_ni",
    "erms",
    "fsrm",
];
#[cfg(target_arch = "aarch64")]
const FLAGS_OF_INTEREST: &[&str] = &[
    "fp", "asimd", "aes", "sha2", "crc32", "atomics", "sve", "sve2",
];

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cpu {
    pub model: String,
    /// `vendor_id` (x86) or the implementer (ARM).
    pub vendor: String,
    pub logical_cpus: usize,
    /// CPUs this process may run on.
    pub allowed_cpus: Vec<usize>,
    pub physical_cores: Option<usize>,
    pub sockets: Option<usize>,
    pub threads_per_core: Option<usize>,
    /// Simultaneous multithreading active (sysfs `smt/active`, else threads per core > 1).
    pub smt: Option<bool>,
    /// Effective core clock measured with a dependent add chain (filled by the runner).
    pub core_clock_hz: Option<f64>,
    /// Each flag of interest and whether /proc/cpuinfo lists it.
    pub flags: BTreeMap<String, bool>,
    pub caches: Vec<Cache>,
    /// cpufreq governor per CPU (empty when sysfs has no cpufreq, as in most VMs).
    pub governors: BTreeMap<usize, String>,
    /// The governor when every CPU has the same one.
    pub governor: Option<String>,
    pub governors_match: Option<bool>,
    pub scaling_driver: Option<String>,
    /// Turbo/boost enabled, and the file that said so.
    pub turbo: Option<bool>,
    pub turbo_source: Option<String>,
    /// Current frequency per CPU in MHz at gathering time.
    pub cur_mhz: BTreeMap<usize, f64>,
    /// "cpufreq scaling_cur_freq" or "/proc/cpuinfo".
    pub mhz_source: Option<String>,
    /// CPUs differ by more than 10% in current frequency.
    pub unequal_frequencies: Option<bool>,
    /// /sys/devices/system/cpu/vulnerabilities: name -> kernel status line.
    pub mitigations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Cache {
    pub level: u32,
    /// "Data", "Instruction" or "Unified".
    pub kind: String,
    pub size_bytes: u64,
    pub line_bytes: u64,
    pub ways: Option<u32>,
    /// CPUs sharing one instance.
    pub shared_cpus: usize,
    /// Distinct instances seen over the online CPUs.
    pub instances: usize,
}

/// What /proc/cpuinfo says, per the fields osmeter uses.
#[derive(Debug, Default, PartialEq)]
pub struct CpuInfo {
    pub model: String,
    pub vendor: String,
    pub flags: BTreeSet<String>,
    /// (processor, MHz) where the kernel reports it.
    pub mhz: Vec<(usize, f64)>,
    /// (processor, physical id, core id) where reported.
    pub topology: Vec<(usize, u32, u32)>,
}

/// Parses /proc/cpuinfo (x86 and ARM layouts).
pub fn parse_cpuinfo(s: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let (mut implementer, mut part) = (None, None);
    for block in s.split("\n\n") {
        let mut proc_no = None;
        let (mut phys, mut core) = (None, None);
        for line in block.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            match k {
                "processor" => proc_no = v.parse::<usize>().ok(),
                "model name" | "Hardware" | "Processor" if info.model.is_empty() => {
                    info.model = v.to_string()
                }
                "vendor_id" if info.vendor.is_empty() => info.vendor = v.to_string(),
                "CPU implementer" => implementer = Some(v.to_string()),
                "CPU part" => part = Some(v.to_string()),
                "flags" | "Features" if info.flags.is_empty() => {
                    info.flags = v.split_whitespace().map(str::to_string).collect()
                }
                "cpu MHz" => {
                    if let (Some(p), Ok(mhz)) = (proc_no, v.parse::<f64>()) {
                        info.mhz.push((p, mhz));
                    }
                }
                "physical id" => phys = v.parse().ok(),
                "core id" => core = v.parse().ok(),
                _ => {}
            }
        }
        if let (Some(p), Some(ph), Some(c)) = (proc_no, phys, core) {
            info.topology.push((p, ph, c));
        }
    }
    if info.vendor.is_empty() {
        if let Some(imp) = &implementer {
            info.vendor = arm_implementer(imp).to_string();
        }
    }
    if info.model.is_empty() {
        if let Some(p) = part {
            info.model = format!("{} part {p}", info.vendor);
        }
    }
    info
}

fn arm_implementer(code: &str) -> &str {
    match code.to_ascii_lowercase().as_str() {
        "0x41" => "ARM",
        "0x42" => "Broadcom",
        "0x46" => "Fujitsu",
        "0x48" => "HiSilicon",
        "0x4e" => "NVIDIA",
        "0x51" => "Qualcomm",
        "0x61" => "Apple",
        "0xc0" => "Ampere",
        _ => code,
    }
}

/// Parses a sysfs cache size such as `32K`, `32768K`, `1M` or `512`.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1024),
        'M' | 'm' => (&s[..s.len() - 1], 1024 * 1024),
        'G' | 'g' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok().map(|n| n * mult)
}

/// Physical cores and sockets from (package, core key) pairs, one per logical CPU.
pub fn count_topology<K: Ord>(entries: &[(u32, K)]) -> (usize, usize) {
    let cores: BTreeSet<(u32, &K)> = entries.iter().map(|(p, k)| (*p, k)).collect();
    let sockets: BTreeSet<u32> = entries.iter().map(|(p, _)| *p).collect();
    (cores.len(), sockets.len())
}

/// True when the spread of current frequencies exceeds 10% of the fastest.
pub fn frequencies_unequal(mhz: &[f64]) -> Option<bool> {
    let valid: Vec<f64> = mhz.iter().copied().filter(|m| *m > 0.0).collect();
    if valid.len() < 2 {
        return None;
    }
    let max = valid.iter().copied().fold(f64::MIN, f64::max);
    let min = valid.iter().copied().fold(f64::MAX, f64::min);
    Some((max - min) / max > 0.10)
}

/// The mode the kernel marks with brackets: `always [madvise] never` -> `madvise`.
pub fn bracketed(s: &str) -> Option<String> {
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

pub fn gather() -> Cpu {
    let logical = crate::platform::online_cpus();
    let online = read(format!("{SYS_CPU}/online"))
        .map(|s| parse_list(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| (0..logical).collect());
    let info = read("/proc/cpuinfo")
        .map(|s| parse_cpuinfo(&s))
        .unwrap_or_default();
    let mut cpu = Cpu {
        model: info.model.clone(),
        vendor: info.vendor.clone(),
        logical_cpus: logical,
        allowed_cpus: crate::platform::allowed_cpus(),
        flags: FLAGS_OF_INTEREST
            .iter()
            .map(|f| (f.to_string(), info.flags.contains(*f)))
            .collect(),
        caches: read_caches(&online),
        mitigations: read_mitigations(),
        ..Default::default()
    };
    topology(&mut cpu, &online, &info);
    frequency(&mut cpu, &online, &info);
    cpu
}

fn topology(cpu: &mut Cpu, online: &[usize], info: &CpuInfo) {
    // A core is identified by its set of sibling threads.
    let sysfs: Vec<(u32, String)> = online
        .iter()
        .filter_map(|c| {
            let t = format!("{SYS_CPU}/cpu{c}/topology");
            let pkg = read_u64(format!("{t}/physical_package_id"))? as u32;
            let sib = read_trim(format!("{t}/core_cpus_list"))
                .or_else(|| read_trim(format!("{t}/thread_siblings_list")))?;
            Some((pkg, sib))
        })
        .collect();
    let counted = if !sysfs.is_empty() && sysfs.len() == online.len() {
        Some(count_topology(&sysfs))
    } else if !info.topology.is_empty() {
        let e: Vec<(u32, u32)> = info.topology.iter().map(|t| (t.1, t.2)).collect();
        Some(count_topology(&e))
    } else {
        None
    };
    if let Some((cores, sockets)) = counted.filter(|c| c.0 > 0) {
        cpu.physical_cores = Some(cores);
        cpu.sockets = Some(sockets);
        cpu.threads_per_core = Some(online.len().div_ceil(cores));
    }
    cpu.smt = match read_trim(format!("{SYS_CPU}/smt/active")).as_deref() {
        Some("1") => Some(true),
        Some("0") => Some(false),
        _ => cpu.threads_per_core.map(|t| t > 1),
    };
}

fn frequency(cpu: &mut Cpu, online: &[usize], info: &CpuInfo) {
    for &c in online {
        let f = format!("{SYS_CPU}/cpu{c}/cpufreq");
        if let Some(g) = read_trim(format!("{f}/scaling_governor")) {
            cpu.governors.insert(c, g);
        }
        if let Some(khz) = read_u64(format!("{f}/scaling_cur_freq")) {
            cpu.cur_mhz.insert(c, khz as f64 / 1e3);
        }
    }
    if !cpu.cur_mhz.is_empty() {
        cpu.mhz_source = Some("cpufreq scaling_cur_freq".into());
    } else if !info.mhz.is_empty() {
        cpu.cur_mhz = info.mhz.iter().copied().collect();
        cpu.mhz_source = Some("/proc/cpuinfo".into());
    }
    let mhz: Vec<f64> = cpu.cur_mhz.values().copied().collect();
    cpu.unequal_frequencies = frequencies_unequal(&mhz);
    let distinct: BTreeSet<&String> = cpu.governors.values().collect();
    if !distinct.is_empty() {
        cpu.governors_match = Some(distinct.len() == 1);
        if distinct.len() == 1 {
            cpu.governor = distinct.into_iter().next().cloned();
        }
    }
    cpu.scaling_driver = online
        .first()
        .and_then(|c| read_trim(format!("{SYS_CPU}/cpu{c}/cpufreq/scaling_driver")));
    let sources = [
        ("intel_pstate/no_turbo", true),
        ("cpufreq/boost", false),
        ("cpufreq/policy0/boost", false),
    ];
    for (file, inverted) in sources {
        if let Some(v) = read_trim(format!("{SYS_CPU}/{file}")) {
            if v == "0" || v == "1" {
                cpu.turbo = Some((v == "1") != inverted);
                cpu.turbo_source = Some(format!("{SYS_CPU}/{file}"));
                break;
            }
        }
    }
}

/// A cache's shape: level, kind, size, line, ways, CPUs sharing it.
type CacheShape = (u32, String, u64, u64, Option<u32>, usize);

fn read_caches(online: &[usize]) -> Vec<Cache> {
    // Each shape with its distinct sharing sets (instances).
    let mut seen: BTreeMap<CacheShape, BTreeSet<String>> = BTreeMap::new();
    for &c in online {
        let Ok(dir) = std::fs::read_dir(format!("{SYS_CPU}/cpu{c}/cache")) else {
            continue;
        };
        for e in dir.flatten() {
            if !e.file_name().to_string_lossy().starts_with("index") {
                continue;
            }
            let p = e.path();
            let (Some(level), Some(kind), Some(size)) = (
                read_u64(p.join("level")),
                read_trim(p.join("type")),
                read_trim(p.join("size")).and_then(|s| parse_cache_size(&s)),
            ) else {
                continue;
            };
            let line = read_u64(p.join("coherency_line_size")).unwrap_or(0);
            let ways = read_u64(p.join("ways_of_associativity"))
                .filter(|w| *w > 0)
                .map(|w| w as u32);
            let shared = read_trim(p.join("shared_cpu_list")).unwrap_or_default();
            let n_shared = parse_list(&shared).len().max(1);
            seen.entry((level as u32, kind, size, line, ways, n_shared))
                .or_default()
                .insert(shared);
        }
    }
    let mut caches: Vec<Cache> = seen
        .into_iter()
        .map(|((level, kind, size, line, ways, shared), inst)| Cache {
            level,
            kind,
            size_bytes: size,
            line_bytes: line,
            ways,
            shared_cpus: shared,
            instances: inst.len(),
        })
        .collect();
    // L1 data before L1 instruction, then by level.
    caches.sort_by_key(|c| (c.level, c.kind != "Data", c.kind.clone()));
    caches
}

fn read_mitigations() -> BTreeMap<String, String> {
    let Ok(dir) = std::fs::read_dir(format!("{SYS_CPU}/vulnerabilities")) else {
        return BTreeMap::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let v = read_trim(e.path())?;
            Some((e.file_name().to_string_lossy().into_owned(), v))
        })
        .collect()
}

impl Cpu {
    /// The last-level cache, largest level with data in it.
    pub fn last_level_cache(&self) -> Option<&Cache> {
        self.caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .max_by_key(|c| (c.level, c.size_bytes))
    }

    /// The line size of the first data cache (64 on most machines).
    pub fn line_bytes(&self) -> Option<u64> {
        self.caches
            .iter()
            .find(|c| c.kind != "Instruction" && c.line_bytes > 0)
            .map(|c| c.line_bytes)
    }

    /// Governor and frequency-spread warnings.
    pub fn frequency_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.governors.is_empty() {
            w.push(
                "CPU frequency governor unknown (no cpufreq in sysfs, usual in VMs where the \
                 host sets the frequency); frequency scaling cannot be checked"
                    .into(),
            );
        } else {
            let slow: Vec<usize> = self
                .governors
                .iter()
                .filter(|(_, g)| g.as_str() != "performance")
                .map(|(c, _)| *c)
                .collect();
            if !slow.is_empty() {
                let names: BTreeSet<&str> = slow
                    .iter()
                    .filter_map(|c| self.governors.get(c).map(String::as_str))
                    .collect();
                w.push(format!(
                    "CPU frequency governor is {} on CPUs {} (not performance); figures may vary \
                     with frequency: `sudo cpupower frequency-set -g performance` steadies them",
                    names.into_iter().collect::<Vec<_>>().join("/"),
                    format_list(&slow)
                ));
            }
        }
        if self.unequal_frequencies == Some(true) {
            let v: Vec<f64> = self.cur_mhz.values().copied().collect();
            let min = v.iter().copied().fold(f64::MAX, f64::min);
            let max = v.iter().copied().fold(f64::MIN, f64::max);
            w.push(format!(
                "CPUs run at unequal frequencies ({min:.0}-{max:.0} MHz now); single-CPU figures \
                 depend on the CPU chosen: keep --cpu fixed across runs you compare"
            ));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO_X86: &str = "processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC
cpu MHz\t\t: 2445.426
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 2
flags\t\t: fpu tsc constant_tsc nonstop_tsc hypervisor avx2 rdtscp
bugs\t\t: sysret_ss_attrs spectre_v1

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
cpu MHz\t\t: 3900.000
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu tsc constant_tsc nonstop_tsc hypervisor avx2 rdtscp
";

    const CPUINFO_ARM: &str = "processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c

processor\t: 1
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU part\t: 0xd0c
";

    #[test]
    fn cpuinfo_x86() {
        let i = parse_cpuinfo(CPUINFO_X86);
        assert_eq!(i.model, "AMD EPYC");
        assert_eq!(i.vendor, "AuthenticAMD");
        assert!(i.flags.contains("constant_tsc") && i.flags.contains("hypervisor"));
        assert!(!i.flags.contains("avx512f"));
        assert_eq!(i.mhz, vec![(0, 2445.426), (1, 3900.0)]);
        assert_eq!(i.topology, vec![(0, 0, 0), (1, 0, 1)]);
        let e: Vec<(u32, u32)> = i.topology.iter().map(|t| (t.1, t.2)).collect();
        assert_eq!(count_topology(&e), (2, 1));
    }

    #[test]
    fn cpuinfo_arm() {
        let i = parse_cpuinfo(CPUINFO_ARM);
        assert_eq!(i.vendor, "ARM");
        assert_eq!(i.model, "ARM part 0xd0c");
        assert!(i.flags.contains("asimd"));
        assert!(i.mhz.is_empty());
    }

    #[test]
    fn cpuinfo_garbage_is_empty() {
        assert_eq!(parse_cpuinfo(""), CpuInfo::default());
        assert_eq!(parse_cpuinfo("::::\n\n\nx"), CpuInfo::default());
    }

    #[test]
    fn topology_counts_smt_siblings_once() {
        // 2 sockets x 2 cores x 2 threads.
        let e = [
            (0, "0,4"),
            (0, "1,5"),
            (1, "2,6"),
            (1, "3,7"),
            (0, "0,4"),
            (0, "1,5"),
            (1, "2,6"),
            (1, "3,7"),
        ];
        assert_eq!(count_topology(&e), (4, 2));
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("32K"), Some(32768));
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn frequency_spread() {
        assert_eq!(frequencies_unequal(&[2445.0]), None);
        assert_eq!(frequencies_unequal(&[2445.0, 2445.4]), Some(false));
        assert_eq!(frequencies_unequal(&[1200.0, 4100.0]), Some(true));
    }

    #[test]
    fn bracketed_mode() {
        assert_eq!(
            bracketed("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            bracketed("none [mq-deadline] kyber bfq").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(bracketed("none"), None);
    }

    #[test]
    fn governor_warnings() {
        let mut c = Cpu::default();
        let w = c.frequency_warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("unknown"));
        c.governors = [(0, "performance".into()), (1, "performance".into())].into();
        assert!(c.frequency_warnings().is_empty());
        c.governors.insert(2, "powersave".into());
        c.governors.insert(3, "powersave".into());
        let w = c.frequency_warnings();
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("powersave on CPUs 2-3"), "{}", w[0]);
        c.unequal_frequencies = Some(true);
        c.cur_mhz = [(0, 1200.0), (1, 4100.0)].into();
        assert_eq!(c.frequency_warnings().len(), 2);
    }
}
