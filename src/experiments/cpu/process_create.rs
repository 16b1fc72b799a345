//! cpu.process-create: fork + _exit + waitpid (also with 32 MiB more), posix_spawn + waitpid.

use crate::experiments::kit::files::RepeatedCheck;
use crate::experiments::kit::{Pages, Region};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Outcome, PerProfile, Spec};
use crate::harness::{Harness, Measurement};
use crate::machine::process::{MAPPINGS_SOURCE, RESIDENT_SOURCE};
use crate::results::{Check, Prediction};
use crate::units::{fmt_bytes, fmt_ns};
use anyhow::Context as _;
use std::ffi::CString;

pub struct ProcessCreate;

/// fork + _exit + waitpid, counted on a C loop (strace -f, perf stat; the method page).
const FORK: super::Counted = super::Counted {
    syscalls: 4.0,
    switches: 2.0,
    switch_of: "cpu.process-switch",
    switches_source: "perf stat -e context-switches of the method",
    left_out: "address-space copy and teardown, minor faults not in the model",
};
/// posix_spawn of /bin/true + waitpid (the method page); exec adds one switch.
const SPAWN: super::Counted = super::Counted {
    syscalls: 159.0,
    switches: 3.0,
    left_out: "the new image's mappings, minor faults not in the model",
    ..FORK
};

/// Its page-table entries dwarf a small fork's noise, and it fits the smoke profile.
const ADDED_MIB: usize = 32;

fn added_region(
    machine: &crate::machine::Machine,
    profile: crate::experiments::Profile,
) -> anyhow::Result<Region> {
    let len = (ADDED_MIB << 20) as u64;
    crate::experiments::kit::memory_cap(machine, profile, len, len)?;
    let mut r = Region::new(ADDED_MIB << 20, Pages::Base)?;
    if !crate::experiments::seams::get().unwritten {
        r.prefault();
    }
    Ok(r)
}

/// Pages of `r` resident (mincore), of all its pages.
fn resident_pages(r: &Region) -> Option<(usize, usize)> {
    let pages = r.len().div_ceil(crate::platform::page_size());
    let mut vec = vec![0u8; pages];
    // SAFETY: the region is a live mapping of this process and vec holds a byte per page.
    unsafe { crate::platform::mincore(r.as_ptr().cast(), r.len(), &mut vec) }.ok()?;
    Some((vec.iter().filter(|b| *b & 1 == 1).count(), pages))
}

/// The premise of `fork_per_mib`: the region stayed resident in base pages (fork copies
/// huge pages' entries 512 at a time) through the timing.
fn region_check(
    before: Option<(usize, usize)>,
    after: Option<(usize, usize)>,
    huge: Option<u64>,
) -> Check {
    let name = "the added memory was resident in base pages while forking";
    let (Some((b, n)), Some((a, _))) = (before, after) else {
        return Check::unverified(name, "mincore could not read the added region's residency");
    };
    let huge_text = huge.map_or("no huge-page count on this system".into(), |h| {
        format!(
            "{} of it in huge pages (smaps AnonHugePages)",
            fmt_bytes(h as f64)
        )
    });
    Check::premise(
        name,
        b == n && a == n && huge.unwrap_or(0) == 0,
        format!("{b} of {n} pages resident before the timing and {a} after (mincore); {huge_text}"),
    )
}

/// Memory added to the parent cannot make fork cheaper beyond noise.
fn per_mib_check(v: f64, ci: [f64; 2]) -> Check {
    let [v, lo, hi] = [v, ci[0], ci[1]].map(fmt_ns);
    let detail =
        format!("fork_per_mib = {v} (95% interval {lo} to {hi}, the small fork's included)");
    Check::premise(
        "added memory did not make fork faster",
        ci[1] >= 0.0 || ci[1].is_nan(),
        detail,
    )
}

fn program() -> Option<&'static str> {
    if let Some(p) = crate::experiments::seams::get().program {
        return Some(p);
    }
    ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
}

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

