//! The machine description: facts gathered once per run, readable without root.
//!
//! Every fact comes from a file in /proc or /sys (or, as root, one `dmidecode` call);
//! a missing or odd file leaves the field `None`/empty, never an error. Parsing lives in
//! pure functions over strings so that it can be tested on captured samples. Files are
//! read through a `FactRoot`, so a snapshot records them and `--from DIR` reads them back.

pub(crate) mod cgroup;
pub(crate) mod conditions;
pub(crate) mod cpu;
mod describe;
pub mod facts;
pub(crate) mod memory;
pub(crate) mod network;
pub(crate) mod os;
pub(crate) mod process;
pub(crate) mod storage;
pub(crate) mod topology;
pub(crate) mod virt;

pub(crate) use cgroup::Cgroup;
pub(crate) use cpu::{Cache, Cpu, KindClock};
pub(crate) use facts::FactRoot;
pub(crate) use memory::Memory;
pub(crate) use network::Nic;
pub(crate) use os::Os;
pub(crate) use storage::{Disk, Storage};
pub use topology::{CpuPlace, CrossPlan, KindCpu, PartnerClass, Partners, Spread, Topology};
pub(crate) use virt::{StealMeter, Virtualization};

use crate::clock::ClockInfo;
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub hostname: String,
    pub cpu: Cpu,
    /// Packages, cores, SMT siblings, LLC groups, NUMA nodes, core kinds; the chosen CPU
    /// and its partners. Absent in older results (`is_unknown`), and then left out again.
    #[serde(skip_serializing_if = "Topology::is_unknown")]
    pub topology: Topology,
    /// The time base (`add_time_base`, on a live machine only).
    pub clock: Option<ClockInfo>,
    pub memory: Memory,
    pub storage: Storage,
    pub network: Vec<Nic>,
    pub os: Os,
    pub virtualization: Virtualization,
    pub cgroup: Cgroup,
    /// 1, 5 and 15 minute load averages when the description was gathered.
    pub load_average: Option<[f64; 3]>,
    /// Where this process may use fewer CPUs than the machine has (a cpuset, taskset):
    /// how many of those CPUs were busy over a short window (/proc/stat), since the load
    /// average counts the whole machine's tasks (portability review N10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_busy: Option<f64>,
    /// How long gathering took (it must stay well under a second).
    pub gather_ms: f64,
    /// Conditions that may distort measurements (busy, governor, VM, cgroup limits...).
    pub warnings: Vec<String>,
    /// Set when the facts come from a recorded tree (`osmeter machine --from DIR`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Recording>,
}

/// Where a recorded description came from and which facts it cannot have.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Recording {
    pub from: String,
    /// Facts that are not files and so were not recorded: unknown here, never taken from
    /// the machine that reads the recording.
    pub unknown: Vec<String>,
}

/// What a recorded tree cannot hold (the description measures or asks for them live).
pub(crate) const LIVE_ONLY_FACTS: &[&str] = &[
    "page size (sysconf)",
    "counter frequency and effective core clock (measured by running on the machine)",
    "CPUID hypervisor signature",
    "systemd-detect-virt",
    "DIMMs (dmidecode)",
    "file system of the current directory",
];

impl Machine {
    /// Gathers every fact that can be read here.
    pub fn gather() -> Machine {
        Machine::gather_from(&FactRoot::live())
    }

