//! `osmeter man`: the manual page (roff) on stdout.

use crate::error::Error;
use std::io::Write;
use std::process::ExitCode;

pub(super) const EXAMPLES: &str = "Example:\n  osmeter man > /usr/local/share/man/man1/osmeter.1";

/// The man page: the top-level command, then each subcommand as its own section.
pub(super) fn run() -> ExitCode {
    let cmd = super::command();
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut ok = man.render(&mut out).is_ok();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut page = Vec::new();
        // Each subcommand as a section of the one page, headed by its name.
        let named = sub
            .clone()
            .display_name(format!("osmeter-{}", sub.get_name()))
            .bin_name(format!("osmeter {}", sub.get_name()));
        let m = clap_mangen::Man::new(named);
        page.extend(format!(".SH \"OSMETER {}\"\n", sub.get_name().to_uppercase()).bytes());
        ok &= m.render_synopsis_section(&mut page).is_ok()
            && m.render_description_section(&mut page).is_ok()
            && m.render_options_section(&mut page).is_ok()
            && m.render_extra_section(&mut page).is_ok();
        out.extend(page);
    }
    if !ok || std::io::stdout().write_all(&out).is_err() {
        return Error::runtime("could not write the man page").report();
    }
    ExitCode::SUCCESS
}
