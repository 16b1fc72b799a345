//! The summary table printed at the end of a run.

use crate::results::{RunResults, Status};
use crate::units::fmt_value;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table};

/// Ratio beyond which a prediction is flagged as off.
pub const FLAG_RATIO: f64 = 2.0;

/// Measured/predicted ratio with a flag when it is beyond 2x either way.
pub fn ratio_text(measured: f64, predicted: f64) -> String {
    if !(measured.is_finite() && predicted.is_finite()) || predicted == 0.0 {
        return "-".into();
    }
    let r = measured / predicted;
    let flag = if !(1.0 / FLAG_RATIO..=FLAG_RATIO).contains(&r) {
        " !"
    } else {
        ""
    };
    format!("{r:.2}{flag}")
}

pub fn render(r: &RunResults, width: Option<u16>) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let get = |p: &str| {
        m.pointer(p)
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string()
    };
    s.push_str(&format!(
        "osmeter {} on {} ({}), profile {}, {:.1} s\n",
        r.tool.version,
        get("/hostname"),
        get("/cpu/model"),
        r.config
            .get("profile")
            .and_then(|v| v.as_str())
            .unwrap_or("?"),
        r.duration_s
    ));
    if let Some(c) = m.get("clock") {
        let hz = c
            .get("frequency_hz")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        let core = m.pointer("/cpu/core_clock_hz").and_then(|v| v.as_f64());
        s.push_str(&format!(
            "clock: {} at {:.1} MHz ({}); effective core clock {}; cycles below are core cycles\n",
            c.get("counter").and_then(|v| v.as_str()).unwrap_or("?"),
            hz / 1e6,
            c.get("frequency_source")
                .and_then(|v| v.as_str())
                .unwrap_or("?"),
            core.map(|h| format!("{:.2} GHz", h / 1e9))
                .unwrap_or_else(|| "unknown".into())
        ));
    }
    for w in &r.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }

    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    if let Some(w) = width {
        t.set_width(w);
    }
    t.set_header(vec![
        "experiment",
        "metric",
        "predicted",
        "measured (median)",
        "95% CI",
        "CoV",
        "cycles",
        "meas/pred",
    ]);
    for e in &r.experiments {
        if e.status != Status::Ok && e.metrics.is_empty() {
            t.add_row(vec![
                Cell::new(&e.id),
                Cell::new(format!(
                    "{}: {}",
                    e.status.as_str(),
                    e.reason.as_deref().unwrap_or("")
                )),
            ]);
            continue;
        }
        for (i, met) in e.metrics.iter().enumerate() {
            let sm = &met.summary;
            let id = if i == 0 {
                if e.status == Status::Ok {
                    e.id.clone()
                } else {
                    format!("{} ({})", e.id, e.status.as_str())
                }
            } else {
                String::new()
            };
            let pred = met.prediction.as_ref().map(|p| p.value);
            t.add_row(vec![
                Cell::new(id),
                Cell::new(&met.name),
                Cell::new(
                    pred.map(|p| fmt_value(p, &met.unit))
                        .unwrap_or_else(|| "-".into()),
                )
                .set_alignment(CellAlignment::Right),
                Cell::new(fmt_value(sm.median, &met.unit)).set_alignment(CellAlignment::Right),
                Cell::new(format!(
                    "{} .. {}",
                    fmt_value(sm.ci95[0], &met.unit),
                    fmt_value(sm.ci95[1], &met.unit)
                )),
                Cell::new(if sm.cov.is_finite() {
                    format!("{:.1}%", sm.cov * 100.0)
                } else {
                    "-".into()
                })
                .set_alignment(CellAlignment::Right),
                Cell::new(
                    met.cycles
                        .as_ref()
                        .and_then(|c| c.core)
                        .map(|c| format!("{c:.1}"))
                        .unwrap_or_default(),
                )
                .set_alignment(CellAlignment::Right),
                Cell::new(
                    pred.map(|p| ratio_text(sm.median, p))
                        .unwrap_or_else(|| "-".into()),
                )
                .set_alignment(CellAlignment::Right),
            ]);
        }
    }
    s.push_str(&t.to_string());
    s.push('\n');
    let invalid: Vec<_> = r
        .experiments
        .iter()
        .filter(|e| e.status != Status::Ok)
        .collect();
    for e in invalid {
        s.push_str(&format!(
            "{} {}: {}\n",
            e.id,
            e.status.as_str(),
            e.reason.as_deref().unwrap_or("")
        ));
    }
    let findings: Vec<_> = r
        .experiments
        .iter()
        .flat_map(|e| e.findings.iter())
        .chain(r.findings.iter())
        .collect();
    if !findings.is_empty() {
        s.push_str("findings:\n");
        for f in findings {
            s.push_str(&format!("  - {}\n", f.text));
        }
    }
    s.push_str("meas/pred: '!' marks a ratio beyond 2x either way; predictions and formulas are in results.json\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_flags() {
        assert_eq!(ratio_text(10.0, 10.0), "1.00");
        assert_eq!(ratio_text(30.0, 10.0), "3.00 !");
        assert_eq!(ratio_text(3.0, 10.0), "0.30 !");
        assert_eq!(ratio_text(3.0, 0.0), "-");
    }
}
