//! Block devices (/sys/block) and the file system a path lives on (/proc/self/mounts).

use super::facts::FactRoot;
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Storage {
    pub disks: Vec<Disk>,
    /// The file system of the current directory (where the scratch folder goes by default).
    pub cwd_filesystem: Option<Mount>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    /// Kernel name: sda, nvme0n1, vda...
    pub name: String,
    pub model: Option<String>,
    pub vendor: Option<String>,
    /// The kernel's rotational flag (virtual disks often report 1 whatever backs them).
    pub rotational: Option<bool>,
    /// The active I/O scheduler.
    pub scheduler: Option<String>,
    pub size_bytes: Option<u64>,
    pub logical_block_bytes: Option<u64>,
    pub physical_block_bytes: Option<u64>,
    pub removable: Option<bool>,
    /// Kernel driver of the device (virtio_blk, nvme, sd...).
    pub driver: Option<String>,
    /// The bus the device hangs off, from its folder under /sys/devices (what
    /// /sys/block/NAME links to): virtio, xen, hyperv, iscsi, nvme, nvme-tcp, ata, usb,
    /// mmc, scsi, or virtual (device-mapper, md). `None` when sysfs gave no path.
    pub bus: Option<String>,
    /// A device-mapper or md layer: "dm-crypt (cryptroot)", "LVM (vg-root)", "md raid1".
    pub layer: Option<String>,
    /// The physical disks under a device-mapper or md device, resolved through every
    /// layer (a partition stands for its disk).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Disk>,
    /// What predictions model this disk as, and why (`Disk::class` classifies disks
    /// described before this field existed).
    pub class: Option<DiskClass>,
}

/// The kind of device predictions model, from its bus, model string and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskKind {
    /// Local NVMe flash.
    Nvme,
    /// Other local flash (SATA/SAS, eMMC...).
    Flash,
    /// A paravirtual or emulated disk: the host's storage answers each request.
    Virtual,
    /// Not known.
    Unknown,
    /// Cloud block storage or iSCSI / NVMe-oF: each request crosses a network.
    NetworkBlock,
    /// A rotating disk on a physical bus.
    Rotational,
}

