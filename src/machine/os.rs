//! Operating system: distribution, kernel, clock source, load.

use super::facts::FactRoot;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Os {
    /// "Linux 6.1.0-18-amd64" (system name and release).
    pub kernel: String,
    /// The kernel's build string ("#1 SMP PREEMPT_DYNAMIC ...").
    pub kernel_version: Option<String>,
    pub arch: String,
    /// /etc/os-release PRETTY_NAME.
    pub distribution: Option<String>,
    /// Kernel clock source: tsc (fast vDSO clock_gettime) or e.g. kvm-clock, hpet.
    pub clocksource: Option<String>,
    /// Boot parameters that change measured costs (mitigations=, isolcpus=, nohz_full=...).
    pub boot_parameters: Vec<String>,
}

/// PRETTY_NAME from /etc/os-release (quotes removed), else NAME + VERSION.
pub fn parse_os_release(s: &str) -> Option<String> {
    let get = |key: &str| {
        s.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches(['"', '\'']).to_string())
        })
    };
    get("PRETTY_NAME")
        .filter(|v| !v.is_empty())
        .or_else(|| match (get("NAME"), get("VERSION")) {
            (Some(n), Some(v)) => Some(format!("{n} {v}")),
            (n, _) => n,
        })
}

/// /proc/loadavg -> the 1, 5 and 15 minute averages.
pub fn parse_loadavg(s: &str) -> Option<[f64; 3]> {
    let mut it = s.split_whitespace().map(|v| v.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Busy (non-idle, non-iowait) ticks per CPU from /proc/stat's `cpuN` lines.
pub fn parse_cpu_ticks(stat: &str) -> std::collections::BTreeMap<usize, (u64, u64)> {
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu: usize = it.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = it.map_while(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal (guest time is in user).
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            (v.len() >= 4).then_some((cpu, (total - idle, total)))
        })
        .collect()
}

/// How many of `cpus` were busy between two /proc/stat readings (0..=cpus.len()): each
/// CPU's busy share of its ticks, summed. None when a CPU is missing or no tick passed.
pub fn busy_cpus(before: &str, after: &str, cpus: &[usize]) -> Option<f64> {
    let (a, b) = (parse_cpu_ticks(before), parse_cpu_ticks(after));
    let mut sum = 0.0;
    for c in cpus {
        let (&(busy0, total0), &(busy1, total1)) = (a.get(c)?, b.get(c)?);
        let dt = total1.checked_sub(total0)?;
        if dt == 0 {
            return None;
        }
        sum += busy1.saturating_sub(busy0) as f64 / dt as f64;
    }
    Some(sum)
}

/// Kernel command-line parameters that change what osmeter measures.
pub fn interesting_boot_parameters(cmdline: &str) -> Vec<String> {
    const KEYS: &[&str] = &[
        "mitigations",
        "isolcpus",
        "nohz_full",
        "nosmt",
        "clocksource",
        "tsc",
        "transparent_hugepage",
        "intel_pstate",
        "amd_pstate",
        "pti",
        "spectre_v2",
        "processor.max_cstate",
        "intel_idle.max_cstate",
        "idle",
    ];
    cmdline
        .split_whitespace()
        .filter(|p| KEYS.contains(&p.split('=').next().unwrap_or("")))
        .map(str::to_string)
        .collect()
}

/// Kernel, its build string and the product name from macOS sysctl values (kern.ostype,
/// kern.osrelease, kern.version, kern.osproductversion); shared so Linux tests it.
pub fn from_sysctl(get: &dyn Fn(&str) -> Option<String>) -> Os {
    let sysname = get("kern.ostype").unwrap_or_else(|| "Darwin".into());
    let release = get("kern.osrelease").unwrap_or_default();
    Os {
        kernel: format!("{sysname} {release}").trim().to_string(),
        kernel_version: get("kern.version"),
        arch: mac_arch(get),
        distribution: get("kern.osproductversion").map(|v| format!("macOS {v}")),
        ..Default::default()
    }
}

/// A Mac's architecture from hw.cputype (mach/machine.h: CPU_TYPE_X86 7, CPU_TYPE_ARM 12,
/// with or without the 64-bit ABI flag 0x01000000), else hw.machine; empty when neither
/// was recorded. Never this build's: a recorded Mac is not the machine reading it.
fn mac_arch(get: &dyn Fn(&str) -> Option<String>) -> String {
    let by_type = get("hw.cputype")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|t| match t & 0xff_ffff {
            7 => Some("x86_64"),
            12 => Some("aarch64"),
            _ => None,
        });
    match (by_type, get("hw.machine").as_deref()) {
        (Some(a), _) => a.to_string(),
        (None, Some("arm64")) => "aarch64".into(),
        (None, Some(m)) => m.to_string(),
        (None, None) => String::new(),
    }
}

