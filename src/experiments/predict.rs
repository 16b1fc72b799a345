//! Predictions built from typed inputs, each carrying its source or the reason it is
//! missing, so a prediction from a missing input is withheld with that input's reason.

use super::Context;
use crate::results::{InputKind, Prediction};

/// One input of a prediction: a figure with where it came from, or why there is none.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    name: String,
    value: Result<f64, String>,
    unit: String,
    source: String,
    kind: InputKind,
    cited: Option<(String, String)>,
}

impl Input {
    fn new(
        name: &str,
        value: Result<f64, String>,
        unit: &str,
        source: String,
        kind: InputKind,
    ) -> Input {
        Input {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
            source,
            kind,
            cited: None,
        }
    }

    /// A fact of this machine, or why the description lacks it.
    pub(crate) fn machine(
        name: &str,
        value: Option<f64>,
        unit: &str,
        source: impl Into<String>,
        missing: impl Into<String>,
    ) -> Input {
        let value = value
            .filter(|v| v.is_finite())
            .ok_or_else(|| missing.into());
        Input::new(name, value, unit, source.into(), InputKind::Machine)
    }

    /// A figure measured earlier in this run that `Predictions::earlier` does not give
    /// (a mean rather than the median), or why it is missing.
    pub(crate) fn measured(
        name: &str,
        value: Option<f64>,
        unit: &str,
        source: impl Into<String>,
        missing: impl Into<String>,
    ) -> Input {
        Input {
            kind: InputKind::Measured,
            ..Input::machine(name, value, unit, source, missing)
        }
    }

    /// A count the method itself fixes, or one traced from it.
    pub(crate) fn method(name: &str, value: f64, unit: &str, source: impl Into<String>) -> Input {
        Input::new(name, Ok(value), unit, source.into(), InputKind::Method)
    }

    /// An entry of the parts table: `what` names the figure, `key` the entry that matched.
    pub(crate) fn table(
        name: &str,
        value: f64,
        unit: &str,
        what: &str,
        key: &str,
        reference: &str,
    ) -> Input {
        let source = format!("table: {what} ({key})");
        let i = Input::new(name, Ok(value), unit, source, InputKind::Table);
        let cited = Some((key.to_string(), reference.to_string()));
        Input { cited, ..i }
    }

    pub(crate) fn missing(name: &str, why: impl Into<String>) -> Input {
        Input::new(name, Err(why.into()), "", String::new(), InputKind::Machine)
    }

    /// Missing unless above zero (at or below zero is noise, not a cost to build on).
    pub(crate) fn positive(self) -> Input {
        match self.value {
            Ok(v) if v <= 0.0 => {
                let why = format!("{} ({}) was not positive", self.source, self.name);
                Input {
                    value: Err(why),
                    ..self
                }
            }
            _ => self,
        }
    }

    pub(crate) fn named(mut self, name: &str) -> Input {
        self.name = name.to_string();
        self
    }

    /// For `earlier`, the metric found.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn value(&self) -> Option<f64> {
        self.value.as_ref().ok().copied()
    }

    pub(crate) fn why_missing(&self) -> Option<&str> {
        self.value.as_ref().err().map(String::as_str)
    }

    /// `p` with this input recorded (unchanged when it is missing).
    pub(crate) fn attach(&self, p: Prediction) -> Prediction {
        let Ok(v) = self.value else { return p };
        p.typed(
            &self.name,
            v,
            &self.unit,
            self.source.clone(),
            self.kind,
            self.cited.clone(),
        )
    }
}

/// The predictions an experiment states before it measures, by metric name.
pub(crate) struct Predictions<'c, 'a> {
    ctx: &'c Context<'a>,
    stated: Vec<(String, Prediction)>,
}

impl<'c, 'a> Predictions<'c, 'a> {
    pub(crate) fn new(ctx: &'c Context<'a>) -> Self {
        Predictions {
            ctx,
            stated: Vec::new(),
        }
    }

    pub(crate) fn ctx(&self) -> &'c Context<'a> {
        self.ctx
    }

