//! `osmeter run`: the suite or a selection. The runner measures and returns the results
//! document; this command shows its progress, writes the results folder, the reports and
//! the history entry, and prints the summary (or the document with --json). A run that
//! an experiment overran is written the same way before the process ends.

use crate::error::{Error, Result, EXIT_OVERRUN, EXIT_RUNTIME};
use crate::experiments::Profile;
use crate::results::{RunResults, Status};
use crate::runner::{self, Registry, RunConfig};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub(super) const EXAMPLES: &str = "Examples:
  osmeter run                                the quick profile, table and results folder
  osmeter run --profile smoke                a 15 s check that everything works
  osmeter run --only 'mem.*' --profile standard
  osmeter run --skip fs.contention --scratch-dir /mnt/disk
  osmeter run --peer otherhost:7878 --only 'net.*'
  osmeter run --json --quiet > results.json";

#[derive(clap::Args)]
pub(super) struct Args {
    /// How much the run may cost.
    #[arg(long, value_enum, default_value = "quick")]
    profile: Profile,
    /// Only these experiments (ids or globs such as 'mem.*'; repeat or comma-separate).
    #[arg(long)]
    only: Vec<String>,
    /// Skip these experiments (ids or globs).
    #[arg(long)]
    skip: Vec<String>,
    /// Parent folder of the results folder (a new HOST-TIMESTAMP folder is made inside).
    #[arg(long, default_value = "osmeter-results")]
    out: PathBuf,
    /// Print the results document on stdout instead of the table (still writes the folder).
    #[arg(long)]
    json: bool,
    /// No progress and no table.
    #[arg(long)]
    quiet: bool,
    /// Do not record the run in the history database.
    #[arg(long)]
    no_history: bool,
    /// Run each experiment N times back to back (exp1 N times, then exp2, ...) and record
    /// one result whose metrics carry the run-to-run spread, which compare uses as noise
    /// (1-100; default 2, and 1 for the smoke profile).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
    repeat: Option<u16>,
    #[command(flatten)]
    target: super::target::Args,
    /// A mounted network file system for fs.remote-read.
    #[arg(long)]
    remote_dir: Option<PathBuf>,
    /// Allow dropping the whole page cache (root only).
    #[arg(long)]
    drop_caches: bool,
    #[command(flatten)]
    export: super::export::Args,
}

pub(super) fn run(a: Args) -> ExitCode {
    match measure_and_publish(a) {
        // Not an error line: the table already shows which experiment failed and why.
        Ok(failed) => ExitCode::from(if failed { EXIT_RUNTIME } else { 0 }),
        Err(e) => e.report(),
    }
}

/// Runs, writes and prints; true when an experiment failed.
fn measure_and_publish(a: Args) -> Result<bool> {
    let cfg = RunConfig {
        profile: a.profile,
        only: a.only,
        skip: a.skip,
        cpu: a.target.cpu,
        repeat: a.repeat.map(usize::from),
        options: a.target.options(a.remote_dir, a.drop_caches)?,
    };
    let mut plan = runner::plan(&cfg, Registry::real())?;
    let exports = a.export.parse()?;
    // After the runner's own checks, before anything is measured.
    crate::results::save::check_out_dir(&a.out).map_err(Error::Usage)?;
    let output = Arc::new(Output {
        out: a.out,
        history: !a.no_history,
        exports,
        json: a.json,
        quiet: a.quiet,
    });
    let display = Arc::new(Display::default());
    plan.on_overrun(end_on_overrun(output.clone(), display.clone()));
    let results = if a.quiet || a.json {
        plan.run(&runner::Silent)?
    } else {
        plan.run(&*display)?
    };
    output.write_and_print(&results, &display)?;
    Ok(results
        .experiments
        .iter()
        .any(|e| e.status == Status::Failed))
}

/// The reaction to an experiment that overran: its thread cannot be stopped and would
/// disturb whatever ran next, so the process ends, but first the hung experiment's
/// scratch files go (as on Ctrl-C; its children and the loopback peer end with the
/// process), and the run as it stands is written and printed as a normal run's. One
/// error line names the experiment and the results folder; the exit code is its own.
fn end_on_overrun(output: Arc<Output>, display: Arc<Display>) -> runner::OnOverrun {
    Arc::new(move |o: &runner::Overrun| {
        crate::scratch::cleanup_all();
        runner::Progress::finish(&*display);
        let written = match output.write_and_print(&o.results, &display) {
            Ok(folder) => format!("the results are in {}", folder.display()),
            Err(e) => format!("the results could not be written: {e}"),
        };
        let msg = format!(
            "experiment {} {}; the run ended there, {written}",
            o.id, o.reason
        );
        eprintln!("{}", Error::runtime(msg).line());
        // exit runs no destructors: what was printed must reach its reader first.
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::process::exit(i32::from(EXIT_OVERRUN));
    })
}

