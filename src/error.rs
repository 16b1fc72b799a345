//! The one error type of the binary and the one place it becomes an exit code
//! (docs/ARCHITECTURE.md, "Errors and exit codes"): bad input is a usage error (exit 2),
//! a failure while doing the work is a runtime error (exit 1). Either is printed as one
//! line, `osmeter: error: MESSAGE`, never as a panic trace. `compare --gate` adds two
//! codes that are verdicts, not errors: 3 a regression, 4 inconclusive; `run` adds 5, a
//! run that ended when an experiment overran its hard time limit.

use std::path::Path;
use std::process::ExitCode;

/// Exit code of bad usage or bad input.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a failure while running (I/O, permissions, an experiment that failed).
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code of a run that an experiment overran (exceeded its hard time limit): the run
/// ended there, with what it measured before written.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub const EXIT_OVERRUN: u8 = 5;
/// Exit code of `compare --gate` when a metric regressed (not an error: a verdict).
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub const EXIT_REGRESSION: u8 = 3;
/// Exit code of `compare --gate` with no regression but no verdict where one was required
/// (every metric inconclusive, or a `--require`d one).
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub const EXIT_INCONCLUSIVE: u8 = 4;

/// An error with its class; the class alone decides the exit code.
#[derive(Debug)]
pub enum Error {
    /// Bad input: exit 2.
    Usage(String),
    /// The work failed: exit 1. Shown with its context chain on one line.
    Runtime(anyhow::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(s) => write!(f, "{s}"),
            Error::Runtime(e) => write!(f, "{e:#}"),
        }
    }
}

impl Error {
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::Usage(msg.into())
    }

    pub fn runtime(msg: impl std::fmt::Display) -> Error {
        Error::Runtime(anyhow::anyhow!("{msg}"))
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::Runtime(_) => EXIT_RUNTIME,
        }
    }

    /// The one line printed for this error (line breaks folded so it stays one line).
    pub fn line(&self) -> String {
        let text = self.to_string();
        let folded: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        format!("osmeter: error: {}", folded.join(" "))
    }

    /// Prints the line on stderr and returns the exit code.
    pub fn report(&self) -> ExitCode {
        eprintln!("{}", self.line());
        ExitCode::from(self.exit_code())
    }
}

/// `Err(Error::Usage)`, for early returns.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub fn usage<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::usage(msg))
}

/// `Err(Error::Runtime)`, for early returns.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub fn runtime<T>(msg: impl std::fmt::Display) -> Result<T> {
    Err(Error::runtime(msg))
}

/// The exit code of a command's outcome, printing the error line when there is one.
pub fn exit(r: Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

/// An OS error on `path` as one line of the right class: a missing file is bad input,
/// anything else (permissions, I/O, a full disk) a runtime failure.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub fn os_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    let msg = format!("{}: {what}: {}", path.display(), plain(&e));
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::Usage(msg),
        _ => Error::runtime(msg),
    }
}

/// The OS error text without Rust's " (os error N)" suffix.
#[cfg_attr(windows, allow(dead_code))] // used by the Unix build only
pub fn plain(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A command-line parsing error from clap: help and version exit 0 as clap prints them,
/// anything else is a usage error shown by clap's first line.
pub fn from_clap(e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.to_string();
    let mut lines = text.lines();
    let mut first = lines
        .next()
        .unwrap_or("bad usage")
        .trim_start_matches("error: ")
        .to_string();
    // "...were not provided:" is followed by the indented names it means.
    if first.ends_with(':') {
        let named: Vec<&str> = lines
            .take_while(|l| l.starts_with("  "))
            .map(str::trim)
            .collect();
        first = format!("{first} {}", named.join(", "));
    }
    Error::usage(format!("{first} (see --help)")).report()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_map_to_exit_codes() {
        assert_eq!(Error::usage("x").exit_code(), 2);
        assert_eq!(Error::runtime("x").exit_code(), 1);
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(os_err(Path::new("f"), "open", missing).exit_code(), 2);
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = os_err(Path::new("f"), "cannot open", denied);
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.to_string(), "f: cannot open: Permission denied");
    }

    #[test]
    fn messages_are_one_line_with_context() {
        let e = Error::Runtime(anyhow::anyhow!("disk full").context("results"));
        assert_eq!(e.line(), "osmeter: error: results: disk full");
        let multi = Error::usage("first\n  second\n");
        assert_eq!(multi.line(), "osmeter: error: first second");
    }
}
