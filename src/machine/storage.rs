//! Block devices (/sys/block) and the file system a path lives on (/proc/self/mounts).

use super::facts::FactRoot;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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

fn disk(root: &FactRoot, name: &str) -> Disk {
    let d = Path::new("/sys/block").join(name);
    let flag = |f: &str| root.read_trim(d.join(f)).map(|v| v == "1");
    Disk {
        name: name.to_string(),
        model: root.read_trim(d.join("device/model")),
        vendor: root
            .read_trim(d.join("device/vendor"))
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
            .read_link(d.join("device/driver"))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
    }
}

impl Disk {
    /// virtio, Xen or another paravirtual disk: its rotational flag describes nothing
    /// physical, the host's storage decides.
    pub fn is_paravirtual(&self) -> bool {
        let driver = self.driver.as_deref().unwrap_or("");
        self.name.starts_with("vd")
            || self.name.starts_with("xvd")
            || driver.contains("virtio")
            || driver.contains("xen")
    }
}

/// What prediction inputs name as the source of a disk's rotational flag.
pub const ROTATIONAL_SOURCE: &str = "/sys/block/*/queue/rotational";

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

/// The live sectors-read counter of disk `name` (a /sys/block entry: the whole disk, which
/// counts its partitions' reads too). A counter, not a fact: read it around the I/O.
pub fn sectors_read(name: &str) -> Option<u64> {
    if name.is_empty() || name.contains('/') {
        return None;
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

    #[test]
    fn paravirtual_disks_by_name_or_driver() {
        let d = |name: &str, driver: Option<&str>| Disk {
            name: name.into(),
            driver: driver.map(Into::into),
            ..Default::default()
        };
        assert!(d("vda", None).is_paravirtual());
        assert!(d("xvdb", None).is_paravirtual());
        assert!(d("sda", Some("virtio_scsi")).is_paravirtual());
        assert!(d("sdb", Some("xen-blkfront")).is_paravirtual());
        assert!(!d("sda", Some("sd")).is_paravirtual());
        assert!(!d("nvme0n1", Some("nvme")).is_paravirtual());
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
