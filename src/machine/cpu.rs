//! CPU facts: model, topology, flags, caches (sysfs), frequency policy, mitigations.

use super::facts::FactRoot;
use super::topology::{self, Topology};
use super::{format_list, parse_list};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

const SYS_CPU: &str = "/sys/devices/system/cpu";

/// Flags worth showing: time-stamp counter behaviour, virtualisation, vector width.
const X86_FLAGS: &[&str] = &[
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
const ARM_FLAGS: &[&str] = &[
    "fp", "asimd", "aes", "sha2", "crc32", "atomics", "sve", "sve2",
];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
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
    /// On CPUs with more than one kind of core: where each kind's figures ran and its own
    /// measured clock, the run's CPU first (filled by the runner; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub core_kinds: Vec<KindClock>,
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
    /// Highest cpufreq cpuinfo_max_freq over the online CPUs, in MHz (None without cpufreq).
    pub max_mhz: Option<f64>,
    /// CPUs differ by more than 10% in current frequency.
    pub unequal_frequencies: Option<bool>,
    /// /sys/devices/system/cpu/vulnerabilities: name -> kernel status line.
    pub mitigations: BTreeMap<String, String>,
    /// What identifies the part for the parts table (`experiments::parts`).
    #[serde(skip_serializing_if = "PartId::is_empty")]
    pub part: PartId,
}

/// One kind of core a run measured per-kind figures on (`runner`, docs/METHODOLOGY.md,
/// "Core kinds").
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct KindClock {
    /// "performance" or "efficiency".
    pub kind: String,
    pub cpu: usize,
    /// What this kind's metric names end with ("" for the run's own kind).
    pub suffix: String,
    /// The effective core clock measured on `cpu` (dependent add chain).
    pub core_clock_hz: Option<f64>,
}

/// What identifies a CPU part: x86 CPUID family and model (cpuinfo "cpu family" and
/// "model"), arm64 MIDR implementer and part, macOS `hw.cpufamily`. Empty when unknown
/// (documents written before it existed).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct PartId {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm_implementer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm_part: Option<String>,
    /// macOS `hw.cpufamily` (Apple's CPUFAMILY_* constants of <mach/machine.h>).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpufamily: Option<u64>,
}

