//! The predicted-against-measured plot of report.html: one log-log panel per unit (a
//! nanosecond and a byte per second share no axis), the 1:1 line, the band within 2x of
//! it, and one mark per predicted metric: a dot for a point prediction, an arrow for a
//! bound (the prediction says only on which side the figure lies), each labelled on hover
//! by an SVG <title>. Metrics that cannot sit on a log axis are listed under the plot.

use super::plot::{esc, log_tick_label};
use super::view::{self, FLAG_RATIO};
use crate::results::{Bound, RunResults};
use crate::units::fmt_value;
use std::fmt::Write;

/// One predicted metric.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    pub label: String,
    pub unit: String,
    pub predicted: f64,
    pub measured: f64,
    pub bound: Option<Bound>,
    /// The same quantity measured another way, not a model (`Prediction::consistency`).
    pub consistency: bool,
    pub flagged: bool,
}

/// The plot's marks, and the predicted metrics left off it with the reason.
pub(crate) struct PredictionPlot {
    pub points: Vec<Point>,
    pub left_off: Vec<(String, String)>,
}

/// Every metric with a finite prediction: on the plot, or left off with why.
pub(crate) fn collect(r: &RunResults) -> PredictionPlot {
    let (mut points, mut left_off) = (Vec::new(), Vec::new());
    for e in &r.experiments {
        for m in &e.metrics {
            let Some(p) = m.prediction.as_ref().filter(|p| p.value.is_finite()) else {
                continue;
            };
            let label = format!("{} {}", e.id, m.name);
            let med = m.summary.median;
            if let Some(why) = view::out_of_range(m) {
                left_off.push((label, why));
            } else if !(p.value > 0.0 && med.is_finite() && med > 0.0) {
                left_off.push((
                    label,
                    format!(
                        "predicted {} and measured {}: a log axis shows only figures above zero",
                        fmt_value(p.value, &m.unit),
                        fmt_value(med, &m.unit)
                    ),
                ));
            } else {
                points.push(Point {
                    label,
                    unit: m.unit.clone(),
                    predicted: p.value,
                    measured: med,
                    bound: p.bound,
                    consistency: p.consistency,
                    flagged: view::judged_ratio(m).is_some_and(|j| j.1),
                });
            }
        }
    }
    PredictionPlot { points, left_off }
}

const SIDE: f64 = 360.0;
const LEFT: f64 = 78.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 46.0;
const RIGHT: f64 = 34.0;

/// A decade tick: sizes in decimal prefixes (the axis is in powers of ten, where binary
/// prefixes would read 9.31G), everything else as the other plots label it.
fn tick(v: f64, unit: &str) -> String {
    if unit != "bytes" {
        return log_tick_label(v, unit);
    }
    let (d, p) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| v >= *d)
        .unwrap_or((1.0, ""));
    format!("{} {p}B", (v / d).round())
}

/// Decades covering every value, with room around them.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let a = (lo / 1.5).log10().floor();
    let b = (hi * 1.5).log10().ceil();
    (10f64.powf(a), 10f64.powf(b.max(a + 1.0)))
}

/// One panel: the points of one unit.
fn panel(unit: &str, pts: &[&Point]) -> String {
    let (lo, hi) = decades(pts.iter().flat_map(|p| [p.predicted, p.measured]));
    let map = |v: f64| (v.log10() - lo.log10()) / (hi.log10() - lo.log10()) * SIDE;
    let x = |v: f64| LEFT + map(v);
    let y = |v: f64| TOP + SIDE - map(v);
    let (w, h) = (LEFT + SIDE + RIGHT, TOP + SIDE + BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"predplot\" viewBox=\"0 0 {w} {h}\" \
         width=\"{w}\" height=\"{h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" \
         font-size=\"11\"><title>predicted against measured, {}</title>\
         <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#fff\"/>",
        esc(unit)
    );
    // Grid and ticks: one per decade.
    let (a, b) = (lo.log10().round() as i32, hi.log10().round() as i32);
    for k in a..=b {
        let v = 10f64.powi(k);
        let (px, py) = (x(v), y(v));
        let _ = write!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/>\
             <line x1=\"{LEFT}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            TOP + SIDE,
            LEFT + SIDE,
            TOP + SIDE + 15.0,
            esc(&tick(v, unit)),
            LEFT - 5.0,
            py + 4.0,
            esc(&tick(v, unit))
        );
    }
    // The band within 2x of the 1:1 line (clipped to the square), then the line.
    let clip = format!(
        "<clipPath id=\"pp-{}\"><rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{SIDE}\" height=\"{SIDE}\"/></clipPath>",
        esc(&unit.replace(['/', ' '], "-"))
    );
    s.push_str(&clip);
    let _ = write!(
        s,
        "<g clip-path=\"url(#pp-{})\"><polygon class=\"band\" points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"#e3efe3\"><title>within {FLAG_RATIO}x of the prediction</title></polygon>\
         <line class=\"one-to-one\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#2e7d32\" stroke-width=\"1.2\"><title>measured = predicted</title></line></g>",
        esc(&unit.replace(['/', ' '], "-")),
        x(lo / FLAG_RATIO),
        y(lo),
        x(hi / FLAG_RATIO),
        y(hi),
        x(hi * FLAG_RATIO),
        y(hi),
        x(lo * FLAG_RATIO),
        y(lo),
        x(lo),
        y(lo),
        x(hi),
        y(hi)
    );
    let _ = write!(
        s,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{SIDE}\" height=\"{SIDE}\" fill=\"none\" stroke=\"#333\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\">predicted ({})</text>\
         <text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">measured median ({})</text>\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}: {} predicted metric{}</text>",
        LEFT + SIDE / 2.0,
        TOP + SIDE + 36.0,
        esc(unit),
        TOP + SIDE / 2.0,
        esc(unit),
        esc(unit),
        pts.len(),
        if pts.len() == 1 { "" } else { "s" }
    );
    for p in pts {
        s.push_str(&mark(p, x(p.predicted), y(p.measured), unit));
    }
    s.push_str("</svg>");
    s
}

