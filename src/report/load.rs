//! Reading a results document back, from any schema version this build knows.
//! Each known version has its own reader that returns the current shape; unknown
//! versions are refused with a one-line reason.

use crate::results::{RunResults, SCHEMA_VERSION};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A results path as given: a results.json file or a folder holding one.
pub fn results_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("results.json")
    } else {
        path.to_path_buf()
    }
}

/// Loads a results file (or folder); errors are one line naming the problem.
pub fn load(path: &Path) -> Result<RunResults, String> {
    let file = results_file(path);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Parses a results document of any known schema version.
pub fn from_str(text: &str) -> Result<RunResults, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
    from_value(v)
}

pub fn from_value(v: Value) -> Result<RunResults, String> {
    let version = v
        .get("schema_version")
        .ok_or("not an osmeter results document (no schema_version)")?;
    let version = version
        .as_u64()
        .ok_or_else(|| format!("schema_version {version} is not a whole number"))?;
    match version {
        1 => v1(v),
        n => Err(format!(
            "unknown results schema version {n} (this osmeter {} reads versions 1..={SCHEMA_VERSION}); use a newer osmeter",
            env!("CARGO_PKG_VERSION")
        )),
    }
}

/// Version 1 is the current shape.
fn v1(v: Value) -> Result<RunResults, String> {
    serde_json::from_value(v).map_err(|e| format!("not a valid version 1 results document ({e})"))
}
