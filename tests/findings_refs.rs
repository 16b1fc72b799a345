//! Cross-experiment findings read metrics through typed references (`findings::READS`):
//! every one must name an experiment of the registry and a metric it emits, so renaming
//! a metric fails here instead of silently dropping a finding.

mod common;

use osmeter::experiments::registry;
use osmeter::findings;

#[test]
fn findings_refer_to_experiments_that_exist() {
    let ids: Vec<&str> = registry().iter().map(|e| e.id()).collect();
    for x in findings::READS {
        assert!(
            ids.contains(&x.experiment),
            "{} names no experiment",
            x.path()
        );
    }
    for id in findings::read_by_pattern() {
        assert!(
            ids.contains(&id),
            "findings read {id}, which is no experiment"
        );
    }
}

#[test]
fn findings_refer_to_metrics_the_experiments_emit() {
    let mut ids: Vec<&str> = findings::READS.iter().map(|x| x.experiment).collect();
    ids.sort();
    ids.dedup();
    // The user's word on a VM's host cache, so the uncached experiments can run ok and
    // their references be checked.
    let options = osmeter::experiments::RunOptions {
        host_cache_none: true,
        ..Default::default()
    };
    let r = common::run_with(
        osmeter::experiments::Profile::Smoke,
        &ids.join(","),
        options,
    );
    let missing = findings::missing(findings::READS, &r);
    assert!(
        missing.is_empty(),
        "findings read metrics their experiments do not emit: {:?}",
        missing.iter().map(|x| x.path()).collect::<Vec<_>>()
    );
    // A reference counts only when its experiment ran ok; say which could not be checked.
    for id in ids {
        let e = r.experiment(id).expect("selected");
        if e.status != osmeter::results::Status::Ok {
            common::skip(
                "findings_refer_to_metrics_the_experiments_emit",
                &format!("{id} did not run ok here ({:?})", e.reason),
            );
        }
    }
}