impl DiskKind {
    pub fn label(self) -> &'static str {
        match self {
            DiskKind::Nvme => "local NVMe flash",
            DiskKind::Flash => "local flash",
            DiskKind::Virtual => "virtual disk",
            DiskKind::Unknown => "unknown device",
            DiskKind::NetworkBlock => "network block storage",
            DiskKind::Rotational => "rotating disk",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskClass {
    pub kind: DiskKind,
    /// Which facts decided (bus, model string, rotational flag, members).
    pub why: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Mount {
    pub source: String,
    pub mount_point: String,
    pub fstype: String,
    /// tmpfs, ramfs and the like: a file there never touches a disk.
    pub in_memory: bool,
}

/// Devices that are not disks: loop files, RAM disks, compressed swap in RAM.
pub fn is_pseudo_device(name: &str) -> bool {
    ["loop", "ram", "zram", "nbd"]
        .iter()
        .any(|p| name.starts_with(p) && name[p.len()..].chars().all(|c| c.is_ascii_digit()))
}

/// Undoes the octal escapes /proc/mounts uses for spaces, tabs and backslashes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Three octal digits, the first at most 3 so that the value fits a byte.
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d[0] <= b'3' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount holding `path` (absolute, already canonical): the longest mount point that is
/// a prefix of it; the last such line wins, as a later mount hides an earlier one.
pub fn mount_for(mounts: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let mp = unescape(f[1]);
        if !path.starts_with(&mp) {
            continue;
        }
        if best
            .as_ref()
            .map_or(true, |b| mp.len() >= b.mount_point.len())
        {
            let fstype = f[2].to_string();
            best = Some(Mount {
                source: unescape(f[0]),
                mount_point: mp,
                in_memory: matches!(
                    fstype.as_str(),
                    "tmpfs" | "ramfs" | "devtmpfs" | "hugetlbfs"
                ),
                fstype,
            });
        }
    }
    best
}

/// The file system `path` lives on (canonicalised first; `None` when it does not exist).
pub fn filesystem_of(path: &Path) -> Option<Mount> {
    let p: PathBuf = path.canonicalize().ok()?;
    mount_for(&FactRoot::live().read("/proc/self/mounts")?, &p)
}

/// Where the sysfs link at `abs` points, as an absolute path of the described machine
/// (`..` resolved against the link's folder); `None` when `abs` is no link.
fn follow(root: &FactRoot, abs: &Path) -> Option<PathBuf> {
    let target = root.read_link(abs)?;
    let mut p = abs.parent()?.to_path_buf();
    for c in target.components() {
        match c {
            Component::RootDir => p = PathBuf::from("/"),
            Component::ParentDir => {
                p.pop();
            }
            Component::Normal(n) => p.push(n),
            _ => {}
        }
    }
    Some(p)
}

/// Deepest stack of device-mapper / md layers followed (LVM on LUKS on md is 3).
const MAX_LAYERS: usize = 8;

/// Disk `name` of /sys/block. Its attributes are read where the kernel keeps them (the
/// /sys/devices folder /sys/block/NAME links to), so that a snapshot records the links
/// and the files as sysfs lays them out; a recorded tree with plain folders reads too.
fn disk(root: &FactRoot, name: &str) -> Disk {
    let link = Path::new("/sys/block").join(name);
    let dir = follow(root, &link).unwrap_or(link);
    disk_at(root, name, &dir, 0)
}

fn disk_at(root: &FactRoot, name: &str, d: &Path, depth: usize) -> Disk {
    let flag = |f: &str| root.read_trim(d.join(f)).map(|v| v == "1");
    // The device behind the block device (a SCSI LUN, the NVMe controller or subsystem,
    // the virtio device): model, vendor and driver live there.
    let dev = follow(root, &d.join("device")).unwrap_or_else(|| d.join("device"));
    let mut disk = Disk {
        name: name.to_string(),
        model: root.read_trim(dev.join("model")),
        vendor: root
            .read_trim(dev.join("vendor"))
            .filter(|v| !v.starts_with("0x")),
        rotational: flag("queue/rotational"),
        scheduler: root
            .read_trim(d.join("queue/scheduler"))
            .and_then(|s| super::cpu::bracketed(&s).or(Some(s))),
        // The size file counts 512-byte sectors whatever the device's block size.
        size_bytes: root.read_u64(d.join("size")).map(|s| s * 512),
        logical_block_bytes: root.read_u64(d.join("queue/logical_block_size")),
        physical_block_bytes: root.read_u64(d.join("queue/physical_block_size")),
        removable: flag("removable"),
        driver: root
            .read_link(dev.join("driver"))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
        bus: bus_of(d),
        ..Default::default()
    };
    if disk.bus.as_deref() == Some("nvme") {
        // NVMe over a fabric (tcp, rdma, fc) is storage across a network.
        if let Some(t) = root
            .read_trim(dev.join("transport"))
            .filter(|t| matches!(t.as_str(), "tcp" | "rdma" | "fc"))
        {
            disk.bus = Some(format!("nvme-{t}"));
        }
    }
    disk.layer = layer(root, name, d);
    if disk.layer.is_some() && depth < MAX_LAYERS {
        let slaves = d.join("slaves");
        for s in root.list(&slaves) {
            let Some(mut p) = follow(root, &slaves.join(&s)) else {
                continue;
            };
            // A partition's folder sits inside its disk's folder.
            if root.exists(p.join("partition")) {
                p.pop();
            }
            let Some(n) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                continue;
            };
            let m = disk_at(root, &n, &p, depth + 1);
            // A layer's members stand in for it: keep the physical disks only.
            if m.members.is_empty() && m.layer.is_none() {
                disk.members.push(m);
            } else {
                disk.members.extend(m.members);
            }
        }
        disk.members.dedup_by(|a, b| a.name == b.name);
    }
    disk.class = Some(classify(&disk));
    disk
}

/// The bus from a /sys/devices path, the most specific component first (a virtio-scsi
/// disk's path holds virtio3 and host0; a USB stick's usb1 and host6).
pub fn bus_of(dir: &Path) -> Option<String> {
    // /sys/block/NAME itself (a recorded tree without links) says nothing.
    if !dir.starts_with("/sys/devices") {
        return None;
    }
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let numbered = |prefix: &str| {
        parts.iter().any(|p| {
            p.strip_prefix(prefix)
                .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
        })
    };
    let any = |f: &dyn Fn(&str) -> bool| parts.iter().any(|p| f(p));
    let bus = if numbered("virtio") {
        "virtio"
    } else if any(&|p| p.starts_with("vbd-") || p == "xen") {
        "xen"
    } else if any(&|p| p.starts_with("VMBUS") || p.starts_with("vmbus")) {
        "hyperv"
    } else if numbered("session") {
        "iscsi"
    } else if any(&|p| p.starts_with("nvme")) {
        "nvme"
    } else if numbered("usb") {
        "usb"
    } else if numbered("ata") {
        "ata"
    } else if any(&|p| p.starts_with("mmc")) {
        "mmc"
    } else if numbered("host") {
        "scsi"
    } else if dir.starts_with("/sys/devices/virtual") {
        "virtual"
    } else {
        return None;
    };
    Some(bus.to_string())
}

/// The device-mapper target (from the dm uuid's prefix) or md level of a stacked device.
fn layer(root: &FactRoot, name: &str, d: &Path) -> Option<String> {
    if let Some(level) = root.read_trim(d.join("md/level")) {
        return Some(format!("md {level}"));
    }
    let uuid = root.read_trim(d.join("dm/uuid"));
    let dm_name = root.read_trim(d.join("dm/name"));
    if uuid.is_none() && dm_name.is_none() {
        return if name.starts_with("dm-") {
            Some("device-mapper".into())
        } else if name.starts_with("md") {
            Some("md".into())
        } else {
            None
        };
    }
    let uuid = uuid.unwrap_or_default();
    let target = [
        ("CRYPT-", "dm-crypt"),
        ("LVM-", "LVM"),
        ("mpath-", "multipath"),
        ("VERITY-", "dm-verity"),
        ("part", "partition mapping"),
    ]
    .iter()
    .find(|(p, _)| uuid.starts_with(p))
    .map_or("device-mapper", |(_, t)| t);
    Some(match dm_name {
        Some(n) => format!("{target} ({n})"),
        None => target.to_string(),
    })
}

/// Cloud block storage named by its model string (and vendor where the model is generic).
fn cloud_block_storage(vendor: &str, model: &str) -> Option<&'static str> {
    let m = model.trim();
    if m.contains("Amazon Elastic Block Store") {
        Some("Amazon Elastic Block Store")
    } else if m == "PersistentDisk" || m == "nvme_card-pd" {
        Some("Google Persistent Disk")
    } else if (vendor.trim() == "Msft" && m == "Virtual Disk") || m.contains("NVMe Accelerator") {
        Some("Azure disk")
    } else {
        None
    }
}

