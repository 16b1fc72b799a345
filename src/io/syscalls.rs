//! `io syscalls`: read() calls per second with 1-byte reads, lseek() calls per second,
//! and how they compare with osmeter's own minimal-system-call cost (cpu.syscall): the
//! comparison times a read and a seek as getppid is timed (wall time, the same harness).

use super::{open_input, os_err};
use crate::error;
use crate::experiments::cpu::syscall;
use crate::experiments::Profile;
use crate::harness::HarnessConfig;
use crate::stats::Summary;
use crate::units::{fmt_ns, fmt_si};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TRIALS: usize = 10;
const BATCH: u64 = 1024;
/// The warm-up stops here even if its batches are not done (a very slow file system).
const WARM_UP_LIMIT: Duration = Duration::from_secs(2);

pub struct SyscallsOutcome {
    pub file: PathBuf,
    /// Calls per second of thread CPU time, one value per trial.
    pub read_rates: Summary,
    pub lseek_rates: Summary,
    pub eof_rewinds: u64,
    pub empty: bool,
    /// cpu.syscall medians (ns) when the comparison ran.
    pub getppid_ns: Option<f64>,
    pub write0_ns: Option<f64>,
    /// A 1-byte read and a seek timed as getppid is (wall time, same harness), in ns.
    pub read_wall_ns: Option<f64>,
    pub lseek_wall_ns: Option<f64>,
    pub cpu: Option<usize>,
    /// The kind of core `cpu` is on a hybrid CPU (the kind whose cpu.syscall figures
    /// compare: the reads run there too).
    pub kind: Option<String>,
}

/// Where the comparison and the reads run: the CPU a run pins to (`Topology::choose_cpu`:
/// a performance core on a hybrid CPU, so getppid and the reads are timed on one kind of
/// core), with its kind.
fn comparison_cpu(
    topology: &crate::machine::Topology,
    allowed: &[usize],
) -> Option<(usize, Option<String>)> {
    let cpu = topology.choose_cpu(None, allowed).ok()?;
    Some((cpu, topology.place(cpu).and_then(|p| p.kind.clone())))
}

/// Calls per second of thread CPU time, one value per trial, through the harness's
/// CPU-time trials: `op` in batches for `per_trial` of wall time, TRIALS times, after an
/// untimed warm-up. CPU time, not wall time: on a busy machine the thread is preempted
/// for long stretches that are no system call's cost (the harness behind cpu.syscall
/// rejects such trials as outliers instead).
fn trials(
    per_trial: Duration,
    mut op: impl FnMut() -> error::Result<()>,
) -> error::Result<Vec<f64>> {
    let h = super::harness(HarnessConfig::default(), 0.0);
    // A few batches so the first trial is not paying for cold caches.
    h.warm_up((4 * BATCH) as usize, WARM_UP_LIMIT, &mut op)?;
    let ns = h.cpu_time_trials(TRIALS, per_trial, BATCH, op)?;
    Ok(ns.iter().map(|n| 1e9 / n).collect())
}

/// The comparison's medians (ns), all timed alike: cpu.syscall's getppid and
/// write(/dev/null, 0), and a 1-byte read and a seek on `fd`.
struct Comparison {
    getppid: f64,
    write0: f64,
    read: f64,
    lseek: f64,
    cpu: usize,
    kind: Option<String>,
}

/// `Comparison` measured the way cpu.syscall does in the smoke profile (its kernels and
/// harness settings, loop cost subtracted), on the CPU a run would pin to
/// (`Topology::choose_cpu`); this thread stays pinned there.
fn cpu_syscall(fd: libc::c_int) -> Option<Comparison> {
    let profile = Profile::Smoke;
    // The topology alone: the rest of the machine description is not needed here.
    let (_, topology) = crate::machine::cpu::gather(&crate::machine::FactRoot::live());
    let (cpu, kind) = comparison_cpu(&topology, &crate::platform::allowed_cpus())?;
    let _ = crate::platform::pin_to_cpu(cpu);
    let loop_ticks = crate::harness::measure_loop_ticks(super::clock(), &profile.harness());
    let h = super::harness(syscall::harness_config(profile), loop_ticks);
    let getppid = h.measure(1.0, syscall::getppid);
    let devnull = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .ok()?;
    let write0 = h.measure(1.0, |n| syscall::write0(devnull.as_raw_fd(), n));
    let mut byte = [0u8; 1];
    // SAFETY (both): plain read into one writable byte and lseek on the open `fd`; at end
    // of file the read returns 0 and the seek starts over.
    let read = h.measure(1.0, |n| {
        crate::opaque::repeat(n, || unsafe {
            if libc::read(fd, byte.as_mut_ptr() as *mut libc::c_void, 1) == 0 {
                libc::lseek(fd, 0, libc::SEEK_SET);
            }
        })
    });
    let lseek = h.measure(1.0, |n| {
        crate::opaque::repeat(n, || unsafe { libc::lseek(fd, 4097, libc::SEEK_SET) })
    });
    let median = |m: &crate::harness::Measurement| Summary::of(&m.per_op_ns).map(|s| s.median);
    let now = crate::platform::current_cpu()?;
    // The kind of the CPU the thread is on (it is the chosen one unless pinning failed).
    let kind = if now == cpu {
        kind
    } else {
        topology.place(now).and_then(|p| p.kind.clone())
    };
    Some(Comparison {
        getppid: median(&getppid)?,
        write0: median(&write0)?,
        read: median(&read)?,
        lseek: median(&lseek)?,
        cpu: now,
        kind,
    })
}

