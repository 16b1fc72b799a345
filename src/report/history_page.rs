//! The fleet's history page (`osmeter history changes --html FILE`): per host, machine
//! and profile, each metric's recorded medians in run order with the change points the
//! detector found marked (a red line before the first run at the new level, the level
//! of each segment drawn as its median), with the first and last run's time under it
//! and, where `history::why` annotated them, the conditions that changed with each
//! change beside it (`osmeter watch` writes this page every pass). Self-contained like the fleet page: the same
//! styles, inline SVG, no script.

use super::fleet::CSS;
use super::plot::esc;
use crate::history::changes::SeriesChanges;
use crate::units::fmt_value;
use std::fmt::Write;

/// One series as a small SVG: points, segment medians, change markers.
fn sparkline(s: &SeriesChanges) -> String {
    const W: f64 = 360.0;
    const H: f64 = 60.0;
    const PAD: f64 = 6.0;
    let v: Vec<f64> = s.series.points.iter().map(|p| p.value).collect();
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let span = if hi > lo {
        hi - lo
    } else {
        hi.abs().max(1e-300)
    };
    let n = v.len();
    let x = |i: f64| PAD + if n > 1 { i / (n - 1) as f64 } else { 0.5 } * (W - 2.0 * PAD);
    let y = |val: f64| H - PAD - (val - lo) / span * (H - 2.0 * PAD);
    let mut out = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img"><title>{} runs, {} to {}; red lines: change points</title><rect x="0" y="0" width="{W}" height="{H}" fill="#fafafa" stroke="#ddd"/>"##,
        n,
        esc(&fmt_value(lo, &s.series.unit)),
        esc(&fmt_value(hi, &s.series.unit)),
    );
    // Segment levels between changes.
    let mut bounds = vec![0];
    bounds.extend(s.changes.iter().map(|c| c.position - 1));
    bounds.push(n);
    for w in bounds.windows(2) {
        if w[1] > w[0] {
            let m = crate::stats::median(&v[w[0]..w[1]]);
            let _ = write!(
                out,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1565c0" stroke-opacity="0.5" stroke-width="2"/>"##,
                x(w[0] as f64),
                y(m),
                x((w[1] - 1) as f64),
                y(m)
            );
        }
    }
    for c in &s.changes {
        let cx = x(c.position as f64 - 1.5);
        let _ = write!(
            out,
            r##"<line class="change" data-run="{}" x1="{cx:.1}" y1="2" x2="{cx:.1}" y2="{}" stroke="#c62828" stroke-dasharray="3 2"><title>{}</title></line>"##,
            c.run,
            H - 2.0,
            esc(c.why.as_deref().unwrap_or(&c.started_at))
        );
    }
    let pts: Vec<String> = v
        .iter()
        .enumerate()
        .map(|(i, &val)| format!("{:.1},{:.1}", x(i as f64), y(val)))
        .collect();
    let _ = write!(
        out,
        r##"<polyline points="{}" fill="none" stroke="#888" stroke-width="1"/>"##,
        pts.join(" ")
    );
    for (i, &val) in v.iter().enumerate() {
        let _ = write!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="#333"><title>run {}: {}</title></circle>"##,
            x(i as f64),
            y(val),
            s.series.points[i].run,
            esc(&fmt_value(val, &s.series.unit))
        );
    }
    out.push_str("</svg>");
    out
}

/// The page. `method` names the detector and its settings (the lead sentence).
pub fn render(all: &[SeriesChanges], method: &str) -> String {
    let changed = all.iter().filter(|s| !s.changes.is_empty()).count();
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>osmeter history: change points</title><style>{CSS}</style></head><body>
<h1>osmeter history: change points</h1>
<p class="lead">{n} series, {changed} with a change of level. {method}</p>
"#,
        n = all.len(),
        method = esc(method),
    );
    h.push_str(&tables(all));
    h.push_str("<footer class=\"muted\"><p>Made by osmeter (history changes, watch). No script, no external resources.</p></footer></body></html>\n");
    h
}

/// One table per host, machine and profile, one row per metric with its plot.
pub fn tables(all: &[SeriesChanges]) -> String {
    let mut h = String::new();
    let mut group = None;
    for s in all {
        let g = (&s.series.host, &s.series.fingerprint, &s.series.profile);
        if group != Some(g) {
            if group.is_some() {
                h.push_str("</table>");
            }
            let _ = write!(
                h,
                "<h2>{} <span class=\"muted\">machine {} ({}), profile {}</span></h2><table><tr><th>experiment</th><th>metric</th><th>runs</th><th>history (oldest left)</th><th>changes</th></tr>",
                esc(&s.series.host),
                esc(&s.series.fingerprint),
                esc(&s.series.machine),
                esc(&s.series.profile)
            );
            group = Some(g);
        }
        let changes: Vec<String> = s
            .changes
            .iter()
            .map(|c| {
                let conditions = if c.why.is_none() {
                    String::new()
                } else if c.conditions.is_empty() {
                    "<br><span class=\"muted\">no condition seen to change with it</span>".to_string()
                } else {
                    let v: Vec<String> = c.conditions.iter().map(|k| esc(&k.text)).collect();
                    format!("<br><span class=\"condition\">with {}</span>", v.join(", "))
                };
                format!(
                    "run {} (#{}, {}): {} &rarr; {}, {:+.1}% [{:+.1}%, {:+.1}%], p = {:.3}{conditions}",
                    c.run,
                    c.position,
                    esc(&c.started_at),
                    esc(&fmt_value(c.before, &s.series.unit)),
                    esc(&fmt_value(c.after, &s.series.unit)),
                    100.0 * c.rel,
                    100.0 * c.rel_ci95[0],
                    100.0 * c.rel_ci95[1],
                    c.p
                )
            })
            .collect();
        let span =
            |p: Option<&crate::history::SeriesPoint>| esc(p.map_or("", |p| p.started_at.as_str()));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}<br><span class=\"muted\">{} &ndash; {}</span></td><td>{}</td></tr>",
            esc(&s.series.experiment),
            esc(&s.series.metric),
            s.series.points.len(),
            sparkline(s),
            span(s.series.points.first()),
            span(s.series.points.last()),
            if changes.is_empty() {
                "<span class=\"muted\">none</span>".to_string()
            } else {
                changes.join("<br>")
            }
        );
    }
    if group.is_some() {
        h.push_str("</table>");
    }
    h
}

/// The section the fleet page (`compare --html`) gets for the compared hosts' history.
pub fn fleet_section(all: &[SeriesChanges], method: &str) -> String {
    if all.is_empty() {
        return String::new();
    }
    let changed = all.iter().filter(|s| !s.changes.is_empty()).count();
    format!(
        "<h2 id=\"history\">History</h2><p class=\"lead\">The recorded runs of these hosts (osmeter history): {} series, {changed} with a change of level (red lines). {}</p>{}",
        all.len(),
        esc(method),
        tables(all)
    )
}