    /// Gathers the facts under `root`: this machine, or a recorded one.
    pub fn gather_from(root: &FactRoot) -> Machine {
        let t0 = Instant::now();
        let cpuinfo_arm = root
            .read("/proc/cpuinfo")
            .map(|s| cpu::parse_cpuinfo(&s).arm);
        let (cpu, topology) = cpu::gather(root);
        let mac = root.is_sysctl_machine();
        let mut m = Machine {
            hostname: if mac {
                root.sysctl("kern.hostname")
            } else {
                root.read_trim("/proc/sys/kernel/hostname")
            }
            .unwrap_or_else(|| "unknown".into()),
            cpu,
            topology,
            memory: memory::gather(root),
            storage: storage::gather(root),
            network: network::gather(root),
            os: os::gather(root, cpuinfo_arm),
            cgroup: cgroup::gather(root),
            load_average: if mac {
                // sysctl prints vm.loadavg as "{ 1.20 1.31 1.45 }".
                root.sysctl("vm.loadavg")
                    .and_then(|s| os::parse_loadavg(s.trim_matches(['{', '}', ' '])))
            } else {
                root.read("/proc/loadavg")
                    .and_then(|s| os::parse_loadavg(&s))
            },
            ..Default::default()
        };
        m.virtualization = virt::gather(root, &m.cpu);
        if root.is_live() && !mac && m.cpu.allowed_cpus.len() < m.cpu.logical_cpus {
            m.allowed_busy = allowed_busy(root, &m.cpu.allowed_cpus);
        }
        m.warnings = m.compute_warnings();
        if !root.is_live() {
            m.recorded = Some(Recording {
                from: root.root().display().to_string(),
                unknown: LIVE_ONLY_FACTS
                    .iter()
                    // A Mac's page size is recorded (hw.pagesize).
                    .filter(|f| !(mac && f.starts_with("page size")))
                    .map(|s| s.to_string())
                    .collect(),
            });
        }
        m.gather_ms = t0.elapsed().as_secs_f64() * 1e3;
        m
    }

    /// The data and unified caches the measured CPU uses, one per level, ordered by level:
    /// the one rule for the memory experiments, the report's figures and the findings.
    /// Instruction caches and caches of unknown size are left out. Where a level lists
    /// several caches (hybrid CPUs: one per kind of core), the one serving as many CPUs as
    /// there are of the chosen CPU's kind is taken, else the one serving the most CPUs,
    /// else the smallest.
    pub(crate) fn data_caches(&self) -> Vec<Cache> {
        let t = &self.topology;
        let kind = t
            .chosen_cpu
            .and_then(|c| t.place(c))
            .and_then(|p| p.kind.as_ref());
        let of_kind = kind.map(|k| t.cpus.iter().filter(|p| p.kind.as_ref() == Some(k)).count());
        let mut v: Vec<Cache> = self
            .cpu
            .caches
            .iter()
            .filter(|c| !c.kind.eq_ignore_ascii_case("instruction") && c.size_bytes > 0)
            .cloned()
            .collect();
        let served = |c: &Cache| c.shared_cpus * c.instances;
        // Best first within each level, then keep the first of each.
        v.sort_by_key(|c| {
            (
                c.level,
                Some(served(c)) != of_kind,
                std::cmp::Reverse(served(c)),
                c.size_bytes,
            )
        });
        v.dedup_by_key(|c| c.level);
        v
    }

    /// Adds the time base to a live description: the counter (`clock::detect`), its
    /// frequency and invariance, the effective core clock (`clock::measure_core_clock`),
    /// and their warnings. Returns the counter for timing. Call it on the CPU that will
    /// be measured (the core clock is timed there).
    pub(crate) fn add_time_base(&mut self) -> crate::clock::HwClock {
        let (hw, info) = crate::clock::detect(cpu::tsc_invariant_flags());
        let core = crate::clock::measure_core_clock();
        self.cpu.core_clock_hz = core.as_ref().map(|c| c.hz);
        if let Some(c) = &core {
            let max_hz = self.cpu.max_mhz.map(|m| m * 1e6);
            self.warnings.extend(c.warnings(max_hz));
        }
        self.warnings.extend(info.warnings.iter().cloned());
        self.clock = Some(info);
        hw
    }

    /// The memory an experiment may allocate: MemAvailable, capped by a cgroup limit; 0
    /// (unknown) when this process's cgroup cannot be read, since MemAvailable is then the
    /// host's and a hidden limit may be far below it (portability review N4).
    pub(crate) fn memory_budget_bytes(&self) -> u64 {
        if self.cgroup.unseen.is_some() {
            return 0;
        }
        let mut b = self.memory.available_bytes;
        if let Some(limit) = self.cgroup.memory_limit_bytes {
            let used = self.cgroup.memory_usage_bytes.unwrap_or(0);
            b = b.min(limit.saturating_sub(used));
        }
        b
    }