/// Where a run's results go and what is printed: the same for a run that ended normally
/// and one that an experiment overran.
struct Output {
    out: PathBuf,
    history: bool,
    exports: Vec<super::export::Export>,
    json: bool,
    quiet: bool,
}

impl Output {
    /// Writes the results folder, the reports, the history entry and the exports, then
    /// prints the document (--json) or the summary; returns the folder.
    fn write_and_print(&self, results: &RunResults, display: &Display) -> Result<PathBuf> {
        let folder = publish(&self.out, self.history, results)?;
        super::export::write_all(&self.exports, results)?;
        if self.json {
            let s = serde_json::to_string_pretty(results).map_err(Error::runtime)?;
            println!("{s}");
        } else if !self.quiet {
            // Warnings the bar printed on this screen are not repeated above the table.
            let shown = if std::io::stdout().is_terminal() {
                display.warnings_shown()
            } else {
                Vec::new()
            };
            print!(
                "{}",
                crate::report::terminal::render_after(results, None, &shown)
            );
            println!("results: {}", folder.join("results.json").display());
            if folder.join("report.html").exists() {
                println!("report:  {}", folder.join("report.html").display());
            }
        }
        Ok(folder)
    }
}

/// Writes the results folder, its reports and the history entry; returns the folder.
fn publish(out: &Path, history: bool, results: &RunResults) -> Result<PathBuf> {
    let folder = crate::results::save::write_results(out, results).map_err(Error::Runtime)?;
    // results.json is safe on disk; a report or history problem only warns.
    if let Err(e) = crate::report::write_reports(&folder, results) {
        eprintln!("osmeter: warning: could not write the reports: {e:#}");
    }
    if history {
        if let Err(e) = crate::history::History::open_default()
            .and_then(|mut h| h.record(results, Some(&folder)))
        {
            eprintln!(
                "osmeter: warning: run not recorded in the history: {e:#} (--no-history skips it)"
            );
        }
    }
    Ok(folder)
}

/// The run's progress on stderr: a bar on a terminal, plain lines otherwise.
#[derive(Default)]
struct Display {
    /// The bar, made when the run begins (only on a terminal).
    bar: OnceLock<indicatif::ProgressBar>,
    /// Warnings printed above the bar, so that the summary does not repeat them.
    warned: std::sync::Mutex<Vec<String>>,
}

impl Display {
    /// The warnings printed on the terminal during the run.
    fn warnings_shown(&self) -> Vec<String> {
        self.warned.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

impl runner::Progress for Display {
    fn begin(&self, total: Duration) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = indicatif::ProgressBar::new(total.as_millis() as u64);
        // wide_msg: the message is cut to what the terminal has left, so the line never
        // wraps (a wrapped line is redrawn as two, leaving broken lines behind).
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:20} {percent:>3}% ETA {eta} {wide_msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let _ = self.bar.set(bar);
    }
    fn start_threads(&self) {
        if let Some(b) = self.bar.get() {
            b.enable_steady_tick(Duration::from_millis(200));
        }
    }
    fn message(&self, msg: &str) {
        if let Some(b) = self.bar.get() {
            b.set_message(msg.to_string());
        }
    }
    fn line(&self, msg: &str) {
        use crate::report::terminal::{terminal_width, wrap};
        match self.bar.get() {
            // On a terminal, lines fit its width like the summary does.
            Some(b) => {
                if let Some(w) = msg.strip_prefix("warning: ") {
                    if let Ok(mut v) = self.warned.lock() {
                        v.push(w.to_string());
                    }
                }
                b.println(wrap(msg, terminal_width() as usize, "", "    ").trim_end())
            }
            None => eprintln!("{msg}"),
        }
    }
    fn advance(&self, by: Duration) {
        if let Some(b) = self.bar.get() {
            b.inc(by.as_millis() as u64);
        }
    }
    fn finish(&self) {
        if let Some(b) = self.bar.get() {
            b.finish_and_clear();
        }
    }
}