impl PartId {
    pub fn is_empty(&self) -> bool {
        *self == PartId::default()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
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

impl Cache {
    /// "L1d" for a data cache, "L2" for a unified one.
    pub fn label(&self) -> String {
        let k = if self.kind.eq_ignore_ascii_case("data") {
            "d"
        } else {
            ""
        };
        format!("L{}{k}", self.level)
    }
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
    /// Every "processor" number listed.
    pub processors: Vec<usize>,
    /// The ARM layout ("CPU implementer" lines) rather than x86's.
    pub arm: bool,
    /// x86 family and model, arm64 implementer and part (first CPU listed).
    pub part: PartId,
}

/// Whether the first flags line of /proc/cpuinfo lists constant_tsc and nonstop_tsc
/// (`None` without one). Read live, for `Machine::add_time_base`.
pub fn tsc_invariant_flags() -> Option<bool> {
    let s = FactRoot::live().read("/proc/cpuinfo")?;
    let flags = s.lines().find(|l| l.starts_with("flags"))?;
    Some(flags.contains(" constant_tsc") && flags.contains(" nonstop_tsc"))
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
                "processor" => {
                    proc_no = v.parse::<usize>().ok();
                    info.processors.extend(proc_no);
                }
                "model name" | "Hardware" | "Processor" if info.model.is_empty() => {
                    info.model = v.to_string()
                }
                "vendor_id" if info.vendor.is_empty() => info.vendor = v.to_string(),
                "CPU implementer" => implementer = Some(v.to_string()),
                "CPU part" => part = Some(v.to_string()),
                "cpu family" if info.part.family.is_none() => info.part.family = v.parse().ok(),
                "model" if info.part.model.is_none() => info.part.model = v.parse().ok(),
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
    info.arm = implementer.is_some();
    if info.arm {
        info.part.arm_implementer = implementer.as_ref().map(|s| s.to_ascii_lowercase());
        info.part.arm_part = part.as_ref().map(|s| s.to_ascii_lowercase());
    }
    if info.vendor.is_empty() {
        if let Some(imp) = &implementer {
            info.vendor = arm_implementer(imp).to_string();
        }
    }
    if info.model.is_empty() {
        if let Some(p) = part {
            info.model = match arm_part(implementer.as_deref().unwrap_or(""), &p) {
                Some(name) => format!("{} {name}", info.vendor),
                None => format!("{} part {p}", info.vendor),
            };
        }
    }
    info
}

/// Names of common server and board ARM cores (implementer, part) as the kernel lists them.
fn arm_part(implementer: &str, part: &str) -> Option<&'static str> {
    let key = (implementer.to_ascii_lowercase(), part.to_ascii_lowercase());
    Some(match (key.0.as_str(), key.1.as_str()) {
        ("0x41", "0xd03") => "Cortex-A53",
        ("0x41", "0xd07") => "Cortex-A57",
        ("0x41", "0xd08") => "Cortex-A72",
        ("0x41", "0xd0b") => "Cortex-A76",
        ("0x41", "0xd0c") => "Neoverse-N1",
        ("0x41", "0xd40") => "Neoverse-V1",
        ("0x41", "0xd49") => "Neoverse-N2",
        ("0x41", "0xd4f") => "Neoverse-V2",
        ("0x48", "0xd01") => "Kunpeng-920",
        ("0xc0", "0xac3") => "AmpereOne",
        _ => return None,
    })
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

/// The allowed-CPU list of a /proc/PID/status ("Cpus_allowed_list:\t0-3,8").
pub fn parse_status_allowed(status: &str) -> Vec<usize> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(parse_list)
        .unwrap_or_default()
}

/// CPU facts and the topology, read under `root`.
pub fn gather(root: &FactRoot) -> (Cpu, Topology) {
    if root.is_sysctl_machine() {
        let (mut cpu, topo) = from_sysctl(&|k| root.sysctl(k));
        if cpu.allowed_cpus.is_empty() && root.is_live() {
            // No topology from sysctl: the CPU count alone, as everywhere else.
            cpu.allowed_cpus = crate::platform::allowed_cpus();
            cpu.logical_cpus = cpu.allowed_cpus.len();
        }
        return (cpu, topo);
    }
    let info = parse_cpuinfo(&root.read("/proc/cpuinfo").unwrap_or_default());
    let online = root
        .read(format!("{SYS_CPU}/online"))
        .map(|s| parse_list(&s))
        .filter(|v| !v.is_empty())
        .or_else(|| (!info.processors.is_empty()).then(|| info.processors.clone()))
        .unwrap_or_else(|| {
            let n = if root.is_live() {
                crate::platform::online_cpus()
            } else {
                1
            };
            (0..n).collect()
        });
    // The recorded process's mask; live, the calling thread's own (it may be pinned).
    let recorded = root
        .read("/proc/self/status")
        .map(|s| parse_status_allowed(&s))
        .unwrap_or_default();
    let allowed = if root.is_live() {
        crate::platform::allowed_cpus()
    } else if recorded.is_empty() {
        online.clone()
    } else {
        recorded
    };
    let flags = if info.arm { ARM_FLAGS } else { X86_FLAGS };
    let mut cpu = Cpu {
        model: info.model.clone(),
        vendor: info.vendor.clone(),
        logical_cpus: online.len(),
        allowed_cpus: allowed,
        flags: flags
            .iter()
            .map(|f| (f.to_string(), info.flags.contains(*f)))
            .collect(),
        caches: read_caches(root, &online),
        mitigations: read_mitigations(root),
        part: info.part.clone(),
        ..Default::default()
    };
    let topo = topology::from_sysfs(root, &online, &cpu.allowed_cpus, &info.topology);
    counts(root, &mut cpu, &topo, &info);
    frequency(root, &mut cpu, &online, &info);
    (cpu, topo)
}

/// Caches from macOS sysctl values, as decoded integers; `get` looks a name up. Per
/// performance level (hw.perflevelN.l1dcachesize, l1icachesize, l2cachesize, l3cachesize,
/// cpusperl2, cpusperl3, logicalcpu, physicalcpu), the fastest level first; without
/// perflevels (macOS before 12) the hw.* values. On Apple silicon hw.l1dcachesize and
/// friends are the efficiency cores' (Apple's "Determining system capabilities"), so they
/// stand in only where there is at most one level. L1 is per core (SMT threads share it).
/// Shared with Linux so its tests run here.
pub fn caches_from_sysctl(get: &dyn Fn(&str) -> Option<u64>, logical: usize) -> Vec<Cache> {
    let line = get("hw.cachelinesize").unwrap_or(0);
    let logical = logical.max(1);
    let levels = get("hw.nperflevels").unwrap_or(0) as usize;
    let mut out: Vec<Cache> = Vec::new();
    for lvl in 0..levels.max(1) {
        let v = |k: &str| {
            get(&format!("hw.perflevel{lvl}.{k}"))
                .or_else(|| (levels <= 1).then(|| get(&format!("hw.{k}"))).flatten())
        };
        let plog = v("logicalcpu")
            .map(|n| n as usize)
            .filter(|&n| n > 0)
            .unwrap_or(logical);
        let pphys = v("physicalcpu")
            .map(|n| n as usize)
            .filter(|&n| n > 0)
            .unwrap_or(plog);
        let tpc = (plog / pphys.max(1)).max(1);
        let shapes = [
            (1, "Data", v("l1dcachesize"), Some(tpc as u64)),
            (1, "Instruction", v("l1icachesize"), Some(tpc as u64)),
            (2, "Unified", v("l2cachesize"), v("cpusperl2")),
            (3, "Unified", v("l3cachesize"), v("cpusperl3")),
        ];
        for (level, kind, size, shared) in shapes {
            let Some(size_bytes) = size.filter(|&s| s > 0) else {
                continue;
            };
            let default = if level == 3 { plog } else { tpc };
            let shared = shared.map_or(default, |n| n as usize).clamp(1, plog);
            out.push(Cache {
                level,
                kind: kind.into(),
                size_bytes,
                line_bytes: line,
                ways: None,
                shared_cpus: shared,
                instances: plog.div_ceil(shared),
            });
        }
    }
    // L1 data before L1 instruction, then by level; the fastest level's first (stable).
    out.sort_by_key(|c| (c.level, c.kind != "Data"));
    out
}

/// Cores, sockets and SMT from the topology, else from /proc/cpuinfo's ids.
fn counts(root: &FactRoot, cpu: &mut Cpu, topo: &Topology, info: &CpuInfo) {
    let counted = match (topo.cores, topo.packages) {
        (Some(c), Some(p)) => Some((c, p)),
        _ if !info.topology.is_empty() => {
            let e: Vec<(u32, u32)> = info.topology.iter().map(|t| (t.1, t.2)).collect();
            Some(count_topology(&e))
        }
        _ => None,
    };
    if let Some((cores, sockets)) = counted.filter(|c| c.0 > 0) {
        cpu.physical_cores = Some(cores);
        cpu.sockets = Some(sockets);
        cpu.threads_per_core = Some(cpu.logical_cpus.div_ceil(cores));
    }
    cpu.smt = match root.read_trim(format!("{SYS_CPU}/smt/active")).as_deref() {
        Some("1") => Some(true),
        Some("0") => Some(false),
        _ => cpu.threads_per_core.map(|t| t > 1),
    };
}

/// A Mac, from its sysctl values: model, counts, caches, topology.
pub fn from_sysctl(lookup: &dyn Fn(&str) -> Option<String>) -> (Cpu, Topology) {
    let topo = topology::from_sysctl(lookup);
    let num = |k: &str| lookup(k).and_then(|v| v.trim().parse::<u64>().ok());
    let cpu = Cpu {
        model: lookup("machdep.cpu.brand_string").unwrap_or_default(),
        vendor: lookup("machdep.cpu.vendor").unwrap_or_default(),
        logical_cpus: topo.cpus.len(),
        allowed_cpus: topo.allowed.clone(),
        physical_cores: topo.cores,
        sockets: topo.packages,
        threads_per_core: topo.cores.map(|c| topo.cpus.len().div_ceil(c.max(1))),
        smt: topo.cores.map(|c| topo.cpus.len() > c),
        caches: caches_from_sysctl(&num, topo.cpus.len()),
        part: PartId {
            family: num("machdep.cpu.family").map(|v| v as u32),
            model: num("machdep.cpu.model").map(|v| v as u32),
            cpufamily: lookup("hw.cpufamily").and_then(|v| cpufamily(&v)),
            ..Default::default()
        },
        ..Default::default()
    };
    (cpu, topo)
}

/// `hw.cpufamily`, format "I" (signed): decoded like sysctl(8) an M2's 0xda33d83d reads
/// -634136515, so it is parsed signed and kept as the 32 bits Apple's constants name.
fn cpufamily(text: &str) -> Option<u64> {
    let v = text.trim().parse::<i64>().ok()?;
    i32::try_from(v)
        .map(|v| v as u32)
        .or_else(|_| u32::try_from(v))
        .ok()
        .map(u64::from)
}

fn frequency(root: &FactRoot, cpu: &mut Cpu, online: &[usize], info: &CpuInfo) {
    for &c in online {
        let f = format!("{SYS_CPU}/cpu{c}/cpufreq");
        if let Some(g) = root.read_trim(format!("{f}/scaling_governor")) {
            cpu.governors.insert(c, g);
        }
        if let Some(khz) = root.read_u64(format!("{f}/scaling_cur_freq")) {
            cpu.cur_mhz.insert(c, khz as f64 / 1e3);
        }
        if let Some(khz) = root.read_u64(format!("{f}/cpuinfo_max_freq")) {
            let mhz = khz as f64 / 1e3;
            cpu.max_mhz = Some(cpu.max_mhz.map_or(mhz, |m: f64| m.max(mhz)));
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
        .and_then(|c| root.read_trim(format!("{SYS_CPU}/cpu{c}/cpufreq/scaling_driver")));
    let sources = [
        ("intel_pstate/no_turbo", true),
        ("cpufreq/boost", false),
        ("cpufreq/policy0/boost", false),
    ];
    for (file, inverted) in sources {
        if let Some(v) = root.read_trim(format!("{SYS_CPU}/{file}")) {
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

fn read_caches(root: &FactRoot, online: &[usize]) -> Vec<Cache> {
    // Each shape with its distinct sharing sets (instances).
    let mut seen: BTreeMap<CacheShape, BTreeSet<String>> = BTreeMap::new();
    for &c in online {
        let dir = format!("{SYS_CPU}/cpu{c}/cache");
        for name in root.list(&dir) {
            if !name.starts_with("index") {
                continue;
            }
            let p = format!("{dir}/{name}");
            let (Some(level), Some(kind), Some(size)) = (
                root.read_u64(format!("{p}/level")),
                root.read_trim(format!("{p}/type")),
                root.read_trim(format!("{p}/size"))
                    .and_then(|s| parse_cache_size(&s)),
            ) else {
                continue;
            };
            let line = root
                .read_u64(format!("{p}/coherency_line_size"))
                .unwrap_or(0);
            let ways = root
                .read_u64(format!("{p}/ways_of_associativity"))
                .filter(|w| *w > 0)
                .map(|w| w as u32);
            let shared = root
                .read_trim(format!("{p}/shared_cpu_list"))
                .unwrap_or_default();
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

fn read_mitigations(root: &FactRoot) -> BTreeMap<String, String> {
    let dir = format!("{SYS_CPU}/vulnerabilities");
    root.list(&dir)
        .into_iter()
        .filter_map(|name| {
            let v = root.read_trim(format!("{dir}/{name}"))?;
            Some((name, v))
        })
        .collect()
}

impl Cpu {
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

    /// Review N6: an M2's hw.cpufamily (0xda33d83d, CPUFAMILY_ARM_AVALANCHE_BLIZZARD)
    /// prints negative, as in the public M2 dump; an M1's prints positive.
    #[test]
    fn a_negative_cpufamily_keeps_its_32_bits() {
        let part = |v: &'static str| {
            let lookup = move |k: &str| (k == "hw.cpufamily").then(|| v.to_string());
            from_sysctl(&lookup).0.part.cpufamily
        };
        assert_eq!(part("-634136515"), Some(0xda33d83d));
        assert_eq!(part("458787763"), Some(0x1b588bb3));
        assert_eq!(part("3660830781"), Some(0xda33d83d), "printed unsigned");
        assert_eq!(part("-9999999999"), None);
        assert_eq!(part("x"), None);
    }

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
        assert_eq!(i.model, "ARM Neoverse-N1");
        assert!(i.arm);
        assert_eq!(i.processors, vec![0, 1]);
        let other = parse_cpuinfo(&CPUINFO_ARM.replace("0xd0c", "0xfff"));
        assert_eq!(other.model, "ARM part 0xfff");
        assert!(i.flags.contains("asimd"));
        assert!(i.mhz.is_empty());
    }

    #[test]
    fn a_recorded_mac_is_read_from_sysctl_txt() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("sysctl.txt"),
            "machdep.cpu.brand_string: Apple M2\nhw.packages: 1\nhw.physicalcpu: 8\n\
             hw.logicalcpu: 8\nhw.nperflevels: 2\nhw.cachelinesize: 128\n\
             hw.perflevel0.physicalcpu: 4\nhw.perflevel0.logicalcpu: 4\n\
             hw.perflevel0.cpusperl2: 4\nhw.perflevel0.l2cachesize: 16777216\n\
             hw.perflevel0.l1dcachesize: 131072\nhw.perflevel0.name: Performance\n\
             hw.perflevel1.physicalcpu: 4\nhw.perflevel1.logicalcpu: 4\n\
             hw.perflevel1.cpusperl2: 4\nhw.perflevel1.name: Efficiency\n",
        )
        .unwrap();
        let root = FactRoot::recorded(dir.path());
        assert!(root.is_sysctl_machine());
        let (cpu, t) = gather(&root);
        assert_eq!(cpu.model, "Apple M2");
        assert_eq!((cpu.logical_cpus, cpu.physical_cores), (8, Some(8)));
        assert_eq!(cpu.smt, Some(false));
        assert!(cpu.caches.iter().all(|c| c.line_bytes == 128));
        let largest = cpu.caches.iter().map(|c| c.size_bytes).max();
        assert_eq!(largest, Some(16 << 20));
        let c = t.chosen_cpu.unwrap();
        assert_eq!(t.place(c).unwrap().kind.as_deref(), Some("performance"));
        assert_eq!(t.partners.same_llc.map(|p| p >= 4), Some(true));
        // The efficiency cluster is the other L2 group.
        assert_eq!(t.partners.other_llc.map(|p| p < 4), Some(true));
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
    fn caches_from_sysctl_values() {
        // An M1 Pro (values as `sysctl hw` prints them; see tests/fixtures/machines/SOURCES.md).
        let m1pro = |n: &str| match n {
            "hw.cachelinesize" => Some(128),
            "hw.nperflevels" => Some(2),
            "hw.perflevel0.logicalcpu" | "hw.perflevel0.physicalcpu" => Some(8),
            "hw.perflevel0.l1dcachesize" => Some(128 << 10),
            "hw.perflevel0.l1icachesize" => Some(192 << 10),
            "hw.perflevel0.l2cachesize" => Some(12 << 20),
            "hw.perflevel0.cpusperl2" => Some(4),
            "hw.perflevel1.logicalcpu" | "hw.perflevel1.physicalcpu" => Some(2),
            "hw.perflevel1.l1dcachesize" => Some(64 << 10),
            "hw.perflevel1.l1icachesize" => Some(128 << 10),
            "hw.perflevel1.l2cachesize" => Some(4 << 20),
            "hw.perflevel1.cpusperl2" => Some(2),
            // The efficiency cores' values, never taken for the performance cores'.
            "hw.l1dcachesize" => Some(64 << 10),
            "hw.l2cachesize" => Some(4 << 20),
            _ => None,
        };
        let c = caches_from_sysctl(&m1pro, 10);
        let shape: Vec<(u32, &str, u64, usize, usize)> = c
            .iter()
            .map(|x| {
                (
                    x.level,
                    x.kind.as_str(),
                    x.size_bytes,
                    x.shared_cpus,
                    x.instances,
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (1, "Data", 128 << 10, 1, 8),
                (1, "Data", 64 << 10, 1, 2),
                (1, "Instruction", 192 << 10, 1, 8),
                (1, "Instruction", 128 << 10, 1, 2),
                (2, "Unified", 12 << 20, 4, 2),
                (2, "Unified", 4 << 20, 2, 1),
            ]
        );
        assert!(c.iter().all(|x| x.line_bytes == 128));
        let llc = c.iter().max_by_key(|x| (x.level, x.size_bytes)).unwrap();
        assert_eq!(llc.size_bytes, 12 << 20);

        // A dual-core Kaby Lake with SMT before macOS 12 (no perflevels): hw.* values.
        let kaby = |n: &str| match n {
            "hw.cachelinesize" => Some(64),
            "hw.logicalcpu" => Some(4),
            "hw.physicalcpu" => Some(2),
            "hw.l1dcachesize" | "hw.l1icachesize" => Some(32 << 10),
            "hw.l2cachesize" => Some(256 << 10),
            "hw.l3cachesize" => Some(4 << 20),
            _ => None,
        };
        let c = caches_from_sysctl(&kaby, 4);
        let shape: Vec<(u32, u64, usize, usize)> = c
            .iter()
            .map(|x| (x.level, x.size_bytes, x.shared_cpus, x.instances))
            .collect();
        assert_eq!(
            shape,
            [
                (1, 32 << 10, 2, 2),
                (1, 32 << 10, 2, 2),
                (2, 256 << 10, 2, 2),
                (3, 4 << 20, 4, 1)
            ]
        );
        // macOS 12+ on the same Mac: one perflevel, the same caches.
        let kaby12 = |n: &str| match n {
            "hw.nperflevels" => Some(1),
            "hw.perflevel0.cpusperl2" => Some(2),
            "hw.perflevel0.cpusperl3" => Some(4),
            n => kaby(&n.replace("perflevel0.", "")),
        };
        let c12 = caches_from_sysctl(&kaby12, 4);
        assert_eq!(c12, c);
        assert!(caches_from_sysctl(&|_| None, 8).is_empty());
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
