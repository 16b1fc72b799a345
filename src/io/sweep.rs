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
use super::{check_block, open_input, os_err, rate, Res};
use crate::pagecache::{self, AlignedBuf};
use crate::stats::Summary;
use crate::units::fmt_bytes;
use std::fmt::Write as _;
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
pub struct Point {
    pub block_bytes: u64,
    /// Throughput per repetition, bytes/s.
    pub bytes_per_s: Vec<f64>,
    pub summary: Summary,
    /// Fewest bytes any repetition read (the time budget may stop small blocks early).
    pub min_bytes_read: u64,
}

#[derive(serde::Serialize, Clone)]
pub struct Curve {
    pub cache: &'static str,
    pub points: Vec<Point>,
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
    pub curves: Vec<Curve>,
    pub plot: PathBuf,
}

/// The smallest block size whose throughput no larger one beats by more than the noise.
pub fn knee(blocks: &[u64], summaries: &[Summary]) -> Option<(u64, bool)> {
    let n = summaries.len();
    for i in 0..n {
        let (m, h) = (
            summaries[i].median,
            (summaries[i].max - summaries[i].min) / 2.0,
        );
        let flat = (i + 1..n).all(|j| {
            let hj = (summaries[j].max - summaries[j].min) / 2.0;
            summaries[j].median - m <= (h + hj).max(MIN_NOISE * m)
        });
        if flat {
            return Some((blocks[i], i + 1 == n));
        }
    }
    None
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

pub fn run(cfg: &SweepConfig) -> Res<SweepOutcome> {
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
    let plot = match &cfg.plot {
        Some(p) => {
            if p.is_dir() {
                return super::usage(format!("--plot {}: is a directory", p.display()));
            }
            p.clone()
        }
        None => default_plot_path(path),
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
    let mut blocks = Vec::new();
    let mut b = cfg.from;
    while b <= cfg.to {
        blocks.push(b);
        match b.checked_mul(2) {
            Some(n) => b = n,
            None => break,
        }
    }
    let span = cfg.max_bytes.min(size);
    let mut buf = AlignedBuf::new(cfg.to as usize, DIRECT_ALIGN)
        .map_err(|e| super::Error::runtime(format!("buffer: {e}")))?;
    let modes: Vec<bool> = match cfg.cache {
        CacheMode::Warm => vec![true],
        CacheMode::Cold => vec![false],
        CacheMode::Both => vec![true, false],
    };
    // values[mode][block] = throughputs; bytes read per point.
    let mut values = vec![vec![Vec::new(); blocks.len()]; modes.len()];
    let mut least = vec![vec![u64::MAX; blocks.len()]; modes.len()];
    let mut warm_min_fraction = 1.0f64;
    let mut cold_max_left = 0u64;
    let mut cold_total = 0u64;
    for _rep in 0..cfg.repeat {
        for (mi, &warm) in modes.iter().enumerate() {
            if warm {
                // Bring the read range into the cache and check it is there.
                file.rewind().map_err(|e| os_err(path, "seek", e))?;
                let pb = 1usize << 20;
                let mut prime = vec![0u8; pb];
                read_blocks(&file, path, &mut prime, span.div_ceil(pb as u64), None)?;
                let (r, t) = pagecache::residency_range(&file, 0, span)
                    .map_err(|e| super::Error::runtime(format!("mincore: {e:#}")))?;
                if t > 0 {
                    warm_min_fraction = warm_min_fraction.min(r as f64 / t as f64);
                }
            }
            for (bi, &block) in blocks.iter().enumerate() {
                if !warm {
                    let e = evict(&file, path)?;
                    cold_max_left = cold_max_left.max(e.resident_pages);
                    cold_total = e.total_pages;
                }
                file.rewind().map_err(|e| os_err(path, "seek", e))?;
                let count = span.div_ceil(block);
                let (bytes, _, secs) = read_blocks(
                    &file,
                    path,
                    &mut buf[..block as usize],
                    count,
                    Some(cfg.point_time),
                )?;
                values[mi][bi].push(rate(bytes, secs));
                least[mi][bi] = least[mi][bi].min(bytes);
            }
        }
    }
    let mut curves = Vec::new();
    for (mi, &warm) in modes.iter().enumerate() {
        let points: Vec<Point> = blocks
            .iter()
            .enumerate()
            .filter_map(|(bi, &block)| {
                Some(Point {
                    block_bytes: block,
                    summary: Summary::of(&values[mi][bi])?,
                    bytes_per_s: values[mi][bi].clone(),
                    min_bytes_read: least[mi][bi],
                })
            })
            .collect();
        let sums: Vec<Summary> = points.iter().map(|p| p.summary.clone()).collect();
        let k = knee(&blocks, &sums);
        let (check, ok) = if warm {
            (
                format!(
                    "before each warm pass at least {:.1}% of the read range was cached (mincore)",
                    warm_min_fraction * 100.0
                ),
                warm_min_fraction >= 0.99,
            )
        } else {
            (
                format!(
                    "after each eviction at most {cold_max_left} of {cold_total} pages were still cached (mincore)"
                ),
                cold_max_left == 0,
            )
        };
        curves.push(Curve {
            cache: if warm { "warm" } else { "cold" },
            points,
            knee_block_bytes: k.map(|x| x.0),
            knee_is_last: k.map(|x| x.1).unwrap_or(false),
            check,
            premise_ok: ok,
        });
    }
    let svg = render_svg(path, &curves, cfg);
    std::fs::write(&plot, svg).map_err(|e| os_err(&plot, "cannot write the plot", e))?;
    Ok(SweepOutcome {
        file: path.to_path_buf(),
        cfg_repeat: cfg.repeat,
        max_bytes: cfg.max_bytes,
        point_time: cfg.point_time,
        curves,
        plot,
    })
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A log2(x) / log10(y) plot of median throughput with min-max bars, one line per cache
/// state.
pub fn render_svg(file: &Path, curves: &[Curve], cfg: &SweepConfig) -> String {
    let (w, h) = (760.0, 460.0);
    let (l, r, t, b) = (80.0, 130.0, 40.0, 60.0);
    let pw = w - l - r;
    let ph = h - t - b;
    let all: Vec<&Point> = curves.iter().flat_map(|c| c.points.iter()).collect();
    let mb = |v: f64| (v / 1e6).max(1e-3);
    let ymin = all
        .iter()
        .map(|p| mb(p.summary.min))
        .fold(f64::INFINITY, f64::min)
        .log10()
        .floor();
    let ymax = all
        .iter()
        .map(|p| mb(p.summary.max))
        .fold(0.0f64, f64::max)
        .log10()
        .ceil()
        .max(ymin + 1.0);
    let xmin = (cfg.from as f64).log2();
    let xmax = (all.iter().map(|p| p.block_bytes).max().unwrap_or(cfg.to) as f64)
        .log2()
        .max(xmin + 1.0);
    let xp = |bytes: u64| l + ((bytes as f64).log2() - xmin) / (xmax - xmin) * pw;
    let yp = |bps: f64| t + ph - (mb(bps).log10() - ymin) / (ymax - ymin) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">osmeter io sweep: read() throughput vs block size — {}</text>
<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>
"#,
        l + pw / 2.0,
        esc(&file.display().to_string())
    );
    // y grid: decades of MB/s.
    let mut d = ymin as i32;
    while d as f64 <= ymax {
        let y = t + ph - (d as f64 - ymin) / (ymax - ymin) * ph;
        let label = format!("{}", 10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{l}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            l + pw,
            l - 6.0,
            y + 4.0
        );
        d += 1;
    }
    // x ticks: every power of two in range (labels every other one when crowded).
    let mut bsz = cfg.from;
    let mut i = 0;
    let n_ticks = (xmax - xmin) as usize + 1;
    while bsz as f64 <= 2f64.powf(xmax) + 0.5 {
        let x = xp(bsz);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#eee"/>"##,
            t,
            t + ph
        );
        if n_ticks <= 12 || i % 2 == 0 {
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                t + ph + 16.0,
                short_size(bsz)
            );
        }
        i += 1;
        match bsz.checked_mul(2) {
            Some(n) => bsz = n,
            None => break,
        }
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">block size (bytes, log2 scale)</text>
<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">throughput (MB/s = 10^6 B/s, log scale)</text>"#,
        l + pw / 2.0,
        h - 18.0,
        t + ph / 2.0
    );
    for (ci, c) in curves.iter().enumerate() {
        let color = if c.cache == "warm" {
            "#d62728"
        } else {
            "#1f77b4"
        };
        let pts: Vec<String> = c
            .points
            .iter()
            .map(|p| format!("{:.1},{:.1}", xp(p.block_bytes), yp(p.summary.median)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for p in &c.points {
            let x = xp(p.block_bytes);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{color}"/><circle cx="{x:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                yp(p.summary.min),
                yp(p.summary.max),
                yp(p.summary.median)
            );
        }
        if let Some(k) = c.knee_block_bytes {
            let x = xp(k);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{t}" x2="{x:.1}" y2="{}" stroke="{color}" stroke-dasharray="4 3"/>"#,
                t + ph
            );
        }
        let ly = t + 20.0 + ci as f64 * 20.0;
        let lx = l + pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            c.cache
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="10">median of {}, bars min-max</text>
<text x="{}" y="{}" font-size="10">dashed: knee</text>
</svg>"#,
        l + pw + 12.0,
        t + 70.0,
        cfg.repeat,
        l + pw + 12.0,
        t + 84.0
    );
    s
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
}
