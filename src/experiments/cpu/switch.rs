//! cpu.thread-switch and cpu.process-switch: one context switch, from a pipe ping-pong
//! between two tasks pinned to one CPU, less the pipe cost (lmbench lat_ctx's method).
//!
//! Both experiments share one partner loop (`echo_loop`), so the thread and process
//! figures differ only in what a switch between the two tasks has to change.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::harness::Harness;
use crate::opaque::repeat;
use crate::platform;
use crate::results::{Check, Prediction, Series};
use crate::units::{fmt_bytes, fmt_ns};
use anyhow::{anyhow, bail, Context as _};
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub struct ThreadSwitch;
pub struct ProcessSwitch;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Thread,
    Process,
}

impl Kind {
    const fn id(self) -> &'static str {
        match self {
            Kind::Thread => "cpu.thread-switch",
            Kind::Process => "cpu.process-switch",
        }
    }
    fn noun(self) -> &'static str {
        match self {
            Kind::Thread => "threads",
            Kind::Process => "processes",
        }
    }
}

/// Cache-line stride for touching a working set (one word read and written per line):
/// 128 bytes on Apple silicon (hw.cachelinesize), 64 on the x86-64 and Arm server cores
/// osmeter runs on.
const LINE: usize = if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    128
} else {
    64
};
/// The partner samples its CPU every this many rounds (cheap: sched_getcpu is a vDSO call).
const SAMPLE_EVERY: u64 = 64;
/// Round trips done before measuring, so the partner's start-up is not measured.
const WARM_ROUNDS: usize = 200;
/// ... or for at most this long (cross-CPU round trips on a busy VM can take 100 us).
const WARM_LIMIT: Duration = Duration::from_millis(10);
/// Model: kernel work of one pipe read or write beyond a bare fd write (lock, copy one
/// byte, wake-up check), in core cycles.
const PIPE_OP_CYCLES: f64 = 300.0;
/// Model: one context switch costs about this many minimal system calls (schedule(),
/// wake-up, register and FPU state; all scale with the same entry and mitigation costs).
/// lmbench's classic tables put lat_ctx 2p/0K at 10-20x lat_syscall null.
const SWITCH_SYSCALLS: f64 = 10.0;
/// Model: extra cycles an address-space change adds to a switch (CR3 load, TLB refill of
/// the few pages the loop touches).
const SWITCH_MM_CYCLES: f64 = 1500.0;
/// Model: a cross-CPU wake-up (IPI to an idle CPU and its exit from idle), bare metal and
/// under a hypervisor (the IPI and the idle exit both trap).
const WAKE_IPI_NS_METAL: f64 = 2_000.0;
const WAKE_IPI_NS_VM: f64 = 10_000.0;

/// A pipe as (read end, write end), close-on-exec so spawned programs never inherit it.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    crate::platform::pipe()
}

/// Reads one byte: 1 on success, 0 on end of file, -1 on error. Async-signal-safe.
fn read_byte(fd: RawFd, b: &mut u8) -> isize {
    loop {
        // SAFETY: b is one writable byte.
        let r = unsafe { libc::read(fd, b as *mut u8 as *mut libc::c_void, 1) };
        // errno is thread-local; reading it is async-signal-safe.
        if r < 0 && crate::platform::interrupted() {
            continue;
        }
        return r;
    }
}

/// Writes one byte; true when it went through. Async-signal-safe.
fn write_byte(fd: RawFd, b: u8) -> bool {
    loop {
        // SAFETY: &b is one readable byte.
        let r = unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
        if r < 0 && crate::platform::interrupted() {
            continue;
        }
        return r == 1;
    }
}

fn getcpu() -> i32 {
    crate::platform::current_cpu_raw()
}

/// Reads and writes one word per cache line of `len` bytes at `buf` (volatile, so the
/// compiler keeps every access). Async-signal-safe.
fn touch(buf: *mut u8, len: usize) {
    let mut off = 0;
    while off + 8 <= len {
        // SAFETY: callers pass a buffer of at least `len` bytes from a Vec<u64>, so
        // buf + off is 8-byte aligned and in bounds.
        unsafe {
            let p = buf.add(off) as *mut u64;
            p.write_volatile(p.read_volatile().wrapping_add(1));
        }
        off += LINE;
    }
}

