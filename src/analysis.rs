//! Pure analyses of measured data, one per question, shared by the experiments that
//! draw conclusions, the cross-experiment findings and the report's figures, so no
//! question is answered twice with different rules.

use crate::results::Series;
use crate::stats::Summary;

/// Where growing the block stops paying: the first point (in x order) that no later point
/// beats by more than the noise, i.e. `y[j] - y[i] <= max(half[i] + half[j], min_rel *
/// y[i])` for every later j. One rule for `io sweep` (half-spreads from each block size's
/// trials) and the block-size findings (series points carry no spread: `min_rel` alone).
/// `ys` must be in increasing x order; `half` the same length or empty (no spread).
pub fn knee_index(ys: &[f64], half: &[f64], min_rel: f64) -> Option<usize> {
    let h = |i: usize| half.get(i).copied().unwrap_or(0.0);
    (0..ys.len())
        .find(|&i| (i + 1..ys.len()).all(|j| ys[j] - ys[i] <= (h(i) + h(j)).max(min_rel * ys[i])))
}

/// The block-size knee of a series (`knee_index` with no spread): the point, and the
/// largest y. At least three finite points.
pub fn knee(points: &[[f64; 2]], min_rel: f64) -> Option<([f64; 2], f64)> {
    let mut p: Vec<[f64; 2]> = points
        .iter()
        .copied()
        .filter(|q| q[0].is_finite() && q[1].is_finite())
        .collect();
    p.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let max = p.iter().map(|q| q[1]).fold(f64::NEG_INFINITY, f64::max);
    if p.len() < 3 || max <= 0.0 {
        return None;
    }
    let ys: Vec<f64> = p.iter().map(|q| q[1]).collect();
    knee_index(&ys, &[], min_rel).map(|i| (p[i], max))
}

/// A fitted model of per-block time vs P: one line, or two joined at a breakpoint
/// where that explains the data much better.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub intercept: f64,
    pub slope: f64,
    /// Where the second segment starts, and its slope.
    pub bend: Option<(f64, f64)>,
    pub sse: f64,
}

impl Model {
    pub fn eval(&self, x: f64) -> f64 {
        let mut y = self.intercept + self.slope * x;
        if let Some((b, s2)) = self.bend {
            if x > b {
                y += (s2 - self.slope) * (x - b);
            }
        }
        y
    }
}

fn sse(points: &[(f64, f64)], f: impl Fn(f64) -> f64) -> f64 {
    points.iter().map(|&(x, y)| (y - f(x)).powi(2)).sum()
}

/// Continuous piecewise-linear fit: every inner x is tried as the breakpoint (least
/// squares on the hinge basis 1, x, max(0, x - b)); the bent model is kept only when it
/// cuts the squared error by more than half and each side has at least 2 points.
pub fn fit(points: &[(f64, f64)]) -> Option<Model> {
    let (a, b) = crate::stats::linear_fit(points)?;
    let line = Model {
        intercept: a,
        slope: b,
        bend: None,
        sse: sse(points, |x| a + b * x),
    };
    let mut best: Option<Model> = None;
    let xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    for &bx in xs.iter() {
        let left = xs.iter().filter(|&&x| x <= bx).count();
        let right = xs.iter().filter(|&&x| x > bx).count();
        if left < 2 || right < 2 {
            continue;
        }
        if let Some(m) = hinge_fit(points, bx) {
            if best.as_ref().map_or(true, |b| m.sse < b.sse) {
                best = Some(m);
            }
        }
    }
    match best {
        Some(m) if m.sse < 0.5 * line.sse => Some(m),
        _ => Some(line),
    }
}

