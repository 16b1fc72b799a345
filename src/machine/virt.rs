//! Virtualisation: whether this is a VM (and which hypervisor) or a container, and the
//! CPU time the hypervisor stole from this guest during a run.

use super::cpu::Cpu;
use super::facts::FactRoot;
use super::find_program;
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Virtualization {
    /// The `hypervisor` flag in /proc/cpuinfo (x86).
    pub hypervisor_flag: bool,
    /// CPUID leaf 0x40000000 vendor signature ("KVMKVMKVM", "Microsoft Hv", ...).
    pub cpuid_signature: Option<String>,
    /// The hypervisor's name, from the signature, DMI or systemd-detect-virt.
    pub hypervisor: Option<String>,
    pub dmi_sys_vendor: Option<String>,
    pub dmi_product_name: Option<String>,
    /// `systemd-detect-virt` output (a container name wins over the VM there).
    pub detect_virt: Option<String>,
    /// docker, podman, lxc... when this runs in a container.
    pub container: Option<String>,
    pub is_vm: bool,
    /// The facts that say this is a virtual machine (cpuinfo flag, CPUID, DMI, device
    /// tree, /sys/hypervisor...), each as "source: value".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vm_evidence: Vec<String>,
    /// Steal ticks (/proc/stat, USER_HZ) when the description was gathered.
    pub steal_ticks_at_gather: Option<u64>,
    /// CPU time stolen by the hypervisor while the experiments ran (set by the runner).
    pub steal_during_run: Option<StealReport>,
}

/// Names systemd-detect-virt uses for containers (everything else but "none" is a VM).
const CONTAINERS: &[&str] = &[
    "openvz",
    "lxc",
    "lxc-libvirt",
    "systemd-nspawn",
    "docker",
    "podman",
    "rkt",
    "wsl",
    "proot",
    "pouch",
];

/// Hypervisor name from the CPUID 0x40000000 signature.
pub fn hypervisor_from_signature(sig: &str) -> Option<&'static str> {
    let s = sig.trim_matches(['\0', ' ']);
    Some(match s {
        "KVMKVMKVM" => "KVM",
        "Microsoft Hv" => "Hyper-V",
        "VMwareVMware" => "VMware",
        "XenVMMXenVMM" => "Xen",
        "TCGTCGTCGTCG" => "QEMU (TCG)",
        "bhyve bhyve" => "bhyve",
        "ACRNACRNACRN" => "ACRN",
        "VBoxVBoxVBox" => "VirtualBox",
        "lrpepyh  vr" | "prl hyperv" => "Parallels",
        "QNXQVMBSQG" => "QNX",
        "Linux KVM Hv" => "KVM (Hyper-V enlightenments)",
        _ => return None,
    })
}

/// The hypervisor or cloud a DMI (SMBIOS) system vendor and product name announce;
/// `None` for a physical machine, bare-metal cloud instances (EC2 `*.metal`) included.
/// DMI is there on x86 and on arm64 machines with UEFI firmware (Graviton, Ampere).
pub fn vm_from_dmi(vendor: &str, product: &str) -> Option<&'static str> {
    let (v, p) = (vendor.trim(), product.trim());
    if v == "Amazon EC2" {
        return (!p.ends_with(".metal")).then_some("Amazon EC2 (Nitro)");
    }
    let by_vendor: &[(&str, &str)] = &[
        ("QEMU", "QEMU"),
        ("KVM", "KVM"),
        ("Red Hat", "KVM (Red Hat)"),
        ("VMware", "VMware"),
        ("innotek GmbH", "VirtualBox"),
        ("Xen", "Xen"),
        ("Bochs", "Bochs"),
        ("BHYVE", "bhyve"),
        ("Parallels", "Parallels"),
        ("OpenStack", "OpenStack"),
        ("KubeVirt", "KubeVirt"),
        ("oVirt", "oVirt"),
        ("DigitalOcean", "DigitalOcean"),
        ("Scaleway", "Scaleway"),
    ];
    let by_product: &[(&str, &str)] = &[
        ("Google Compute Engine", "Google Compute Engine"),
        ("Virtual Machine", "Hyper-V"),
        ("VMware", "VMware"),
        ("VirtualBox", "VirtualBox"),
        ("KVM", "KVM"),
        ("HVM domU", "Xen"),
        ("OpenStack", "OpenStack"),
        ("Alibaba Cloud ECS", "Alibaba Cloud ECS"),
        ("vServer", "Hetzner vServer"),
        ("Apple Virtualization", "Apple Virtualization"),
        ("AHV", "Nutanix AHV"),
        ("Parallels", "Parallels"),
    ];
    by_vendor
        .iter()
        .find(|(k, _)| v.starts_with(k))
        .or_else(|| by_product.iter().find(|(k, _)| p.starts_with(k)))
        .map(|(_, name)| *name)
}

