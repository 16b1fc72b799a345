//! cpu.syscall: the cost of entering the kernel, against a vDSO call that does not.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::HarnessConfig;
use crate::opaque::repeat;
use crate::results::{Check, Prediction};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

pub struct Syscall;

/// Metrics measured, each with an equal part of the budget.
const PARTS: usize = 5;

/// cpu.syscall's harness settings under `profile`: its budget split over its metrics,
/// preempted trials repeated (`ctx.cpu_harness(PARTS)` in a run; `io syscalls` outside one).
pub fn harness_config(profile: Profile) -> HarnessConfig {
    profile
        .harness()
        .for_budget(Syscall.budget(profile), PARTS)
        .cpu_only()
}

// The kernels, one per operation (lmbench's do_getppid shape): `n` calls in the
// canonical loop. Not inlined, so `io syscalls` times the same code as a run.

/// `n` raw syscall(SYS_getppid) (no C-library caching).
#[inline(never)]
pub fn getppid(n: u64) {
    repeat(n, crate::platform::raw_getppid)
}

/// `n` raw syscall(SYS_getpid).
#[inline(never)]
pub fn getpid(n: u64) {
    repeat(n, crate::platform::raw_getpid)
}

/// `n` write() calls of 0 bytes to `fd` (open for writing): the file-descriptor lookup.
#[inline(never)]
pub fn write0(fd: RawFd, n: u64) {
    let empty = [0u8; 1];
    // SAFETY: fd is open for writing; a 0-byte write reads nothing from the buffer.
    repeat(n, || unsafe {
        libc::write(fd, empty.as_ptr() as *const libc::c_void, 0)
    })
}

/// `n` getcwd() calls into `buf`: the path walk and copy.
#[inline(never)]
pub fn getcwd(buf: &mut [u8], n: u64) {
    let (p, len) = (buf.as_mut_ptr() as *mut libc::c_char, buf.len());
    // SAFETY: p points to len writable bytes of `buf`, borrowed for the whole loop.
    repeat(n, || unsafe { libc::getcwd(p, len) })
}

/// `n` clock_gettime(CLOCK_MONOTONIC) calls, which the vDSO answers without entering
/// the kernel.
#[inline(never)]
pub fn clock_gettime(n: u64) {
    repeat(n, || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_nsec
    })
}

/// A mitigation from the machine description that adds work to every kernel entry.
fn entry_mitigation(m: &std::collections::BTreeMap<String, String>) -> Option<String> {
    m.iter()
        .find(|(name, v)| {
            (name.as_str() == "meltdown" && v.contains("PTI"))
                || (name.as_str() == "mds" && v.contains("Clear CPU buffers"))
                || (name.as_str() == "retbleed"
                    && (v.contains("IBPB") || v.contains("untrained return")))
                || (name.as_str() == "spec_rstack_overflow" && v.contains("Safe RET"))
        })
        .map(|(name, v)| format!("{name}: {}", v.trim()))
}

const META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: "cpu.syscall",
    title: "System call cost",
    description: "minimal system calls (getppid, getpid, write 0 bytes, getcwd) against a vDSO clock_gettime",
    method: "Each call in the calibrated loop, loop overhead subtracted: raw syscall(SYS_getppid) and syscall(SYS_getpid) \
        (no C-library caching), write() of 0 bytes to /dev/null (file descriptor lookup), getcwd() into a buffer \
        (path walk and copy), and clock_gettime(CLOCK_MONOTONIC), which the vDSO answers in user space without \
        entering the kernel. getppid is the headline figure (the same call perf bench syscall basic makes).",
    needs: crate::experiments::Needs::NONE,
    // Kernel entry and exit: serialising, so not slowed by a busy SMT sibling's share of
    // issue slots as a loop is.
    bottleneck: crate::results::Bottleneck::Chain,
    // One CPU of each kind of core on hybrid CPUs (runner::per_kind).
    per_core_kind: true,
    subtracts_loop: true,
};

