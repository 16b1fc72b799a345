//! `io sweep`: read throughput per block size (doubling from --from to --to), warm and
//! cold, repeated and summarised, as a table and an SVG plot, with the block size beyond
//! which throughput stops improving by more than the noise.
//!
//! Bounded time: each point (block size x cache state x repetition) reads at most
//! --max-bytes (64 MiB) from the start of the file and stops after --point-time (250 ms),
//! so 1-byte blocks do not take forever: the default sweep (19 sizes x 2 states x 3
//! repetitions) is at most ~30 s of reading plus evictions and warm-ups.
//! Repetitions are interleaved (all sizes, then all sizes again) so slow drifts of a
//! shared machine spread over every size instead of biasing some.

use super::read::{evict, read_blocks, DIRECT_ALIGN};
use super::{check_block, open_input, os_err, rate};
use crate::error;
use crate::pagecache::{self, AlignedBuf};
use crate::report::plot::{Bars, Line, Marker, Plot};
use crate::stats::Summary;
use crate::units::fmt_bytes;
use std::io::Seek;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    Cold,
    Warm,
    Both,
}

pub struct SweepConfig {
    pub file: PathBuf,
    pub from: u64,
    pub to: u64,
    pub cache: CacheMode,
    pub repeat: usize,
    pub max_bytes: u64,
    pub point_time: Duration,
    pub plot: Option<PathBuf>,
}

/// Throughput is "no longer improving" when a larger block gains less than the noise
/// (the two points' half-ranges added), and never less than this fraction.
const MIN_NOISE: f64 = 0.05;

#[derive(serde::Serialize, Clone)]
pub struct SweepPoint {
    pub block_bytes: u64,
    /// Throughput per repetition, bytes/s.
    pub bytes_per_s: Vec<f64>,
    pub summary: Summary,
    /// Fewest bytes any repetition read (the time budget may stop small blocks early).
    pub min_bytes_read: u64,
}

#[derive(serde::Serialize, Clone)]
pub struct SweepCurve {
    pub cache: &'static str,
    pub points: Vec<SweepPoint>,
    /// Block size beyond which throughput stops improving by more than the noise.
    pub knee_block_bytes: Option<u64>,
    pub knee_is_last: bool,
    /// Premise checks: cold = pages left cached after each eviction (max), warm = the
    /// smallest cached fraction of the read range seen before a warm pass.
    pub check: String,
    pub premise_ok: bool,
}

pub struct SweepOutcome {
    pub file: PathBuf,
    pub cfg_repeat: usize,
    pub max_bytes: u64,
    pub point_time: Duration,
    pub curves: Vec<SweepCurve>,
    pub plot: PathBuf,
}

/// The smallest block size whose throughput no larger one beats by more than the noise
/// (half the trials' range, at least `MIN_NOISE`): `analysis::knee_index`, the rule the
/// block-size findings use too. Also whether it is the last (still rising) size.
pub fn knee(blocks: &[u64], summaries: &[Summary]) -> Option<(u64, bool)> {
    let ys: Vec<f64> = summaries.iter().map(|s| s.median).collect();
    let half: Vec<f64> = summaries.iter().map(|s| (s.max - s.min) / 2.0).collect();
    crate::analysis::knee_index(&ys, &half, MIN_NOISE).map(|i| (blocks[i], i + 1 == ys.len()))
}

fn default_plot_path(file: &Path) -> PathBuf {
    let stem = file
        .file_name()
        .map(|s| {
            s.to_string_lossy().replace(
                |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.',
                "_",
            )
        })
        .unwrap_or_else(|| "file".into());
    let base = format!("osmeter-sweep-{stem}");
    let mut p = PathBuf::from(format!("{base}.svg"));
    let mut k = 2;
    while p.exists() && k < 1000 {
        p = PathBuf::from(format!("{base}-{k}.svg"));
        k += 1;
    }
    p
}