/// A zeroed working-set buffer (u64 words, so touches are aligned).
fn working_set(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8).max(1)]
}

/// Where the partner ran. Plain integers so a forked child can send it through a pipe.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CpuReport {
    rounds: u64,
    samples: u64,
    /// Samples on a CPU other than the expected one.
    off: u64,
    /// The last unexpected CPU seen, or -1.
    seen_off: i64,
}

impl CpuReport {
    fn sample(&mut self, expect: i32) {
        let c = getcpu();
        self.samples += 1;
        if c != expect {
            self.off += 1;
            self.seen_off = c as i64;
        }
    }
}

/// The partner: echo each byte from `rfd` back on `wfd` until end of file, touching its
/// working set before each echo and sampling its CPU. Uses only read, write and
/// sched_getcpu, so a forked child of a multithreaded parent may run it.
fn echo_loop(rfd: RawFd, wfd: RawFd, expect: i32, buf: *mut u8, len: usize) -> CpuReport {
    let mut r = CpuReport {
        seen_off: -1,
        ..Default::default()
    };
    r.sample(expect);
    touch(buf, len);
    let mut b = 0u8;
    while read_byte(rfd, &mut b) == 1 {
        touch(buf, len);
        if !write_byte(wfd, b) {
            break;
        }
        r.rounds += 1;
        if r.rounds % SAMPLE_EVERY == 0 {
            r.sample(expect);
        }
    }
    r.sample(expect);
    r
}

enum Partner {
    Thread(std::thread::JoinHandle<CpuReport>),
    Process(libc::pid_t),
}

/// The measuring task's side of a ping-pong: pipe A carries the token to the partner,
/// pipe B brings it back. Dropping it closes A, so the partner sees end of file and
/// exits; it is then joined or reaped, on error paths too.
struct PingPong {
    to: Option<OwnedFd>,
    from: Option<OwnedFd>,
    partner: Option<Partner>,
    buf: Vec<u64>,
    ws: usize,
}

impl PingPong {
    /// Starts a partner of `kind` pinned to `partner_cpu` (the caller stays where it is)
    /// with a private working set of `ws` bytes.
    fn start(kind: Kind, partner_cpu: usize, ws: usize) -> anyhow::Result<PingPong> {
        let (a_r, a_w) = pipe().context("pipe")?;
        let (b_r, b_w) = pipe().context("pipe")?;
        let expect = partner_cpu as i32;
        let partner = match kind {
            Kind::Thread => {
                let h = std::thread::Builder::new()
                    .name("osmeter-switch-partner".into())
                    .spawn(move || {
                        // A failed pin shows up in the CPU samples and fails the premise.
                        let _ = crate::platform::pin_to_cpu(partner_cpu);
                        let mut buf = working_set(ws);
                        let r = echo_loop(
                            a_r.as_raw_fd(),
                            b_w.as_raw_fd(),
                            expect,
                            buf.as_mut_ptr() as *mut u8,
                            ws,
                        );
                        drop((a_r, b_w));
                        r
                    })
                    .context("spawning the partner thread")?;
                Partner::Thread(h)
            }
            Kind::Process => {
                // Everything the child needs is prepared before fork: it may not allocate.
                let mut child_buf = working_set(ws);
                let cbuf = child_buf.as_mut_ptr() as *mut u8;
                let mask = crate::platform::CpuMask::single(partner_cpu)?;
                let (ar, aw, br, bw) = (
                    a_r.as_raw_fd(),
                    a_w.as_raw_fd(),
                    b_r.as_raw_fd(),
                    b_w.as_raw_fd(),
                );
                // SAFETY: fork is safe to call; the child below only makes async-signal-safe
                // calls (close, sched_setaffinity, read, write, sched_getcpu, _exit) on
                // memory prepared before the fork, and never returns into Rust code.
                let pid = unsafe { libc::fork() };
                if pid < 0 {
                    return Err(io::Error::last_os_error()).context("fork");
                }
                if pid == 0 {
                    // SAFETY: child side; raw calls on fds and memory that exist here.
                    unsafe {
                        // Close the parent's ends, or our own copy of A would hide its EOF.
                        libc::close(aw);
                        libc::close(br);
                        // A failed pin shows up in the CPU samples and fails the premise.
                        mask.pin_self();
                        let r = echo_loop(ar, bw, expect, cbuf, ws);
                        // Report where we ran after the parent closed A.
                        let p = &r as *const CpuReport as *const libc::c_void;
                        libc::write(bw, p, std::mem::size_of::<CpuReport>());
                        libc::_exit(0);
                    }
                }
                drop((a_r, b_w, child_buf));
                Partner::Process(pid)
            }
        };
        Ok(PingPong {
            to: Some(a_w),
            from: Some(b_r),
            partner: Some(partner),
            buf: working_set(ws),
            ws,
        })
    }

