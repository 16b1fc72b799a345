//! `osmeter watch [--every DURATION]`: one pass of the watch selection, recorded to the
//! history, then this host's change points with their conditions, written as an
//! OpenMetrics textfile, a JSON summary and the history page (each replaced atomically).
//! With --every it repeats in the foreground; Ctrl-C (or SIGTERM) ends it between or
//! during passes, the scratch files of a pass removed (`scratch::install_cleanup_handler`).

use crate::error::{Error, Result};
use crate::experiments::Profile;
use crate::history::changes::Settings;
use crate::runner::{self, Registry, RunConfig};
use crate::watch;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub(super) const EXAMPLES: &str = "Examples:
  osmeter watch                              one pass, exports beside the history
  osmeter watch --every 30m                  a pass every 30 minutes until Ctrl-C
  osmeter watch --openmetrics /var/lib/node_exporter/textfile/osmeter.prom
  osmeter watch --install-systemd /etc/systemd/system
See docs/WATCH.md.";

const SERVICE: &str = include_str!("../../deploy/systemd/osmeter-watch.service");
const TIMER: &str = include_str!("../../deploy/systemd/osmeter-watch.timer");
/// The binary path the shipped service names; --install-systemd puts this binary's.
const UNIT_BINARY: &str = "/usr/local/bin/osmeter";

