//! cpu.process-create: fork + _exit + waitpid (also from a parent with 32 MiB more resident), and
//! posix_spawn of /bin/true + waitpid.

use crate::experiments::kit::{Pages, Region};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile};
use crate::harness::{Harness, Measurement};
use crate::machine::process::{MAPPINGS_SOURCE, RESIDENT_SOURCE};
use crate::opaque::repeat;
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::cell::Cell;
use std::ffi::CString;

pub struct ProcessCreate;

/// fork + _exit + waitpid: system calls counted with `strace -f` on a C loop (clone,
/// set_robust_list in the child, exit_group, wait4) and context switches (perf stat -e
/// context-switches on the same loop, pinned): to the child and back. The model leaves out
/// copying or building the address space (page tables, VMAs) and the minor faults (about 20
/// per fork of a small parent, 50 per exec of true, by perf; mem.pagefault measures their
/// cost later in the run).
const FORK: super::Counted = super::Counted {
    syscalls: 4.0,
    switches: 2.0,
    switch_of: "cpu.process-switch",
    switches_source: "perf stat -e context-switches of the method",
    left_out: "address-space copy and teardown, minor faults not in the model",
};
/// posix_spawn of /bin/true + waitpid: clone3, 122 rt_sigaction (the child resets every
/// handler), and ~36 of execve and the dynamic loader's mmap, openat, mprotect; exec adds
/// one switch.
const SPAWN: super::Counted = super::Counted {
    syscalls: 159.0,
    switches: 3.0,
    left_out: "the new image's mappings, minor faults not in the model",
    ..FORK
};

/// The resident anonymous memory added to the parent for `fork_exit_wait_32mib`: large
/// enough that its page-table entries dwarf the trial-to-trial noise of a small fork
/// (8192 entries in 4 KiB pages), small enough for the smoke profile's trials.
const ADDED_MIB: usize = 32;

/// A region of `ADDED_MIB` of anonymous memory in base pages, every page written, so fork
/// has its page-table entries to copy and the child's exit has them to tear down.
fn added_region(
    machine: &crate::machine::Machine,
    profile: crate::experiments::Profile,
) -> anyhow::Result<Region> {
    let len = (ADDED_MIB << 20) as u64;
    // Within the profile's memory limit, as every memory experiment.
    crate::experiments::kit::memory_cap(machine, profile, len, len)?;
    let mut r = Region::new(ADDED_MIB << 20, Pages::Base)?;
    if crate::experiments::seams::get().unwritten {
        return Ok(r);
    }
    r.prefault();
    Ok(r)
}

/// Pages of `r` resident (mincore), of all its pages; None where mincore fails.
fn resident_pages(r: &Region) -> Option<(usize, usize)> {
    let ps = crate::platform::page_size();
    let pages = r.len().div_ceil(ps);
    let mut vec = vec![0u8; pages];
    // SAFETY: the region is a live mapping of this process and vec holds a byte per page.
    unsafe { crate::platform::mincore(r.as_ptr().cast(), r.len(), &mut vec) }.ok()?;
    Some((vec.iter().filter(|b| *b & 1 == 1).count(), pages))
}

/// The premise of `fork_per_mib`: the added region stayed resident through the timing
/// (`before`, `after`: mincore's counts) and was not backed by huge pages, whose entries
/// fork copies 512 at a time (`huge`: bytes of it in transparent huge pages, None where
/// the system keeps no such count, as macOS, which has none).
fn region_check(
    before: Option<(usize, usize)>,
    after: Option<(usize, usize)>,
    huge: Option<u64>,
) -> Check {
    let name = "the added memory was resident in base pages while forking";
    match (before, after) {
        (Some((b, n)), Some((a, _))) => {
            let huge_bytes = huge.unwrap_or(0);
            Check::premise(
                name,
                b == n && a == n && huge_bytes == 0,
                format!(
                    "{b} of {n} pages resident before the timing and {a} after (mincore); {}",
                    match huge {
                        Some(h) => format!(
                            "{} of it in huge pages (smaps AnonHugePages)",
                            crate::units::fmt_bytes(h as f64)
                        ),
                        None => "no huge-page count on this system".into(),
                    }
                ),
            )
        }
        _ => Check::unverified(name, "mincore could not read the added region's residency"),
    }
}

