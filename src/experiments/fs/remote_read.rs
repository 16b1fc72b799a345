//! fs.remote-read: fs.read's sweep on --remote-dir and on the local scratch disk in the
//! same sitting, with the remote/local ratio per access pattern.

use super::note_vm_host_cache;
use super::read::{metric_name, report, sweep, SweepOut, SweepPlan, PASSES};
use crate::experiments::kit::files::{disk_scratch, scratch_note, Pattern, MIB};
use crate::experiments::predict::Predictions;
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::results::{Check, Prediction};
use crate::scratch::Scratch;
use crate::units::fmt_bytes;
use std::path::Path;
use std::time::Duration;

pub struct RemoteRead;

/// Largest file.
const CAP: PerProfile<u64> = PerProfile::new(2 * MIB, 4 * MIB, 64 * MIB, 256 * MIB);

/// Reading time per size, on each side.
const PER_SIZE: PerProfile<Duration> = PerProfile::new(ms(150), ms(80), ms(1000), ms(2500));

const SPEC: Spec = Spec {
    id: "fs.remote-read",
    title: "Remote file read time per 4 KiB block",
    description: "fs.read on --remote-dir (NFS, SMB, sshfs...) and locally, with the remote/local ratio per pattern",
    method: crate::method!("fs.remote-read"),
    needs: Needs {
        remote_dir: true,
        disk_bytes: 2 * CAP.get(Profile::Quick),
        ..Needs::NONE
    },
    // The remote file system and the network.
    ..Spec::DEVICE
};

impl Experiment for RemoteRead {
    fn spec(&self) -> &Spec {
        &SPEC
    }
    fn budget(&self, p: Profile) -> Duration {
        let n = crate::units::doublings(MIB, CAP.get(p)).len() as u32;
        // Remote and local sweeps, and writing over the network at ~20 MB/s.
        PER_SIZE.get(p) * 2 * n + Duration::from_secs_f64(2.0 * CAP.get(p) as f64 / 20e6)
    }
    fn predict(&self, ctx: &Context) -> Vec<(String, Prediction)> {
        let mut p = Predictions::new(ctx);
        // The measured round trip: net.rtt's tcp median, loopback unless --peer.
        let rtt = p.earlier("net.rtt", &["tcp"]).named("t_round_trip");
        for pattern in [Pattern::Sequential, Pattern::Random] {
            let local_name = metric_name(false, pattern);
            let local = p.earlier("fs.read", &[&local_name]).named("t_local");
            p.state(&format!("ratio_{local_name}"), &[&local, &rtt], |v| {
                Prediction::new(
                    (v[0] + v[1]) / v[0],
                    "(t_local + t_round_trip) / t_local: each uncached block is one request to the server, whose own read is taken as costing what a local one does",
                )
            });
            p.add(
                &format!("ratio_{}", metric_name(true, pattern)),
                Prediction::new(
                    1.0,
                    "1: cached remote data sits in the same local page cache",
                ),
            );
        }
        p.done()
    }
    fn run(&self, ctx: &Context) -> anyhow::Result<Outcome> {
        let Some(remote) = ctx.options.remote_dir.as_deref() else {
            return Ok(Outcome::skipped(
                "no remote directory: pass --remote-dir PATH on a mounted network file system (NFS, SMB, sshfs...)",
            ));
        };
        let largest = CAP.get(ctx.profile);
        // The sweep holds two files of a size at a time (its random uncached pass reads
        // a file of its own).
        let (rbase, rfs, rhalf) = crate::scratch::allowance(Some(remote))?;
        if rhalf < 2 * largest {
            return Ok(Outcome::skipped(format!(
                "not enough free space in {}: need {}, may use {} (half of the {} free)",
                rbase.display(),
                fmt_bytes((2 * largest) as f64),
                fmt_bytes(rhalf as f64),
                fmt_bytes(rfs.free_bytes as f64)
            )));
        }
        let local = match disk_scratch(ctx, 2 * largest)? {
            Ok(s) => s,
            Err(reason) => return Ok(Outcome::skipped(format!("local side: {reason}"))),
        };
        let mut out = Outcome::default();
        out.notes.push(scratch_note(local));
        note_vm_host_cache(ctx, &mut out);
        out.check(network_check(remote, &rfs));
        let (rs, ls) = sweeps(ctx, remote, local, largest)?;
        for (side, s) in [("remote", &rs), ("local", &ls)] {
            for c in &s.checks {
                let mut c = c.clone();
                c.name = format!("{side}: {}", c.name);
                out.check(c);
            }
            let notes = s.notes.iter().map(|n| format!("{side}: {n}"));
            out.notes.extend(notes);
        }
        report(&mut out, &rs, "remote_");
        report(&mut out, &ls, "local_");
        report_ratios(ctx, &mut out, &rs, &ls, &rfs.fs_type);
        Ok(out)
    }
}

