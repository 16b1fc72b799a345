//! Names the build for the results document: the git commit osmeter was built from
//! ("unknown" outside a git checkout, or `OSMETER_COMMIT` where a packager knows it) and
//! the target triple.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=OSMETER_COMMIT");
    let commit = std::env::var("OSMETER_COMMIT")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and the packed refs.
    for p in ["HEAD", "packed-refs"] {
        if let Some(f) = git(&["rev-parse", "--git-path", p]) {
            if Path::new(&f).exists() {
                println!("cargo:rerun-if-changed={f}");
            }
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(f) = git(&["rev-parse", "--git-path", &r]) {
            if Path::new(&f).exists() {
                println!("cargo:rerun-if-changed={f}");
            }
        }
    }
    println!("cargo:rustc-env=OSMETER_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=OSMETER_TARGET={target}");
}
