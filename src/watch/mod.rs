//! `osmeter watch`: one cheap pass that is recorded to the history, then the change
//! points of this host's watched series with the conditions that changed with them
//! (`history::why`), and the exports a monitoring system reads (an OpenMetrics textfile
//! with a "changed since" gauge per metric, and a JSON summary). The pass is the smoke
//! profile of a fixed selection of cheap experiments plus `watch.cpu-sustained`, which
//! measures what a per-operation figure cannot: the CPU time the host gives over a
//! window (a quota, spent credits, a neighbour), beside the speed while running.

pub mod sustained;

use crate::history::changes::{self, SeriesChanges, Settings};
use crate::history::{History, MetricSeries};
use crate::results::RunResults;
use std::fmt::Write;

/// The experiments of a pass (smoke profile): a few seconds of CPU, memory, 128 MiB of
/// file reads and a short exchange with the peer (loopback by default).
pub const SELECTION: &[&str] = &[
    "cpu.loop",
    "cpu.syscall",
    "mem.latency",
    "mem.bandwidth",
    "fs.read",
    "net.rtt",
    "net.bandwidth",
];

/// The profile the passes run in (recorded with each run).
pub const PROFILE: &str = "smoke";

/// The most recent passes the change points are searched in.
pub const WINDOW: usize = 200;

/// The method, in one sentence.
pub fn method(s: &Settings) -> String {
    format!(
        "A series is one metric of this host's passes, across machine fingerprints (a changed machine is named at its change). Change points by E-divisive means (Matteson & James 2014) over the last {WINDOW} passes of \
         this host, each kept when a {}-permutation test gives p <= {} and its step is at least {} \
         times the series' run-to-run noise, with at least {} passes on each side; a condition is \
         named only when the runs before and after the change differ in it.",
        s.permutations, s.alpha, s.min_effect, s.min_size
    )
}

/// This host's series of the experiments in `ids` (smoke profile), one per metric
/// across machine fingerprints (a replaced machine is then a condition of a change, not
/// a new series), the last `window` points of each, with their change points and why.
pub fn analyse(
    h: &History,
    host: &str,
    ids: &[String],
    window: usize,
    s: &Settings,
) -> anyhow::Result<Vec<SeriesChanges>> {
    let mut merged: std::collections::BTreeMap<(String, String, String), MetricSeries> =
        Default::default();
    for ser in h.series(Some(host), None)? {
        if ser.profile != PROFILE || !ids.contains(&ser.experiment) {
            continue;
        }
        let key = (ser.experiment.clone(), ser.metric.clone(), ser.unit.clone());
        match merged.get_mut(&key) {
            None => {
                merged.insert(key, ser);
            }
            Some(m) => {
                // The newest machine names the series.
                let newer = ser.points.last().map(|p| &p.started_at)
                    > m.points.last().map(|p| &p.started_at);
                if newer {
                    m.fingerprint = ser.fingerprint.clone();
                    m.machine = ser.machine.clone();
                }
                m.points.extend(ser.points);
            }
        }
    }
    let series: Vec<MetricSeries> = merged
        .into_values()
        .map(|mut m| {
            m.points
                .sort_by(|a, b| (&a.started_at, a.run).cmp(&(&b.started_at, b.run)));
            let cut = m.points.len().saturating_sub(window);
            m.points.drain(..cut);
            m
        })
        .collect();
    let mut found = changes::analyse(series, s);
    crate::history::why::annotate(h, &mut found);
    Ok(found)
}

/// Measures `watch.cpu-sustained` for `window` on a thread pinned to the run's CPU,
/// reading the host counters and the sentinel around it, and grades it as the runner
/// grades an experiment (its standing conditions and what was seen during it).
pub fn sustained_for(
    r: &RunResults,
    window: std::time::Duration,
) -> crate::results::ExperimentResult {
    let cpu = r
        .config
        .cpu
        .or_else(|| r.machine.cpu.allowed_cpus.last().copied())
        .unwrap_or(0);
    let m = r.machine.clone();
    let measured = std::thread::scope(|s| {
        s.spawn(|| {
            let placement = match crate::platform::pin_to_cpu(cpu) {
                Ok(crate::platform::Pinning::Hard) => None,
                Ok(crate::platform::Pinning::Hint { reason })
                | Ok(crate::platform::Pinning::Unsupported { reason }) => Some(reason),
                Err(e) => Some(format!("pinning to CPU {cpu} failed: {e}")),
            };
            let siblings = m
                .topology
                .place(cpu)
                .map(|p| p.siblings.clone())
                .unwrap_or_default();
            let reference = crate::sentinel::measure();
            let h0 = crate::machine::conditions::sample(cpu, &siblings);
            let e = sustained::measure(window);
            let after = crate::sentinel::measure();
            let h1 = crate::machine::conditions::sample(cpu, &siblings);
            (placement, reference, h0, e, after, h1)
        })
        .join()
    });
    let Ok((placement, reference, h0, mut e, after, h1)) = measured else {
        let mut e = crate::results::ExperimentResult::new(
            sustained::ID,
            "CPU speed, burst and sustained",
            "",
        );
        e.status = crate::results::Status::Failed;
        e.reason = Some("the measuring thread panicked".into());
        return e;
    };
    let st = crate::grade::RunState {
        machine: &m,
        cpu,
        reference: Some(reference),
        loop_cycles: None,
        placement,
        clock_source: crate::machine::conditions::clock_source(),
        user_hz: crate::machine::conditions::user_hz(),
        trial: crate::experiments::Profile::Smoke.harness().min_trial,
    };
    let seen = st.observe(
        &h0,
        &h1,
        &crate::results::BeforeAfter {
            before: reference,
            after,
        },
        &e,
    );
    e.sentinel = Some(crate::results::BeforeAfter {
        before: reference,
        after,
    });
    e.grade = st.grade(&e, &[seen], false);
    e
}

