//! The human-readable machine description (`osmeter machine`).

use super::storage::DiskKind;
use super::{format_list, Machine};
use crate::units::fmt_bytes;
use std::fmt::Write;

const LABEL: usize = 16;

struct Out(String);

impl Out {
    fn section(&mut self, title: &str) {
        let _ = writeln!(self.0, "\n{title}");
    }
    /// One aligned row; continuation lines of `value` line up under its first line.
    fn row(&mut self, label: &str, value: impl AsRef<str>) {
        let pad = " ".repeat(LABEL + 2);
        for (i, line) in value.as_ref().lines().enumerate() {
            if i == 0 {
                let _ = writeln!(self.0, "  {label:<LABEL$}{line}");
            } else {
                let _ = writeln!(self.0, "{pad}{line}");
            }
        }
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub fn describe(m: &Machine) -> String {
    let mut o = Out(match &m.recorded {
        Some(r) => format!(
            "Machine {} (recorded in {}; unknown there, as they are not files: {})\n",
            m.hostname,
            r.from,
            r.unknown.join(", ")
        ),
        None => format!(
            "Machine {} (facts gathered in {:.0} ms)\n",
            m.hostname, m.gather_ms
        ),
    });
    cpu(&mut o, m);
    topology(&mut o, m);
    caches(&mut o, m);
    memory(&mut o, m);
    storage(&mut o, m);
    network(&mut o, m);
    os(&mut o, m);
    virt(&mut o, m);
    o.section("Warnings");
    if m.warnings.is_empty() {
        o.row("none", "");
    }
    for w in &m.warnings {
        let _ = writeln!(o.0, "  - {w}");
    }
    o.0
}

fn cpu(o: &mut Out, m: &Machine) {
    let c = &m.cpu;
    o.section("CPU");
    let vendor = if c.vendor.is_empty() {
        String::new()
    } else {
        format!(" ({})", c.vendor)
    };
    o.row(
        "model",
        format!(
            "{}{vendor}",
            if c.model.is_empty() {
                "unknown"
            } else {
                &c.model
            }
        ),
    );
    let mut topo = format!(
        "{} (allowed: {})",
        plural(c.logical_cpus, "logical CPU", "logical CPUs"),
        format_list(&c.allowed_cpus)
    );
    if let Some(n) = c.physical_cores {
        let _ = write!(topo, ", {}", plural(n, "core", "cores"));
    }
    if let Some(n) = c.sockets {
        let _ = write!(topo, ", {}", plural(n, "socket", "sockets"));
    }
    let smt = match c.smt {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    };
    let _ = write!(topo, ", SMT {smt}");
    o.row("topology", topo);
    o.row("flags", flags_text(c));
    clocks(o, m);
    frequency(o, c);
    mitigations(o, c);
}

/// Flags present, then flags absent.
fn flags_text(c: &super::Cpu) -> String {
    let have: Vec<&str> = c
        .flags
        .iter()
        .filter(|(_, v)| **v)
        .map(|(k, _)| k.as_str())
        .collect();
    let lack: Vec<&str> = c
        .flags
        .iter()
        .filter(|(_, v)| !**v)
        .map(|(k, _)| k.as_str())
        .collect();
    format!(
        "{}\nabsent: {}",
        if have.is_empty() {
            "-".into()
        } else {
            have.join(" ")
        },
        if lack.is_empty() {
            "-".into()
        } else {
            lack.join(" ")
        }
    )
}

/// The measured core clock and the time base.
fn clocks(o: &mut Out, m: &Machine) {
    let c = &m.cpu;
    if let Some(hz) = c.core_clock_hz {
        o.row(
            "core clock",
            format!("{:.2} GHz (measured with dependent adds)", hz / 1e9),
        );
    }
    if let Some(ci) = &m.clock {
        let inv = match ci.invariant {
            Some(true) => "invariant",
            Some(false) => "NOT invariant",
            None => "invariance unknown",
        };
        o.row(
            "counter",
            format!(
                "{} at {:.3} GHz, {inv} ({}){}",
                ci.counter,
                ci.frequency_hz / 1e9,
                ci.frequency_source,
                ci.step_text().map(|t| format!(", {t}")).unwrap_or_default()
            ),
        );
    }
}

/// Current frequencies, governor, turbo.
fn frequency(o: &mut Out, c: &super::Cpu) {
    let mhz: Vec<f64> = c.cur_mhz.values().copied().collect();
    let freq = if mhz.is_empty() {
        "unknown".to_string()
    } else {
        let min = mhz.iter().copied().fold(f64::MAX, f64::min);
        let max = mhz.iter().copied().fold(f64::MIN, f64::max);
        let src = c.mhz_source.as_deref().unwrap_or("");
        if max - min < 1.0 {
            format!("{max:.0} MHz on all CPUs now ({src})")
        } else {
            let per: Vec<String> = c
                .cur_mhz
                .iter()
                .map(|(k, v)| format!("cpu{k} {v:.0}"))
                .collect();
            let list = if per.len() <= 8 {
                format!(": {}", per.join(", "))
            } else {
                String::new()
            };
            format!("{min:.0}-{max:.0} MHz now{list} ({src})")
        }
    };
    o.row("frequency", freq);
    let gov = match (&c.governor, c.governors.is_empty()) {
        (_, true) => "unknown (no cpufreq in sysfs)".to_string(),
        (Some(g), _) => format!("{g} on all CPUs"),
        (None, _) => c
            .governors
            .iter()
            .map(|(k, v)| format!("cpu{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let driver = c
        .scaling_driver
        .as_ref()
        .map(|d| format!(" (driver {d})"))
        .unwrap_or_default();
    o.row("governor", format!("{gov}{driver}"));
    o.row(
        "turbo/boost",
        match c.turbo {
            Some(t) => format!(
                "{} ({})",
                if t { "on" } else { "off" },
                c.turbo_source.as_deref().unwrap_or("")
            ),
            None => "unknown (no boost control in sysfs)".into(),
        },
    );
}

fn mitigations(o: &mut Out, c: &super::Cpu) {
    if c.mitigations.is_empty() {
        o.row("mitigations", "unknown (no vulnerabilities directory)");
    } else {
        let count = |p: &str| c.mitigations.values().filter(|v| v.starts_with(p)).count();
        let mut text = format!(
            "{} not affected, {} mitigated, {} vulnerable",
            count("Not affected"),
            count("Mitigation"),
            count("Vulnerable")
        );
        for (k, v) in c
            .mitigations
            .iter()
            .filter(|(_, v)| !v.starts_with("Not affected"))
        {
            let _ = write!(text, "\n{k}: {v}");
        }
        o.row("mitigations", text);
    }
}

fn topology(o: &mut Out, m: &Machine) {
    let t = &m.topology;
    o.section("Topology");
    if t.cpus.is_empty() {
        o.row("layout", "unknown (no CPU topology readable)");
    } else {
        o.row("layout", t.summary());
    }
    // CPU lists per group, where there is more than one group.
    let groups = |key: &dyn Fn(&super::CpuPlace) -> Option<usize>, name: &str| {
        let mut g: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for c in &t.cpus {
            if let Some(k) = key(c) {
                g.entry(k).or_default().push(c.cpu);
            }
        }
        (g.len() > 1).then(|| {
            g.iter()
                .map(|(k, v)| format!("{name} {k}: CPUs {}", format_list(v)))
                .collect::<Vec<_>>()
                .join("\n")
        })
    };
    if let Some(s) = groups(&|c| c.package.map(|p| p as usize), "package") {
        o.row("packages", s);
    }
    if let Some(s) = groups(&|c| c.llc, "LLC") {
        o.row("LLC groups", s);
    }
    if let Some(s) = groups(&|c| c.node, "node") {
        o.row("NUMA nodes", s);
    }
    match t.chosen_cpu {
        Some(c) => {
            let kind = t
                .place(c)
                .and_then(|p| p.kind.as_deref())
                .map(|k| format!(" ({k} core)"))
                .unwrap_or_default();
            o.row("chosen CPU", format!("{c}{kind}: {}", t.chosen_reason));
            o.row("partners", t.partners_line());
        }
        None => o.row("chosen CPU", "none (no allowed CPU known)"),
    }
}

fn caches(o: &mut Out, m: &Machine) {
    o.section("Caches");
    if m.cpu.caches.is_empty() {
        o.row("unknown", "sysfs lists no caches");
    }
    for c in &m.cpu.caches {
        let kind = match c.kind.as_str() {
            "Data" => "data",
            "Instruction" => "instruction",
            "Unified" => "unified",
            k => k,
        };
        let ways = c.ways.map(|w| format!(", {w}-way")).unwrap_or_default();
        let share = if c.shared_cpus <= 1 {
            "per CPU".to_string()
        } else {
            format!("shared by {} CPUs", c.shared_cpus)
        };
        o.row(
            &format!("L{} {kind}", c.level),
            format!(
                "{:>9}, {} B lines{ways}, {share} (x{})",
                fmt_bytes(c.size_bytes as f64),
                c.line_bytes,
                c.instances
            ),
        );
    }
}

fn memory(o: &mut Out, m: &Machine) {
    let mem = &m.memory;
    o.section("Memory");
    let swap = match mem.swap_total_bytes {
        Some(0) => "no swap".to_string(),
        Some(s) => format!("{} swap", fmt_bytes(s as f64)),
        None => "swap unknown".into(),
    };
    let page = mem
        .page_bytes
        .map(|p| format!(", {} pages", fmt_bytes(p as f64)))
        .unwrap_or_default();
    o.row(
        "size",
        format!(
            "{} total, {} available, {swap}{page}",
            fmt_bytes(mem.total_bytes as f64),
            fmt_bytes(mem.available_bytes as f64)
        ),
    );
    o.row(
        "huge pages",
        format!(
            "transparent: {} (defrag {})",
            opt(&mem.thp_enabled),
            opt(&mem.thp_defrag)
        ),
    );
    o.row("NUMA nodes", opt(&mem.numa_nodes));
    if let Some(n) = mem.dimms_populated.filter(|n| *n > 0) {
        let slots = mem
            .dimm_slots
            .map(|s| format!(" of {s} slots"))
            .unwrap_or_default();
        let mut text = format!(
            "{n} populated{slots}, {} at {} MT/s, {} bits wide, {} channel(s)",
            opt(&mem.memory_type),
            opt(&mem.speed_mts),
            opt(&mem.data_width_bits),
            opt(&mem.channels)
        );
        if let Some(src) = &mem.channels_source {
            let _ = write!(text, "\nchannels: {src}");
        }
        for d in &mem.dimms {
            let _ = write!(
                text,
                "\n{}: {} {} {} MT/s (rated {}) {}",
                d.locator,
                d.size_bytes
                    .map(|s| fmt_bytes(s as f64))
                    .unwrap_or_else(|| "?".into()),
                d.kind.as_deref().unwrap_or("?"),
                opt(&d.configured_speed_mts.or(d.speed_mts)),
                opt(&d.speed_mts),
                d.part_number.as_deref().unwrap_or("")
            );
        }
        o.row("DIMMs", text);
    } else {
        o.row("DIMMs", "unknown");
    }
    o.row(
        "peak bandwidth",
        match mem.peak_bandwidth_bytes_per_s {
            Some(_) => mem.peak_bandwidth_note.clone(),
            None => format!("unknown: {}", mem.peak_bandwidth_note),
        },
    );
}

fn storage(o: &mut Out, m: &Machine) {
    o.section("Storage");
    if m.storage.disks.is_empty() {
        o.row("disks", "none found in /sys/block");
    }
    for d in &m.storage.disks {
        let mut parts = vec![d
            .size_bytes
            .map(|s| fmt_bytes(s as f64))
            .unwrap_or_else(|| "size ?".into())];
        if let Some(model) = &d.model {
            parts.push(match &d.vendor {
                Some(v) => format!("{v} {model}"),
                None => model.clone(),
            });
        }
        let class = d.class();
        let virtual_disk = m.virtualization.is_vm
            || matches!(class.kind, DiskKind::Virtual | DiskKind::NetworkBlock);
        parts.push(match d.rotational {
            Some(true) if virtual_disk => "rotational flag set (virtual disk: unreliable)".into(),
            Some(true) => "rotational".into(),
            Some(false) => "non-rotational".into(),
            None => "rotational ?".into(),
        });
        if let Some(s) = &d.scheduler {
            parts.push(format!("scheduler {s}"));
        }
        if let Some(b) = d.logical_block_bytes {
            parts.push(format!("{b} B blocks"));
        }
        if let Some(x) = &d.driver {
            parts.push(x.clone());
        }
        if let Some(b) = &d.bus {
            parts.push(format!("{b} bus"));
        }
        if let Some(l) = &d.layer {
            let members: Vec<String> = d
                .members
                .iter()
                .map(|m| match &m.model {
                    Some(model) => format!("{} ({model})", m.name),
                    None => m.name.clone(),
                })
                .collect();
            parts.push(format!("{l} over {}", members.join(", ")));
        }
        o.row(
            &d.name,
            format!(
                "{}\nmodelled as {}: {}",
                parts.join(", "),
                class.kind.label(),
                class.why
            ),
        );
    }
    if let Some(f) = &m.storage.cwd_filesystem {
        o.row(
            "current dir",
            format!(
                "{} on {} (mounted at {}){}",
                f.fstype,
                f.source,
                f.mount_point,
                if f.in_memory {
                    ": in memory, not a disk"
                } else {
                    ""
                }
            ),
        );
    }
}

fn network(o: &mut Out, m: &Machine) {
    o.section("Network");
    if m.network.is_empty() {
        o.row("interfaces", "none found in /sys/class/net");
    }
    for n in &m.network {
        let mut parts = Vec::new();
        if n.loopback {
            parts.push("loopback".to_string());
        }
        // Loopback always reports "unknown"; saying so adds nothing.
        match n.operstate.as_deref() {
            Some("unknown") if n.loopback => {}
            Some(s) => parts.push(s.to_string()),
            None => parts.push("state ?".into()),
        }
        if !n.loopback {
            parts.push(match n.speed_mbit_s {
                Some(s) if s >= 1000 => format!("{} Gbit/s", s as f64 / 1000.0),
                Some(s) => format!("{s} Mbit/s"),
                None => "link speed unknown".into(),
            });
        }
        if let Some(mtu) = n.mtu {
            parts.push(format!("MTU {mtu}"));
        }
        match (&n.driver, n.virtual_device && !n.loopback) {
            (Some(d), _) => parts.push(d.clone()),
            (None, true) => parts.push("virtual".into()),
            _ => {}
        }
        o.row(&n.name, parts.join(", "));
    }
}

fn os(o: &mut Out, m: &Machine) {
    let os = &m.os;
    o.section("OS");
    o.row("distribution", opt(&os.distribution));
    let build = os
        .kernel_version
        .as_ref()
        .map(|v| format!(" ({v})"))
        .unwrap_or_default();
    o.row("kernel", format!("{}{build}, {}", os.kernel, os.arch));
    o.row("clock source", opt(&os.clocksource));
    if !os.boot_parameters.is_empty() {
        o.row("boot parameters", os.boot_parameters.join(" "));
    }
    o.row(
        "load average",
        m.load_average
            .map(|l| format!("{:.2} {:.2} {:.2} (1, 5, 15 min)", l[0], l[1], l[2]))
            .unwrap_or_else(|| "unknown".into()),
    );
    let cg = &m.cgroup;
    let cpu = match (cg.cpu_limit, cg.cpu_quota_us, cg.cpu_period_us) {
        (Some(l), Some(q), Some(p)) => format!("CPU quota {l:.2} CPUs ({q}/{p} us)"),
        _ => "no CPU quota".into(),
    };
    let mem = match cg.memory_limit_bytes {
        Some(l) => format!("memory limit {}", fmt_bytes(l as f64)),
        None => "no memory limit".into(),
    };
    o.row(
        "cgroup",
        match cg.version {
            Some(v) => format!("v{v}: {cpu}, {mem}"),
            None => "not found".into(),
        },
    );
}

fn virt(o: &mut Out, m: &Machine) {
    let v = &m.virtualization;
    o.section("Virtualisation");
    let kind = if v.is_vm {
        let sig = v
            .cpuid_signature
            .as_ref()
            .map(|s| format!(" (CPUID signature \"{s}\")"))
            .unwrap_or_default();
        format!(
            "virtual machine: {}{sig}",
            v.hypervisor.as_deref().unwrap_or("unknown hypervisor")
        )
    } else {
        "bare metal (no virtualisation fact: cpuinfo flag, CPUID, DMI, device tree, /sys/hypervisor)"
            .into()
    };
    o.row("machine", kind);
    if !v.vm_evidence.is_empty() {
        o.row("evidence", v.vm_evidence.join("; "));
    }
    if v.dmi_sys_vendor.is_some() || v.dmi_product_name.is_some() {
        o.row(
            "DMI",
            format!("{} {}", opt(&v.dmi_sys_vendor), opt(&v.dmi_product_name)),
        );
    }
    if let Some(c) = &v.container {
        o.row("container", c);
    }
    if let Some(d) = &v.detect_virt {
        o.row("detect-virt", d);
    }
    o.row(
        "steal",
        match (&v.steal_during_run, v.steal_ticks_at_gather) {
            (Some(r), _) => format!(
                "{:.2}% of CPU time during the run ({:.2} CPU-s in {:.1} s)",
                r.steal_fraction * 100.0,
                r.steal_seconds,
                r.wall_seconds
            ),
            (None, Some(t)) => format!("{t} ticks since boot (measured per run by `osmeter run`)"),
            (None, None) => "not reported by this kernel".into(),
        },
    );
}
