//! `osmeter completions SHELL`: a shell completion script on stdout.

use std::process::ExitCode;

pub(super) const EXAMPLES: &str = "Examples:\n  osmeter completions bash > /etc/bash_completion.d/osmeter\n  osmeter completions zsh > \"${fpath[1]}/_osmeter\"\n  osmeter completions fish > ~/.config/fish/completions/osmeter.fish";

#[derive(clap::Args)]
pub(super) struct Args {
    /// The shell to write completions for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub(super) fn run(a: Args) -> ExitCode {
    let mut cmd = super::command();
    clap_complete::generate(a.shell, &mut cmd, "osmeter", &mut std::io::stdout());
    ExitCode::SUCCESS
}
