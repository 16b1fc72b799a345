//! fs.remote-read: fs.read's sweep on --remote-dir and on the local scratch disk in the
//! same sitting, with the remote/local ratio per access pattern.

use super::read::{metric_name, predict_sweep, report, sweep, Sweep, SweepPlan, PASSES};
use crate::experiments::kit::files::{Pattern, MIB};
use crate::experiments::predict::{Input, Predictions};
use crate::experiments::spec::ms;
use crate::experiments::{Context, Experiment, Needs, Outcome, PerProfile, Profile, Spec};
use crate::results::{Check, Prediction};
use crate::scratch::Scratch;
use crate::units::fmt_bytes;
use std::path::Path;
use std::time::Duration;

pub struct RemoteRead;

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
        let mount = |d: &Path| crate::machine::storage::filesystem_of(d).map(|m| m.source);
        let source = ctx.options.remote_dir.as_deref().map(mount);
        let source = source.map(Option::unwrap_or_default);
        let rtt = server_rtt(&p, source.as_deref(), ctx.options.peer.as_deref());
        for pattern in [Pattern::Sequential, Pattern::Random] {
            let (un, ca) = (metric_name(false, pattern), metric_name(true, pattern));
            // The local side is fs.read's sweep; cached remote data is in the local cache.
            predict_sweep(&mut p, "local_", &[(false, pattern), (true, pattern)]);
            super::predict_cached(&mut p, &format!("remote_{ca}"));
            let local = p.earlier("fs.read", &[&un]).named("t_local");
            let server = "each uncached block is one request to the server, whose own read \
                          is taken as costing what a local one does";
            // The round trip first: where it is not the server's, that is the reason.
            p.state(&format!("remote_{un}"), &[&rtt, &local], |v| {
                Prediction::new(v[1] + v[0], format!("t_local + t_round_trip: {server}"))
            });
            p.state(&format!("ratio_{un}"), &[&rtt, &local], |v| {
                let f = format!("(t_local + t_round_trip) / t_local: {server}");
                Prediction::new((v[1] + v[0]) / v[1], f)
            });
            let same = "1: cached remote data sits in the same local page cache";
            p.add(&format!("ratio_{ca}"), Prediction::new(1.0, same));
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
        // The sweep holds two files of a size at a time.
        let (rbase, rfs, rhalf) = crate::scratch::allowance(Some(remote))?;
        if rhalf < 2 * largest {
            let [need, half, free] =
                [2 * largest, rhalf, rfs.free_bytes].map(|b| fmt_bytes(b as f64));
            let dir = rbase.display();
            return Ok(Outcome::skipped(format!("not enough free space in {dir}: need {need}, may use {half} (half of the {free} free)")));
        }
        let (local, mut out) = match super::on_disk(ctx, 2 * largest)? {
            Ok(x) => x,
            Err(reason) => return Ok(Outcome::skipped(format!("local side: {reason}"))),
        };
        out.check(network_check(remote, &rfs));
        // The remote side may take the budget; the local one repeats the sizes it completed.
        let rscratch = Scratch::new(Some(remote))?;
        let mut plan = SweepPlan::new(ctx, largest, "remote", ctx.budget);
        plan.uncached = plan.uncached.min(Duration::from_millis(300));
        plan.cached = plan.cached.min(Duration::from_millis(60));
        let rs = sweep(ctx, &rscratch, plan)?;
        drop(rscratch);
        let mut sizes: Vec<u64> = rs.points.iter().map(|p| p.size).collect();
        sizes.dedup();
        let (label, deadline) = ("local", None);
        let plan = SweepPlan {
            sizes,
            label,
            deadline,
            ..rs.plan
        };
        let ls = sweep(ctx, local, plan)?;
        report(&mut out, &rs, "remote_");
        report(&mut out, &ls, "local_");
        report_ratios(ctx, &mut out, &rs, &ls, &rfs.fs_type);
        Ok(out)
    }
}

/// net.rtt's round trip to `--peer` where it is the mount `source`'s server, else why not.
fn server_rtt(p: &Predictions, source: Option<&str>, peer: Option<&str>) -> Input {
    let name = "t_round_trip";
    let Some(source) = source else {
        return Input::missing(name, "no --remote-dir");
    };
    let Some(server) = server_host(source) else {
        let why = format!("the mount source {source:?} names no file server host, so no round trip measured here is the server's");
        return Input::missing(name, why);
    };
    let peer = peer.and_then(|s| crate::peer::client::parse_peer(s).ok());
    match peer {
        Some((host, _)) if same_host(&host, &server) => {
            p.earlier("net.rtt", &["remote_tcp"]).named(name)
        }
        Some((host, _)) => Input::missing(name, format!("--peer {host} is not the file server {server}, so net.rtt's round trip is not the server's")),
        None => Input::missing(name, format!("net.rtt measured loopback only, not a round trip to the file server {server}; pass --peer naming it (with `osmeter serve` running there)")),
    }
}