/// Adds `fork_per_mib` = (fork with the added region - pooled median fork) / ADDED_MIB
/// per pooled trial (`Outcome::difference`), after `fork_exit_wait_32mib`.
fn per_mib_metric(out: &mut Outcome) -> Option<(f64, [f64; 2])> {
    out.difference(
        "fork_per_mib",
        "fork + exit + wait time added per MiB of the parent's resident anonymous memory in \
         base pages: (fork_exit_wait_32mib - median fork_exit_wait) / 32, per trial",
        "fork_exit_wait_32mib",
        "fork_exit_wait",
        1.0 / ADDED_MIB as f64,
    )
}

const PER_MIB_CHECK: &str = "added memory did not make fork faster";

/// Memory added to the parent cannot make fork cheaper: a per-MiB figure below zero beyond
/// its interval means the two forks were not measured alike (invalid).
fn per_mib_check(v: f64, ci: [f64; 2]) -> Check {
    Check::premise(
        PER_MIB_CHECK,
        ci[1] >= 0.0 || ci[1].is_nan(),
        format!(
            "fork_per_mib = {} (95% interval {} to {}, the small fork's included)",
            fmt_ns(v),
            fmt_ns(ci[0]),
            fmt_ns(ci[1])
        ),
    )
}

/// Candidate tiny programs, in preference order.
const TRUE_PATHS: [&str; 2] = ["/bin/true", "/usr/bin/true"];

/// The program spawned: the first of `TRUE_PATHS` that exists.
fn program() -> Option<&'static str> {
    if let Some(p) = crate::experiments::seams::get().program {
        return Some(p);
    }
    TRUE_PATHS
        .iter()
        .copied()
        .find(|p| std::path::Path::new(p).is_file())
}

/// This process's resident anonymous memory in base pages (RssAnon less the huge pages
/// in its mappings), None where the system does not say.
fn own_anon_base_bytes() -> Option<u64> {
    let anon = crate::machine::process::status_bytes("RssAnon:")?;
    let huge = crate::machine::process::huge_bytes_in(0, usize::MAX)?;
    Some(anon.saturating_sub(huge))
}

/// fork + _exit(0) + waitpid; the child's wait status.
#[inline(always)]
fn fork_exit_wait() -> std::io::Result<libc::c_int> {
    // SAFETY: the child calls only _exit, which is async-signal-safe.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: _exit ends the child at once without running any parent state.
        unsafe { libc::_exit(0) };
    }
    crate::platform::reap(pid, false)
}

/// posix_spawn of `path` with argv [path] and an empty environment, then waitpid.
#[inline(always)]
fn spawn_wait(
    path: &CString,
    argv: &[*mut libc::c_char; 2],
    envp: &[*mut libc::c_char; 1],
) -> std::io::Result<libc::c_int> {
    let mut pid: libc::pid_t = 0;
    // SAFETY: path is a NUL-terminated string, argv and envp are NULL-terminated arrays
    // of NUL-terminated strings that outlive the call; null file actions and attributes
    // mean defaults.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    crate::platform::reap(pid, false)
}

/// Counts of children and non-zero statuses, with the first error.
#[derive(Default)]
struct ChildStatuses {
    ok: Cell<u64>,
    bad: Cell<u64>,
    bad_status: Cell<libc::c_int>,
}

impl ChildStatuses {
    fn add(&self, r: std::io::Result<libc::c_int>, err: &Cell<Option<std::io::Error>>) {
        match r {
            Ok(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => {
                self.ok.set(self.ok.get() + 1)
            }
            Ok(s) => {
                self.bad.set(self.bad.get() + 1);
                self.bad_status.set(s);
            }
            Err(e) => err.set(Some(e)),
        }
    }
    fn check(&self, what: &str) -> Check {
        Check::premise(
            &format!("every {what} child exited with status 0"),
            self.bad.get() == 0 && self.ok.get() > 0,
            if self.bad.get() == 0 {
                format!("{} children, all exited 0", self.ok.get())
            } else {
                format!(
                    "{} of {} children did not exit 0 (e.g. wait status {:#x})",
                    self.bad.get(),
                    self.ok.get() + self.bad.get(),
                    self.bad_status.get()
                )
            },
        )
    }
}

const SPEC: crate::experiments::Spec = crate::experiments::Spec {
    id: "cpu.process-create",
    title: "Process creation",
    description: "fork + _exit + waitpid, the same from a parent with 32 MiB more resident, and posix_spawn of /bin/true + waitpid (reported separately)",
    method: crate::method!("cpu.process-create"),
    budget: Some(PerProfile::new(ms(300), ms(1000), ms(8000), ms(20000))),
    // Kernel work at the core's clock (page tables, exec), on one CPU of each kind of core
    // on hybrid CPUs (runner::per_kind).
    ..crate::experiments::Spec::CORE_LOOP
};

impl Experiment for ProcessCreate {
    fn spec(&self) -> &crate::experiments::Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        // The parent's size drives what the model leaves out; recorded for the reader.
        let (pages, vmas) = crate::machine::process::footprint();
        FORK.state(
            &mut p,
            "fork_exit_wait",
            &[
                &Input::machine("resident_pages", Some(pages), "pages", RESIDENT_SOURCE, ""),
                &Input::machine("vmas", Some(vmas), "mappings", MAPPINGS_SOURCE, ""),
            ],
        );
        SPAWN.state(&mut p, "spawn_exec", &[]);
        p.withhold(
            &["fork_exit_wait_32mib", "fork_per_mib"],
            "no figure measured in the run prices copying and tearing down a page-table entry",
        );
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let program = program();
        let h = super::long_trials(ctx, if program.is_some() { 3 } else { 2 }, 10);
        // The parent's own anonymous memory as the small fork sees it (the region for the
        // larger fork comes later), priced by fork_per_mib in the finding.
        let own_anon = own_anon_base_bytes();
        measure_forks(ctx, &h, &mut out)?;
        match program {
            Some(path) => measure_spawn(ctx, &h, path, &mut out)?,
            None => out.notes.push(
                "spawn_exec: skipped, neither /bin/true nor /usr/bin/true exists (install coreutils)"
                    .into(),
            ),
        }
        out.pool(ctx);
        finding(ctx, own_anon, &mut out);
        Ok(out)
    }
}

