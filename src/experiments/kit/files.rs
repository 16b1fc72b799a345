//! Scratch files for the file-system experiments: making, reopening uncached, timed
//! block reads and the device-read counter.

use crate::experiments::Context;
use crate::harness::{Harness, SampleSpec};
use crate::pagecache::{self, AlignedBuf};
use crate::results::Check;
use crate::rng::Rng;
use crate::scratch::{Scratch, ScratchFile};
use crate::units::fmt_bytes;
use anyhow::Context as _;
use std::fs::File;
use std::io::{Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

pub(crate) const BLOCK: usize = 4096;
pub(crate) const MIB: u64 = 1 << 20;

/// How many times a repeated check passed, and the last failure's detail.
#[derive(Debug, Default)]
pub(crate) struct RepeatedCheck {
    pub passed: usize,
    pub total: usize,
    pub last_failure: String,
}

impl RepeatedCheck {
    pub fn add(&mut self, c: &Check) {
        self.record(c.passed, || c.detail.clone());
    }
    /// Counts one outcome; `detail` is only built for a failure.
    pub fn record(&mut self, passed: bool, detail: impl FnOnce() -> String) {
        self.total += 1;
        if passed {
            self.passed += 1;
        } else {
            self.last_failure = detail();
        }
    }
    pub fn all(&self) -> bool {
        self.passed == self.total
    }
    /// A premise that every outcome passed: `detail` when all did, else the last failure.
    pub fn premise(&self, name: &str, detail: String) -> Check {
        let detail = if self.all() {
            detail
        } else {
            self.last_failure.clone()
        };
        Check::premise(name, self.all(), detail)
    }
}

/// Opens a file, even one already unlinked, again with other flags (O_DIRECT, F_NOCACHE).
pub(crate) fn reopen(file: &File, direct: bool, write: bool) -> std::io::Result<File> {
    if direct && crate::experiments::seams::get().no_direct {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    crate::platform::reopen(file, direct, write)
}

/// Whether a descriptor of this file accepts O_DIRECT reads of aligned 4 KiB blocks.
pub(crate) fn direct_works(file: &File) -> bool {
    let Ok(d) = reopen(file, true, false) else {
        return false;
    };
    let Ok(mut buf) = AlignedBuf::new(BLOCK, BLOCK) else {
        return false;
    };
    d.read_exact_at(&mut buf, 0).is_ok()
}

/// A scratch file of `size` bytes of incompressible data, flushed, and already unlinked.
pub(crate) fn make_file(
    scratch: &Scratch,
    name: &str,
    size: u64,
    seed: u64,
) -> anyhow::Result<ScratchFile> {
    let mut f = scratch.create_file(name, size)?;
    f.unlink_now()
        .with_context(|| format!("unlinking scratch file {name}"))?;
    append(&f.file, 0, size, seed)?;
    Ok(f)
}

/// Writes `[from, to)` with pseudo-random data, through O_DIRECT where it works, and flushes.
pub(crate) fn append(file: &File, from: u64, to: u64, seed: u64) -> anyhow::Result<()> {
    let direct = reopen(file, true, true).ok();
    let mut buf = AlignedBuf::new(MIB as usize, BLOCK)?;
    let mut rng = Rng::new(seed ^ from);
    let mut pos = from;
    let mut since_sync = 0u64;
    while pos < to {
        rng.fill(&mut buf);
        let n = (to - pos).min(MIB) as usize;
        let target = direct.as_ref().filter(|_| n % BLOCK == 0).unwrap_or(file);
        target
            .write_all_at(&buf[..n], pos)
            .context("writing a scratch file")?;
        pos += n as u64;
        since_sync += n as u64;
        // Few dirty pages: a small memory cgroup could otherwise stall or kill the run.
        if direct.is_none() && since_sync >= 32 * MIB {
            file.sync_data().context("flushing a scratch file")?;
            since_sync = 0;
        }
        anyhow::ensure!(!crate::scratch::stopping(), "interrupted");
    }
    file.sync_data().context("flushing a scratch file")?;
    Ok(())
}

/// Reads `[0, len)` with 1 MiB pread() calls through the page cache.
pub(crate) fn read_through(file: &File, len: u64, buf: &mut [u8]) -> anyhow::Result<()> {
    let mut pos = 0u64;
    while pos < len {
        let n = ((len - pos) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], pos)
            .context("reading a scratch file")?;
        pos += n as u64;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern {
    Sequential,
    Random,
}

impl Pattern {
    /// Its metric-name part, how its reads are made, and its access advice.
    fn row(&self) -> (&'static str, &'static str, crate::platform::Access) {
        match self {
            Pattern::Sequential => ("seq", "sequential read()", crate::platform::Access::Normal),
            Pattern::Random => (
                "random",
                "random pread() over a shuffled block order",
                crate::platform::Access::Random,
            ),
        }
    }
    pub fn name(&self) -> &'static str {
        self.row().0
    }
    pub fn describe(&self) -> &'static str {
        self.row().1
    }
    pub fn access(&self) -> crate::platform::Access {
        self.row().2
    }
}

pub(crate) struct BlockTimes {
    /// ns per block, one value per sample (one read, or a chunk of consecutive reads).
    pub per_block_ns: Vec<f64>,
    /// Blocks read, preempted samples included.
    pub blocks: u64,
    /// What the harness set aside or stopped short.
    pub notes: Vec<String>,
}

/// How `BlockReader::time` groups reads into samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timing {
    /// Every read timed on its own, every block at most once (device-bound reads).
    EachRead,
    /// Chunks of reads lasting about this long, wrapping around the file (cached reads).
    Chunks(Duration),
}

