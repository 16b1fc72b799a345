//! The skip mechanism: a missing prerequisite skips on a developer's machine and fails
//! under OSMETER_REQUIRE_ALL_TESTS, which `.ci/run` sets.

mod common;

#[test]
fn a_missing_prerequisite_fails_under_require_all() {
    let failed = std::panic::catch_unwind(|| common::skip_or_fail(true, "demo", "no tool X"));
    assert!(
        failed.is_err(),
        "require-all must turn a skip into a failure"
    );
    let skipped = std::panic::catch_unwind(|| common::skip_or_fail(false, "demo", "no tool X"));
    assert!(
        skipped.is_ok(),
        "without require-all a missing tool only skips"
    );
}
