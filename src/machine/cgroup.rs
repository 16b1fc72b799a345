//! Container limits: the CPU quota and memory limit of this process's cgroup (v1 or v2).
//!
//! The process's cgroup comes from /proc/self/cgroup and the hierarchy's mount point from
//! /proc/self/mountinfo. A limit set on any ancestor applies too, so the effective limit
//! is the smallest found walking from the process's cgroup up to the mount point.

use super::facts::FactRoot;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Cgroup {
    /// 1 or 2: the hierarchy the CPU and memory controllers were found in.
    pub version: Option<u8>,
    /// The process's cgroup directories that were read.
    pub cpu_dir: Option<String>,
    pub memory_dir: Option<String>,
    /// The tightest CPU quota: quota microseconds per period microseconds.
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: Option<u64>,
    /// quota / period: how many CPUs' worth of time the cgroup may use.
    pub cpu_limit: Option<f64>,
    pub memory_limit_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    /// This process's cgroup as /proc/self/cgroup names it, when its files cannot be read
    /// (no cgroup file system mounted here, as in a container with /sys hidden): its
    /// limits are unknown, not absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<String>,
}

/// One line of /proc/self/cgroup: hierarchy id, controllers, path.
#[derive(Debug, Clone, PartialEq)]
pub struct Membership {
    pub id: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

/// A cgroup file system mount from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupMount {
    /// The cgroup path mounted (usually "/").
    pub root: String,
    pub mount_point: String,
    pub v2: bool,
    /// v1 controllers bound to this mount (super options).
    pub controllers: Vec<String>,
}

pub fn parse_proc_cgroup(s: &str) -> Vec<Membership> {
    s.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let id = it.next()?.parse().ok()?;
            let ctl = it.next()?;
            let path = it.next()?.to_string();
            Some(Membership {
                id,
                controllers: ctl
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path,
            })
        })
        .collect()
}