const MAX_SAMPLES: usize = 100_000;
pub(crate) const MIN_SAMPLES: usize = 5;

/// A pass of 4 KiB reads over a file: the next block of the order, and blocks read.
pub(crate) struct BlockReader<'a> {
    file: &'a File,
    pattern: Pattern,
    order: &'a [u32],
    nblocks: u64,
    timing: Timing,
    chunk: u64,
    /// Blocks issued so far in this pass over the file.
    next: u64,
    total: u64,
    buf: AlignedBuf,
}

impl<'a> BlockReader<'a> {
    pub fn new(
        file: &'a File,
        size: u64,
        pattern: Pattern,
        order: &'a [u32],
        timing: Timing,
    ) -> anyhow::Result<Self> {
        (&mut &*file).rewind()?;
        Ok(BlockReader {
            file,
            pattern,
            order,
            nblocks: size / BLOCK as u64,
            timing,
            chunk: if timing == Timing::EachRead { 1 } else { 8 },
            next: 0,
            total: 0,
            buf: AlignedBuf::new(BLOCK, BLOCK)?,
        })
    }

    /// Times the reads within `budget`, with no preemption check (reads block on purpose).
    pub fn time(mut self, ctx: &Context, budget: Duration) -> anyhow::Result<BlockTimes> {
        let h = ctx.harness(1);
        let Timing::Chunks(trial) = self.timing else {
            let n = (self.nblocks as usize).min(MAX_SAMPLES);
            return self.sample(&h, &SampleSpec::new(n, budget).min_n(MIN_SAMPLES));
        };
        let until = h.deadline(budget);
        // A first chunk of 8 reads sizes every later one to last about `trial`; fixed from
        // then on, so the mean of the samples is the mean per block (fio's mean latency).
        let mut t = self.sample(&h, &SampleSpec::new(1, budget))?;
        let per = t.per_block_ns.first().copied().unwrap_or(1.0).max(1.0);
        self.chunk = ((trial.as_nanos() as f64 / per) as u64).clamp(1, 4096);
        let spec = SampleSpec::new(MAX_SAMPLES - 1, until.remaining());
        let rest = self.sample(&h, &spec.min_n(MIN_SAMPLES - 1))?;
        t.per_block_ns.extend(rest.per_block_ns);
        t.notes.extend(rest.notes);
        t.blocks = rest.blocks;
        Ok(t)
    }

