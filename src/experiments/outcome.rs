//! What an experiment returns: its metrics, series, checks, findings and notes, and the
//! pooling of back-to-back runs into the figures the table shows.

use super::Context;
use crate::analysis::Separation;
use crate::harness::Harness;
use crate::results::{Check, Finding, Metric, Series, Status};
use crate::stats::Summary;

/// How much of a measured cost a model of parts measured elsewhere accounts for: never a
/// share above 100%, what the parts leave over unexplained, and an over-prediction never
/// given a cause (a part not paid in full and an input measured high look the same).
pub(crate) fn explained(parts: &str, model_ns: f64, measured_ns: f64) -> String {
    use crate::units::fmt_ns;
    if !(model_ns.is_finite() && measured_ns.is_finite() && model_ns > 0.0 && measured_ns > 0.0) {
        return String::new();
    }
    if model_ns < measured_ns {
        format!(
            " {parts} add up to {} ({:.0}% of it): the model explains less than the measured cost, and the other {} is not broken down here.",
            fmt_ns(model_ns),
            100.0 * model_ns / measured_ns,
            fmt_ns(measured_ns - model_ns)
        )
    } else {
        format!(
            " {parts} add up to {}, {:.2}x the measured cost: the model over-predicts, and this run does not show whether a part is not paid in full here or an input was measured high.",
            fmt_ns(model_ns),
            model_ns / measured_ns
        )
    }
}

/// What an experiment returns. Failed premise checks make it invalid.
#[derive(Debug, Default)]
pub struct Outcome {
    pub metrics: Vec<Metric>,
    pub series: Vec<Series>,
    pub checks: Vec<Check>,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// Why it could not run here, and how to enable it.
    pub skipped: Option<String>,
    /// Sentences this machine adds to the method text.
    pub method_notes: Vec<String>,
    /// Checks and series made before `pool` (this run's alone, the rest the pooled runs').
    pub pooled_at: Option<(usize, usize)>,
}

impl Outcome {
    pub fn skipped(reason: impl Into<String>) -> Self {
        Outcome {
            skipped: Some(reason.into()),
            ..Default::default()
        }
    }

    /// Pools the earlier runs into every metric so far (`pool_metric`): call it once, after
    /// the metrics and before the checks and findings, so their text quotes the table.
    pub fn pool(&mut self, ctx: &Context) {
        self.pooled_at = Some((self.checks.len(), self.series.len()));
        let before = ctx.repetition.before;
        if before.is_empty() || before.iter().any(|r| r.status != Status::Ok) {
            return;
        }
        for m in &mut self.metrics {
            let earlier: Vec<&Metric> = before
                .iter()
                .filter_map(|r| r.metric(&m.name).filter(|x| x.unit == m.unit))
                .collect();
            if earlier.len() == before.len() {
                pool_metric(m, &earlier);
            }
        }
    }

    pub fn metric(
        &mut self,
        name: &str,
        unit: &str,
        description: &str,
        raw: Vec<f64>,
    ) -> &mut Metric {
        let summary = Summary::of(&raw).unwrap_or(Summary::EMPTY);
        self.metrics.push(Metric {
            name: name.into(),
            unit: unit.into(),
            description: description.into(),
            summary,
            prediction: None,
            cycles: None,
            iterations: None,
            raw,
            kind: Some(crate::results::MetricKind::PerTrial),
            runs: Vec::new(),
            bottleneck: None,
        });
        self.metrics.last_mut().unwrap()
    }

    /// Adds a distribution of single operations with its p50/p90/p99.
    pub(crate) fn distribution(
        &mut self,
        name: &str,
        unit: &str,
        description: &str,
        raw: Vec<f64>,
    ) -> &mut Metric {
        let s = Summary::with_percentiles(&raw);
        let m = self.metric(name, unit, description, raw);
        m.per_operation();
        if let Some(s) = s {
            m.summary = s;
        }
        m
    }

    /// Metric `a` against `b` beyond both 95% intervals (`Overlap` when either is missing).
    pub(crate) fn separation(&self, a: &str, b: &str) -> Separation {
        match (self.get(a), self.get(b)) {
            (Some(x), Some(y)) => crate::analysis::separation(&x.summary, &y.summary),
            _ => Separation::Overlap,
        }
    }