impl Experiment for Syscall {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &META
    }
    fn budget(&self, p: Profile) -> Duration {
        p.scale(Duration::from_millis(1500))
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        // A kernel entry's cost depends on the kernel's entry code and its mitigations as
        // much as on the core; no published figure per part is in the table.
        let why = format!(
            "the parts table names no published kernel-entry cost (it depends on the kernel and its \
             mitigations: {})",
            entry_mitigation(&ctx.machine.cpu.mitigations)
                .unwrap_or_else(|| "none that adds entry work listed".into())
        );
        let mut v: Vec<(String, Prediction)> = ["getppid", "getpid", "write_devnull_0", "getcwd"]
            .iter()
            .map(|n| (n.to_string(), Prediction::withheld(why.clone())))
            .collect();
        // The vDSO call is a counter read in user space: cpu.timer measured the fenced pair.
        v.push((
            "clock_gettime_vdso".into(),
            match ctx.earlier_median("cpu.timer", "read_pair") {
                Some(pair) => Prediction::new(
                    pair / 2.0,
                    "one counter read: half of cpu.timer's fenced read pair (the vDSO's conversion \
                     arithmetic is not in the model)",
                )
                .measured("read_pair", pair, "ns", "measured: cpu.timer read_pair"),
                None => Prediction::withheld("cpu.timer did not run, so no counter read was measured"),
            },
        ));
        v
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let h = ctx.cpu_harness(PARTS);
        let devnull = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        let fd = devnull.as_raw_fd();
        let mut buf = vec![0u8; 4096];

        (ctx.progress)("getppid");
        let m = h.measure(1.0, getppid);
        out.measured("getppid", "raw syscall(SYS_getppid)", &m);
        (ctx.progress)("getpid");
        let m = h.measure(1.0, getpid);
        out.measured("getpid", "raw syscall(SYS_getpid)", &m);
        (ctx.progress)("write");
        let m = h.measure(1.0, |n| write0(fd, n));
        out.measured("write_devnull_0", "write() of 0 bytes to /dev/null", &m);
        (ctx.progress)("getcwd");
        let m = h.measure(1.0, |n| getcwd(&mut buf, n));
        out.measured("getcwd", "getcwd() into a 4 KiB buffer", &m);
        (ctx.progress)("clock_gettime");
        let m = h.measure(1.0, clock_gettime);
        out.measured(
            "clock_gettime_vdso",
            "clock_gettime(CLOCK_MONOTONIC) through libc (the vDSO, where the clocksource allows it)",
            &m,
        );
        drop(buf);
        out.pool(ctx);

        let (sys, vdso) = (out.median("getppid"), out.median("clock_gettime_vdso"));
        let loop_ns = ctx.clock.ticks_to_ns(ctx.loop_ticks);
        out.check(Check::sanity(
            "a system call costs more than a loop iteration",
            sys > loop_ns,
            format!("getppid {sys:.1} ns, loop {loop_ns:.2} ns"),
        ));
        out.check(Check::sanity(
            "vDSO call cheaper than a kernel entry",
            vdso < sys,
            format!("clock_gettime {vdso:.1} ns, getppid {sys:.1} ns"),
        ));
        // clock_gettime is said to stay in user space only when it is cheaper than a kernel
        // entry beyond noise (on an hpet or acpi_pm clocksource it is a system call).
        let sep = match (out.get("clock_gettime_vdso"), out.get("getppid")) {
            (Some(v), Some(s)) => crate::analysis::separation(&v.summary, &s.summary),
            _ => crate::analysis::Separation::Overlap,
        };
        let how = match sep {
            crate::analysis::Separation::Below => {
                "below any kernel entry beyond both 95% intervals, so it stayed in user space (the vDSO)".to_string()
            }
            _ => format!(
                "not below a kernel entry beyond noise, so it may enter the kernel here (clocksource {})",
                ctx.machine.os.clocksource.as_deref().unwrap_or("unknown")
            ),
        };
        out.finding(
            format!(
                "Entering the kernel (getppid) costs {}; clock_gettime costs {} ({:.0}x less), {how}.",
                crate::units::fmt_ns(sys),
                crate::units::fmt_ns(vdso),
                sys / vdso,
            ),
            &["getppid", "clock_gettime_vdso"],
        );
        Ok(out)
    }
}
