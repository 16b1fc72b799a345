//! Which plots a results document gets. Every experiment's series are plotted, grouped
//! by units (same units share a plot, with a legend); some experiments get touches keyed
//! by id that fall back to the generic plot when their data is absent.

use super::plot::{Heat, Line, Marker, Plot};
use crate::analysis::{fit, is_model_series};
use crate::results::{ExperimentResult, RunResults, Series};
use crate::units::fmt_bytes;

/// A plot of one experiment, with the file name it is saved under.
pub struct Figure {
    pub experiment: String,
    pub file: String,
    pub caption: String,
    pub plot: Plot,
}

/// All figures of a run, in experiment order.
pub fn figures(r: &RunResults) -> Vec<Figure> {
    let mut out = Vec::new();
    for e in &r.experiments {
        let mut figs = match e.id.as_str() {
            "net.rtt" | "net.connect" => distribution(e).into_iter().collect(),
            "cpu.core-to-core" => heat_map(e).into_iter().collect(),
            _ => Vec::new(),
        };
        figs.extend(series_plots(r, e));
        out.extend(figs.into_iter().filter(|f| f.plot.has_data()));
    }
    // File names must be unique within the folder.
    let mut seen = std::collections::HashSet::new();
    for f in &mut out {
        let base = f.file.trim_end_matches(".svg").to_string();
        let mut k = 1;
        while !seen.insert(f.file.clone()) {
            k += 1;
            f.file = format!("{base}-{k}.svg");
        }
    }
    out
}

fn slug(s: &str) -> String {
    let mut o: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    while o.contains("--") {
        o = o.replace("--", "-");
    }
    o.trim_matches('-').chars().take(60).collect()
}

/// What a value in this unit is, for axis titles.
fn quantity(unit: &str) -> &str {
    match unit {
        "ns" => "time",
        "bytes" => "size",
        "bytes/s" => "throughput",
        "bits/s" => "throughput",
        "1/s" => "rate",
        "ratio" => "ratio",
        "%" => "share",
        _ => "",
    }
}

fn span(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() < 2 {
        1.0
    } else {
        hi / lo
    }
}

/// Series grouped by (x unit, y unit), in order of first appearance.
fn groups(e: &ExperimentResult) -> Vec<Vec<&Series>> {
    let mut g: Vec<Vec<&Series>> = Vec::new();
    for s in &e.series {
        match g
            .iter_mut()
            .find(|v| v[0].x_unit == s.x_unit && v[0].y_unit == s.y_unit)
        {
            Some(v) => v.push(s),
            None => g.push(vec![s]),
        }
    }
    g
}

fn series_plots(r: &RunResults, e: &ExperimentResult) -> Vec<Figure> {
    let mut out = Vec::new();
    for g in groups(e) {
        if e.id == "cpu.core-to-core" && g.iter().all(|s| s.name.starts_with(MATRIX_ROW)) {
            continue; // drawn as the heat map
        }
        let (xu, yu) = (g[0].x_unit.clone(), g[0].y_unit.clone());
        let mut p = base_plot(&g, &xu, &yu);
        let what = if g.len() == 1 {
            g[0].name.replace('_', " ")
        } else {
            format!(
                "{} vs {}",
                nonempty(&p.y_label, &yu),
                nonempty(&p.x_label, &xu)
            )
        };
        let caption = touches(r, e, &g, &mut p);
        // Several series: the title says what the axes show, after the touches above.
        let what = if g.len() == 1 {
            what
        } else {
            format!(
                "{} vs {}",
                nonempty(&p.y_label, &yu),
                nonempty(&p.x_label, &xu)
            )
        };
        p.title = format!("{}: {what}", e.id);
        out.push(Figure {
            experiment: e.id.clone(),
            file: format!("plot-{}-{}.svg", slug(&e.id), slug(&what)),
            caption,
            plot: p,
        });
    }
    out
}

/// Rows of cpu.core-to-core's matrix: `one_way_from_cpuA`, x the other CPU.
const MATRIX_ROW: &str = "one_way_from_cpu";

/// cpu.core-to-core's matrix as a heat map, with which pairs were measured.
fn heat_map(e: &ExperimentResult) -> Option<Figure> {
    let mut cells = Vec::new();
    for s in e.series.iter().filter(|s| s.name.starts_with(MATRIX_ROW)) {
        let Ok(a) = s.name[MATRIX_ROW.len()..].parse::<usize>() else {
            continue;
        };
        cells.extend(s.points.iter().map(|p| (a, p[0] as usize, p[1])));
    }
    if cells.is_empty() {
        return None;
    }
    let mut labels: Vec<usize> = cells.iter().flat_map(|c| [c.0, c.1]).collect();
    labels.sort_unstable();
    labels.dedup();
    let mut notes: Vec<String> = e
        .notes
        .iter()
        .filter(|n| n.contains("pairs measured"))
        .cloned()
        .collect();
    notes.push("row: the CPU that touched the line first".into());
    Some(Figure {
        experiment: e.id.clone(),
        file: format!("plot-{}-matrix.svg", slug(&e.id)),
        caption: "One-way cache-line latency between CPUs (half a compare-and-swap round trip); grey cells were not measured.".into(),
        plot: Plot {
            title: format!("{}: one-way latency between CPUs", e.id),
            x_label: "second CPU".into(),
            y_label: "first CPU".into(),
            y_unit: "ns".into(),
            notes,
            heat: Some(Heat {
                labels,
                cells,
                unit: "ns".into(),
            }),
            ..Default::default()
        },
    })
}