    /// The first of `metrics` that `experiment` measured earlier in this run, as an input
    /// named after the metric; missing, with the reason, when none was.
    pub(crate) fn earlier(&self, experiment: &str, metrics: &[&str]) -> Input {
        for m in metrics {
            if let Some(x) = self.ctx.earlier.metric(experiment, m) {
                let v = Some(x.summary.median)
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| format!("{experiment}'s {m} has no finite median"));
                let source = format!("measured: {experiment} {m}");
                return Input::new(m, v, &x.unit, source, InputKind::Measured);
            }
        }
        let first = metrics.first().copied().unwrap_or("figure");
        let why = match self.ctx.earlier.not_ok(experiment) {
            Some(s) => format!(
                "{experiment} ran but is {} in this run, so its {first} is no input",
                s.as_str()
            ),
            None => format!("{experiment}'s {first} was not measured in this run"),
        };
        Input::missing(first, why)
    }

    /// States `metric` as `f` of the inputs' values, each recorded as an input; withheld
    /// with the first missing input's reason when any is missing.
    pub(crate) fn state(
        &mut self,
        metric: &str,
        inputs: &[&Input],
        f: impl FnOnce(&[f64]) -> Prediction,
    ) {
        if let Some(why) = inputs.iter().find_map(|i| i.why_missing()) {
            self.withhold(&[metric], why);
            return;
        }
        let values: Vec<f64> = inputs.iter().filter_map(|i| i.value()).collect();
        let p = inputs.iter().fold(f(&values), |p, i| i.attach(p));
        self.add(metric, p);
    }

    /// `metric` should read `input` (the same figure measured another way).
    pub(crate) fn equal(&mut self, metric: &str, input: &Input, formula: impl Into<String>) {
        self.state(metric, &[input], |v| Prediction::new(v[0], formula));
    }

    /// `metric` is `input` measured another way: shown as a consistency check, since a
    /// ratio near 1 confirms the two readings but tests no model.
    pub(crate) fn same(&mut self, metric: &str, input: &Input, formula: impl Into<String>) {
        self.state(metric, &[input], |v| {
            Prediction::new(v[0], formula).consistency()
        });
    }

    /// `metric` should be at least `input`: the model leaves costs out.
    pub(crate) fn at_least(&mut self, metric: &str, input: &Input, formula: impl Into<String>) {
        self.state(metric, &[input], |v| {
            Prediction::new(v[0], formula).lower_bound()
        });
    }

    pub(crate) fn withhold(&mut self, metrics: &[&str], why: &str) {
        for m in metrics {
            self.add(m, Prediction::withheld(why));
        }
    }

    pub(crate) fn add(&mut self, metric: &str, p: Prediction) {
        self.stated.push((metric.to_string(), p));
    }

    pub(crate) fn done(self) -> Vec<(String, Prediction)> {
        self.stated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::testing::World;

    #[test]
    fn a_missing_input_withholds_with_its_own_reason() {
        let clock = crate::clock::MockClock::new(1);
        let v = World::live(&clock).with_ctx(|ctx| {
            let mut p = Predictions::new(ctx);
            let pair = p.earlier("cpu.timer", &["read_pair"]);
            assert!(pair.value().is_none());
            p.equal("x", &pair, "half a pair");
            let core = Input::method("core", 2.0, "reads", "method: two reads per pair");
            p.state("y", &[&core, &pair], |v| {
                Prediction::new(v[0] * v[1], "both")
            });
            p.done()
        });
        assert_eq!(v.len(), 2);
        for (_, pr) in &v {
            let why = pr.withheld.as_deref().unwrap_or("");
            assert!(
                why.contains("cpu.timer's read_pair was not measured"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_present_input_is_recorded_with_its_source() {
        let core = Input::method("core", 2.0, "reads", "method: two reads per pair");
        let table = Input::table("l1d", 4.0, "cycles", "L1D load-to-use", "arm N1", "ref");
        let got = table.attach(core.attach(Prediction::new(8.0, "f")));
        assert_eq!(got.inputs["core"].source, "method: two reads per pair");
        assert_eq!(got.inputs["l1d"].source, "table: L1D load-to-use (arm N1)");
        assert_eq!(got.inputs["l1d"].reference.as_deref(), Some("ref"));
    }

    #[test]
    fn a_figure_at_or_below_zero_is_no_input() {
        let neg = Input::method("switch", -3.0, "ns", "method: noise").positive();
        let why = neg.why_missing().unwrap_or("");
        assert!(
            neg.value().is_none() && why.contains("not positive"),
            "{why}"
        );
        let pos = Input::method("switch", 3.0, "ns", "method: a cost").positive();
        assert_eq!(pos.value(), Some(3.0));
    }
}