/// The machine architecture: /proc/sys/kernel/arch (Linux 6.1+), else the layout of
/// /proc/cpuinfo for a recorded machine, else this build's target.
fn arch(root: &FactRoot, cpuinfo_arm: Option<bool>) -> String {
    if let Some(a) = root.read_trim("/proc/sys/kernel/arch") {
        return a;
    }
    match (root.is_live(), cpuinfo_arm) {
        (true, _) => std::env::consts::ARCH.to_string(),
        (false, Some(true)) => "aarch64".into(),
        (false, Some(false)) => "x86_64".into(),
        (false, None) => String::new(),
    }
}

/// `cpuinfo_arm`: whether /proc/cpuinfo has the ARM layout (None when it was not read).
pub fn gather(root: &FactRoot, cpuinfo_arm: Option<bool>) -> Os {
    if root.is_sysctl_machine() {
        return from_sysctl(&|k| root.sysctl(k));
    }
    let sysname = root
        .read_trim("/proc/sys/kernel/ostype")
        .unwrap_or_else(|| "Linux".into());
    let release = root
        .read_trim("/proc/sys/kernel/osrelease")
        .unwrap_or_default();
    Os {
        kernel: format!("{sysname} {release}").trim().to_string(),
        kernel_version: root.read_trim("/proc/sys/kernel/version"),
        arch: arch(root, cpuinfo_arm),
        distribution: root
            .read("/etc/os-release")
            .or_else(|| root.read("/usr/lib/os-release"))
            .and_then(|s| parse_os_release(&s)),
        clocksource: root
            .read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        boot_parameters: root
            .read("/proc/cmdline")
            .map(|s| interesting_boot_parameters(&s))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_cpus_count_only_the_cpus_asked_for() {
        // CPUs 0 and 1 spin (all ticks busy), 2 and 3 idle, over 100 ticks.
        let before = "cpu  400 0 0 400 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0 0 0\n\
                      cpu1 100 0 0 100 0 0 0 0 0 0\ncpu2 100 0 0 100 0 0 0 0 0 0\n\
                      cpu3 100 0 0 100 0 0 0 0 0 0\nintr 5\n";
        let after = "cpu  600 0 0 600 0 0 0 0 0 0\ncpu0 190 0 10 100 0 0 0 0 0 0\n\
                     cpu1 200 0 0 100 0 0 0 0 0 0\ncpu2 100 0 0 195 5 0 0 0 0 0\n\
                     cpu3 110 0 0 190 0 0 0 0 0 0\n";
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(near(busy_cpus(before, after, &[0, 1]), 2.0));
        assert!(near(busy_cpus(before, after, &[2, 3]), 0.1));
        // A CPU /proc/stat does not list, or no tick passed: unknown.
        assert_eq!(busy_cpus(before, after, &[7]), None);
        assert_eq!(busy_cpus(before, before, &[0]), None);
    }

    #[test]
    fn os_release() {
        let s = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
                 VERSION_ID=\"12\"\nVERSION=\"12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            parse_os_release(s).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release("NAME=Alpine\nVERSION='3.19'\n").as_deref(),
            Some("Alpine 3.19")
        );
        assert_eq!(parse_os_release(""), None);
    }

    #[test]
    fn loadavg() {
        assert_eq!(
            parse_loadavg("0.24 0.22 0.12 4/109 5677\n"),
            Some([0.24, 0.22, 0.12])
        );
        assert_eq!(parse_loadavg("0.24 x"), None);
        assert_eq!(parse_loadavg(""), None);
    }

    #[test]
    fn boot_parameters() {
        let p = interesting_boot_parameters(
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro mitigations=off isolcpus=2,3 quiet",
        );
        assert_eq!(p, vec!["mitigations=off", "isolcpus=2,3"]);
    }

    #[test]
    fn macos_facts_from_sysctl() {
        let get = |n: &str| {
            match n {
                "kern.osrelease" => Some("23.4.0"),
                "kern.osproductversion" => Some("14.4"),
                _ => None,
            }
            .map(String::from)
        };
        let os = from_sysctl(&get);
        assert_eq!(os.kernel, "Darwin 23.4.0");
        assert_eq!(os.distribution.as_deref(), Some("macOS 14.4"));
        assert_eq!(os.kernel_version, None);
        assert_eq!(os.arch, "", "no type recorded: unknown, not this build's");
        let typed = |t: &'static str, m: &'static str| {
            move |n: &str| match n {
                "hw.cputype" => Some(t.to_string()),
                "hw.machine" => Some(m.to_string()),
                _ => None,
            }
        };
        // CPU_TYPE_ARM64 = 0x0100000c; the Intel Macs' `sysctl hw` prints 7.
        assert_eq!(from_sysctl(&typed("16777228", "")).arch, "aarch64");
        assert_eq!(from_sysctl(&typed("7", "")).arch, "x86_64");
        assert_eq!(from_sysctl(&typed("x", "arm64")).arch, "aarch64");
    }

    #[test]
    fn kernel_is_read() {
        let os = gather(&FactRoot::live(), None);
        assert!(os.kernel.starts_with("Linux"), "{}", os.kernel);
    }
}