pub fn run(path: &Path, time: Duration, compare: bool) -> error::Result<SyscallsOutcome> {
    let (file, size) = open_input(path, 0)?;
    // The comparison pins this thread to the runner's CPU; the reads then run there too.
    let fd = file.as_raw_fd();
    let cmp = if compare { cpu_syscall(fd) } else { None };
    let per_trial = time / (TRIALS as u32);
    let mut byte = [0u8; 1];
    let mut rewinds = 0u64;
    let seek0 = |what: &str| -> error::Result<()> {
        // SAFETY: plain lseek on an open descriptor.
        if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
            return Err(os_err(path, what, std::io::Error::last_os_error()));
        }
        Ok(())
    };
    seek0("lseek")?;
    let reads = trials(per_trial, || {
        // SAFETY: byte is one writable byte.
        let n = unsafe { libc::read(fd, byte.as_mut_ptr() as *mut libc::c_void, 1) };
        if n < 0 {
            return Err(os_err(path, "read failed", std::io::Error::last_os_error()));
        }
        if n == 0 && size > 0 {
            // End of file: start over (one extra lseek per file length of reads).
            rewinds += 1;
            seek0("lseek")?;
        }
        Ok(())
    })?;
    let mut pos: i64 = 0;
    let seeks = trials(per_trial, || {
        // Different offsets each time; SEEK_SET only updates f_pos, no I/O.
        pos = (pos + 4097) & 0xf_ffff;
        // SAFETY: plain lseek on an open descriptor.
        if unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_SET) } < 0 {
            return Err(os_err(
                path,
                "lseek failed",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    })?;
    let summary =
        |v: &[f64]| Summary::of(v).ok_or_else(|| super::Error::runtime("no trials completed"));
    Ok(SyscallsOutcome {
        file: path.to_path_buf(),
        read_rates: summary(&reads)?,
        lseek_rates: summary(&seeks)?,
        eof_rewinds: rewinds,
        empty: size == 0,
        getppid_ns: cmp.as_ref().map(|c| c.getppid),
        write0_ns: cmp.as_ref().map(|c| c.write0),
        read_wall_ns: cmp.as_ref().map(|c| c.read),
        lseek_wall_ns: cmp.as_ref().map(|c| c.lseek),
        cpu: cmp.as_ref().map(|c| c.cpu),
        kind: cmp.and_then(|c| c.kind),
    })
}

impl SyscallsOutcome {
    /// The rate of a call taking `ns` over the rate of one taking `base` (both wall time).
    fn ratio(ns: Option<f64>, base: Option<f64>) -> Option<f64> {
        Some(base? / ns?)
    }

