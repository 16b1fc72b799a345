//! Summaries of trial values: the figures SPEC section 2 asks for, with a stated robust
//! outlier rule and a distribution-free confidence interval for the median.

use serde::{Deserialize, Serialize};

/// Outliers are values farther than this many scaled MADs from the median.
pub const OUTLIER_K: f64 = 3.5;
/// The outlier rule in words, recorded in every results file.
pub const OUTLIER_RULE: &str =
    "|x - median| > 3.5 x 1.4826 x MAD (MAD = median absolute deviation); counted, never dropped";
/// How the confidence interval is obtained, recorded in every results file.
pub const CI_METHOD: &str = "95% CI of the median from order statistics (binomial, normal approximation: ranks n/2 -+ 0.98 sqrt(n)); [min, max] when n < 6";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
    pub ci95: [f64; 2],
    /// Coefficient of variation: stddev / mean.
    pub cov: f64,
    pub outliers: usize,
    /// Percentiles where the metric is a distribution (latencies): p50, p90, p99.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentiles: Option<Percentiles>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

/// Median of a sorted slice.
fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Linear-interpolated quantile of a sorted slice, q in [0, 1].
pub fn quantile_sorted(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

pub fn median(values: &[f64]) -> f64 {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        f64::NAN
    } else {
        median_sorted(&s)
    }
}

/// Median absolute deviation (unscaled).
pub fn mad(values: &[f64]) -> f64 {
    let m = median(values);
    let dev: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    median(&dev)
}

/// Indices of values the robust rule calls outliers.
pub fn outlier_mask(values: &[f64]) -> Vec<bool> {
    let m = median(values);
    let mut scaled = 1.4826 * mad(values);
    if scaled == 0.0 && !values.is_empty() {
        // More than half the values are equal: fall back to the mean absolute deviation.
        scaled = 1.2533 * values.iter().map(|v| (v - m).abs()).sum::<f64>() / values.len() as f64;
    }
    values
        .iter()
        .map(|v| scaled > 0.0 && (v - m).abs() > OUTLIER_K * scaled)
        .collect()
}

impl Summary {
    /// Summarises finite values; None when there are none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let mut s: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let stddev = var.sqrt();
        let median = median_sorted(&s);
        let ci95 = if n < 6 {
            [s[0], s[n - 1]]
        } else {
            // Ranks of the order statistics bracketing the median with ~95% coverage.
            let half = 0.98 * (n as f64).sqrt();
            let lo = ((n as f64 / 2.0 - half).floor() as isize).max(1) as usize;
            let hi = ((n as f64 / 2.0 + half).ceil() as usize + 1).min(n);
            [s[lo - 1], s[hi - 1]]
        };
        let outliers = outlier_mask(&s).iter().filter(|&&o| o).count();
        Some(Summary {
            n,
            median,
            mean,
            stddev,
            min: s[0],
            max: s[n - 1],
            ci95,
            cov: if mean != 0.0 {
                stddev / mean.abs()
            } else {
                0.0
            },
            outliers,
            percentiles: None,
        })
    }

    /// As `of`, with p50/p90/p99 for distributions.
    pub fn with_percentiles(values: &[f64]) -> Option<Summary> {
        let mut sum = Summary::of(values)?;
        let mut s: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        sum.percentiles = Some(Percentiles {
            p50: quantile_sorted(&s, 0.5),
            p90: quantile_sorted(&s, 0.9),
            p99: quantile_sorted(&s, 0.99),
        });
        Some(sum)
    }

    /// The same summary with every value transformed by a monotonic increasing map
    /// (unit conversions, subtracting a constant).
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Summary {
        let scale_sd = f(self.mean + self.stddev) - f(self.mean);
        Summary {
            n: self.n,
            median: f(self.median),
            mean: f(self.mean),
            stddev: scale_sd.abs(),
            min: f(self.min),
            max: f(self.max),
            ci95: [f(self.ci95[0]), f(self.ci95[1])],
            cov: if f(self.mean) != 0.0 {
                scale_sd.abs() / f(self.mean).abs()
            } else {
                0.0
            },
            outliers: self.outliers,
            percentiles: self.percentiles.as_ref().map(|p| Percentiles {
                p50: f(p.p50),
                p90: f(p.p90),
                p99: f(p.p99),
            }),
        }
    }

    /// Whether two medians' confidence intervals overlap (a conservative "same" test).
    pub fn overlaps(&self, other: &Summary) -> bool {
        self.ci95[0] <= other.ci95[1] && other.ci95[0] <= self.ci95[1]
    }
}

/// Least-squares line y = a + b x; returns (a, b).
pub fn linear_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn summary_of_known_values() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(s.n, 5);
        assert_eq!(s.median, 3.0);
        assert_eq!(s.mean, 3.0);
        assert!((s.stddev - 2.5f64.sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max), (1.0, 5.0));
        assert_eq!(s.ci95, [1.0, 5.0]);
        assert_eq!(s.outliers, 0);
    }

    #[test]
    fn outliers_are_counted_not_dropped() {
        let mut v = vec![10.0; 20];
        v.extend([10.5, 9.5, 10.2, 9.8, 1000.0]);
        let s = Summary::of(&v).unwrap();
        assert_eq!(s.outliers, 1);
        assert_eq!(s.n, 25);
        assert_eq!(s.max, 1000.0);
    }

    #[test]
    fn empty_and_nonfinite() {
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[f64::NAN]).is_none());
        assert_eq!(Summary::of(&[f64::NAN, 2.0]).unwrap().n, 1);
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=101).map(|x| x as f64).collect();
        let s = Summary::with_percentiles(&v).unwrap();
        let p = s.percentiles.unwrap();
        assert_eq!(p.p50, 51.0);
        assert_eq!(p.p90, 91.0);
        assert_eq!(p.p99, 100.0);
    }

    #[test]
    fn fit_recovers_a_line() {
        let pts: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 + 2.0 * x as f64)).collect();
        let (a, b) = linear_fit(&pts).unwrap();
        assert!((a - 3.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9);
    }

    proptest! {
        #[test]
        fn summary_invariants(v in proptest::collection::vec(0.0f64..1e9, 1..200)) {
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.min <= s.ci95[0] && s.ci95[0] <= s.median);
            prop_assert!(s.median <= s.ci95[1] && s.ci95[1] <= s.max);
            prop_assert!(s.min <= s.mean && s.mean <= s.max);
            prop_assert!(s.stddev >= 0.0 && s.cov >= 0.0);
            prop_assert!(s.outliers < s.n.max(1));
        }

        #[test]
        fn ci_covers_the_true_median_often(seed in 0u64..1000) {
            // Uniform samples have median 0.5; the interval should contain it in most draws.
            let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let v: Vec<f64> = (0..31).map(|_| { x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407); (x >> 11) as f64 / (1u64 << 53) as f64 }).collect();
            let s = Summary::of(&v).unwrap();
            prop_assert!(s.ci95[0] < s.ci95[1]);
        }
    }
}
