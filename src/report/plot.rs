//! A small hand-written SVG line plot: linear or log axes, units scaled for people,
//! a legend, vertical and horizontal markers. No ids, no scripts, no external
//! references, so the same text works as a file and inline in HTML.

use std::fmt::Write;

/// Okabe-Ito palette: distinguishable with the common colour-vision deficiencies.
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

#[derive(Debug, Clone, Default)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed and without dots: models and fits rather than measurements.
    pub dashed: bool,
}

#[derive(Debug, Clone)]
pub struct Marker {
    pub at: f64,
    pub label: String,
}

#[derive(Debug, Clone, Default)]
pub struct Plot {
    pub title: String,
    /// What the axis shows ("working-set size"); the unit is appended.
    pub x_label: String,
    pub x_unit: String,
    pub y_label: String,
    pub y_unit: String,
    pub log_x: bool,
    pub log_y: bool,
    pub lines: Vec<Line>,
    /// Vertical lines at x values (cache sizes).
    pub x_markers: Vec<Marker>,
    /// Horizontal lines at y values (a theoretical peak).
    pub y_markers: Vec<Marker>,
    /// Min-max bars of lines (repeated measurements).
    pub bars: Vec<Bars>,
    /// Short notes under the legend.
    pub notes: Vec<String>,
    /// A matrix drawn as a heat map instead of lines (cpu.core-to-core).
    pub heat: Option<Heat>,
}

/// A square matrix of values over labelled rows and columns; cells absent from `cells`
/// were not measured and are drawn grey.
#[derive(Debug, Clone, Default)]
pub struct Heat {
    /// Row and column labels (CPU numbers), in order.
    pub labels: Vec<usize>,
    /// (row label, column label, value) of each measured cell.
    pub cells: Vec<(usize, usize, f64)>,
    /// Unit of the values ("ns").
    pub unit: String,
}

const W: f64 = 760.0;
const H: f64 = 400.0;
const LEFT: f64 = 92.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 52.0;

/// How values of a canonical unit are shown on an axis: divide by `div`, call it `label`.
pub fn display_unit(unit: &str, max_abs: f64) -> (f64, String) {
    let m = if max_abs.is_finite() { max_abs } else { 0.0 };
    match unit {
        "ns" => {
            if m >= 1e9 {
                (1e9, "s".into())
            } else if m >= 1e6 {
                (1e6, "ms".into())
            } else if m >= 1e4 {
                (1e3, "µs".into())
            } else {
                (1.0, "ns".into())
            }
        }
        "bytes" => {
            let k = 1024f64;
            if m >= k.powi(3) * 4.0 {
                (k.powi(3), "GiB".into())
            } else if m >= k.powi(2) * 4.0 {
                (k.powi(2), "MiB".into())
            } else if m >= k * 4.0 {
                (k, "KiB".into())
            } else {
                (1.0, "B".into())
            }
        }
        "bytes/s" => {
            if m >= 1e9 {
                (1e9, "GB/s".into())
            } else if m >= 1e6 {
                (1e6, "MB/s".into())
            } else {
                (1e3, "kB/s".into())
            }
        }
        "bits/s" => {
            if m >= 1e9 {
                (1e9, "Gbit/s".into())
            } else {
                (1e6, "Mbit/s".into())
            }
        }
        "1/s" => (1.0, "per second".into()),
        "Hz" => (1e9, "GHz".into()),
        other => (1.0, other.to_string()),
    }
}

/// A compact label for a log-axis tick of a canonical unit.
pub(crate) fn log_tick_label(v: f64, unit: &str) -> String {
    match unit {
        "bytes" => {
            let units = ["B", "K", "M", "G", "T"];
            let mut x = v;
            let mut i = 0;
            while x >= 1024.0 && i + 1 < units.len() {
                x /= 1024.0;
                i += 1;
            }
            format!("{}{}", trim_num(x), units[i])
        }
        "ns" => crate::units::fmt_ns(v)
            .replace(".00", "")
            .replace(".0 ", " "),
        "bytes/s" | "bits/s" => {
            let u = if unit == "bytes/s" { "B/s" } else { "bit/s" };
            let (d, p) = if v >= 1e9 {
                (1e9, "G")
            } else if v >= 1e6 {
                (1e6, "M")
            } else if v >= 1e3 {
                (1e3, "k")
            } else {
                (1.0, "")
            };
            format!("{} {p}{u}", trim_num(v / d))
        }
        _ => crate::units::fmt_si(v),
    }
}

