//! The comparison (crate::compare) as a terminal table: one column per run, the
//! baseline's medians and every other run's ratio to it, significant differences marked
//! and explained below the table. Its HTML form is the fleet page (report::fleet).

use crate::compare::gate::{Gate, Verdict};
use crate::compare::Comparison;
use crate::results::Status;
use crate::units::fmt_value;

/// The comparison as a terminal table.
pub fn render(c: &Comparison) -> String {
    let mut s = String::new();
    for r in &c.runs {
        s.push_str(&format!(
            "{} = {} ({}, {}, profile {})\n",
            r.label, r.source, r.host, r.started_at, r.profile
        ));
    }
    for b in &c.builds {
        s.push_str(&format!("build: {b}\n"));
    }
    if let Some(g) = &c.gate {
        s.push_str(&gate(g));
    }
    s.push_str(&table(c));
    s.push('\n');
    for m in c.metrics.iter().filter(|m| m.significant) {
        for (i, v) in m.versus.iter().enumerate() {
            let Some(v) = v.as_ref().filter(|v| v.significant) else {
                continue;
            };
            s.push_str(&format!(
                "* {} {} {}: {} [{}, {}] ({:?} test; noise: {}; sentinel: {})\n",
                m.experiment,
                m.metric,
                c.runs[i].label,
                signed(v.shift, &m.unit),
                signed(v.shift_ci95[0], &m.unit),
                signed(v.shift_ci95[1], &m.unit),
                v.test,
                v.noise.source,
                sentinel(v)
            ));
        }
    }
    for e in &c.environment {
        s.push_str(&format!("{}: {}\n", e.experiment, e.text));
    }
    let sources: std::collections::BTreeSet<&str> = c
        .metrics
        .iter()
        .flat_map(|m| m.versus.iter().flatten().map(|v| v.noise.source.as_str()))
        .collect();
    s.push_str(&format!(
        "run-to-run noise: {}\n",
        sources.into_iter().collect::<Vec<_>>().join(", ")
    ));
    s.push_str(&format!(
        "{} of {} compared metrics differ significantly (*: {}).\n",
        c.significant, c.compared, c.rule
    ));
    s
}

/// One row per metric: the baseline's median and every other run's with its ratio.
fn table(c: &Comparison) -> String {
    use comfy_table::{
        presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table,
    };
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    let mut header = vec!["experiment".to_string(), "metric".to_string()];
    for (i, r) in c.runs.iter().enumerate() {
        header.push(if i == 0 {
            format!("{} (median)", r.label)
        } else {
            format!("{} (ratio to A)", r.label)
        });
    }
    t.set_header(header);
    let mut last = String::new();
    for m in &c.metrics {
        let mut row = vec![
            Cell::new(if m.experiment == last {
                String::new()
            } else {
                m.experiment.clone()
            }),
            Cell::new(&m.metric),
        ];
        last = m.experiment.clone();
        for i in 0..c.runs.len() {
            let txt = match (&m.values[i], m.ratios[i]) {
                (None, _) => "-".to_string(),
                (Some(v), Some(r)) if i > 0 => format!(
                    "{} ({r:.3}){}",
                    fmt_value(v.median, &m.unit),
                    if m.significant_vs_baseline[i] {
                        " *"
                    } else {
                        ""
                    }
                ),
                (Some(v), _) => fmt_value(v.median, &m.unit),
            };
            // A figure of an experiment that was not ok says so (unverified, invalid).
            let txt = match &m.values[i] {
                Some(v) if v.status != Status::Ok => format!("{txt} [{}]", v.status.as_str()),
                _ => txt,
            };
            row.push(Cell::new(txt).set_alignment(CellAlignment::Right));
        }
        t.add_row(row);
    }
    t.to_string()
}

/// The sentinel component a difference was held to, and its move.
fn sentinel(v: &crate::compare::Versus) -> String {
    use crate::results::Bottleneck;
    match (v.component, v.environment) {
        (Some(Bottleneck::None), _) => "none".into(),
        (c, Some(m)) => format!(
            "{} moved {:.0}%",
            c.map_or("any component", |c| c.describe()),
            m * 100.0
        ),
        (c, None) => format!(
            "{}, no readings",
            c.map_or("any component", |c| c.describe())
        ),
    }
}

/// The gate's verdicts, regressions first: the lines a CI log shows.
fn gate(g: &Gate) -> String {
    let mut s = format!(
        "gate {} against A: {}; {} regressed, {} improved, {} same, {} inconclusive, {} not gated\n",
        g.run, g.outcome, g.regressed, g.improved, g.same, g.inconclusive, g.not_gated
    );
    for e in &g.environment {
        s.push_str(&format!("  environment: {e}\n"));
    }
    for (v, title) in [
        (Verdict::Regressed, "REGRESSED"),
        (Verdict::Improved, "improved"),
        (Verdict::Inconclusive, "inconclusive"),
    ] {
        let rows: Vec<_> = g.rows.iter().filter(|r| r.verdict == Some(v)).collect();
        if rows.is_empty() {
            continue;
        }
        s.push_str(&format!("{title} ({}):\n", rows.len()));
        for r in rows {
            s.push_str(&format!(
                "  {} {}{}: {}\n",
                r.experiment,
                r.metric,
                if r.required { " (required)" } else { "" },
                r.reason
            ));
        }
    }
    if g.same > 0 {
        s.push_str(&format!(
            "same: {} metrics changed less than their floor, interval and all\n",
            g.same
        ));
    }
    for p in &g.unmatched {
        s.push_str(&format!("--require {p}: no such metric in run A\n"));
    }
    s.push_str(&format!("gate rule: {}\n\n", g.rule));
    s
}

fn signed(x: f64, unit: &str) -> String {
    if x < 0.0 {
        format!("-{}", fmt_value(-x, unit))
    } else {
        format!("+{}", fmt_value(x, unit))
    }
}