#[derive(clap::Args)]
pub(super) struct Args {
    /// Repeat: a pass every DURATION (e.g. 30m, 1h), in the foreground until Ctrl-C.
    #[arg(long, value_parser = crate::units::parse_duration)]
    every: Option<Duration>,
    /// With --every: stop after N passes.
    #[arg(long, requires = "every", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Folder of the exports (watch.prom, watch.json, watch.html); default: a `watch`
    /// folder beside the history database.
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Also write the OpenMetrics textfile to FILE (e.g. in node_exporter's
    /// --collector.textfile.directory), replaced atomically on every pass.
    #[arg(long, value_name = "FILE")]
    openmetrics: Option<PathBuf>,
    /// Wall time of the burst-and-sustained CPU measurement (watch.cpu-sustained).
    #[arg(long, default_value = "1s", value_parser = crate::units::parse_duration)]
    sustained: Duration,
    #[command(flatten)]
    target: super::target::Args,
    /// The experiments of a pass instead of the watch selection (ids or globs;
    /// `watch.cpu-sustained` is the sustained measurement). For tests and debugging.
    #[arg(long, hide = true)]
    only: Vec<String>,
    /// Write osmeter-watch.service and osmeter-watch.timer into DIR (naming this binary)
    /// and make no pass.
    #[arg(long, value_name = "DIR")]
    install_systemd: Option<PathBuf>,
    /// Print only the change sentences and the export paths.
    #[arg(long)]
    quiet: bool,
}

pub(super) fn run(a: Args) -> ExitCode {
    match watch_cmd(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

fn watch_cmd(a: Args) -> Result<()> {
    if let Some(dir) = &a.install_systemd {
        return install_systemd(dir);
    }
    let options = a.target.options(None, false)?;
    let history = crate::history::default_path().map_err(|e| Error::usage(format!("{e:#}")))?;
    let out_dir = match &a.out_dir {
        Some(d) => d.clone(),
        None => history.parent().unwrap_or(Path::new(".")).join("watch"),
    };
    if let Some(f) = a.openmetrics.as_ref().filter(|f| f.is_dir()) {
        return Err(Error::usage(format!(
            "--openmetrics {}: is a directory",
            f.display()
        )));
    }
    let selection: Vec<String> = if a.only.is_empty() {
        watch::SELECTION
            .iter()
            .map(|s| s.to_string())
            .chain(std::iter::once(watch::sustained::ID.to_string()))
            .collect()
    } else {
        a.only
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let sustained = selection
        .iter()
        .any(|p| glob::Pattern::new(p).is_ok_and(|g| g.matches(watch::sustained::ID)));
    let only: Vec<String> = selection
        .into_iter()
        .filter(|p| p != watch::sustained::ID)
        .collect();
    if only.is_empty() {
        return Err(Error::usage(
            "--only: a pass needs at least one experiment besides watch.cpu-sustained",
        ));
    }
    let cfg = RunConfig {
        profile: Profile::Smoke,
        only,
        skip: vec![],
        cpu: a.target.cpu,
        repeat: Some(1),
        options,
    };
    // Checked once before the first pass: a bad selection or peer fails at once.
    runner::plan(&cfg, Registry::real())?;
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Error::usage(format!("--out-dir {}: {e}", out_dir.display())))?;
    // From here an interruption removes the scratch files and ends the process; between
    // passes nothing is half-written (the exports are renamed into place, the history
    // commits in one transaction).
    crate::scratch::install_cleanup_handler();
    let mut passes = 0u64;
    loop {
        let began = Instant::now();
        pass(&a, &cfg, sustained, &out_dir)?;
        passes += 1;
        let Some(every) = a.every else { break };
        if a.count.is_some_and(|n| passes >= n) {
            break;
        }
        let wait = every.saturating_sub(began.elapsed());
        if !a.quiet {
            eprintln!(
                "next pass in {:.0} s (Ctrl-C ends the watch)",
                wait.as_secs_f64()
            );
        }
        std::thread::sleep(wait);
    }
    Ok(())
}

/// One pass: measure, record, analyse, export.
fn pass(a: &Args, cfg: &RunConfig, sustained: bool, out_dir: &Path) -> Result<()> {
    let mut results = runner::plan(cfg, Registry::real())?.run(&runner::Silent)?;
    if sustained {
        let e = watch::sustained_for(&results, a.sustained);
        results.duration_s += e.duration_s;
        results.experiments.push(e);
    }
    let mut h = crate::history::History::open_default()
        .map_err(|e| Error::runtime(format!("history: {e:#}")))?;
    let id = match h
        .record(&results, None)
        .map_err(|e| Error::runtime(format!("history {}: {e:#}", h.path.display())))?
    {
        crate::history::Recorded::New(id) | crate::history::Recorded::AlreadyPresent(id) => id,
    };
    let ids: Vec<String> = results.experiments.iter().map(|e| e.id.clone()).collect();
    let s = Settings::default();
    let found = watch::analyse(&h, results.host_name(), &ids, watch::WINDOW, &s)
        .map_err(|e| Error::runtime(format!("history {}: {e:#}", h.path.display())))?;
    let prom = watch::openmetrics(&results, &found);
    let summary = watch::Summary::new(&results, Some(id), h.path.display().to_string(), &found, &s);
    let json = serde_json::to_string_pretty(&summary).map_err(Error::runtime)?;
    let page = crate::report::history_page::render(&found, &watch::method(&s));
    let mut written = vec![
        (out_dir.join("watch.prom"), prom.clone()),
        (out_dir.join("watch.json"), json),
        (out_dir.join("watch.html"), page),
    ];
    if let Some(f) = &a.openmetrics {
        written.push((f.clone(), prom));
    }
    for (f, text) in &written {
        super::export::write_atomic(f, text)?;
    }
    let n: usize = found.iter().map(|s| s.changes.len()).sum();
    for (e, status, why) in &summary.not_ok {
        eprintln!("osmeter watch: {e} {status}: {why}");
    }
    for c in &summary.changes {
        if let Some(w) = &c.change.why {
            println!("{w}");
        }
    }
    if !a.quiet {
        println!(
            "pass {} at {} ({:.1} s): {} series, {n} change point(s); history {}",
            id,
            results.started_at,
            results.duration_s,
            found.len(),
            h.path.display()
        );
    }
    for (f, _) in &written {
        eprintln!("written: {}", f.display());
    }
    Ok(())
}

/// Writes the service and timer into `dir`, naming this binary; refuses to overwrite.
fn install_systemd(dir: &Path) -> Result<()> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::runtime(format!("the path of this binary: {e}")))?;
    let exe = exe.display().to_string();
    if exe.chars().any(|c| c.is_whitespace() || c == '%') {
        return Err(Error::usage(format!(
            "this binary's path ({exe}) has a space or %: copy it to {UNIT_BINARY} and use deploy/systemd/"
        )));
    }
    if !dir.is_dir() {
        return Err(Error::usage(format!(
            "--install-systemd {}: not a directory",
            dir.display()
        )));
    }
    let files = [
        ("osmeter-watch.service", SERVICE.replace(UNIT_BINARY, &exe)),
        ("osmeter-watch.timer", TIMER.to_string()),
    ];
    for (name, _) in &files {
        if dir.join(name).symlink_metadata().is_ok() {
            return Err(Error::usage(format!(
                "{}: exists; osmeter does not overwrite it",
                dir.join(name).display()
            )));
        }
    }
    for (name, text) in &files {
        super::export::write_new(&dir.join(name), text)?;
        println!("written: {}", dir.join(name).display());
    }
    println!("then: systemctl daemon-reload && systemctl enable --now osmeter-watch.timer");
    Ok(())
}
