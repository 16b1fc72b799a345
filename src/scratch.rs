//! Scratch space for file experiments: a new folder that osmeter alone writes in, on a
//! checked file system, within half the free space, removed on success, failure,
//! Ctrl-C and SIGTERM.
//!
//! Rules for users of this module:
//! - create files only through `Scratch::create_file` (it books the space);
//! - where the experiment allows it, unlink a file as soon as it is open
//!   (`ScratchFile::unlink_now`), so even SIGKILL leaves nothing behind;
//! - child processes should call `die_with_parent()` so they end with the run.

use anyhow::{bail, Context as _};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

/// Folders to remove if the process is interrupted.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Files being written for the user (`io write`) that an interruption would leave partial.
static PARTIAL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();
/// Set once a signal arrived: no new scratch file may appear while folders are removed.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// A file system as statfs sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsInfo {
    pub fs_type: String,
    pub magic: u64,
    /// Backed by memory (tmpfs, ramfs...): a file there never touches a disk.
    pub memory_backed: bool,
    /// A network file system (NFS, SMB, FUSE such as sshfs...).
    pub network: bool,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

fn magic_name(m: u64) -> (&'static str, bool, bool) {
    // (name, memory_backed, network)
    match m {
        0x0102_1994 => ("tmpfs", true, false),
        0x8584_58f6 => ("ramfs", true, false),
        0x9584_58f6 => ("hugetlbfs", true, false),
        0x6265_6572 => ("sysfs", true, false),
        0x9fa0 => ("proc", true, false),
        0xef53 => ("ext2/3/4", false, false),
        0x5846_5342 => ("xfs", false, false),
        0x9123_683e => ("btrfs", false, false),
        0x2fc1_2fc1 => ("zfs", false, false),
        0xf2f5_2010 => ("f2fs", false, false),
        0x794c_7630 => ("overlayfs", false, false),
        0x6969 => ("nfs", false, true),
        0xff53_4d42 => ("cifs", false, true),
        0xfe53_4d42 => ("smb2", false, true),
        0x0102_1997 => ("9p", false, true),
        0x6573_5546 => ("fuse", false, true),
        0x4d44 => ("vfat", false, false),
        0x5346_544e => ("ntfs", false, false),
        _ => ("unknown", false, false),
    }
}

/// macOS file-system type names: (memory_backed, network). macOS has no tmpfs; a RAM
/// disk carries an ordinary type (apfs, hfs) and cannot be told apart by name.
fn type_name_kind(name: &str) -> (bool, bool) {
    match name {
        "tmpfs" | "devfs" => (true, false),
        "nfs" | "smbfs" | "afpfs" | "webdav" | "macfuse" | "osxfuse" | "ftp" => (false, true),
        _ => (false, false),
    }
}

/// statfs/statvfs of the file system holding `path`.
pub fn fs_info(path: &Path) -> anyhow::Result<FsInfo> {
    let kind =
        crate::platform::fs_kind(path).with_context(|| format!("statfs {}", path.display()))?;
    let c =
        std::ffi::CString::new(path.as_os_str().as_bytes()).context("path contains a NUL byte")?;
    // SAFETY: c is a valid NUL-terminated path; sv is a zeroed plain-data struct statvfs fills.
    let sv = unsafe {
        let mut sv: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut sv) != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("statvfs {}", path.display()));
        }
        sv
    };
    let (fs_type, magic, memory_backed, network) = match kind {
        crate::platform::FsKind::Magic(m) => {
            let (name, mem, net) = magic_name(m);
            (name.to_string(), m, mem, net)
        }
        crate::platform::FsKind::Name(n) => {
            let (mem, net) = type_name_kind(&n);
            (n, 0, mem, net)
        }
    };
    // The statvfs field types differ between targets.
    #[allow(clippy::unnecessary_cast)]
    Ok(FsInfo {
        fs_type,
        magic,
        memory_backed,
        network,
        free_bytes: sv.f_bavail as u64 * sv.f_frsize as u64,
        total_bytes: sv.f_blocks as u64 * sv.f_frsize as u64,
    })
}

/// A scratch folder owned by this run.
pub struct Scratch {
    dir: PathBuf,
    fs: FsInfo,
    /// Bytes this run may still write (half the free space at creation, less bookings).
    /// Shared with the files, which give their booking back when they go.
    remaining: Arc<AtomicU64>,
}

