//! The partner task and the pipe ping-pong both switch experiments time.

use super::*;
use crate::clock::Clock;
use crate::experiments::cpu::{measure_ops, pipe_io, Report};
use crate::experiments::kit::children::Children;
use crate::experiments::kit::place::Place;
use crate::harness::Measurement;

/// Reads and writes one word per cache line of `len` bytes at `buf`. Async-signal-safe.
pub(super) fn touch(buf: *mut u8, len: usize) {
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
pub(super) fn working_set(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8).max(1)]
}

/// The partner: echoes each byte from `rfd` back on `wfd` until end of file, touching its
/// working set first. Async-signal-safe, for a forked child of a multithreaded parent.
pub(super) fn echo_loop(rfd: RawFd, wfd: RawFd, cpu: usize, buf: *mut u8, len: usize) -> Report {
    let mut r = Report {
        count: 0,
        place: Place::new(cpu),
    };
    r.place.look();
    touch(buf, len);
    let mut b = [0u8];
    while pipe_io(rfd, &mut b, false) == 1 {
        touch(buf, len);
        if pipe_io(wfd, &mut b, true) != 1 {
            break;
        }
        r.count += 1;
        if r.count % SAMPLE_EVERY == 0 {
            r.place.look();
        }
    }
    r.place.look();
    r
}

/// Joins or reaps the partner (once pipe A is closed) and returns its report.
type Partner<'c> = Box<dyn FnOnce() -> anyhow::Result<Report> + 'c>;

/// The measuring task's side: pipe A carries the token to the partner, pipe B brings it
/// back. Dropping it closes A, so the partner ends and is joined or reaped on any path.
pub(super) struct PingPong<'c> {
    /// The write end of A and the read end of B.
    pipes: Option<(OwnedFd, OwnedFd)>,
    partner: Option<Partner<'c>>,
    buf: Vec<u64>,
    ws: usize,
}

impl<'c> PingPong<'c> {
    pub(super) fn start(
        kind: Kind,
        clock: &'c dyn Clock,
        partner_cpu: usize,
        ws: usize,
    ) -> anyhow::Result<Self> {
        let (a_r, a_w) = platform::pipe().context("pipe")?;
        let (b_r, b_w) = platform::pipe().context("pipe")?;
        // A failed pin shows up in the CPU samples and fails the premise.
        let partner: Partner = match kind {
            Kind::Thread => {
                let thread = std::thread::Builder::new()
                    .name("osmeter-switch-partner".into())
                    .spawn(move || {
                        let _ = crate::platform::pin_to_cpu(partner_cpu);
                        let mut buf = working_set(ws);
                        let (r, w) = (a_r.as_raw_fd(), b_w.as_raw_fd());
                        echo_loop(r, w, partner_cpu, buf.as_mut_ptr() as *mut u8, ws)
                    })
                    .context("spawning the partner thread")?;
                Box::new(|| {
                    thread
                        .join()
                        .map_err(|_| anyhow!("the partner thread panicked"))
                })
            }
            Kind::Process => {
                // Everything the child needs is prepared before fork: it may not allocate.
                let mut child_buf = working_set(ws);
                let cbuf = child_buf.as_mut_ptr() as *mut u8;
                let mask = crate::platform::CpuMask::single(partner_cpu)?;
                let (ar, aw) = (a_r.as_raw_fd(), a_w.as_raw_fd());
                let (br, bw) = (b_r.as_raw_fd(), b_w.as_raw_fd());
                let children = Children::new(1, clock)?;
                // SAFETY: the child makes only close, read, write and sched_getcpu calls,
                // on descriptors and a buffer made before the fork.
                let forked = unsafe {
                    children.spawn(0, &mask, || {
                        // Close the parent's ends, or our own copy of A would hide its EOF.
                        libc::close(aw);
                        libc::close(br);
                        echo_loop(ar, bw, partner_cpu, cbuf, ws)
                    })
                };
                forked.context("fork")?;
                drop((a_r, b_w, child_buf));
                Box::new(move || children.wait("partner process").map(|()| children.get(0).1))
            }
        };
        Ok(PingPong {
            pipes: Some((a_w, b_r)),
            partner: Some(partner),
            buf: working_set(ws),
            ws,
        })
    }

    #[inline(always)]
    pub(super) fn round_trip(&mut self) -> io::Result<()> {
        let Some((to, from)) = &self.pipes else {
            return Err(io::Error::other("ping-pong already finished"));
        };
        touch(self.buf.as_mut_ptr() as *mut u8, self.ws);
        let mut b = [1u8];
        if pipe_io(to.as_raw_fd(), &mut b, true) != 1 {
            return Err(io::Error::last_os_error());
        }
        match pipe_io(from.as_raw_fd(), &mut b, false) {
            1 => Ok(()),
            0 => Err(io::Error::other("the partner exited early")),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Stops the partner (end of file on A) and returns where it ran.
    pub(super) fn finish(&mut self) -> anyhow::Result<Report> {
        self.pipes = None;
        let join = self.partner.take();
        join.ok_or_else(|| anyhow!("ping-pong already finished"))?()
    }
}

impl Drop for PingPong<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Round trips with a partner on `partner_cpu`; `check` is the premise that both stayed put.
pub(super) fn round_trips(
    ctx: &Context,
    h: &Harness,
    kind: Kind,
    (partner_cpu, ws): (usize, usize),
    check: &str,
    out: &mut Outcome,
) -> anyhow::Result<Measurement> {
    let what = || format!("ping-pong between {}", kind.noun());
    let mut pp = PingPong::start(kind, ctx.clock, partner_cpu, ws)?;
    // The partner's start (copy-on-write faults, cold caches) would stretch calibration.
    h.warm_up(WARM_ROUNDS, WARM_LIMIT, || pp.round_trip())
        .with_context(what)?;
    let mut main = Place::new(ctx.cpu);
    let (m, err) = measure_ops(h, Some(&mut main), || pp.round_trip());
    err.map_or(Ok(()), Err).with_context(what)?;
    let partner = pp.finish()?.place;
    out.check(cpus_check(check, &main, &partner, &platform::pin_support()));
    Ok(m)
}

/// One task passing the token through its own two pipes: a round trip without switches.
pub(super) fn pipe_cost(h: &Harness, ws: usize) -> anyhow::Result<Measurement> {
    let (a, b) = (platform::pipe()?, platform::pipe()?);
    let hop = |(r, w): &(OwnedFd, OwnedFd), t: &mut [u8; 1]| {
        pipe_io(w.as_raw_fd(), t, true) == 1 && pipe_io(r.as_raw_fd(), t, false) == 1
    };
    let mut buf = working_set(ws);
    let p = buf.as_mut_ptr() as *mut u8;
    let extra = crate::experiments::seams::get().pipe_alone_extra;
    let (m, err) = measure_ops(h, None, || {
        let mut t = [1u8];
        touch(p, ws);
        let mut ok = hop(&a, &mut t);
        touch(p, ws);
        ok &= hop(&b, &mut t);
        for _ in 0..extra {
            ok &= hop(&a, &mut t);
        }
        ok.then_some(()).ok_or_else(io::Error::last_os_error)
    });
    err.map_or(Ok(m), Err).context("pipe cost loop")
}
