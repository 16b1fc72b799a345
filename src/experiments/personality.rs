//! Review N13: README's table of what macOS marks invalid or unverified, checked against
//! every experiment run here under macOS's personality: pinning only a hint, no current
//! CPU, reopens sharing status flags and uncached reads that serve cached pages.
#![cfg(test)]

use super::testing::{skip, World};
use std::collections::BTreeMap;

/// The causes that are macOS's, as a failed or unverified premise's detail states them.
const MAC_CAUSES: [&str; 2] = ["were not pinned", super::kit::place::NO_CURRENT_CPU];
/// Rows whose cause this Linux run cannot reproduce, so the table alone states them.
const NOT_SIMULATED: &str = "no device-read counter";

/// The README's rows: experiment -> (status, why).
fn readme_rows() -> BTreeMap<String, (String, String)> {
    let readme = include_str!("../../README.md");
    let table = readme
        .split("<!-- macos-statuses -->")
        .nth(1)
        .expect("README has the macOS statuses table between markers");
    table
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let id = cells.first()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((
                id.to_string(),
                (cells.get(1)?.to_string(), cells.get(2)?.to_string()),
            ))
        })
        .collect()
}

#[test]
fn the_readme_lists_what_macos_marks_invalid_or_unverified() {
    crate::platform::HINT_PINNING.with(|h| h.set(true));
    crate::platform::CPU_UNKNOWN.with(|c| c.set(true));
    crate::platform::DARWIN_FILES.with(|d| d.set(true));
    let clock = crate::clock::CoarseClock::new(1e9);
    let w = World::live(&clock);
    let rows = readme_rows();
    let mut seen = BTreeMap::new();
    for exp in super::registry() {
        let r = w.run(exp.as_ref());
        if r.status == crate::results::Status::Skipped {
            if rows.contains_key(exp.id()) {
                let why = format!("{} skipped: {:?}", exp.id(), r.reason);
                return skip(
                    "the_readme_lists_what_macos_marks_invalid_or_unverified",
                    &why,
                );
            }
            continue;
        }
        let mac = |c: &&crate::results::Check| MAC_CAUSES.iter().any(|m| c.detail.contains(m));
        let failed = r.checks.iter().filter(|c| c.premise && !c.passed);
        let status = match failed.filter(mac).map(|c| c.unverified).min() {
            Some(false) => "invalid",
            Some(true) => "unverified",
            None => continue,
        };
        seen.insert(r.id.clone(), status.to_string());
    }
    let listed: BTreeMap<String, String> = rows
        .into_iter()
        .filter(|(_, (_, why))| !why.starts_with(NOT_SIMULATED))
        .map(|(id, (status, _))| (id, status))
        .collect();
    assert_eq!(
        seen, listed,
        "macOS personality run (left) vs README (right)"
    );
}
