//! Page-cache state of files: residency with mincore, eviction with fadvise (verified),
//! O_DIRECT support, and aligned buffers for direct I/O.

use anyhow::Context as _;
use std::fs::File;
use std::os::fd::AsRawFd;

/// The system page size.
pub fn page_size() -> usize {
    crate::platform::page_size()
}

/// Pages of a file that are in the page cache: (resident, total).
pub fn residency(file: &File) -> anyhow::Result<(u64, u64)> {
    #[cfg(test)]
    if EVICTED_BY_PRESSURE.with(|e| e.get()) {
        crate::platform::evict_file(file)?;
    }
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

/// Why mincore's answer for `file` says nothing, when it does not: since Linux 5.2
/// mincore reports every page of a file mapping resident unless the caller owns the
/// file, has CAP_FOWNER or may write it (closing a page-cache side channel). None:
/// mincore tells the truth for this file.
pub fn residency_hidden(file: &File) -> Option<String> {
    crate::platform::residency_hidden(file)
}

/// Cached fraction of the file: exact (mincore over every page) up to 64 MiB, else
/// from 128 evenly spaced 256 KiB samples, which is enough to choose a method and costs
/// microseconds instead of a walk over every page of a huge file. Err(why) when mincore
/// hides this file's cache state (`residency_hidden`) and answered "all
/// resident", its fake answer.
pub fn sampled_residency(file: &File, size: u64) -> Result<f64, String> {
    const EXACT: u64 = 64 << 20;
    const SAMPLES: u64 = 128;
    const SPAN: u64 = 256 << 10;
    if size == 0 {
        return Ok(1.0);
    }
    let ranges: Vec<(u64, u64)> = if size <= EXACT {
        vec![(0, size)]
    } else {
        (0..SAMPLES)
            .map(|i| ((size - SPAN) / (SAMPLES - 1) * i, SPAN))
            .collect()
    };
    let (mut r, mut t) = (0u64, 0u64);
    for (off, len) in ranges {
        match residency_range(file, off, len) {
            Ok((a, b)) => {
                r += a;
                t += b;
            }
            Err(e) => return Err(format!("mincore failed: {e:#}")),
        }
    }
    if r == t {
        if let Some(why) = residency_hidden(file) {
            return Err(why);
        }
    }
    Ok(if t == 0 { 0.0 } else { r as f64 / t as f64 })
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
/// Where the system cannot evict one file, the method says so and the residency check
/// fails unless nothing was cached.
pub fn evict(file: &File, drop_all: bool) -> anyhow::Result<Eviction> {
    #[cfg(test)]
    if IGNORED_EVICTION.with(|i| i.get()) {
        return evict_with(file, false, &|_| Ok(crate::platform::Support::Done));
    }
    #[cfg(test)]
    if CACHED_AT_EVICTION.with(|c| c.get()) {
        use std::os::unix::fs::FileExt;
        let f = crate::platform::reopen(file, false, false)?;
        let (mut buf, mut pos) = (vec![0u8; 1 << 20], 0);
        while let n @ 1.. = f.read_at(&mut buf, pos)? {
            pos += n as u64;
        }
        return evict_with(file, false, &|_| Ok(crate::platform::Support::Done));
    }
    evict_with(file, drop_all, &crate::platform::evict_file)
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread a file is wholly cached when its eviction is asked (pages
    /// another reader brought in), and the advice is ignored, so the eviction fails.
    pub(crate) static CACHED_AT_EVICTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread the system accepts eviction advice and does nothing, as a
    /// file system that ignores POSIX_FADV_DONTNEED does; mincore then tells the truth.
    pub(crate) static IGNORED_EVICTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Test seam: on this thread memory pressure (another tenant's) evicts a file's pages
    /// whenever its residency is looked at, so no read keeps a file cached.
    pub(crate) static EVICTED_BY_PRESSURE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `evict` with the system's eviction call passed in, so tests can give other answers.
fn evict_with(
    file: &File,
    drop_all: bool,
    evict_file: &dyn Fn(&File) -> std::io::Result<crate::platform::Support>,
) -> anyhow::Result<Eviction> {
    file.sync_data().context("fdatasync before eviction")?;
    let hidden = residency_hidden(file);
    let mut method = "posix_fadvise(DONTNEED) verified with mincore".to_string();
    let mut last = (0, 0);
    for _ in 0..3 {
        match evict_file(file).context("posix_fadvise(DONTNEED)")? {
            crate::platform::Support::Done => {}
            crate::platform::Support::Unsupported { reason } => {
                method = format!("not evicted ({reason}), checked with mincore");
                last = residency(file)?;
                break;
            }
        }
        last = residency(file)?;
        if last.0 == 0 || hidden.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if last.0 != 0 && drop_all && crate::platform::is_root() {
        let how = crate::platform::drop_all_caches().context("dropping the page cache")?;
        method = format!("{method}, then {how} (--drop-caches), verified with mincore");
        last = residency(file)?;
    }
    // The kernel's fake answer is "all resident"; anything less is a real one (a kernel
    // without the 5.2 rule), so only then is the state unknown.
    let residency_unknown = hidden.filter(|_| last.0 == last.1 && last.1 > 0);
    if residency_unknown.is_some() {
        method = "posix_fadvise(DONTNEED)".into();
    }
    Ok(Eviction {
        method,
        resident_pages: last.0,
        total_pages: last.1,
        residency_unknown,
    })
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
    fn unsupported_eviction_fails_the_premise() {
        let dir = tempfile::tempdir_in(".").unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 256 << 10]).unwrap();
        let mut f = std::fs::File::open(&path).unwrap();
        let mut sink = Vec::new();
        f.read_to_end(&mut sink).unwrap();
        assert!(residency(&f).unwrap().0 > 0, "a file just read is cached");
        let unsupported = |_: &File| {
            Ok(crate::platform::Support::Unsupported {
                reason: "no per-file eviction here".into(),
            })
        };
        let e = evict_with(&f, false, &unsupported).unwrap();
        assert!(!e.verified(), "{e:?}");
        assert!(e
            .describe()
            .contains("not evicted (no per-file eviction here)"));
    }

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