#[inline(always)]
fn spawn_wait(path: &CString, argv: &[*mut libc::c_char; 2]) -> std::io::Result<libc::c_int> {
    let (mut pid, envp): (libc::pid_t, [*mut libc::c_char; 1]) = (0, [std::ptr::null_mut()]);
    // SAFETY: path, argv and envp are NUL- and NULL-terminated and outlive the call;
    // null file actions and attributes mean defaults.
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

fn time_children(
    h: &Harness,
    what: &str,
    exits: &mut RepeatedCheck,
    mut step: impl FnMut() -> std::io::Result<libc::c_int>,
) -> anyhow::Result<Measurement> {
    let (m, err) = super::measure_ops(h, None, || {
        let s = step()?;
        exits.record(libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0, || {
            format!("{s:#x}")
        });
        Ok::<_, std::io::Error>(())
    });
    err.map_or(Ok(m), Err).context(what.to_string())
}

fn exits_check(exits: &RepeatedCheck, what: &str) -> Check {
    let (bad, all, status) = (exits.total - exits.passed, exits.total, &exits.last_failure);
    let detail = match bad {
        0 => format!("{all} children, all exited 0"),
        _ => format!("{bad} of {all} children did not exit 0 (e.g. wait status {status})"),
    };
    let name = format!("every {what} child exited with status 0");
    Check::premise(&name, bad == 0 && all > 0, detail)
}

const SPEC: Spec = Spec {
    id: "cpu.process-create",
    title: "Process creation",
    description: "fork + _exit + waitpid, the same from a parent with 32 MiB more resident, and posix_spawn of /bin/true + waitpid (reported separately)",
    method: crate::method!("cpu.process-create"),
    budget: Some(PerProfile::new(ms(300), ms(1000), ms(8000), ms(20000))),
    // Kernel work (page tables, exec) at the core's clock.
    ..Spec::CORE_LOOP
};

impl Experiment for ProcessCreate {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        // The parent's size drives what the model leaves out.
        let (pages, vmas) = crate::machine::process::footprint();
        let resident = Input::machine("resident_pages", Some(pages), "pages", RESIDENT_SOURCE, "");
        let vmas = Input::machine("vmas", Some(vmas), "mappings", MAPPINGS_SOURCE, "");
        FORK.state(&mut p, "fork_exit_wait", &[&resident, &vmas]);
        SPAWN.state(&mut p, "spawn_exec", &[]);
        p.withhold(
            &["fork_exit_wait_32mib", "fork_per_mib"],
            "no figure measured in the run prices copying and tearing down a page-table entry",
        );
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        use crate::machine::process::{huge_bytes_in, status_bytes};
        let mut out = Outcome::default();
        let program = program();
        let h = super::long_trials(ctx, if program.is_some() { 3 } else { 2 }, 10);
        // The parent's own anonymous memory in base pages as the small fork sees it.
        let own_anon = status_bytes("RssAnon:")
            .zip(huge_bytes_in(0, usize::MAX))
            .map(|(anon, huge)| anon.saturating_sub(huge));
        let mut forks = RepeatedCheck::default();
        (ctx.progress)("fork + exit + wait");
        let m = time_children(&h, "fork/waitpid", &mut forks, fork_exit_wait)?;
        out.measured(
            "fork_exit_wait",
            "fork(), child _exit(0), parent waitpid()",
            &m,
        );
        match added_region(ctx.machine, ctx.profile) {
            Ok(region) => {
                (ctx.progress)("fork + exit + wait with 32 MiB more resident");
                let before = resident_pages(&region);
                let what = "fork/waitpid with the added memory";
                let m = time_children(&h, what, &mut forks, fork_exit_wait)?;
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
        out.check(exits_check(&forks, "forked"));
        match program {
            Some(path) => {
                (ctx.progress)("posix_spawn /bin/true + wait");
                let (cpath, arg0) = (CString::new(path)?, CString::new("true")?);
                let argv = [arg0.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
                let mut spawns = RepeatedCheck::default();
                let what = format!("posix_spawn {path}");
                let m = time_children(&h, &what, &mut spawns, || spawn_wait(&cpath, &argv))?;
                out.check(exits_check(&spawns, path));
                let description = format!("posix_spawn() of {path}, then waitpid()");
                out.measured("spawn_exec", &description, &m);
            }
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

/// fork against thread creation and spawn, the per-MiB share, and both models.
fn finding(ctx: &Context, own_anon: Option<u64>, out: &mut Outcome) {
    let per_mib = out.difference(
        "fork_per_mib",
        "fork + exit + wait time added per MiB of the parent's resident anonymous memory in \
         base pages: (fork_exit_wait_32mib - median fork_exit_wait) / 32, per trial",
        "fork_exit_wait_32mib",
        "fork_exit_wait",
        1.0 / ADDED_MIB as f64,
    );
    let fork = out.median("fork_exit_wait");
    let spawn = out.get("spawn_exec").map(|m| m.summary.median);
    let mut text = format!("fork + exit + wait costs {}", fmt_ns(fork));
    let mut from = vec!["fork_exit_wait"];
    if let Some(t) = ctx.earlier_median("cpu.thread-create", "create_join") {
        let (k, t) = (fork / t, fmt_ns(t));
        text += &format!(", {k:.1}x creating and joining a thread ({t})");
        from.push("cpu.thread-create/create_join");
    }
    if let Some(s) = spawn {
        let (k, s) = (s / fork, fmt_ns(s));
        text +=
            &format!("; running a program (posix_spawn + exec of true) costs {s} ({k:.1}x fork)");
        from.push("spawn_exec");
    }
    text.push('.');
    // The parent's pages at the per-MiB cost join fork's model here: measured just now.
    let (mut extra, mut parts) = (0.0, "kernel entries and process switches".to_string());
    if let Some((v, ci)) = per_mib {
        out.check(per_mib_check(v, ci));
        if v > 0.0 && ci[0] > 0.0 {
            let kib = crate::platform::page_size() / 1024;
            let (add, big) = (fmt_ns(v), fmt_ns(out.median("fork_exit_wait_32mib")));
            text += &format!(
                " Each MiB of the parent's resident anonymous memory in {kib} KiB pages adds {add} to \
                 it ({big} from a parent with {ADDED_MIB} MiB more)."
            );
            from.extend(["fork_per_mib", "fork_exit_wait_32mib"]);
            if let Some(b) = own_anon {
                let mib = b as f64 / (1u64 << 20) as f64;
                extra = mib * v;
                parts = format!(
                    "kernel entries, process switches and the parent's {mib:.1} MiB of resident \
                     anonymous memory at fork_per_mib"
                );
            }
        }
    }
    text += &FORK.explained(ctx, &format!("For fork, {parts}"), extra, fork);
    if let Some(s) = spawn {
        let parts = "For spawn, kernel entries and process switches";
        text += &SPAWN.explained(ctx, parts, 0.0, s);
    }
    out.finding(text, &from);
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