/// Least squares on y = c0 + c1 x + c2 max(0, x - b) via the 3x3 normal equations.
#[allow(clippy::needless_range_loop)]
fn hinge_fit(points: &[(f64, f64)], b: f64) -> Option<Model> {
    let mut m = [[0.0f64; 4]; 3];
    for &(x, y) in points {
        let f = [1.0, x, (x - b).max(0.0)];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] += f[i] * f[j];
            }
            m[i][3] += f[i] * y;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..3 {
        let piv = (col..3).max_by(|&r, &s| m[r][col].abs().total_cmp(&m[s][col].abs()))?;
        if m[piv][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, piv);
        for r in 0..3 {
            if r != col {
                let k = m[r][col] / m[col][col];
                for c in col..4 {
                    m[r][c] -= k * m[col][c];
                }
            }
        }
    }
    let c: Vec<f64> = (0..3).map(|i| m[i][3] / m[i][i]).collect();
    let model = Model {
        intercept: c[0],
        slope: c[1],
        bend: Some((b, c[1] + c[2])),
        sse: 0.0,
    };
    let s = sse(points, |x| model.eval(x));
    Some(Model { sse: s, ..model })
}

/// Series of a contention experiment that are measurements (not the experiment's own model).
pub fn is_model_series(s: &Series) -> bool {
    let n = s.name.to_ascii_lowercase();
    n.contains("model") || n.contains("fit") || n.contains("predict")
}

/// Where one measured quantity lies against another, judged by their 95% confidence
/// intervals: only intervals that do not overlap carry evidence of a difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Separation {
    /// Wholly below the other's interval.
    Below,
    /// The intervals overlap (or one is unknown): the two are within noise.
    Overlap,
    /// Wholly above the other's interval.
    Above,
}

/// `a` against `b` by their 95% confidence intervals.
pub fn separation(a: &Summary, b: &Summary) -> Separation {
    separation_of(a.ci95, b.ci95)
}

/// Interval `a` against interval `b` (e.g. a derived figure's widened interval).
pub fn separation_of(a: [f64; 2], b: [f64; 2]) -> Separation {
    let ([alo, ahi], [blo, bhi]) = (a, b);
    if ![alo, ahi, blo, bhi].iter().all(|v| v.is_finite()) {
        Separation::Overlap
    } else if alo > bhi {
        Separation::Above
    } else if ahi < blo {
        Separation::Below
    } else {
        Separation::Overlap
    }
}

/// A plateau of the random curve: a run of sizes over which latency stays level.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// First and last size on the plateau.
    pub first: u64,
    pub last: u64,
    /// Median latency over the plateau's points.
    pub latency_ns: f64,
    /// Index of the point whose latency is nearest the plateau's (it represents the level).
    pub rep: usize,
    /// Indices of the plateau's first and last points.
    pub span: (usize, usize),
    /// Where the curve crosses half-way (in log latency) to the next level: the capacity
    /// estimate for this level. None for the last level.
    pub transition: Option<u64>,
}

