//! The fleet page: `osmeter compare --html FILE` over several hosts' results. One column
//! per host, the baseline's (first run's) figures, every other host's figure with its
//! ratio to the baseline and the significant differences marked (by compare's rule, not
//! one of its own), and, where the runs measured their network against each other (the
//! playbook's ring), a host-by-peer matrix per network metric. Self-contained like
//! report.html: inline styles and SVG, no script, a Content-Security-Policy forbidding
//! every fetch.

use super::plot::esc;
use crate::compare::{ComparedMetric, Comparison};
use crate::results::{RunResults, Status};
use crate::units::fmt_value;
use std::fmt::Write;

pub(super) const CSS: &str = r#"
body { font: 14px/1.4 "DejaVu Sans", Helvetica, Arial, sans-serif; color: #1b1b1b; margin: 0 auto; max-width: 1400px; padding: 16px 24px 48px; }
h1 { font-size: 24px; margin: 6px 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px; border-bottom: 2px solid #333; }
p.lead, .muted { color: #555; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 14px; }
th, td { border: 1px solid #d0d0d0; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f5f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.sig { background: #fde2e1; font-weight: bold; }
td.sig .r { color: #a40000; }
td.na { color: #999; text-align: center; }
td.self { background: #eee; }
.r { color: #555; font-size: 12px; }
.st { font-size: 11px; color: #c77700; }
tr.exp-start td { border-top: 2px solid #999; }
svg { vertical-align: middle; }
@media print { body { max-width: none; padding: 0; } td.sig { background: none; text-decoration: underline; } }
"#;

/// Ratio plot: 0.5x .. 2x on a log axis, one dot per host, red when significant.
fn ratio_svg(ratios: &[Option<f64>], sig: &[bool]) -> String {
    const W: f64 = 150.0;
    const H: f64 = 16.0;
    let x = |r: f64| (r.log2().clamp(-1.0, 1.0) + 1.0) / 2.0 * (W - 8.0) + 4.0;
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img"><title>ratios to the baseline, 0.5x to 2x, log scale</title><line x1="4" y1="8" x2="{}" y2="8" stroke="#ccc"/><line x1="{m}" y1="2" x2="{m}" y2="14" stroke="#888"/>"##,
        W - 4.0,
        m = x(1.0)
    );
    for (i, r) in ratios.iter().enumerate().skip(1) {
        if let Some(r) = r.filter(|r| r.is_finite() && *r > 0.0) {
            let _ = write!(
                s,
                r##"<circle cx="{:.1}" cy="8" r="3.5" fill="{}" fill-opacity="0.8"/>"##,
                x(r),
                if sig.get(i).copied().unwrap_or(false) {
                    "#c62828"
                } else {
                    "#555"
                }
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// One network figure of the matrix: the run's median of `experiment`/`metric`.
fn net_value(r: &RunResults, experiment: &str, metric: &str) -> Option<(f64, Status)> {
    let e = r.experiment(experiment)?;
    let m = e.metric(metric)?;
    Some((m.summary.median, e.status))
}

/// The page. `runs` are the compared documents in the comparison's order.
#[cfg(test)]
pub fn render(c: &Comparison, runs: &[(String, RunResults)]) -> String {
    render_with(c, runs, "")
}

/// The page with `extra` (HTML: the hosts' history with its change points) before the footer.
pub fn render_with(c: &Comparison, runs: &[(String, RunResults)], extra: &str) -> String {
    let names: Vec<String> = runs
        .iter()
        .map(|(_, r)| r.host_name().to_string())
        .collect();
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>osmeter fleet: {n} hosts</title><style>{CSS}</style></head><body>
<h1>osmeter fleet: {n} hosts</h1>
<p class="lead">Baseline {base}. Each other host shows its median and, below it, the ratio to the baseline; <b>marked</b> cells differ significantly ({rule}). {sig} of {cmp} compared metrics differ significantly.</p>
"#,
        n = runs.len(),
        base = esc(names.first().map(String::as_str).unwrap_or("-")),
        rule = esc(&c.rule),
        sig = c.significant,
        cmp = c.compared,
    );

    hosts_table(&mut h, c, runs, &names);
    metrics_table(&mut h, c, runs, &names);
    h.push_str(&network_matrix(runs, &names));
    h.push_str(extra);
    h.push_str("<footer class=\"muted\"><p>Made by osmeter compare. No script, no external resources.</p></footer></body></html>\n");
    h
}

/// The hosts: each run's host, start, profile, peer and source.
fn hosts_table(h: &mut String, c: &Comparison, runs: &[(String, RunResults)], names: &[String]) {
    h.push_str("<h2 id=\"hosts\">Hosts</h2><table><tr><th>run</th><th>host</th><th>started (UTC)</th><th>profile</th><th>network peer</th><th>source</th></tr>");
    for (i, ((_, r), info)) in runs.iter().zip(&c.runs).enumerate() {
        let peer = match (r.peer_name(), r.peer_address()) {
            (Some(n), Some(a)) => format!("{} ({})", esc(n), esc(a)),
            (Some(n), _) => esc(n),
            (None, _) => "loopback".into(),
        };
        let _ = write!(
            h,
            "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&info.label),
            if i == 0 { " (baseline)" } else { "" },
            esc(&names[i]),
            esc(&info.started_at),
            esc(&info.profile),
            peer,
            esc(&info.source)
        );
    }
    h.push_str("</table>");
}

/// The metrics: each host's median, its ratio to the baseline and the ratios' sketch.
fn metrics_table(h: &mut String, c: &Comparison, runs: &[(String, RunResults)], names: &[String]) {
    h.push_str("<h2 id=\"metrics\">Metrics</h2><table><tr><th>experiment</th><th>metric</th>");
    for (i, n) in names.iter().enumerate() {
        let _ = write!(
            h,
            "<th>{}: {}{}</th>",
            esc(&c.runs[i].label),
            esc(n),
            if i == 0 { " (baseline)" } else { "" }
        );
    }
    h.push_str("<th>ratios (0.5x to 2x)</th></tr>");
    let mut last = "";
    for m in &c.metrics {
        let start = m.experiment != last;
        let _ = write!(
            h,
            "<tr{}><td>{}</td><td>{}</td>",
            if start { " class=\"exp-start\"" } else { "" },
            if start {
                esc(&m.experiment)
            } else {
                String::new()
            },
            esc(&m.metric)
        );
        last = &m.experiment;
        for i in 0..runs.len() {
            metric_cell(h, m, i);
        }
        let _ = write!(
            h,
            "<td>{}</td></tr>",
            ratio_svg(&m.ratios, &m.significant_vs_baseline)
        );
    }
    h.push_str("</table>");
}

/// Run `i`'s cell of metric `m`: its median, ratio and status, marked when significant.
fn metric_cell(h: &mut String, m: &ComparedMetric, i: usize) {
    let Some(v) = &m.values[i] else {
        h.push_str("<td class=\"na\">-</td>");
        return;
    };
    let status = if v.status == Status::Ok {
        String::new()
    } else {
        format!("<br><span class=\"st\">{}</span>", v.status.as_str())
    };
    let sig = m.significant_vs_baseline.get(i).copied().unwrap_or(false);
    let ratio = match (i, m.ratios[i]) {
        (0, _) | (_, None) => String::new(),
        (_, Some(r)) => format!(
            "<br><span class=\"r\">{r:.3}x{}</span>",
            if sig { " *" } else { "" }
        ),
    };
    let _ = write!(
        h,
        "<td class=\"num{}\" title=\"CI95 {} .. {}, n = {}\">{}{ratio}{status}</td>",
        if sig { " sig" } else { "" },
        esc(&fmt_value(v.ci95[0], &m.unit)),
        esc(&fmt_value(v.ci95[1], &m.unit)),
        v.n,
        esc(&fmt_value(v.median, &m.unit)),
    );
}

/// Host-to-peer matrices, one per network metric, from the runs that measured against a
/// named peer. Empty when no run did.
fn network_matrix(runs: &[(String, RunResults)], names: &[String]) -> String {
    let paired: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].1.peer_name().is_some())
        .collect();
    if paired.is_empty() {
        return String::new();
    }
    // Columns: the compared hosts, then any peer that is not one of them.
    let mut cols: Vec<String> = names.to_vec();
    for &i in &paired {
        let p = runs[i].1.peer_name().unwrap_or_default().to_string();
        if !cols.contains(&p) {
            cols.push(p);
        }
    }
    // Every net.* metric any paired run has, in first-seen order.
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for &i in &paired {
        for e in runs[i]
            .1
            .experiments
            .iter()
            .filter(|e| e.id.starts_with("net."))
        {
            // The peer's figures only: the unprefixed ones are each host's loopback.
            for m in e.metrics.iter().filter(|m| m.name.starts_with("remote_")) {
                let k = (e.id.clone(), m.name.clone(), m.unit.clone());
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
    }
    let mut h = String::from(
        "<h2 id=\"network\">Network between hosts</h2><p class=\"muted\">Row: the host that ran the experiment; column: the peer it measured against (<code>config.peer</code> in its results). Each host measured one peer, the next host of the ring.</p>",
    );
    for (exp, metric, unit) in &keys {
        let _ = write!(
            h,
            "<h3>{} / {}</h3><table class=\"matrix\"><tr><th>from \\ to</th>",
            esc(exp),
            esc(metric)
        );
        for c in &cols {
            let _ = write!(h, "<th>{}</th>", esc(c));
        }
        h.push_str("</tr>");
        for &i in &paired {
            let r = &runs[i].1;
            let _ = write!(h, "<tr><th>{}</th>", esc(&names[i]));
            for c in &cols {
                if c == &names[i] {
                    h.push_str("<td class=\"self\"></td>");
                } else if Some(c.as_str()) == r.peer_name() {
                    match net_value(r, exp, metric) {
                        Some((v, st)) => {
                            let _ = write!(
                                h,
                                "<td class=\"num\">{}{}</td>",
                                esc(&fmt_value(v, unit)),
                                if st == Status::Ok {
                                    String::new()
                                } else {
                                    format!(" <span class=\"st\">{}</span>", st.as_str())
                                }
                            );
                        }
                        None => h.push_str("<td class=\"na\">-</td>"),
                    }
                } else {
                    h.push_str("<td class=\"na\"></td>");
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(host: &str, peer: Option<(&str, &str)>, getppid: f64, rtt: f64) -> RunResults {
        let peer = match peer {
            Some((n, a)) => format!(r#"{{"name":"{n}","address":"{a}"}}"#),
            None => "null".into(),
        };
        let metric = |name: &str, unit: &str, v: f64| {
            format!(
                r#"{{"name":"{name}","unit":"{unit}","summary":{{"n":9,"median":{v},"mean":{v},"stddev":0.1,"min":{v},"max":{v},"ci95":[{lo},{hi}],"cov":0.001,"outliers":0}}}}"#,
                lo = v * 0.99,
                hi = v * 1.01
            )
        };
        crate::results::load::from_str(&format!(
            r#"{{"schema_version":1,"tool":{{"name":"osmeter","version":"0"}},"started_at":"2026-01-01T00:00:00Z","duration_s":1,
               "config":{{"profile":"smoke","options":{{"host_name":"{host}"}},"peer":{peer}}},"machine":{{"hostname":"same"}},
               "experiments":[{{"id":"cpu.syscall","area":"cpu","title":"t","status":"ok","duration_s":1,"metrics":[{}]}},
                              {{"id":"net.rtt","area":"net","title":"t","status":"ok","duration_s":1,"metrics":[{}]}}]}}"#,
            metric("getppid", "ns", getppid),
            metric("remote_tcp", "ns", rtt)
        ))
        .unwrap()
    }

    #[test]
    fn columns_ratios_marks_and_the_matrix() {
        let runs = vec![
            (
                "a".to_string(),
                run("h1", Some(("h2", "10.0.0.2:9197")), 100.0, 50_000.0),
            ),
            (
                "b".to_string(),
                run("h2", Some(("h1", "10.0.0.1:9197")), 200.0, 70_000.0),
            ),
        ];
        let c = crate::compare::compare(&runs, 0.05);
        let page = render(&c, &runs);
        assert!(page.contains("<th>A: h1 (baseline)</th>"));
        assert!(page.contains("<th>B: h2</th>"));
        // getppid doubled: significant, marked, ratio shown.
        assert!(page.contains("2.000x *"), "{page}");
        assert!(page.contains("class=\"num sig\""));
        // The matrix: row h1, column h2 holds h1's round trip against h2.
        assert!(page.contains("Network between hosts"));
        assert!(page.contains("net.rtt / remote_tcp"));
        let row_h1 = page.split("<tr><th>h1</th>").nth(1).unwrap();
        let row_h1 = &row_h1[..row_h1.find("</tr>").unwrap()];
        assert!(row_h1.contains("self"), "{row_h1}");
        assert!(row_h1.contains(&fmt_value(50_000.0, "ns")), "{row_h1}");
        // Self-contained: no external loads, no script.
        assert!(!page.contains("<script"));
        assert!(!page.contains("src=\"http") && !page.contains("href=\"http"));
        assert!(page.contains("<svg"));
    }

    #[test]
    fn no_matrix_without_peers() {
        let runs = vec![
            ("a".to_string(), run("h1", None, 100.0, 1.0)),
            ("b".to_string(), run("h2", None, 100.0, 1.0)),
        ];
        let page = render(&crate::compare::compare(&runs, 0.05), &runs);
        assert!(!page.contains("Network between hosts"));
        assert!(!page.contains(" sig\""));
    }
}
