//! Live host counters read just before and just after each experiment, so that a figure
//! can be judged by the state it was measured in (docs/METHODOLOGY.md, "Trust grades and
//! host conditions"): the measured CPU's steal time and its SMT sibling's busy time
//! (/proc/stat), time other tasks waited for a CPU (/proc/pressure/cpu), the thermal
//! throttle counters (Intel's thermal_throttle in sysfs) and the measured CPU's current
//! frequency (cpufreq). Counters, not facts, so functions here like `process`; every
//! field is `None` where the system does not count it (macOS, VMs without cpufreq, kernels
//! without PSI).

use super::facts::FactRoot;
use std::time::Instant;

/// One reading of the counters.
#[derive(Debug, Clone)]
pub struct HostSample {
    pub at: Instant,
    /// Steal ticks (USER_HZ) of the measured CPU.
    pub steal_ticks: Option<u64>,
    /// Busy ticks (all but idle and iowait) of the measured CPU's SMT siblings, summed.
    pub sibling_busy_ticks: Option<u64>,
    /// Microseconds during which some task waited for a CPU (PSI `some total`).
    pub cpu_wait_us: Option<u64>,
    /// Thermal throttle events counted for the measured CPU (core + package).
    pub throttle_events: Option<u64>,
    /// The measured CPU's current frequency, kHz (cpufreq scaling_cur_freq).
    pub cur_khz: Option<u64>,
}

/// The counters for `cpu` (and its SMT `siblings`), read live.
pub fn sample(cpu: usize, siblings: &[usize]) -> HostSample {
    sample_from(&FactRoot::live(), cpu, siblings)
}

/// As `sample`, from `root` (a recorded tree in tests).
pub fn sample_from(root: &FactRoot, cpu: usize, siblings: &[usize]) -> HostSample {
    let stat = root.read("/proc/stat");
    let stat = stat.as_deref().unwrap_or("");
    let sys = format!("/sys/devices/system/cpu/cpu{cpu}");
    let counter = |name: &str| {
        root.read_trim(format!("{sys}/thermal_throttle/{name}"))
            .and_then(|s| s.parse::<u64>().ok())
    };
    let throttle = match (
        counter("core_throttle_count"),
        counter("package_throttle_count"),
    ) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    let sibling_busy = if siblings.is_empty() {
        None
    } else {
        siblings
            .iter()
            .map(|&s| cpu_line(stat, s).map(|f| f.busy))
            .sum::<Option<u64>>()
    };
    HostSample {
        at: Instant::now(),
        steal_ticks: cpu_line(stat, cpu).and_then(|f| f.steal),
        sibling_busy_ticks: sibling_busy,
        cpu_wait_us: root
            .read("/proc/pressure/cpu")
            .and_then(|s| psi_some_total(&s)),
        throttle_events: throttle,
        cur_khz: root
            .read_trim(format!("{sys}/cpufreq/scaling_cur_freq"))
            .and_then(|s| s.parse().ok()),
    }
}

/// The ticks of one CPU's line of /proc/stat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq + steal (everything but idle and iowait).
    pub busy: u64,
    /// None on kernels without the steal column.
    pub steal: Option<u64>,
}

/// The `cpuN` line of /proc/stat.
pub fn cpu_line(stat: &str, cpu: usize) -> Option<CpuTicks> {
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map_while(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice
    if v.len() < 4 {
        return None;
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(CpuTicks {
        busy: at(0) + at(1) + at(2) + at(5) + at(6) + at(7),
        steal: v.get(7).copied(),
    })
}

/// `total=` of the `some` line of /proc/pressure/cpu (microseconds).
pub fn psi_some_total(s: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The kernel's clock source (Linux: `tsc`, `arch_sys_counter`, `hpet`, `acpi_pm`...).
pub fn clock_source() -> Option<String> {
    FactRoot::live().read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource")
}

/// USER_HZ: the unit of /proc/stat's ticks.
pub fn user_hz() -> f64 {
    super::virt::user_hz()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  1687347 0 229679 285078 10719 0 5726 47057 0 0\n\
                        cpu0 850779 0 96876 158123 2676 0 943 23385 0 0\n\
                        cpu1 836567 0 132802 126954 8042 0 4782 23672 0 0\n\
                        cpu10 1 1 1 1 1 1 1 1 0 0\n\
                        intr 15660966 0 0\n";

    #[test]
    fn per_cpu_lines() {
        let c1 = cpu_line(STAT, 1).unwrap();
        assert_eq!(c1.steal, Some(23672));
        assert_eq!(c1.busy, 836567 + 132802 + 4782 + 23672);
        // cpu1 is not cpu10.
        assert_eq!(cpu_line(STAT, 10).unwrap().busy, 6);
        assert_eq!(cpu_line(STAT, 2), None);
        // Old kernels: no steal column.
        assert_eq!(cpu_line("cpu0 1 2 3 4\n", 0).unwrap().steal, None);
    }

    #[test]
    fn psi_total() {
        let s = "some avg10=43.42 avg60=19.36 avg300=8.94 total=8000902884\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(psi_some_total(s), Some(8_000_902_884));
        assert_eq!(psi_some_total("garbage"), None);
    }

    #[test]
    fn a_recorded_tree_with_throttle_counters_and_cpufreq() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let cpu = p.join("sys/devices/system/cpu/cpu1");
        std::fs::create_dir_all(cpu.join("thermal_throttle")).unwrap();
        std::fs::create_dir_all(cpu.join("cpufreq")).unwrap();
        std::fs::create_dir_all(p.join("proc")).unwrap();
        std::fs::write(p.join("proc/stat"), STAT).unwrap();
        std::fs::write(cpu.join("thermal_throttle/core_throttle_count"), "3\n").unwrap();
        std::fs::write(cpu.join("thermal_throttle/package_throttle_count"), "4\n").unwrap();
        std::fs::write(cpu.join("cpufreq/scaling_cur_freq"), "2400000\n").unwrap();
        let s = sample_from(&FactRoot::recorded(p), 1, &[0]);
        assert_eq!(s.steal_ticks, Some(23672));
        assert_eq!(s.sibling_busy_ticks, Some(850779 + 96876 + 943 + 23385));
        assert_eq!(s.throttle_events, Some(7));
        assert_eq!(s.cur_khz, Some(2_400_000));
        assert_eq!(s.cpu_wait_us, None);
        // No siblings, no sibling figure.
        assert_eq!(
            sample_from(&FactRoot::recorded(p), 1, &[]).sibling_busy_ticks,
            None
        );
    }
}