    /// What `memory_budget_bytes` came from, for the memory experiments' notes:
    /// "MemAvailable 1.2 GiB", or why it is unknown.
    pub(crate) fn memory_budget_text(&self) -> String {
        match &self.cgroup.unseen {
            Some(path) => format!(
                "memory available unknown (cgroup {path} cannot be read, so its limit is \
                 unknown; MemAvailable may be the host's)"
            ),
            None => format!(
                "MemAvailable {}",
                crate::units::fmt_bytes(self.memory_budget_bytes() as f64)
            ),
        }
    }

    /// One line per condition that may distort figures, each saying what to do.
    fn compute_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let cpus = self.cpu.allowed_cpus.len().max(1);
        if let Some(busy) = self.allowed_busy {
            if busy > 0.5 * cpus as f64 {
                w.push(format!(
                    "the CPUs this process may use are busy: {busy:.1} of {cpus} busy over \
                     {BUSY_WINDOW_MS} ms (/proc/stat); figures may be inflated, run again when \
                     they are idle"
                ));
            }
        } else if let Some(one) = self.load_average.map(|l| l[0]) {
            if one > 0.5 * cpus as f64 {
                w.push(format!(
                    "the machine is busy: load average {one:.2} on {cpus} CPUs; figures may be \
                     inflated, run again when it is idle"
                ));
            }
        }
        // macOS has no governor or cpufreq: the power manager sets the clock.
        if !self.os.kernel.starts_with("Darwin") {
            w.extend(self.cpu.frequency_warnings());
        }
        if let Some(v) = self.virtualization.warning() {
            w.push(v);
        }
        w.extend(
            self.cgroup
                .warnings(self.memory.total_bytes, self.cpu.logical_cpus),
        );
        w
    }

    /// Human-readable description (`osmeter machine`).
    pub(crate) fn describe(&self) -> String {
        describe::describe(self)
    }
}

/// The window over which `allowed_busy` is measured.
const BUSY_WINDOW_MS: u64 = 100;

/// Busy CPUs among `allowed` over `BUSY_WINDOW_MS` (two readings of /proc/stat).
fn allowed_busy(root: &FactRoot, allowed: &[usize]) -> Option<f64> {
    let before = root.read("/proc/stat")?;
    std::thread::sleep(std::time::Duration::from_millis(BUSY_WINDOW_MS));
    os::busy_cpus(&before, &root.read("/proc/stat")?, allowed)
}

/// Parses a kernel list such as `0-3,8,10-11` into its members (empty on garbage).
pub(crate) fn parse_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                // Bounded so that a corrupt range cannot allocate without limit.
                (Ok(a), Ok(b)) if a <= b && b - a < 1 << 16 => out.extend(a..=b),
                _ => return Vec::new(),
            },
            None => match part.trim().parse() {
                Ok(v) => out.push(v),
                Err(_) => return Vec::new(),
            },
        }
    }
    out
}

