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
    let extra = crate::experiments::seams::get().pipe_alone_extra;
    let m = h.measure(1.0, |n| {
        repeat(n, || {
            let mut b = 0u8;
            touch(p, ws);
            ok &= write_byte(aw, 1) && read_byte(ar, &mut b) == 1;
            touch(p, ws);
            ok &= write_byte(bw, b) && read_byte(br, &mut b) == 1;
            for _ in 0..extra {
                ok &= write_byte(aw, 1) && read_byte(ar, &mut b) == 1;
            }
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

    let run_switch = same_cpu(kind, ctx, &h, &mut out)?;
    let mut cross = Vec::new();
    for plan in &plans {
        cross.push(cross_cpu(kind, ctx, &h, plan, &mut out)?);
    }
    if plans.is_empty() {
        out.notes
            .push("pipe_round_trip_cross_cpu: skipped, this process may use only one CPU".into());
    }
    let series = if sizes.is_empty() {
        None
    } else {
        Some(working_set_series(
            kind, ctx, &h, sizes, run_switch, &mut out,
        )?)
    };
    // Everything below is stated from the pooled runs: the figures the table shows.
    out.pool(ctx);
    let sw = switch_metric(&mut out);
    out.check(switch_positive(&sw));
    let relation = (kind == Kind::Process)
        .then(|| thread_switch(ctx))
        .flatten()
        .map(|t| (address_space_check(&sw, &t), t));
    if let Some((c, _)) = &relation {
        out.check(c.clone());
    }
    // A figure that breaks a physical relation (beyond noise: invalid; within noise: a
    // failed sanity check) states no finding; the failed check says why.
    let broken = out
        .checks
        .iter()
        .any(|c| !c.passed && (c.premise || c.name == POSITIVE));
    if broken {
        return Ok(out);
    }
    for (name, class) in &cross {
        cross_finding(name, class, &mut out);
    }
    if let Some(s) = &series {
        series_finding(s, ctx, &mut out);
    }
    kind_finding(kind, &sw, relation.map(|(_, t)| t), &mut out);
    Ok(out)
}

/// The switch figure with its interval from both inputs.
#[derive(Debug, Clone, Copy)]
struct SwitchFigure {
    median: f64,
    /// 95% interval of the median, widened by the subtracted pipe cost's.
    interval: [f64; 2],
}

/// The same-CPU round trip and the pipe cost; returns this run's own switch figure (for
/// its working-set series), (round trip - pipe cost) / 2 from this run's medians.
fn same_cpu(kind: Kind, ctx: &Context, h: &Harness, out: &mut Outcome) -> anyhow::Result<f64> {
    (ctx.progress)("same-CPU round trip");
    let same = round_trips(h, kind, ctx.cpu, 0)?;
    (ctx.progress)("pipe cost");
    let pipe = pipe_cost(h, 0)?;
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
    Ok((same.m.median_ns() - pipe.median_ns()) / 2.0)
}

/// Adds `switch` = (round trip - pooled median pipe cost) / 2 per pooled round-trip
/// trial, after `pipe_cost`, with each run's own figure in `runs`; returns its median and
/// its interval widened by half the pipe cost's (docs/METHODOLOGY.md, "Derived figures").
fn switch_metric(out: &mut Outcome) -> SwitchFigure {
    let Some((median, interval)) = out.difference(
        "switch",
        "one context switch: (round trip - median pipe cost) / 2, per trial; its interval includes the pipe cost's",
        "pipe_round_trip_same_cpu",
        "pipe_cost",
        0.5,
    ) else {
        return SwitchFigure {
            median: f64::NAN,
            interval: [f64::NAN; 2],
        };
    };
    // Shown beside the pipe cost it subtracts.
    let m = out.metrics.pop().expect("just added");
    let at = out
        .metrics
        .iter()
        .position(|x| x.name == "pipe_cost")
        .map_or(out.metrics.len(), |i| i + 1);
    out.metrics.insert(at, m);
    SwitchFigure { median, interval }
}

const POSITIVE: &str = "the switch figure is positive";

/// A switch costs time: a figure below zero beyond noise (its whole interval) means the
/// pipe work measured alone is not the pipe work inside the round trip, and the
/// subtraction's premise fails (invalid); a median at or below zero within noise fails as
/// a sanity check (the figure is reported, no finding is stated from it).
fn switch_positive(sw: &SwitchFigure) -> Check {
    let detail = format!(
            "switch = (round trip - pipe cost) / 2 = {} (95% interval {} to {}, the pipe cost's included)",
            fmt_ns(sw.median),
            fmt_ns(sw.interval[0]),
            fmt_ns(sw.interval[1])
    );
    if sw.interval[1] < 0.0 || !sw.median.is_finite() {
        Check::premise(POSITIVE, false, detail)
    } else {
        Check::sanity(POSITIVE, sw.median > 0.0, detail)
    }
}

/// The thread switch of this run, with its interval widened by its own pipe cost's.
fn thread_switch(ctx: &Context) -> Option<SwitchFigure> {
    let t = ctx.earlier_metric("cpu.thread-switch", "switch")?;
    let pipe = ctx.earlier_metric("cpu.thread-switch", "pipe_cost");
    Some(SwitchFigure {
        median: t.summary.median,
        interval: t.interval(|n| pipe.filter(|_| n == "pipe_cost")),
    })
}

/// A process switch does all a thread switch does and also changes address spaces, so
/// it cannot be cheaper beyond both intervals: when it is, the measurement is broken.
fn address_space_check(p: &SwitchFigure, t: &SwitchFigure) -> Check {
    let below = crate::analysis::separation_of(p.interval, t.interval)
        == crate::analysis::Separation::Below;
    Check::premise(
        "a process switch costs no less than a thread switch, within noise",
        !below,
        format!(
            "process switch {} (95% interval {} to {}), thread switch {} ({} to {}), intervals including the pipe costs'",
            fmt_ns(p.median),
            fmt_ns(p.interval[0]),
            fmt_ns(p.interval[1]),
            fmt_ns(t.median),
            fmt_ns(t.interval[0]),
            fmt_ns(t.interval[1])
        ),
    )
}

/// One cross-CPU round trip figure, with the partner on the plan's CPU
/// (docs/METHODOLOGY.md, "Cross-CPU figures"); returns the metric's name and the class.
fn cross_cpu(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    plan: &crate::machine::CrossPlan,
    out: &mut Outcome,
) -> anyhow::Result<(String, String)> {
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
    Ok((name, class.to_string()))
}

/// The pooled cross-CPU round trip against the pooled same-CPU one; "dearer" or
/// "cheaper" only when their 95% intervals are apart.
fn cross_finding(name: &str, class: &str, out: &mut Outcome) {
    let (Some(c), Some(s)) = (out.get(name), out.get("pipe_round_trip_same_cpu")) else {
        return;
    };
    let (cm, sm) = (c.summary.median, s.summary.median);
    let clause = match crate::analysis::separation(&c.summary, &s.summary) {
        crate::analysis::Separation::Above => {
            "dearer than two switches on one CPU, beyond both 95% intervals"
        }
        crate::analysis::Separation::Below => {
            "cheaper than two switches on one CPU, beyond both 95% intervals"
        }
        crate::analysis::Separation::Overlap => {
            "within noise of two switches on one CPU (the 95% intervals overlap)"
        }
    };
    let text = format!(
        "With the partner on another CPU ({class}) a round trip takes {} ({:.2}x the same-CPU {}): no switch is needed, each hop wakes a task on the other CPU, {clause}.",
        fmt_ns(cm),
        cm / sm,
        fmt_ns(sm),
    );
    out.finding(text, &[name, "pipe_round_trip_same_cpu"]);
}

/// One point of the working-set series: W bytes, this run's switch figure at W and the
/// 95% interval of its median (the overhead's included).
struct WsPoint {
    bytes: f64,
    ns: f64,
    interval: [f64; 2],
}

/// Switch cost vs working set (lmbench lat_ctx -s): both tasks touch W private bytes
/// per round; the same task touching W twice with its own pipes is subtracted. The
/// points are not metrics: the series is this run's alone, and says so.
fn working_set_series(
    kind: Kind,
    ctx: &Context,
    h: &Harness,
    sizes: &[usize],
    switch_run: f64,
    out: &mut Outcome,
) -> anyhow::Result<Vec<WsPoint>> {
    let mut pts = Vec::new();
    for &w in sizes {
        if w == 0 {
            pts.push(WsPoint {
                bytes: 0.0,
                ns: switch_run,
                interval: [switch_run; 2],
            });
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
        pts.push(ws_point(w as f64, &t.m.per_op_ns, &ovh.per_op_ns));
    }
    // The empty point's interval from its own trials, as the others'.
    if let Some(z) = pts.iter_mut().find(|p| p.bytes == 0.0) {
        if let (Some(rt), Some(pipe)) = (out.get("pipe_round_trip_same_cpu"), out.get("pipe_cost"))
        {
            *z = ws_point(0.0, &rt.raw, &pipe.raw);
        }
    }
    out.series.push(Series {
        name: "switch cost vs working set".into(),
        x_unit: "bytes".into(),
        y_unit: "ns".into(),
        points: pts.iter().map(|p| [p.bytes, p.ns]).collect(),
    });
    Ok(pts)
}

/// (round trip - median overhead) / 2 with the interval of the round trip's median
/// widened by half the overhead's.
fn ws_point(bytes: f64, rt: &[f64], ovh: &[f64]) -> WsPoint {
    let (Some(r), Some(o)) = (
        crate::stats::Summary::of(rt),
        crate::stats::Summary::of(ovh),
    ) else {
        return WsPoint {
            bytes,
            ns: f64::NAN,
            interval: [f64::NAN; 2],
        };
    };
    let half = (o.ci95[1] - o.ci95[0]).abs() / 4.0;
    WsPoint {
        bytes,
        ns: (r.median - o.median) / 2.0,
        interval: [
            (r.ci95[0] - o.median) / 2.0 - half,
            (r.ci95[1] - o.median) / 2.0 + half,
        ],
    }
}

/// The series' largest working set against its empty switch, both from the run the
/// series shows; "more" only beyond both intervals, and no claim about why: the
/// ping-pong's footprint (2W) is twice the subtracted overhead's (W).
fn series_finding(pts: &[WsPoint], ctx: &Context, out: &mut Outcome) {
    let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
        return;
    };
    if last.bytes <= 0.0 || first.bytes != 0.0 {
        return;
    }
    let rep = ctx.repetition;
    let which = if rep.of > 1 {
        format!(
            "In run {} of {} (the series shown), w",
            rep.index + 1,
            rep.of
        )
    } else {
        "W".to_string()
    };
    let clause = match crate::analysis::separation_of(last.interval, first.interval) {
        crate::analysis::Separation::Above => format!(
            "{} more per switch beyond both 95% intervals; the two tasks together touch twice what the subtracted overhead touches, so part of it is misses one task touching {} would also take",
            fmt_ns(last.ns - first.ns),
            fmt_bytes(2.0 * last.bytes)
        ),
        crate::analysis::Separation::Overlap => {
            "within noise of each other (the 95% intervals overlap)".to_string()
        }
        crate::analysis::Separation::Below => {
            "less beyond both 95% intervals, which touching more memory should not give: treat the series with care".to_string()
        }
    };
    out.finding(
        format!(
            "{which}ith {} of private data per process a switch costs {} against {} with none ({:.2}x): {clause}.",
            fmt_bytes(last.bytes),
            fmt_ns(last.ns),
            fmt_ns(first.ns),
            last.ns / first.ns,
        ),
        &["switch"],
    );
}

fn kind_finding(kind: Kind, sw: &SwitchFigure, thread: Option<SwitchFigure>, out: &mut Outcome) {
    let (rt_med, pipe_med) = (
        out.median("pipe_round_trip_same_cpu"),
        out.median("pipe_cost"),
    );
    let [lo, hi] = sw.interval;
    match kind {
        Kind::Thread => out.finding(
            format!(
                "A switch between two threads on one CPU costs {} (95% interval {} to {}, the pipe cost's noise included); a same-CPU round trip is {} of which {} is pipe work.",
                fmt_ns(sw.median),
                fmt_ns(lo),
                fmt_ns(hi),
                fmt_ns(rt_med),
                fmt_ns(pipe_med)
            ),
            &["switch", "pipe_round_trip_same_cpu", "pipe_cost"],
        ),
        Kind::Process => {
            let Some(t) = thread else {
                return;
            };
            // Causal wording only with the evidence: the two intervals (each with its
            // pipe cost's noise) apart. Below is refused earlier by the premise check.
            let clause = match crate::analysis::separation_of(sw.interval, t.interval) {
                crate::analysis::Separation::Above => {
                    ", beyond both 95% intervals (the pipe costs' noise included): the price of changing address spaces"
                }
                _ => {
                    " (within noise of each other, their 95% intervals overlap: changing address spaces adds nothing measurable here)"
                }
            };
            out.finding(
                format!(
                    "A switch between processes costs {} against {} between threads: {:.2}x{clause}.",
                    fmt_ns(sw.median),
                    fmt_ns(t.median),
                    sw.median / t.median,
                ),
                &["switch", "cpu.thread-switch/switch"],
            );
        }
    }
}

/// Shared predictions, from figures measured earlier only: the pipe work is four kernel
/// entries with an fd lookup (cpu.syscall's write_devnull_0). No published figure prices a
/// switch or a cross-CPU wake-up per part, so the thread experiment's round trips are
/// predicted by their pipe work alone, a lower bound. The process experiment runs after it
/// and composes its measured figures: a process switch does a thread switch's work and
/// changes address spaces too (no figure for that: lower bounds), and a cross-CPU round
/// trip wakes a task on the other CPU as the thread one does.
fn predict_switch(kind: Kind, ctx: &Context) -> Vec<(String, Prediction)> {
    let no_switch = "the parts table names no published context-switch cost for any part, and no \
                     experiment before it measures the scheduler's path";
    let thread = |m: &str| {
        (kind == Kind::Process)
            .then(|| ctx.earlier_median(Kind::Thread.id(), m))
            .flatten()
            .filter(|v| *v > 0.0)
    };
    let switch = match (kind, thread("switch")) {
        (Kind::Process, Some(t)) => Prediction::new(
            t,
            "cpu.thread-switch's switch, a lower bound: a switch between processes does that \
             work and changes address spaces too, which has no measured or published cost",
        )
        .lower_bound()
        .measured(
            "thread_switch",
            t,
            "ns",
            "measured: cpu.thread-switch switch",
        ),
        (Kind::Process, None) => Prediction::withheld(
            "cpu.thread-switch switch was not measured in this run (or not positive)",
        ),
        (Kind::Thread, _) => Prediction::withheld(no_switch),
    };
    let Some(fdw) = ctx.earlier_median("cpu.syscall", "write_devnull_0") else {
        return vec![("switch".into(), switch)];
    };
    let pipe = 4.0 * fdw;
    let pipe_pred = Prediction::new(
        pipe,
        "4 x write_devnull_0: two writes and two reads, each a kernel entry with an fd lookup \
         (the pipe's lock, one-byte copy and wake-up check are not in the model)",
    )
    .measured(
        "write_devnull_0",
        fdw,
        "ns",
        "measured: cpu.syscall write_devnull_0",
    );
    let bound = |what: &str| {
        Prediction::new(
            pipe,
            format!(
                "pipe_cost alone, a lower bound: {what} has no published cost in the parts table"
            ),
        )
        .lower_bound()
        .prediction("pipe_cost", pipe, "ns", "prediction: pipe_cost above")
    };
    let same = match thread("pipe_round_trip_same_cpu") {
        Some(rt) => Prediction::new(
            rt,
            "cpu.thread-switch's same-CPU round trip, a lower bound: the same pipe work and two \
             switches, without the two address-space changes (no measured or published cost)",
        )
        .lower_bound()
        .measured(
            "thread_same_cpu",
            rt,
            "ns",
            "measured: cpu.thread-switch pipe_round_trip_same_cpu",
        ),
        None => bound("the two switches"),
    };
    let cross = match thread("pipe_round_trip_cross_cpu") {
        Some(rt) => Prediction::new(
            rt,
            "cpu.thread-switch's cross-CPU round trip: the same pipe work and the same two \
             wake-ups on the other CPU, where each task keeps its CPU and needs no switch of \
             address space per hop",
        )
        .measured(
            "thread_cross_cpu",
            rt,
            "ns",
            "measured: cpu.thread-switch pipe_round_trip_cross_cpu",
        ),
        None => bound("a cross-CPU wake-up"),
    };
    vec![
        ("pipe_round_trip_same_cpu".into(), same),
        ("pipe_cost".into(), pipe_pred),
        ("switch".into(), switch),
        ("pipe_round_trip_cross_cpu".into(), cross),
    ]
}

const THREAD_META: crate::experiments::Spec = crate::experiments::Spec {
    id: Kind::Thread.id(),
    title: "Context switch between threads",
    description: "two threads pinned to one CPU ping-pong a byte over two pipes; switch = (round trip - pipe cost) / 2",
    method: crate::method!("cpu.thread-switch"),
    needs: crate::experiments::Needs::NONE,
    // The scheduler's path at the core's clock (the cross-CPU round trip declares `None`).
    bottleneck: crate::results::Bottleneck::Chain,
    // One CPU of each kind of core on hybrid CPUs (runner::per_kind).
    per_core_kind: true,
    subtracts_loop: true,
budget: None,
};

impl Experiment for ThreadSwitch {
    fn spec(&self) -> &crate::experiments::Spec {
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

const PROCESS_META: crate::experiments::Spec = crate::experiments::Spec {
    id: Kind::Process.id(),
    title: "Context switch between processes",
    description: "as cpu.thread-switch with a forked partner process, plus switch cost vs working set (lat_ctx -s)",
    method: crate::method!("cpu.process-switch"),
    needs: crate::experiments::Needs::NONE,
    // The scheduler's path at the core's clock (the cross-CPU round trip declares `None`).
    bottleneck: crate::results::Bottleneck::Chain,
    // One CPU of each kind of core on hybrid CPUs (runner::per_kind).
    per_core_kind: true,
    subtracts_loop: true,
budget: None,
};

impl Experiment for ProcessSwitch {
    fn spec(&self) -> &crate::experiments::Spec {
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

    /// A recorded cpu.thread-switch whose switch is `ns` with a tight interval.
    fn thread_result(ns: f64) -> crate::results::ExperimentResult {
        let mut o = Outcome::default();
        o.metric("pipe_cost", "ns", "", vec![1000.0; 20]);
        o.metric("switch", "ns", "", vec![ns; 20])
            .derived(&[("pipe_cost", "sub", 0.5)]);
        crate::experiments::testing::recorded(Kind::Thread.id(), o)
    }

    /// cpu.process-switch as wired and judged, after a thread switch recorded at
    /// `thread_ns`.
    fn process_switch_after(thread_ns: f64) -> crate::results::ExperimentResult {
        use crate::experiments::testing::World;
        let mut machine = crate::machine::Machine::gather();
        let clock = machine.add_time_base();
        let mut w = World::live(&clock);
        w.machine = machine;
        w.budget = Duration::from_millis(300);
        w.earlier = vec![thread_result(thread_ns)];
        w.run(&ProcessSwitch)
    }

    const RELATION: &str = "a process switch costs no less than a thread switch, within noise";

    /// Issue 20 item 4: a process switch cheaper than the thread switch beyond both
    /// intervals (here a thread switch recorded at 1 s) makes the experiment invalid with
    /// the reason, and no finding is stated; against a 1 ns thread switch it passes.
    /// `process_switch_after`, retaken (at most three times) until the relation is judged:
    /// a live run can stop before it (under CI's load a same-CPU premise failed once).
    fn judged_after(thread_ns: f64) -> crate::results::ExperimentResult {
        let mut why = Vec::new();
        for _ in 0..3 {
            let out = process_switch_after(thread_ns);
            if out.checks.iter().any(|c| c.name == RELATION) {
                return out;
            }
            why.push(format!("{:?}: {:?}", out.status, out.reason));
        }
        panic!("the relation was never judged: {why:?}");
    }

    #[test]
    fn a_process_switch_below_the_thread_switch_is_refused() {
        let out = judged_after(1e9);
        crate::experiments::testing::assert_invalid_by(&out, RELATION);
        let c = out.checks.iter().find(|c| c.name == RELATION).unwrap();
        assert!(c.premise && !c.passed, "{c:?}");
        assert!(c.detail.contains("thread switch 1.00 s"), "{}", c.detail);
        assert!(out.findings.is_empty(), "{:?}", out.findings);
        let out = judged_after(1.0);
        let c = out.checks.iter().find(|c| c.name == RELATION).unwrap();
        assert!(c.passed, "{c:?}");
    }

    #[test]
    fn the_switch_interval_carries_the_pipe_cost_and_a_negative_switch_fails() {
        let mut o = Outcome::default();
        // Round trips 10 us, tight; pipe cost 4-8 us, wide.
        o.metric("pipe_round_trip_same_cpu", "ns", "", vec![10_000.0; 20]);
        let pipe: Vec<f64> = (0..20).map(|i| 4000.0 + 200.0 * i as f64).collect();
        o.metric("pipe_cost", "ns", "", pipe);
        let sw = switch_metric(&mut o);
        let m = o.get("switch").unwrap();
        let own = m.summary.ci95;
        assert!(
            own[1] - own[0] < 1e-9,
            "the round trips alone are tight: {own:?}"
        );
        assert!(sw.interval[1] - sw.interval[0] > 100.0, "{sw:?}");
        assert!(sw.interval[0] < sw.median && sw.median < sw.interval[1]);
        // Kept next to its input, in the table's order.
        let names: Vec<&str> = o.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["pipe_round_trip_same_cpu", "pipe_cost", "switch"]);
        assert!(switch_positive(&sw).passed);
        let neg = SwitchFigure {
            median: -50.0,
            interval: [-80.0, -20.0],
        };
        let c = switch_positive(&neg);
        assert!(c.premise && !c.passed, "{c:?}");
        // Negative within noise: reported, but flagged (a sanity check) rather than invalid.
        let noisy = SwitchFigure {
            median: -5.0,
            interval: [-30.0, 20.0],
        };
        let c = switch_positive(&noisy);
        assert!(!c.premise && !c.passed, "{c:?}");
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
