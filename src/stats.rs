//! Summaries of trial values: the figures docs/METHODOLOGY.md "Statistics" describes, with a stated robust
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
    /// No values: every figure NaN.
    pub const EMPTY: Summary = Summary {
        n: 0,
        median: f64::NAN,
        mean: f64::NAN,
        stddev: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
        ci95: [f64::NAN, f64::NAN],
        cov: f64::NAN,
        outliers: 0,
        percentiles: None,
    };

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
}

/// The shift of `b` against `a` (Hodges-Lehmann: the median of all differences b_j - a_i)
/// with its distribution-free 95% interval from the Mann-Whitney statistic (normal
/// approximation: the differences ranked k = nm/2 - 1.96 sqrt(nm(n+m+1)/12) from either
/// end). The k-th difference is found by bisection on its value, counting pairs in
/// O(n + m) per step, so 10,000 x 10,000 samples need no list of 10^8 differences.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shift {
    pub estimate: f64,
    pub ci95: [f64; 2],
}

/// Number of pairs with b_j - a_i <= t (both sorted).
fn pairs_at_most(a: &[f64], b: &[f64], t: f64) -> u64 {
    // For each b_j, count a_i >= b_j - t; as b_j grows the threshold grows.
    let mut count = 0u64;
    let mut i = 0usize; // first a_i >= b_j - t
    for &bj in b {
        while i < a.len() && a[i] < bj - t {
            i += 1;
        }
        count += (a.len() - i) as u64;
    }
    count
}

