//! A streaming quantile sketch with a fixed relative error (the DDSketch scheme): every positive
//! value falls into a logarithmic bucket `(γ^(i−1), γ^i]` with `γ = (1 + α)/(1 − α)`, and a bucket is
//! reported as `2γ^i/(γ + 1)`, within [`RELATIVE_ERROR`] (α) of every value in it. Count, sum, min and
//! max are kept exactly, so the mean, the minimum and the maximum carry no error.
//!
//! While a sketch holds at most [`EXACT_UP_TO`] values it also keeps them, and its quantiles are exact;
//! past that the kept values are dropped and the buckets answer.
//!
//! Memory does not grow with the number of values, only with their spread: one map entry per bucket
//! that holds a value, at most [`MAX_BUCKETS`] between 1 ns and one day (values at or below 1 ns share
//! one bucket reported as the minimum; larger values only add buckets slowly, 100 per factor of 2.7).

use std::collections::BTreeMap;

/// α: a quantile is reported within this share of the exact nearest-rank value.
pub const RELATIVE_ERROR: f64 = 0.005;
/// The number of buckets that cover 1 ns to 86,400 s at [`RELATIVE_ERROR`].
pub const MAX_BUCKETS: usize = 3_211;
/// Up to this many values the quantiles are exact (8 KB of kept values at most).
pub const EXACT_UP_TO: usize = 1_000;
/// Values at or below this share the lowest bucket.
const TINY: f64 = 1e-9;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sketch {
    buckets: BTreeMap<i32, u64>,
    /// Every value while there are at most [`EXACT_UP_TO`]; emptied for good past that.
    exact: Vec<f64>,
    tiny: u64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

fn ln_gamma() -> f64 {
    ((1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)).ln()
}

impl Sketch {
    /// Adds `value`; a negative, NaN or infinite value is not a measurement and is ignored.
    pub fn add(&mut self, value: f64) {
        if !value.is_finite() || value < 0.0 {
            return;
        }
        if self.count == 0 {
            (self.min, self.max) = (value, value);
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.count += 1;
        self.sum += value;
        if self.count as usize <= EXACT_UP_TO {
            self.exact.push(value);
        } else if !self.exact.is_empty() {
            self.exact = Vec::new();
        }
        if value <= TINY {
            self.tiny += 1;
        } else {
            let index = (value.ln() / ln_gamma()).ceil() as i32;
            *self.buckets.entry(index).or_insert(0) += 1;
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    pub fn min(&self) -> Option<f64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }

    /// Whether [`Sketch::quantile`] is exact (at most [`EXACT_UP_TO`] values).
    pub fn is_exact(&self) -> bool {
        self.count as usize <= EXACT_UP_TO
    }

    /// The nearest-rank `q` quantile (the value at rank ⌈q·n⌉, at least 1): exact up to
    /// [`EXACT_UP_TO`] values, then within [`RELATIVE_ERROR`] of it and never outside [min, max].
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        if self.is_exact() {
            let mut sorted = self.exact.clone();
            sorted.sort_by(f64::total_cmp);
            return sorted.get(rank as usize - 1).copied();
        }
        let mut seen = self.tiny;
        if seen >= rank {
            return Some(self.min);
        }
        let gamma = ln_gamma().exp();
        for (&index, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                let value = 2.0 * (index as f64 * ln_gamma()).exp() / (gamma + 1.0);
                return Some(value.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Buckets in use (the memory the sketch holds).
    pub fn buckets(&self) -> usize {
        self.buckets.len() + usize::from(self.tiny > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(sorted: &[f64], q: f64) -> f64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    fn within(got: f64, want: f64) -> bool {
        (got - want).abs() <= want * RELATIVE_ERROR + 1e-12
    }

    #[test]
    fn quantiles_are_within_the_stated_error_of_the_nearest_rank() {
        // A spread of values over nine decades, in a scrambled order.
        let mut values: Vec<f64> = (1..=10_000u64)
            .map(|i| ((i * 7_919) % 10_007) as f64 * 1e-6 * (1.0 + (i % 13) as f64 * 37.0))
            .collect();
        let mut sketch = Sketch::default();
        for &v in &values {
            sketch.add(v);
        }
        values.sort_by(f64::total_cmp);
        for q in [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0] {
            let (got, want) = (sketch.quantile(q).unwrap(), exact(&values, q));
            assert!(within(got, want), "q={q}: {got} vs {want}");
        }
        assert_eq!(sketch.min(), Some(values[0]));
        assert_eq!(sketch.max(), values.last().copied());
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((sketch.mean().unwrap() - mean).abs() < 1e-9 * mean);
    }

    #[test]
    fn small_sets_give_the_nearest_rank_value() {
        let mut sketch = Sketch::default();
        for v in [0.3, 0.1, 0.2, 0.4] {
            sketch.add(v);
        }
        // Ranks ⌈q·4⌉: p50 = the 2nd value, p90 and p99 = the 4th, exactly.
        assert_eq!(sketch.quantile(0.5), Some(0.2));
        assert_eq!(sketch.quantile(0.9), Some(0.4));
        assert_eq!(sketch.quantile(0.99), Some(0.4));
        assert_eq!(sketch.quantile(0.0), Some(0.1));
    }

    #[test]
    fn exact_up_to_the_limit_then_the_kept_values_are_dropped() {
        let mut sketch = Sketch::default();
        for i in 1..=EXACT_UP_TO {
            sketch.add(i as f64 * 0.001);
        }
        assert!(sketch.is_exact());
        assert_eq!(sketch.quantile(0.5), Some(0.5));
        sketch.add(2.0);
        assert!(!sketch.is_exact());
        assert!(sketch.exact.is_empty());
        let p50 = sketch.quantile(0.5).unwrap();
        assert!(within(p50, 0.501), "{p50}");
    }

    #[test]
    fn memory_is_bounded_by_the_spread_not_the_count() {
        let mut sketch = Sketch::default();
        for i in 0..1_000_000u64 {
            sketch.add(1e-9 * 1.0001f64.powi((i % 300_000) as i32));
        }
        assert!(sketch.buckets() <= MAX_BUCKETS, "{}", sketch.buckets());
        let mut wide = Sketch::default();
        let mut v = 1e-9;
        while v <= 86_400.0 {
            wide.add(v);
            v *= 1.001;
        }
        assert!(wide.buckets() <= MAX_BUCKETS, "{}", wide.buckets());
        assert!(wide.buckets() + 5 >= MAX_BUCKETS, "{}", wide.buckets());
    }

    #[test]
    fn zero_and_non_measurements() {
        let mut sketch = Sketch::default();
        assert_eq!(sketch.quantile(0.5), None);
        for v in [f64::NAN, -1.0, f64::INFINITY] {
            sketch.add(v);
        }
        assert_eq!(sketch.count(), 0);
        sketch.add(0.0);
        sketch.add(0.0);
        sketch.add(2.0);
        assert_eq!(sketch.quantile(0.5), Some(0.0));
        assert_eq!(sketch.quantile(1.0), Some(2.0));
        assert_eq!(sketch.mean(), Some(2.0 / 3.0));
    }
}
