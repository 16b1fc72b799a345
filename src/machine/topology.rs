//! CPU topology: packages, cores, SMT siblings, last-level-cache groups, NUMA nodes and
//! core kinds, the CPU single-threaded work runs on, and a partner CPU per class.
//!
//! Linux: sysfs (cpuN/topology, cpuN/cache, node/nodeN/cpulist, cpu_core/cpu_atom).
//! macOS: sysctl values (hw.perflevelN.*), parsed by `from_sysctl` from any lookup.

use super::facts::FactRoot;
use super::{format_list, parse_list};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const SYS_CPU: &str = "/sys/devices/system/cpu";

/// One logical CPU's place in the machine.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CpuPlace {
    pub cpu: usize,
    /// The kernel's physical package (socket) id.
    pub package: Option<u32>,
    /// A machine-wide core number (the kernel's core_id repeats across packages).
    pub core: Option<usize>,
    pub node: Option<usize>,
    /// A machine-wide number of the last-level-cache group this CPU belongs to.
    pub llc: Option<usize>,
    /// "performance" or "efficiency" on CPUs with two kinds of core, else null.
    pub kind: Option<String>,
    /// The other hardware threads of the same core (SMT siblings), without this CPU.
    pub siblings: Vec<usize>,
    /// cpufreq cpuinfo_max_freq, MHz, where the kernel has cpufreq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mhz: Option<f64>,
}

/// A CPU to pair with the chosen one for cross-CPU figures, per class.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Partners {
    /// Another hardware thread of the chosen CPU's core.
    pub smt_sibling: Option<usize>,
    /// A CPU of a different core sharing the chosen CPU's last-level cache (and its NUMA
    /// node, where the node is known).
    pub same_llc: Option<usize>,
    /// A CPU sharing the chosen CPU's last-level cache on another NUMA node: sub-NUMA
    /// clustering (SNC, NPS) splits one cache's socket into nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_node: Option<usize>,
    /// A CPU in the same package behind another last-level cache.
    pub other_llc: Option<usize>,
    /// A CPU in another package.
    pub other_package: Option<usize>,
}

/// The classes of `Partners`, for experiments that pick a partner per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartnerClass {
    SmtSibling,
    SameLlc,
    OtherNode,
    OtherLlc,
    OtherPackage,
}

