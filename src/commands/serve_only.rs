//! The command line of the Windows build, which is the peer only: `osmeter serve`,
//! `--help` and `--version` work; any other subcommand exits 2 with one line saying that
//! it measures from Linux or macOS and that this host can serve as their peer.

use super::serve::Args as ServeArgs;
use crate::error::Error;
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "osmeter",
    version,
    about = "The osmeter peer: answers the network experiments (net.rtt, net.bandwidth, \
             net.connect) that `osmeter run --peer` runs from Linux or macOS",
    after_help = "Example (on this host, then from the Linux or macOS one):\n  \
                  osmeter serve --bind 0.0.0.0 --token SECRET\n  \
                  osmeter run --only 'net.*' --peer THIS-HOST --peer-token SECRET"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the peer that network experiments talk to (binds 127.0.0.1 unless --bind).
    Serve(ServeArgs),
    /// Every other subcommand: refused with one line.
    #[command(external_subcommand)]
    Other(Vec<OsString>),
}

/// The refusal of a subcommand this build does not have.
fn refusal(sub: &str) -> Error {
    Error::usage(format!(
        "`osmeter {sub}` measures from Linux or macOS; this {} host can serve as their \
         peer: osmeter serve --bind ADDRESS --token TOKEN (see --help)",
        crate::platform::SYSTEM
    ))
}

/// The serve options, or how the command line ends (help, version, an error).
fn parse<I, T>(args: I) -> Result<ServeArgs, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match Cli::try_parse_from(args) {
        Ok(Cli { cmd: Cmd::Serve(a) }) => Ok(a),
        Ok(Cli {
            cmd: Cmd::Other(words),
        }) => {
            let sub = words
                .first()
                .map(|w| w.to_string_lossy().into_owned())
                .unwrap_or_default();
            Err(refusal(&sub).report())
        }
        Err(e) => Err(crate::error::from_clap(&e)),
    }
}

/// `main` of the Windows binary.
#[cfg(windows)]
pub fn main() -> ExitCode {
    match parse(std::env::args_os()) {
        Ok(a) => super::serve::run(a),
        Err(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_parses_with_the_unix_options_and_defaults() {
        let a = parse(["osmeter", "serve", "--port", "0", "--token", "t"]).unwrap();
        assert_eq!((a.bind.as_str(), a.port), ("127.0.0.1", 0));
        assert_eq!(a.token.as_deref(), Some("t"));
        assert_eq!(a.max_sessions, 16);
    }

    #[test]
    fn other_subcommands_are_refused_as_usage() {
        for sub in ["run", "list", "machine", "io", "nonsense"] {
            let line = refusal(sub).line();
            assert!(line.contains("Linux or macOS"), "{line}");
            assert!(line.contains("osmeter serve"), "{line}");
            assert!(!line.contains('\n'));
            assert_eq!(refusal(sub).exit_code(), crate::error::EXIT_USAGE);
            assert!(parse(["osmeter", sub, "--profile", "quick"]).is_err());
        }
    }

    #[test]
    fn bad_serve_options_are_refused() {
        assert!(parse(["osmeter", "serve", "--port", "notaport"]).is_err());
        assert!(parse(["osmeter"]).is_err());
    }
}