/// Vendor or model strings of disks a hypervisor emulates.
fn emulated(vendor: &str, model: &str) -> bool {
    let vm = format!("{vendor} {model}").to_ascii_uppercase();
    [
        "QEMU",
        "VBOX",
        "VMWARE",
        "VIRTUAL DISK",
        "BHYVE",
        "PARALLELS",
    ]
    .iter()
    .any(|s| vm.contains(s))
}

/// What a disk is modelled as. Order matters: a stacked device is its members; a cloud
/// volume is network storage whatever bus brings it (GCP's virtio-scsi, AWS's NVMe); a
/// paravirtual or emulated disk's rotational flag describes nothing physical (QEMU marks
/// virtio-scsi disks rotational); only then do the rotational flag and NVMe speak.
pub fn classify(d: &Disk) -> DiskClass {
    let class = |kind, why: String| DiskClass { kind, why };
    if let Some(layer) = &d.layer {
        return stacked(d, layer);
    }
    let vendor = d.vendor.as_deref().unwrap_or("");
    let model = d.model.as_deref().unwrap_or("");
    let bus = d.bus.as_deref().unwrap_or("");
    let driver = d.driver.as_deref().unwrap_or("");
    let named = |s: &str| d.name.starts_with(s);
    if let Some(service) = cloud_block_storage(vendor, model) {
        return class(
            DiskKind::NetworkBlock,
            format!(
                "{service} (\"{}\"): each request crosses the provider's network",
                format!("{vendor} {model}").trim()
            ),
        );
    }
    if bus == "iscsi" || bus.starts_with("nvme-") {
        return class(
            DiskKind::NetworkBlock,
            format!("{bus}: each request crosses the network"),
        );
    }
    let paravirtual = match bus {
        "virtio" if named("vd") => Some("virtio-blk"),
        "virtio" => Some("virtio-scsi"),
        "xen" => Some("Xen blkfront"),
        "hyperv" => Some("Hyper-V storvsc (VMBus)"),
        _ if named("vd") || driver.contains("virtio") => Some("virtio"),
        _ if named("xvd") || driver.contains("xen") => Some("Xen blkfront"),
        _ => None,
    };
    let rot = match d.rotational {
        Some(true) => "1",
        Some(false) => "0",
        None => "?",
    };
    if let Some(p) = paravirtual {
        return class(
            DiskKind::Virtual,
            format!(
                "{p} {}: the host's storage answers each request; its rotational flag ({rot}) says nothing physical",
                if bus.is_empty() { "(by name or driver)" } else { "bus" }
            ),
        );
    }
    if emulated(vendor, model) {
        return class(
            DiskKind::Virtual,
            format!(
                "\"{}\" is a disk a hypervisor emulates: the host's storage answers each request; its rotational flag ({rot}) says nothing physical",
                format!("{vendor} {model}").trim()
            ),
        );
    }
    physical(d, bus, model, rot)
}

