//! `osmeter history [--json]`, `osmeter history import PATH...` and `osmeter history
//! changes`: the local run history (crate::history) listed, results files added to it,
//! or the runs where a metric's level shifted (crate::history::changes).

use crate::error::{Error, Result};
use crate::history::{self, History, Recorded};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    cmd: Option<Sub>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Add collected results (results.json files, results folders, or folders of them such
    /// as a fleet's) to the history; a run already there is left as it is.
    Import {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Find the runs where a metric's level shifted (E-divisive means with a permutation
    /// test, steps kept only well above the series' run-to-run noise), per host, machine
    /// fingerprint and profile.
    Changes(super::history_changes::Args),
}

pub(super) fn run(a: Args) -> ExitCode {
    crate::error::exit(match a.cmd {
        None => list(a.json),
        Some(Sub::Import { paths }) => import(&paths),
        Some(Sub::Changes(c)) => super::history_changes::run(c, a.json),
    })
}

fn open() -> Result<History> {
    History::open_default().map_err(|e| Error::runtime(format!("history: {e:#}")))
}

/// `osmeter history [--json]`.
fn list(json: bool) -> Result<()> {
    let h = open()?;
    let rows = h
        .list()
        .map_err(|e| Error::runtime(format!("history {}: {e:#}", h.path.display())))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return Ok(());
    }
    if rows.is_empty() {
        println!("no runs recorded yet in {}", h.path.display());
        return Ok(());
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(vec![
        "id",
        "started (UTC)",
        "host",
        "profile",
        "experiments",
        "duration",
        "folder",
    ]);
    for r in &rows {
        t.add_row(vec![
            r.id.to_string(),
            r.started_at.clone(),
            r.host.clone(),
            r.profile.clone(),
            r.experiments.to_string(),
            format!("{:.1} s", r.duration_s),
            r.folder.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    println!("{t}");
    println!("history: {}", h.path.display());
    Ok(())
}

/// `osmeter history import PATH...`: every results file is read before anything is
/// written, so one bad file imports nothing.
fn import(paths: &[PathBuf]) -> Result<()> {
    let mut docs = Vec::new();
    for p in paths {
        for f in history::results_files(p).map_err(Error::usage)? {
            let r = crate::results::load::load(&f).map_err(Error::usage)?;
            docs.push((f, r));
        }
    }
    let mut h = open()?;
    let (mut new, mut old) = (0, 0);
    for (f, r) in &docs {
        let folder = f.parent().filter(|p| !p.as_os_str().is_empty());
        match h.record(r, folder) {
            Ok(Recorded::New(id)) => {
                new += 1;
                println!(
                    "run {id}: {} {} <- {}",
                    r.host_name(),
                    r.started_at,
                    f.display()
                );
            }
            Ok(Recorded::AlreadyPresent(id)) => {
                old += 1;
                println!(
                    "run {id}: {} {} already in the history ({})",
                    r.host_name(),
                    r.started_at,
                    f.display()
                );
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "history {}: {}: {e:#}",
                    h.path.display(),
                    f.display()
                )))
            }
        }
    }
    println!(
        "imported {new} run(s), {old} already present; history: {}",
        h.path.display()
    );
    Ok(())
}