/// Formats a list of numbers compactly: `0-3,8`.
pub(crate) fn format_list(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// Finds an executable by name on PATH or in the sbin directories root tools live in.
pub(crate) fn find_program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_format() {
        assert_eq!(parse_list("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_list("0"), vec![0]);
        assert!(parse_list("").is_empty());
        assert!(parse_list("a-b").is_empty());
        assert!(parse_list("5-2").is_empty());
        assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_list(&[]), "");
    }

    #[test]
    fn an_unreadable_cgroup_leaves_the_memory_budget_unknown() {
        // Recorded in the zoo's container guest (4 GiB, memory.max 512 MiB, /sys hidden):
        // the guest's MemAvailable (3.8 GiB) let standard mem.bandwidth take 950 MiB and
        // be OOM-killed (N4). Unknown now, so every profile stays at 256 MiB or less.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/zoo-container-no-sys");
        let m = Machine::gather_from(&FactRoot::recorded(&dir));
        assert!(m.memory.available_bytes > 1 << 30);
        assert_eq!(m.memory_budget_bytes(), 0);
        assert!(m.memory_budget_text().contains("unknown"));
        for p in crate::experiments::Profile::ALL {
            assert!(p.memory_limit(m.memory_budget_bytes()) <= 256 << 20);
        }
    }

    #[test]
    fn a_confined_process_judges_busy_by_its_own_cpus() {
        let mut m = Machine::default();
        m.cpu.logical_cpus = 64;
        m.cpu.allowed_cpus = vec![2, 3];
        m.os.kernel = "Linux 6.1".into();
        let busy = |m: &Machine| m.compute_warnings().iter().any(|w| w.contains("busy"));
        // The host's load (2 of 64 CPUs) against 2 allowed CPUs: busy by the load average
        // alone (N10) but not by the allowed CPUs' own ticks.
        m.load_average = Some([2.0, 2.0, 2.0]);
        assert!(busy(&m));
        m.allowed_busy = Some(0.1);
        assert!(!busy(&m));
        // An idle host but both allowed CPUs busy: busy.
        m.load_average = Some([0.0; 3]);
        m.allowed_busy = Some(1.9);
        assert!(busy(&m));
    }

    #[test]
    fn data_caches_are_the_chosen_kinds_one_per_level() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/intel-hybrid-laptop");
        let m = Machine::gather_from(&FactRoot::recorded(&dir));
        let c = m.topology.chosen_cpu.unwrap();
        assert_eq!(
            m.topology.place(c).unwrap().kind.as_deref(),
            Some("performance")
        );
        let got: Vec<(u32, u64)> = m
            .data_caches()
            .iter()
            .map(|c| (c.level, c.size_bytes))
            .collect();
        // The P-cores' 48 KiB L1d and 1.25 MiB L2, not the E-cores' 32 KiB and 2 MiB.
        assert_eq!(got, [(1, 48 << 10), (2, 1280 << 10), (3, 24 << 20)]);
        let labels: Vec<String> = m.data_caches().iter().map(|c| c.label()).collect();
        assert_eq!(labels, ["L1d", "L2", "L3"]);
        // The efficiency cores' when one of them is chosen (per-kind figures): 32 KiB L1d
        // and the 2 MiB L2 a cluster of four shares.
        let mut e = m.clone();
        e.topology.choose(12, "test");
        let got: Vec<(u32, u64)> = e
            .data_caches()
            .iter()
            .map(|c| (c.level, c.size_bytes))
            .collect();
        assert_eq!(got, [(1, 32 << 10), (2, 2 << 20), (3, 24 << 20)]);
        // Without a chosen kind: the cache serving the most CPUs (the 12 P-core threads).
        let mut flat = m.clone();
        flat.topology.chosen_cpu = None;
        assert_eq!(flat.data_caches()[1].size_bytes, 1280 << 10);
    }

    #[test]
    fn data_caches_of_each_perflevel_of_an_m1_pro() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/apple-m1-pro");
        let mut m = Machine::gather_from(&FactRoot::recorded(&dir));
        let sizes = |m: &Machine| -> Vec<(u32, u64)> {
            m.data_caches()
                .iter()
                .map(|c| (c.level, c.size_bytes))
                .collect()
        };
        assert_eq!(sizes(&m), [(1, 128 << 10), (2, 12 << 20)]);
        m.topology.choose(1, "test");
        assert_eq!(sizes(&m), [(1, 64 << 10), (2, 4 << 20)]);
    }

    #[test]
    fn gather_on_this_machine_is_plausible() {
        let m = Machine::gather();
        assert!(m.cpu.logical_cpus >= 1);
        assert!(!m.cpu.allowed_cpus.is_empty());
        let data: Vec<&Cache> = m
            .cpu
            .caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .collect();
        // Some ARM boards and containers hide sysfs caches; elsewhere they must be there.
        if std::path::Path::new("/sys/devices/system/cpu/cpu0/cache/index0").exists() {
            assert!(data.iter().any(|c| c.size_bytes > 0), "{:?}", m.cpu.caches);
            assert!(data
                .iter()
                .all(|c| (32..=256).contains(&c.line_bytes) && c.line_bytes.is_power_of_two()));
        }
        assert!(m.memory.total_bytes > 0);
        assert!(m.memory.available_bytes <= m.memory.total_bytes);
        assert!(!m.os.kernel.is_empty());
        // Must never be slow; generous because the test machine is shared.
        assert!(m.gather_ms < 2000.0, "gather took {} ms", m.gather_ms);
        let text = m.describe();
        assert!(text.contains("CPU") && text.contains("Memory"));
        serde_json::to_string(&m).unwrap();
    }
}