/// Seconds since the Unix epoch of an RFC 3339 UTC time as osmeter writes it
/// (`2026-11-27T05:03:30Z`); None for anything else.
pub fn unix_seconds(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !t.ends_with('Z') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), the inverse of `results::rfc3339`.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days * 86400 + hh * 3600 + mm * 60 + ss)
}

/// The OpenMetrics textfile of a pass: the run's own samples (`report::export`), then
/// per watched metric `osmeter_watch_changed_since_timestamp_seconds` (the start of the
/// latest change, 0 when the window has none), `osmeter_watch_change_ratio` (its size,
/// after/before - 1; 0 when none) and one `osmeter_watch_change_condition_info` per
/// condition named at it.
pub fn openmetrics(latest: &RunResults, all: &[SeriesChanges]) -> String {
    let run = crate::report::export::openmetrics(latest);
    let mut s = run.strip_suffix("# EOF\n").unwrap_or(&run).to_string();
    let label = crate::report::export::label;
    let host = label(latest.host_name());
    let labels = |sc: &SeriesChanges| {
        format!(
            "host=\"{host}\",experiment=\"{}\",metric=\"{}\",unit=\"{}\"",
            label(&sc.series.experiment),
            label(&sc.series.metric),
            label(&sc.series.unit)
        )
    };
    let _ = writeln!(
        s,
        "# HELP osmeter_watch_changed_since_timestamp_seconds osmeter watch: start (Unix time) of the first run at the metric's current level after its latest change point; 0 when its recorded passes show none."
    );
    let _ = writeln!(
        s,
        "# TYPE osmeter_watch_changed_since_timestamp_seconds gauge"
    );
    for sc in all {
        let since = sc
            .changes
            .last()
            .and_then(|c| unix_seconds(&c.started_at))
            .unwrap_or(0);
        let _ = writeln!(
            s,
            "osmeter_watch_changed_since_timestamp_seconds{{{}}} {since}",
            labels(sc)
        );
    }
    let _ = writeln!(
        s,
        "# HELP osmeter_watch_change_ratio osmeter watch: size of the metric's latest change point, median after / median before - 1 (0 when none)."
    );
    let _ = writeln!(s, "# TYPE osmeter_watch_change_ratio gauge");
    for sc in all {
        let rel = sc.changes.last().map(|c| c.rel).unwrap_or(0.0);
        let _ = writeln!(
            s,
            "osmeter_watch_change_ratio{{{}}} {}",
            labels(sc),
            crate::report::export::value(rel)
        );
    }
    let _ = writeln!(
        s,
        "# HELP osmeter_watch_change_condition_info osmeter watch: a condition that changed with the metric's latest change point (value 1)."
    );
    let _ = writeln!(s, "# TYPE osmeter_watch_change_condition_info gauge");
    for sc in all {
        for c in sc.changes.last().iter().flat_map(|c| &c.conditions) {
            let _ = writeln!(
                s,
                "osmeter_watch_change_condition_info{{{},condition=\"{}\"}} 1",
                labels(sc),
                label(&c.code)
            );
        }
    }
    s.push_str("# EOF\n");
    s
}

/// The JSON summary of a pass.
#[derive(Debug, serde::Serialize)]
pub struct Summary<'a> {
    pub host: &'a str,
    /// The pass just made: its history id, start and length.
    pub run: Option<i64>,
    pub started_at: &'a str,
    pub duration_s: f64,
    pub history: String,
    pub method: String,
    /// Experiments of the pass that did not run ok, with why.
    pub not_ok: Vec<(String, String, String)>,
    /// Every change point, newest first, as a sentence with its series.
    pub changes: Vec<SummaryChange<'a>>,
    pub series: &'a [SeriesChanges],
}

#[derive(Debug, serde::Serialize)]
pub struct SummaryChange<'a> {
    pub experiment: &'a str,
    pub metric: &'a str,
    pub unit: &'a str,
    #[serde(flatten)]
    pub change: &'a changes::Found,
}

impl<'a> Summary<'a> {
    pub fn new(
        latest: &'a RunResults,
        run: Option<i64>,
        history: String,
        all: &'a [SeriesChanges],
        s: &Settings,
    ) -> Summary<'a> {
        let mut list: Vec<SummaryChange> = all
            .iter()
            .flat_map(|sc| {
                sc.changes.iter().map(move |c| SummaryChange {
                    experiment: &sc.series.experiment,
                    metric: &sc.series.metric,
                    unit: &sc.series.unit,
                    change: c,
                })
            })
            .collect();
        list.sort_by(|a, b| b.change.started_at.cmp(&a.change.started_at));
        Summary {
            host: latest.host_name(),
            run,
            started_at: &latest.started_at,
            duration_s: latest.duration_s,
            history,
            method: method(s),
            not_ok: latest
                .experiments
                .iter()
                .filter(|e| e.status != crate::results::Status::Ok)
                .map(|e| {
                    (
                        e.id.clone(),
                        e.status.as_str().to_string(),
                        e.reason.clone().unwrap_or_default(),
                    )
                })
                .collect(),
            changes: list,
            series: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_inverts_rfc3339() {
        for t in [0u64, 86399, 951_782_400, 1_795_000_000, 4_102_444_800] {
            let s =
                crate::results::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t));
            assert_eq!(unix_seconds(&s), Some(t as i64), "{s}");
        }
        assert_eq!(unix_seconds("yesterday"), None);
        assert_eq!(unix_seconds("2026-13-01T00:00:00Z"), None);
    }
}
