//! Writing a results document: a new `HOST-TIMESTAMP` folder under the results parent,
//! holding `results.json`. Nothing that exists is ever reused or overwritten: the folder
//! is created with `mkdir` (which fails when it exists, so two runs in the same second
//! get `-2`, `-3`...) and the file with `O_EXCL`.

use super::RunResults;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Checks that the results parent folder can hold a new folder, before measuring; the
/// error is one line naming `--out`.
pub fn check_out_dir(out: &Path) -> Result<(), String> {
    if out.exists() && !out.is_dir() {
        return Err(format!(
            "--out {}: exists and is not a directory",
            out.display()
        ));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| format!("--out {}: cannot create: {e}", out.display()))?;
    let probe = out.join(format!(".osmeter-write-test-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(format!("--out {}: not writable: {e}", out.display())),
    }
}

/// The folder name of a document: `HOST-TIMESTAMP`, the host as `host_name()` gives it
/// (it may come from the command line, so it is kept to one safe path component).
pub fn folder_name(r: &RunResults) -> String {
    let host: String = r
        .host_name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = host.trim_start_matches('.');
    let host = if host.is_empty() { "host" } else { host };
    let stamp = r.started_at.replace([':', '-'], "");
    format!("{host}-{stamp}")
}

/// Writes `results.json` into a new folder under `parent` (named by `folder_name`, with
/// `-2`, `-3`... when taken) and returns the folder.
pub fn write_results(parent: &Path, r: &RunResults) -> anyhow::Result<PathBuf> {
    let json = serde_json::to_string_pretty(r)?;
    std::fs::create_dir_all(parent)?;
    let name = folder_name(r);
    let mut k = 1;
    let folder = loop {
        let folder = if k == 1 {
            parent.join(&name)
        } else {
            parent.join(format!("{name}-{k}"))
        };
        match std::fs::create_dir(&folder) {
            Ok(()) => break folder,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => k += 1,
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", folder.display())),
        }
    };
    let file = folder.join("results.json");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .and_then(|mut f| f.write_all(json.as_bytes()))
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(host: &str) -> RunResults {
        let mut r = super::super::load::from_str(
            r#"{"schema_version":1,"tool":{"name":"osmeter","version":"0"},
            "started_at":"2026-01-02T03:04:05Z","duration_s":1.0,"config":{},
            "machine":{"hostname":"h"},"experiments":[]}"#,
        )
        .unwrap();
        r.machine.hostname = host.into();
        r
    }

    #[test]
    fn never_reuses_a_folder() {
        let d = tempfile::tempdir().unwrap();
        let r = doc("box/../1");
        let a = write_results(d.path(), &r).unwrap();
        let b = write_results(d.path(), &r).unwrap();
        assert_eq!(a.file_name().unwrap(), "box_.._1-20260102T030405Z");
        assert_eq!(b.file_name().unwrap(), "box_.._1-20260102T030405Z-2");
        // A folder that exists (a user's own) is left alone, even without results.json.
        std::fs::create_dir(d.path().join("box_.._1-20260102T030405Z-3")).unwrap();
        let c = write_results(d.path(), &r).unwrap();
        assert_eq!(c.file_name().unwrap(), "box_.._1-20260102T030405Z-4");
        let back = super::super::load::load(&c).unwrap();
        assert_eq!(back.started_at, r.started_at);
        assert!(!d
            .path()
            .join("box_.._1-20260102T030405Z-3/results.json")
            .exists());
        assert_eq!(folder_name(&doc("..")), "host-20260102T030405Z");
    }

    #[test]
    fn out_dir_that_is_a_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "x").unwrap();
        assert!(check_out_dir(&f).unwrap_err().contains("not a directory"));
        assert!(check_out_dir(&d.path().join("new/sub")).is_ok());
    }
}