fn trim_num(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round())
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// "Nice" linear ticks covering [lo, hi]; whole numbers only for counts.
fn linear_ticks(lo: f64, hi: f64, integer: bool) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 7.0)
        .unwrap_or(10.0 * mag);
    if integer {
        step = step.max(1.0).round();
    }
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 20 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// Log ticks: powers of 2 for bytes (thinned to at most ~10), powers of 10 otherwise.
fn log_ticks(lo: f64, hi: f64, unit: &str) -> Vec<f64> {
    let base: f64 = if unit == "bytes" { 2.0 } else { 10.0 };
    let (a, b) = (lo.log(base).floor() as i32, hi.log(base).ceil() as i32);
    let n = (b - a).max(1);
    let mut every = 1;
    while n / every > 10 {
        every += 1;
    }
    // For bytes keep ticks on even powers of 2 when thinning, so they land on 1K, 4K, ...
    if base == 2.0 && every > 1 && every % 2 == 1 {
        every += 1;
    }
    let mut t: Vec<f64> = (a..=b)
        .filter(|e| e.rem_euclid(every) == 0)
        .flat_map(|e| {
            // Few decades: 1-2-5 ticks, so the reader is not left with two labels.
            if base == 10.0 && n <= 4 {
                vec![base.powi(e), 2.0 * base.powi(e), 5.0 * base.powi(e)]
            } else {
                vec![base.powi(e)]
            }
        })
        .filter(|v| *v >= lo * 0.999 && *v <= hi * 1.001)
        .collect();
    t.dedup();
    t
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    p0: f64,
    p1: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.p0 + f * (self.p1 - self.p0)
    }
}

/// Data range of an axis, padded; a log axis ignores values <= 0.
fn range(values: impl Iterator<Item = f64>, log: bool, zero_based: bool) -> Option<(f64, f64)> {
    let v: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    if v.is_empty() {
        return None;
    }
    let mut lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let mut hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if log {
        if hi / lo < 1.5 {
            lo /= 1.5;
            hi *= 1.5;
        }
        // A little room so extreme points do not sit on the frame.
        let pad = (hi / lo).powf(0.03);
        return Some((lo / pad, hi * pad));
    }
    if zero_based && lo > 0.0 {
        lo = 0.0;
    }
    if hi == lo {
        let d = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        lo -= d;
        hi += d;
    }
    let pad = (hi - lo) * 0.05;
    if !(zero_based && lo == 0.0) {
        lo -= pad;
    }
    Some((lo, hi + pad))
}

/// Min-max bars of one line, drawn in its colour: (x, low, high).
#[derive(Debug, Clone, Default)]
pub struct Bars {
    /// Index of the line in `Plot::lines`.
    pub line: usize,
    pub points: Vec<(f64, f64, f64)>,
}

/// Where everything goes: the axes, the plot area's right edge and the axis units.
struct Frame {
    xa: Axis,
    ya: Axis,
    right_edge: f64,
    legend: bool,
    xdiv: f64,
    xname: String,
    ydiv: f64,
    yname: String,
}

impl Plot {
    /// True when there is anything to draw.
    pub fn has_data(&self) -> bool {
        if let Some(h) = &self.heat {
            return h.cells.iter().any(|c| c.2.is_finite());
        }
        self.lines
            .iter()
            .any(|l| l.points.iter().any(|(x, y)| self.drawable(*x, *y)))
    }