/// The generic plot of a group of series sharing units.
fn base_plot(g: &[&Series], xu: &str, yu: &str) -> Plot {
    let xs = g.iter().flat_map(|s| s.points.iter().map(|p| p[0]));
    let ys = g.iter().flat_map(|s| s.points.iter().map(|p| p[1]));
    Plot {
        x_label: quantity(xu).to_string(),
        x_unit: xu.to_string(),
        y_label: quantity(yu).to_string(),
        y_unit: yu.to_string(),
        // Log x when x spans more than two decades or is a size (sizes double).
        log_x: xu == "bytes" || span(xs) > 100.0,
        log_y: span(ys) > 100.0,
        lines: g
            .iter()
            .map(|s| Line {
                name: legend_name(&s.name),
                points: s.points.iter().map(|p| (p[0], p[1])).collect(),
                dashed: is_model_series(s),
            })
            .collect(),
        ..Default::default()
    }
}

/// What some experiments add to the generic plot (labels, markers, fits); the caption.
fn touches(r: &RunResults, e: &ExperimentResult, g: &[&Series], p: &mut Plot) -> String {
    let (xu, yu) = (g[0].x_unit.as_str(), g[0].y_unit.as_str());
    match e.id.as_str() {
        "mem.latency" if yu == "ns" && xu == "bytes" => latency_touches(r, g, p),
        "mem.bandwidth" => bandwidth_touches(r, xu, yu, p),
        "mem.loaded-latency" if xu == "bytes/s" => loaded_latency_touches(r, e, yu, p),
        "fs.read" | "fs.remote-read" if xu == "bytes" => {
            p.x_label = "file size".into();
            if yu == "ns" {
                p.y_label = "time per block".into();
            }
            "Per-block read time vs file size: sequential and random, cached and uncached.".into()
        }
        "fs.contention" if xu != "bytes" => contention_touches(g, p),
        id if xu == "bytes"
            && yu == "bytes/s"
            && (id.contains("sweep") || id.contains("block")) =>
        {
            p.x_label = "block size".into();
            "Read throughput vs block size, cold and warm cache.".into()
        }
        _ => String::new(),
    }
}

/// mem.latency's curve: the cache sizes marked.
fn latency_touches(r: &RunResults, g: &[&Series], p: &mut Plot) -> String {
    p.x_label = "working-set size".into();
    p.y_label = "load-to-use latency".into();
    p.log_y = span(g.iter().flat_map(|s| s.points.iter().map(|p| p[1]))) > 20.0;
    let caches = r.machine.data_caches();
    p.x_markers = caches
        .iter()
        .map(|c| Marker {
            at: c.size_bytes as f64,
            label: format!("{} {}", c.label(), fmt_bytes(c.size_bytes as f64)),
        })
        .collect();
    if caches.is_empty() {
        "Latency of a dependent load vs working-set size (no sysfs cache sizes to mark).".into()
    } else {
        "Latency of a dependent load vs working-set size; dashed lines mark the cache sizes sysfs reports.".into()
    }
}

/// mem.bandwidth's: threads on x, the DIMMs' theoretical peak marked.
fn bandwidth_touches(r: &RunResults, xu: &str, yu: &str, p: &mut Plot) -> String {
    if xu.contains("thread") {
        p.x_label = "threads".into();
        p.x_unit = String::new();
        p.log_x = false;
    }
    if yu == "bytes/s" {
        p.log_y = false;
        if let Some(peak) = r
            .machine
            .memory
            .peak_bandwidth_bytes_per_s
            .filter(|v| *v > 0.0)
        {
            p.y_markers.push(Marker {
                at: peak,
                label: "theoretical peak (DIMM facts)".into(),
            });
        }
    }
    "Memory bandwidth; the same work split over more threads.".into()
}

