//! The one door the machine description reads files through.
//!
//! A `FactRoot` is a root directory ("/" for the live machine, a snapshot folder for
//! `--from DIR`). Every path the description asks for is absolute as on the described
//! machine and is read under the root. A recording root keeps what each successful read
//! returned, so `--snapshot DIR` writes exactly what was read (not a hand-kept list of
//! paths), and `--from DIR` reads the same paths back.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

/// What a read returned, kept by a recording root.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReadResult {
    File(String),
    /// A symbolic link's target (the description reads links such as device/driver).
    Link(PathBuf),
    /// A directory that was listed or checked for existence.
    Dir,
}

#[derive(Debug)]
pub struct FactRoot {
    root: PathBuf,
    live: bool,
    log: Option<Mutex<BTreeMap<PathBuf, ReadResult>>>,
}

impl FactRoot {
    /// This machine.
    pub(crate) fn live() -> FactRoot {
        FactRoot {
            root: PathBuf::from("/"),
            live: true,
            log: None,
        }
    }

    /// This machine, keeping every fact read for a snapshot.
    pub(crate) fn live_recording() -> FactRoot {
        FactRoot {
            log: Some(Mutex::new(BTreeMap::new())),
            ..FactRoot::live()
        }
    }

    /// A machine recorded under `dir` (a snapshot or a fixture tree).
    pub fn recorded(dir: impl Into<PathBuf>) -> FactRoot {
        FactRoot {
            root: dir.into(),
            live: false,
            log: None,
        }
    }

    /// True when the facts are this machine's (live-only facts may then be gathered).
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Where an absolute path of the described machine lives here. `..` and other
    /// non-normal components are dropped so that no path escapes the root.
    pub(crate) fn resolve(&self, abs: impl AsRef<Path>) -> PathBuf {
        let mut p = self.root.clone();
        for c in abs.as_ref().components() {
            if let Component::Normal(n) = c {
                p.push(n);
            }
        }
        p
    }

    fn note(&self, abs: &Path, r: ReadResult) {
        if let Some(log) = &self.log {
            if let Ok(mut l) = log.lock() {
                l.insert(abs.to_path_buf(), r);
            }
        }
    }

    /// Reads a small text file, `None` when it is missing or unreadable.
    pub(crate) fn read(&self, abs: impl AsRef<Path>) -> Option<String> {
        let abs = abs.as_ref();
        let s = std::fs::read_to_string(self.resolve(abs)).ok()?;
        self.note(abs, ReadResult::File(s.clone()));
        Some(s)
    }

    /// Reads a one-line sysfs/procfs value, trimmed; `None` when missing or empty.
    pub(crate) fn read_trim(&self, abs: impl AsRef<Path>) -> Option<String> {
        self.read(abs)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    pub(crate) fn read_u64(&self, abs: impl AsRef<Path>) -> Option<u64> {
        self.read_trim(abs)?.parse().ok()
    }

    /// The entry names of a directory, sorted (empty when it is missing).
    pub(crate) fn list(&self, abs: impl AsRef<Path>) -> Vec<String> {
        let abs = abs.as_ref();
        let Ok(dir) = std::fs::read_dir(self.resolve(abs)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        self.note(abs, ReadResult::Dir);
        names
    }

    /// The target of a symbolic link.
    pub(crate) fn read_link(&self, abs: impl AsRef<Path>) -> Option<PathBuf> {
        let abs = abs.as_ref();
        let t = std::fs::read_link(self.resolve(abs)).ok()?;
        self.note(abs, ReadResult::Link(t.clone()));
        Some(t)
    }

    /// Whether a path exists (a snapshot keeps it as a directory or an empty file).
    pub(crate) fn exists(&self, abs: impl AsRef<Path>) -> bool {
        let abs = abs.as_ref();
        match std::fs::metadata(self.resolve(abs)) {
            Ok(m) if m.is_dir() => {
                self.note(abs, ReadResult::Dir);
                true
            }
            Ok(_) => {
                // Only the existence matters; keep an empty file unless it was read.
                if let Some(log) = &self.log {
                    if let Ok(mut l) = log.lock() {
                        l.entry(abs.to_path_buf())
                            .or_insert(ReadResult::File(String::new()));
                    }
                }
                true
            }
            Err(_) => false,
        }
    }

    /// A sysctl value (macOS): asked of the system live, else read from the recorded
    /// DIR/sysctl.txt ("name: value" lines). A recording root adds each value it got to
    /// its /sysctl.txt, so a Mac's snapshot holds exactly the values used.
    pub(crate) fn sysctl(&self, name: &str) -> Option<String> {
        if !self.live {
            let all = std::fs::read_to_string(self.resolve("/sysctl.txt")).ok()?;
            return parse_sysctl_lines(&all).remove(name);
        }
        let v = live_sysctl(name)?;
        if let Some(log) = &self.log {
            if let Ok(mut l) = log.lock() {
                let e = l
                    .entry(PathBuf::from("/sysctl.txt"))
                    .or_insert_with(|| ReadResult::File(String::new()));
                if let ReadResult::File(text) = e {
                    text.push_str(&format!("{name}: {v}\n"));
                }
            }
        }
        Some(v)
    }

    /// True when the facts are a Mac's (live on macOS, or a recorded sysctl.txt).
    pub(crate) fn is_sysctl_machine(&self) -> bool {
        if self.live {
            cfg!(target_os = "macos")
        } else {
            self.resolve("/sysctl.txt").is_file()
        }
    }

    /// Everything read so far (empty unless recording).
    pub(crate) fn recorded_facts(&self) -> BTreeMap<PathBuf, ReadResult> {
        self.log
            .as_ref()
            .and_then(|l| l.lock().ok().map(|l| l.clone()))
            .unwrap_or_default()
    }
}

/// Asks this system, decoded by the OID's type (None off macOS).
fn live_sysctl(name: &str) -> Option<String> {
    crate::platform::sysctl_text(name)
}

/// Parses "name: value" lines (the output of `sysctl hw machdep`, and a snapshot's
/// sysctl.txt) into a map.
pub fn parse_sysctl_lines(s: &str) -> BTreeMap<String, String> {
    s.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let k = k.trim();
            (!k.is_empty() && !k.contains(' ')).then(|| (k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// A folder `--from` can describe: a directory holding proc/, sys/ or sysctl.txt.
pub(crate) fn check_recorded_tree(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        return Err("not an existing directory".into());
    }
    if ["proc", "sys", "sysctl.txt"]
        .iter()
        .any(|p| dir.join(p).exists())
    {
        Ok(())
    } else {
        Err("not a machine snapshot (no proc/, sys/ or sysctl.txt inside)".into())
    }
}

/// A folder `--snapshot` may write: missing, or an empty directory.
pub(crate) fn check_snapshot_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) if !p.is_dir() => Err(format!("parent {} does not exist", p.display())),
            _ => Ok(()),
        };
    }
    if !dir.is_dir() {
        return Err("exists and is not a directory".into());
    }
    match std::fs::read_dir(dir).map(|mut d| d.next().is_none()) {
        Ok(true) => Ok(()),
        Ok(false) => Err("exists and is not empty (a snapshot never overwrites files)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes recorded facts under `dir`, each at its absolute path (DIR/proc/cpuinfo...).
///
/// `dir` must be missing or empty, so that no user file is overwritten; on failure what
/// was written is removed again. Returns the number of files and links written.
pub(crate) fn write_snapshot(
    dir: &Path,
    facts: &BTreeMap<PathBuf, ReadResult>,
) -> io::Result<usize> {
    let existed = dir.exists();
    if existed {
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a directory",
            ));
        }
        if std::fs::read_dir(dir)?.next().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not empty (a snapshot never overwrites files)",
            ));
        }
    }
    std::fs::create_dir_all(dir)?;
    let res = write_all(dir, facts);
    if res.is_err() {
        // Remove only what this call created: the folder's contents, and the folder if new.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                let _ = if p.is_dir() && !p.is_symlink() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
        if !existed {
            let _ = std::fs::remove_dir(dir);
        }
    }
    res
}