    fn drawable(&self, x: f64, y: f64) -> bool {
        x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0)
    }

    pub fn to_svg(&self) -> String {
        if let Some(h) = &self.heat {
            return self.heat_svg(h);
        }
        let f = self.frame();
        let mut s = String::new();
        let _ = write!(
            s,
            r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12"><title>{t}</title><rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/>"##,
            t = esc(&self.title)
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="20" font-size="14" font-weight="bold">{}</text>"#,
            LEFT,
            esc(&self.title)
        );
        self.draw_grid(&mut s, &f);
        self.draw_frame_and_titles(&mut s, &f);
        self.draw_markers(&mut s, &f);
        self.draw_bars(&mut s, &f);
        self.draw_lines(&mut s, &f);
        self.draw_notes(&mut s, &f);
        s.push_str("</svg>");
        s
    }

    /// Axes over the data, the markers and the bars; room on the right for a legend.
    fn frame(&self) -> Frame {
        let legend = self.lines.len() > 1 || !self.notes.is_empty();
        let right_edge = if legend { W - 200.0 } else { W - 24.0 };
        let xs = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .chain(self.x_markers.iter().map(|m| m.at));
        let ys = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .chain(self.y_markers.iter().map(|m| m.at))
            .chain(
                self.bars
                    .iter()
                    .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])),
            );
        let (xlo, xhi) = range(xs, self.log_x, false).unwrap_or((1.0, 10.0));
        let (ylo, yhi) = range(ys, self.log_y, true).unwrap_or((1.0, 10.0));
        let (xdiv, xname) = display_unit(&self.x_unit, xhi.abs().max(xlo.abs()));
        let (ydiv, yname) = display_unit(&self.y_unit, yhi.abs().max(ylo.abs()));
        Frame {
            xa: Axis {
                lo: xlo,
                hi: xhi,
                log: self.log_x,
                p0: LEFT,
                p1: right_edge,
            },
            ya: Axis {
                lo: ylo,
                hi: yhi,
                log: self.log_y,
                p0: H - BOTTOM,
                p1: TOP,
            },
            right_edge,
            legend,
            xdiv,
            xname,
            ydiv,
            yname,
        }
    }

    /// Grid lines with their tick labels.
    fn draw_grid(&self, s: &mut String, f: &Frame) {
        let (xlo, xhi, ylo, yhi) = (f.xa.lo, f.xa.hi, f.ya.lo, f.ya.hi);
        let right_edge = f.right_edge;
        let whole = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter())
            .all(|p| p.0.fract() == 0.0);
        let xt = if self.log_x {
            log_ticks(xlo, xhi, &self.x_unit)
        } else {
            linear_ticks(xlo, xhi, whole)
        };
        for t in &xt {
            let px = f.xa.map(*t);
            let label = if self.log_x {
                log_tick_label(*t, &self.x_unit)
            } else {
                trim_num(t / f.xdiv)
            };
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#e3e3e3"/><text x="{px:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
                H - BOTTOM,
                H - BOTTOM + 16.0,
                esc(&label)
            );
        }
        let yt = if self.log_y {
            log_ticks(ylo, yhi, &self.y_unit)
        } else {
            linear_ticks(ylo, yhi, false)
        };
        for t in &yt {
            let py = f.ya.map(*t);
            let label = if self.log_y {
                log_tick_label(*t, &self.y_unit)
            } else {
                trim_num(t / f.ydiv)
            };
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{right_edge}" y2="{py:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333">{}</text>"##,
                LEFT - 6.0,
                py + 4.0,
                esc(&label)
            );
        }
    }

    /// The plot area's frame and the two axis titles.
    fn draw_frame_and_titles(&self, s: &mut String, f: &Frame) {
        let right_edge = f.right_edge;
        let _ = write!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#555"/>"##,
            right_edge - LEFT,
            H - BOTTOM - TOP
        );
        let xunit_txt = if self.log_x && matches!(self.x_unit.as_str(), "bytes" | "ns") {
            format!("{}, log scale", self.x_unit_human())
        } else if self.log_x {
            format!("{}, log scale", f.xname)
        } else {
            f.xname.clone()
        };
        let yunit_txt = if self.log_y
            && matches!(self.y_unit.as_str(), "bytes" | "ns" | "bytes/s" | "bits/s")
        {
            "log scale".to_string()
        } else if self.log_y {
            format!("{}, log scale", f.yname)
        } else {
            f.yname.clone()
        };
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#000">{}</text>"##,
            (LEFT + right_edge) / 2.0,
            H - 12.0,
            esc(&axis_title(&self.x_label, &xunit_txt))
        );
        let _ = write!(
            s,
            r##"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" fill="#000">{}</text>"##,
            (TOP + H - BOTTOM) / 2.0,
            esc(&axis_title(&self.y_label, &yunit_txt))
        );
    }

    /// Dashed vertical and horizontal markers with their labels.
    fn draw_markers(&self, s: &mut String, f: &Frame) {
        let right_edge = f.right_edge;
        for (i, m) in self.x_markers.iter().enumerate() {
            if !(m.at.is_finite() && (!self.log_x || m.at > 0.0)) {
                continue;
            }
            let px = f.xa.map(m.at);
            let ty = TOP + 14.0 + 14.0 * (i % 3) as f64;
            // Near the right edge the label goes on the left of its line.
            let (tx, anchor) = if px > right_edge - 100.0 {
                (px - 3.0, "end")
            } else {
                (px + 3.0, "start")
            };
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{tx:.1}" y="{ty:.1}" fill="#555" font-size="11" text-anchor="{anchor}">{}</text>"##,
                H - BOTTOM,
                esc(&m.label)
            );
        }
        for m in &self.y_markers {
            if !(m.at.is_finite() && (!self.log_y || m.at > 0.0)) {
                continue;
            }
            let py = f.ya.map(m.at);
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{right_edge}" y2="{py:.1}" stroke="#888" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#555" font-size="11" text-anchor="end">{}</text>"##,
                right_edge - 4.0,
                py - 4.0,
                esc(&m.label)
            );
        }
    }

    /// Vertical min-max bars in their line's colour.
    fn draw_bars(&self, s: &mut String, f: &Frame) {
        for b in &self.bars {
            let color = PALETTE[b.line % PALETTE.len()];
            for &(x, lo, hi) in &b.points {
                if !(self.drawable(x, lo) && self.drawable(x, hi)) {
                    continue;
                }
                let px = f.xa.map(x);
                let _ = write!(
                    s,
                    r#"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.2"/>"#,
                    f.ya.map(lo),
                    f.ya.map(hi)
                );
            }
        }
    }

    /// Each line (dots where they can be told apart) and its legend entry.
    fn draw_lines(&self, s: &mut String, f: &Frame) {
        for (i, l) in self.lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mut pts: Vec<(f64, f64)> = l
                .points
                .iter()
                .copied()
                .filter(|(x, y)| self.drawable(*x, *y))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", f.xa.map(*x), f.ya.map(*y)))
                .collect();
            let dash = if l.dashed {
                r#" stroke-dasharray="7 4""#
            } else {
                ""
            };
            if path.len() > 1 {
                let _ = write!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                    path.join(" ")
                );
            }
            // Dots only where they can still be told apart.
            if !l.dashed && pts.len() <= 200 {
                for p in &path {
                    let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
                    let _ = write!(s, r#"<circle cx="{x}" cy="{y}" r="2.6" fill="{color}"/>"#);
                }
            }
            if f.legend {
                let ly = TOP + 8.0 + 18.0 * i as f64;
                let lx = f.right_edge + 12.0;
                let _ = write!(
                    s,
                    r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2.5"{dash}/><text x="{:.1}" y="{:.1}" fill="#000">{}</text>"##,
                    lx + 22.0,
                    lx + 28.0,
                    ly + 4.0,
                    esc(&shorten(&l.name, 24))
                );
            }
        }
    }

    /// Small notes under the legend ("bars: min-max of 3").
    fn draw_notes(&self, s: &mut String, f: &Frame) {
        let below = TOP + 8.0 + 18.0 * self.lines.len() as f64 + 8.0;
        for (i, n) in self.notes.iter().enumerate() {
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#555" font-size="10">{}</text>"##,
                f.right_edge + 12.0,
                below + 14.0 * i as f64,
                esc(&shorten(n, 34))
            );
        }
    }

    fn x_unit_human(&self) -> String {
        match self.x_unit.as_str() {
            "bytes" => "bytes".into(),
            "ns" => "time".into(),
            u => u.into(),
        }
    }
}

