//! Page-cache state of files: residency with mincore, eviction with fadvise (verified),
//! O_DIRECT support, and aligned buffers for direct I/O.

use anyhow::Context as _;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Pages of a file that are in the page cache: (resident, total).
pub fn residency(file: &File) -> anyhow::Result<(u64, u64)> {
    let len = file.metadata()?.len();
    residency_range(file, 0, len)
}

/// Residency of `len` bytes from `offset` (rounded out to pages).
pub fn residency_range(file: &File, offset: u64, len: u64) -> anyhow::Result<(u64, u64)> {
    let ps = page_size() as u64;
    let start = offset / ps * ps;
    let end = offset.saturating_add(len).div_ceil(ps) * ps;
    if end <= start {
        return Ok((0, 0));
    }
    let mut resident = 0u64;
    let total = (end - start) / ps;
    // Map in windows so huge files need no huge address ranges.
    let window: u64 = 1 << 30;
    let mut pos = start;
    let mut vec = Vec::new();
    while pos < end {
        let n = (end - pos).min(window) as usize;
        // SAFETY: a fresh read-only shared mapping of an open file; it is only passed to
        // mincore and unmapped below, never dereferenced.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                pos as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap for mincore");
        }
        vec.resize(n.div_ceil(ps as usize), 0u8);
        // SAFETY: addr..addr+n is the mapping made above; vec has one byte per page of it.
        let rc = unsafe { libc::mincore(addr, n, vec.as_mut_ptr()) };
        let err = std::io::Error::last_os_error();
        // SAFETY: unmapping exactly the mapping made above.
        unsafe { libc::munmap(addr, n) };
        if rc != 0 {
            return Err(err).context("mincore");
        }
        resident += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
        pos += n as u64;
    }
    Ok((resident, total))
}

/// Why mincore's answer for `file` says nothing, when it does not: since Linux 5.2
/// mincore reports every page of a file mapping resident unless the caller owns the
/// file, has CAP_FOWNER or may write it (closing a page-cache side channel). Root is
/// taken to have CAP_FOWNER. None: mincore tells the truth for this file.
pub fn residency_hidden(file: &File) -> Option<String> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    use std::os::unix::fs::MetadataExt as _;
    let owner = file.metadata().ok()?.uid();
    // SAFETY: geteuid has no preconditions and touches no memory.
    let me = unsafe { libc::geteuid() };
    if owner == me || me == 0 {
        return None;
    }
    // The descriptor's own path, checked for write access with the effective ids (as
    // the kernel does; a read-only mount also refuses).
    let fd_path = format!("/proc/self/fd/{}\0", file.as_raw_fd());
    // SAFETY: fd_path is NUL-terminated; faccessat only reads it.
    let writable = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            fd_path.as_ptr() as *const libc::c_char,
            libc::W_OK,
            libc::AT_EACCESS,
        )
    } == 0;
    if writable {
        return None;
    }
    Some(format!(
        "mincore cannot see the page cache of a file this user (uid {me}) neither owns \
         (owner uid {owner}) nor may write: Linux 5.2+ reports every page of it resident"
    ))
}

/// The outcome of an eviction, for the result's checks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Eviction {
    pub method: String,
    /// mincore's count; meaningless when `residency_unknown` is set.
    pub resident_pages: u64,
    pub total_pages: u64,
    /// Why the eviction cannot be verified (mincore hides this file's cache state).
    pub residency_unknown: Option<String>,
}

impl Eviction {
    pub fn resident_fraction(&self) -> f64 {
        if self.total_pages == 0 {
            0.0
        } else {
            self.resident_pages as f64 / self.total_pages as f64
        }
    }
    /// Verified when no page of the file is left in the cache (and mincore can see it).
    pub fn verified(&self) -> bool {
        self.resident_pages == 0 && self.residency_unknown.is_none()
    }
    pub fn describe(&self) -> String {
        if let Some(why) = &self.residency_unknown {
            return format!("{}: not verifiable, {why}", self.method);
        }
        format!(
            "{}: {} of {} pages still cached after eviction ({:.2}%)",
            self.method,
            self.resident_pages,
            self.total_pages,
            self.resident_fraction() * 100.0
        )
    }
}