    /// Samples as `spec` says, each the next chunk, in order (a chunk at the end is shorter).
    fn sample(&mut self, h: &Harness, spec: &SampleSpec) -> anyhow::Result<BlockTimes> {
        debug_assert!(!spec.detect_preemption);
        let mut lens = Vec::new();
        let this = std::cell::RefCell::new(self);
        let s = h.try_sample_with(
            spec,
            || this.borrow_mut().next_chunk(),
            |&mut (start, n)| this.borrow_mut().read(start, n),
            |(_, n), _| lens.push(n as f64),
        )?;
        anyhow::ensure!(lens.len() == s.ns.len(), "a sample without its block count");
        let per_block_ns = s.ns.iter().zip(&lens).map(|(ns, n)| ns / n).collect();
        let blocks = this.into_inner().total;
        Ok(BlockTimes {
            per_block_ns,
            blocks,
            notes: s.notes,
        })
    }

    /// Untimed: the first block and length of the next chunk (wrapping in `Chunks`).
    fn next_chunk(&mut self) -> anyhow::Result<(u64, u64)> {
        anyhow::ensure!(!crate::scratch::stopping(), "interrupted");
        if self.next >= self.nblocks {
            anyhow::ensure!(self.timing != Timing::EachRead, "every block was read once");
            self.next = 0;
            (&mut &*self.file).rewind()?;
        }
        let n = self.chunk.min(self.nblocks - self.next);
        let start = self.next;
        self.next += n;
        self.total += n;
        Ok((start, n))
    }

    /// Timed: `n` reads from block `start` of the pass.
    fn read(&mut self, start: u64, n: u64) -> anyhow::Result<()> {
        for i in start..start + n {
            if self.pattern == Pattern::Sequential {
                let got = (&mut &*self.file).read(&mut self.buf).context("read")?;
                anyhow::ensure!(got == BLOCK, "short read of {got} bytes");
            } else {
                let (buf, pos) = (&mut self.buf, self.order[i as usize] as u64 * BLOCK as u64);
                self.file.read_exact_at(buf, pos).context("pread")?;
            }
        }
        Ok(())
    }
}

pub(crate) use crate::machine::storage::disk_of as device_of;

/// Why an uncached read of `d` gets no prediction: a device class does not fix its latency.
pub(crate) fn device_basis(d: &crate::machine::storage::Disk) -> String {
    format!(
        "{}; a device class does not fix its read latency and the parts table names no \
         published figure for it",
        disk_class(d)
    )
}

/// "sda is rotating disk (...)": the disk's class and why it was so classed.
fn disk_class(d: &crate::machine::storage::Disk) -> String {
    let class = d.class();
    format!("{} is {} ({})", d.name, class.kind.label(), class.why)
}

/// Bytes that uncached passes asked for, and what the disk's sectors-read counter counted.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceReads {
    /// The disk whose counter is read; None without a local block device.
    pub disk: Option<String>,
    pub requested: u64,
    /// Sectors counted during the passes; None once any reading of the counter failed.
    pub sectors: Option<u64>,
    /// The file system type of the folder (for the reason when there is no disk).
    pub fstype: Option<String>,
    /// Why the host may have answered what left the guest (a VM's virtual disk).
    pub host: Option<String>,
}

