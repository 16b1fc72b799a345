//! The `osmeter` command line: argument parsing and dispatch. Exit codes (0 success, 1 an
//! experiment or the run failed, 2 bad usage) come from `osmeter::error`, the one place
//! errors become codes (docs/ARCHITECTURE.md, "Errors and exit codes").

#[cfg(unix)]
use clap::{Parser, Subcommand};
#[cfg(unix)]
use osmeter::error::{self, Error, EXIT_RUNTIME};
#[cfg(unix)]
use osmeter::experiments::{self, Profile, RunOptions};
#[cfg(unix)]
use osmeter::runner::{self, RunConfig};
#[cfg(unix)]
use std::path::PathBuf;
#[cfg(unix)]
use std::process::ExitCode;

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
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// List every experiment with its needs and cost per profile.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Describe this machine (or one recorded with --snapshot).
    Machine {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also copy every file the description reads into DIR (missing or empty), at its
        /// absolute path (DIR/proc/cpuinfo, DIR/sys/devices/system/cpu/...).
        #[arg(long, value_name = "DIR", conflicts_with = "from")]
        snapshot: Option<PathBuf>,
        /// Describe the machine recorded in DIR instead of this one.
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
    /// Re-render the reports (terminal, report.md, report.html, plots) from a results file.
    Report {
        /// A results.json file or the results folder holding it.
        results: PathBuf,
        /// Where to write report.md, report.html and the plots (default: beside the results file).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Do not print the terminal table.
        #[arg(long)]
        quiet: bool,
    },
    /// List the runs recorded in the local history database (or import results into it).
    History {
        #[command(subcommand)]
        cmd: Option<HistoryCmd>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Compare runs side by side (the first is the baseline): results files, folders or history ids.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare {
        /// Two or more runs: results.json paths, results folders or history ids.
        #[arg(required = true, num_args = 2..)]
        runs: Vec<String>,
        /// Minimum relative difference of the medians for a significant difference, in percent.
        #[arg(long, default_value_t = osmeter::compare::MIN_REL_DIFF * 100.0)]
        min_diff: f64,
        /// Machine-readable output: every compared metric carries a boolean `significant`.
        #[arg(long)]
        json: bool,
        /// Also write the fleet page (one column per host, ratios, network matrix) to this
        /// new HTML file; an existing file is never overwritten.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// The block-size I/O toolkit: write, read, calibrate, sweep, syscalls, xor.
    #[command(after_help = IO_EXAMPLES)]
    Io {
        #[command(subcommand)]
        cmd: osmeter::io::IoCmd,
    },
    /// Run the peer that network experiments talk to (binds 127.0.0.1 unless --bind).
    Serve(osmeter::peer::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(
        after_help = "Examples:\n  osmeter completions bash > /etc/bash_completion.d/osmeter\n  osmeter completions zsh > \"${fpath[1]}/_osmeter\"\n  osmeter completions fish > ~/.config/fish/completions/osmeter.fish"
    )]
    Completions {
        /// The shell to write completions for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on stdout.
    #[command(after_help = "Example:\n  osmeter man > /usr/local/share/man/man1/osmeter.1")]
    Man,
}

#[cfg(unix)]
#[derive(Subcommand)]
enum HistoryCmd {
    /// Add collected results (results.json files, results folders, or folders of them such
    /// as a fleet's) to the history; a run already there is left as it is.
    Import {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

#[cfg(unix)]
const RUN_EXAMPLES: &str = "Examples:
  osmeter run                                the quick profile, table and results folder
  osmeter run --profile smoke                a 15 s check that everything works
  osmeter run --only 'mem.*' --profile standard
  osmeter run --skip fs.contention --scratch-dir /mnt/disk
  osmeter run --peer otherhost:7878 --only 'net.*'
  osmeter run --json --quiet > results.json";

#[cfg(unix)]
const IO_EXAMPLES: &str = "Examples:
  osmeter io write big.dat -b 1M -c 1024     a 1 GiB file of pseudo-random data
  osmeter io read big.dat -b 64K --cold      read it back uncached (evicted first)
  osmeter io calibrate big.dat -b 4K         the block count whose cold read takes 5-15 s
  osmeter io sweep big.dat                   MiB/s against block size, cold and warm
  osmeter io syscalls big.dat                read(1 byte) and lseek per call
  osmeter io xor big.dat                     the fast whole-file XOR reader
See `osmeter io SUBCOMMAND --help` for each tool's options.";

#[cfg(unix)]
const COMPARE_EXAMPLES: &str = "Examples:
  osmeter compare 3 7                        two runs from `osmeter history`
  osmeter compare before/results.json after/ a file and a folder
  osmeter compare 3 7 9 --min-diff 10 --json";

#[cfg(unix)]
#[derive(clap::Args)]
struct RunArgs {
    /// How much the run may cost.
    #[arg(long, value_enum, default_value = "quick")]
    profile: Profile,
    /// Only these experiments (ids or globs such as 'mem.*'; repeat or comma-separate).
    #[arg(long)]
    only: Vec<String>,
    /// Skip these experiments (ids or globs).
    #[arg(long)]
    skip: Vec<String>,
    /// Pin single-threaded work to this CPU (default: the topology's choice, a performance
    /// core other than CPU 0's core; `osmeter machine` shows it and why).
    #[arg(long)]
    cpu: Option<usize>,
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
    /// Remote peer for network experiments (HOST[:PORT]).
    #[arg(long)]
    peer: Option<String>,
    /// Shared token for the peer.
    #[arg(long)]
    peer_token: Option<String>,
    /// How reports and the history name the --peer host (e.g. its inventory name).
    #[arg(long, requires = "peer")]
    peer_name: Option<String>,
    /// How reports and the history name this host (default: its hostname).
    #[arg(long)]
    host_name: Option<String>,
    /// A mounted network file system for fs.remote-read.
    #[arg(long)]
    remote_dir: Option<PathBuf>,
    /// Where file experiments write (default: a new folder under the current directory).
    #[arg(long)]
    scratch_dir: Option<PathBuf>,
    /// Allow dropping the whole page cache (root only).
    #[arg(long)]
    drop_caches: bool,
}

// Windows builds the peer only (docs/ARCHITECTURE.md, "Windows: the peer only"); every
// other item of this file is Unix-only.
#[cfg(windows)]
fn main() -> std::process::ExitCode {
    osmeter::peer::serve_only::main()
}

#[cfg(unix)]
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return error::from_clap(&e),
    };
    match cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::List { json } => cmd_list(json),
        Cmd::Machine {
            json,
            snapshot,
            from,
        } => cmd_machine(json, snapshot, from),
        Cmd::Report {
            results,
            out,
            quiet,
        } => osmeter::report::cli::report(&results, out.as_deref(), quiet),
        Cmd::History { cmd: None, json } => osmeter::report::cli::history(json),
        Cmd::History {
            cmd: Some(HistoryCmd::Import { paths }),
            ..
        } => osmeter::report::cli::history_import(&paths),
        Cmd::Compare {
            runs,
            min_diff,
            json,
            html,
        } => osmeter::report::cli::compare(&runs, min_diff, json, html.as_deref()),
        Cmd::Io { cmd } => osmeter::io::main(cmd),
        Cmd::Serve(a) => osmeter::peer::serve_main(a),
        Cmd::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "osmeter", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Cmd::Man => cmd_man(),
    }
}

#[cfg(unix)]
fn cmd_run(a: RunArgs) -> ExitCode {
    if let Some(Err(e)) = a.peer.as_deref().map(osmeter::peer::client::parse_peer) {
        return Error::usage(e.to_string()).report();
    }
    let cfg = RunConfig {
        profile: a.profile,
        only: a.only,
        skip: a.skip,
        cpu: a.cpu,
        out: a.out,
        write_results: true,
        quiet: a.quiet || a.json,
        no_history: a.no_history,
        repeat: a.repeat.map(usize::from),
        options: RunOptions {
            peer: a.peer,
            peer_token: a.peer_token,
            host_name: a.host_name,
            peer_name: a.peer_name,
            remote_dir: a.remote_dir,
            scratch_dir: a.scratch_dir,
            drop_caches: a.drop_caches,
        },
    };
    match runner::run(&cfg) {
        Ok(out) => {
            if a.json {
                match serde_json::to_string_pretty(&out.results) {
                    Ok(s) => println!("{s}"),
                    Err(e) => return Error::runtime(e).report(),
                }
            } else if !a.quiet {
                print!("{}", osmeter::report::terminal::render(&out.results, None));
                if let Some(f) = &out.folder {
                    println!("results: {}", f.join("results.json").display());
                    if f.join("report.html").exists() {
                        println!("report:  {}", f.join("report.html").display());
                    }
                }
            }
            let failed = out
                .results
                .experiments
                .iter()
                .any(|e| e.status == osmeter::results::Status::Failed);
            // Not an error line: the table already shows which experiment failed and why.
            ExitCode::from(if failed { EXIT_RUNTIME } else { 0 })
        }
        Err(e) => e.report(),
    }
}

/// The man page: the top-level command, then each subcommand as its own section.
#[cfg(unix)]
fn cmd_man() -> ExitCode {
    let cmd = <Cli as clap::CommandFactory>::command();
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
    use std::io::Write;
    if !ok || std::io::stdout().write_all(&out).is_err() {
        return Error::runtime("could not write the man page").report();
    }
    ExitCode::SUCCESS
}

#[cfg(unix)]
fn cmd_list(json: bool) -> ExitCode {
    let all = experiments::registry();
    if json {
        let v: Vec<_> = all
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id(), "area": e.area(), "title": e.title(), "description": e.description(),
                    "needs": e.needs(),
                    "budget_s": Profile::ALL.iter().map(|p| (p.name(), e.budget(*p).as_secs_f64())).collect::<std::collections::BTreeMap<_, _>>(),
                    "default_repeat": Profile::ALL.iter().map(|p| (p.name(), e.default_repeat(*p))).collect::<std::collections::BTreeMap<_, _>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    t.set_header(vec![
        "id",
        "area",
        "description",
        "needs",
        "smoke",
        "quick",
        "standard",
        "thorough",
    ]);
    for e in &all {
        let mut row = vec![
            e.id().to_string(),
            e.area().to_string(),
            e.description().to_string(),
            e.needs().describe(),
        ];
        row.extend(Profile::ALL.iter().map(|p| {
            format!(
                "{:.1} s",
                (e.budget(*p) * e.default_repeat(*p) as u32).as_secs_f64()
            )
        }));
        t.add_row(row);
    }
    println!("{t}");
    println!("Cost: each experiment's budget times its default runs (smoke 1, other profiles 2 except fs.cache-size; --repeat overrides).");
    ExitCode::SUCCESS
}

#[cfg(unix)]
fn cmd_machine(json: bool, snapshot: Option<PathBuf>, from: Option<PathBuf>) -> ExitCode {
    use osmeter::machine::{facts, FactRoot, Machine};
    if let Some(dir) = &from {
        if let Err(e) = facts::check_recorded_tree(dir) {
            return Error::usage(format!("--from {}: {e}", dir.display())).report();
        }
    }
    if let Some(dir) = &snapshot {
        if let Err(e) = facts::check_snapshot_dir(dir) {
            return Error::usage(format!("--snapshot {}: {e}", dir.display())).report();
        }
    }
    let root = match (&from, &snapshot) {
        (Some(d), _) => FactRoot::recorded(d),
        (None, Some(_)) => FactRoot::live_recording(),
        (None, None) => FactRoot::live(),
    };
    let mut m = Machine::gather_from(&root);
    if root.is_live() {
        // The time base belongs to the description: counter, its frequency, the core clock.
        let (_, clock) = osmeter::clock::detect();
        m.warnings.extend(clock.warnings.iter().cloned());
        m.clock = Some(clock);
        let core = osmeter::clock::measure_core_clock();
        m.cpu.core_clock_hz = core.as_ref().map(|c| c.hz);
        if let Some(c) = &core {
            let max_hz = m.cpu.max_mhz.map(|m| m * 1e6);
            m.warnings.extend(c.warnings(max_hz));
        }
    }
    if let Some(dir) = &snapshot {
        match facts::write_snapshot(dir, &root.recorded_facts()) {
            Ok(n) => eprintln!(
                "osmeter: recorded {n} files in {} (describe it with `osmeter machine --from {}`)",
                dir.display(),
                dir.display()
            ),
            Err(e) => return Error::runtime(format!("--snapshot {}: {e}", dir.display())).report(),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
    } else {
        print!("{}", m.describe());
    }
    ExitCode::SUCCESS
}