impl PartnerClass {
    pub const ALL: [PartnerClass; 5] = [
        PartnerClass::SmtSibling,
        PartnerClass::SameLlc,
        PartnerClass::OtherNode,
        PartnerClass::OtherLlc,
        PartnerClass::OtherPackage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PartnerClass::SmtSibling => "smt_sibling",
            PartnerClass::SameLlc => "same_llc",
            PartnerClass::OtherNode => "other_node",
            PartnerClass::OtherLlc => "other_llc",
            PartnerClass::OtherPackage => "other_package",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Topology {
    /// Every online CPU, by number.
    pub cpus: Vec<CpuPlace>,
    pub packages: Option<usize>,
    pub cores: Option<usize>,
    pub llc_groups: Option<usize>,
    /// The cache level the LLC groups are made of (3 on most x86, 2 on many ARM parts).
    pub llc_level: Option<u32>,
    pub numa_nodes: Option<usize>,
    /// CPUs that may run this process (Cpus_allowed_list in a snapshot).
    pub allowed: Vec<usize>,
    /// Where single-threaded work runs.
    pub chosen_cpu: Option<usize>,
    /// Why that CPU, step by step.
    pub chosen_reason: String,
    /// Partners of the chosen CPU.
    pub partners: Partners,
    /// Where the topology was read: "sysfs", "sysctl" or "cpuinfo" (a partial picture).
    pub source: String,
}

/// What the source says about one CPU before numbering cores and LLC groups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawCpu {
    pub cpu: usize,
    pub package: Option<u32>,
    /// Identifies the core within the machine (its thread list, or package:core_id).
    pub core_key: Option<String>,
    pub siblings: Vec<usize>,
    /// Identifies the LLC instance: (level, shared CPU list).
    pub llc_key: Option<(u32, String)>,
    pub node: Option<usize>,
    pub kind: Option<String>,
    pub max_mhz: Option<f64>,
}

/// Numbers cores and LLC groups in order of their first CPU, chooses the CPU and partners.
pub fn build(mut raw: Vec<RawCpu>, allowed: &[usize], source: &str) -> Topology {
    raw.sort_by_key(|r| r.cpu);
    raw.dedup_by_key(|r| r.cpu);
    let mut core_ids: BTreeMap<(Option<u32>, String), usize> = BTreeMap::new();
    let mut llc_ids: BTreeMap<(u32, String), usize> = BTreeMap::new();
    let mut packages = std::collections::BTreeSet::new();
    let mut nodes = std::collections::BTreeSet::new();
    let mut llc_level = None;
    let cpus: Vec<CpuPlace> = raw
        .iter()
        .map(|r| {
            let core = r.core_key.as_ref().map(|k| {
                let n = core_ids.len();
                *core_ids.entry((r.package, k.clone())).or_insert(n)
            });
            let llc = r.llc_key.as_ref().map(|k| {
                llc_level = llc_level.max(Some(k.0));
                let n = llc_ids.len();
                *llc_ids.entry(k.clone()).or_insert(n)
            });
            if let Some(p) = r.package {
                packages.insert(p);
            }
            if let Some(n) = r.node {
                nodes.insert(n);
            }
            CpuPlace {
                cpu: r.cpu,
                package: r.package,
                core,
                node: r.node,
                llc,
                kind: r.kind.clone(),
                siblings: r.siblings.iter().copied().filter(|&s| s != r.cpu).collect(),
                max_mhz: r.max_mhz,
            }
        })
        .collect();
    let complete = |f: &dyn Fn(&CpuPlace) -> bool| !cpus.is_empty() && cpus.iter().all(f);
    let mut t = Topology {
        packages: complete(&|c| c.package.is_some()).then_some(packages.len()),
        cores: complete(&|c| c.core.is_some()).then_some(core_ids.len()),
        llc_groups: complete(&|c| c.llc.is_some()).then_some(llc_ids.len()),
        llc_level,
        numa_nodes: (!nodes.is_empty()).then_some(nodes.len()),
        allowed: allowed.to_vec(),
        source: source.to_string(),
        cpus,
        ..Default::default()
    };
    let (chosen, why) = choose(&t);
    t.chosen_cpu = chosen;
    t.chosen_reason = why;
    t.partners = chosen.map(|c| partners(&t, c)).unwrap_or_default();
    t
}

/// The rule, in order: an allowed online CPU; not CPU 0 when another is allowed (CPU 0
/// takes most interrupts); a performance core when the CPU has two kinds; among those the
/// highest cpuinfo_max_freq when known (the favoured cores); not a thread of CPU 0's core
/// when another remains; then the lowest number.
fn choose(t: &Topology) -> (Option<usize>, String) {
    choose_among(t, &t.allowed, None)
}

/// `choose`'s rule among `allowed`, limited to cores of `kind` when given.
fn choose_among(t: &Topology, allowed: &[usize], kind: Option<&str>) -> (Option<usize>, String) {
    let mut cand: Vec<&CpuPlace> = t
        .cpus
        .iter()
        .filter(|c| allowed.is_empty() || allowed.contains(&c.cpu))
        .filter(|c| kind.is_none() || c.kind.as_deref() == kind)
        .collect();
    if cand.is_empty() && kind.is_some() {
        return (None, String::new());
    }
    if cand.is_empty() {
        // No topology: the allowed list alone.
        let pick = allowed
            .iter()
            .copied()
            .find(|&c| c != 0)
            .or(t.allowed.first().copied());
        return (
            pick,
            pick.map(|_| "the first allowed CPU other than 0 (no topology known)".into())
                .unwrap_or_default(),
        );
    }
    let mut why = vec![match kind {
        Some(k) => format!("{} allowed on {k} cores", plural(cand.len(), "CPU")),
        None => format!("{} allowed", plural(cand.len(), "CPU")),
    }];
    if cand.len() > 1 && cand.iter().any(|c| c.cpu == 0) {
        cand.retain(|c| c.cpu != 0);
        why.push("not CPU 0 (it takes most interrupts)".into());
    }
    let perf: Vec<&CpuPlace> = cand
        .iter()
        .copied()
        .filter(|c| c.kind.as_deref() == Some("performance"))
        .collect();
    if !perf.is_empty() && perf.len() < cand.len() {
        why.push(format!(
            "{} on performance cores",
            plural(perf.len(), "CPU")
        ));
        cand = perf;
    }
    let top = cand
        .iter()
        .filter_map(|c| c.max_mhz)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    if let Some(top) = top {
        let fast: Vec<&CpuPlace> = cand
            .iter()
            .copied()
            .filter(|c| c.max_mhz.is_some_and(|m| m >= top))
            .collect();
        if fast.len() < cand.len() && !fast.is_empty() {
            why.push(format!(
                "{} at the highest maximum clock ({top:.0} MHz)",
                plural(fast.len(), "CPU")
            ));
            cand = fast;
        }
    }
    let zero_core = t.cpus.iter().find(|c| c.cpu == 0).and_then(|c| c.core);
    if zero_core.is_some() {
        let away: Vec<&CpuPlace> = cand
            .iter()
            .copied()
            .filter(|c| c.core != zero_core)
            .collect();
        if !away.is_empty() && away.len() < cand.len() {
            why.push("not on CPU 0's core (its SMT sibling shares the core)".into());
            cand = away;
        }
    }
    let pick = cand.first().map(|c| c.cpu);
    why.push("the lowest-numbered of those".into());
    (pick, why.join(", then "))
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Partners of `chosen`: allowed CPUs; the same kind of core first, then away from CPU 0's
/// core, then the first thread of a core, then the lowest number.
fn partners(t: &Topology, chosen: usize) -> Partners {
    let Some(me) = t.cpus.iter().find(|c| c.cpu == chosen) else {
        return Partners::default();
    };
    let allowed =
        |c: &&CpuPlace| c.cpu != chosen && (t.allowed.is_empty() || t.allowed.contains(&c.cpu));
    let best = |pred: &dyn Fn(&CpuPlace) -> bool| -> Option<usize> {
        let mut v: Vec<&CpuPlace> = t.cpus.iter().filter(allowed).filter(|c| pred(c)).collect();
        // Same kind first, then the first thread of its core, then the lowest number.
        v.sort_by_key(|c| {
            let first_thread = c.siblings.iter().all(|&s| s > c.cpu);
            let zero_core = c.cpu == 0 || c.siblings.contains(&0);
            (c.kind != me.kind, zero_core, !first_thread, c.cpu)
        });
        v.first().map(|c| c.cpu)
    };
    let other_core = |c: &CpuPlace| c.core.is_some() && c.core != me.core;
    Partners {
        smt_sibling: best(&|c| me.siblings.contains(&c.cpu)),
        same_llc: me
            .llc
            .and_then(|l| best(&|c| c.llc == Some(l) && other_core(c) && !other_node(me, c))),
        other_node: me
            .llc
            .and_then(|l| best(&|c| c.llc == Some(l) && other_core(c) && other_node(me, c))),
        other_llc: match (me.llc, me.package) {
            (Some(l), Some(p)) => best(&|c| c.package == Some(p) && c.llc.is_some_and(|x| x != l)),
            _ => None,
        },
        other_package: me
            .package
            .and_then(|p| best(&|c| c.package.is_some_and(|x| x != p))),
    }
}

/// Whether two CPUs are on different NUMA nodes, both known.
fn other_node(a: &CpuPlace, b: &CpuPlace) -> bool {
    matches!((a.node, b.node), (Some(x), Some(y)) if x != y)
}

impl Topology {
    /// Nothing described: results written before the topology was (schema 1 files from
    /// before it) read back as this, and it is written back as absent.
    pub fn is_unknown(&self) -> bool {
        self.cpus.is_empty() && self.source.is_empty()
    }

    /// The CPU to pin single-threaded work to, among `allowed`: the requested one (an
    /// error message when it is not allowed), else the chosen one (a performance core,
    /// not CPU 0's core when another is allowed), else the last allowed CPU.
    pub fn choose_cpu(&self, requested: Option<usize>, allowed: &[usize]) -> Result<usize, String> {
        match requested {
            Some(c) if allowed.contains(&c) => Ok(c),
            Some(c) => Err(format!(
                "--cpu {c}: not a CPU this process may use (allowed: {})",
                allowed
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            None => Ok(self
                .chosen_cpu
                .filter(|c| allowed.contains(c))
                .unwrap_or(*allowed.last().unwrap_or(&0))),
        }
    }

    /// Makes `cpu` the chosen CPU (e.g. `--cpu`), with partners relative to it.
    pub fn choose(&mut self, cpu: usize, why: &str) {
        self.chosen_cpu = Some(cpu);
        self.chosen_reason = why.to_string();
        self.partners = partners(self, cpu);
    }

    /// The partner CPU of one class, if the machine has one.
    pub fn partner(&self, class: PartnerClass) -> Option<usize> {
        match class {
            PartnerClass::SmtSibling => self.partners.smt_sibling,
            PartnerClass::SameLlc => self.partners.same_llc,
            PartnerClass::OtherNode => self.partners.other_node,
            PartnerClass::OtherLlc => self.partners.other_llc,
            PartnerClass::OtherPackage => self.partners.other_package,
        }
    }

    pub fn place(&self, cpu: usize) -> Option<&CpuPlace> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// Any hybrid layout (performance and efficiency cores).
    pub fn hybrid(&self) -> bool {
        self.cpus
            .iter()
            .any(|c| c.kind.as_deref() == Some("efficiency"))
            && self
                .cpus
                .iter()
                .any(|c| c.kind.as_deref() == Some("performance"))
    }

    /// One line: packages, cores, threads, LLC groups, nodes, kinds.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let n = |v: Option<usize>, what: &str| v.map(|v| plural(v, what));
        parts.extend(n(self.packages, "package"));
        parts.extend(n(self.cores, "core"));
        parts.push(plural(self.cpus.len(), "CPU"));
        if let Some(g) = self.llc_groups {
            parts.push(format!(
                "{} (L{})",
                plural(g, "last-level cache group"),
                self.llc_level.unwrap_or(0)
            ));
        }
        parts.extend(n(self.numa_nodes, "NUMA node"));
        if self.hybrid() {
            let of = |k: &str| {
                let v: Vec<usize> = self
                    .cpus
                    .iter()
                    .filter(|c| c.kind.as_deref() == Some(k))
                    .map(|c| c.cpu)
                    .collect();
                format_list(&v)
            };
            parts.push(format!(
                "performance CPUs {}, efficiency CPUs {}",
                of("performance"),
                of("efficiency")
            ));
        }
        format!("{} (from {})", parts.join(", "), self.source)
    }

    /// The partners as "smt_sibling 17, same_llc 2, other_llc none, ...".
    pub fn partners_line(&self) -> String {
        PartnerClass::ALL
            .iter()
            .map(|&c| match self.partner(c) {
                Some(p) => format!("{} {p}", c.name()),
                None => format!("{} none", c.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The highest-level data or unified cache of one CPU: (level, shared CPU list).
fn llc_of(root: &FactRoot, cpu: usize) -> Option<(u32, String)> {
    let dir = format!("{SYS_CPU}/cpu{cpu}/cache");
    root.list(&dir)
        .iter()
        .filter(|n| n.starts_with("index"))
        .filter_map(|n| {
            let p = format!("{dir}/{n}");
            if root.read_trim(format!("{p}/type")).as_deref() == Some("Instruction") {
                return None;
            }
            let level = root.read_u64(format!("{p}/level"))? as u32;
            // A level without a size is one the firmware did not describe (arm64 with no
            // cache nodes in the device tree or PPTT): the kernel then lists each CPU
            // alone in shared_cpu_list, which says nothing about the sharing.
            root.read_trim(format!("{p}/size")).filter(|s| s != "0K")?;
            let shared = parse_list(&root.read_trim(format!("{p}/shared_cpu_list"))?);
            (!shared.is_empty()).then(|| (level, format_list(&shared)))
        })
        .max_by_key(|(l, _)| *l)
}

/// NUMA node of each CPU from /sys/devices/system/node/nodeN/cpulist.
fn nodes(root: &FactRoot) -> BTreeMap<usize, usize> {
    let base = "/sys/devices/system/node";
    let mut out = BTreeMap::new();
    for name in root.list(base) {
        let Some(n) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if let Some(l) = root.read(format!("{base}/{name}/cpulist")) {
            for c in parse_list(&l) {
                out.insert(c, n);
            }
        }
    }
    out
}

/// Core kind per CPU: the hybrid PMU CPU lists (Intel), else differing cpu_capacity (ARM
/// big.LITTLE: the largest capacity is a performance core).
fn kinds(root: &FactRoot, online: &[usize]) -> BTreeMap<usize, String> {
    let mut out = BTreeMap::new();
    for (file, kind) in [
        ("/sys/devices/cpu_core/cpus", "performance"),
        ("/sys/devices/cpu_atom/cpus", "efficiency"),
    ] {
        if let Some(l) = root.read(file) {
            for c in parse_list(&l) {
                out.insert(c, kind.to_string());
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    let caps: BTreeMap<usize, u64> = online
        .iter()
        .filter_map(|&c| Some((c, root.read_u64(format!("{SYS_CPU}/cpu{c}/cpu_capacity"))?)))
        .collect();
    let max = caps.values().copied().max();
    let min = caps.values().copied().min();
    if let (Some(max), Some(min)) = (max, min) {
        if max > min && caps.len() == online.len() {
            for (c, v) in caps {
                let k = if v == max {
                    "performance"
                } else {
                    "efficiency"
                };
                out.insert(c, k.to_string());
            }
        }
    }
    out
}

/// The topology from sysfs under `root`; `online` are the CPUs to describe. Where sysfs
/// has no topology directory, /proc/cpuinfo's (processor, physical id, core id) stand in.
pub fn from_sysfs(
    root: &FactRoot,
    online: &[usize],
    allowed: &[usize],
    cpuinfo: &[(usize, u32, u32)],
) -> Topology {
    let nodes = nodes(root);
    let kinds = kinds(root, online);
    let raw: Vec<RawCpu> = online
        .iter()
        .map(|&c| {
            let t = format!("{SYS_CPU}/cpu{c}/topology");
            // -1 (no package) fails to parse as u64 and stays unknown.
            let package = root
                .read_u64(format!("{t}/physical_package_id"))
                .map(|p| p as u32);
            let threads = root
                .read_trim(format!("{t}/thread_siblings_list"))
                .or_else(|| root.read_trim(format!("{t}/core_cpus_list")))
                .map(|s| parse_list(&s))
                .filter(|v| !v.is_empty());
            let core_key = match (&threads, root.read_u64(format!("{t}/core_id"))) {
                (Some(th), _) => Some(format_list(th)),
                (None, Some(id)) => Some(format!("id{id}")),
                _ => None,
            };
            RawCpu {
                cpu: c,
                package,
                core_key,
                siblings: threads.unwrap_or_default(),
                llc_key: llc_of(root, c),
                node: nodes.get(&c).copied(),
                kind: kinds.get(&c).cloned(),
                max_mhz: root
                    .read_u64(format!("{SYS_CPU}/cpu{c}/cpufreq/cpuinfo_max_freq"))
                    .map(|k| k as f64 / 1e3),
            }
        })
        .collect();
    let any_sysfs = raw
        .iter()
        .any(|r| r.package.is_some() || r.core_key.is_some());
    let mut raw = raw;
    let mut source = if any_sysfs { "sysfs" } else { "CPU list only" };
    if !any_sysfs && !cpuinfo.is_empty() {
        for r in &mut raw {
            let Some(&(_, pkg, core)) = cpuinfo.iter().find(|t| t.0 == r.cpu) else {
                continue;
            };
            r.package = Some(pkg);
            r.core_key = Some(format!("id{core}"));
            r.siblings = cpuinfo
                .iter()
                .filter(|t| t.1 == pkg && t.2 == core)
                .map(|t| t.0)
                .collect();
        }
        source = "/proc/cpuinfo (no sysfs topology)";
    }
    build(raw, allowed, source)
}

/// The topology of a Mac from its sysctl values (`lookup("hw.packages")` -> "1").
///
/// macOS numbers no CPUs for user space and cannot pin, so numbers here label classes:
/// on Apple silicon the efficiency levels come first (perflevel N-1 .. 0, as the kernel
/// brings clusters up), each level's L2 cluster is its last-level cache group; an Intel
/// Mac has one LLC per package and SMT siblings numbered next to each other.
pub fn from_sysctl(lookup: &dyn Fn(&str) -> Option<String>) -> Topology {
    let num = |k: &str| lookup(k).and_then(|v| v.trim().parse::<usize>().ok());
    let packages = num("hw.packages").unwrap_or(1).max(1);
    let mut raw = Vec::new();
    let levels = num("hw.nperflevels").unwrap_or(0);
    if levels >= 1 {
        let mut cpu = 0;
        let mut core = 0;
        let mut llc = 0;
        for lvl in (0..levels).rev() {
            let p = |k: &str| num(&format!("hw.perflevel{lvl}.{k}"));
            let (Some(phys), Some(logical)) = (p("physicalcpu"), p("logicalcpu")) else {
                continue;
            };
            let name = lookup(&format!("hw.perflevel{lvl}.name")).unwrap_or_default();
            let kind = if levels < 2 {
                None
            } else if lvl == 0 || name.eq_ignore_ascii_case("performance") {
                Some("performance".to_string())
            } else {
                Some("efficiency".to_string())
            };
            // The last level: an L3 where the level has one (Intel Macs report one
            // perflevel since macOS 12; their LLC is the L3), else the L2 cluster.
            let l3 = p("l3cachesize")
                .or_else(|| (levels == 1).then(|| num("hw.l3cachesize")).flatten())
                .is_some_and(|v| v > 0);
            let (llc_level, per_llc) = if l3 {
                (3, p("cpusperl3").unwrap_or(logical).max(1))
            } else {
                (2, p("cpusperl2").unwrap_or(logical).max(1))
            };
            let tpc = (logical / phys.max(1)).max(1);
            for i in 0..logical {
                let first = cpu - i % tpc;
                raw.push(RawCpu {
                    cpu,
                    package: Some(0),
                    core_key: Some(format!("c{}", core + i / tpc)),
                    siblings: (first..first + tpc).collect(),
                    llc_key: Some((llc_level, format!("l{}", llc + i / per_llc))),
                    node: Some(0),
                    kind: kind.clone(),
                    max_mhz: None,
                });
                cpu += 1;
            }
            core += phys;
            llc += logical.div_ceil(per_llc);
        }
    } else if let (Some(phys), Some(logical)) = (num("hw.physicalcpu"), num("hw.logicalcpu")) {
        let tpc = (logical / phys.max(1)).max(1);
        let per_pkg = (logical / packages).max(1);
        let level = if num("hw.l3cachesize").is_some_and(|v| v > 0) {
            3
        } else {
            2
        };
        for cpu in 0..logical {
            let first = cpu - cpu % tpc;
            let pkg = (cpu / per_pkg) as u32;
            raw.push(RawCpu {
                cpu,
                package: Some(pkg),
                core_key: Some(format!("c{}", cpu / tpc)),
                siblings: (first..first + tpc).collect(),
                llc_key: Some((level, format!("p{pkg}"))),
                node: Some(0),
                kind: None,
                max_mhz: None,
            });
        }
    }
    let all: Vec<usize> = raw.iter().map(|r| r.cpu).collect();
    build(raw, &all, "sysctl")
}

/// One cross-CPU figure to measure (docs/METHODOLOGY.md, "Cross-CPU figures"): the
/// partner CPU, its class (None where the topology is unknown), and the metric-name suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossPlan {
    pub class: Option<PartnerClass>,
    pub cpu: usize,
    /// "" for the figure that keeps the historical name, else "_" + the class name.
    pub suffix: String,
}

impl CrossPlan {
    /// The class as written in descriptions ("same_llc", or "unknown class").
    pub fn class_name(&self) -> &'static str {
        self.class.map_or("unknown class", |c| c.name())
    }
}

impl Topology {
    /// Cross-CPU plans for work on `main`: one per partner class the machine has, nearest
    /// first. The nearest class on another core (else the only class) keeps the historical
    /// unsuffixed name; the others are suffixed with their class. Without topology, the
    /// first other allowed CPU, unclassed.
    pub fn cross_cpu_plans(&self, main: usize, allowed: &[usize]) -> Vec<CrossPlan> {
        let p = if self.chosen_cpu == Some(main) {
            self.partners
        } else {
            partners(self, main)
        };
        let ok = |c: &usize| *c != main && (allowed.is_empty() || allowed.contains(c));
        let found: Vec<(PartnerClass, usize)> = PartnerClass::ALL
            .iter()
            .filter_map(|&k| {
                let cpu = match k {
                    PartnerClass::SmtSibling => p.smt_sibling,
                    PartnerClass::SameLlc => p.same_llc,
                    PartnerClass::OtherNode => p.other_node,
                    PartnerClass::OtherLlc => p.other_llc,
                    PartnerClass::OtherPackage => p.other_package,
                };
                cpu.filter(ok).map(|c| (k, c))
            })
            .collect();
        if found.is_empty() {
            return allowed
                .iter()
                .copied()
                .find(|&c| c != main)
                .map(|cpu| CrossPlan {
                    class: None,
                    cpu,
                    suffix: String::new(),
                })
                .into_iter()
                .collect();
        }
        let named = found
            .iter()
            .position(|(k, _)| *k != PartnerClass::SmtSibling)
            .unwrap_or(0);
        found
            .into_iter()
            .enumerate()
            .map(|(i, (k, cpu))| CrossPlan {
                class: Some(k),
                cpu,
                suffix: if i == named {
                    String::new()
                } else {
                    format!("_{}", k.name())
                },
            })
            .collect()
    }
}

/// Where figures per core kind run (docs/METHODOLOGY.md, "Core kinds"): one CPU of a
/// kind, and the suffix its metric names take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCpu {
    /// "performance" or "efficiency"; None on a CPU with one kind of core.
    pub kind: Option<String>,
    pub cpu: usize,
    /// "" for the run's own CPU's kind (today's names), else "_" + the kind.
    pub suffix: String,
    /// Why this CPU, step by step.
    pub reason: String,
}

impl Topology {
    /// The kinds of core among `allowed` CPUs, performance first.
    pub fn kinds_of(&self, allowed: &[usize]) -> Vec<String> {
        let mut v: Vec<String> = self
            .cpus
            .iter()
            .filter(|c| allowed.is_empty() || allowed.contains(&c.cpu))
            .filter_map(|c| c.kind.clone())
            .collect();
        v.sort_by_key(|k| (k != "performance", k.clone()));
        v.dedup();
        v
    }

    /// One CPU per kind of core for per-kind figures: `main` (the run's CPU) first, with
    /// its kind and today's names; then, for each other kind with an allowed CPU, the CPU
    /// `choose`'s rule picks among that kind's (not CPU 0, the highest maximum clock, not
    /// CPU 0's core, the lowest number), its metrics suffixed with "_" + the kind. One
    /// entry on a CPU with one kind of core (or where only one kind is allowed). A pure
    /// function of the topology.
    pub fn per_kind_cpus(&self, main: usize, allowed: &[usize]) -> Vec<KindCpu> {
        let main_kind = self.place(main).and_then(|p| p.kind.clone());
        let mut v = vec![KindCpu {
            kind: main_kind.clone(),
            cpu: main,
            suffix: String::new(),
            reason: "the run's CPU".into(),
        }];
        let Some(main_kind) = main_kind else {
            return v;
        };
        for k in self.kinds_of(allowed) {
            if k == main_kind {
                continue;
            }
            if let (Some(cpu), reason) = choose_among(self, allowed, Some(&k)) {
                v.push(KindCpu {
                    suffix: format!("_{k}"),
                    kind: Some(k),
                    cpu,
                    reason,
                });
            }
        }
        v
    }
}

/// Where a team of threads runs: the CPUs in order (thread k on `cpus[k]`) and what they
/// share, from `Topology::spread` (docs/METHODOLOGY.md, "Placing threads").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spread {
    pub cpus: Vec<usize>,
    /// (cpu, earlier cpu of the same core): threads that share a core with an earlier one.
    pub smt_shared: Vec<(usize, usize)>,
    /// NUMA nodes the threads run on (empty where nodes are unknown).
    pub nodes: Vec<usize>,
}

impl Spread {
    /// "CPUs 1, 17: 17 is an SMT sibling of 1" style, for notes; None when no two threads
    /// share a core.
    pub fn shared_note(&self) -> Option<String> {
        if self.smt_shared.is_empty() {
            return None;
        }
        let pairs: Vec<String> = self
            .smt_shared
            .iter()
            .map(|(c, e)| format!("{c} with {e}"))
            .collect();
        Some(format!(
            "{} of {} threads share a physical core with another thread (SMT siblings: CPU {}): every core already had one",
            self.smt_shared.len(),
            self.cpus.len(),
            pairs.join(", CPU ")
        ))
    }
}

impl Topology {
    /// `n` CPUs of `allowed` for a team of threads (the placement rule of
    /// docs/METHODOLOGY.md, "Placing threads"), in the order threads take them:
    ///
    /// 1. one thread per physical core before any SMT sibling: siblings only once every
    ///    allowed core has a thread (and `spread_of` reports them);
    /// 2. cores node by node: the chosen CPU's node first (its cores, then the next
    ///    node's), so k threads within one node's core count share one node's memory;
    /// 3. within a node: the chosen CPU first, performance cores before efficiency
    ///    cores, CPU 0's core last, then by number.
    ///
    /// Fewer than `n` when fewer CPUs are allowed. Without topology: the chosen CPU, then
    /// the allowed list in order. A pure function of the topology.
    pub fn spread(&self, allowed: &[usize], n: usize) -> Vec<usize> {
        self.spread_order(allowed).into_iter().take(n).collect()
    }

    /// `spread` with what the chosen CPUs share.
    pub fn spread_of(&self, allowed: &[usize], n: usize) -> Spread {
        self.describe_cpus(&self.spread(allowed, n))
    }

    /// What a given list of CPUs shares: SMT siblings and nodes.
    pub fn describe_cpus(&self, cpus: &[usize]) -> Spread {
        let mut smt_shared = Vec::new();
        let mut nodes = Vec::new();
        for (i, &c) in cpus.iter().enumerate() {
            let Some(p) = self.place(c) else { continue };
            if let Some(&e) = cpus[..i]
                .iter()
                .find(|&&e| p.core.is_some() && self.place(e).is_some_and(|q| q.core == p.core))
            {
                smt_shared.push((c, e));
            }
            if let Some(nd) = p.node {
                if !nodes.contains(&nd) {
                    nodes.push(nd);
                }
            }
        }
        Spread {
            cpus: cpus.to_vec(),
            smt_shared,
            nodes,
        }
    }

    /// NUMA nodes with at least one allowed CPU, the chosen CPU's first, each with its
    /// allowed CPUs in `spread` order.
    pub fn nodes_of(&self, allowed: &[usize]) -> Vec<(usize, Vec<usize>)> {
        let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
        for c in self.spread_order(allowed) {
            let Some(nd) = self.place(c).and_then(|p| p.node) else {
                continue;
            };
            match out.iter_mut().find(|(n, _)| *n == nd) {
                Some((_, v)) => v.push(c),
                None => out.push((nd, vec![c])),
            }
        }
        out
    }

    /// One CPU per NUMA node (the first of each node in `spread` order): where per-node
    /// figures run. One entry on a one-node machine, none where nodes are unknown.
    pub fn one_per_node(&self, allowed: &[usize]) -> Vec<usize> {
        self.nodes_of(allowed)
            .into_iter()
            .map(|(_, v)| v[0])
            .collect()
    }

    fn spread_order(&self, allowed: &[usize]) -> Vec<usize> {
        let ok = |c: usize| allowed.is_empty() || allowed.contains(&c);
        let first = self.chosen_cpu.filter(|&c| ok(c));
        let mut known: Vec<&CpuPlace> = self.cpus.iter().filter(|c| ok(c.cpu)).collect();
        if known.is_empty() {
            let mut v: Vec<usize> = first.into_iter().collect();
            v.extend(allowed.iter().copied().filter(|&c| Some(c) != first));
            return v;
        }
        let first_node = first
            .and_then(|f| self.place(f))
            .and_then(|p| p.node)
            .or(known[0].node);
        let zero_core = self.place(0).and_then(|p| p.core);
        known.sort_by_key(|c| {
            (
                c.node != first_node,
                c.node,
                Some(c.cpu) != first,
                c.kind.as_deref() == Some("efficiency"),
                c.core.is_some() && c.core == zero_core,
                c.cpu,
            )
        });
        // First pass: one thread per core; second: the rest, in the same order.
        let mut seen_cores = Vec::new();
        let (mut lead, mut rest) = (Vec::new(), Vec::new());
        for c in known {
            match c.core {
                Some(k) if seen_cores.contains(&k) => rest.push(c.cpu),
                Some(k) => {
                    seen_cores.push(k);
                    lead.push(c.cpu)
                }
                None => lead.push(c.cpu),
            }
        }
        lead.extend(rest);
        // Allowed CPUs the topology does not list, last.
        let extra: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|c| !lead.contains(c))
            .collect();
        lead.extend(extra);
        lead
    }
}

/// Pairs of CPUs for pairwise figures (cpu.core-to-core), and a team's placement.
impl Topology {
    /// The class of the pair (a, b), seen symmetrically: the same core (smt_sibling), the
    /// same last-level cache and node (same_llc), the same cache on another node
    /// (other_node: sub-NUMA clustering), the same package behind another cache
    /// (other_llc), or another package. None where the topology does not say.
    pub fn pair_class(&self, a: usize, b: usize) -> Option<PartnerClass> {
        let (p, q) = (self.place(a)?, self.place(b)?);
        if p.core.is_some() && p.core == q.core {
            return Some(PartnerClass::SmtSibling);
        }
        if p.llc.is_some() && p.llc == q.llc {
            return Some(if other_node(p, q) {
                PartnerClass::OtherNode
            } else {
                PartnerClass::SameLlc
            });
        }
        match (p.package, q.package) {
            // Another cache only where both caches are known: an unknown LLC (no cache
            // in sysfs, /sys hidden) leaves a pair in one package unclassed.
            (Some(x), Some(y)) if x == y && p.llc.is_some() && q.llc.is_some() => {
                Some(PartnerClass::OtherLlc)
            }
            (Some(x), Some(y)) if x != y => Some(PartnerClass::OtherPackage),
            _ => None,
        }
    }

    /// Every unordered pair (a < b) of `allowed` CPUs with its class, classes nearest
    /// first, then by (a, b).
    pub fn pairs(&self, allowed: &[usize]) -> Vec<(usize, usize, Option<PartnerClass>)> {
        let mut cpus = allowed.to_vec();
        cpus.sort_unstable();
        cpus.dedup();
        let mut v = Vec::new();
        for (i, &a) in cpus.iter().enumerate() {
            for &b in &cpus[i + 1..] {
                v.push((a, b, self.pair_class(a, b)));
            }
        }
        let rank = |c: &Option<PartnerClass>| {
            c.map_or(PartnerClass::ALL.len(), |c| {
                PartnerClass::ALL.iter().position(|&k| k == c).unwrap_or(0)
            })
        };
        v.sort_by_key(|&(a, b, c)| (rank(&c), a, b));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::facts::parse_sysctl_lines;

    #[test]
    fn the_cpu_to_pin_is_requested_chosen_or_the_last_allowed() {
        let mut t = Topology::default();
        assert_eq!(t.choose_cpu(None, &[0, 1, 2]), Ok(2));
        t.chosen_cpu = Some(1);
        assert_eq!(t.choose_cpu(None, &[0, 1, 2]), Ok(1));
        assert_eq!(t.choose_cpu(None, &[0, 2]), Ok(2), "chosen but not allowed");
        assert_eq!(t.choose_cpu(Some(0), &[0, 1, 2]), Ok(0));
        let e = t.choose_cpu(Some(5), &[0, 1]).unwrap_err();
        assert!(e.contains("--cpu 5") && e.contains("allowed: 0,1"), "{e}");
    }

    fn raw(cpu: usize, pkg: u32, threads: &[usize], llc: &str) -> RawCpu {
        RawCpu {
            cpu,
            package: Some(pkg),
            core_key: Some(format_list(threads)),
            siblings: threads.to_vec(),
            llc_key: Some((3, llc.into())),
            node: Some(pkg as usize),
            ..Default::default()
        }
    }

    #[test]
    fn two_sockets_with_smt() {
        // 2 packages x 2 cores x 2 threads, siblings N and N+4.
        let mut v = Vec::new();
        for c in 0..8 {
            let core = c % 4;
            let pkg = (core / 2) as u32;
            v.push(raw(
                c,
                pkg,
                &[core, core + 4],
                if pkg == 0 { "a" } else { "b" },
            ));
        }
        let t = build(v, &(0..8).collect::<Vec<_>>(), "test");
        assert_eq!(
            (t.packages, t.cores, t.llc_groups, t.numa_nodes),
            (Some(2), Some(4), Some(2), Some(2))
        );
        assert_eq!(t.chosen_cpu, Some(1));
        assert_eq!(t.place(1).unwrap().siblings, vec![5]);
        assert_eq!(
            t.partners,
            Partners {
                smt_sibling: Some(5),
                same_llc: Some(0), // the only other core of package 0 is CPU 0's
                other_node: None,
                other_llc: None,
                other_package: Some(2),
            }
        );
        assert!(t.chosen_reason.contains("not CPU 0"), "{}", t.chosen_reason);
        assert!(
            t.chosen_reason.contains("CPU 0's core"),
            "{}",
            t.chosen_reason
        );
    }

    #[test]
    fn cpu_0_only_when_nothing_else_is_allowed() {
        // CPU 0 is the only allowed performance core: another allowed CPU still wins.
        let mut v: Vec<RawCpu> = (0..4).map(|c| raw(c, 0, &[c], "a")).collect();
        for r in &mut v {
            r.kind = Some(
                if r.cpu < 2 {
                    "performance"
                } else {
                    "efficiency"
                }
                .into(),
            );
        }
        let t = build(v.clone(), &[0, 3], "test");
        assert_eq!(t.chosen_cpu, Some(3));
        assert_eq!(t.partners.same_llc, Some(0));
        assert_eq!(build(v, &[0], "test").chosen_cpu, Some(0));
    }

    #[test]
    fn allowed_cpus_bound_the_choice() {
        let v: Vec<RawCpu> = (0..4).map(|c| raw(c, 0, &[c], "a")).collect();
        let t = build(v.clone(), &[0], "test");
        assert_eq!(t.chosen_cpu, Some(0));
        assert_eq!(t.partners, Partners::default());
        let t = build(v, &[0, 3], "test");
        assert_eq!(t.chosen_cpu, Some(3));
        assert_eq!(t.partners.same_llc, Some(0));
    }

    #[test]
    fn performance_cores_and_favoured_clock() {
        let mut v: Vec<RawCpu> = (0..6).map(|c| raw(c, 0, &[c], "a")).collect();
        for r in &mut v {
            r.kind = Some(
                if r.cpu < 4 {
                    "performance"
                } else {
                    "efficiency"
                }
                .into(),
            );
            r.max_mhz = Some(if r.cpu == 3 { 5000.0 } else { 4000.0 });
        }
        let t = build(v, &(0..6).collect::<Vec<_>>(), "test");
        assert!(t.hybrid());
        assert_eq!(t.chosen_cpu, Some(3));
        assert!(
            t.chosen_reason.contains("performance"),
            "{}",
            t.chosen_reason
        );
        // The same kind first, away from CPU 0.
        assert_eq!(t.partners.same_llc, Some(1));
    }

    #[test]
    fn nothing_known_still_chooses_from_the_allowed_list() {
        let t = build(vec![], &[0, 1], "none");
        assert_eq!(t.chosen_cpu, Some(1));
        assert_eq!(build(vec![], &[], "none").chosen_cpu, None);
    }

    #[test]
    fn apple_m1_pro() {
        let s = "hw.packages: 1\nhw.physicalcpu: 10\nhw.logicalcpu: 10\nhw.nperflevels: 2\n\
                 hw.perflevel0.physicalcpu: 8\nhw.perflevel0.logicalcpu: 8\n\
                 hw.perflevel0.cpusperl2: 4\nhw.perflevel0.l2cachesize: 12582912\n\
                 hw.perflevel0.name: Performance\nhw.perflevel1.physicalcpu: 2\n\
                 hw.perflevel1.logicalcpu: 2\nhw.perflevel1.cpusperl2: 2\n\
                 hw.perflevel1.l2cachesize: 4194304\nhw.perflevel1.name: Efficiency\n";
        let m = parse_sysctl_lines(s);
        let t = from_sysctl(&|k| m.get(k).cloned());
        assert_eq!(t.cpus.len(), 10);
        assert_eq!(
            (t.packages, t.cores, t.llc_groups),
            (Some(1), Some(10), Some(3))
        );
        assert!(t.hybrid());
        let kinds: Vec<&str> = t.cpus.iter().map(|c| c.kind.as_deref().unwrap()).collect();
        assert_eq!(&kinds[..2], ["efficiency", "efficiency"]);
        assert!(kinds[2..].iter().all(|k| *k == "performance"));
        let c = t.chosen_cpu.unwrap();
        assert_eq!(t.place(c).unwrap().kind.as_deref(), Some("performance"));
        assert_eq!(t.partners.smt_sibling, None);
        assert_eq!(t.partners.same_llc, Some(3));
        assert_eq!(t.partners.other_llc, Some(6)); // the other P cluster
        assert_eq!(t.partners.other_package, None);
    }

    #[test]
    fn intel_mac_with_smt() {
        let s = "hw.packages: 1\nhw.physicalcpu: 4\nhw.logicalcpu: 8\n\
                 hw.l3cachesize: 8388608\nmachdep.cpu.brand_string: Intel(R) Core(TM) i7\n";
        let m = parse_sysctl_lines(s);
        let t = from_sysctl(&|k| m.get(k).cloned());
        assert_eq!(
            (t.packages, t.cores, t.llc_groups, t.llc_level),
            (Some(1), Some(4), Some(1), Some(3))
        );
        assert!(!t.hybrid());
        assert_eq!(t.chosen_cpu, Some(2));
        assert_eq!(t.partners.smt_sibling, Some(3));
        assert_eq!(t.partners.same_llc, Some(4));
        assert!(t.cpus.iter().all(|c| c.kind.is_none()));
    }

    #[test]
    fn intel_mac_on_macos_12_groups_by_the_l3() {
        // macOS 12+ defines the perflevel sysctls on Intel too: one level.
        let s = "hw.packages: 1\nhw.physicalcpu: 2\nhw.logicalcpu: 4\nhw.nperflevels: 1\n\
                 hw.perflevel0.physicalcpu: 2\nhw.perflevel0.logicalcpu: 4\n\
                 hw.perflevel0.cpusperl2: 2\nhw.perflevel0.cpusperl3: 4\n\
                 hw.perflevel0.l2cachesize: 262144\nhw.perflevel0.l3cachesize: 4194304\n\
                 hw.perflevel0.name: Performance\nhw.l3cachesize: 4194304\n";
        let m = parse_sysctl_lines(s);
        let t = from_sysctl(&|k| m.get(k).cloned());
        assert_eq!(
            (t.packages, t.cores, t.llc_groups, t.llc_level),
            (Some(1), Some(2), Some(1), Some(3))
        );
        assert!(!t.hybrid());
        assert_eq!(t.chosen_cpu, Some(2));
        assert_eq!(t.partners.smt_sibling, Some(3));
        assert_eq!(t.partners.same_llc, Some(0));
        // Without cpusperl3 the whole level shares its L3.
        let m2 = parse_sysctl_lines(&s.replace("hw.perflevel0.cpusperl3: 4\n", ""));
        assert_eq!(from_sysctl(&|k| m2.get(k).cloned()).llc_groups, Some(1));
    }

    #[test]
    fn sysctl_without_values_is_empty() {
        let t = from_sysctl(&|_| None);
        assert!(t.cpus.is_empty());
        assert_eq!(t.chosen_cpu, None);
    }
}