impl Scratch {
    /// Makes a new folder under `base` (default: the current directory). Refuses nothing
    /// here; callers decide whether a memory-backed file system is acceptable.
    pub(crate) fn new(base: Option<&Path>) -> anyhow::Result<Scratch> {
        install_cleanup_handler();
        let base = match base {
            Some(b) => b.to_path_buf(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        if !base.is_dir() {
            bail!(
                "scratch directory {} does not exist or is not a directory",
                base.display()
            );
        }
        let fs = fs_info(&base)?;
        let mut n = 0u32;
        let dir = loop {
            let d = base.join(format!("osmeter-scratch-{}-{}", std::process::id(), n));
            match std::fs::create_dir(&d) {
                Ok(()) => break d,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("cannot create a scratch folder in {}", base.display())
                    })
                }
            }
        };
        if let Ok(mut live) = LIVE.lock() {
            live.push(dir.clone());
        }
        Ok(Scratch {
            remaining: Arc::new(AtomicU64::new(fs.free_bytes / 2)),
            dir,
            fs,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn fs(&self) -> &FsInfo {
        &self.fs
    }

    /// Bytes that may still be written.
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::SeqCst)
    }

    /// Errors unless the file system is disk-backed, with the reason.
    pub(crate) fn require_disk(&self) -> anyhow::Result<()> {
        if self.fs.memory_backed {
            bail!(
                "the scratch directory {} is on {} (memory-backed): files there never touch a disk; use --scratch-dir on a disk",
                self.dir.display(),
                self.fs.fs_type
            );
        }
        Ok(())
    }

    /// Books `bytes` of the free-space allowance, or says why not.
    pub(crate) fn book(&self, bytes: u64) -> anyhow::Result<()> {
        book(&self.remaining, &self.dir, bytes)
    }

    /// Creates a new file of `size` bytes booked against the allowance (the content is
    /// written by the caller). Never opens an existing file.
    pub(crate) fn create_file(&self, name: &str, size: u64) -> anyhow::Result<ScratchFile> {
        if name.contains('/') || name.is_empty() {
            bail!("bad scratch file name '{name}'");
        }
        if STOPPING.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        self.book(size)?;
        let path = self.dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path);
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                self.remaining.fetch_add(size, Ordering::SeqCst);
                return Err(e).with_context(|| format!("cannot create {}", path.display()));
            }
        };
        let f = ScratchFile {
            file,
            path: Some(path),
            size,
            pool: Some((self.remaining.clone(), self.dir.clone())),
        };
        // A signal may have emptied the folder between the check and the create.
        if STOPPING.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        Ok(f)
    }
}