    /// One round trip: touch our working set, send the token, wait for it to come back.
    #[inline(always)]
    fn round_trip(&mut self) -> io::Result<()> {
        let (Some(to), Some(from)) = (&self.to, &self.from) else {
            return Err(io::Error::other("ping-pong already finished"));
        };
        touch(self.buf.as_mut_ptr() as *mut u8, self.ws);
        if !write_byte(to.as_raw_fd(), 1) {
            return Err(io::Error::last_os_error());
        }
        let mut b = 0u8;
        match read_byte(from.as_raw_fd(), &mut b) {
            1 => Ok(()),
            0 => Err(io::Error::other("the partner exited early")),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Stops the partner and returns where it ran.
    fn finish(mut self) -> anyhow::Result<CpuReport> {
        self.to = None; // end of file for the partner
        match self.partner.take() {
            Some(Partner::Thread(h)) => {
                self.from = None;
                h.join().map_err(|_| anyhow!("the partner thread panicked"))
            }
            Some(Partner::Process(pid)) => {
                let from = self.from.take().ok_or_else(|| anyhow!("no pipe"))?;
                let report = read_report(from.as_raw_fd());
                drop(from);
                let status = platform::reap(pid, report.is_err()).context("waitpid")?;
                let report = report?;
                if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                    bail!("the partner process ended with status {status:#x}");
                }
                Ok(report)
            }
            None => bail!("ping-pong already finished"),
        }
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.to = None;
        self.from = None;
        match self.partner.take() {
            Some(Partner::Thread(h)) => {
                let _ = h.join();
            }
            Some(Partner::Process(pid)) => {
                let _ = platform::reap(pid, true);
            }
            None => {}
        }
    }
}

/// The child's CpuReport, read with a time bound so a stuck child cannot hang the run.
fn read_report(fd: RawFd) -> anyhow::Result<CpuReport> {
    let mut r = CpuReport::default();
    let size = std::mem::size_of::<CpuReport>();
    let mut got = 0;
    while got < size {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 5_000) };
        if n == 0 {
            bail!("the partner process did not report within 5 s");
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll");
        }
        // SAFETY: the destination is the remaining bytes of r, a plain repr(C) struct of
        // integers for which any byte pattern is valid.
        let k = unsafe {
            libc::read(
                fd,
                (&mut r as *mut CpuReport as *mut u8).add(got) as *mut libc::c_void,
                size - got,
            )
        };
        if k == 0 {
            bail!("the partner process exited without reporting its CPUs");
        }
        if k < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("reading the partner's report");
        }
        got += k as usize;
    }
    Ok(r)
}

/// Round trips with a partner on `partner_cpu`, per round trip in ns, with the CPUs the
/// measuring task saw (start and end of each trial) and the partner's report.
struct Trip {
    m: crate::harness::Measurement,
    main_cpus: Vec<i32>,
    partner: CpuReport,
}

