//! `osmeter report RESULTS [--out DIR] [--quiet] [--export FORMAT FILE]`: the reports
//! rendered again from a results file, and its exports (commands::export). Missing or corrupt results are bad input (one line, exit 2).

use crate::error::{Error, Result};
use crate::results::load;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub(super) struct Args {
    /// A results.json file or the results folder holding it.
    results: PathBuf,
    /// Where to write report.md, report.html and the plots (default: beside the results file).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Do not print the terminal table.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    export: super::export::Args,
}

pub(super) fn run(a: Args) -> ExitCode {
    crate::error::exit(render(a))
}

fn render(a: Args) -> Result<()> {
    let t = Instant::now();
    let exports = a.export.parse()?;
    let mut r = load::load(&a.results).map_err(Error::usage)?;
    // Findings were computed when the run ended; only files without them get them now.
    r.findings = crate::findings::for_report(&r);
    let file = load::results_file(&a.results);
    let folder = match a.out {
        Some(o) => o,
        None => file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    };
    if !a.quiet {
        print!("{}", crate::report::terminal::render(&r, None));
    }
    let w =
        crate::report::write_reports(&folder, &r).map_err(|e| Error::runtime(format!("{e:#}")))?;
    if !a.quiet {
        println!("report:  {}", w.html.display());
        println!("         {}", w.markdown.display());
        println!(
            "plots:   {} SVG file(s) in {} (rendered in {} ms)",
            w.plots.len(),
            folder.display(),
            t.elapsed().as_millis()
        );
    }
    super::export::write_all(&exports, &r)
}