/// Light (low) to dark blue (high): a sequential scale that prints in grey too.
fn heat_colour(t: f64) -> String {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let lo = (0xf7 as f64, 0xfb as f64, 0xff as f64);
    let hi = (0x08 as f64, 0x30 as f64, 0x6b as f64);
    let c = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        c(lo.0, hi.0),
        c(lo.1, hi.1),
        c(lo.2, hi.2)
    )
}

/// Where a heat map's cells go and how its values are coloured and shown.
struct HeatGrid {
    x0: f64,
    y0: f64,
    cell: f64,
    n: usize,
    /// The lowest and highest measured values.
    lo: f64,
    hi: f64,
    /// Values are shown divided by `div`, in `uname`.
    div: f64,
    uname: String,
}

impl HeatGrid {
    fn new(h: &Heat) -> HeatGrid {
        let n = h.labels.len().max(1);
        let area = (H - TOP - BOTTOM).min(W - LEFT - 240.0);
        let (lo, hi) = h
            .cells
            .iter()
            .map(|c| c.2)
            .filter(|v| v.is_finite())
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let (div, uname) = display_unit(&h.unit, hi.abs());
        HeatGrid {
            x0: LEFT,
            y0: TOP + 10.0,
            cell: area / n as f64,
            n,
            lo,
            hi,
            div,
            uname,
        }
    }

