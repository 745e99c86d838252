//! Quantiles from histogram buckets, computed exactly as Prometheus's `histogram_quantile` does
//! (`promql/quantile.go`, `bucketQuantile`), so a figure on the live page agrees with
//! `histogram_quantile(q, increase(..._bucket[w]))` over the same window: the rank `q × count` is found
//! in the first bucket whose cumulative count reaches it, and the value is interpolated linearly inside
//! that bucket, the lowest bucket starting at 0. A rank that lands in the `+Inf` bucket gives the
//! highest finite boundary. No observations (or no finite bucket) gives `None`, where Prometheus gives NaN.

/// The `q` quantile of cumulative bucket counts: `cumulative[i]` observations at or below `bounds[i]`,
/// and one more entry, the `+Inf` bucket (the total). `bounds` are finite and increasing.
pub fn histogram_quantile(q: f64, bounds: &[f64], cumulative: &[u64]) -> Option<f64> {
    if q.is_nan() || cumulative.len() != bounds.len() + 1 || bounds.is_empty() {
        return None;
    }
    if q < 0.0 {
        return Some(f64::NEG_INFINITY);
    }
    if q > 1.0 {
        return Some(f64::INFINITY);
    }
    let total = *cumulative.last()? as f64;
    if total == 0.0 {
        return None;
    }
    let rank = q * total;
    // The first bucket (the +Inf one excluded, as `sort.Search(len-1, ...)`) whose count reaches the rank.
    let b = cumulative[..bounds.len()]
        .iter()
        .position(|&c| c as f64 >= rank)
        .unwrap_or(bounds.len());
    if b == bounds.len() {
        return bounds.last().copied();
    }
    if b == 0 && bounds[0] <= 0.0 {
        return Some(bounds[0]);
    }
    let (start, below) = match b {
        0 => (0.0, 0.0),
        _ => (bounds[b - 1], cumulative[b - 1] as f64),
    };
    let count = cumulative[b] as f64 - below;
    Some(start + (bounds[b] - start) * ((rank - below) / count))
}

/// `now − then`, bucket by bucket, for cumulative counts that only grow. A series that went back
/// (its model label was retired and came back, starting from zero) counts from zero, as Prometheus's
/// `increase` treats a counter reset; `then` missing means the series is new in the window.
pub fn delta(now: &[u64], then: Option<&[u64]>) -> Vec<u64> {
    match then {
        Some(then) if then.len() == now.len() && now.last() >= then.last() => now
            .iter()
            .zip(then)
            .map(|(n, t)| n.saturating_sub(*t))
            .collect(),
        _ => now.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [f64; 4] = [0.1, 0.25, 0.5, 1.0];

    fn close(a: Option<f64>, b: f64) {
        let a = a.unwrap_or(f64::NAN);
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    /// Hand-computed with Prometheus's rule: 10 observations, 2 ≤ 0.1, 5 ≤ 0.25, 9 ≤ 0.5, 10 ≤ 1.
    #[test]
    fn interpolates_inside_the_bucket_that_holds_the_rank_as_prometheus_does() {
        let counts = [2, 5, 9, 10, 10];
        // rank 5 reaches bucket 0.25 exactly: 0.1 + 0.15 * (3/3).
        close(histogram_quantile(0.5, &BOUNDS, &counts), 0.25);
        // rank 9 -> bucket 0.5: 0.25 + 0.25 * (4/4).
        close(histogram_quantile(0.9, &BOUNDS, &counts), 0.5);
        // rank 9.9 -> bucket 1.0: 0.5 + 0.5 * (0.9/1).
        close(histogram_quantile(0.99, &BOUNDS, &counts), 0.95);
        // rank 1 -> the lowest bucket starts at 0: 0 + 0.1 * (1/2).
        close(histogram_quantile(0.1, &BOUNDS, &counts), 0.05);
        // rank 3 -> bucket 0.25: 0.1 + 0.15 * (1/3).
        close(histogram_quantile(0.3, &BOUNDS, &counts), 0.1 + 0.15 / 3.0);
    }

    #[test]
    fn an_empty_window_has_no_quantile() {
        assert_eq!(histogram_quantile(0.5, &BOUNDS, &[0, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_rank_in_the_inf_bucket_gives_the_highest_finite_boundary() {
        close(histogram_quantile(0.5, &BOUNDS, &[0, 0, 0, 0, 7]), 1.0);
        // 9 of 10 finite: p99's rank 9.9 is above every finite bucket.
        close(histogram_quantile(0.99, &BOUNDS, &[2, 5, 9, 9, 10]), 1.0);
    }

    #[test]
    fn one_bucket_interpolates_from_zero_to_its_boundary() {
        close(histogram_quantile(0.5, &[2.0], &[4, 4]), 1.0);
        close(histogram_quantile(0.99, &[2.0], &[4, 4]), 1.98);
        // Prometheus needs a finite bucket besides +Inf.
        assert_eq!(histogram_quantile(0.5, &[], &[4]), None);
    }

    #[test]
    fn quantiles_outside_zero_to_one_are_infinite_as_in_prometheus() {
        assert_eq!(
            histogram_quantile(-0.1, &BOUNDS, &[1, 1, 1, 1, 1]),
            Some(f64::NEG_INFINITY)
        );
        assert_eq!(
            histogram_quantile(1.5, &BOUNDS, &[1, 1, 1, 1, 1]),
            Some(f64::INFINITY)
        );
    }

    #[test]
    fn deltas_subtract_bucket_by_bucket_and_a_reset_counts_from_zero() {
        assert_eq!(delta(&[3, 5, 8], Some(&[1, 2, 3])), vec![2, 3, 5]);
        assert_eq!(delta(&[3, 5, 8], None), vec![3, 5, 8]);
        assert_eq!(delta(&[1, 1, 2], Some(&[3, 5, 8])), vec![1, 1, 2]);
    }
}