fn round_trips(h: &Harness, kind: Kind, partner_cpu: usize, ws: usize) -> anyhow::Result<Trip> {
    let mut pp = PingPong::start(kind, partner_cpu, ws)?;
    // The first rounds pay for the partner's start (a forked child's copy-on-write faults,
    // cold caches); left in, they would stretch the harness's first calibration trial.
    h.warm_up(WARM_ROUNDS, WARM_LIMIT, || pp.round_trip())
        .with_context(|| format!("ping-pong between {}", kind.noun()))?;
    let pp = RefCell::new(pp);
    let err: RefCell<Option<io::Error>> = RefCell::new(None);
    let cpus = RefCell::new(Vec::with_capacity(256));
    let m = h.measure(1.0, |n| {
        cpus.borrow_mut().push(getcpu());
        let mut p = pp.borrow_mut();
        let mut failed = err.borrow().is_some();
        repeat(n, || {
            if !failed {
                if let Err(e) = p.round_trip() {
                    *err.borrow_mut() = Some(e);
                    failed = true;
                }
            }
        });
        cpus.borrow_mut().push(getcpu());
    });
    let pp = pp.into_inner();
    if let Some(e) = err.into_inner() {
        drop(pp);
        return Err(e).context(format!("ping-pong between {}", kind.noun()));
    }
    let partner = pp.finish()?;
    Ok(Trip {
        m,
        main_cpus: cpus.into_inner(),
        partner,
    })
}

/// One task passing the token through its own two pipes (write+read on A, then on B),
/// touching its working set twice: everything a round trip does except the switches.
fn pipe_cost(h: &Harness, ws: usize) -> anyhow::Result<crate::harness::Measurement> {
    let (a_r, a_w) = pipe()?;
    let (b_r, b_w) = pipe()?;
    let (ar, aw, br, bw) = (
        a_r.as_raw_fd(),
        a_w.as_raw_fd(),
        b_r.as_raw_fd(),
        b_w.as_raw_fd(),
    );
    let mut buf = working_set(ws);
    let p = buf.as_mut_ptr() as *mut u8;
    let mut ok = true;
    let m = h.measure(1.0, |n| {
        repeat(n, || {
            let mut b = 0u8;
            touch(p, ws);
            ok &= write_byte(aw, 1) && read_byte(ar, &mut b) == 1;
            touch(p, ws);
            ok &= write_byte(bw, b) && read_byte(br, &mut b) == 1;
        })
    });
    if !ok {
        return Err(io::Error::last_os_error()).context("pipe cost loop");
    }
    Ok(m)
}

/// The premise check: every CPU sample of both tasks is where they were pinned.
fn pinned_check(name: &str, trip: &Trip, main_cpu: usize, partner_cpu: usize) -> Check {
    cpus_check(
        name,
        &trip.main_cpus,
        &trip.partner,
        main_cpu,
        partner_cpu,
        &crate::platform::pin_support(),
    )
}

/// The premise from the CPU samples and the pinning the system offers: without hard
/// pinning the figure is an unpinned measurement whatever the samples say.
fn cpus_check(
    name: &str,
    main_cpus: &[i32],
    p: &CpuReport,
    main_cpu: usize,
    partner_cpu: usize,
    pinning: &crate::platform::Pinning,
) -> Check {
    if let Some(why) = crate::platform::pinning_premise_failure(pinning) {
        return Check::premise(name, false, why);
    }
    let main_off = main_cpus.iter().filter(|&&c| c != main_cpu as i32).count();
    let passed = main_off == 0 && p.off == 0 && p.samples > 0 && !main_cpus.is_empty();
    let mut detail = format!(
        "measuring task: {} of {} samples off CPU {main_cpu}; partner: {} of {} samples off CPU {partner_cpu}",
        main_off,
        main_cpus.len(),
        p.off,
        p.samples
    );
    if p.seen_off >= 0 {
        detail.push_str(&format!(" (seen on CPU {})", p.seen_off));
    }
    Check::premise(name, passed, detail)
}

/// Working-set sizes of the series per profile (bytes).
fn series_sizes(p: Profile) -> &'static [usize] {
    match p {
        Profile::Smoke => &[],
        Profile::Quick => &[0, 64 << 10],
        Profile::Standard | Profile::Thorough => &[0, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
    }
}

