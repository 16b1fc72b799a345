//! Pure analyses of measured data, one per question, shared by the experiments that
//! draw conclusions, the cross-experiment findings and the report's figures, so no
//! question is answered twice with different rules.

use crate::results::{RunResults, Series};

/// A (data or unified) cache from the machine facts.
#[derive(Debug, Clone)]
pub struct CacheFact {
    pub level: u64,
    pub kind: String,
    pub size_bytes: f64,
}

impl CacheFact {
    pub fn label(&self) -> String {
        let k = if self.kind.eq_ignore_ascii_case("data") {
            "d"
        } else {
            ""
        };
        format!("L{}{k}", self.level)
    }
}

/// Data and unified caches listed in `machine.cpu.caches`, by level.
pub fn sysfs_caches(r: &RunResults) -> Vec<CacheFact> {
    let mut v: Vec<CacheFact> = r
        .machine
        .cpu
        .caches
        .iter()
        .filter(|c| !c.kind.eq_ignore_ascii_case("instruction") && c.size_bytes > 0)
        .map(|c| CacheFact {
            level: c.level.into(),
            kind: c.kind.clone(),
            size_bytes: c.size_bytes as f64,
        })
        .collect();
    v.sort_by_key(|c| (c.level, c.size_bytes as u64));
    v.dedup_by(|a, b| a.level == b.level && a.size_bytes == b.size_bytes);
    v
}

/// The smallest x whose y reaches `frac` of the largest y: where growing x stops paying.
pub fn knee(points: &[[f64; 2]], frac: f64) -> Option<([f64; 2], f64)> {
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
    p.iter().find(|q| q[1] >= frac * max).map(|q| (*q, max))
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
        let (k, max) = knee(&pts, 0.9).unwrap();
        assert_eq!(k[0], 64.0);
        assert_eq!(max, 6400.0);
        assert!(knee(&[], 0.9).is_none());
    }
}