pub fn run(cfg: &SweepConfig) -> error::Result<SweepOutcome> {
    if cfg.from > cfg.to {
        return super::usage(format!(
            "--from {} is larger than --to {}",
            cfg.from, cfg.to
        ));
    }
    check_block(cfg.to)?;
    if !(3..=1000).contains(&cfg.repeat) {
        return super::usage("--repeat must be between 3 and 1000 (a spread needs three)");
    }
    let path = cfg.file.as_path();
    let (mut file, size) = open_input(path, 0)?;
    if size == 0 {
        return super::usage(format!("{}: the file is empty", path.display()));
    }
    let plot_path = plot_path(cfg.plot.as_deref(), path)?;
    let blocks = crate::units::doublings(cfg.from, cfg.to);
    let modes: Vec<bool> = match cfg.cache {
        CacheMode::Warm => vec![true],
        CacheMode::Cold => vec![false],
        CacheMode::Both => vec![true, false],
    };
    let m = measure(cfg, &mut file, size, &blocks, &modes)?;
    let curves = modes
        .iter()
        .enumerate()
        .map(|(mi, &warm)| m.curve(mi, warm, &blocks))
        .collect::<Vec<_>>();
    let svg = plot(path, &curves, cfg.repeat).to_svg();
    std::fs::write(&plot_path, svg).map_err(|e| os_err(&plot_path, "cannot write the plot", e))?;
    Ok(SweepOutcome {
        file: path.to_path_buf(),
        cfg_repeat: cfg.repeat,
        max_bytes: cfg.max_bytes,
        point_time: cfg.point_time,
        curves,
        plot: plot_path,
    })
}

/// --plot checked (not a folder, its folder exists), or a new default name.
fn plot_path(requested: Option<&Path>, file: &Path) -> error::Result<PathBuf> {
    let plot = match requested {
        Some(p) if p.is_dir() => {
            return super::usage(format!("--plot {}: is a directory", p.display()))
        }
        Some(p) => p.to_path_buf(),
        None => default_plot_path(file),
    };
    if let Some(parent) = plot.parent() {
        if !parent.as_os_str().is_empty() && !parent.is_dir() {
            return super::usage(format!(
                "--plot {}: folder {} does not exist",
                plot.display(),
                parent.display()
            ));
        }
    }
    Ok(plot)
}

/// Every repetition's throughput per cache state and block size, with the premise data.
struct SweepSample {
    /// values[mode][block] = throughput per repetition.
    values: Vec<Vec<Vec<f64>>>,
    /// Fewest bytes a repetition read, per mode and block.
    least: Vec<Vec<u64>>,
    warm_min_fraction: f64,
    cold_max_left: u64,
    cold_total: u64,
}

fn measure(
    cfg: &SweepConfig,
    file: &mut std::fs::File,
    size: u64,
    blocks: &[u64],
    modes: &[bool],
) -> error::Result<SweepSample> {
    let path = cfg.file.as_path();
    let span = cfg.max_bytes.min(size);
    let mut buf = AlignedBuf::new(cfg.to as usize, DIRECT_ALIGN)
        .map_err(|e| super::Error::runtime(format!("buffer: {e}")))?;
    let mut m = SweepSample {
        values: vec![vec![Vec::new(); blocks.len()]; modes.len()],
        least: vec![vec![u64::MAX; blocks.len()]; modes.len()],
        warm_min_fraction: 1.0,
        cold_max_left: 0,
        cold_total: 0,
    };
    for _rep in 0..cfg.repeat {
        for (mi, &warm) in modes.iter().enumerate() {
            if warm {
                let f = prime(file, path, span)?;
                m.warm_min_fraction = m.warm_min_fraction.min(f);
            }
            for (bi, &block) in blocks.iter().enumerate() {
                if !warm {
                    let e = evict(file, path)?;
                    m.cold_max_left = m.cold_max_left.max(e.resident_pages);
                    m.cold_total = e.total_pages;
                }
                file.rewind().map_err(|e| os_err(path, "seek", e))?;
                let count = span.div_ceil(block);
                let (bytes, _, secs) = read_blocks(
                    file,
                    path,
                    &mut buf[..block as usize],
                    count,
                    Some(cfg.point_time),
                )?;
                m.values[mi][bi].push(rate(bytes, secs));
                m.least[mi][bi] = m.least[mi][bi].min(bytes);
            }
        }
    }
    Ok(m)
}