    pub fn print(&self, json: bool) {
        let r = self.read_rates.median;
        let l = self.lseek_rates.median;
        if json {
            super::print_json(&serde_json::json!({
                "command": "syscalls",
                "file": self.file.display().to_string(),
                "read_1byte_per_s": self.read_rates,
                "lseek_per_s": self.lseek_rates,
                "read_1byte_ns": 1e9 / r,
                "lseek_ns": 1e9 / l,
                "eof_rewinds": self.eof_rewinds,
                "empty_file": self.empty,
                "cpu_syscall": {
                    "getppid_ns": self.getppid_ns,
                    "write_devnull_0_ns": self.write0_ns,
                    "read_1byte_wall_ns": self.read_wall_ns,
                    "lseek_wall_ns": self.lseek_wall_ns,
                    "read_rate_over_getppid_rate": Self::ratio(self.read_wall_ns, self.getppid_ns),
                    "read_rate_over_write0_rate": Self::ratio(self.read_wall_ns, self.write0_ns),
                    "lseek_rate_over_getppid_rate": Self::ratio(self.lseek_wall_ns, self.getppid_ns),
                    "pinned_cpu": self.cpu,
                    "pinned_core_kind": self.kind,
                },
            }));
            return;
        }
        let line = |name: &str, s: &Summary| {
            println!(
                "{name:<16} {:>9}/s  ({} per call; {} trials, range {}-{}/s, CV {:.1}%)",
                fmt_si(s.median),
                fmt_ns(1e9 / s.median),
                s.n,
                fmt_si(s.min),
                fmt_si(s.max),
                s.cov * 100.0
            )
        };
        line("read(1 byte)", &self.read_rates);
        line("lseek(SEEK_SET)", &self.lseek_rates);
        if self.empty {
            println!("note: the file is empty, so every read() returned 0 and copied nothing");
        } else if self.eof_rewinds > 0 {
            println!(
                "note: reached end of file {} time(s); each time one lseek() to 0 was added",
                self.eof_rewinds
            );
        }
        let (g, w) = (self.getppid_ns, self.write0_ns);
        let (Some(g), Some(w), Some(rw), Some(lw)) = (g, w, self.read_wall_ns, self.lseek_wall_ns)
        else {
            return;
        };
        println!(
            "cpu.syscall (same CPU {}{}): getppid {} -> {}/s; write(/dev/null, 0) {} -> {}/s",
            self.cpu.map(|c| c.to_string()).unwrap_or("-".into()),
            self.kind
                .as_ref()
                .map(|k| format!(", a {k} core, where the reads ran too"))
                .unwrap_or_default(),
            fmt_ns(g),
            fmt_si(1e9 / g),
            fmt_ns(w),
            fmt_si(1e9 / w)
        );
        println!("{}", comparison_line(g, w, rw, lw));
    }
}

/// The comparison, every figure timed alike (wall time, the same harness); a difference
/// is said only where the read took longer than getppid.
fn comparison_line(getppid: f64, write0: f64, read: f64, lseek: f64) -> String {
    let diff = if read > getppid {
        format!("{} more than getppid", fmt_ns(read - getppid))
    } else {
        "no longer than getppid".into()
    };
    format!(
        "timed as getppid is: read(1 byte) {} ({diff}), rate {:.2}x getppid's, {:.2}x write(0)'s; lseek {} ({:.2}x getppid's rate)",
        fmt_ns(read),
        getppid / read,
        write0 / read,
        fmt_ns(lseek),
        getppid / lseek
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review §2b: the difference was CPU time against wall time and could be negative,
    /// with a mechanism asserted; now both sides are wall time and it is never negative.
    #[test]
    fn the_comparison_never_prints_a_negative_difference() {
        let l = comparison_line(100.0, 150.0, 80.0, 90.0);
        assert!(
            l.contains("no longer than getppid") && !l.contains('-'),
            "{l}"
        );
        let l = comparison_line(100.0, 150.0, 250.0, 90.0);
        assert!(
            l.contains("150.0 ns more than getppid") && l.contains("0.40x"),
            "{l}"
        );
        assert!(!l.contains("page cache") && !l.contains("lock"), "{l}");
    }

    /// Issue 21: on a hybrid CPU the comparison (and the reads) run on the CPU a run
    /// measures on, a performance core, never the last allowed CPU (an efficiency core).
    #[test]
    fn the_comparison_runs_on_the_runs_kind_of_core() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/machines/intel-hybrid-laptop");
        let (_, t) = crate::machine::cpu::gather(&crate::machine::FactRoot::recorded(&dir));
        let all = t.allowed.clone();
        assert_eq!(
            t.place(*all.last().unwrap()).unwrap().kind.as_deref(),
            Some("efficiency")
        );
        let (cpu, kind) = comparison_cpu(&t, &all).unwrap();
        assert_eq!(Some(cpu), t.chosen_cpu);
        assert_eq!(kind.as_deref(), Some("performance"));
        // Only efficiency cores allowed: one of them, named as such.
        let (cpu, kind) = comparison_cpu(&t, &[12, 13]).unwrap();
        assert!([12, 13].contains(&cpu));
        assert_eq!(kind.as_deref(), Some("efficiency"));
    }
}
