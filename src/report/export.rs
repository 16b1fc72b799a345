//! Exports of a results document for the tools people already run:
//! - `openmetrics`: the Prometheus text exposition format (version 0.0.4, which
//!   node_exporter's textfile collector reads; it ends with OpenMetrics' `# EOF`, a
//!   comment to the 0.0.4 parser, so that both parsers accept it). One gauge sample per
//!   ok metric, in base units (seconds, bytes, bytes per second...) with host,
//!   experiment and metric labels, and info gauges (value 1) for the run (fingerprint)
//!   and each experiment (status and, when the document has one, its grade).
//! - `github-benchmark`: the custom JSON of benchmark-action/github-action-benchmark,
//!   an array of `{name, unit, value, range?, extra?}`. The action reads one direction
//!   per file (`tool: customSmallerIsBetter` or `customBiggerIsBetter`), so times go to
//!   one array and everything else (rates, sizes, counts) to the other.
//! - `csv`: one row per metric (RFC 4180 quoting), with mean, SD and the prediction.

use super::view::Split;
use crate::results::{ExperimentResult, RunResults, Status};
use std::fmt::Write;

/// The export formats, as named on the command line.
pub const FORMATS: &[&str] = &["openmetrics", "github-benchmark", "csv"];

/// Whether a metric's smaller values are better: times (ns, and ns per something) are;
/// rates, sizes and counts are taken as bigger-is-better.
pub fn smaller_is_better(unit: &str) -> bool {
    let head = unit.split('/').next().unwrap_or("");
    matches!(head, "ns" | "us" | "µs" | "ms" | "s" | "cycles")
}

/// The experiment's trust grade ("A", "B", "C"); None in documents written before grades.
pub fn grade_of(e: &ExperimentResult) -> Option<String> {
    e.grade.as_ref().map(|g| g.level.as_str().to_string())
}

/// The metric family a unit goes to, and the factor to its base unit.
fn family(unit: &str) -> (String, f64) {
    match unit {
        "ns" => ("osmeter_seconds".into(), 1e-9),
        "us" | "µs" => ("osmeter_seconds".into(), 1e-6),
        "ms" => ("osmeter_seconds".into(), 1e-3),
        "s" => ("osmeter_seconds".into(), 1.0),
        "bytes/s" => ("osmeter_bytes_per_second".into(), 1.0),
        "bits/s" => ("osmeter_bits_per_second".into(), 1.0),
        "1/s" => ("osmeter_per_second".into(), 1.0),
        "bytes" => ("osmeter_bytes".into(), 1.0),
        "ns/B" | "ns/byte" => ("osmeter_seconds_per_byte".into(), 1e-9),
        other => {
            let mut n = String::from("osmeter_");
            for c in other.chars() {
                n.push(if c.is_ascii_alphanumeric() { c } else { '_' });
            }
            (n, 1.0)
        }
    }
}

/// A label value escaped for the text format (backslash, double quote, newline).
pub(crate) fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: Go's float formatting accepts Rust's shortest round-trip form.
pub(crate) fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v:e}")
    }
}

/// The metrics that export: those of experiments that ran ok, with a finite median.
fn ok_metrics(
    r: &RunResults,
) -> impl Iterator<Item = (&ExperimentResult, &crate::results::Metric)> {
    r.experiments
        .iter()
        .filter(|e| e.status == Status::Ok)
        .flat_map(|e| e.metrics.iter().map(move |m| (e, m)))
        .filter(|(_, m)| m.summary.median.is_finite())
}