fn run_switch(kind: Kind, ctx: &Context) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let plans = ctx
        .machine
        .topology
        .cross_cpu_plans(ctx.cpu, &ctx.machine.cpu.allowed_cpus);
    let sizes: &[usize] = if kind == Kind::Process {
        series_sizes(ctx.profile)
    } else {
        &[]
    };
    // Nonzero series points need a round trip and an overhead each.
    let extra = sizes.iter().filter(|&&w| w > 0).count() * 2;
    let h = super::long_trials(ctx, 2 + plans.len() + extra, 5);

    let same = same_cpu(kind, ctx, &h, &mut out)?;
    for plan in &plans {
        cross_cpu(kind, ctx, &h, plan, same.round_trip, &mut out)?;
    }
    if plans.is_empty() {
        out.notes
            .push("pipe_round_trip_cross_cpu: skipped, this process may use only one CPU".into());
    }
    if !sizes.is_empty() {
        working_set_series(kind, ctx, &h, sizes, same.switch, &mut out)?;
    }
    kind_finding(kind, ctx, &same, &mut out);
    Ok(out)
}

/// Medians of the same-CPU figures, ns.
struct SameCpu {
    round_trip: f64,
    pipe: f64,
    switch: f64,
}

/// The same-CPU round trip, the pipe cost and the switch derived from them.
fn same_cpu(kind: Kind, ctx: &Context, h: &Harness, out: &mut Outcome) -> anyhow::Result<SameCpu> {
    (ctx.progress)("same-CPU round trip");
    let same = round_trips(h, kind, ctx.cpu, 0)?;
    (ctx.progress)("pipe cost");
    let pipe = pipe_cost(h, 0)?;
    let pipe_med = pipe.median_ns();
    let rt_med = same.m.median_ns();
    out.check(pinned_check(
        &format!("both {} ran on CPU {}", kind.noun(), ctx.cpu),
        &same,
        ctx.cpu,
        ctx.cpu,
    ));
    out.measured(
        "pipe_round_trip_same_cpu",
        "raw round trip of one byte over two pipes, both tasks pinned to one CPU (two switches)",
        &same.m,
    );
    out.measured(
        "pipe_cost",
        "one task writing and reading its own two pipes, per round-trip equivalent",
        &pipe,
    );
    let switches: Vec<f64> = same
        .m
        .per_op_ns
        .iter()
        .map(|rt| (rt - pipe_med) / 2.0)
        .collect();
    out.metric(
        "switch",
        "ns",
        "one context switch: (round trip - median pipe cost) / 2, per trial",
        switches,
    )
    .derived(&[("pipe_cost", "sub", 0.5)])
    .iterations = Some(same.m.iters);
    out.check(Check::sanity(
        "round trip costs more than the pipe work alone",
        rt_med > pipe_med,
        format!(
            "round trip {}, pipe cost {}",
            fmt_ns(rt_med),
            fmt_ns(pipe_med)
        ),
    ));
    Ok(SameCpu {
        round_trip: rt_med,
        pipe: pipe_med,
        switch: (rt_med - pipe_med) / 2.0,
    })
}

/// One cross-CPU round trip figure, with the partner on the plan's CPU
/// (docs/METHODOLOGY.md, "Cross-CPU figures").
fn cross_cpu(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    plan: &crate::machine::CrossPlan,
    rt_med: f64,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let (o, class) = (plan.cpu, plan.class_name());
    let name = format!("pipe_round_trip_cross_cpu{}", plan.suffix);
    (ctx.progress)(&format!("cross-CPU round trip ({class})"));
    let cross = round_trips(h, kind, o, 0)?;
    out.check(pinned_check(
        &format!(
            "the {} ran on different CPUs ({} and {o}, {class})",
            kind.noun(),
            ctx.cpu
        ),
        &cross,
        ctx.cpu,
        o,
    ));
    out.measured(
        &name,
        &format!(
            "raw round trip with the partner pinned to another CPU ({o}, {class}): cross-CPU wake-ups, no switch needed"
        ),
        &cross.m,
    )
    // A cross-CPU wake-up waits for the other CPU (an IPI, a vCPU the host must run),
    // which no sentinel kernel on this CPU shares.
    .shares(crate::results::Bottleneck::None);
    let c = cross.m.median_ns();
    out.finding(
        format!(
            "With the partner on another CPU ({class}) a round trip takes {} ({:.2}x the same-CPU {}): each hop is a cross-CPU wake-up{}.",
            fmt_ns(c),
            c / rt_med,
            fmt_ns(rt_med),
            if c > rt_med { ", dearer here than two switches on one CPU" } else { "" }
        ),
        &[name.as_str(), "pipe_round_trip_same_cpu"],
    );
    Ok(())
}

