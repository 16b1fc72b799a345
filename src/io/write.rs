//! `io write`: write N blocks of B bytes of pseudo-random data, flush them to the device
//! (fsync), and report the time and throughput.
//!
//! Safety rules: an existing FILE is refused unless `--force`; a file this command
//! created (or replaced under `--force`) is removed again when writing fails, so a full
//! disk leaves nothing behind; a file it was not allowed to touch is never opened for
//! writing. Devices (e.g. /dev/null) can be written with `--force` and are never removed.

use super::{check_block, fmt_mib_s, os_err, plain, rate};
use crate::error;
use crate::rng::Rng;
use crate::units::fmt_bytes;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub struct WriteOutcome {
    pub file: PathBuf,
    pub block: u64,
    pub count: u64,
    pub bytes: u64,
    pub write_seconds: f64,
    pub sync_seconds: f64,
}

/// Fills `buf` with pseudo-random bytes (`rng::Rng`: its output does not compress or
/// deduplicate).
pub fn fill_random(buf: &mut [u8], seed: u64) {
    Rng::new(seed).fill(buf);
}

fn write_all(file: &File, path: &Path, mut data: &[u8]) -> error::Result<()> {
    while !data.is_empty() {
        // SAFETY: data is a valid readable slice.
        let n = unsafe {
            libc::write(
                file.as_raw_fd(),
                data.as_ptr() as *const libc::c_void,
                data.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(os_err(path, "write failed", e));
        }
        if n == 0 {
            return super::runtime(format!("{}: write wrote nothing", path.display()));
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// What is at `path` (refused unless --force; a folder never) and whether it is a regular
/// file (or will be one); the free space is checked first for regular files.
fn check_target(
    path: &Path,
    total: u64,
    force: bool,
) -> error::Result<(Option<std::fs::Metadata>, bool)> {
    let existing = match std::fs::symlink_metadata(path) {
        Ok(m) => Some(std::fs::metadata(path).unwrap_or(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(os_err(path, "cannot inspect", e)),
    };
    if let Some(m) = &existing {
        if m.is_dir() {
            return super::usage(format!("{}: is a directory", path.display()));
        }
        if !force {
            return super::usage(format!(
                "{}: already exists; refusing to overwrite it (use --force to replace it)",
                path.display()
            ));
        }
    }
    let regular = existing.as_ref().map(|m| m.is_file()).unwrap_or(true);
    if regular {
        // Check space first, so a too-large request fails before filling the disk.
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if let Ok(fs) = crate::scratch::fs_info(&dir) {
            let freed = existing.as_ref().map(|m| m.len()).unwrap_or(0);
            if total > fs.free_bytes.saturating_add(freed) {
                return super::runtime(format!(
                    "{}: not enough free space: {} needed, {} free",
                    dir.display(),
                    fmt_bytes(total as f64),
                    fmt_bytes(fs.free_bytes as f64)
                ));
            }
        }
    }
    Ok((existing, regular))
}

pub fn run(path: &Path, block_size: u64, count: u64, force: bool) -> error::Result<WriteOutcome> {
    let block = check_block(block_size)?;
    let total = block_size.checked_mul(count).ok_or_else(|| {
        super::Error::usage(format!(
            "{count} blocks of {block_size} bytes overflow a 64-bit byte count"
        ))
    })?;
    let (existing, regular) = check_target(path, total, force)?;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if existing.is_some() {
        opts.truncate(regular);
    } else {
        // O_EXCL: if someone created the file meanwhile, we fail instead of clobbering it.
        opts.create_new(true);
    }
    let file = opts
        .open(path)
        .map_err(|e| os_err(path, "cannot open for writing", e))?;
    // Ours to remove on failure: a file we created, or a regular file --force replaced.
    let owned = regular;
    // Ctrl-C or SIGTERM while writing removes the partial file too.
    let partial = owned.then(|| crate::scratch::PartialFile::new(path));
    let fail = |e: super::Error| -> super::Error {
        if owned && std::fs::remove_file(path).is_ok() {
            return match e {
                super::Error::Usage(s) => super::Error::Usage(s),
                super::Error::Runtime(e) => {
                    super::Error::runtime(format!("{e:#} (removed the partial file)"))
                }
            };
        }
        e
    };

    let mut buf = vec![0u8; block];
    fill_random(&mut buf, 0x056d_6574_6572);
    let mut stamp = Rng::new(0x1234_5678);
    let span = super::Span::start();
    for _ in 0..count {
        // A fresh random stamp per block keeps blocks distinct without refilling them.
        let s = stamp.next_u64().to_le_bytes();
        let n = block.min(8);
        buf[..n].copy_from_slice(&s[..n]);
        write_all(&file, path, &buf).map_err(fail)?;
    }
    let write_seconds = span.seconds();
    let sync = super::Span::start();
    if regular {
        file.sync_all().map_err(|e| {
            fail(super::Error::runtime(format!(
                "{}: fsync failed: {}",
                path.display(),
                plain(&e)
            )))
        })?;
    }
    let sync_seconds = sync.seconds();
    if let Some(p) = partial {
        p.finish();
    }
    Ok(WriteOutcome {
        file: path.to_path_buf(),
        block: block_size,
        count,
        bytes: total,
        write_seconds,
        sync_seconds,
    })
}

impl WriteOutcome {
    pub fn seconds(&self) -> f64 {
        self.write_seconds + self.sync_seconds
    }

    pub fn print(&self, json: bool) {
        let bps = rate(self.bytes, self.seconds());
        if json {
            super::print_json(&serde_json::json!({
                "command": "write",
                "file": self.file.display().to_string(),
                "block_bytes": self.block,
                "blocks": self.count,
                "bytes": self.bytes,
                "seconds": self.seconds(),
                "ns": self.seconds() * 1e9,
                "write_seconds": self.write_seconds,
                "fsync_seconds": self.sync_seconds,
                "bytes_per_s": bps,
                "bytes_per_s_before_fsync": rate(self.bytes, self.write_seconds),
            }));
            return;
        }
        println!(
            "wrote {} block(s) of {} = {} in {:.6} s (write {:.6} s + fsync {:.6} s): {}",
            self.count,
            fmt_bytes(self.block as f64),
            fmt_bytes(self.bytes as f64),
            self.seconds(),
            self.write_seconds,
            self.sync_seconds,
            fmt_mib_s(bps)
        );
        println!(
            "before fsync (page cache only): {}",
            fmt_mib_s(rate(self.bytes, self.write_seconds))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_fill_is_not_trivial() {
        let mut b = vec![0u8; 4099];
        fill_random(&mut b, 1);
        let zeros = b.iter().filter(|&&x| x == 0).count();
        assert!(zeros < 100, "{zeros} zero bytes");
        assert_ne!(b[..8], b[8..16]);
    }
}
