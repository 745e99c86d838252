//! Native histograms (Prometheus's sparse, exponential buckets), kept beside the classic buckets of the
//! families `family::NATIVE` names and served only in the protobuf exposition (`protobuf.rs`), when a
//! Prometheus with native histograms on asks for it. The classic buckets stay what every other format
//! serves, with every SLO ceiling a boundary (docs/metrics.md, "Native histograms").
//!
//! Schema [`SCHEMA`] (3): bucket `i` holds the values in (2^((i−1)/8), 2^(i/8)], each bucket 9.05 % wider
//! than the one below, as Prometheus's Go client does for its default bucket factor of 1.1. Values at or
//! below [`ZERO_THRESHOLD`] (2^−128, the Go client's) are the zero bucket. A series keeps only the
//! buckets it has observed into, as (index, count) pairs in order: a duration of a nanosecond to a day
//! spans 370 indices at most, so a series is a few kilobytes at worst, whatever it observes.
//!
//! Native buckets do not depend on the classic boundaries, so a reload that changes a ceiling changes
//! nothing here: the native series goes on.

use std::sync::{Mutex, PoisonError};

/// The resolution: 2^3 buckets per power of two.
pub const SCHEMA: i32 = 3;
/// The zero bucket's upper edge, as Prometheus's Go client sets it by default.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;
/// The lower edge of each bucket within one power of two, as a fraction of that power's upper edge
/// (2^(j/8 − 1), the Go client's `nativeHistogramBounds[3]`).
const BOUNDS: [f64; 8] = [
    0.5,
    0.545_253_866_332_628_8,
    0.594_603_557_501_360_5,
    0.648_419_777_325_504_8,
    0.707_106_781_186_547_5,
    0.771_105_412_703_970_4,
    0.840_896_415_253_714_4,
    0.917_004_043_204_671_1,
];

/// One series' native buckets.
#[derive(Default)]
pub struct Native(Mutex<Sparse>);

/// What a native series has counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sparse {
    pub count: u64,
    pub sum: f64,
    /// Observations at or below [`ZERO_THRESHOLD`].
    pub zero: u64,
    /// (bucket index, observations in it), by index; only buckets observed into.
    pub buckets: Vec<(i32, u64)>,
}

impl Native {
    pub fn observe(&self, value: f64) {
        if !value.is_finite() {
            return;
        }
        let mut sparse = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        sparse.count += 1;
        sparse.sum += value;
        if value <= ZERO_THRESHOLD {
            sparse.zero += 1;
            return;
        }
        let i = index(value);
        match sparse.buckets.binary_search_by_key(&i, |&(at, _)| at) {
            Ok(at) => sparse.buckets[at].1 += 1,
            Err(at) => sparse.buckets.insert(at, (i, 1)),
        }
    }

    pub fn snapshot(&self) -> Sparse {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The bucket a finite `value` above [`ZERO_THRESHOLD`] falls in: the `i` with
/// 2^((i−1)/8) < value ≤ 2^(i/8), read from the float's own exponent and fraction (no logarithm, so a
/// power of two lands exactly on its edge).
pub fn index(value: f64) -> i32 {
    let (fraction, exponent) = frexp(value);
    let j = BOUNDS.partition_point(|&bound| bound < fraction) as i32;
    j + (exponent - 1) * BOUNDS.len() as i32
}

/// The upper edge of bucket `i`: 2^(i/8), from the same table [`index`] reads, so that
/// `index(upper_edge(i)) == i` exactly.
#[cfg(test)]
pub fn upper_edge(i: i32) -> f64 {
    let per = BOUNDS.len() as i32;
    let (power, j) = (i.div_euclid(per), i.rem_euclid(per) as usize);
    match j {
        0 => 2f64.powi(power),
        j => BOUNDS[j] * 2f64.powi(power + 1),
    }
}

/// `value` = fraction × 2^exponent, fraction in [0.5, 1): C's `frexp`, for normal positive floats
/// (every value above [`ZERO_THRESHOLD`] is one).
fn frexp(value: f64) -> (f64, i32) {
    let bits = value.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let fraction = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (fraction, exponent)
}

/// The buckets as the protobuf exposition lists them: spans of consecutive indices (the first span's
/// offset is its first index, each later one's the gap since the last span) and each bucket's count
/// as the difference from the bucket before it.
pub fn spans_and_deltas(buckets: &[(i32, u64)]) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas = Vec::with_capacity(buckets.len());
    let (mut next, mut previous) = (None, 0i64);
    for &(i, count) in buckets {
        match next {
            Some(n) if n == i => {
                if let Some(last) = spans.last_mut() {
                    last.1 += 1;
                }
            }
            Some(n) => spans.push((i - n, 1)),
            None => spans.push((i, 1)),
        }
        next = Some(i + 1);
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        deltas.push(count - previous);
        previous = count;
    }
    (spans, deltas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_falls_in_the_bucket_whose_edges_hold_it_and_a_power_of_two_on_its_edge() {
        for i in -200..120 {
            let (lower, upper) = (upper_edge(i - 1), upper_edge(i));
            assert_eq!(
                index(upper),
                i,
                "2^({i}/8) itself is bucket {i}'s upper edge"
            );
            assert_eq!(index(upper * (1.0 - 1e-12)), i);
            assert_eq!(index(lower * (1.0 + 1e-12)), i);
            assert!((upper / lower - 1.0905077326652577).abs() < 1e-12);
        }
        assert_eq!(index(1.0), 0);
        assert_eq!(index(0.5), -8);
        assert_eq!(index(1.05), 1);
        assert_eq!(index(3600.0), 95);
        assert_eq!(index(1e-9), -239);
    }

    #[test]
    fn counts_sum_and_zero_bucket_and_the_spans_list_them_in_order() {
        let native = Native::default();
        for v in [0.0, 1.0, 1.0, 1.05, 4.0, f64::NAN] {
            native.observe(v);
        }
        let sparse = native.snapshot();
        assert_eq!((sparse.count, sparse.zero), (5, 1), "NaN is not counted");
        assert!((sparse.sum - 7.05).abs() < 1e-12);
        assert_eq!(sparse.buckets, [(0, 2), (1, 1), (16, 1)]);
        let (spans, deltas) = spans_and_deltas(&sparse.buckets);
        assert_eq!(spans, [(0, 2), (14, 1)]);
        assert_eq!(deltas, [2, -1, 0]);
    }
}