/// Brings the first `span` bytes into the cache; returns the cached fraction after.
fn prime(file: &mut std::fs::File, path: &Path, span: u64) -> error::Result<f64> {
    file.rewind().map_err(|e| os_err(path, "seek", e))?;
    let pb = 1usize << 20;
    let mut prime = vec![0u8; pb];
    read_blocks(file, path, &mut prime, span.div_ceil(pb as u64), None)?;
    let (r, t) = pagecache::residency_range(file, 0, span)
        .map_err(|e| super::Error::runtime(format!("mincore: {e:#}")))?;
    Ok(if t > 0 { r as f64 / t as f64 } else { 1.0 })
}

impl SweepSample {
    /// One cache state's summarised curve, its knee and its premise check.
    fn curve(&self, mi: usize, warm: bool, blocks: &[u64]) -> SweepCurve {
        let points: Vec<SweepPoint> = blocks
            .iter()
            .enumerate()
            .filter_map(|(bi, &block)| {
                Some(SweepPoint {
                    block_bytes: block,
                    summary: Summary::of(&self.values[mi][bi])?,
                    bytes_per_s: self.values[mi][bi].clone(),
                    min_bytes_read: self.least[mi][bi],
                })
            })
            .collect();
        let sums: Vec<Summary> = points.iter().map(|p| p.summary.clone()).collect();
        let k = knee(blocks, &sums);
        let (check, premise_ok) = if warm {
            (
                format!(
                    "before each warm pass at least {:.1}% of the read range was cached (mincore)",
                    self.warm_min_fraction * 100.0
                ),
                self.warm_min_fraction >= 0.99,
            )
        } else {
            (
                format!(
                    "after each eviction at most {} of {} pages were still cached (mincore)",
                    self.cold_max_left, self.cold_total
                ),
                self.cold_max_left == 0,
            )
        };
        SweepCurve {
            cache: if warm { "warm" } else { "cold" },
            points,
            knee_block_bytes: k.map(|x| x.0),
            knee_is_last: k.map(|x| x.1).unwrap_or(false),
            check,
            premise_ok,
        }
    }
}

/// Short block-size label: 1, 512, 4K, 1M.
fn short_size(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{}M", b >> 20)
    } else if b >= 1024 && b % 1024 == 0 {
        format!("{}K", b >> 10)
    } else {
        b.to_string()
    }
}

/// Median throughput per block size on log/log axes, min-max bars, one line per cache
/// state and a dashed marker at each knee (drawn by report::plot like the run's figures).
pub fn plot(file: &Path, curves: &[SweepCurve], repeat: usize) -> Plot {
    let lines = curves
        .iter()
        .map(|c| Line {
            name: c.cache.to_string(),
            points: c
                .points
                .iter()
                .map(|p| (p.block_bytes as f64, p.summary.median))
                .collect(),
            dashed: false,
        })
        .collect();
    let bars = curves
        .iter()
        .enumerate()
        .map(|(i, c)| Bars {
            line: i,
            points: c
                .points
                .iter()
                .map(|p| (p.block_bytes as f64, p.summary.min, p.summary.max))
                .collect(),
        })
        .collect();
    let x_markers = curves
        .iter()
        .filter_map(|c| {
            c.knee_block_bytes.map(|k| Marker {
                at: k as f64,
                label: format!("{} knee {}", c.cache, short_size(k)),
            })
        })
        .collect();
    Plot {
        title: format!(
            "osmeter io sweep: read() throughput vs block size — {}",
            file.display()
        ),
        x_label: "block size".into(),
        x_unit: "bytes".into(),
        y_label: "throughput".into(),
        y_unit: "bytes/s".into(),
        log_x: true,
        log_y: true,
        lines,
        bars,
        x_markers,
        notes: vec![
            format!("median of {repeat}, bars min-max"),
            "dashed: knee".into(),
        ],
        ..Default::default()
    }
}

