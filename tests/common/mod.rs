//! Helpers shared by the tests that drive the library.

use osmeter::experiments::{Profile, RunOptions};
use osmeter::results::{RunResults, Status};
use osmeter::runner::{run, RunConfig};

/// A smoke-profile run of the selected experiments, writing nothing.
pub fn smoke(only: &str) -> RunResults {
    let cfg = RunConfig {
        profile: Profile::Smoke,
        only: vec![only.into()],
        skip: vec![],
        cpu: None,
        out: std::env::temp_dir(),
        write_results: false,
        quiet: true,
        no_history: true,
        options: RunOptions::default(),
    };
    match run(&cfg) {
        Ok(o) => o.results,
        Err(e) => panic!("run failed: {e}"),
    }
}

/// The median of a metric of an experiment that must have run ok.
pub fn median(r: &RunResults, id: &str, metric: &str) -> f64 {
    let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
    assert_eq!(e.status, Status::Ok, "{id}: {:?}", e.reason);
    e.metric(metric)
        .unwrap_or_else(|| panic!("{id}/{metric} missing"))
        .summary
        .median
}
