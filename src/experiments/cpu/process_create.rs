//! cpu.process-create: fork + _exit + waitpid, and posix_spawn of /bin/true + waitpid.

use crate::experiments::{Context, Experiment, Outcome, Profile};
use crate::opaque::repeat;
use crate::results::{Check, Prediction};
use crate::units::fmt_ns;
use std::cell::Cell;
use std::ffi::CString;
use std::time::Duration;

pub struct ProcessCreate;

/// System calls per fork + _exit + waitpid, counted with `strace -f` on a C loop: clone,
/// set_robust_list in the child, exit_group, wait4.
const FORK_SYSCALLS: f64 = 4.0;
/// Per posix_spawn of /bin/true + waitpid (strace -f): clone3, 122 rt_sigaction (the child
/// resets every handler), and ~36 of execve and the dynamic loader's mmap, openat, mprotect.
const SPAWN_SYSCALLS: f64 = 159.0;
/// Context switches per operation (perf stat -e context-switches on the same loops, pinned):
/// to the child and back; exec adds one more.
const FORK_SWITCHES: f64 = 2.0;
const SPAWN_SWITCHES: f64 = 3.0;

/// The model from primitives measured earlier in the run: each counted system call at
/// getppid's cost and each switch at a process switch's. It leaves out copying or building
/// the address space (page tables, VMAs) and the minor faults (about 20 per fork of a small
/// parent, 50 per exec of true, by perf; mem.pagefault measures their cost later in the run),
/// so prediction / measurement is the share the entries and switches explain.
fn model(ctx: &Context, syscalls: f64, switches: f64, what: &str) -> Option<(f64, Prediction)> {
    if !super::COUNTS_HOLD {
        return None;
    }
    let sys = ctx.earlier_median("cpu.syscall", "getppid")?;
    // A switch measured at or below zero is noise, not a cost to build on.
    let sw = ctx
        .earlier_median("cpu.process-switch", "switch")
        .filter(|v| *v > 0.0)?;
    let v = syscalls * sys + switches * sw;
    Some((
        v,
        Prediction::new(
            v,
            format!(
                "{syscalls} system calls x getppid + {switches} x process switch (counts from the method; \
                 {what} not in the model)"
            ),
        )
        .measured("getppid", sys, "ns", "measured: cpu.syscall getppid")
        .measured("process_switch", sw, "ns", "measured: cpu.process-switch switch")
        .method("system_calls", syscalls, "calls", super::STRACE_LIBC)
        .method("switches", switches, "switches", "perf stat -e context-switches of the method"),
    ))
}

fn fork_model(ctx: &Context) -> Option<(f64, Prediction)> {
    model(
        ctx,
        FORK_SYSCALLS,
        FORK_SWITCHES,
        "address-space copy and teardown, minor faults",
    )
}

fn spawn_model(ctx: &Context) -> Option<(f64, Prediction)> {
    model(
        ctx,
        SPAWN_SYSCALLS,
        SPAWN_SWITCHES,
        "the new image's mappings, minor faults",
    )
}

/// Candidate tiny programs, in preference order.
const TRUE_PATHS: [&str; 2] = ["/bin/true", "/usr/bin/true"];

#[cfg(test)]
thread_local! {
    /// Test seam: the program spawned instead of `true` on this thread (`/bin/false`: a
    /// child that fails, as under a seccomp filter or a broken exec).
    pub(crate) static PROGRAM: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// The program spawned: the first of `TRUE_PATHS` that exists.
fn program() -> Option<&'static str> {
    #[cfg(test)]
    if let Some(p) = PROGRAM.with(|p| p.get()) {
        return Some(p);
    }
    TRUE_PATHS
        .iter()
        .copied()
        .find(|p| std::path::Path::new(p).is_file())
}