/// Times `step` as the harness asks, counting every child's status in `children`; the first
/// error ends the measurement and is returned with `what` as context.
fn time_children(
    h: &Harness,
    children: &ChildStatuses,
    what: &str,
    step: impl Fn() -> std::io::Result<libc::c_int>,
) -> anyhow::Result<Measurement> {
    let err = Cell::new(None::<std::io::Error>);
    let m = h.measure(1.0, |n| {
        repeat(n, || {
            if let Some(e) = err.take() {
                err.set(Some(e));
            } else {
                children.add(step(), &err);
            }
        })
    });
    match err.take() {
        Some(e) => Err(anyhow::Error::new(e).context(what.to_string())),
        None => Ok(m),
    }
}

/// fork_exit_wait, then the same fork from a parent with ADDED_MIB more resident memory:
/// its difference from the small fork is the page tables' share, which grows with the parent.
fn measure_forks(ctx: &Context, h: &Harness, out: &mut Outcome) -> anyhow::Result<()> {
    let forks = ChildStatuses::default();
    (ctx.progress)("fork + exit + wait");
    let m = time_children(h, &forks, "fork/waitpid", fork_exit_wait)?;
    out.measured(
        "fork_exit_wait",
        "fork(), child _exit(0), parent waitpid()",
        &m,
    );
    match added_region(ctx.machine, ctx.profile) {
        Ok(region) => {
            (ctx.progress)("fork + exit + wait with 32 MiB more resident");
            let before = resident_pages(&region);
            let m = time_children(
                h,
                &forks,
                "fork/waitpid with the added memory",
                fork_exit_wait,
            )?;
            out.check(region_check(before, resident_pages(&region), region.huge_bytes()));
            out.measured(
                "fork_exit_wait_32mib",
                "fork_exit_wait from a parent with 32 MiB more resident anonymous memory in base pages",
                &m,
            );
        }
        Err(e) => out.notes.push(format!(
            "fork_exit_wait_32mib, fork_per_mib: skipped, the 32 MiB region could not be made: {e:#}"
        )),
    }
    out.check(forks.check("forked"));
    Ok(())
}