impl DeviceReads {
    pub fn new(ctx: &Context, dir: &Path) -> DeviceReads {
        let disk = device_of(dir);
        let host = disk.as_ref().and_then(|d| host_may_cache(ctx, d));
        let disk = disk.map(|d| d.name);
        DeviceReads {
            sectors: disk.as_ref().map(|_| 0),
            disk,
            requested: 0,
            fstype: crate::machine::storage::filesystem_of(dir).map(|m| m.fstype),
            host,
        }
    }
    pub fn counter(&self) -> Option<u64> {
        crate::machine::storage::sectors_read(self.disk.as_deref()?)
    }
    pub fn add(&mut self, before: Option<u64>, after: Option<u64>, bytes: u64) {
        self.requested += bytes;
        self.sectors = match (self.sectors, before, after) {
            (Some(s), Some(b), Some(a)) => Some(s + a.saturating_sub(b)),
            _ => None,
        };
    }
    /// Premise "uncached reads reached the device": O_DIRECT alone does not prove it, as a
    /// file system may answer from its own cache (ZFS ARC), compressed extents or memory.
    pub fn check(&self) -> Check {
        let name = "uncached reads reached the device (sectors-read counter)";
        let requested = self.requested;
        match (self.disk.as_deref(), self.sectors) {
            (Some(d), Some(sec)) => {
                let (read, asked) = ((sec * 512) as f64, requested as f64);
                let reached = requested > 0 && read >= REACHED_SHARE * asked;
                let pct = 100.0 * if asked > 0.0 { read / asked } else { 0.0 };
                let need = REACHED_SHARE * 100.0;
                let [read, asked] = [read, asked].map(fmt_bytes);
                let detail = format!("{d} read {read} while the uncached passes asked for {asked} ({pct:.0}%; /sys/block/{d}/stat, at least {need:.0}% needed)");
                match (&self.host, reached) {
                    (Some(host), true) => Check::unverified(name, format!("{detail}; {host}")),
                    _ => Check::premise(name, reached, detail),
                }
            }
            (Some(d), None) => Check::unverified(
                name,
                format!(
                    "{} could not be read, so nothing shows the uncached reads reached the disk",
                    crate::machine::storage::sectors_read_source(d)
                ),
            ),
            (None, _) => {
                let fs = self.fstype.as_deref().map(|fs| format!("{fs}: "));
                let fs = fs.unwrap_or_default();
                Check::unverified(name, format!("{fs}no block device with a sectors-read counter behind this file system (btrfs, ZFS, overlayfs, NFS, FUSE...), where a cache of the file system may answer O_DIRECT reads: the uncached figures may be cache hits"))
            }
        }
    }
}

/// Why a read that left the guest for disk `d` may have been the host's cache hit.
fn host_may_cache(ctx: &Context, d: &crate::machine::storage::Disk) -> Option<String> {
    use crate::machine::storage::DiskKind;
    let class = d.class();
    let virtual_disk = matches!(
        class.kind,
        DiskKind::Virtual | DiskKind::NetworkBlock | DiskKind::Unknown
    );
    (ctx.machine.virtualization.is_vm && virtual_disk && !ctx.options.host_cache_none).then(|| {
        format!(
            "but this is a VM and {}: the counter shows the reads left the guest, not that the \
             host's storage served them, as the host may answer from its page cache; pass \
             --host-cache none where the host's disk is set to cache=none",
            disk_class(d)
        )
    })
}

/// Share of the requested bytes the device must read (others' reads only add to it).
const REACHED_SHARE: f64 = 0.9;

