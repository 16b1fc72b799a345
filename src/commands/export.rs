//! `--export FORMAT FILE` of `osmeter report` and `osmeter run`, and the two ways files
//! are written here: new files only (the user's files are never overwritten), and the
//! atomic replace of an OpenMetrics file that node_exporter's textfile collector reads.

use crate::error::{Error, Result};
use crate::report::export as fmt;
use crate::results::RunResults;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(super) const HELP: &str = "Also write the results as FORMAT to FILE (repeatable):
  openmetrics       Prometheus text exposition for node_exporter's textfile collector
                    (name FILE *.prom in its --collector.textfile.directory). FILE is
                    replaced atomically (written beside it, then renamed), as the
                    collector expects of a file that is rewritten on every run.
  github-benchmark  github-action-benchmark's custom JSON. FILE gets the smaller-is-better
                    metrics (times; tool: customSmallerIsBetter) and FILE-bigger.json (FILE
                    without .json) the others (rates, sizes; tool: customBiggerIsBetter).
  csv               one row per metric, with its experiment's status.
Only metrics of experiments that ran ok go to openmetrics and github-benchmark. Files other
than the openmetrics one must not exist yet.";

#[derive(clap::Args, Default)]
pub(super) struct Args {
    #[arg(long, num_args = 2, value_names = ["FORMAT", "FILE"], help = "Also write the results as FORMAT (openmetrics, github-benchmark, csv) to FILE", long_help = HELP)]
    export: Vec<String>,
}

/// One export asked for.
pub(super) struct Export {
    format: &'static str,
    file: PathBuf,
}

impl Args {
    /// The exports, checked before any work: known format, and for files that are only
    /// ever created, that they do not exist yet (nor their companion file).
    pub(super) fn parse(&self) -> Result<Vec<Export>> {
        let mut out = Vec::new();
        for pair in self.export.chunks(2) {
            let [format, file] = pair else {
                return Err(Error::usage("--export needs FORMAT and FILE"));
            };
            let Some(&format) = fmt::FORMATS.iter().find(|f| **f == format.as_str()) else {
                return Err(Error::usage(format!(
                    "--export: unknown format '{format}' (known: {})",
                    fmt::FORMATS.join(", ")
                )));
            };
            let e = Export {
                format,
                file: PathBuf::from(file),
            };
            for f in e.files_created() {
                if f.symlink_metadata().is_ok() {
                    return Err(Error::usage(format!(
                        "--export {format}: {} exists; osmeter does not overwrite it",
                        f.display()
                    )));
                }
            }
            out.push(e);
        }
        Ok(out)
    }
}

impl Export {
    /// The files this export creates anew (the openmetrics file is replaced instead).
    fn files_created(&self) -> Vec<PathBuf> {
        match self.format {
            "openmetrics" => vec![],
            "github-benchmark" => vec![self.file.clone(), bigger_file(&self.file)],
            _ => vec![self.file.clone()],
        }
    }

    /// Writes the export; returns the files written.
    pub(super) fn write(&self, r: &RunResults) -> Result<Vec<PathBuf>> {
        match self.format {
            "openmetrics" => {
                write_atomic(&self.file, &fmt::openmetrics(r))?;
                Ok(vec![self.file.clone()])
            }
            "github-benchmark" => {
                let (small, big) = fmt::github_benchmark(r);
                let json = |v| serde_json::to_string_pretty(v).map_err(Error::runtime);
                let other = bigger_file(&self.file);
                write_new(&self.file, &json(&small)?)?;
                write_new(&other, &json(&big)?)?;
                Ok(vec![self.file.clone(), other])
            }
            _ => {
                write_new(&self.file, &fmt::csv(r))?;
                Ok(vec![self.file.clone()])
            }
        }
    }
}

/// FILE-bigger.json beside FILE (FILE's `.json` left off first).
fn bigger_file(f: &Path) -> PathBuf {
    let name = f
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    f.with_file_name(format!("{stem}-bigger.json"))
}

/// Writes every export, each file's path on stderr (stdout may carry --json).
pub(super) fn write_all(exports: &[Export], r: &RunResults) -> Result<()> {
    for e in exports {
        for f in e.write(r)? {
            eprintln!("export {}: {}", e.format, f.display());
        }
    }
    Ok(())
}

/// Writes `text` to a file that must not exist yet; a half-written file is removed.
pub(super) fn write_new(f: &Path, text: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(f)
        .map_err(|e| Error::runtime(format!("{}: {e}", f.display())))?;
    if let Err(e) = file.write_all(text.as_bytes()) {
        // Ours, and incomplete: remove it rather than leave half a file.
        let _ = std::fs::remove_file(f);
        return Err(Error::runtime(format!("{}: {e}", f.display())));
    }
    Ok(())
}

/// Replaces `f` atomically: a new file in the same directory (same file system, and
/// named with a leading dot and without .prom, so the textfile collector never reads it
/// half-written), synced, then renamed over `f`. The temporary file is removed on error.
pub(super) fn write_atomic(f: &Path, text: &str) -> Result<()> {
    let err = |e: std::io::Error| Error::runtime(format!("{}: {e}", f.display()));
    if f.is_dir() {
        return Err(Error::usage(format!("{}: is a directory", f.display())));
    }
    let dir = f
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = f
        .file_name()
        .ok_or_else(|| Error::usage(format!("{}: not a file name", f.display())))?;
    let tmp = dir.join(format!(
        ".{}.osmeter-{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, f)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        Args {
            export: v.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn bad_formats_and_existing_files_are_refused_before_anything_runs() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("x.csv");
        assert!(args(&["yaml", f.to_str().unwrap()]).parse().is_err());
        assert_eq!(
            args(&["csv", f.to_str().unwrap()]).parse().unwrap().len(),
            1
        );
        std::fs::write(&f, "mine").unwrap();
        assert!(args(&["csv", f.to_str().unwrap()]).parse().is_err());
        // The openmetrics file is the collector's, replaced on every run by design.
        assert!(args(&["openmetrics", f.to_str().unwrap()]).parse().is_ok());
        let g = d.path().join("gh.json");
        std::fs::write(d.path().join("gh-bigger.json"), "mine").unwrap();
        assert!(args(&["github-benchmark", g.to_str().unwrap()])
            .parse()
            .is_err());
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "mine");
    }

    #[test]
    fn the_atomic_replace_leaves_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("osmeter.prom");
        write_atomic(&f, "a 1\n").unwrap();
        write_atomic(&f, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "a 2\n");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        // A directory in the way is an error, and nothing is left behind.
        assert!(write_atomic(d.path(), "x").is_err());
        assert!(write_atomic(&d.path().join("missing/f.prom"), "x").is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn the_bigger_is_better_file_sits_beside() {
        assert_eq!(
            bigger_file(Path::new("/a/bench.json")),
            Path::new("/a/bench-bigger.json")
        );
        assert_eq!(bigger_file(Path::new("out")), Path::new("out-bigger.json"));
    }
}