/// A step between neighbouring sizes breaks a plateau when latency changes by more than
/// this factor per quarter doubling (scaled for other spacings).
const STEP_PER_QUARTER: f64 = 1.10;
/// Neighbouring plateaus closer than this ratio are one level (real cache levels differ by
/// 2.5x or more; noise, TLB reach and sharing make steps of up to 60% inside one level).
const MERGE_RATIO: f64 = 2.0;
/// Plateaus of a latency curve, in size order, on log latency against log size:
/// 1. smooth log latency with a running median of three (one noisy point cannot split);
/// 2. cut the curve where a step changes latency by more than 10% per quarter doubling;
/// 3. keep runs of at least `min_points` points (shorter runs are transitions), and always
///    the run at the largest size;
/// 4. merge neighbouring plateaus within 2x of each other, and any plateau not above the
///    one before it (latency cannot fall as the working set grows);
/// 5. between neighbours, the transition size is where the curve crosses the geometric
///    mean of the two levels (interpolated in log-log).
pub fn detect_levels(points: &[(u64, f64)], min_points: usize) -> Vec<Level> {
    let n = points.len();
    if n == 0 {
        return vec![];
    }
    let y: Vec<f64> = points.iter().map(|p| p.1.max(1e-3).ln()).collect();
    let ys: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 || i + 1 == n {
                y[i]
            } else {
                crate::stats::median(&[y[i - 1], y[i], y[i + 1]])
            }
        })
        .collect();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    for i in 0..n - 1 {
        let doublings = (points[i + 1].0 as f64 / points[i].0 as f64)
            .log2()
            .max(0.05);
        let limit = STEP_PER_QUARTER.ln() * (doublings * 4.0).max(1.0);
        if (ys[i + 1] - ys[i]).abs() > limit {
            runs.push((start, i));
            start = i + 1;
        }
    }
    runs.push((start, n - 1));
    let level_of = |a: usize, b: usize| crate::stats::median(&ys[a..=b]).exp();
    let last_run = runs.len() - 1;
    let kept = runs
        .iter()
        .enumerate()
        .filter(|(k, &(a, b))| b - a + 1 >= min_points || *k == last_run)
        .map(|(_, &r)| r);
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for r in kept {
        if let Some(prev) = merged.last_mut() {
            let (l0, l1) = (level_of(prev.0, prev.1), level_of(r.0, r.1));
            if l1 / l0 < MERGE_RATIO {
                prev.1 = r.1;
                continue;
            }
        }
        merged.push(r);
    }
    let mut levels: Vec<Level> = merged
        .iter()
        .map(|&(a, b)| {
            let lat = level_of(a, b);
            let rep = (a..=b)
                .min_by(|&i, &j| (y[i] - lat.ln()).abs().total_cmp(&(y[j] - lat.ln()).abs()))
                .unwrap_or(a);
            Level {
                first: points[a].0,
                last: points[b].0,
                latency_ns: lat,
                rep,
                span: (a, b),
                transition: None,
            }
        })
        .collect();
    for k in 0..levels.len().saturating_sub(1) {
        let target = (levels[k].latency_ns * levels[k + 1].latency_ns)
            .sqrt()
            .ln();
        let (from, to) = (levels[k].span.1, levels[k + 1].span.0);
        levels[k].transition = (from..to).find_map(|i| {
            (ys[i] <= target && ys[i + 1] > target).then(|| {
                let (x0, x1) = ((points[i].0 as f64).ln(), (points[i + 1].0 as f64).ln());
                let f = (target - ys[i]) / (ys[i + 1] - ys[i]);
                (x0 + f * (x1 - x0)).exp().round() as u64
            })
        });
        if levels[k].transition.is_none() {
            // No crossing found (an abrupt step): the boundary between the two plateaus.
            levels[k].transition =
                Some(((points[from].0 as f64) * (points[to].0 as f64)).sqrt() as u64);
        }
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knee_finds_the_flat_part() {
        let pts: Vec<[f64; 2]> = (0..12)
            .map(|i| {
                let x = 2f64.powi(i);
                [x, (x * 100.0).min(64.0 * 100.0)]
            })
            .collect();
        let (k, max) = knee(&pts, 0.1).unwrap();
        assert_eq!(k[0], 64.0);
        assert_eq!(max, 6400.0);
        assert!(knee(&[], 0.1).is_none());
    }

    #[test]
    fn knee_index_weighs_gains_against_noise() {
        let ys = [100.0, 180.0, 200.0, 204.0, 206.0];
        // 200 -> 206 is within 5%: the knee is the third point.
        assert_eq!(knee_index(&ys, &[], 0.05), Some(2));
        // Wide spreads make the gain from 180 to 206 noise.
        assert_eq!(knee_index(&ys, &[15.0; 5], 0.05), Some(1));
        // Still rising at the end: the knee is the last point.
        assert_eq!(knee_index(&[1.0, 2.0, 4.0], &[], 0.05), Some(2));
        assert_eq!(knee_index(&[], &[], 0.05), None);
    }

    fn summary(lo: f64, hi: f64) -> Summary {
        let mut s = Summary::of(&[lo, hi]).unwrap();
        s.ci95 = [lo, hi];
        s
    }

    #[test]
    fn separation_needs_disjoint_intervals() {
        let (a, b) = (summary(10.0, 12.0), summary(12.5, 14.0));
        assert_eq!(separation(&a, &b), Separation::Below);
        assert_eq!(separation(&b, &a), Separation::Above);
        let c = summary(11.0, 13.0);
        assert_eq!(separation(&a, &c), Separation::Overlap);
        assert_eq!(separation(&c, &b), Separation::Overlap);
        assert_eq!(separation(&summary(f64::NAN, 1.0), &b), Separation::Overlap);
    }
}