/// Premise: the remote folder is on a network file system (else the ratio means nothing).
fn network_check(remote: &Path, rfs: &crate::scratch::FsInfo) -> Check {
    Check::premise(
        "remote directory on a network file system",
        rfs.network,
        format!(
            "{} is on {} (statfs magic {:#x}){}",
            remote.display(),
            rfs.fs_type,
            rfs.magic,
            if rfs.network {
                ""
            } else {
                ": a local file system, so a remote/local ratio means nothing"
            }
        ),
    )
}

/// The remote sweep (within the budget), then the local one over the sizes the remote
/// side completed, so the ratios compare like with like.
fn sweeps(
    ctx: &Context,
    remote: &Path,
    local: &Scratch,
    largest: u64,
) -> anyhow::Result<(SweepOut, SweepOut)> {
    let rscratch = Scratch::new(Some(remote))?;
    let mut plan = SweepPlan::for_profile(ctx.profile, largest, "remote");
    let (u, c) = (plan.uncached, plan.cached);
    plan.uncached = u.min(Duration::from_millis(300));
    plan.cached = c.min(Duration::from_millis(60));
    // The remote side may take the budget; the local one repeats its sizes.
    plan.deadline = Some(ctx.harness(1).deadline(ctx.budget));
    let rs = sweep(ctx, &rscratch, &plan)?;
    drop(rscratch);
    plan.label = "local";
    let done: std::collections::BTreeSet<u64> = rs.points.iter().map(|p| p.size).collect();
    plan.sizes.retain(|s| done.contains(s));
    plan.deadline = None;
    let ls = sweep(ctx, local, &plan)?;
    Ok((rs, ls))
}

/// Remote over local per pattern and cache state at the largest common size: each
/// remote trial over the local median. The finding quotes the pooled runs' ratios.
fn report_ratios(ctx: &Context, out: &mut Outcome, rs: &SweepOut, ls: &SweepOut, fs_type: &str) {
    let size = rs.largest().min(ls.largest());
    let mut summary = Vec::new();
    for (cached, pattern) in PASSES {
        let (Some(r), Some(l)) = (rs.get(size, cached, pattern), ls.get(size, cached, pattern))
        else {
            continue;
        };
        let lmed = l.median();
        let raw: Vec<f64> = r.times.per_block_ns.iter().map(|v| v / lmed).collect();
        let pass = metric_name(cached, pattern);
        let (name, local) = (format!("ratio_{pass}"), format!("local_{pass}"));
        let desc = format!(
            "remote / local time per 4 KiB block at {} (each remote trial over the local median)",
            fmt_bytes(size as f64)
        );
        out.metric(&name, "ratio", &desc, raw)
            .derived(&[(&local, "div", 1.0)]);
        summary.push((pass.replace('_', " "), name));
    }
    out.pool(ctx);
    let summary: Vec<String> = summary
        .iter()
        .map(|(pass, name)| format!("{pass} {:.2}x", out.median(name)))
        .collect();
    out.finding(
        format!(
            "Remote ({fs_type}) vs local 4 KiB reads at {}: {}.",
            fmt_bytes(size as f64),
            summary.join(", ")
        ),
        &[
            "ratio_uncached_seq",
            "ratio_uncached_random",
            "ratio_cached_seq",
            "ratio_cached_random",
        ],
    );
}