/// spawn_exec: posix_spawn of `path` and waitpid.
fn measure_spawn(ctx: &Context, h: &Harness, path: &str, out: &mut Outcome) -> anyhow::Result<()> {
    (ctx.progress)("posix_spawn /bin/true + wait");
    let cpath = CString::new(path)?;
    let arg0 = CString::new("true")?;
    let argv = [arg0.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
    let envp = [std::ptr::null_mut()];
    let spawns = ChildStatuses::default();
    let m = time_children(h, &spawns, &format!("posix_spawn {path}"), || {
        spawn_wait(&cpath, &argv, &envp)
    })?;
    out.check(spawns.check(path));
    out.measured(
        "spawn_exec",
        &format!("posix_spawn() of {path}, then waitpid()"),
        &m,
    );
    Ok(())
}

/// The finding: fork against thread creation and spawn, the per-MiB share, and both models.
fn finding(ctx: &Context, own_anon: Option<u64>, out: &mut Outcome) {
    let per_mib = per_mib_metric(out);
    let fork = out.median("fork_exit_wait");
    let spawn = out.get("spawn_exec").map(|m| m.summary.median);
    let mut text = format!("fork + exit + wait costs {}", fmt_ns(fork));
    let mut from = vec!["fork_exit_wait"];
    if let Some(t) = ctx.earlier_median("cpu.thread-create", "create_join") {
        text.push_str(&format!(
            ", {:.1}x creating and joining a thread ({})",
            fork / t,
            fmt_ns(t)
        ));
        from.push("cpu.thread-create/create_join");
    }
    if let Some(s) = spawn {
        text.push_str(&format!(
            "; running a program (posix_spawn + exec of true) costs {} ({:.1}x fork)",
            fmt_ns(s),
            s / fork
        ));
        from.push("spawn_exec");
    }
    text.push('.');
    if let Some((v, ci)) = per_mib {
        out.check(per_mib_check(v, ci));
        if v > 0.0 && ci[0] > 0.0 {
            text.push_str(&format!(
                " Each MiB of the parent's resident anonymous memory in {} KiB pages adds {} to it \
                 ({} from a parent with {ADDED_MIB} MiB more).",
                crate::platform::page_size() / 1024,
                fmt_ns(v),
                fmt_ns(out.median("fork_exit_wait_32mib")),
            ));
            from.extend(["fork_per_mib", "fork_exit_wait_32mib"]);
        }
    }
    text.push_str(&models_text(ctx, fork, spawn, own_anon, per_mib));
    out.finding(text, &from);
}

/// Each measured cost against its model. The parent's anonymous pages at the measured per-MiB
/// cost join fork's model here, not in its prediction: fork_per_mib is measured in this
/// experiment.
fn models_text(
    ctx: &Context,
    fork: f64,
    spawn: Option<f64>,
    own_anon: Option<u64>,
    per_mib: Option<(f64, [f64; 2])>,
) -> String {
    let pages = match (own_anon, per_mib) {
        (Some(b), Some((v, ci))) if v > 0.0 && ci[0] > 0.0 => {
            let mib = b as f64 / (1u64 << 20) as f64;
            Some((
                mib * v,
                format!(
                    ", process switches and the parent's {mib:.1} MiB of resident anonymous \
                     memory at fork_per_mib"
                ),
            ))
        }
        _ => None,
    };
    let mut text = String::new();
    for (name, measured, m, extra) in [
        ("fork", Some(fork), FORK.value(ctx), pages),
        ("spawn", spawn, SPAWN.value(ctx), None),
    ] {
        if let (Some(c), Some(v)) = (measured, m) {
            let (add, parts) = extra.unwrap_or((0.0, " and process switches".into()));
            text.push_str(&crate::experiments::explained(
                &format!("For {name}, kernel entries{parts}"),
                v + add,
                c,
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The premise fails for memory that is not resident (a region never written), and
    /// for a count of huge pages in it; it is unverified without a residency reading.
    #[test]
    fn the_added_region_premise_fails_when_it_is_not_resident_base_pages() {
        let r = added_region(
            &crate::machine::Machine::gather(),
            crate::experiments::Profile::Smoke,
        )
        .unwrap();
        let all = resident_pages(&r).expect("mincore reads an anonymous region");
        assert_eq!(all.0, all.1, "every page written is resident");
        assert!(region_check(Some(all), Some(all), Some(0)).passed);
        assert!(region_check(Some(all), Some(all), None).passed);
        let fresh = Region::new(ADDED_MIB << 20, Pages::Base).unwrap();
        let none = resident_pages(&fresh).unwrap();
        assert!(none.0 < none.1 / 2, "{none:?}");
        for c in [
            region_check(Some(all), Some(none), Some(0)),
            region_check(Some(none), Some(all), Some(0)),
            region_check(Some(all), Some(all), Some(2 << 20)),
        ] {
            assert!(c.premise && !c.passed && !c.unverified, "{c:?}");
        }
        let c = region_check(None, Some(all), Some(0));
        assert!(c.unverified, "{c:?}");
    }

    #[test]
    fn added_memory_that_makes_fork_faster_beyond_noise_is_invalid() {
        assert!(per_mib_check(30e3, [25e3, 35e3]).passed);
        // Zero within noise: a system whose fork copies no entries per page.
        assert!(per_mib_check(-1e3, [-5e3, 4e3]).passed);
        let c = per_mib_check(-10e3, [-15e3, -5e3]);
        assert!(c.premise && !c.passed, "{c:?}");
    }
}