/// The hypervisor a device tree names (arm64, RISC-V and POWER guests booted without
/// ACPI): /proc/device-tree/hypervisor/compatible (Xen, KVM, VMware), the QEMU `virt`
/// board's "linux,dummy-virt", or QEMU's fw-cfg node. Strings there end in NUL bytes.
fn vm_from_device_tree(root: &FactRoot) -> Option<(String, String)> {
    let dt = "/proc/device-tree";
    let clean = |s: String| s.replace('\0', " ").trim().to_string();
    if let Some(c) = root.read(format!("{dt}/hypervisor/compatible")).map(clean) {
        let name = if c.contains("xen") {
            "Xen"
        } else if c.contains("kvm") {
            "KVM"
        } else if c.contains("vmware") {
            "VMware"
        } else {
            "hypervisor node"
        };
        return Some((name.into(), format!("{dt}/hypervisor/compatible: {c}")));
    }
    if let Some(c) = root.read(format!("{dt}/compatible")).map(clean) {
        if c.contains("linux,dummy-virt") || c.contains("qemu,") {
            return Some(("QEMU".into(), format!("{dt}/compatible: {c}")));
        }
    }
    root.list(dt)
        .into_iter()
        .find(|n| n.starts_with("fw-cfg"))
        .map(|n| {
            (
                "QEMU".into(),
                format!("{dt}/{n}: QEMU's firmware configuration device"),
            )
        })
}