/// One point's mark at (px, py): a dot, or for a bound a bar with an arrow.
fn mark(p: &Point, px: f64, py: f64, unit: &str) -> String {
    let mut s = String::new();
    let colour = if p.flagged { "#c62828" } else { "#0b5cad" };
    let ratio = p.measured / p.predicted;
    let what = match p.bound {
        None if p.consistency => format!(
            "a consistency check: the same quantity measured another way reads {}",
            fmt_value(p.predicted, unit)
        ),
        None => format!("predicted {}", fmt_value(p.predicted, unit)),
        Some(Bound::Lower) => format!(
            "predicted at least {} (a lower bound)",
            fmt_value(p.predicted, unit)
        ),
        Some(Bound::Upper) => format!(
            "predicted at most {} (an upper bound)",
            fmt_value(p.predicted, unit)
        ),
    };
    let title = format!(
        "{}: {what}, measured {} (median), ratio {ratio:.2}{}",
        p.label,
        fmt_value(p.measured, unit),
        if p.flagged { ", flagged" } else { "" }
    );
    match p.bound {
        // A ring, not a dot: nothing was predicted, two readings were compared.
        None if p.consistency => {
            let _ = write!(
                s,
                "<circle class=\"pp-point\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"4.5\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"><title>{}</title></circle>",
                esc(&title)
            );
        }
        None => {
            let _ = write!(
                s,
                "<circle class=\"pp-point\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"4.5\" fill=\"{colour}\" fill-opacity=\"0.8\" stroke=\"#fff\"><title>{}</title></circle>",
                esc(&title)
            );
        }
        Some(b) => {
            // The prediction fixes only where the figure's model stops: a bar at the
            // bound and an arrow towards the side the true prediction lies on (a
            // lower bound on the predicted cost: to the right).
            let dir = if b == Bound::Lower { 1.0 } else { -1.0 };
            let tip = px + dir * 16.0;
            let _ = write!(
                s,
                "<g class=\"pp-bound\" stroke=\"{colour}\" fill=\"{colour}\" stroke-width=\"1.6\"><title>{}</title>\
                 <line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\"/>\
                 <line x1=\"{px:.1}\" y1=\"{py:.1}\" x2=\"{tip:.1}\" y2=\"{py:.1}\"/>\
                 <polygon points=\"{tip:.1},{:.1} {:.1},{py:.1} {tip:.1},{:.1}\" stroke=\"none\"/></g>",
                esc(&title),
                py - 6.0,
                py + 6.0,
                py - 4.0,
                tip + dir * 7.0,
                py + 4.0
            );
        }
    }
    s
}

/// The plot's HTML: a legend, one panel per unit, and what was left off.
pub(crate) fn html(r: &RunResults) -> String {
    let pp = collect(r);
    if pp.points.is_empty() && pp.left_off.is_empty() {
        return String::new();
    }
    let mut units: Vec<&str> = Vec::new();
    for p in &pp.points {
        if !units.contains(&p.unit.as_str()) {
            units.push(&p.unit);
        }
    }
    let mut h = String::new();
    let _ = write!(
        h,
        "<figure class=\"prediction-plot\"><div class=\"panels\">"
    );
    for u in &units {
        let pts: Vec<&Point> = pp.points.iter().filter(|p| p.unit == *u).collect();
        h.push_str(&panel(u, &pts));
    }
    let _ = write!(
        h,
        "</div><figcaption>Predicted (across) against measured median (up), log-log, one panel \
         per unit: {} marks for {} predicted metrics. The green line is measured = predicted; \
         the shaded band is within {FLAG_RATIO}x of it. A dot is a point prediction (red when \
         flagged); a ring is a consistency check (the same quantity measured another way, \
         not a prediction); a bar with an arrow is a bound: the model leaves costs out (arrow right: the \
         prediction is at least the bar) or caps the figure (arrow left). Hover a mark for its \
         metric and figures.",
        pp.points.len(),
        pp.points.len() + pp.left_off.len()
    );
    if !pp.left_off.is_empty() {
        h.push_str(" Not on the plot:</figcaption><ul class=\"left-off\">");
        for (label, why) in &pp.left_off {
            let _ = write!(h, "<li>{}: {}</li>", esc(label), esc(why));
        }
        h.push_str("</ul></figure>\n");
    } else {
        h.push_str("</figcaption></figure>\n");
    }
    h
}
