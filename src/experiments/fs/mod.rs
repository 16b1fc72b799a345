//! File-system experiments: read time vs file size, the file cache's size, remote files,
//! and contention between processes.

use super::predict::{Input, Predictions};
use super::{Context, Outcome};
use crate::machine::Machine;
use crate::results::Prediction;
use std::path::Path;

pub(crate) mod cache_size;
pub(crate) mod contention;
pub(crate) mod read;
pub(crate) mod remote_read;

use crate::experiments::kit::files::{device_basis, device_of, Pattern, BLOCK};
use crate::scratch::Scratch;
use crate::units::fmt_bytes;

/// The run's scratch folder if it is on a disk and may take `need` bytes (checked before it
/// is made), with an outcome noting it (in a VM also why the host may cache), else why not.
pub(crate) fn on_disk<'a>(
    ctx: &'a Context,
    need: u64,
) -> anyhow::Result<Result<(&'a Scratch, Outcome), String>> {
    let base = ctx.options.scratch_dir.as_deref();
    if ctx.scratch_cell.get().is_none() {
        let (dir, fs, half) = crate::scratch::allowance(base)?;
        let (dir, kind) = (dir.display(), &fs.fs_type);
        if fs.memory_backed {
            return Ok(Err(format!("scratch directory {dir} is on {kind} (memory-backed): a file there never touches a disk; use --scratch-dir on a disk")));
        }
        if half < need {
            let [need, half, free] = [need, half, fs.free_bytes].map(|b| fmt_bytes(b as f64));
            return Ok(Err(format!("not enough free space in {dir}: need {need}, may use {half} (half of the {free} free); free space or use --scratch-dir elsewhere")));
        }
    }
    let s = ctx.scratch()?;
    if let Err(e) = s.require_disk() {
        return Ok(Err(format!("{e:#}")));
    }
    let dir = s.dir().display();
    if s.remaining() < need {
        let [need, left] = [need, s.remaining()].map(|b| fmt_bytes(b as f64));
        return Ok(Err(format!("not enough free space in {dir}: need {need}, may still use {left} of the half of the free space this run may take; free space or use --scratch-dir elsewhere")));
    }
    let (kind, free) = (&s.fs().fs_type, fmt_bytes(s.fs().free_bytes as f64));
    let mut out = Outcome::default();
    out.notes.push(format!(
        "scratch {dir} on {kind} ({free} free at start, at most half used)"
    ));
    if ctx.machine.virtualization.is_vm {
        out.method_notes.push("In a virtual machine the guest's sectors-read counter shows that a read left the guest, not that the host's storage served it: the host may answer uncached reads from its own page cache, unless its disk is set to cache=none.".into());
    }
    Ok(Ok((s, out)))
}

/// A cached 4 KiB read: a system call and a 4 KiB copy, at rates measured earlier.
pub(crate) fn predict_cached(p: &mut Predictions, metric: &str) {
    let sys = p.earlier("cpu.syscall", &["getppid"]).named("t_syscall");
    let copy = p.earlier("mem.bandwidth", &["copy_1t"]).named("copy_rate");
    let f = "t_syscall + 4096 B / copy rate (page cache to user buffer); the page-cache lookup \
             is not in the model";
    p.state(metric, &[&sys, &copy], |v| {
        Prediction::new(v[0] + BLOCK as f64 / v[1] * 1e9, f)
    });
}

/// An uncached 4 KiB read as mem.pagefault's major fault in the same folder.
pub(crate) fn predict_uncached(p: &mut Predictions, metric: &str, dir: &Path, pattern: Pattern) {
    let fault = p.earlier("mem.pagefault", &["major_fault"]);
    if let Some(why) = fault.why_missing() {
        let none = "no block device found behind the folder".to_string();
        let device = device_of(dir).map_or(none, |d| device_basis(&d));
        return p.withhold(&[metric], &format!("{why}, and {device}"));
    }
    let ps = crate::pagecache::page_size() as f64;
    let page_size = Input::machine("page_size", Some(ps), "bytes", "machine: page size", "");
    let src = "method: one device request per uncached block";
    let requests = Input::method("requests", 1.0, "requests/block", src);
    let sequential = pattern == Pattern::Sequential;
    let bound = if sequential {
        ", an upper bound: readahead may merge sequential blocks into fewer requests"
    } else {
        ""
    };
    let page = if ps as usize == BLOCK {
        String::new()
    } else {
        format!(" (a fault reads a {ps} B page, more than the block)")
    };
    let formula = format!(
        "one device request per 4 KiB block, entered through the kernel, as mem.pagefault's \
         major fault on an evicted file in the same folder measured it{page}{bound}"
    );
    p.state(metric, &[&fault, &page_size, &requests], |v| {
        let p = Prediction::new(v[0], formula);
        if sequential {
            p.upper_bound()
        } else {
            p
        }
    });
}

/// MemAvailable and the tightest memory cgroup limit, where known, from the machine facts.
pub(crate) fn memory_limits(machine: &Machine) -> Vec<(&'static str, u64, String)> {
    let (a, cg) = (machine.memory.available_bytes, &machine.cgroup);
    let avail = (a > 0).then(|| ("mem_available", a, "machine: MemAvailable".into()));
    let cgroup = cg.memory_limit_bytes.map(|l| {
        let dir = cg.memory_dir.as_deref().unwrap_or("?");
        let src = format!("machine: memory cgroup limit ({dir})");
        ("cgroup_limit", l, src)
    });
    avail.into_iter().chain(cgroup).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limit_is_plausible() {
        for (_, l, src) in memory_limits(&Machine::gather()) {
            assert!(l > 0, "{src}");
        }
    }
}
