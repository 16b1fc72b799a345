//! report.html: one self-contained page. Plots are inline SVG, styles are inline, there
//! is no script, and a Content-Security-Policy forbids every fetch, so the page reads
//! the same offline, without JavaScript, and on paper.

use super::figures::Figure;
use super::plot::esc;
use super::view::{self, metric_row};
use crate::results::{ExperimentResult, RunResults, Status};
use std::fmt::Write;

const CSS: &str = r#"
:root { --fg:#1b1b1b; --muted:#555; --line:#d0d0d0; --bg2:#f5f6f8; --flag:#fde2e1; --flagfg:#a40000; }
* { box-sizing: border-box; }
body { font: 15px/1.45 "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--fg); margin: 0 auto; max-width: 1180px; padding: 18px 28px 60px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 21px; margin: 34px 0 10px; border-bottom: 2px solid #333; padding-bottom: 3px; }
h3 { font-size: 18px; margin: 30px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 2px; }
p.lead { color: var(--muted); margin-top: 0; }
nav ol { columns: 3; font-size: 13px; padding-left: 20px; }
a { color: #0b5cad; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; }
dl.facts dt { font-weight: bold; }
dl.facts dd { margin: 0; }
.warn { background: #fff4d6; border-left: 4px solid #e0a800; padding: 8px 12px; margin: 12px 0; }
.warn ul { margin: 4px 0; padding-left: 20px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 8px 0 14px; }
th, td { border: 1px solid var(--line); padding: 3px 7px; vertical-align: top; text-align: left; }
th { background: var(--bg2); }
td.num { text-align: right; white-space: normal; font-variant-numeric: tabular-nums; }
td.formula { color: var(--muted); font-size: 12px; max-width: 360px; }
tr.flag td { background: var(--flag); }
tr.flag td.ratio { color: var(--flagfg); font-weight: bold; }
tr.exp-start td { border-top: 2px solid #999; }
.status { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; font-weight: bold; color: #fff; }
.status.ok { background: #2e7d32; } .status.skipped { background: #757575; }
.status.invalid { background: #c77700; } .status.failed { background: #c62828; }
.reason { background: var(--bg2); border-left: 4px solid #999; padding: 6px 10px; }
ul.checks { list-style: none; padding-left: 0; }
ul.checks li::before { content: "\2713  "; color: #2e7d32; font-weight: bold; }
ul.checks li.fail::before { content: "\2717  "; color: #c62828; }
.from { color: var(--muted); font-size: 12px; }
.pred { font-size: 13px; color: var(--muted); margin: 2px 0 2px 16px; }
figure { margin: 12px 0 18px; break-inside: avoid; page-break-inside: avoid; }
figure svg { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { font-size: 13px; color: var(--muted); }
details { margin: 8px 0; }
details table td:first-child { font-family: monospace; white-space: nowrap; }
figure.prediction-plot .panels { display: flex; flex-wrap: wrap; gap: 10px; }
figure.prediction-plot svg { max-width: 100%; height: auto; border: 1px solid var(--line); }
ul.left-off, p.oor { font-size: 13px; color: var(--muted); }
table.closing td:first-child { white-space: nowrap; }
footer { margin-top: 40px; font-size: 12px; color: var(--muted); }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  nav { display: none; }
  h2, h3 { break-after: avoid; page-break-after: avoid; }
  section.experiment { break-before: auto; }
  table { font-size: 9pt; }
  tr, figure { break-inside: avoid; page-break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
  .status { border: 1px solid #000; color: #000; background: none !important; }
  tr.flag td { background: none; } tr.flag td.ratio { text-decoration: underline; }
}
@page { margin: 14mm; }
"#;

fn anchor(id: &str) -> String {
    format!(
        "exp-{}",
        id.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
    )
}

fn status(s: Status) -> String {
    format!(r#"<span class="status {0}">{0}</span>"#, s.as_str())
}

pub fn render(r: &RunResults, figs: &[Figure]) -> String {
    let mut h = String::with_capacity(256 * 1024);
    head(&mut h, r);
    contents(&mut h, r);
    machine(&mut h, r);
    h.push_str(&super::network::html(r));
    summary(&mut h, r);
    findings_and_not_ok(&mut h, r);
    h.push_str("<h2 id=\"experiments\">Experiments</h2>");
    for e in &r.experiments {
        experiment(&mut h, e, figs);
    }
    closing(&mut h, r);
    footer(&mut h, r);
    h
}

/// The closing table in the course's columns, with its footnotes.
fn closing(h: &mut String, r: &RunResults) {
    let c = view::closing(r);
    if c.rows.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<h2 id=\"closing\">Closing table</h2><p>{}</p><table class=\"closing\"><thead><tr>\
         <th>operation</th><th>base hardware</th><th>software overhead</th><th>predicted</th>\
         <th>measured mean ± SD</th><th>measured median [95% CI]</th></tr></thead><tbody>",
        esc(view::CLOSING_LEGEND)
    );
    for row in &c.rows {
        let mark: String = row
            .notes
            .iter()
            .map(|n| format!(" <sup><a href=\"#closing-note-{n}\">[{n}]</a></sup>"))
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}{mark}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&row.operation),
            esc(&row.hardware),
            esc(&row.software),
            esc(&row.predicted),
            esc(&row.mean_sd),
            esc(&row.median_ci)
        );
    }
    h.push_str("</tbody></table>");
    if !c.notes.is_empty() {
        h.push_str("<ol class=\"from\">");
        for (i, n) in c.notes.iter().enumerate() {
            let _ = write!(h, "<li id=\"closing-note-{}\">{}</li>", i + 1, esc(n));
        }
        h.push_str("</ol>");
    }
    h.push('\n');
}

/// The notes of figures outside their physical range, under a table that marks them.
fn out_of_range_notes(h: &mut String, e: &ExperimentResult) {
    for m in &e.metrics {
        if let Some(why) = view::out_of_range(m) {
            let _ = write!(
                h,
                "<p class=\"oor\"><strong>{} {}</strong>: {}.</p>",
                esc(&e.id),
                esc(&m.name),
                esc(&why)
            );
        }
    }
}

fn head(h: &mut String, r: &RunResults) {
    let title = view::title(r);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{}</title><style>{CSS}</style></head><body>
<h1>{}</h1><p class="lead">{}</p>
"#,
        esc(&title),
        esc(&title),
        esc(&view::run_line(r))
    );
}

fn contents(h: &mut String, r: &RunResults) {
    // Contents.
    h.push_str("<nav><ol><li><a href=\"#machine\">Machine</a></li><li><a href=\"#summary\">Predicted vs measured</a></li>");
    if !r.findings.is_empty() {
        h.push_str("<li><a href=\"#findings\">Findings</a></li>");
    }
    if r.experiments.iter().any(|e| e.status != Status::Ok) {
        h.push_str("<li><a href=\"#not-ok\">Skipped, invalid, failed</a></li>");
    }
    if r.experiments
        .iter()
        .flat_map(|e| &e.metrics)
        .any(|m| m.prediction.is_some())
    {
        h.push_str("<li><a href=\"#closing\">Closing table</a></li>");
    }
    for e in &r.experiments {
        let _ = write!(
            h,
            "<li><a href=\"#{}\">{}</a> {}</li>",
            anchor(&e.id),
            esc(&e.id),
            if e.status == Status::Ok {
                String::new()
            } else {
                format!("({})", e.status.as_str())
            }
        );
    }
    h.push_str("</ol></nav>\n");
}

/// The facts in brief, the run's warnings, then every fact recorded.
fn machine(h: &mut String, r: &RunResults) {
    // Machine.
    h.push_str("<h2 id=\"machine\">Machine</h2><dl class=\"facts\">");
    for (k, v) in view::machine_facts(r) {
        let _ = write!(h, "<dt>{}</dt><dd>{}</dd>", esc(&k), esc(&v));
    }
    h.push_str("</dl>");
    if !r.warnings.is_empty() {
        h.push_str("<div class=\"warn\"><strong>Conditions of this run that may distort figures:</strong><ul>");
        for w in &r.warnings {
            let _ = write!(h, "<li>{}</li>", esc(w));
        }
        h.push_str("</ul></div>");
    }
    h.push_str("<details><summary>Every machine fact recorded</summary><table>");
    for (k, v) in view::machine_listing(&r.machine) {
        let _ = write!(h, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), esc(&v));
    }
    h.push_str("</table></details>\n");
}

/// Predicted vs measured, one row per metric.
fn summary(h: &mut String, r: &RunResults) {
    // Summary.
    // Documents without bound predictions keep their old wording (and render unchanged).
    let flags = if super::view::has_bounds(r) {
        format!(
            "Rows are marked <strong>!</strong> and shaded when the ratio is {}.",
            esc(super::view::flag_legend(true))
        )
    } else {
        "Rows beyond 2x either way are marked <strong>!</strong> and shaded.".into()
    };
    let _ = write!(
        h,
        "<h2 id=\"summary\">Predicted vs measured</h2>\
         <p>Each metric with the prediction stated before measuring (and its formula), the measured \
         median with its 95% confidence interval, and measured/predicted. {flags}</p>\
         <table><thead><tr><th>experiment</th><th>metric</th><th>predicted</th><th>formula</th>\
         <th>measured (median)</th><th>95% CI</th><th>meas/pred</th></tr></thead><tbody>"
    );
    for e in &r.experiments {
        if e.metrics.is_empty() {
            let _ = write!(
                h,
                "<tr class=\"exp-start\"><td><a href=\"#{}\">{}</a></td><td colspan=\"6\">{} {}</td></tr>",
                anchor(&e.id),
                esc(&e.id),
                status(e.status),
                esc(e.reason.as_deref().unwrap_or("no summary metrics; see its plots"))
            );
        }
        let groups = view::formula_groups(e);
        for (i, (m, g)) in e.metrics.iter().zip(&groups).enumerate() {
            let row = metric_row(m);
            let mut cls = Vec::new();
            if i == 0 {
                cls.push("exp-start");
            }
            if row.flagged {
                cls.push("flag");
            }
            let id_cell = if i == 0 {
                format!(
                    "<a href=\"#{}\">{}</a>{}",
                    anchor(&e.id),
                    esc(&view::id_with_grade(e, e.id.clone())),
                    if e.status == Status::Ok {
                        String::new()
                    } else {
                        format!(" {}", status(e.status))
                    }
                )
            } else {
                String::new()
            };
            let _ = write!(
                h,
                "<tr class=\"{}\"><td>{id_cell}</td><td>{}</td><td class=\"num\">{}</td><td class=\"formula\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num ratio\">{}{}</td></tr>",
                cls.join(" "),
                esc(&row.metric),
                esc(&row.predicted),
                esc(&if row.formula.is_empty() {
                    String::new()
                } else {
                    g.cell(&row.formula)
                }),
                esc(&row.measured),
                esc(&row.ci),
                esc(&row.ratio),
                if row.flagged { " !" } else { "" }
            );
        }
    }
    h.push_str("</tbody></table>\n");
    for e in &r.experiments {
        out_of_range_notes(h, e);
    }
    h.push_str(&super::predplot::html(r));
}

fn findings_and_not_ok(h: &mut String, r: &RunResults) {
    if !r.findings.is_empty() {
        h.push_str("<h2 id=\"findings\">Findings across experiments</h2><p>Computed from the measurements above; each names the figures it comes from.</p><ul>");
        for f in &r.findings {
            let _ = write!(
                h,
                "<li>{} <span class=\"from\">(from {})</span></li>",
                esc(&f.text),
                esc(&f.from.join(", "))
            );
        }
        h.push_str("</ul>\n");
    }

    let not_ok: Vec<_> = r
        .experiments
        .iter()
        .filter(|e| e.status != Status::Ok)
        .collect();
    if !not_ok.is_empty() {
        h.push_str("<h2 id=\"not-ok\">Skipped, invalid and failed experiments</h2><table><thead><tr><th>experiment</th><th>status</th><th>reason</th></tr></thead><tbody>");
        for e in not_ok {
            let _ = write!(
                h,
                "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
                anchor(&e.id),
                esc(&e.id),
                status(e.status),
                esc(e.reason.as_deref().unwrap_or("no reason recorded"))
            );
        }
        h.push_str("</tbody></table>\n");
    }
}

/// One experiment: status, method, metrics, plots, checks, findings, notes.
fn experiment(h: &mut String, e: &ExperimentResult, figs: &[Figure]) {
    let _ = write!(
        h,
        "<section class=\"experiment\"><h3 id=\"{}\">{}: {} {}</h3><p class=\"from\">took {:.1} s</p>",
        anchor(&e.id),
        esc(&e.id),
        esc(&e.title),
        status(e.status),
        e.duration_s
    );
    if let Some(reason) = &e.reason {
        let _ = write!(
            h,
            "<p class=\"reason\"><strong>{}:</strong> {}</p>",
            e.status.as_str(),
            esc(reason)
        );
    }
    if let Some(g) = &e.grade {
        let _ = write!(
            h,
            "<div{}><p><strong>Trust grade {}</strong> <span class=\"from\">({})</span></p>",
            if g.level == crate::results::GradeLevel::C {
                " class=\"warn\""
            } else {
                ""
            },
            g.level.as_str(),
            esc(view::GRADE_LEGEND)
        );
        if !g.reasons.is_empty() {
            h.push_str("<ul>");
            for x in &g.reasons {
                let _ = write!(h, "<li>{} ({})</li>", esc(&x.text), x.level.as_str());
            }
            h.push_str("</ul>");
        }
        h.push_str("</div>");
    }
    if !e.method.is_empty() {
        let _ = write!(h, "<p><strong>Method.</strong> {}</p>", esc(&e.method));
    }
    experiment_metrics(h, e);
    for f in figs.iter().filter(|f| f.experiment == e.id) {
        let _ = write!(
            h,
            "<figure>{}<figcaption>{} <a href=\"{}\">{}</a></figcaption></figure>",
            f.plot.to_svg(),
            esc(&f.caption),
            esc(&f.file),
            esc(&f.file)
        );
    }
    experiment_lists(h, e);
    h.push_str("</section>\n");
}

/// The experiment's metric table and its predictions with their inputs.
fn experiment_metrics(h: &mut String, e: &ExperimentResult) {
    if e.metrics.is_empty() {
        return;
    }
    h.push_str("<table><thead><tr><th>metric</th><th>measured (median)</th><th>95% CI</th><th>n</th><th>CoV</th><th>outliers</th><th>core cycles</th><th>predicted</th><th>meas/pred</th></tr></thead><tbody>");
    for m in &e.metrics {
        let row = metric_row(m);
        let mut name = format!("<strong>{}</strong>", esc(&row.metric));
        if !row.description.is_empty() {
            let _ = write!(
                name,
                "<br><span class=\"from\">{}</span>",
                esc(&row.description)
            );
        }
        if !row.percentiles.is_empty() {
            let _ = write!(
                name,
                "<br><span class=\"from\">{}</span>",
                esc(&row.percentiles)
            );
        }
        let _ = write!(
            h,
            "<tr{}><td>{name}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num ratio\">{}{}</td></tr>",
            if row.flagged { " class=\"flag\"" } else { "" },
            esc(&row.measured),
            esc(&row.ci),
            row.n,
            esc(&row.cov),
            row.outliers,
            esc(&row.cycles),
            esc(&row.predicted),
            esc(&row.ratio),
            if row.flagged { " !" } else { "" }
        );
    }
    h.push_str("</tbody></table>");
    out_of_range_notes(h, e);
    let groups = view::formula_groups(e);
    let preds: Vec<_> = e
        .metrics
        .iter()
        .map(metric_row)
        .zip(&groups)
        .filter(|(r, _)| !r.formula.is_empty())
        .collect();
    if !preds.is_empty() {
        h.push_str("<p><strong>Predictions.</strong></p>");
        for (p, g) in preds {
            let first_inputs = g.same_as().and_then(|f| {
                e.metrics
                    .iter()
                    .find(|x| x.name == f)
                    .map(|x| metric_row(x).inputs)
            });
            if let (Some(first), true) = (g.same_as(), first_inputs.as_ref() == Some(&p.inputs)) {
                let _ = write!(
                    h,
                    "<p class=\"pred\"><code>{}</code> predicted {}: as for <code>{}</code></p>",
                    esc(&p.metric),
                    esc(&p.predicted),
                    esc(first)
                );
                continue;
            }
            let _ = write!(
                h,
                "<p class=\"pred\"><code>{}</code> predicted {} = {}{}</p>",
                esc(&p.metric),
                esc(&p.predicted),
                esc(&p.formula),
                if p.inputs.is_empty() {
                    String::new()
                } else {
                    format!("; inputs: {}", esc(&p.inputs.join("; ")))
                }
            );
        }
    }
}

/// Checks, findings and notes, each list only when it has entries.
fn experiment_lists(h: &mut String, e: &ExperimentResult) {
    if !e.checks.is_empty() {
        h.push_str("<p><strong>Checks.</strong></p><ul class=\"checks\">");
        for c in &e.checks {
            let _ = write!(
                h,
                "<li{}><strong>{}</strong> ({}): {}</li>",
                if c.passed {
                    ""
                } else if c.unverified {
                    " class=\"unverified\""
                } else {
                    " class=\"fail\""
                },
                esc(&c.name),
                if c.unverified {
                    "premise, not verified here"
                } else if c.premise {
                    "premise"
                } else {
                    "sanity check"
                },
                esc(&c.detail)
            );
        }
        h.push_str("</ul>");
    }
    if !e.findings.is_empty() {
        h.push_str("<p><strong>Findings.</strong></p><ul>");
        for f in &e.findings {
            let _ = write!(h, "<li>{}</li>", esc(&f.text));
        }
        h.push_str("</ul>");
    }
    if !e.notes.is_empty() {
        h.push_str("<p><strong>Notes.</strong></p><ul>");
        for n in &e.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
}

fn footer(h: &mut String, r: &RunResults) {
    h.push_str("<footer>");
    for (k, v) in view::statistics_rules(r) {
        let _ = write!(h, "<p><strong>{}:</strong> {}</p>", esc(&k), esc(&v));
    }
    let _ = writeln!(
        h,
        "<p>Rendered by osmeter {} from results.json; the numbers, formulas and raw trial values are all in that file.</p></footer></body></html>",
        esc(env!("CARGO_PKG_VERSION"))
    );
}
