//! Reading a results document back, from any schema version this build knows.
//! Each known version has its own reader that returns the current shape; unknown
//! versions are refused with a one-line reason.

use super::{RunResults, SCHEMA_VERSION};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A results path as given: a results.json file or a folder holding one.
pub(crate) fn results_file(path: &Path) -> PathBuf {
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

pub(crate) fn from_value(v: Value) -> Result<RunResults, String> {
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
fn v1(mut v: Value) -> Result<RunResults, String> {
    if let Some(m) = v.get_mut("machine") {
        whole_numbers_as_integers(m);
    }
    serde_json::from_value(v).map_err(|e| format!("not a valid version 1 results document ({e})"))
}

/// Machine facts written as `2.0` where osmeter writes `2` (hand-made or re-encoded
/// documents) still fill the typed machine's integer fields; float fields take either.
fn whole_numbers_as_integers(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_u64() && !n.is_i64() => {
            if let Some(f) = n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9e15)
            {
                *v = Value::from(f as u64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(o) => o.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_integers_written_as_floats_load() {
        let doc = r#"{"schema_version":1,"tool":{"name":"osmeter","version":"0"},
            "started_at":"2026-01-01T00:00:00Z","duration_s":1.0,"config":{},
            "machine":{"hostname":"h","cpu":{"logical_cpus":2.0,"core_clock_hz":3.0e9},
                       "memory":{"total_bytes":25769803776.0},"load_average":[1.0,0.5,0.25]},
            "experiments":[]}"#;
        let r = from_str(doc).unwrap();
        assert_eq!(r.machine.cpu.logical_cpus, 2);
        assert_eq!(r.machine.memory.total_bytes, 25769803776);
        assert_eq!(r.machine.cpu.core_clock_hz, Some(3.0e9));
        assert_eq!(r.machine.load_average, Some([1.0, 0.5, 0.25]));
        // A fraction where an integer belongs is still refused, in one line.
        let bad = doc.replace("25769803776.0", "1.5");
        assert!(from_str(&bad).unwrap_err().contains("version 1"));
    }
}