/// Evicts a file from the page cache: flush dirty pages, POSIX_FADV_DONTNEED, and verify
/// with mincore (a few rounds, since writeback can race the advice). With `drop_all`
/// (root and explicitly allowed) the whole page cache is dropped as a last resort.
pub fn evict(file: &File, drop_all: bool) -> anyhow::Result<Eviction> {
    file.sync_data().context("fdatasync before eviction")?;
    let hidden = residency_hidden(file);
    let mut method = "posix_fadvise(DONTNEED) verified with mincore".to_string();
    let mut last = (0, 0);
    for _ in 0..3 {
        // SAFETY: advisory call on an open descriptor; offset 0 and len 0 mean the whole file.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc)).context("posix_fadvise(DONTNEED)");
        }
        last = residency(file)?;
        if last.0 == 0 || hidden.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if last.0 != 0 && drop_all && crate::sys::is_root() {
        // SAFETY: sync has no arguments and cannot fail.
        unsafe { libc::sync() };
        std::fs::write("/proc/sys/vm/drop_caches", "1")
            .context("writing /proc/sys/vm/drop_caches")?;
        method = "posix_fadvise(DONTNEED), then drop_caches (--drop-caches), verified with mincore"
            .into();
        last = residency(file)?;
    }
    // The kernel's fake answer is "all resident"; anything less is a real one (a kernel
    // without the 5.2 rule), so only then is the state unknown.
    let residency_unknown = hidden.filter(|_| last.0 == last.1 && last.1 > 0);
    Ok(Eviction {
        method,
        resident_pages: last.0,
        total_pages: last.1,
        residency_unknown,
    })
}

/// Whether files in `dir` can be opened with O_DIRECT (tmpfs and some FUSE cannot).
pub fn supports_o_direct(dir: &Path) -> bool {
    let probe = dir.join(format!(".osmeter-odirect-{}", std::process::id()));
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags_direct()
        .open(&probe)
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

trait DirectFlag {
    fn custom_flags_direct(&mut self) -> &mut Self;
}

impl DirectFlag for std::fs::OpenOptions {
    fn custom_flags_direct(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECT)
    }
}

/// A zeroed heap buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only permit reads of the owned bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (a power of two); len 0 is rounded up to one byte.
    pub fn new(len: usize, align: usize) -> anyhow::Result<AlignedBuf> {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), align).context("bad buffer layout")?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(p)
            .ok_or_else(|| anyhow::anyhow!("out of memory allocating {len} bytes"))?;
        Ok(AlignedBuf { ptr, layout })
    }
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn evicts_and_verifies_on_disk() {
        let dir = tempfile::tempdir_in(".").unwrap();
        let info = crate::scratch::fs_info(dir.path()).unwrap();
        let path = dir.path().join("f");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        drop(f);
        let mut f = std::fs::File::open(&path).unwrap();
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        let (res, total) = residency(&f).unwrap();
        assert_eq!(total, (1 << 20) / page_size() as u64);
        assert_eq!(res, total, "just read, so cached");
        let e = evict(&f, false).unwrap();
        if !info.memory_backed {
            assert!(e.verified(), "{}", e.describe());
        } else {
            assert!(!e.verified(), "tmpfs cannot evict");
        }
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        let b = AlignedBuf::new(10_000, 4096).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert_eq!(b.len(), 10_000);
        assert!(b.iter().all(|&x| x == 0));
    }

    #[test]
    fn own_files_residency_is_visible() {
        let f = tempfile::tempfile_in(".").unwrap();
        assert_eq!(residency_hidden(&f), None);
    }

    #[test]
    fn empty_file_residency() {
        let f = tempfile::tempfile_in(".").unwrap();
        assert_eq!(residency(&f).unwrap(), (0, 0));
    }
}