/// The control program an s390x guest runs under (/proc/sysinfo "VM00 Control Program").
fn vm_from_sysinfo(sysinfo: &str) -> Option<String> {
    sysinfo
        .lines()
        .find_map(|l| l.strip_prefix("VM00 Control Program:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // CPUID intrinsics are safe on recent toolchains
fn cpuid_signature() -> Option<String> {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU and touches no memory; leaf 0x40000000 is
    // only read when leaf 1 says a hypervisor is present (ECX bit 31).
    unsafe {
        if __cpuid(1).ecx & (1 << 31) == 0 {
            return None;
        }
        let l = __cpuid(0x4000_0000);
        let bytes: Vec<u8> = [l.ebx, l.ecx, l.edx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        let s = String::from_utf8_lossy(&bytes)
            .trim_matches(['\0', ' '])
            .to_string();
        (!s.is_empty()).then_some(s)
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_signature() -> Option<String> {
    None
}

/// Sum of the steal column of the aggregate `cpu` line of /proc/stat, in USER_HZ ticks.
pub fn parse_steal(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    line.split_whitespace().nth(8)?.parse().ok()
}

/// Steal ticks so far (USER_HZ, summed over CPUs); `None` when the kernel does not count it.
pub fn cpu_steal_ticks() -> Option<u64> {
    parse_steal(&FactRoot::live().read("/proc/stat")?)
}

pub(crate) fn user_hz() -> f64 {
    // SAFETY: sysconf with a valid name has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// CPU time stolen during an interval, over all online CPUs.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StealReport {
    pub wall_seconds: f64,
    /// CPU seconds stolen, summed over CPUs.
    pub steal_seconds: f64,
    /// Stolen share of the CPU time available: steal / (wall x CPUs).
    pub steal_fraction: f64,
    pub cpus: usize,
}

impl StealReport {
    pub fn new(ticks: u64, hz: f64, wall_seconds: f64, cpus: usize) -> StealReport {
        let steal_seconds = ticks as f64 / hz;
        let avail = wall_seconds * cpus.max(1) as f64;
        StealReport {
            wall_seconds,
            steal_seconds,
            steal_fraction: if avail > 0.0 {
                steal_seconds / avail
            } else {
                0.0
            },
            cpus,
        }
    }

    /// A warning when more than 2% of the CPU time was stolen.
    pub fn warning(&self) -> Option<String> {
        (self.steal_fraction > 0.02).then(|| {
            format!(
                "the hypervisor stole {:.1}% of CPU time during the run ({:.2} CPU-s in {:.1} s); \
                 figures are inflated and noisy: rerun when the host is quieter or on a \
                 dedicated instance",
                self.steal_fraction * 100.0,
                self.steal_seconds,
                self.wall_seconds
            )
        })
    }
}

/// Measures steal time between `start` and `finish`.
#[derive(Debug, Clone)]
pub struct StealMeter {
    start_ticks: Option<u64>,
    start: Instant,
}

impl StealMeter {
    pub fn start() -> StealMeter {
        StealMeter {
            start_ticks: cpu_steal_ticks(),
            start: Instant::now(),
        }
    }

    /// The steal since `start`; `None` when the kernel reports no steal column.
    pub fn finish(&self) -> Option<StealReport> {
        let now = cpu_steal_ticks()?;
        let ticks = now.saturating_sub(self.start_ticks?);
        Some(StealReport::new(
            ticks,
            user_hz(),
            self.start.elapsed().as_secs_f64(),
            crate::platform::online_cpus(),
        ))
    }
}

/// The CPUID signature and systemd-detect-virt are live-only: a recorded machine is
/// judged from its files (hypervisor flag, DMI, /sys/hypervisor, container marks).
pub fn gather(root: &FactRoot, cpu: &Cpu) -> Virtualization {
    let dmi = "/sys/class/dmi/id";
    let mut v = Virtualization {
        hypervisor_flag: cpu.flags.get("hypervisor").copied().unwrap_or(false),
        cpuid_signature: if root.is_live() {
            cpuid_signature()
        } else {
            None
        },
        dmi_sys_vendor: root.read_trim(format!("{dmi}/sys_vendor")),
        dmi_product_name: root.read_trim(format!("{dmi}/product_name")),
        steal_ticks_at_gather: root.read("/proc/stat").and_then(|s| parse_steal(&s)),
        ..Default::default()
    };
    // One quick call; it prints the container when there is one, else the VM.
    let detect = find_program("systemd-detect-virt").filter(|_| root.is_live());
    if let Some(p) = detect {
        if let Ok(o) = std::process::Command::new(p)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
        {
            v.detect_virt = Some(String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|s| !s.is_empty());
        }
    }
    let detected = v.detect_virt.as_deref().filter(|d| *d != "none");
    v.container = detected
        .filter(|d| CONTAINERS.contains(d))
        .map(str::to_string)
        .or_else(|| {
            if root.exists("/.dockerenv") {
                Some("docker".into())
            } else if root.exists("/run/.containerenv") {
                Some("podman".into())
            } else {
                None
            }
        });
    let detected_vm = detected.filter(|d| !CONTAINERS.contains(d));
    // Every architecture's own facts, strongest name first; the evidence lists them all.
    let (mut names, mut evidence) = (Vec::<String>::new(), Vec::<String>::new());
    let mut found = |name: Option<String>, why: String| {
        evidence.push(why);
        names.extend(name);
    };
    if v.hypervisor_flag {
        found(None, "/proc/cpuinfo: hypervisor flag".into());
    }
    if let Some(sig) = v.cpuid_signature.clone() {
        let name = hypervisor_from_signature(&sig).map_or(sig.clone(), str::to_string);
        found(Some(name), format!("CPUID 0x40000000: \"{sig}\""));
    }
    if let Some(d) = detected_vm {
        found(Some(d.to_string()), format!("systemd-detect-virt: {d}"));
    }
    if let Some(t) = root.read_trim("/sys/hypervisor/type") {
        found(Some(t.clone()), format!("/sys/hypervisor/type: {t}"));
    }
    if let Some((name, evidence)) = vm_from_device_tree(root) {
        found(Some(name), evidence);
    }
    if let Some(cp) = root.read("/proc/sysinfo").and_then(|s| vm_from_sysinfo(&s)) {
        found(
            Some(cp.clone()),
            format!("/proc/sysinfo: control program {cp}"),
        );
    }
    let (vendor, product) = (
        v.dmi_sys_vendor.clone().unwrap_or_default(),
        v.dmi_product_name.clone().unwrap_or_default(),
    );
    if let Some(name) = vm_from_dmi(&vendor, &product) {
        found(
            Some(name.to_string()),
            format!("DMI: {}", format!("{vendor} {product}").trim()),
        );
    }
    v.is_vm = !evidence.is_empty();
    v.vm_evidence = evidence;
    v.hypervisor = names.into_iter().next();
    if v.is_vm && v.hypervisor.is_none() {
        v.hypervisor = v.dmi_product_name.clone();
    }
    v
}

impl Virtualization {
    pub fn warning(&self) -> Option<String> {
        self.is_vm.then(|| {
            let name = self.hypervisor.as_deref().unwrap_or("unknown hypervisor");
            let cloud = match (&self.dmi_sys_vendor, &self.dmi_product_name) {
                (Some(v), Some(p)) => format!(", {v} {p}"),
                (Some(x), None) | (None, Some(x)) => format!(", {x}"),
                _ => String::new(),
            };
            format!(
                "running in a virtual machine ({name}{cloud}): other guests can steal CPU time \
                 and cross-CPU wake-ups are slow; steal time during the run is reported, \
                 compare only with runs on the same kind of instance"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10165 0 3516 87842 594 0 63 30 0 0
cpu0 4066 0 1351 45602 90 0 11 9 0 0
cpu1 6098 0 2165 42239 504 0 51 21 0 0
intr 1234
";

    #[test]
    fn steal_column() {
        assert_eq!(parse_steal(STAT), Some(30));
        assert_eq!(parse_steal("cpu  1 2 3 4\n"), None); // old kernels: no steal column
        assert_eq!(parse_steal(""), None);
    }

    #[test]
    fn steal_report() {
        // 30 ticks at 100 Hz over 10 s on 2 CPUs: 0.3 s of 20 s = 1.5%.
        let r = StealReport::new(30, 100.0, 10.0, 2);
        assert!((r.steal_seconds - 0.3).abs() < 1e-12);
        assert!((r.steal_fraction - 0.015).abs() < 1e-12);
        assert!(r.warning().is_none());
        let r = StealReport::new(100, 100.0, 10.0, 2);
        assert!(r.warning().unwrap().contains("5.0%"));
        assert_eq!(StealReport::new(5, 100.0, 0.0, 2).steal_fraction, 0.0);
    }

    #[test]
    fn meter_runs() {
        let m = StealMeter::start();
        if let Some(r) = m.finish() {
            assert!(r.steal_fraction >= 0.0 && r.steal_seconds >= 0.0);
        }
    }

    #[test]
    fn signatures() {
        assert_eq!(hypervisor_from_signature("KVMKVMKVM\0\0\0"), Some("KVM"));
        assert_eq!(hypervisor_from_signature("Microsoft Hv"), Some("Hyper-V"));
        assert_eq!(hypervisor_from_signature("whatever"), None);
    }

    #[test]
    fn dmi_names_virtual_machines_not_metal() {
        assert_eq!(
            vm_from_dmi("Amazon EC2", "c7g.4xlarge"),
            Some("Amazon EC2 (Nitro)")
        );
        assert_eq!(vm_from_dmi("Amazon EC2", "c7g.metal"), None);
        assert_eq!(
            vm_from_dmi("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
            Some("QEMU")
        );
        assert_eq!(
            vm_from_dmi("Google", "Google Compute Engine"),
            Some("Google Compute Engine")
        );
        assert_eq!(
            vm_from_dmi("Microsoft Corporation", "Virtual Machine"),
            Some("Hyper-V")
        );
        assert_eq!(
            vm_from_dmi("Microsoft Corporation", "Surface Laptop 5"),
            None
        );
        assert_eq!(vm_from_dmi("LENOVO", "21CBCTO1WW"), None);
        assert_eq!(vm_from_dmi("", ""), None);
    }

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let f = t.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        }
        t
    }

    /// A recorded arm64 guest: no cpuinfo flag, no CPUID; the platform's own facts decide.
    fn judge(files: &[(&str, &str)]) -> Virtualization {
        let t = tree(files);
        gather(&FactRoot::recorded(t.path()), &Cpu::default())
    }

    #[test]
    fn vms_are_found_without_the_x86_flag() {
        let v = judge(&[
            ("sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("sys/class/dmi/id/product_name", "m7g.large\n"),
        ]);
        assert!(v.is_vm && !v.hypervisor_flag, "{v:?}");
        assert_eq!(v.hypervisor.as_deref(), Some("Amazon EC2 (Nitro)"));
        assert_eq!(v.vm_evidence, ["DMI: Amazon EC2 m7g.large"]);
        let v = judge(&[(
            "proc/device-tree/hypervisor/compatible",
            "xen,xen-4.17\0xen,xen\0",
        )]);
        assert!(v.is_vm && v.hypervisor.as_deref() == Some("Xen"), "{v:?}");
        let v = judge(&[("proc/device-tree/compatible", "linux,dummy-virt\0")]);
        assert_eq!(v.hypervisor.as_deref(), Some("QEMU"));
        let v = judge(&[
            (
                "proc/device-tree/fw-cfg@9020000/compatible",
                "qemu,fw-cfg-mmio\0",
            ),
            ("proc/device-tree/compatible", "acme,board\0"),
        ]);
        assert!(v.is_vm && v.vm_evidence[0].contains("fw-cfg"), "{v:?}");
        let v = judge(&[("sys/hypervisor/type", "xen\n")]);
        assert!(v.is_vm && v.hypervisor.as_deref() == Some("xen"));
        let v = judge(&[(
            "proc/sysinfo",
            "Manufacturer:         IBM\nVM00 Control Program: KVM/Linux\n",
        )]);
        assert_eq!(v.hypervisor.as_deref(), Some("KVM/Linux"));
        // Bare metal, arm64 with a device tree and x86 with DMI.
        let v = judge(&[(
            "proc/device-tree/compatible",
            "raspberrypi,5-model-b\0brcm,bcm2712\0",
        )]);
        assert!(!v.is_vm && v.vm_evidence.is_empty(), "{v:?}");
        let v = judge(&[
            ("sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("sys/class/dmi/id/product_name", "c7g.metal\n"),
        ]);
        assert!(!v.is_vm, "{v:?}");
    }

    #[test]
    fn vm_warning_names_the_hypervisor() {
        let v = Virtualization {
            is_vm: true,
            hypervisor: Some("KVM".into()),
            dmi_sys_vendor: Some("Amazon EC2".into()),
            ..Default::default()
        };
        let w = v.warning().unwrap();
        assert!(w.contains("KVM, Amazon EC2") && w.contains("steal"), "{w}");
        assert!(Virtualization::default().warning().is_none());
    }
}