/// A stacked device (dm, md) as its slowest member.
fn stacked(d: &Disk, layer: &str) -> DiskClass {
    let class = |kind, why: String| DiskClass { kind, why };
    let Some(slowest) = d.members.iter().map(Disk::class).max_by_key(|c| c.kind) else {
        return class(
            DiskKind::Unknown,
            format!("{layer} with no physical member found under its slaves/"),
        );
    };
    let names: Vec<&str> = d.members.iter().map(|m| m.name.as_str()).collect();
    let mixed = d.members.iter().any(|m| m.class().kind != slowest.kind);
    class(
        slowest.kind,
        format!(
            "{layer} over {}{}: {}",
            names.join(", "),
            if mixed {
                " (members differ; the slowest decides)"
            } else {
                ""
            },
            slowest.why
        ),
    )
}

/// A disk of this machine's own, by its rotational flag and bus.
fn physical(d: &Disk, bus: &str, model: &str, rot: &str) -> DiskClass {
    let class = |kind, why: String| DiskClass { kind, why };
    let named = |s: &str| d.name.starts_with(s);
    let on = if bus.is_empty() {
        String::new()
    } else {
        format!(" on the {bus} bus")
    };
    match d.rotational {
        Some(true) => class(
            DiskKind::Rotational,
            format!("rotational flag 1{on}: a rotating disk"),
        ),
        _ if bus == "nvme" || named("nvme") => class(
            DiskKind::Nvme,
            format!(
                "NVMe{}, rotational flag {rot}",
                if model.is_empty() {
                    String::new()
                } else {
                    format!(" \"{model}\"")
                }
            ),
        ),
        Some(false) => class(DiskKind::Flash, format!("rotational flag 0{on}: flash")),
        None => class(DiskKind::Unknown, format!("no rotational flag{on}")),
    }
}

impl Disk {
    /// The stored class, or the class of a disk described before classes were stored.
    pub fn class(&self) -> DiskClass {
        self.class.clone().unwrap_or_else(|| classify(self))
    }
}