pub fn parse_cgroup_mounts(mountinfo: &str) -> Vec<CgroupMount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split_whitespace().collect();
            let post: Vec<&str> = post.split_whitespace().collect();
            let fstype = *post.first()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(CgroupMount {
                root: pre.get(3)?.to_string(),
                mount_point: pre.get(4)?.to_string(),
                v2: fstype == "cgroup2",
                controllers: post
                    .get(2)
                    .map(|o| o.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The directory of `path` inside a mount of the hierarchy whose root is `root`.
pub fn cgroup_dir(m: &CgroupMount, path: &str) -> PathBuf {
    let rel = path
        .strip_prefix(m.root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    Path::new(&m.mount_point).join(rel)
}

/// cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`; -1 means no quota.
pub fn parse_v1_quota(quota: &str, period: &str) -> Option<(u64, u64)> {
    let q: i64 = quota.trim().parse().ok()?;
    let p: u64 = period.trim().parse().ok()?;
    (q > 0 && p > 0).then_some((q as u64, p))
}

/// cgroup v2 `cpu.max`: "max 100000" (no quota) or "150000 100000".
pub fn parse_cpu_max(s: &str) -> Option<(u64, u64)> {
    let mut it = s.split_whitespace();
    let q: u64 = it.next()?.parse().ok()?; // "max" fails here: no quota
    let p: u64 = it.next().unwrap_or("100000").parse().ok()?;
    (q > 0 && p > 0).then_some((q, p))
}

/// A memory limit file (v1 `memory.limit_in_bytes`, v2 `memory.max`); `None` = unlimited.
pub fn parse_memory_limit(s: &str) -> Option<u64> {
    let v: u64 = s.trim().parse().ok()?;
    // v1 writes "unlimited" as the largest page-aligned i64 (9223372036854771712).
    (v < 1 << 62).then_some(v)
}

/// Walks from `leaf` up to `top` (inclusive), applying `f` to each directory.
fn walk_up(leaf: &Path, top: &Path, mut f: impl FnMut(&Path)) {
    let mut d = Some(leaf);
    while let Some(dir) = d {
        if !dir.starts_with(top) {
            break;
        }
        f(dir);
        d = dir.parent();
    }
}

fn tightest_cpu(root: &FactRoot, leaf: &Path, top: &Path, v2: bool) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    walk_up(leaf, top, |d| {
        let q = if v2 {
            root.read(d.join("cpu.max")).and_then(|s| parse_cpu_max(&s))
        } else {
            match (
                root.read(d.join("cpu.cfs_quota_us")),
                root.read(d.join("cpu.cfs_period_us")),
            ) {
                (Some(q), Some(p)) => parse_v1_quota(&q, &p),
                _ => None,
            }
        };
        if let Some((q, p)) = q {
            if best.map_or(true, |(bq, bp)| {
                (q as f64 / p as f64) < bq as f64 / bp as f64
            }) {
                best = Some((q, p));
            }
        }
    });
    best
}

fn tightest_memory(root: &FactRoot, leaf: &Path, top: &Path, v2: bool) -> Option<u64> {
    let file = if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    let mut best: Option<u64> = None;
    walk_up(leaf, top, |d| {
        if let Some(l) = root.read(d.join(file)).and_then(|s| parse_memory_limit(&s)) {
            best = Some(best.map_or(l, |b| b.min(l)));
        }
    });
    best
}

/// Finds the directory of `controller` for this process: a v1 mount bound to it, else the
/// v2 mount if the controller is enabled there.
fn locate(
    root: &FactRoot,
    controller: &str,
    members: &[Membership],
    mounts: &[CgroupMount],
) -> Option<(PathBuf, PathBuf, bool)> {
    for m in mounts.iter().filter(|m| !m.v2) {
        if !m.controllers.iter().any(|c| c == controller) {
            continue;
        }
        if let Some(mem) = members
            .iter()
            .find(|x| x.controllers.iter().any(|c| c == controller))
        {
            return Some((
                cgroup_dir(m, &mem.path),
                m.mount_point.clone().into(),
                false,
            ));
        }
    }
    let mem = members
        .iter()
        .find(|x| x.id == 0 && x.controllers.is_empty())?;
    mounts.iter().filter(|m| m.v2).find_map(|m| {
        let top = PathBuf::from(&m.mount_point);
        let ctl = root
            .read(top.join("cgroup.controllers"))
            .unwrap_or_default();
        ctl.split_whitespace()
            .any(|c| c == controller)
            .then(|| (cgroup_dir(m, &mem.path), top, true))
    })
}

/// The memory cgroup path of this process when it is not the root and its directory
/// cannot be read (`readable` false): no cgroup file system mounted, or one listed in
/// mountinfo but hidden under another mount (a tmpfs over /sys).
fn unseen(members: &[Membership], readable: bool) -> Option<String> {
    if readable {
        return None;
    }
    members
        .iter()
        .find(|m| m.controllers.iter().any(|c| c == "memory"))
        .or_else(|| {
            members
                .iter()
                .find(|m| m.id == 0 && m.controllers.is_empty())
        })
        .map(|m| m.path.clone())
        .filter(|p| p != "/" && !p.is_empty())
}

pub fn gather(root: &FactRoot) -> Cgroup {
    let members = root
        .read("/proc/self/cgroup")
        .map(|s| parse_proc_cgroup(&s))
        .unwrap_or_default();
    let mounts = root
        .read("/proc/self/mountinfo")
        .map(|s| parse_cgroup_mounts(&s))
        .unwrap_or_default();
    let mut cg = Cgroup::default();
    if let Some((dir, top, v2)) = locate(root, "cpu", &members, &mounts) {
        cg.version = Some(if v2 { 2 } else { 1 });
        if let Some((q, p)) = tightest_cpu(root, &dir, &top, v2) {
            cg.cpu_quota_us = Some(q);
            cg.cpu_period_us = Some(p);
            cg.cpu_limit = Some(q as f64 / p as f64);
        }
        cg.cpu_dir = Some(dir.display().to_string());
    }
    if let Some((dir, top, v2)) = locate(root, "memory", &members, &mounts) {
        cg.version.get_or_insert(if v2 { 2 } else { 1 });
        cg.memory_limit_bytes = tightest_memory(root, &dir, &top, v2);
        let usage = if v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        cg.memory_usage_bytes = root.read_trim(dir.join(usage)).and_then(|s| s.parse().ok());
        cg.memory_dir = Some(dir.display().to_string());
    }
    // Every cgroup directory, v1 or v2, has cgroup.procs.
    let readable = cg
        .memory_dir
        .as_ref()
        .is_some_and(|d| root.read(Path::new(d).join("cgroup.procs")).is_some());
    cg.unseen = unseen(&members, readable);
    cg
}

impl Cgroup {
    /// Warnings when the cgroup allows less than the machine has.
    pub fn warnings(&self, total_memory: u64, cpus: usize) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(path) = &self.unseen {
            w.push(format!(
                "this process runs in cgroup {path}, but no cgroup file system is mounted \
                 here (/sys hidden, as in some containers): its memory and CPU limits are \
                 unknown, so memory experiments size themselves as if memory were unknown \
                 (at most 256 MiB); mount /sys/fs/cgroup read-only to let them see the limit"
            ));
        }
        if let (Some(l), Some(q), Some(p)) = (self.cpu_limit, self.cpu_quota_us, self.cpu_period_us)
        {
            if l < cpus as f64 {
                w.push(format!(
                    "a cgroup limits CPU time to {l:.2} CPUs ({q} us per {p} us) of {cpus}; \
                     figures may include throttling pauses: run outside the container or raise \
                     the quota"
                ));
            }
        }
        if let Some(l) = self.memory_limit_bytes.filter(|l| *l < total_memory) {
            w.push(format!(
                "a cgroup limits memory to {} of {}; memory and file-cache experiments cap \
                 themselves at it: raise the limit to probe the whole RAM",
                crate::units::fmt_bytes(l as f64),
                crate::units::fmt_bytes(total_memory as f64)
            ));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_CGROUP_V1: &str = "9:name=systemd:/
8:pids:/
4:memory:/process_api/de0ae8e0744d865d901eb503b4ca7e28
2:cpuacct:/
1:cpu,cpuacct:/docker/abc
0::/
";
    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_named_cgroup_without_a_mount_is_unseen() {
        let m = parse_proc_cgroup("0::/zoo/hidden\n");
        assert_eq!(unseen(&m, false), Some("/zoo/hidden".into()));
        // The root cgroup (a host, or a cgroup namespace's view) says nothing hidden.
        assert_eq!(unseen(&parse_proc_cgroup("0::/\n"), false), None);
        // A directory that can be read: the limits are read, not unknown.
        assert_eq!(unseen(&m, true), None);
        // v1: the memory controller's path.
        assert_eq!(
            unseen(&parse_proc_cgroup(PROC_CGROUP_V1), false).as_deref(),
            Some("/process_api/de0ae8e0744d865d901eb503b4ca7e28")
        );
        // Recorded in the zoo's container guest: cgroup2 listed in mountinfo at
        // /sys/fs/cgroup, but a tmpfs hides /sys.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/zoo-container-no-sys");
        let cg = gather(&FactRoot::recorded(dir));
        assert_eq!(cg.unseen.as_deref(), Some("/zoo/hidden"));
        assert_eq!(cg.memory_limit_bytes, None);
        let cg = Cgroup {
            unseen: Some("/zoo/hidden".into()),
            ..Cgroup::default()
        };
        let w = cg.warnings(8 << 30, 4);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("/zoo/hidden") && w[0].contains("unknown"),
            "{w:?}"
        );
    }

    #[test]
    fn proc_cgroup() {
        let m = parse_proc_cgroup(PROC_CGROUP_V1);
        assert_eq!(m.len(), 6);
        assert_eq!(m[0].controllers, vec!["name=systemd"]);
        assert_eq!(m[4].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(m[4].path, "/docker/abc");
        assert!(m[5].controllers.is_empty());
        assert_eq!(m[5].id, 0);
        assert!(parse_proc_cgroup("garbage\n").is_empty());
    }

    #[test]
    fn mounts_and_dirs() {
        let mounts = parse_cgroup_mounts(MOUNTINFO);
        assert_eq!(mounts.len(), 3);
        assert!(mounts[2].v2);
        assert!(mounts[0].controllers.contains(&"cpu".to_string()));
        let members = parse_proc_cgroup(PROC_CGROUP_V1);
        let (dir, top, v2) = locate(&FactRoot::live(), "memory", &members, &mounts).unwrap();
        assert!(!v2);
        assert_eq!(top, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(
            dir,
            PathBuf::from("/sys/fs/cgroup/memory/process_api/de0ae8e0744d865d901eb503b4ca7e28")
        );
        let (dir, _, _) = locate(&FactRoot::live(), "cpu", &members, &mounts).unwrap();
        assert_eq!(dir, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/docker/abc"));
        // A namespaced mount whose root is the container's own cgroup.
        let m = CgroupMount {
            root: "/docker/abc".into(),
            mount_point: "/sys/fs/cgroup".into(),
            v2: true,
            controllers: vec![],
        };
        assert_eq!(
            cgroup_dir(&m, "/docker/abc"),
            PathBuf::from("/sys/fs/cgroup")
        );
    }

    #[test]
    fn cpu_quota_files() {
        assert_eq!(parse_v1_quota("-1\n", "100000\n"), None);
        assert_eq!(parse_v1_quota("150000", "100000"), Some((150000, 100000)));
        assert_eq!(parse_v1_quota("x", "100000"), None);
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("50000 100000\n"), Some((50000, 100000)));
    }

    #[test]
    fn memory_limit_files() {
        assert_eq!(parse_memory_limit("9223372036854771712\n"), None);
        assert_eq!(parse_memory_limit("max\n"), None);
        assert_eq!(parse_memory_limit("2147483648\n"), Some(2 << 30));
    }

    #[test]
    fn limit_warnings() {
        let cg = Cgroup {
            cpu_quota_us: Some(50000),
            cpu_period_us: Some(100000),
            cpu_limit: Some(0.5),
            memory_limit_bytes: Some(1 << 30),
            ..Default::default()
        };
        let w = cg.warnings(8 << 30, 2);
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("0.50 CPUs"));
        assert!(w[1].contains("1.0 GiB"), "{}", w[1]);
        // A limit above the machine's size limits nothing.
        let cg = Cgroup {
            memory_limit_bytes: Some(64 << 30),
            ..Default::default()
        };
        assert!(cg.warnings(8 << 30, 2).is_empty());
    }

    #[test]
    fn gather_never_panics() {
        let _ = gather(&FactRoot::live());
    }
}