    /// A value's place on the colour scale, 0 to 1.
    fn t(&self, v: f64) -> f64 {
        if self.hi > self.lo {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            0.5
        }
    }

    /// The side of the square of cells.
    fn side(&self) -> f64 {
        self.cell * self.n as f64
    }

    /// The row and column labels, at most 16 of each.
    fn draw_labels(&self, s: &mut String, h: &Heat) {
        let (x0, y0, cell) = (self.x0, self.y0, self.cell);
        let label_every = self.n.div_ceil(16).max(1);
        for (i, l) in h.labels.iter().enumerate() {
            if i % label_every != 0 {
                continue;
            }
            let c = cell * (i as f64 + 0.5);
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#333" font-size="10">{l}</text><text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333" font-size="10">{l}</text>"##,
                x0 - 4.0,
                y0 + c + 3.5,
                x0 + c,
                y0 + self.side() + 12.0
            );
        }
    }

    /// The measured cells, each with its value as a tooltip (and as text when it fits).
    fn draw_cells(&self, s: &mut String, h: &Heat) {
        let (x0, y0, cell, div, uname) = (self.x0, self.y0, self.cell, self.div, &self.uname);
        let at = |l: usize| h.labels.iter().position(|&x| x == l);
        for &(r, c, v) in &h.cells {
            let (Some(i), Some(j)) = (at(r), at(c)) else {
                continue;
            };
            if !v.is_finite() {
                continue;
            }
            let _ = write!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{cell:.1}" height="{cell:.1}" fill="{}"><title>CPU {r} - CPU {c}: {} {uname}</title></rect>"##,
                x0 + cell * j as f64,
                y0 + cell * i as f64,
                heat_colour(self.t(v)),
                trim_num(v / div)
            );
            if cell >= 30.0 {
                let _ = write!(
                    s,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="{}">{}</text>"##,
                    x0 + cell * (j as f64 + 0.5),
                    y0 + cell * (i as f64 + 0.5) + 3.5,
                    if self.t(v) > 0.5 { "#fff" } else { "#000" },
                    trim_num((v / div * 10.0).round() / 10.0)
                );
            }
        }
    }

    /// The scale: ten steps from the lowest to the highest value, their values and the
    /// not-measured grey (when anything was measured), then the notes.
    fn draw_scale(&self, s: &mut String, notes: &[String]) {
        let (y0, div, uname) = (self.y0, self.div, &self.uname);
        let sx = self.x0 + self.side() + 30.0;
        for k in 0..10 {
            let _ = write!(
                s,
                r##"<rect x="{sx:.1}" y="{:.1}" width="18" height="16" fill="{}"/>"##,
                y0 + 16.0 * (9 - k) as f64,
                heat_colour(k as f64 / 9.0)
            );
        }
        if self.lo > self.hi {
            return;
        }
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#333" font-size="11">{} {uname}</text><text x="{:.1}" y="{:.1}" fill="#333" font-size="11">{} {uname}</text><rect x="{sx:.1}" y="{:.1}" width="18" height="16" fill="#d9d9d9"/><text x="{:.1}" y="{:.1}" fill="#333" font-size="11">not measured</text>"##,
            sx + 24.0,
            y0 + 12.0,
            trim_num(self.hi / div),
            sx + 24.0,
            y0 + 16.0 * 9.0 + 12.0,
            trim_num(self.lo / div),
            y0 + 16.0 * 11.0,
            sx + 24.0,
            y0 + 16.0 * 11.0 + 12.0
        );
        for (i, note) in notes.iter().enumerate() {
            let _ = write!(
                s,
                r##"<text x="{sx:.1}" y="{:.1}" fill="#555" font-size="10">{}</text>"##,
                y0 + 16.0 * 13.0 + 14.0 * i as f64,
                esc(&shorten(note, 40))
            );
        }
    }
}

impl Plot {
    /// The heat map: rows and columns by label, a colour scale from the lowest to the
    /// highest value, grey where nothing was measured, the notes under the scale.
    fn heat_svg(&self, h: &Heat) -> String {
        let g = HeatGrid::new(h);
        let (x0, y0) = (g.x0, g.y0);
        let mut s = String::new();
        let _ = write!(
            s,
            r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12"><title>{t}</title><rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/><text x="{LEFT}" y="20" font-size="14" font-weight="bold">{t}</text>"##,
            t = esc(&self.title)
        );
        let _ = write!(
            s,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{a:.1}" height="{a:.1}" fill="#d9d9d9"/>"##,
            a = g.side()
        );
        g.draw_labels(&mut s, h);
        g.draw_cells(&mut s, h);
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#333">{}</text><text x="12" y="{:.1}" fill="#333" transform="rotate(-90 12 {:.1})">{}</text>"##,
            x0,
            y0 + g.side() + 28.0,
            esc(&self.x_label),
            y0 + g.side() / 2.0,
            y0 + g.side() / 2.0,
            esc(&self.y_label)
        );
        g.draw_scale(&mut s, &self.notes);
        s.push_str("</svg>");
        s
    }
}