/// The whole disk holding `path` (a partition's parent), found through the file's st_dev
/// in /sys/dev/block, described as the description describes every disk. Read live: the
/// path (a scratch folder) is chosen by the run. `None` off Linux or for no block device.
pub fn disk_of(path: &Path) -> Option<Disk> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (maj, min) = crate::platform::dev_major_minor(dev);
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
    // A partition's folder sits inside its disk's folder.
    let whole = if sys.join("partition").exists() {
        sys.parent()?.to_path_buf()
    } else {
        sys
    };
    let name = whole.file_name()?.to_string_lossy().to_string();
    Some(disk(&FactRoot::live(), &name))
}

/// Where `sectors_read` reads disk `name`'s counter (for messages).
pub fn sectors_read_source(name: &str) -> String {
    format!("/sys/block/{name}/stat")
}

/// Sectors (512 bytes each, whatever the device's block size) read so far, from the
/// third field of a /sys/block/NAME/stat line.
pub fn parse_sectors_read(stat: &str) -> Option<u64> {
    stat.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread every disk's sectors-read counter stands still, as when a
    /// cache below the file system (a hypervisor's, ZFS's ARC) serves every read.
    pub(crate) static FROZEN_SECTORS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The live sectors-read counter of disk `name` (a /sys/block entry: the whole disk, which
/// counts its partitions' reads too). A counter, not a fact: read it around the I/O.
pub fn sectors_read(name: &str) -> Option<u64> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    #[cfg(test)]
    if FROZEN_SECTORS.with(|f| f.get()) {
        return Some(0);
    }
    let stat = std::fs::read_to_string(Path::new("/sys/block").join(name).join("stat")).ok()?;
    parse_sectors_read(&stat)
}

/// Disks under `root`; the current directory's file system only for the live machine
/// (a recorded machine's working directory is not known).
pub fn gather(root: &FactRoot) -> Storage {
    let names: Vec<String> = root
        .list("/sys/block")
        .into_iter()
        .filter(|n| !is_pseudo_device(n))
        .collect();
    Storage {
        disks: names.iter().map(|n| disk(root, n)).collect(),
        cwd_filesystem: if root.is_live() {
            std::env::current_dir().ok().and_then(|d| filesystem_of(&d))
        } else {
            None
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_read_is_the_third_stat_field() {
        let line = "   31409    10463  2380154    15478    53316    47227  7417176    63633        0    54376    92512";
        assert_eq!(parse_sectors_read(line), Some(2380154));
        assert_eq!(parse_sectors_read("1 2"), None);
        assert_eq!(sectors_read("../etc"), None);
    }

    const MOUNTS: &str = "proc /proc proc rw,relatime 0 0
/dev/vda / ext4 rw,relatime,discard 0 0
tmpfs /dev/shm tmpfs rw,relatime 0 0
tmpfs /tmp tmpfs rw 0 0
/dev/sdb1 /mnt/my\\040disk xfs rw 0 0
server:/export /work/nfs nfs4 rw 0 0
";

    #[test]
    fn mounts() {
        let m = mount_for(MOUNTS, Path::new("/work/wt/machine")).unwrap();
        assert_eq!((m.fstype.as_str(), m.mount_point.as_str()), ("ext4", "/"));
        assert!(!m.in_memory);
        let m = mount_for(MOUNTS, Path::new("/tmp/x")).unwrap();
        assert!(m.in_memory);
        let m = mount_for(MOUNTS, Path::new("/mnt/my disk/f")).unwrap();
        assert_eq!(m.fstype, "xfs");
        let m = mount_for(MOUNTS, Path::new("/work/nfs/a")).unwrap();
        assert_eq!(m.source, "server:/export");
        // "/tmpfoo" is not under "/tmp".
        assert_eq!(
            mount_for(MOUNTS, Path::new("/tmpfoo")).unwrap().fstype,
            "ext4"
        );
        assert_eq!(mount_for("", Path::new("/")), None);
    }

    /// A disk as sysfs describes it: `path` is where /sys/block/NAME links to.
    fn sys(name: &str, path: &str, vendor: &str, model: &str, driver: &str, rot: bool) -> Disk {
        let mut d = Disk {
            name: name.into(),
            vendor: Some(vendor.into()).filter(|v: &String| !v.is_empty()),
            model: Some(model.into()).filter(|v: &String| !v.is_empty()),
            driver: Some(driver.into()).filter(|v: &String| !v.is_empty()),
            rotational: Some(rot),
            bus: bus_of(Path::new(path)),
            ..Default::default()
        };
        d.class = Some(classify(&d));
        d
    }

    #[test]
    fn disks_are_classified_by_bus_model_and_flags() {
        use DiskKind::*;
        let virtio_scsi =
            "/sys/devices/pci0000:00/0000:00:05.0/virtio2/host0/target0:0:0/0:0:0:0/block/sda";
        let sata = "/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda";
        let cases = [
            // virtio-scsi: the SCSI disk driver `sd`, a virtio device above the SCSI host.
            (sys("sda", virtio_scsi, "QEMU", "QEMU HARDDISK", "sd", true), Virtual, "virtio-scsi"),
            (sys("sdb", virtio_scsi, "Acme", "Disk", "sd", true), Virtual, "virtio-scsi"),
            (sys("vda", "/sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda", "", "", "virtio_blk", true), Virtual, "virtio-blk"),
            (sys("xvda", "/sys/devices/vbd-51712/block/xvda", "", "", "vbd", false), Virtual, "Xen"),
            (sys("sda", "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/f8b3781a-1e82-4818-a1c3-63d806ec15bb/host0/target0:0:0/0:0:0:0/block/sda", "Msft", "Virtual Disk", "sd", true), NetworkBlock, "Azure"),
            (sys("sdb", "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/00000000-0001-8899-0000-000000000000/host1/target1:0:1/1:0:1:0/block/sdb", "Acme", "Disk", "sd", true), Virtual, "Hyper-V"),
            // GCP: Persistent Disk on virtio-scsi or NVMe, local SSD on NVMe.
            (sys("sda", virtio_scsi, "Google", "PersistentDisk", "sd", true), NetworkBlock, "Google Persistent Disk"),
            (sys("nvme0n1", "/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1", "", "nvme_card-pd", "", false), NetworkBlock, "Google"),
            (sys("nvme1n1", "/sys/devices/pci0000:00/0000:00:05.0/nvme/nvme1/nvme1n1", "", "nvme_card", "", false), Nvme, "NVMe"),
            // AWS Nitro: EBS and instance storage are both NVMe.
            (sys("nvme0n1", "/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1", "", "Amazon Elastic Block Store", "", false), NetworkBlock, "Amazon Elastic Block Store"),
            (sys("nvme1n1", "/sys/devices/pci0000:00/0000:00:1f.0/nvme/nvme1/nvme1n1", "", "Amazon EC2 NVMe Instance Storage", "", false), Nvme, "NVMe"),
            (sys("nvme0n1", "/sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", "", "Samsung SSD 980 PRO 2TB", "", false), Nvme, "NVMe"),
            (sys("nvme2n1", "/sys/devices/virtual/nvme-fabrics/ctl/nvme2/nvme2n1", "", "Linux", "", false), Nvme, "NVMe"),
            (sys("sdc", "/sys/devices/platform/host3/session1/target3:0:0/3:0:0:0/block/sdc", "LIO-ORG", "disk1", "sd", false), NetworkBlock, "iscsi"),
            (sys("sda", sata, "ATA", "ST2000DM008-2FR1", "sd", true), Rotational, "rotational flag 1 on the ata bus"),
            (sys("sda", sata, "ATA", "Samsung SSD 870", "sd", false), Flash, "flash"),
            (sys("sda", sata, "ATA", "QEMU HARDDISK", "sd", true), Virtual, "emulates"),
            (sys("sdd", "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdd", "SanDisk", "Extreme", "sd", false), Flash, "usb"),
        ];
        for (d, kind, why) in cases {
            let c = d.class();
            assert_eq!(c.kind, kind, "{} {:?}: {}", d.name, d.model, c.why);
            assert!(c.why.contains(why), "{}: {}", d.name, c.why);
        }
        // An NVMe-oF namespace is network storage (bus nvme-tcp, from the transport file).
        let mut d = sys(
            "nvme2n1",
            "/sys/devices/virtual/nvme-fabrics/ctl/nvme2/nvme2n1",
            "",
            "Linux",
            "",
            false,
        );
        d.bus = Some("nvme-tcp".into());
        assert_eq!(classify(&d).kind, NetworkBlock);
        // Disks described before buses were recorded: by name and driver.
        let old = |name: &str, driver: Option<&str>, rot| Disk {
            name: name.into(),
            driver: driver.map(Into::into),
            rotational: Some(rot),
            ..Default::default()
        };
        assert_eq!(old("vda", None, true).class().kind, Virtual);
        assert_eq!(old("xvdb", None, true).class().kind, Virtual);
        assert_eq!(old("sdb", Some("xen-blkfront"), true).class().kind, Virtual);
        assert_eq!(old("sda", Some("sd"), true).class().kind, Rotational);
        assert_eq!(old("nvme0n1", None, false).class().kind, Nvme);
    }

    #[test]
    fn stacked_devices_take_their_slowest_member() {
        let nvme = sys(
            "nvme0n1",
            "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1",
            "",
            "Samsung SSD 980 PRO 2TB",
            "",
            false,
        );
        let hdd = sys(
            "sda",
            "/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda",
            "ATA",
            "ST2000DM008",
            "sd",
            true,
        );
        let layered = |layer: &str, members: Vec<Disk>| {
            let mut d = Disk {
                name: "dm-0".into(),
                layer: Some(layer.into()),
                rotational: Some(false),
                bus: Some("virtual".into()),
                members,
                ..Default::default()
            };
            d.class = Some(classify(&d));
            d
        };
        let c = layered("dm-crypt (cryptroot)", vec![nvme.clone()]).class();
        assert_eq!(c.kind, DiskKind::Nvme);
        assert!(
            c.why.starts_with("dm-crypt (cryptroot) over nvme0n1: NVMe"),
            "{}",
            c.why
        );
        let c = layered("md raid1", vec![nvme, hdd]).class();
        assert_eq!(c.kind, DiskKind::Rotational);
        assert!(
            c.why
                .contains("nvme0n1, sda (members differ; the slowest decides)"),
            "{}",
            c.why
        );
        let c = layered("device-mapper", vec![]).class();
        assert_eq!(c.kind, DiskKind::Unknown);
    }

    #[test]
    fn links_are_followed_as_the_kernel_lays_them_out() {
        let tmp = tempfile::tempdir().unwrap();
        let root = FactRoot::recorded(tmp.path());
        let blk = tmp.path().join("sys/block");
        std::fs::create_dir_all(&blk).unwrap();
        std::os::unix::fs::symlink("../devices/virtual/block/dm-0", blk.join("dm-0")).unwrap();
        assert_eq!(
            follow(&root, Path::new("/sys/block/dm-0")),
            Some(PathBuf::from("/sys/devices/virtual/block/dm-0"))
        );
        assert_eq!(follow(&root, Path::new("/sys/block")), None);
    }

    #[test]
    fn disk_of_a_path() {
        // /proc is no block device.
        assert!(disk_of(Path::new("/proc")).is_none());
        assert!(disk_of(Path::new("/no/such/path")).is_none());
        let Some(m) = filesystem_of(Path::new(".")) else {
            return;
        };
        if m.source.starts_with("/dev/") && Path::new("/sys/dev/block").exists() {
            let d = disk_of(Path::new(".")).expect("the disk behind the working directory");
            assert!(!d.name.is_empty() && !d.name.contains('/'));
            assert!(sectors_read(&d.name).is_some(), "{}", d.name);
        }
    }

    #[test]
    fn pseudo_devices() {
        for n in ["loop0", "loop12", "ram0", "zram0", "nbd3"] {
            assert!(is_pseudo_device(n), "{n}");
        }
        for n in ["sda", "vda", "nvme0n1", "loopy", "dm-0", "mmcblk0"] {
            assert!(!is_pseudo_device(n), "{n}");
        }
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/a\\"), "/a\\");
        assert_eq!(unescape("plain"), "plain");
        assert_eq!(unescape("\\777 \\04"), "\\777 \\04");
    }
}