fn write_all(dir: &Path, facts: &BTreeMap<PathBuf, ReadResult>) -> io::Result<usize> {
    let root = FactRoot::recorded(dir);
    let mut n = 0;
    // Directories first, so that a directory and a file at one path cannot collide:
    // a path both listed and read as a file keeps the file.
    for (abs, r) in facts {
        let target = root.resolve(abs);
        match r {
            ReadResult::Dir => {
                if !target.exists() {
                    std::fs::create_dir_all(&target)?;
                }
            }
            ReadResult::File(s) => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&target, s)?;
                n += 1;
            }
            ReadResult::Link(t) => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::os::unix::fs::symlink(t, &target)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_stays_under_the_root() {
        let r = FactRoot::recorded("/snap");
        assert_eq!(
            r.resolve("/proc/cpuinfo"),
            PathBuf::from("/snap/proc/cpuinfo")
        );
        assert_eq!(
            r.resolve("/sys/../../etc/x"),
            PathBuf::from("/snap/sys/etc/x")
        );
        assert_eq!(
            FactRoot::live().resolve("/proc/x"),
            PathBuf::from("/proc/x")
        );
    }

    #[test]
    fn recording_keeps_what_was_read_and_round_trips() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("sys/a")).unwrap();
        std::fs::write(src.path().join("sys/a/v"), "42\n").unwrap();
        std::fs::write(src.path().join("sys/a/unread"), "x").unwrap();
        std::os::unix::fs::symlink("../../drv/virtio", src.path().join("sys/a/driver")).unwrap();
        let r = FactRoot {
            log: Some(Mutex::new(BTreeMap::new())),
            ..FactRoot::recorded(src.path())
        };
        assert_eq!(r.read_u64("/sys/a/v"), Some(42));
        assert_eq!(r.read("/sys/a/missing"), None);
        assert!(r.read_link("/sys/a/driver").is_some());
        assert_eq!(r.list("/sys/a").len(), 3);
        let facts = r.recorded_facts();
        assert_eq!(facts.len(), 3, "{facts:?}"); // v, driver, the listed dir; not `unread`

        let out = tempfile::tempdir().unwrap();
        let snap = out.path().join("snap");
        assert_eq!(write_snapshot(&snap, &facts).unwrap(), 2);
        let back = FactRoot::recorded(&snap);
        assert_eq!(back.read_u64("/sys/a/v"), Some(42));
        assert_eq!(
            back.read_link("/sys/a/driver"),
            Some(PathBuf::from("../../drv/virtio"))
        );
        assert!(back.read("/sys/a/unread").is_none());
        // Never into a folder that holds something.
        let e = write_snapshot(&snap, &facts).unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
        assert_eq!(back.read_u64("/sys/a/v"), Some(42));
    }
}