/// Resident pages and mappings of this process.
fn footprint() -> (f64, f64) {
    crate::machine::process::footprint()
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
struct Tally {
    ok: Cell<u64>,
    bad: Cell<u64>,
    bad_status: Cell<libc::c_int>,
}

impl Tally {
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

const META: crate::experiments::ExperimentMeta = crate::experiments::ExperimentMeta {
    id: "cpu.process-create",
    title: "Process creation",
    description: "fork + _exit + waitpid, and posix_spawn of /bin/true + waitpid (reported separately)",
    method: "fork_exit_wait: fork(); the child calls _exit(0) at once; the parent waitpid()s for it. spawn_exec: \
        posix_spawn() of /bin/true (or /usr/bin/true) with an empty environment, then waitpid(); glibc's \
        posix_spawn is clone(CLONE_VM|CLONE_VFORK) + execve, so it copies no page tables and the figure is \
        dominated by exec: a new address space, the dynamic loader mapping and faulting in libc, exit. Each \
        create+wait is one iteration of the calibrated loop, loop overhead subtracted. Children inherit the \
        pinning, so they run on the measuring CPU and the figure contains the switches to the child and back. \
        fork's cost grows with the parent's resident pages and mappings (recorded as prediction inputs), so a \
        small parent (osmeter) forks faster than a large one: stress-ng --fork implies 2.5-3x this figure per op \
        because its stressor has ~4x the mappings and ~10x the anonymous resident pages, its child makes ~10 \
        system calls before exiting, and its parent also calls setpgid and kill; a plain C fork loop from a \
        small parent agrees with fork_exit_wait. Check: every child's wait status is a normal \
        exit with status 0.",
    needs: crate::experiments::Needs::NONE,
    // Kernel work at the core's clock (page tables, exec).
    bottleneck: crate::results::Bottleneck::Chain,
    // One CPU of each kind of core on hybrid CPUs (runner::per_kind).
    per_core_kind: true,
    subtracts_loop: true,
};

impl Experiment for ProcessCreate {
    fn meta(&self) -> &crate::experiments::ExperimentMeta {
        &META
    }
    fn budget(&self, p: Profile) -> Duration {
        let ms = Duration::from_millis;
        match p {
            Profile::Smoke => ms(300),
            Profile::Quick => ms(2000),
            Profile::Standard => ms(8000),
            Profile::Thorough => ms(20000),
        }
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        if !super::COUNTS_HOLD {
            let why = super::COUNTS_WITHHELD;
            return vec![
                ("fork_exit_wait".into(), Prediction::withheld(why)),
                ("spawn_exec".into(), Prediction::withheld(why)),
            ];
        }
        let (pages, vmas) = footprint();
        let mut v = Vec::new();
        if let Some((_, p)) = fork_model(ctx) {
            // The parent's size drives what the model leaves out; recorded for the reader.
            let p = p
                .machine(
                    "resident_pages",
                    pages,
                    "pages",
                    crate::machine::process::RESIDENT_SOURCE,
                )
                .machine(
                    "vmas",
                    vmas,
                    "mappings",
                    crate::machine::process::MAPPINGS_SOURCE,
                );
            v.push(("fork_exit_wait".into(), p));
        }
        if let Some((_, p)) = spawn_model(ctx) {
            v.push(("spawn_exec".into(), p));
        }
        if v.is_empty() {
            let why = "cpu.syscall getppid or a positive cpu.process-switch switch was not measured in this run";
            v = vec![
                ("fork_exit_wait".into(), Prediction::withheld(why)),
                ("spawn_exec".into(), Prediction::withheld(why)),
            ];
        }
        v
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let mut out = Outcome::default();
        let program = program();
        let h = super::long_trials(ctx, if program.is_some() { 2 } else { 1 }, 10);
        let err = Cell::new(None::<std::io::Error>);

        (ctx.progress)("fork + exit + wait");
        let forks = Tally::default();
        let m = h.measure(1.0, |n| {
            repeat(n, || {
                if let Some(e) = err.take() {
                    err.set(Some(e));
                } else {
                    forks.add(fork_exit_wait(), &err);
                }
            })
        });
        if let Some(e) = err.take() {
            return Err(anyhow::Error::new(e).context("fork/waitpid"));
        }
        out.check(forks.check("forked"));
        out.measured(
            "fork_exit_wait",
            "fork(), child _exit(0), parent waitpid()",
            &m,
        );

        match program {
            Some(path) => {
                (ctx.progress)("posix_spawn /bin/true + wait");
                let cpath = CString::new(path)?;
                let arg0 = CString::new("true")?;
                let argv = [arg0.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
                let envp = [std::ptr::null_mut()];
                let spawns = Tally::default();
                let m = h.measure(1.0, |n| {
                    repeat(n, || {
                        if let Some(e) = err.take() {
                            err.set(Some(e));
                        } else {
                            spawns.add(spawn_wait(&cpath, &argv, &envp), &err);
                        }
                    })
                });
                if let Some(e) = err.take() {
                    return Err(anyhow::Error::new(e).context(format!("posix_spawn {path}")));
                }
                out.check(spawns.check(path));
                out.measured(
                    "spawn_exec",
                    &format!("posix_spawn() of {path}, then waitpid()"),
                    &m,
                );
            }
            None => out.notes.push(
                "spawn_exec: skipped, neither /bin/true nor /usr/bin/true exists (install coreutils)"
                    .into(),
            ),
        }

        out.pool(ctx);
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
        for (name, measured, m) in [
            ("fork", Some(fork), fork_model(ctx)),
            ("spawn", spawn, spawn_model(ctx)),
        ] {
            if let (Some(c), Some((v, _))) = (measured, m) {
                text.push_str(&crate::experiments::explained(
                    &format!("For {name}, kernel entries and process switches"),
                    v,
                    c,
                ));
            }
        }
        out.finding(text, &from);
        Ok(out)
    }
}