/// The Prometheus text exposition of a run.
pub fn openmetrics(r: &RunResults) -> String {
    let host = label(r.host_name());
    let (fp, machine) = crate::history::fingerprint(r);
    let mut families: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (e, m) in ok_metrics(r) {
        let (fam, k) = family(&m.unit);
        families.entry(fam).or_default().push(format!(
            "{{host=\"{host}\",experiment=\"{}\",metric=\"{}\",unit=\"{}\"}} {}",
            label(&e.id),
            label(&m.name),
            label(&m.unit),
            value(m.summary.median * k)
        ));
    }
    let mut s = String::new();
    for (fam, samples) in &families {
        let _ = writeln!(
            s,
            "# HELP {fam} osmeter: median of each metric of the run, in the family's base unit (label unit: as measured)."
        );
        let _ = writeln!(s, "# TYPE {fam} gauge");
        for x in samples {
            let _ = writeln!(s, "{fam}{x}");
        }
    }
    let _ = writeln!(
        s,
        "# HELP osmeter_run_info osmeter: the run (value 1); fingerprint identifies the machine (CPU model, CPUs, memory)."
    );
    let _ = writeln!(s, "# TYPE osmeter_run_info gauge");
    let _ = writeln!(
        s,
        "osmeter_run_info{{host=\"{host}\",fingerprint=\"{fp}\",machine=\"{}\",profile=\"{}\",version=\"{}\",started_at=\"{}\"}} 1",
        label(&machine),
        label(r.config.profile_name()),
        label(&r.tool.version),
        label(&r.started_at)
    );
    let _ = writeln!(
        s,
        "# HELP osmeter_experiment_info osmeter: each experiment's status (value 1), and its trust grade where the run has one."
    );
    let _ = writeln!(s, "# TYPE osmeter_experiment_info gauge");
    for e in &r.experiments {
        let grade = grade_of(e)
            .map(|g| format!(",grade=\"{}\"", label(&g)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "osmeter_experiment_info{{host=\"{host}\",experiment=\"{}\",status=\"{}\",fingerprint=\"{fp}\"{grade}}} 1",
            label(&e.id),
            e.status.as_str()
        );
    }
    s.push_str("# EOF\n");
    s
}

/// One entry of github-action-benchmark's custom JSON.
#[derive(Debug, serde::Serialize)]
pub struct BenchEntry {
    pub name: String,
    pub unit: String,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<String>,
}

/// The custom JSON arrays for github-action-benchmark: (smaller is better, bigger is better).
pub fn github_benchmark(r: &RunResults) -> (Vec<BenchEntry>, Vec<BenchEntry>) {
    let (mut small, mut big) = (Vec::new(), Vec::new());
    for (e, m) in ok_metrics(r) {
        let [lo, hi] = m.summary.ci95;
        let entry = BenchEntry {
            name: format!("{}/{}", e.id, m.name),
            unit: m.unit.clone(),
            value: m.summary.median,
            range: (lo.is_finite() && hi.is_finite())
                .then(|| format!("CI95 {} .. {}", fmt_num(lo), fmt_num(hi))),
            extra: Some(format!(
                "host: {}\nn: {}{}",
                r.host_name(),
                m.summary.n,
                grade_of(e)
                    .map(|g| format!("\ngrade: {g}"))
                    .unwrap_or_default()
            )),
        };
        if smaller_is_better(&m.unit) {
            small.push(entry);
        } else {
            big.push(entry);
        }
    }
    (small, big)
}

/// Shortest round-trip form, with an exponent for very small or large values.
fn fmt_num(v: f64) -> String {
    format!("{v:?}")
}

/// One CSV field, quoted when it must be (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row per metric of every experiment (its status tells whether it counts), with the
/// mean and standard deviation of its samples (empty SD below two samples), and its
/// prediction: value, bound (`lower`, `upper` or empty for a point), and the side of the
/// course's split it falls on (`hardware`, `software`, or `not split` with the reason in
/// `split_note`), as the report's closing table shows them.
pub fn csv(r: &RunResults) -> String {
    let mut s = String::from(
        "host,started_at,experiment,status,grade,metric,unit,median,ci95_low,ci95_high,n,cov,\
         mean,sd,predicted,prediction_bound,predicted_hardware,predicted_software,split_note,\
         out_of_range\r\n",
    );
    let num = |v: f64| {
        if v.is_finite() {
            fmt_num(v)
        } else {
            String::new()
        }
    };
    for e in &r.experiments {
        let grade = grade_of(e).unwrap_or_default();
        for m in &e.metrics {
            let f = [
                field(r.host_name()),
                field(&r.started_at),
                field(&e.id),
                e.status.as_str().into(),
                field(&grade),
                field(&m.name),
                field(&m.unit),
                num(m.summary.median),
                num(m.summary.ci95[0]),
                num(m.summary.ci95[1]),
                m.summary.n.to_string(),
                num(m.summary.cov),
            ];
            let sm = &m.summary;
            let sd = if sm.n >= 2 {
                num(sm.stddev)
            } else {
                String::new()
            };
            let pred = m.prediction.as_ref().filter(|p| p.value.is_finite());
            let (bound, hw, sw, note) = match pred {
                None => Default::default(),
                Some(p) => {
                    let bound = match p.bound {
                        Some(crate::results::Bound::Lower) => "lower",
                        Some(crate::results::Bound::Upper) => "upper",
                        None => "",
                    };
                    let (hw, sw, note) = match super::view::split(e, p) {
                        Split::Hardware => (num(p.value), String::new(), String::new()),
                        Split::Software => (String::new(), num(p.value), String::new()),
                        Split::Unsplit(why) => (String::new(), String::new(), why),
                    };
                    (bound.to_string(), hw, sw, note)
                }
            };
            let tail = [
                num(sm.mean),
                sd,
                pred.map(|p| num(p.value)).unwrap_or_default(),
                bound,
                hw,
                sw,
                field(&note),
                field(&super::view::out_of_range(m).unwrap_or_default()),
            ];
            let f: Vec<String> = f.into_iter().chain(tail).collect();
            s.push_str(&f.join(","));
            s.push_str("\r\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> RunResults {
        crate::results::load::from_str(
            r#"{"schema_version":1,"tool":{"name":"osmeter","version":"0.1"},"started_at":"2026-01-01T00:00:00Z",
               "duration_s":1,"config":{"profile":"quick"},"machine":{"hostname":"h\"1"},"experiments":[
               {"id":"cpu.syscall","area":"cpu","title":"t","status":"ok","duration_s":1,"metrics":[
                 {"name":"getppid","unit":"ns","summary":{"n":5,"median":80,"mean":1,"stddev":0,"min":1,"max":1,"ci95":[79,81],"cov":0.01,"outliers":0}},
                 {"name":"a,b","unit":"bytes/s","summary":{"n":5,"median":1e9,"mean":1,"stddev":0,"min":1,"max":1,"ci95":[9e8,1.1e9],"cov":0.01,"outliers":0}}]},
               {"id":"fs.read","area":"fs","title":"t","status":"invalid","duration_s":1,"metrics":[
                 {"name":"cold","unit":"ns","summary":{"n":5,"median":5,"mean":1,"stddev":0,"min":1,"max":1,"ci95":[1,2],"cov":0,"outliers":0}}]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn directions_by_unit() {
        assert!(smaller_is_better("ns"));
        assert!(smaller_is_better("ns/B"));
        assert!(!smaller_is_better("bytes/s"));
        assert!(!smaller_is_better("bits/s"));
        assert!(!smaller_is_better("bytes"));
    }

    #[test]
    fn openmetrics_carries_ok_metrics_in_base_units_and_escapes_labels() {
        let t = openmetrics(&doc());
        assert!(t.contains(
            "osmeter_seconds{host=\"h\\\"1\",experiment=\"cpu.syscall\",metric=\"getppid\",unit=\"ns\"} 8e-8\n"
        ), "{t}");
        assert!(t.contains("osmeter_bytes_per_second{"));
        // The invalid experiment's figure is not a sample, only its status is.
        assert!(!t.contains("metric=\"cold\""));
        assert!(t.contains("experiment=\"fs.read\",status=\"invalid\""));
        assert!(!t.contains("grade="));
        assert!(t.ends_with("# EOF\n"));
    }

    #[test]
    fn a_grade_is_exported_when_the_document_has_one() {
        let mut r = doc();
        r.experiments[0].grade = Some(crate::results::Grade {
            level: crate::results::GradeLevel::B,
            reasons: vec![],
        });
        assert_eq!(grade_of(&r.experiments[0]).as_deref(), Some("B"));
        assert!(openmetrics(&r).contains("grade=\"B\""));
    }

    #[test]
    fn github_benchmark_splits_by_direction() {
        let (small, big) = github_benchmark(&doc());
        assert_eq!(small.len(), 1);
        assert_eq!(small[0].name, "cpu.syscall/getppid");
        assert_eq!(small[0].value, 80.0);
        assert_eq!(big.len(), 1);
        assert_eq!(big[0].unit, "bytes/s");
    }

    #[test]
    fn csv_carries_sd_and_the_prediction_with_its_split() {
        let r = crate::report::view::tests::doc();
        let c = csv(&r);
        let mut rd: Vec<Vec<String>> = Vec::new();
        for line in c.split("\r\n").filter(|l| !l.is_empty()) {
            // No field of this document holds a quoted comma but the notes: split them off.
            let mut cells = Vec::new();
            let (mut cur, mut quoted) = (String::new(), false);
            for ch in line.chars() {
                match ch {
                    '"' => quoted = !quoted,
                    ',' if !quoted => cells.push(std::mem::take(&mut cur)),
                    c => cur.push(c),
                }
            }
            cells.push(cur);
            rd.push(cells);
        }
        let head = &rd[0];
        let col = |n: &str| {
            head.iter()
                .position(|h| h == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        assert!(rd.iter().all(|row| row.len() == head.len()), "{c}");
        let row = |m: &str| rd.iter().find(|r| r[col("metric")] == m).unwrap();
        assert_eq!(row("hw")[col("sd")], "0.1");
        assert_eq!(row("hw")[col("predicted")], "1.0");
        assert_eq!(row("hw")[col("predicted_hardware")], "1.0");
        assert_eq!(row("hw")[col("predicted_software")], "");
        assert_eq!(row("sw")[col("sd")], "", "one sample has no SD");
        assert_eq!(row("sw")[col("prediction_bound")], "lower");
        assert_eq!(row("sw")[col("predicted_software")], "200.0");
        assert!(row("mixed")[col("split_note")].contains("combines"));
        assert!(row("per_argument")[col("out_of_range")].contains("below zero"));
        assert_eq!(row("per_argument")[col("predicted")], "");
    }

    #[test]
    fn csv_quotes_and_counts_rows() {
        let c = csv(&doc());
        let lines: Vec<&str> = c.split("\r\n").filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[2].contains(",\"a,b\",bytes/s,1000000000.0,"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains(",invalid,"));
        assert!(lines[1].starts_with("\"h\"\"1\","));
    }
}