    /// Times `kernel` (`n` operations per call) with `h` and adds it as metric `name`:
    /// one call per named kernel, as lmbench's `benchmp` + `micro`.
    pub(crate) fn time(
        &mut self,
        ctx: &Context,
        h: &Harness,
        name: &str,
        description: &str,
        kernel: impl FnMut(u64),
    ) -> &mut Metric {
        (ctx.progress)(name);
        let m = h.measure(1.0, kernel);
        self.measured(name, description, &m)
    }

    /// Adds a per-operation time from a harness measurement, with its notes.
    pub(crate) fn measured(
        &mut self,
        name: &str,
        description: &str,
        m: &crate::harness::Measurement,
    ) -> &mut Metric {
        for n in &m.notes {
            self.notes.push(format!("{name}: {n}"));
        }
        let iters = m.iters;
        let metric = self.metric(name, "ns", description, m.per_op_ns.clone());
        metric.iterations = Some(iters);
        metric
    }

    /// Adds `name` = (each trial of `minuend` - the median of `subtrahend`) x `scale`, each
    /// run's own difference in `runs`; its median and interval (docs/METHODOLOGY.md,
    /// "Derived figures"), None when either input is missing.
    pub(crate) fn difference(
        &mut self,
        name: &str,
        description: &str,
        minuend: &str,
        subtrahend: &str,
        scale: f64,
    ) -> Option<(f64, [f64; 2])> {
        let (a, b) = (self.get(minuend)?.clone(), self.get(subtrahend)?.clone());
        let med = b.summary.median;
        let raw = a.raw.iter().map(|t| (t - med) * scale).collect();
        let unit = a.unit.clone();
        let m = self
            .metric(name, &unit, description, raw)
            .derived(&[(subtrahend, "sub", scale)]);
        m.iterations = a.iterations;
        if a.runs.len() == b.runs.len() {
            m.runs = a
                .runs
                .iter()
                .zip(&b.runs)
                .map(|(x, y)| (x - y) * scale)
                .collect();
        }
        let interval = m.interval(|n| (n == subtrahend).then_some(&b));
        Some((m.summary.median, interval))
    }

    pub(crate) fn plot(&mut self, name: &str, x_unit: &str, y_unit: &str, points: Vec<[f64; 2]>) {
        self.series.push(Series {
            name: name.into(),
            x_unit: x_unit.into(),
            y_unit: y_unit.into(),
            points,
        });
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// NaN when there is none.
    pub(crate) fn median(&self, name: &str) -> f64 {
        self.get(name).map_or(f64::NAN, |m| m.summary.median)
    }

    pub fn check(&mut self, c: Check) {
        self.checks.push(c);
    }

    pub(crate) fn finding(&mut self, text: impl Into<String>, from: &[&str]) {
        self.findings.push(Finding::new(text, from));
    }

    /// A finding whose weight is not a ratio of two of its metrics (see `findings::score`).
    pub(crate) fn finding_salient(
        &mut self,
        text: impl Into<String>,
        from: &[&str],
        salience: f64,
    ) {
        let mut f = Finding::new(text, from);
        f.salience = salience.is_finite().then_some(salience.abs());
        self.findings.push(f);
    }
}

/// Pools `m` (the last run's) with the same metric of the earlier runs, in run order:
/// raw values concatenated, summary recomputed, each run's own median in `runs`.
pub(crate) fn pool_metric(m: &mut Metric, earlier: &[&Metric]) {
    let mut runs: Vec<f64> = earlier.iter().map(|x| x.summary.median).collect();
    runs.push(m.summary.median);
    let mut raw: Vec<f64> = earlier.iter().flat_map(|x| x.raw.iter().copied()).collect();
    raw.extend_from_slice(&m.raw);
    let pooled = if m.summary.percentiles.is_some() {
        Summary::with_percentiles(&raw)
    } else {
        Summary::of(&raw)
    };
    if let Some(s) = pooled {
        let old = m.summary.median;
        if let Some(c) = &mut m.cycles {
            let k = s.median / old;
            c.core = c.core.map(|v| v * k);
            c.counter = c.counter.map(|v| v * k);
        }
        m.summary = s;
    }
    m.raw = raw;
    m.runs = runs;
}