/// Takes `bytes` from an allowance, or says why not.
fn book(remaining: &AtomicU64, dir: &Path, bytes: u64) -> anyhow::Result<()> {
    let mut cur = remaining.load(Ordering::SeqCst);
    loop {
        if bytes > cur {
            bail!(
                "not enough free space in {}: need {}, may use {} (half of the free space at start)",
                dir.display(),
                crate::units::fmt_bytes(bytes as f64),
                crate::units::fmt_bytes(cur as f64)
            );
        }
        match remaining.compare_exchange(cur, cur - bytes, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

/// What a run may write under `base` (half its free space) and its file system, read
/// before anything is created there, so that a refusal writes nothing.
pub(crate) fn allowance(base: Option<&Path>) -> anyhow::Result<(PathBuf, FsInfo, u64)> {
    let base = match base {
        Some(b) => b.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let fs = fs_info(&base)?;
    let half = fs.free_bytes / 2;
    Ok((base, fs, half))
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|d| d != &self.dir);
        }
    }
}

/// A file in the scratch folder; removed when dropped (if not unlinked earlier).
pub(crate) struct ScratchFile {
    pub file: File,
    path: Option<PathBuf>,
    /// Bytes booked for this file.
    pub size: u64,
    /// The allowance the booking came from (returned on drop) and its folder.
    pool: Option<(Arc<AtomicU64>, PathBuf)>,
}

impl ScratchFile {
    /// Removes the name now; the open file stays usable and vanishes when closed, even
    /// if the process is killed.
    pub(crate) fn unlink_now(&mut self) -> std::io::Result<()> {
        if let Some(p) = self.path.take() {
            std::fs::remove_file(p)?;
        }
        Ok(())
    }
    #[cfg(test)]
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Books more space so the file may grow to `total` bytes.
    pub(crate) fn grow_booking(&mut self, total: u64) -> anyhow::Result<()> {
        if total > self.size {
            if let Some((pool, dir)) = &self.pool {
                book(pool, dir, total - self.size)?;
            }
            self.size = total;
        }
        Ok(())
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
        // Truncate first so the space is really free when the booking returns, even
        // if another descriptor of the unlinked file is still open somewhere.
        let _ = self.file.set_len(0);
        if let Some((pool, _)) = &self.pool {
            pool.fetch_add(self.size, Ordering::SeqCst);
        }
    }
}

/// Removes every live scratch folder (used on signals). New files are refused first,
/// and removal is retried, so a file created concurrently cannot keep a folder alive.
pub(crate) fn cleanup_all() {
    STOPPING.store(true, Ordering::SeqCst);
    if let Ok(files) = PARTIAL.lock() {
        for f in files.iter() {
            let _ = std::fs::remove_file(f);
        }
    }
    if let Ok(live) = LIVE.lock() {
        for d in live.iter() {
            for _ in 0..20 {
                let _ = std::fs::remove_dir_all(d);
                if !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// Whether a signal asked the run to stop (long loops may check it).
pub(crate) fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// While alive, an interruption (SIGINT/SIGTERM/SIGHUP) removes `path`: a file being
/// written that would otherwise be left partial. `finish` keeps the file.
pub(crate) struct PartialFile {
    path: PathBuf,
}

impl PartialFile {
    pub(crate) fn new(path: &Path) -> PartialFile {
        install_cleanup_handler();
        if let Ok(mut files) = PARTIAL.lock() {
            files.push(path.to_path_buf());
        }
        PartialFile {
            path: path.to_path_buf(),
        }
    }
    /// The file is complete: an interruption from now on leaves it alone.
    pub(crate) fn finish(self) {}
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if let Ok(mut files) = PARTIAL.lock() {
            files.retain(|f| f != &self.path);
        }
    }
}

/// On SIGINT/SIGTERM/SIGHUP: remove scratch folders, then exit with 128 + signal.
pub(crate) fn install_cleanup_handler() {
    HANDLER.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            let _ = std::thread::Builder::new()
                .name("osmeter-signals".into())
                .spawn(move || {
                    if let Some(sig) = signals.forever().next() {
                        cleanup_all();
                        eprintln!("\nosmeter: interrupted (signal {sig}); scratch files removed");
                        std::process::exit(128 + sig);
                    }
                });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_books_and_removes() {
        let base = tempfile::tempdir_in(".").unwrap();
        let dir;
        {
            let s = Scratch::new(Some(base.path())).unwrap();
            dir = s.dir().to_path_buf();
            assert!(dir.is_dir());
            let f = s.create_file("a", 4096).unwrap();
            assert!(f.path().unwrap().exists());
            assert!(
                s.create_file("a", 1).is_err(),
                "never reopens an existing file"
            );
            assert!(s.book(u64::MAX).is_err());
            let mut g = s.create_file("b", 1).unwrap();
            g.unlink_now().unwrap();
            assert!(!dir.join("b").exists());
        }
        assert!(!dir.exists(), "scratch folder removed on drop");
    }

    #[test]
    fn bookings_return_when_files_go() {
        let base = tempfile::tempdir_in(".").unwrap();
        let s = Scratch::new(Some(base.path())).unwrap();
        let start = s.remaining();
        let mut f = s.create_file("a", 1 << 20).unwrap();
        assert_eq!(s.remaining(), start - (1 << 20));
        f.grow_booking(3 << 20).unwrap();
        assert_eq!(s.remaining(), start - (3 << 20));
        assert!(
            f.grow_booking(u64::MAX).is_err(),
            "never past the allowance"
        );
        drop(f);
        assert_eq!(s.remaining(), start);
    }

    #[test]
    fn detects_memory_backed_file_systems() {
        if Path::new("/dev/shm").is_dir() {
            let fs = fs_info(Path::new("/dev/shm")).unwrap();
            assert!(fs.memory_backed, "{fs:?}");
        }
        let fs = fs_info(Path::new("/proc")).unwrap();
        assert!(fs.memory_backed);
    }

    #[test]
    fn missing_base_is_an_error() {
        assert!(Scratch::new(Some(Path::new("/nonexistent/osmeter"))).is_err());
    }
}