impl SweepOutcome {
    pub fn print(&self, json: bool) {
        if json {
            super::print_json(&serde_json::json!({
                "command": "sweep",
                "file": self.file.display().to_string(),
                "repeat": self.cfg_repeat,
                "max_bytes_per_point": self.max_bytes,
                "point_time_ns": self.point_time.as_nanos() as f64,
                "curves": self.curves,
                "plot": self.plot.display().to_string(),
            }));
            return;
        }
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        let mut header = vec!["block".to_string()];
        for c in &self.curves {
            header.push(format!("{} MiB/s median [min-max]", c.cache));
            header.push(format!("{} bytes read", c.cache));
        }
        t.set_header(header);
        let n = self.curves.first().map(|c| c.points.len()).unwrap_or(0);
        for i in 0..n {
            let mut row = vec![fmt_bytes(self.curves[0].points[i].block_bytes as f64)];
            for c in &self.curves {
                let s = &c.points[i].summary;
                let m = 1048576.0;
                row.push(format!(
                    "{:.1} [{:.1}-{:.1}]",
                    s.median / m,
                    s.min / m,
                    s.max / m
                ));
                row.push(fmt_bytes(c.points[i].min_bytes_read as f64));
            }
            t.add_row(row);
        }
        println!("{t}");
        println!(
            "each point: median of {} repetitions, each reading at most {} from the start of the file or for at most {:?}",
            self.cfg_repeat,
            fmt_bytes(self.max_bytes as f64),
            self.point_time
        );
        for c in &self.curves {
            let status = if c.premise_ok { "ok" } else { "NOT MET" };
            println!("{}: premise {status}: {}", c.cache, c.check);
            match (c.knee_block_bytes, c.knee_is_last) {
                (Some(k), false) => println!(
                    "{}: throughput stops improving by more than the noise beyond {} ({:.1} MiB/s)",
                    c.cache,
                    fmt_bytes(k as f64),
                    c.points
                        .iter()
                        .find(|p| p.block_bytes == k)
                        .map(|p| p.summary.median / 1048576.0)
                        .unwrap_or(f64::NAN)
                ),
                _ => println!(
                    "{}: throughput still improves at the largest block size tried",
                    c.cache
                ),
            }
        }
        println!("plot: {}", self.plot.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(m: f64, spread: f64) -> Summary {
        Summary::of(&[m - spread, m, m + spread]).unwrap()
    }

    #[test]
    fn knee_where_gains_stop() {
        let b = [1, 2, 4, 8, 16];
        let v = [
            s(10.0, 0.1),
            s(20.0, 0.1),
            s(40.0, 0.5),
            s(41.0, 0.5),
            s(40.5, 0.5),
        ];
        assert_eq!(knee(&b, &v), Some((4, false)));
        let rising = [
            s(1.0, 0.0),
            s(2.0, 0.0),
            s(4.0, 0.0),
            s(8.0, 0.0),
            s(16.0, 0.0),
        ];
        assert_eq!(knee(&b, &rising), Some((16, true)));
    }

    #[test]
    fn labels() {
        assert_eq!(short_size(1), "1");
        assert_eq!(short_size(4096), "4K");
        assert_eq!(short_size(1 << 20), "1M");
    }

    #[test]
    fn plot_has_a_line_bars_and_knee_per_curve() {
        let point = |b: u64, m: f64| SweepPoint {
            block_bytes: b,
            bytes_per_s: vec![m * 0.9, m, m * 1.1],
            summary: s(m, m * 0.1),
            min_bytes_read: 1 << 20,
        };
        let curve = |cache, knee| SweepCurve {
            cache,
            points: vec![point(512, 1e8), point(4096, 1e9), point(8192, 1e9)],
            knee_block_bytes: knee,
            knee_is_last: false,
            check: String::new(),
            premise_ok: true,
        };
        let curves = [curve("warm", Some(4096)), curve("cold", None)];
        let p = plot(Path::new("a<b"), &curves, 3);
        assert_eq!(p.lines.len(), 2);
        assert_eq!(p.bars.len(), 2);
        assert_eq!(p.bars[1].points[0], (512.0, 0.9e8, 1.1e8));
        assert_eq!(p.x_markers.len(), 1);
        assert_eq!(p.x_markers[0].label, "warm knee 4K");
        let svg = p.to_svg();
        assert!(svg.contains("a&lt;b") && svg.contains("block size (bytes, log scale)"));
    }
}