/// Evicts a file and checks it; a premise when the uncached read relies on it (`must`).
pub(crate) fn evict_check(
    ctx: &Context,
    file: &File,
    what: &str,
    must: bool,
) -> anyhow::Result<Check> {
    let e = pagecache::evict(file, ctx.options.drop_caches)?;
    let name = format!("{what}: evicted from the page cache (mincore)");
    let mut detail = e.describe();
    if !e.verified() && !ctx.options.drop_caches {
        detail.push_str("; run as root with --drop-caches to allow dropping the whole page cache");
    }
    Ok(if must {
        Check::premise(&name, e.verified(), detail)
    } else {
        Check::sanity(&name, e.verified(), detail)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class each recorded machine's disk is identified as, and why, in the reason its
    /// uncached reads get no prediction (never a rotating disk for a virtual or cloud disk).
    #[test]
    fn device_models_name_their_class_from_recorded_sysfs() {
        use crate::machine::{facts::FactRoot, Machine};
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/machines");
        let cases = [
            ("qemu-virtio-scsi", "sda", "virtual disk (virtio-scsi bus"),
            (
                "laptop-luks-nvme",
                "dm-0",
                "local NVMe flash (dm-crypt (nvme0n1p3_crypt) over nvme0n1",
            ),
            (
                "laptop-luks-nvme",
                "dm-1",
                "(LVM (vgubuntu-root) over nvme0n1",
            ),
            (
                "server-md-raid",
                "md0",
                "local flash (md raid1 over sda, sdb",
            ),
            ("server-md-raid", "sdc", "rotating disk"),
            (
                "aws-ebs-nitro",
                "nvme0n1",
                "network block storage (Amazon Elastic Block Store",
            ),
            ("aws-ebs-nitro", "nvme1n1", "local NVMe flash"),
            (
                "gcp-persistent-disk",
                "sda",
                "network block storage (Google Persistent Disk",
            ),
        ];
        for (tree, name, basis) in cases {
            let m = Machine::gather_from(&FactRoot::recorded(dir.join(tree)));
            let d = m.storage.disks.iter().find(|d| d.name == name).unwrap();
            let why = device_basis(d);
            assert!(why.contains(basis), "{tree} {name}: {why}");
            assert!(
                why.contains("names no published figure"),
                "{tree} {name}: {why}"
            );
        }
    }

    /// The premise after passes that asked for `requested` bytes and counted `sectors`.
    fn reached_device_check(requested: u64, sectors: Option<u64>, disk: Option<&str>) -> Check {
        let disk = disk.map(Into::into);
        let fstype = None;
        DeviceReads {
            disk,
            requested,
            sectors,
            fstype,
            host: None,
        }
        .check()
    }

    /// A VM's virtual disk: a counter that saw every read proves only that they left the
    /// guest, so the premise is unverified; `--host-cache none` makes it a premise again.
    #[test]
    fn a_vm_host_may_answer_what_left_the_guest() {
        let clock = crate::clock::MockClock::new(1);
        let mut w = crate::experiments::testing::World::live(&clock);
        w.machine.virtualization.is_vm = true;
        let disk = crate::machine::storage::Disk {
            name: "vda".into(),
            bus: Some("virtio".into()),
            ..Default::default()
        };
        let read = |w: &mut crate::experiments::testing::World, host_cache_none: bool| {
            w.options.host_cache_none = host_cache_none;
            let host = w.with_ctx(|ctx| host_may_cache(ctx, &disk));
            let mut d = DeviceReads {
                disk: Some("vda".into()),
                sectors: Some(0),
                host,
                ..Default::default()
            };
            d.add(Some(0), Some(2048), 1 << 20);
            d.check()
        };
        let c = read(&mut w, false);
        assert!(c.unverified && !c.passed, "{c:?}");
        assert!(c.detail.contains("--host-cache none"), "{}", c.detail);
        let c = read(&mut w, true);
        assert!(c.passed && c.premise && !c.unverified, "{c:?}");
        // Not a VM: the counter is the device's.
        w.machine.virtualization.is_vm = false;
        assert!(read(&mut w, false).passed);
    }

    #[test]
    fn reads_served_from_a_cache_fail_the_device_premise() {
        let mb = 1 << 20;
        // The device read what was asked (or more: readahead, other processes).
        assert!(reached_device_check(10 * mb, Some(20480), Some("vda")).passed);
        assert!(reached_device_check(10 * mb, Some(40000), Some("vda")).passed);
        // O_DIRECT answered from a cache (ZFS ARC) or compressed extents: few sectors.
        let c = reached_device_check(10 * mb, Some(100), Some("vda"));
        assert!(!c.passed && c.premise, "{}", c.detail);
        assert!(!reached_device_check(0, Some(0), Some("vda")).passed);
        // No counter: not verified, and said so.
        let c = reached_device_check(10 * mb, None, None);
        assert!(!c.passed && c.premise && c.unverified, "{c:?}");
        assert!(c.detail.contains("cache hits"), "{}", c.detail);
        let c = reached_device_check(10 * mb, None, Some("vda"));
        assert!(
            c.unverified && c.detail.contains("/sys/block/vda/stat"),
            "{c:?}"
        );
        // A counter that refutes is a failure, not an unverified premise.
        assert!(!reached_device_check(10 * mb, Some(100), Some("vda")).unverified);
        // Accumulation: one unreadable counter spoils the sum.
        let mut d = DeviceReads {
            disk: Some("vda".into()),
            sectors: Some(0),
            ..Default::default()
        };
        d.add(Some(100), Some(2148), 1 << 20);
        assert_eq!(d.sectors, Some(2048));
        assert!(d.check().passed);
        d.add(Some(5), None, 4096);
        assert_eq!(d.sectors, None);
        assert!(!d.check().passed);
    }

    /// A `blocks`-block file in a temporary folder.
    fn block_file(blocks: u64) -> (tempfile::TempDir, File) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("blocks");
        std::fs::write(&path, vec![7u8; blocks as usize * BLOCK]).unwrap();
        (d, File::open(&path).unwrap())
    }

    /// A harness on a mock clock: each sample costs the clock's stop overhead, which is
    /// subtracted again, so only the budget and the file decide how many are taken.
    fn mock_harness(clock: &crate::clock::MockClock) -> Harness<'_> {
        Harness::new(clock, crate::harness::HarnessConfig::default(), 0.0)
    }

    #[test]
    fn each_read_sampling_reads_every_block_at_most_once() {
        let (_d, f) = block_file(10);
        let clock = crate::clock::MockClock::new(100);
        let h = mock_harness(&clock);
        let order: Vec<u32> = (0..10).rev().collect();
        for pattern in [Pattern::Sequential, Pattern::Random] {
            // A long budget: the pass ends when the file does, not with an error.
            let mut r =
                BlockReader::new(&f, 10 * BLOCK as u64, pattern, &order, Timing::EachRead).unwrap();
            let spec = SampleSpec::new(r.nblocks as usize, Duration::from_secs(60)).min_n(5);
            let t = r.sample(&h, &spec).unwrap();
            assert_eq!((t.per_block_ns.len(), t.blocks), (10, 10));
            // The next sample would need a second pass: refused.
            assert!(r.next_chunk().is_err());
        }
    }

    #[test]
    fn chunked_sampling_wraps_and_stops_at_the_budget() {
        let (_d, f) = block_file(10);
        // 100 ticks (ns) per sample against a 2 us budget: 20 samples of 4 blocks, the
        // chunk at the end of each pass being 2.
        let clock = crate::clock::MockClock::new(100);
        let h = mock_harness(&clock);
        let order: Vec<u32> = (0..10).collect();
        let mut r = BlockReader::new(
            &f,
            10 * BLOCK as u64,
            Pattern::Sequential,
            &order,
            Timing::Chunks(Duration::from_micros(1)),
        )
        .unwrap();
        r.chunk = 4;
        let t = r
            .sample(&h, &SampleSpec::new(1000, Duration::from_micros(2)))
            .unwrap();
        assert!(
            (20..=22).contains(&t.per_block_ns.len()),
            "{}",
            t.per_block_ns.len()
        );
        // Three samples per pass of 10 blocks: 4 + 4 + 2.
        let samples = t.per_block_ns.len() as u64;
        assert_eq!(
            t.blocks,
            samples / 3 * 10 + [0, 4, 8][(samples % 3) as usize]
        );
    }

    #[test]
    fn device_of_the_current_directory_is_found_or_none() {
        // Either a block device with a name, or none (overlay, tmpfs): never a panic.
        if let Some(d) = device_of(Path::new(".")) {
            assert!(!d.name.is_empty());
        }
    }
}