fn axis_title(label: &str, unit: &str) -> String {
    if label.is_empty() {
        unit.to_string()
    } else if unit.is_empty() || label == unit {
        label.to_string()
    } else {
        format!("{label} ({unit})")
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_sane() {
        let t = linear_ticks(0.0, 97.0, false);
        assert_eq!(linear_ticks(0.9, 2.1, true), vec![1.0, 2.0]);
        assert!(t.len() >= 3 && t.len() <= 8, "{t:?}");
        assert_eq!(t[0], 0.0);
        let l = log_ticks(1024.0, 64.0 * 1024.0 * 1024.0, "bytes");
        assert!(l.len() <= 11 && l.len() >= 5, "{l:?}");
        assert_eq!(log_tick_label(4096.0, "bytes"), "4K");
        assert_eq!(log_tick_label(1048576.0, "bytes"), "1M");
    }

    #[test]
    fn svg_is_self_contained_and_escaped() {
        let p = Plot {
            title: "a < b & c".into(),
            x_label: "size".into(),
            x_unit: "bytes".into(),
            y_label: "latency".into(),
            y_unit: "ns".into(),
            log_x: true,
            lines: vec![
                Line {
                    name: "random".into(),
                    points: vec![(1024.0, 1.0), (1e6, 5.0), (1e8, 90.0), (0.0, 3.0)],
                    dashed: false,
                },
                Line {
                    name: "fit".into(),
                    points: vec![(1024.0, 1.0), (1e8, 80.0)],
                    dashed: true,
                },
            ],
            x_markers: vec![Marker {
                at: 32768.0,
                label: "L1d 32 KiB".into(),
            }],
            ..Default::default()
        };
        assert!(p.has_data());
        let s = p.to_svg();
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("a &lt; b &amp; c"));
        assert!(!s.contains("href"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn empty_and_degenerate_plots_do_not_panic() {
        let p = Plot {
            log_x: true,
            log_y: true,
            lines: vec![Line {
                name: "x".into(),
                points: vec![(0.0, 0.0), (f64::NAN, 1.0)],
                dashed: false,
            }],
            ..Default::default()
        };
        assert!(!p.has_data());
        let s = p.to_svg();
        assert!(!s.contains("NaN"));
        let one = Plot {
            lines: vec![Line {
                name: "x".into(),
                points: vec![(2.0, 2.0)],
                dashed: false,
            }],
            ..Default::default()
        };
        assert!(!one.to_svg().contains("NaN"));
    }

    #[test]
    fn bars_widen_the_axis_and_notes_get_a_legend_column() {
        let p = Plot {
            log_x: true,
            log_y: true,
            x_unit: "bytes".into(),
            y_unit: "bytes/s".into(),
            lines: vec![Line {
                name: "warm".into(),
                points: vec![(512.0, 1e8), (4096.0, 1e9)],
                dashed: false,
            }],
            bars: vec![Bars {
                line: 0,
                points: vec![(512.0, 5e7, 2e8), (4096.0, 9e8, 1.1e9), (0.0, 1.0, 2.0)],
            }],
            notes: vec!["median of 3, bars min-max".into()],
            ..Default::default()
        };
        let f = p.frame();
        assert!(f.ya.lo < 5e7 && f.ya.hi > 1.1e9, "{} {}", f.ya.lo, f.ya.hi);
        assert!(
            f.legend,
            "a note needs the legend column even with one line"
        );
        let s = p.to_svg();
        // Two drawable bars in the line's colour; the one at x = 0 on a log axis is dropped.
        assert_eq!(s.matches(r#"stroke-width="1.2""#).count(), 2);
        assert!(s.contains("median of 3, bars min-max"));
        let plain = Plot {
            bars: vec![],
            notes: vec![],
            ..p.clone()
        };
        assert!(
            !plain.frame().legend,
            "one line and no notes: no legend column"
        );
    }
}
