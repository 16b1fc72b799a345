//! The command layer: one file per subcommand. Each parses its arguments (clap), calls
//! the library, prints or writes what it produced, and turns errors into exit codes
//! through `crate::error` (0 success, 1 the work failed, 2 bad usage). Nothing below
//! this layer prints results or writes them to disk on a command's behalf.

#[cfg(unix)]
mod compare;
#[cfg(unix)]
mod completions;
#[cfg(unix)]
mod export;
#[cfg(unix)]
mod history;
#[cfg(unix)]
mod history_changes;
#[cfg(unix)]
mod io;
#[cfg(unix)]
mod list;
#[cfg(unix)]
mod machine;
#[cfg(unix)]
mod man;
#[cfg(unix)]
mod report;
#[cfg(unix)]
mod run;
mod serve;
#[cfg(unix)]
mod target;
#[cfg(unix)]
mod watch;
// The Windows build's command line (serve only); its parsing is tested on Linux too.
#[cfg(any(windows, test))]
mod serve_only;

#[cfg(unix)]
use clap::{Parser, Subcommand};
#[cfg(unix)]
use std::process::ExitCode;

#[cfg(windows)]
pub use serve_only::main;

#[cfg(unix)]
#[derive(Parser)]
#[command(
    name = "osmeter",
    version,
    about = "What a machine and its OS really cost: measured, predicted, explained"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[cfg(unix)]
#[derive(Subcommand)]
enum Cmd {
    /// Run the suite (or a selection) and write a results folder.
    #[command(after_help = run::EXAMPLES)]
    Run(run::Args),
    /// List every experiment with its needs and cost per profile.
    List(list::Args),
    /// Describe this machine (or one recorded with --snapshot).
    Machine(machine::Args),
    /// Re-render the reports (terminal, report.md, report.html, plots) from a results file.
    Report(report::Args),
    /// List the runs recorded in the local history database (or import results into it).
    History(history::Args),
    /// Compare runs side by side (the first is the baseline): results files, folders or history ids.
    #[command(after_help = compare::EXAMPLES)]
    Compare(compare::Args),
    /// The block-size I/O toolkit: write, read, calibrate, sweep, syscalls, xor.
    #[command(after_help = io::EXAMPLES)]
    Io {
        #[command(subcommand)]
        cmd: io::IoCmd,
    },
    /// Measure this machine now and then, record it, and say when and why it changed.
    #[command(after_help = watch::EXAMPLES)]
    Watch(watch::Args),
    /// Run the peer that network experiments talk to (binds 127.0.0.1 unless --bind).
    Serve(serve::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(after_help = completions::EXAMPLES)]
    Completions(completions::Args),
    /// Print the manual page (roff) on stdout.
    #[command(after_help = man::EXAMPLES)]
    Man,
}

/// The whole command line: parse, dispatch, exit code.
#[cfg(unix)]
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return crate::error::from_clap(&e),
    };
    match cli.cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::List(a) => list::run(a),
        Cmd::Machine(a) => machine::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::History(a) => history::run(a),
        Cmd::Compare(a) => compare::run(a),
        Cmd::Io { cmd } => io::run(cmd),
        Cmd::Watch(a) => watch::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Completions(a) => completions::run(a),
        Cmd::Man => man::run(),
    }
}

/// The clap description of the whole command line (for completions and the man page).
#[cfg(unix)]
fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
