//! The summary printed at the end of a run, fitted to the terminal's width: the table,
//! then skip and invalid reasons, then the findings that matter most. The long forms
//! (both bandwidth units, every finding) are in report.md and report.html.

use crate::results::{RunResults, Status};
use crate::units::fmt_value;
use comfy_table::Table;

/// Width used when neither COLUMNS nor a terminal on stdout gives one (pipes, logs).
pub(crate) const DEFAULT_WIDTH: u16 = 100;
/// Narrower than this, the table cannot be laid out legibly; it is allowed to overflow.
const MIN_WIDTH: u16 = 40;
/// Findings shown on the terminal; the rest are in the report.
pub(crate) const MAX_FINDINGS: usize = 12;

/// COLUMNS when set (as `ls` does), else the width of the terminal on stdout, else 100.
pub(crate) fn terminal_width() -> u16 {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|w| *w > 0)
        .or_else(|| Table::new().width())
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// Words of `text` in lines of at most `width` columns, the first after `first`, the rest
/// after `indent`; a word longer than a line gets a line of its own.
pub(crate) fn wrap(text: &str, width: usize, first: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for w in text.split_whitespace() {
        let len = line.chars().count();
        if !empty && len + 1 + w.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = indent.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(w);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// A value for a table cell: one unit only (the report carries GiB/s beside GB/s).
fn cell_value(v: f64, unit: &str) -> String {
    if unit == "bytes/s" && v.is_finite() {
        format!("{:.2} GB/s", v / 1e9)
    } else {
        fmt_value(v, unit)
    }
}

/// A confidence interval with its unit once when both ends share it: "1.23 .. 1.25 ns".
fn interval(ci: [f64; 2], unit: &str) -> String {
    let (lo, hi) = (cell_value(ci[0], unit), cell_value(ci[1], unit));
    match (lo.rsplit_once(' '), hi.rsplit_once(' ')) {
        (Some((l, lu)), Some((h, hu))) if lu == hu => format!("{l} .. {h} {hu}"),
        _ => format!("{lo} .. {hi}"),
    }
}

/// Core cycles: one decimal below 1000, whole numbers above (the digits are noise).
fn cycles_text(c: f64) -> String {
    if c.abs() >= 1000.0 {
        format!("{c:.0}")
    } else {
        format!("{c:.1}")
    }
}

/// Measured/predicted with its flag (`view::judged_ratio`), or "-".
pub(crate) fn ratio_text(m: &crate::results::Metric) -> String {
    match super::view::judged_ratio(m) {
        Some((r, flagged)) => format!("{r:.2}{}", if flagged { " !" } else { "" }),
        None => "-".into(),
    }
}

/// The summary, `width` columns wide at most (None: `terminal_width()`).
pub fn render(r: &RunResults, width: Option<u16>) -> String {
    render_after(r, width, &[])
}

/// The summary without the warnings in `shown`, which the run's progress already printed
/// on the same screen (each warning is printed once).
pub fn render_after(r: &RunResults, width: Option<u16>, shown: &[String]) -> String {
    let width = width.unwrap_or_else(terminal_width).max(MIN_WIDTH);
    let wd = width as usize;
    let mut s = header(r, wd, shown);
    s.push_str(&super::network::terminal(r, |t| wrap(t, wd, "", "    ")));
    s.push_str(&metrics_table(r, width));
    s.push('\n');
    s.push_str(&reasons_and_findings(r, wd));
    s.push_str(&wrap(
        &format!(
            "ratio: measured/predicted, '!' {}; predictions and formulas are in results.json",
            super::view::flag_legend(super::view::has_bounds(r))
        ),
        wd,
        "",
        "  ",
    ));
    s
}

/// The run, the host and its clocks, then the run's warnings.
fn header(r: &RunResults, wd: usize, shown: &[String]) -> String {
    let m = &r.machine;
    let mut head = String::new();
    head.push_str(&format!(
        "osmeter {} on {} ({}), profile {}, {:.1} s\n",
        r.tool.version,
        m.hostname,
        m.cpu.model,
        r.config.profile_name(),
        r.duration_s
    ));
    if let Some(b) = r.tool.build_line() {
        head.push_str(&format!("build: {b}\n"));
    }
    if let Some(c) = &m.clock {
        head.push_str(&format!(
            "clock: {} at {:.1} MHz ({}); effective core clock {}; cycles below are core cycles\n",
            c.counter,
            c.frequency_hz / 1e6,
            c.frequency_source,
            if m.cpu.core_kinds.len() > 1 {
                crate::report::view::kind_clocks(&m.cpu.core_kinds)
            } else {
                m.cpu
                    .core_clock_hz
                    .map(|h| format!("{:.2} GHz", h / 1e9))
                    .unwrap_or_else(|| "unknown".into())
            }
        ));
    }
    let mut s = String::new();
    for l in head.lines() {
        s.push_str(&wrap(l, wd, "", "  "));
    }
    let above = r.warnings.iter().filter(|w| shown.contains(w)).count();
    for w in r.warnings.iter().filter(|w| !shown.contains(w)) {
        s.push_str(&wrap(w, wd, "warning: ", "  "));
    }
    if above > 0 {
        s.push_str(&format!(
            "({above} warning{} above, printed during the run)\n",
            if above == 1 { "" } else { "s" }
        ));
    }
    s
}

/// A table row: an experiment or a metric name across the whole width, or a metric's
/// cells (the first blank when its name is on the line above).
enum Row {
    Span(String),
    Cells(Vec<String>),
}

/// Column headers; the first column holds experiments and metric names.
const HEADERS: [&str; 7] = [
    "experiment / metric",
    "predicted",
    "median",
    "95% CI",
    "CoV",
    "cycles",
    "ratio",
];

/// One heading line per experiment, then a row per metric. Nothing is ever wrapped inside
/// a cell: columns are as wide as their widest cell, the first takes what is left, and a
/// metric name longer than that gets a line of its own above its figures. If the figures
/// alone do not fit, the cycles column goes (report.md has it); below that the table
/// overflows rather than break a number.
fn metrics_table(r: &RunResults, width: u16) -> String {
    let wd = width as usize;
    let rows = table_rows(r);
    let (keep, widths) = layout(&rows, wd);
    let first = widths[0];
    let inner: usize = widths.iter().sum::<usize>() + 3 * (widths.len() - 1);
    let rule = |l: &str, m: &str, c: &str, r: &str| {
        let parts: Vec<String> = widths.iter().map(|w| m.repeat(w + 2)).collect();
        format!("{l}{}{r}\n", parts.join(c))
    };
    let line = |cells: &[String], header: bool| {
        let parts: Vec<String> = keep
            .iter()
            .zip(&widths)
            .map(|(&c, &w)| {
                let v = cells.get(c).map(String::as_str).unwrap_or("");
                // Names, headers and intervals read left to right; figures align right.
                if header || c == 0 || c == 3 {
                    format!("{v:<w$}")
                } else {
                    format!("{v:>w$}")
                }
            })
            .collect();
        format!("│ {} │\n", parts.join(" ┆ "))
    };
    let span = |text: &str| format!("│ {text:<inner$} │\n");
    let mut s = rule("┌", "─", "┬", "┐");
    let head: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    if HEADERS[0].len() > first {
        s.push_str(&span(HEADERS[0]));
        let mut rest = head.clone();
        rest[0].clear();
        s.push_str(&line(&rest, true));
    } else {
        s.push_str(&line(&head, true));
    }
    s.push_str(&rule("╞", "═", "╪", "╡"));
    for row in &rows {
        match row {
            Row::Span(t) => s.push_str(&span(t)),
            Row::Cells(c) if c[0].chars().count() > first => {
                s.push_str(&span(&c[0]));
                let mut rest = c.clone();
                rest[0].clear();
                s.push_str(&line(&rest, false));
            }
            Row::Cells(c) => s.push_str(&line(c, false)),
        }
    }
    s.push_str(rule("└", "─", "┴", "┘").trim_end());
    if !keep.contains(&5) {
        s.push('\n');
        s.push_str(
            wrap(
                "(cycles left out at this width; report.md has them)",
                wd,
                "",
                "  ",
            )
            .trim_end(),
        );
    }
    s
}

/// A heading row per experiment, then a row of cells per metric.
fn table_rows(r: &RunResults) -> Vec<Row> {
    let mut rows = Vec::new();
    for e in &r.experiments {
        rows.push(Row::Span(super::view::id_with_grade(
            e,
            if e.status == Status::Ok {
                e.id.clone()
            } else {
                // The reason goes below the table, where it cannot widen a column.
                format!("{} ({})", e.id, e.status.as_str())
            },
        )));
        for met in &e.metrics {
            rows.push(Row::Cells(metric_cells(met)));
        }
    }
    rows
}

/// The columns kept (the cycles go when the figures do not fit in `wd`) and their widths;
/// the first takes what is left.
fn layout(rows: &[Row], wd: usize) -> (Vec<usize>, Vec<usize>) {
    let names = rows.iter().filter_map(|row| match row {
        Row::Cells(c) => Some(c[0].chars().count()),
        Row::Span(_) => None,
    });
    let name_width = names.max().unwrap_or(0);
    let mut keep: Vec<usize> = (0..HEADERS.len()).collect();
    let figures = |keep: &[usize]| -> usize {
        keep[1..]
            .iter()
            .map(|&c| column_width(rows, c) + 3)
            .sum::<usize>()
    };
    // "│ " + name + " ┆ ...figures" + " │"
    if 4 + 2 + figures(&keep) > wd {
        keep.retain(|&c| c != 5);
    }
    let first = wd
        .saturating_sub(4 + figures(&keep))
        .clamp(2, name_width.max(HEADERS[0].len()));
    let mut widths: Vec<usize> = keep.iter().map(|&c| column_width(rows, c)).collect();
    widths[0] = first;
    (keep, widths)
}

/// The widest cell of column `c`, header included.
fn column_width(rows: &[Row], c: usize) -> usize {
    rows.iter()
        .filter_map(|row| match row {
            Row::Cells(cells) => cells.get(c).map(|v| v.chars().count()),
            Row::Span(_) => None,
        })
        .chain([HEADERS[c].len()])
        .max()
        .unwrap_or(0)
}

fn metric_cells(met: &crate::results::Metric) -> Vec<String> {
    let sm = &met.summary;
    let pred = met.prediction.as_ref();
    vec![
        format!("  {}", met.name),
        pred.map(|p| {
            format!(
                "{}{}",
                super::view::bound_mark(p),
                cell_value(p.value, &met.unit)
            )
        })
        .unwrap_or_else(|| "-".into()),
        cell_value(sm.median, &met.unit),
        interval(sm.ci95, &met.unit),
        if sm.cov.is_finite() {
            format!("{:.1}%", sm.cov * 100.0)
        } else {
            "-".into()
        },
        met.cycles
            .as_ref()
            .and_then(|c| c.core)
            .map(cycles_text)
            .unwrap_or_default(),
        ratio_text(met),
    ]
}

/// Why experiments did not run ok, then the most surprising findings.
fn reasons_and_findings(r: &RunResults, wd: usize) -> String {
    let mut s = String::new();
    for e in r.experiments.iter().filter(|e| e.status != Status::Ok) {
        s.push_str(&wrap(
            e.reason.as_deref().unwrap_or("no reason given"),
            wd,
            &format!("{} {}: ", e.id, e.status.as_str()),
            "    ",
        ));
    }
    s.push_str(&grades(r, wd));
    let ranked = crate::findings::ranked(r);
    if !ranked.is_empty() {
        let shown = ranked.len().min(MAX_FINDINGS);
        s.push_str(&if shown < ranked.len() {
            format!(
                "findings ({shown} of {}, most surprising first; all of them in report.html):\n",
                ranked.len()
            )
        } else {
            "findings:\n".to_string()
        });
        for f in &ranked[..shown] {
            s.push_str(&wrap(&f.finding.text, wd, "  - ", "    "));
        }
    }
    s
}

/// The grades below A with their reasons: those every experiment shares once, then each
/// experiment's own (nothing for documents without grades, or when all are A).
fn grades(r: &RunResults, wd: usize) -> String {
    let mut s = String::new();
    let Some((common, own)) = super::view::grades(r) else {
        return s;
    };
    let own: Vec<_> = own.into_iter().filter(|(_, x)| !x.is_empty()).collect();
    if common.is_empty() && own.is_empty() {
        return s;
    }
    s.push_str(&wrap(
        &format!("trust grades ({}):", super::view::GRADE_LEGEND),
        wd,
        "",
        "  ",
    ));
    for x in &common {
        s.push_str(&wrap(
            &x.text,
            wd,
            &format!("  every experiment {}: ", x.level.as_str()),
            "    ",
        ));
    }
    // C reasons one by one; B reasons once per kind, with the experiments they concern.
    let mut kinds: Vec<(&str, Vec<&str>, &str)> = Vec::new();
    for (e, reasons) in &own {
        for x in reasons {
            if x.level == crate::results::GradeLevel::C {
                s.push_str(&wrap(
                    &x.text,
                    wd,
                    &format!("  {} {}: ", e.id, x.level.as_str()),
                    "    ",
                ));
            } else if let Some(k) = kinds.iter_mut().find(|k| k.0 == x.code) {
                if !k.1.contains(&e.id.as_str()) {
                    k.1.push(&e.id);
                }
            } else {
                kinds.push((&x.code, vec![&e.id], &x.text));
            }
        }
    }
    for (_, ids, text) in kinds {
        let first = if ids.len() == 1 {
            format!("  {} B: ", ids[0])
        } else {
            format!("  {} and {} more B: ", ids[0], ids.len() - 1)
        };
        s.push_str(&wrap(text, wd, &first, "    "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Bound, Metric};

    /// A metric of trials around `median` (+-1%) predicted at `p`.
    fn predicted(median: f64, p: f64, bound: Option<Bound>) -> Metric {
        let raw: Vec<f64> = (0..15)
            .map(|i| median * (0.99 + 0.02 * i as f64 / 14.0))
            .collect();
        let mut pred = crate::results::Prediction::new(p, "test");
        pred.bound = bound;
        let mut m = Metric::test_ns("m", raw, None);
        m.prediction = Some(pred);
        m
    }

    #[test]
    fn ratio_flags() {
        let point = |m, p| ratio_text(&predicted(m, p, None));
        assert_eq!(point(10.0, 10.0), "1.00");
        assert_eq!(point(30.0, 10.0), "3.00 !");
        assert_eq!(point(3.0, 10.0), "0.30 !");
        assert_eq!(point(3.0, 0.0), "-");
        // A lower bound: far above it agrees, below it (beyond the interval) does not.
        let lower = |m, p| ratio_text(&predicted(m, p, Some(Bound::Lower)));
        assert_eq!(lower(30.0, 10.0), "3.00");
        assert_eq!(lower(9.0, 10.0), "0.90 !");
        assert_eq!(lower(9.95, 10.0), "0.99", "inside the interval");
        // An upper bound: far below agrees, above does not.
        let upper = |m, p| ratio_text(&predicted(m, p, Some(Bound::Upper)));
        assert_eq!(upper(1.0, 25.0), "0.04");
        assert_eq!(upper(11.0, 10.0), "1.10 !");
        // The cell says which side agrees.
        let cells = metric_cells(&predicted(30.0, 10.0, Some(Bound::Lower)));
        assert!(cells[1].starts_with("≥ "), "{cells:?}");
        assert!(!metric_cells(&predicted(30.0, 10.0, None))[1].starts_with('≥'));
    }
}