/// Switch cost vs working set (lmbench lat_ctx -s): both tasks touch W private bytes
/// per round; the same task touching W twice with its own pipes is subtracted.
fn working_set_series(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    sizes: &[usize],
    switch_med: f64,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let mut pts = Vec::new();
    for &w in sizes {
        if w == 0 {
            pts.push([0.0, switch_med]);
            continue;
        }
        (ctx.progress)(&format!("working set {}", fmt_bytes(w as f64)));
        let t = round_trips(h, kind, ctx.cpu, w)?;
        out.check(pinned_check(
            &format!(
                "both {} ran on CPU {} (working set {})",
                kind.noun(),
                ctx.cpu,
                fmt_bytes(w as f64)
            ),
            &t,
            ctx.cpu,
            ctx.cpu,
        ));
        let ovh = pipe_cost(h, w)?;
        pts.push([w as f64, (t.m.median_ns() - ovh.median_ns()) / 2.0]);
    }
    out.series.push(Series {
        name: "switch cost vs working set".into(),
        x_unit: "bytes".into(),
        y_unit: "ns".into(),
        points: pts.clone(),
    });
    if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
        if last[0] > 0.0 {
            out.finding(
                format!(
                    "With {} of private data per process a switch costs {} ({:.2}x the {} of an empty switch): the cost of refilling caches after a switch.",
                    fmt_bytes(last[0]),
                    fmt_ns(last[1]),
                    last[1] / first[1],
                    fmt_ns(first[1])
                ),
                &["switch"],
            );
        }
    }
    Ok(())
}

fn kind_finding(kind: Kind, ctx: &Context, same: &SameCpu, out: &mut Outcome) {
    let (switch_med, rt_med, pipe_med) = (same.switch, same.round_trip, same.pipe);
    match kind {
        Kind::Thread => out.finding(
            format!(
                "A switch between two threads on one CPU costs {}; a same-CPU round trip is {} of which {} is pipe work.",
                fmt_ns(switch_med),
                fmt_ns(rt_med),
                fmt_ns(pipe_med)
            ),
            &["switch", "pipe_round_trip_same_cpu", "pipe_cost"],
        ),
        Kind::Process => {
            let (Some(t), Some(p)) = (
                ctx.earlier_metric("cpu.thread-switch", "switch"),
                out.get("switch"),
            ) else {
                return;
            };
            let t_med = t.summary.median;
            // Causal wording only with the evidence: the two 95% intervals apart.
            let clause = match crate::analysis::separation(&p.summary, &t.summary) {
                crate::analysis::Separation::Above => {
                    ", beyond both 95% intervals: the price of changing address spaces"
                }
                crate::analysis::Separation::Overlap => {
                    " (within noise of each other, their 95% intervals overlap: changing address spaces adds nothing measurable here)"
                }
                crate::analysis::Separation::Below => {
                    " (the process switch is the cheaper one beyond both 95% intervals; no cost of changing address spaces shows)"
                }
            };
            out.finding(
                format!(
                    "A switch between processes costs {} against {} between threads: {:.2}x{clause}.",
                    fmt_ns(switch_med),
                    fmt_ns(t_med),
                    switch_med / t_med,
                ),
                &["switch", "cpu.thread-switch/switch"],
            );
        }
    }
}

