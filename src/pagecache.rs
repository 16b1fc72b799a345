//! Page-cache state of files: residency with mincore, eviction with fadvise (verified),
//! O_DIRECT support, and aligned buffers for direct I/O.

use anyhow::Context as _;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The system page size.
pub fn page_size() -> usize {
    crate::platform::page_size()
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
        let rc = unsafe { crate::platform::mincore(addr, n, &mut vec) };
        // SAFETY: unmapping exactly the mapping made above.
        unsafe { libc::munmap(addr, n) };
        rc.context("mincore")?;
        resident += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
        pos += n as u64;
    }
    Ok((resident, total))
}

/// The outcome of an eviction, for the result's checks.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Eviction {
    pub method: String,
    pub resident_pages: u64,
    pub total_pages: u64,
}

impl Eviction {
    pub fn resident_fraction(&self) -> f64 {
        if self.total_pages == 0 {
            0.0
        } else {
            self.resident_pages as f64 / self.total_pages as f64
        }
    }
    /// Verified when no page of the file is left in the cache.
    pub fn verified(&self) -> bool {
        self.resident_pages == 0
    }
    pub fn describe(&self) -> String {
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
/// Where the system cannot evict one file, the method says so and the residency check
/// fails unless nothing was cached.
pub fn evict(file: &File, drop_all: bool) -> anyhow::Result<Eviction> {
    file.sync_data().context("fdatasync before eviction")?;
    let mut method = "posix_fadvise(DONTNEED) verified with mincore".to_string();
    let mut last = (0, 0);
    for _ in 0..3 {
        match crate::platform::evict_file(file).context("posix_fadvise(DONTNEED)")? {
            crate::platform::Support::Done => {}
            crate::platform::Support::Unsupported { reason } => {
                method = format!("not evicted ({reason}), checked with mincore");
                last = residency(file)?;
                break;
            }
        }
        last = residency(file)?;
        if last.0 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if last.0 != 0 && drop_all && crate::platform::is_root() {
        let how = crate::platform::drop_all_caches().context("dropping the page cache")?;
        method = format!("{method}, then {how} (--drop-caches), verified with mincore");
        last = residency(file)?;
    }
    Ok(Eviction {
        method,
        resident_pages: last.0,
        total_pages: last.1,
    })
}

/// Whether files in `dir` can be opened with O_DIRECT (tmpfs and some FUSE cannot).
pub fn supports_o_direct(dir: &Path) -> bool {
    let probe = dir.join(format!(".osmeter-odirect-{}", std::process::id()));
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    let ok = crate::platform::open_uncached(&o, &probe).is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
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
    fn empty_file_residency() {
        let f = tempfile::tempfile_in(".").unwrap();
        assert_eq!(residency(&f).unwrap(), (0, 0));
    }
}