/// The value of the k-th smallest pairwise difference (1-based), k in 1..=n*m.
fn kth_difference(a: &[f64], b: &[f64], k: u64) -> f64 {
    let mut lo = b[0] - a[a.len() - 1]; // smallest difference
    let mut hi = b[b.len() - 1] - a[0]; // largest
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if pairs_at_most(a, b, mid) >= k {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

pub fn hodges_lehmann(a: &[f64], b: &[f64]) -> Option<Shift> {
    let clean = |v: &[f64]| {
        let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        s
    };
    let (a, b) = (clean(a), clean(b));
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (n, m) = (a.len() as f64, b.len() as f64);
    let nm = a.len() as u64 * b.len() as u64;
    let est = if nm % 2 == 1 {
        kth_difference(&a, &b, nm / 2 + 1)
    } else {
        (kth_difference(&a, &b, nm / 2) + kth_difference(&a, &b, nm / 2 + 1)) / 2.0
    };
    let half = 1.959964 * (n * m * (n + m + 1.0) / 12.0).sqrt();
    let k = ((n * m / 2.0 - half).floor().max(0.0) as u64).max(1);
    Some(Shift {
        estimate: est,
        ci95: [
            kth_difference(&a, &b, k),
            kth_difference(&a, &b, nm + 1 - k),
        ],
    })
}

/// Range of the medians of `batches` consecutive, equal batches of a series taken in
/// order, over the overall median: how far the level moved within the run, which
/// per-sample intervals ignore. NaN when a batch would have fewer than 10 values.
pub fn batch_median_range(values: &[f64], batches: usize) -> f64 {
    let len = values.len() / batches.max(1);
    if batches < 2 || len < 10 {
        return f64::NAN;
    }
    let meds: Vec<f64> = values.chunks(len).take(batches).map(median).collect();
    let (lo, hi) = meds
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &m| {
            (l.min(m), h.max(m))
        });
    let mid = median(values);
    if mid != 0.0 {
        (hi - lo) / mid.abs()
    } else {
        f64::NAN
    }
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
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

/// A seeded generator for the statistics tests here and in `compare` (no dependency,
/// reproducible draws).
#[cfg(test)]
pub(crate) mod test_rng {
    pub struct Lcg(pub u64);
    impl Lcg {
        /// Uniform in (0, 1).
        pub fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        /// Standard normal (Box-Muller).
        pub fn normal(&mut self) -> f64 {
            let (u, v) = (self.next(), self.next());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
        /// Log-normal with median `med` and log-spread `sigma`: latency-like, heavy right tail.
        pub fn lognormal(&mut self, med: f64, sigma: f64) -> f64 {
            med * (sigma * self.normal()).exp()
        }
    }
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

    use super::test_rng::Lcg;

    trait Latency {
        fn latency(&mut self, med: f64) -> f64;
    }
    impl Latency for Lcg {
        /// Log-normal latency-like values with a heavy right tail, median `med`.
        fn latency(&mut self, med: f64) -> f64 {
            self.lognormal(med, 0.5)
        }
    }

    #[test]
    fn hodges_lehmann_matches_brute_force() {
        let mut r = Lcg(7);
        let a: Vec<f64> = (0..37).map(|_| r.latency(100.0)).collect();
        let b: Vec<f64> = (0..23).map(|_| r.latency(120.0)).collect();
        let mut d: Vec<f64> = a
            .iter()
            .flat_map(|x| b.iter().map(move |y| y - x))
            .collect();
        d.sort_by(f64::total_cmp);
        let s = hodges_lehmann(&a, &b).unwrap();
        let med = median(&d);
        assert!(
            (s.estimate - med).abs() < 1e-9 * med.abs().max(1.0),
            "{s:?} vs {med}"
        );
        let (n, m) = (37.0f64, 23.0f64);
        let k = (n * m / 2.0 - 1.959964 * (n * m * (n + m + 1.0) / 12.0).sqrt()).floor() as usize;
        assert!((s.ci95[0] - d[k - 1]).abs() < 1e-9, "{s:?} {}", d[k - 1]);
        assert!((s.ci95[1] - d[d.len() - k]).abs() < 1e-9);
        assert!(s.ci95[0] < s.estimate && s.estimate < s.ci95[1]);
    }

    #[test]
    fn a_ten_percent_shift_of_10000_samples_is_found() {
        let mut r = Lcg(11);
        let a: Vec<f64> = (0..10_000).map(|_| r.latency(1000.0)).collect();
        let b: Vec<f64> = (0..10_000).map(|_| r.latency(1100.0)).collect();
        let s = hodges_lehmann(&a, &b).unwrap();
        assert!(s.ci95[0] > 0.0, "{s:?}");
        // The shift estimate is near the true median shift of 100.
        assert!(s.estimate > 60.0 && s.estimate < 140.0, "{s:?}");
    }

    #[test]
    fn identical_distributions_rarely_differ() {
        // The false-positive rate of the 95% interval over 400 seeded pairs of draws.
        let mut hits = 0;
        let draws = 400;
        for seed in 0..draws {
            let mut r = Lcg(1000 + seed);
            let a: Vec<f64> = (0..300).map(|_| r.latency(500.0)).collect();
            let b: Vec<f64> = (0..200).map(|_| r.latency(500.0)).collect();
            let s = hodges_lehmann(&a, &b).unwrap();
            if s.ci95[0] > 0.0 || s.ci95[1] < 0.0 {
                hits += 1;
            }
        }
        let rate = hits as f64 / draws as f64;
        assert!(rate <= 0.05 + 0.02, "false-positive rate {rate}");
        // And it is not trivially zero: the interval is not absurdly wide.
        assert!(
            hits > 0,
            "no false positives in {draws} draws: interval too wide?"
        );
    }

    #[test]
    fn batch_drift_is_seen() {
        let mut r = Lcg(3);
        let flat: Vec<f64> = (0..2000).map(|_| r.latency(100.0)).collect();
        let drift: Vec<f64> = (0..2000)
            .map(|i| r.latency(100.0) * (1.0 + i as f64 / 2000.0))
            .collect();
        let (f, d) = (batch_median_range(&flat, 8), batch_median_range(&drift, 8));
        assert!(f < 0.2, "{f}");
        assert!(d > 0.4 && d > 3.0 * f, "{d} vs {f}");
        assert!(batch_median_range(&flat[..50], 8).is_nan());
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