/// Shared predictions: pipe cost from the measured fd-write cost, a switch from the
/// measured syscall cost (or the measured thread switch for processes).
fn predict_switch(kind: Kind, ctx: &Context) -> Vec<(String, Prediction)> {
    let (ghz, src) = super::core_ghz(ctx);
    let sys = ctx.earlier_median("cpu.syscall", "getppid");
    let fdw = ctx.earlier_median("cpu.syscall", "write_devnull_0");
    let (Some(sys), Some(fdw)) = (sys, fdw) else {
        return Vec::new();
    };
    let pipe_pred = Prediction::new(
        4.0 * (fdw + PIPE_OP_CYCLES / ghz),
        format!(
            "4 x (write_devnull_0 + {PIPE_OP_CYCLES} cycles / f_core): two writes and two reads"
        ),
    )
    .input("write_devnull_0", fdw, "ns", "cpu.syscall write_devnull_0")
    .input("f_core", ghz * 1e9, "Hz", src.clone());
    let pipe = pipe_pred.value;
    let thread_sw = SWITCH_SYSCALLS * sys;
    let mut switch = Prediction::new(
        thread_sw,
        format!("{SWITCH_SYSCALLS} x getppid (schedule + wake-up + state save ~ {SWITCH_SYSCALLS} kernel entries)"),
    )
    .input("getppid", sys, "ns", "cpu.syscall getppid");
    if kind == Kind::Process {
        let (base, base_src, base_name) = match ctx.earlier_median("cpu.thread-switch", "switch") {
            Some(t) => (t, "cpu.thread-switch switch", "thread_switch"),
            None => (thread_sw, "model: 10 x getppid", "thread_switch_model"),
        };
        switch = Prediction::new(
            base + SWITCH_MM_CYCLES / ghz,
            format!("{base_name} + {SWITCH_MM_CYCLES} cycles / f_core (address-space change)"),
        )
        .input(base_name, base, "ns", base_src)
        .input("f_core", ghz * 1e9, "Hz", src.clone())
        .input("getppid", sys, "ns", "cpu.syscall getppid");
    }
    let sw = switch.value;
    let vm = ctx.machine.virtualization.is_vm;
    let ipi = if vm {
        WAKE_IPI_NS_VM
    } else {
        WAKE_IPI_NS_METAL
    };
    vec![
        (
            "pipe_round_trip_same_cpu".into(),
            Prediction::new(pipe + 2.0 * sw, "pipe_cost + 2 x switch (both predicted)")
                .input("pipe_cost", pipe, "ns", "prediction above")
                .input("switch", sw, "ns", "prediction above"),
        ),
        ("pipe_cost".into(), pipe_pred),
        ("switch".into(), switch),
        (
            "pipe_round_trip_cross_cpu".into(),
            Prediction::new(
                pipe + 2.0 * ipi,
                "pipe_cost + 2 x cross-CPU wake-up (IPI + exit from idle)",
            )
            .input("pipe_cost", pipe, "ns", "prediction above")
            .input(
                "wake_up",
                ipi,
                "ns",
                if vm {
                    "model: under a hypervisor (machine: virtual machine), IPI and idle exit trap"
                } else {
                    "model: bare metal IPI and idle exit"
                },
            ),
        ),
    ]
}

/// The method text both switch experiments share (a macro so `concat!` can use it).
macro_rules! switch_method {
    () => {
        "Two tasks pass a one-byte token over two pipes (A out, B back) with blocking read/write, both pinned \
         to the run's CPU, so every round trip is two context switches (as perf bench sched pipe and lmbench \
         lat_ctx). pipe_round_trip_same_cpu is the raw round trip, calibrated, loop overhead subtracted. \
         pipe_cost is one task doing the same pipe work alone (write+read on A, then on B) with no switch; \
         switch = (round trip - median pipe cost) / 2 per trial, so it includes the wake-up and schedule() path, \
         not only the register switch. Premise: the measuring task samples sched_getcpu() at the start and end \
         of every trial and the partner every 64 rounds; any sample off the pinned CPU makes the result \
         invalid. pipe_round_trip_cross_cpu (when 2+ CPUs are allowed) pins the partner to another CPU, one \
         figure per topology class the machine has (SMT sibling, same LLC, other LLC, other package; the \
         nearest other core keeps the unsuffixed name, the others end in _smt_sibling, _other_llc, \
         _other_package), with the same premise check on both tasks: no switch is needed, but each hop is a cross-CPU wake-up (IPI, exit from idle), which under a hypervisor \
         can cost more than two switches on one CPU. Closing pipe A makes the partner see end of file and exit; \
         it is always joined or reaped, on error paths too."
    };
}

const THREAD_META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: Kind::Thread.id(),
    title: "Context switch between threads",
    description: "two threads pinned to one CPU ping-pong a byte over two pipes; switch = (round trip - pipe cost) / 2",
    method: concat!(
        "Partner: a thread of the same process (std::thread) that pins itself to the CPU. ",
        switch_method!()
    ),
    needs: crate::experiments::Needs::NONE,
    // The scheduler's path at the core's clock (the cross-CPU round trip declares `None`).
    bottleneck: crate::results::Bottleneck::Chain,
};

