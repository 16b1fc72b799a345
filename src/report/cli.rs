//! The `report`, `history` and `compare` subcommands (main.rs only dispatches here).
//! Bad input (missing or corrupt results, unknown history id) is one line and exit 2.

use crate::history::History;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

// The exit code and the line come from crate::error, the binary's one mapping.
fn usage_error(msg: &str) -> ExitCode {
    crate::error::Error::usage(msg).report()
}

fn runtime_error(msg: &str) -> ExitCode {
    crate::error::Error::runtime(msg).report()
}

/// `osmeter report RESULTS [--out DIR]`.
pub fn report(results: &Path, out: Option<&Path>, quiet: bool) -> ExitCode {
    let t = Instant::now();
    let mut r = match crate::results::load::load(results) {
        Ok(r) => r,
        Err(e) => return usage_error(&e),
    };
    // Findings were computed when the run ended; only files without them get them now.
    r.findings = crate::findings::for_report(&r);
    let file = crate::results::load::results_file(results);
    let folder = match out {
        Some(o) => o.to_path_buf(),
        None => file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    };
    if !quiet {
        print!("{}", super::terminal::render(&r, None));
    }
    match super::write_reports(&folder, &r) {
        Ok(w) => {
            if !quiet {
                println!("report:  {}", w.html.display());
                println!("         {}", w.markdown.display());
                println!(
                    "plots:   {} SVG file(s) in {} (rendered in {} ms)",
                    w.plots.len(),
                    folder.display(),
                    t.elapsed().as_millis()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => runtime_error(&format!("{e:#}")),
    }
}

/// `osmeter history [--json]`.
pub fn history(json: bool) -> ExitCode {
    let h = match History::open_default() {
        Ok(h) => h,
        Err(e) => return runtime_error(&format!("history: {e:#}")),
    };
    let rows = match h.list() {
        Ok(r) => r,
        Err(e) => return runtime_error(&format!("history {}: {e:#}", h.path.display())),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    if rows.is_empty() {
        println!("no runs recorded yet in {}", h.path.display());
        return ExitCode::SUCCESS;
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
    ExitCode::SUCCESS
}

/// `osmeter history import PATH...`: every results file is read before anything is
/// written, so one bad file imports nothing.
pub fn history_import(paths: &[std::path::PathBuf]) -> ExitCode {
    let mut docs = Vec::new();
    for p in paths {
        let files = match crate::history::results_files(p) {
            Ok(f) => f,
            Err(e) => return usage_error(&e),
        };
        for f in files {
            match crate::results::load::load(&f) {
                Ok(r) => docs.push((f, r)),
                Err(e) => return usage_error(&e),
            }
        }
    }
    let mut h = match History::open_default() {
        Ok(h) => h,
        Err(e) => return runtime_error(&format!("history: {e:#}")),
    };
    let (mut new, mut old) = (0, 0);
    for (f, r) in &docs {
        let folder = f.parent().filter(|p| !p.as_os_str().is_empty());
        match h.record(r, folder) {
            Ok(crate::history::Recorded::New(id)) => {
                new += 1;
                println!(
                    "run {id}: {} {} <- {}",
                    r.host_name(),
                    r.started_at,
                    f.display()
                );
            }
            Ok(crate::history::Recorded::AlreadyPresent(id)) => {
                old += 1;
                println!(
                    "run {id}: {} {} already in the history ({})",
                    r.host_name(),
                    r.started_at,
                    f.display()
                );
            }
            Err(e) => {
                return runtime_error(&format!(
                    "history {}: {}: {e:#}",
                    h.path.display(),
                    f.display()
                ))
            }
        }
    }
    println!(
        "imported {new} run(s), {old} already present; history: {}",
        h.path.display()
    );
    ExitCode::SUCCESS
}

/// `osmeter compare A B [...] [--min-diff PCT] [--json] [--html FILE]`.
pub fn compare(specs: &[String], min_diff_pct: f64, json: bool, html: Option<&Path>) -> ExitCode {
    if !(min_diff_pct.is_finite() && (0.0..100.0).contains(&min_diff_pct)) {
        return usage_error("--min-diff must be a percentage from 0 to below 100");
    }
    // Checked before the work, so a typo costs nothing; create_new below closes the race.
    if let Some(f) = html.filter(|f| f.exists()) {
        return usage_error(&format!(
            "{} exists; --html writes a new file and never overwrites one",
            f.display()
        ));
    }
    let mut runs = Vec::new();
    for s in specs {
        match crate::compare::resolve(s, History::open_default) {
            Ok(r) => runs.push((s.clone(), r)),
            Err(e) => return usage_error(&e),
        }
    }
    // Run-to-run noise from earlier runs of the baseline's host, profile and version; a
    // history that cannot be read leaves within-run noise only.
    let history = match (&runs.first(), History::open_default()) {
        (Some((_, a)), Ok(h)) => {
            let started: Vec<&str> = runs.iter().map(|(_, r)| r.started_at.as_str()).collect();
            h.earlier_runs(
                &crate::compare::host_of(a),
                &crate::compare::profile_of(a),
                &a.tool.version,
                &started,
                20,
            )
            .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let history = if history.len() >= crate::compare::MIN_HISTORY {
        history
    } else {
        Vec::new()
    };
    let c = crate::compare::compare_with_history(&runs, min_diff_pct / 100.0, &history);
    if let Some(f) = html {
        use std::io::Write;
        let page = super::fleet::render(&c, &runs);
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(f)
        {
            Ok(w) => w,
            Err(e) => return runtime_error(&format!("{}: {e}", f.display())),
        };
        if let Err(e) = file.write_all(page.as_bytes()) {
            // Ours, and incomplete: remove it rather than leave half a page.
            let _ = std::fs::remove_file(f);
            return runtime_error(&format!("{}: {e}", f.display()));
        }
        // On stderr, so that --json output stays one document.
        eprintln!("fleet page: {}", f.display());
    }
    if json {
        match serde_json::to_string_pretty(&c) {
            Ok(s) => println!("{s}"),
            Err(e) => return runtime_error(&e.to_string()),
        }
    } else {
        print!("{}", crate::compare::render(&c));
    }
    ExitCode::SUCCESS
}