/// The server's host in a mount source: `host:/path` (NFS, sshfs `user@host:`),
/// `[v6]:/path`, `//host/share` (SMB).
fn server_host(source: &str) -> Option<String> {
    let host = if let Some(rest) = source.strip_prefix("//").or(source.strip_prefix("\\\\")) {
        rest.split(['/', '\\']).next()?
    } else if let Some(rest) = source.strip_prefix('[') {
        rest.split_once("]:")?.0
    } else {
        let (host, _) = source.split_once(':')?;
        host.rsplit('@').next()?
    };
    (!host.is_empty() && !host.contains(char::is_whitespace)).then(|| host.to_string())
}

/// Whether two host names are one host: the same name, or an address in common.
fn same_host(a: &str, b: &str) -> bool {
    use std::net::ToSocketAddrs;
    let ips = |h: &str| {
        (h, 0)
            .to_socket_addrs()
            .map_or(vec![], |i| i.map(|s| s.ip()).collect())
    };
    a.eq_ignore_ascii_case(b) || {
        let x = ips(a);
        ips(b).iter().any(|ip| x.contains(ip))
    }
}

/// Premise: the remote folder is on a network file system (else the ratio means nothing).
fn network_check(remote: &Path, rfs: &crate::scratch::FsInfo) -> Check {
    let local = ": a local file system, so a remote/local ratio means nothing";
    let why = if rfs.network { "" } else { local };
    let (dir, fs, magic) = (remote.display(), &rfs.fs_type, rfs.magic);
    let detail = format!("{dir} is on {fs} (statfs magic {magic:#x}){why}");
    let name = "remote directory on a network file system";
    Check::premise(name, rfs.network, detail)
}

/// Remote over local per pass at the largest common size (remote trials / local median).
fn report_ratios(ctx: &Context, out: &mut Outcome, rs: &Sweep, ls: &Sweep, fs_type: &str) {
    let size = rs.largest().min(ls.largest());
    let at = fmt_bytes(size as f64);
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
            "remote / local time per 4 KiB block at {at} (each remote trial over the local median)"
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
    let summary = summary.join(", ");
    let text = format!("Remote ({fs_type}) vs local 4 KiB reads at {at}: {summary}.");
    let ratios = PASSES.map(|(cached, pattern)| format!("ratio_{}", metric_name(cached, pattern)));
    out.finding(text, &ratios.each_ref().map(String::as_str));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::{recorded, World};

    #[test]
    fn the_server_is_read_from_the_mount_source() {
        assert_eq!(server_host("nfs1:/export").as_deref(), Some("nfs1"));
        assert_eq!(server_host("me@box:/home/me").as_deref(), Some("box"));
        assert_eq!(server_host("//filer/share").as_deref(), Some("filer"));
        assert_eq!(server_host("[fd00::1]:/x").as_deref(), Some("fd00::1"));
        assert_eq!(server_host("/dev/vda"), None);
        assert_eq!(server_host("overlay"), None);
    }

    /// Review §3 #7: the uncached ratio used loopback's round trip as the file server's.
    /// Now it needs --peer to name the server; otherwise it is withheld and says why.
    #[test]
    fn the_round_trip_must_be_the_file_servers() {
        let clock = crate::clock::CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let mut o = Outcome::default();
        o.metric("tcp", "ns", "", vec![20e3; 9]);
        o.metric("remote_tcp", "ns", "", vec![300e3; 9]);
        w.earlier.push(recorded("net.rtt", o));
        let mut o = Outcome::default();
        o.metric("uncached_seq", "ns", "", vec![100e3; 9]);
        o.metric("uncached_random", "ns", "", vec![100e3; 9]);
        w.earlier.push(recorded("fs.read", o));
        let dir = tempfile::tempdir().unwrap();
        w.options.remote_dir = Some(dir.path().to_path_buf());
        // A local folder: no server in its mount source, so no ratio from loopback.
        let p = w.with_ctx(|ctx| RemoteRead.predict(ctx));
        let get = |p: &[(String, Prediction)], n: &str| {
            p.iter().find(|(m, _)| m == n).map(|x| x.1.clone()).unwrap()
        };
        let r = get(&p, "ratio_uncached_seq");
        assert!(
            r.withheld
                .as_deref()
                .is_some_and(|w| w.contains("no file server")),
            "{r:?}"
        );
        // Every remote and local metric gets a prediction or a reason.
        for side in ["remote_", "local_"] {
            for (cached, pattern) in PASSES {
                get(&p, &format!("{side}{}", metric_name(cached, pattern)));
            }
        }
        w.with_ctx(|ctx| {
            let p = Predictions::new(ctx);
            let rtt = |peer| server_rtt(&p, Some("10.213.0.1:/export"), peer);
            assert!(rtt(None).why_missing().unwrap().contains("--peer"));
            let other = rtt(Some("10.213.0.2")).why_missing().unwrap().to_string();
            assert!(other.contains("not the file server"), "{other}");
            assert_eq!(rtt(Some("10.213.0.1:7000")).value(), Some(300e3));
        });
    }
}