impl Experiment for ThreadSwitch {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &THREAD_META
    }
    fn budget(&self, p: Profile) -> Duration {
        let ms = Duration::from_millis;
        match p {
            Profile::Smoke => ms(250),
            Profile::Quick => ms(1500),
            Profile::Standard => ms(6000),
            Profile::Thorough => ms(15000),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict_switch(Kind::Thread, ctx)
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        run_switch(Kind::Thread, ctx)
    }
}

const PROCESS_META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: Kind::Process.id(),
    title: "Context switch between processes",
    description: "as cpu.thread-switch with a forked partner process, plus switch cost vs working set (lat_ctx -s)",
    method: concat!(
        "Partner: a forked process that makes only async-signal-safe calls (raw read, write, \
         sched_getcpu, _exit) and reports its CPU samples back through pipe B after end of file. ",
        switch_method!(),
        " Switch cost vs working set (standard and thorough: W = 0, 16 KiB, 64 KiB, 256 KiB, 1 MiB; quick: \
         0 and 64 KiB; smoke: none): each process reads and writes one word per cache line of a private W-byte \
         buffer per round, and one process doing the pipe work and touching its own W bytes twice is \
         subtracted, as lmbench lat_ctx -s does; what remains is the switch plus refilling caches."
    ),
    needs: crate::experiments::Needs::NONE,
    // The scheduler's path at the core's clock (the cross-CPU round trip declares `None`).
    bottleneck: crate::results::Bottleneck::Chain,
};

impl Experiment for ProcessSwitch {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &PROCESS_META
    }
    fn budget(&self, p: Profile) -> Duration {
        let ms = Duration::from_millis;
        match p {
            Profile::Smoke => ms(300),
            Profile::Quick => ms(2500),
            Profile::Standard => ms(12000),
            Profile::Thorough => ms(30000),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        predict_switch(Kind::Process, ctx)
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        run_switch(Kind::Process, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reports_the_partners_rounds() {
        let cpu = crate::platform::current_cpu().unwrap_or(0);
        for kind in [Kind::Thread, Kind::Process] {
            let mut pp = PingPong::start(kind, cpu, 4096).unwrap();
            for _ in 0..100 {
                pp.round_trip().unwrap();
            }
            let r = pp.finish().unwrap();
            assert_eq!(r.rounds, 100, "{kind:?}");
            assert!(r.samples >= 3, "{kind:?}: {r:?}");
        }
    }

    #[test]
    fn dropping_mid_run_never_hangs() {
        // Drop closes pipe A: the partner sees end of file and is joined or reaped.
        let cpu = crate::platform::current_cpu().unwrap_or(0);
        for kind in [Kind::Thread, Kind::Process] {
            let mut pp = PingPong::start(kind, cpu, 0).unwrap();
            pp.round_trip().unwrap();
            drop(pp);
        }
    }

    #[test]
    fn unpinned_switch_is_labelled_not_same_cpu() {
        use crate::platform::Pinning;
        let partner = CpuReport {
            rounds: 10,
            samples: 3,
            off: 0,
            seen_off: -1,
        };
        let good = cpus_check("same CPU", &[1, 1], &partner, 1, 1, &Pinning::Hard);
        assert!(good.passed, "{good:?}");
        let hint = Pinning::Unsupported {
            reason: "no pinning on this system".into(),
        };
        let bad = cpus_check("same CPU", &[1, 1], &partner, 1, 1, &hint);
        assert!(!bad.passed);
        assert!(bad.detail.contains("unpinned"), "{bad:?}");
        let moved = cpus_check("same CPU", &[1, 0], &partner, 1, 1, &Pinning::Hard);
        assert!(!moved.passed);
    }

    #[test]
    fn touch_writes_one_word_per_line() {
        let mut buf = working_set(256);
        touch(buf.as_mut_ptr() as *mut u8, 256);
        let touched: Vec<usize> = (0..buf.len()).filter(|&i| buf[i] == 1).collect();
        let want: Vec<usize> = (0..256).step_by(LINE).map(|b| b / 8).collect();
        assert_eq!(touched, want);
    }
}