/// mem.loaded-latency's curves against achieved bandwidth, the idle latency and the
/// predicted peak marked.
fn loaded_latency_touches(r: &RunResults, e: &ExperimentResult, yu: &str, p: &mut Plot) -> String {
    p.x_label = "achieved bandwidth".into();
    p.log_x = false;
    p.log_y = false;
    if yu == "ns" {
        p.y_label = "chase latency".into();
        if let Some(m) = e.metric("idle_latency") {
            p.y_markers.push(Marker {
                at: m.summary.median,
                label: "idle".into(),
            });
        }
    } else {
        p.y_label = "misses in flight (Little's law)".into();
    }
    // Two curves: the read-only load and the read/write mix (`mix_` series).
    for l in &mut p.lines {
        l.name = if l.name.starts_with("mix") {
            "2 reads : 1 write".into()
        } else {
            "reads".into()
        };
    }
    // The peak's prediction (mem.bandwidth's read of as many threads as load
    // threads), else mem.bandwidth's all-thread read when it ran.
    let team = e
        .metric("peak_bandwidth")
        .and_then(|m| m.prediction.as_ref())
        .filter(|p| p.value.is_finite() && p.value > 0.0)
        .and_then(|p| {
            let name = p.inputs.keys().next()?;
            Some((p.value, format!("mem.bandwidth {name}")))
        });
    let all = || {
        r.experiments
            .iter()
            .find(|x| x.id == "mem.bandwidth")
            .and_then(|b| {
                b.metrics
                    .iter()
                    .filter(|m| m.name.starts_with("read_") && m.name.ends_with('t'))
                    .filter_map(|m| {
                        let t: usize = m.name[5..m.name.len() - 1].parse().ok()?;
                        Some((t, m.summary.median))
                    })
                    .max_by_key(|x| x.0)
            })
            .map(|(t, bw)| (bw, format!("mem.bandwidth read, {t} threads")))
    };
    if let Some((at, label)) = team.or_else(all) {
        p.x_markers.push(Marker { at, label });
    }
    if yu == "ns" {
        "Latency of a dependent chase while the other cores stream reads, or read two lines and write one (ordinary stores), from idle to unthrottled.".into()
    } else {
        "Misses in flight by Little's law (bandwidth / line x latency) at each load.".into()
    }
}

/// fs.contention's: time per block against readers, with the fitted model when the
/// results carry none.
fn contention_touches(g: &[&Series], p: &mut Plot) -> String {
    p.x_label = "processes reading at once (P)".into();
    p.x_unit = String::new();
    p.log_x = false;
    p.y_label = "time per block".into();
    if !g.iter().any(|s| is_model_series(s)) {
        let one = g.len() == 1;
        for s in g {
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p[0], p[1])).collect();
            // The same fit fs.contention reports as its model.
            if let Some(fit) = fit(&pts) {
                let mut xs: Vec<f64> = s.points.iter().map(|p| p[0]).collect();
                xs.sort_by(f64::total_cmp);
                p.lines.push(Line {
                    name: if one {
                        "fitted model".into()
                    } else {
                        format!("{} fit", s.name.replace('_', " "))
                    },
                    points: xs.iter().map(|x| (*x, fit.eval(*x))).collect(),
                    dashed: true,
                });
            }
        }
    }
    "Per-block read time with P processes reading at once; dashed: the fitted (piecewise) linear model.".into()
}

/// A series name for a legend: "cached_seq_vs_size" says "cached seq" (the axes say the rest).
fn legend_name(name: &str) -> String {
    let n = match name.find("_vs_") {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    n.replace('_', " ")
}

fn nonempty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() {
        b
    } else {
        a
    }
}

/// Cumulative distributions of an experiment's distribution metrics (raw samples when
/// there are enough, else the recorded percentiles).
fn distribution(e: &ExperimentResult) -> Option<Figure> {
    let mut lines = Vec::new();
    for m in e.metrics.iter().filter(|m| m.unit == "ns") {
        let mut raw: Vec<f64> = m.raw.iter().copied().filter(|v| v.is_finite()).collect();
        if raw.len() >= 20 {
            raw.sort_by(f64::total_cmp);
            let n = raw.len();
            // At most ~400 points per curve keeps the SVG small and the page fast.
            let step = n.div_ceil(400).max(1);
            let mut pts: Vec<(f64, f64)> = (0..n)
                .step_by(step)
                .map(|i| (raw[i], 100.0 * (i as f64 + 0.5) / n as f64))
                .collect();
            pts.push((raw[n - 1], 100.0));
            lines.push(Line {
                name: m.name.replace('_', " "),
                points: pts,
                dashed: false,
            });
        } else if let Some(p) = &m.summary.percentiles {
            lines.push(Line {
                name: format!("{} (p50/p90/p99)", m.name.replace('_', " ")),
                points: vec![(p.p50, 50.0), (p.p90, 90.0), (p.p99, 99.0)],
                dashed: false,
            });
        }
    }
    if lines.is_empty() {
        return None;
    }
    let xspan = span(lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)));
    let what = if e.id == "net.rtt" {
        "round-trip time"
    } else {
        "time"
    };
    Some(Figure {
        experiment: e.id.clone(),
        file: format!("plot-{}-distribution.svg", slug(&e.id)),
        caption: format!(
            "Cumulative distribution: the share of samples at or below each {what}; the long tail is to the right."
        ),
        plot: Plot {
            title: format!("{}: distribution of {what}", e.id),
            x_label: what.into(),
            x_unit: "ns".into(),
            y_label: "samples at or below".into(),
            y_unit: "%".into(),
            log_x: xspan > 100.0,
            log_y: false,
            lines,
            ..Default::default()
        },
    })
}
