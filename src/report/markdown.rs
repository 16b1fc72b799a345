//! report.md: the same content as report.html, as Markdown that links the plot files.

use super::figures::Figure;
use super::view::{self, metric_row};
use crate::results::{ExperimentResult, RunResults, Status};

/// Escapes what would break a table cell or start markup.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn render(r: &RunResults, figs: &[Figure]) -> String {
    let mut s = String::new();
    w(&mut s, &format!("# {}\n", view::title(r)));
    w(&mut s, &format!("{}\n", view::run_line(r)));

    machine(&mut s, r);
    s.push_str(&super::network::markdown(r));
    summary(&mut s, r);
    findings_and_not_ok(&mut s, r);
    grades(&mut s, r);
    w(&mut s, "## Experiments\n");
    for e in &r.experiments {
        experiment(&mut s, e, figs);
    }
    let rules = view::statistics_rules(r);
    if !rules.is_empty() {
        w(&mut s, "## Statistics\n");
        for (k, v) in rules {
            w(&mut s, &format!("- **{k}**: {v}"));
        }
        s.push('\n');
    }
    closing(&mut s, r);
    s
}

/// The closing table in the course's columns; the report ends with it.
fn closing(s: &mut String, r: &RunResults) {
    let c = view::closing(r);
    if c.rows.is_empty() {
        return;
    }
    w(s, "## Closing table\n");
    w(s, &format!("{}\n", view::CLOSING_LEGEND));
    w(
        s,
        "| operation | base hardware | software overhead | predicted | measured mean ± SD | measured median [95% CI] |",
    );
    w(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for row in &c.rows {
        let mark: String = row.notes.iter().map(|n| format!(" [{n}]")).collect();
        w(
            s,
            &format!(
                "| {}{mark} | {} | {} | {} | {} | {} |",
                cell(&row.operation),
                row.hardware,
                row.software,
                row.predicted,
                row.mean_sd,
                row.median_ci
            ),
        );
    }
    if !c.notes.is_empty() {
        s.push('\n');
        for (i, n) in c.notes.iter().enumerate() {
            w(s, &format!("[{}] {}\n", i + 1, n));
        }
    } else {
        s.push('\n');
    }
}

/// The notes of figures outside their physical range, under a table that marks them.
fn out_of_range_notes(s: &mut String, e: &ExperimentResult) {
    for m in &e.metrics {
        if let Some(why) = view::out_of_range(m) {
            w(s, &format!("- *{} {}*: {why}.", e.id, m.name));
        }
    }
}

fn w(s: &mut String, t: &str) {
    s.push_str(t);
    s.push('\n');
}

/// The facts in brief, then the run's warnings.
fn machine(s: &mut String, r: &RunResults) {
    w(s, "## Machine\n");
    for (k, v) in view::machine_facts(r) {
        w(s, &format!("- **{k}**: {v}"));
    }
    s.push('\n');
    if !r.warnings.is_empty() {
        w(s, "**Warnings about the conditions of this run:**\n");
        for x in &r.warnings {
            w(s, &format!("- {x}"));
        }
        s.push('\n');
    }
}

/// Predicted vs measured, one row per metric.
fn summary(s: &mut String, r: &RunResults) {
    w(s, "## Predicted vs measured\n");
    w(
        s,
        &format!(
            "Every metric: the prediction stated before measuring, the measured median with its 95% confidence interval, and measured/predicted (**!** marks a ratio {}).\n",
            super::view::flag_legend(super::view::has_bounds(r))
        ),
    );
    w(
        s,
        "| experiment | metric | predicted | formula | measured (median) | 95% CI | meas/pred |",
    );
    w(s, "| --- | --- | ---: | --- | ---: | --- | ---: |");
    for e in &r.experiments {
        if e.metrics.is_empty() {
            w(
                s,
                &format!(
                    "| {} | *{}: {}* | | | | | |",
                    e.id,
                    e.status.as_str(),
                    cell(
                        e.reason
                            .as_deref()
                            .unwrap_or("no summary metrics; see its plots")
                    )
                ),
            );
        }
        let groups = view::formula_groups(e);
        for (m, g) in e.metrics.iter().zip(&groups) {
            let row = metric_row(m);
            let id = view::id_with_grade(
                e,
                if e.status == Status::Ok {
                    e.id.clone()
                } else {
                    format!("{} ({})", e.id, e.status.as_str())
                },
            );
            w(
                s,
                &format!(
                    "| {id} | {} | {} | {} | {} | {} | {}{} |",
                    cell(&row.metric),
                    row.predicted,
                    cell(&if row.formula.is_empty() {
                        String::new()
                    } else {
                        g.cell(&row.formula)
                    }),
                    row.measured,
                    row.ci,
                    row.ratio,
                    if row.flagged { " **!**" } else { "" }
                ),
            );
        }
    }
    s.push('\n');
    let before = s.len();
    for e in &r.experiments {
        out_of_range_notes(s, e);
    }
    if s.len() > before {
        s.push('\n');
    }
}

fn findings_and_not_ok(s: &mut String, r: &RunResults) {
    if !r.findings.is_empty() {
        w(s, "## Findings across experiments\n");
        for f in &r.findings {
            w(s, &format!("- {} *(from {})*", f.text, f.from.join(", ")));
        }
        s.push('\n');
    }

    let not_ok: Vec<_> = r
        .experiments
        .iter()
        .filter(|e| e.status != Status::Ok)
        .collect();
    if !not_ok.is_empty() {
        w(s, "## Skipped, invalid and failed experiments\n");
        for e in &not_ok {
            w(
                s,
                &format!(
                    "- **{}** ({}): {}",
                    e.id,
                    e.status.as_str(),
                    e.reason.as_deref().unwrap_or("no reason recorded")
                ),
            );
        }
        s.push('\n');
    }
}

/// The trust grades: what every experiment shares once, then each grade with its own
/// reasons (nothing for documents without grades).
fn grades(s: &mut String, r: &RunResults) {
    let Some((common, own)) = view::grades(r) else {
        return;
    };
    w(s, "## Trust grades\n");
    w(s, &format!("{}.\n", view::GRADE_LEGEND));
    if !common.is_empty() {
        w(s, "Every experiment:\n");
        for x in &common {
            w(s, &format!("- {} ({})", x.text, x.level.as_str()));
        }
        s.push('\n');
    }
    for (e, reasons) in own {
        let level = e.grade.as_ref().map(|g| g.level.as_str()).unwrap_or("?");
        w(s, &format!("- **{}**: {level}", e.id));
        for x in reasons {
            w(s, &format!("  - {} ({})", x.text, x.level.as_str()));
        }
    }
    s.push('\n');
}

/// One experiment: status, method, metrics, plots, checks, findings, notes.
fn experiment(s: &mut String, e: &ExperimentResult, figs: &[Figure]) {
    w(
        s,
        &format!(
            "### {}: {} ({}, {:.1} s)\n",
            e.id,
            e.title,
            e.status.as_str(),
            e.duration_s
        ),
    );
    if let Some(reason) = &e.reason {
        w(s, &format!("**{}:** {reason}\n", e.status.as_str()));
    }
    if let Some(g) = &e.grade {
        w(s, &format!("**Trust grade {}.**\n", g.level.as_str()));
        for x in &g.reasons {
            w(s, &format!("- {} ({})", x.text, x.level.as_str()));
        }
        if !g.reasons.is_empty() {
            s.push('\n');
        }
    }
    if !e.method.is_empty() {
        w(s, &format!("**Method.** {}\n", e.method));
    }
    experiment_metrics(s, e);
    for f in figs.iter().filter(|f| f.experiment == e.id) {
        w(s, &format!("![{}]({})\n", f.plot.title, f.file));
        if !f.caption.is_empty() {
            w(s, &format!("*{}*\n", f.caption));
        }
    }
    if !e.checks.is_empty() {
        w(s, "**Checks:**\n");
        for c in &e.checks {
            w(
                s,
                &format!(
                    "- {} {} ({}): {}",
                    if c.passed {
                        "passed"
                    } else if c.unverified {
                        "NOT VERIFIED"
                    } else {
                        "FAILED"
                    },
                    c.name,
                    if c.premise { "premise" } else { "sanity" },
                    c.detail
                ),
            );
        }
        s.push('\n');
    }
    if !e.findings.is_empty() {
        w(s, "**Findings:**\n");
        for f in &e.findings {
            w(s, &format!("- {}", f.text));
        }
        s.push('\n');
    }
    if !e.notes.is_empty() {
        w(s, "**Notes:**\n");
        for n in &e.notes {
            w(s, &format!("- {n}"));
        }
        s.push('\n');
    }
}

/// The metric table, then each metric's description, percentiles and prediction.
fn experiment_metrics(s: &mut String, e: &ExperimentResult) {
    if e.metrics.is_empty() {
        return;
    }
    w(
        s,
        "| metric | measured (median) | 95% CI | n | CoV | outliers | core cycles | predicted | meas/pred |",
    );
    w(
        s,
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    );
    for m in &e.metrics {
        let row = metric_row(m);
        w(
            s,
            &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {}{} |",
                cell(&row.metric),
                row.measured,
                row.ci,
                row.n,
                row.cov,
                row.outliers,
                row.cycles,
                row.predicted,
                row.ratio,
                if row.flagged { " **!**" } else { "" }
            ),
        );
    }
    s.push('\n');
    if e.metrics.iter().any(|m| view::out_of_range(m).is_some()) {
        out_of_range_notes(s, e);
        s.push('\n');
    }
    let groups = view::formula_groups(e);
    for (m, g) in e.metrics.iter().zip(&groups) {
        let row = metric_row(m);
        if !row.description.is_empty() || !row.percentiles.is_empty() {
            let sep = if row.description.is_empty() || row.percentiles.is_empty() {
                ""
            } else {
                "; "
            };
            w(
                s,
                &format!(
                    "- `{}`: {}{sep}{}",
                    row.metric, row.description, row.percentiles
                ),
            );
        }
        let first_inputs = |first: &str| {
            e.metrics
                .iter()
                .find(|x| x.name == first)
                .map(|x| metric_row(x).inputs)
        };
        if let Some(first) = g
            .same_as()
            .filter(|f| first_inputs(f).as_ref() == Some(&row.inputs))
        {
            w(
                s,
                &format!("  - prediction {}: as for {first}", row.predicted),
            );
        } else if !row.formula.is_empty() {
            w(
                s,
                &format!(
                    "  - prediction {} = {}{}",
                    row.predicted,
                    row.formula,
                    if row.inputs.is_empty() {
                        String::new()
                    } else {
                        format!("; inputs: {}", row.inputs.join("; "))
                    }
                ),
            );
        }
    }
    s.push('\n');
}
