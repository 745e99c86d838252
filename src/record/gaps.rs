//! One request's own gaps, kept only when `request_log:` is on: its ITL p50 and p99 for the record,
//! and, with `request_log.gaps: true`, the gaps themselves.
//!
//! Memory per stream is bounded whatever its length. The quantiles come from a log-linear histogram
//! of whole microseconds: exact below 16 µs, then 16 buckets per power of two up to 2^32 µs (71 min),
//! so a quantile is reported as its bucket's midpoint, within 1/32 (3.1 %) of the gap it stands for.
//! It takes 464 counters (1.8 KiB), allocated at the stream's first gap. The listed gaps are a `Vec`
//! capped at `request_log.max_gaps`; beyond the cap gaps are still counted in the histogram.

use std::time::Duration;

/// Sub-buckets per power of two.
const SUB: u32 = 16;
/// log2(SUB).
const SUB_BITS: u32 = 4;
/// Buckets for 0 ..= 2^32 − 1 µs.
const BUCKETS: usize = ((32 - SUB_BITS + 1) * SUB) as usize;

#[derive(Debug, Clone)]
pub struct Gaps {
    counts: Option<Box<[u32; BUCKETS]>>,
    total: u64,
    /// Every gap in order, up to `cap`; `None` when not asked for.
    listed: Option<Vec<Duration>>,
    cap: usize,
}

/// What the record says about the gaps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GapSummary {
    /// Gaps seen, listed or not.
    pub count: u64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// Seconds, in order; only when listing was asked for.
    pub listed: Option<Vec<f64>>,
}

fn bucket(micros: u64) -> usize {
    let v = micros.min(u64::from(u32::MAX)) as u32;
    if v < SUB {
        return v as usize;
    }
    let octave = 31 - v.leading_zeros();
    let sub = (v >> (octave - SUB_BITS)) & (SUB - 1);
    ((octave - SUB_BITS + 1) * SUB + sub) as usize
}

/// The midpoint of bucket `i`, in microseconds.
fn midpoint(i: usize) -> f64 {
    let i = i as u32;
    if i < SUB {
        return f64::from(i);
    }
    let octave = i / SUB + SUB_BITS - 1;
    let sub = i % SUB;
    let width = f64::from(1u32 << (octave - SUB_BITS));
    let low = f64::from(1u32 << octave) + f64::from(sub) * width;
    low + width / 2.0
}

impl Gaps {
    /// `list`: keep the gaps themselves, at most `cap` of them.
    pub fn new(list: bool, cap: usize) -> Self {
        Gaps {
            counts: None,
            total: 0,
            listed: list.then(Vec::new),
            cap,
        }
    }

    pub fn push(&mut self, gap: Duration) {
        let counts = self.counts.get_or_insert_with(|| Box::new([0; BUCKETS]));
        let i = bucket(u64::try_from(gap.as_micros()).unwrap_or(u64::MAX));
        counts[i] = counts[i].saturating_add(1);
        self.total += 1;
        if let Some(listed) = self.listed.as_mut().filter(|l| l.len() < self.cap) {
            listed.push(gap);
        }
    }

    /// The gap at quantile `q` (nearest rank), in seconds.
    fn quantile(&self, q: f64) -> Option<f64> {
        let counts = self.counts.as_ref()?;
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &n) in counts.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return Some(midpoint(i) / 1e6);
            }
        }
        None
    }

    pub fn summary(&self) -> GapSummary {
        GapSummary {
            count: self.total,
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            listed: self
                .listed
                .as_ref()
                .map(|l| l.iter().map(Duration::as_secs_f64).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bucket_midpoint_is_within_a_32nd_of_the_values_it_holds() {
        for v in (0..200_000u64).chain([u64::from(u32::MAX) - 1, 1 << 31, 3 << 29]) {
            let mid = midpoint(bucket(v));
            let error = (mid - v as f64).abs();
            assert!(error <= (v as f64 / 32.0).max(0.0) + 1e-9, "{v}: {mid}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn p50_and_p99_by_nearest_rank_and_the_listed_gaps_capped() {
        let mut gaps = Gaps::new(true, 3);
        let empty = GapSummary {
            listed: Some(vec![]),
            ..GapSummary::default()
        };
        assert_eq!(gaps.summary(), empty);
        // 98 gaps of 10 ms, two of 200 ms: p50 10 ms, p99 (rank 99) 200 ms.
        for i in 0..100 {
            let ms = if i >= 98 { 200 } else { 10 };
            gaps.push(Duration::from_millis(ms));
        }
        let s = gaps.summary();
        let (p50, p99) = (s.p50.unwrap_or_default(), s.p99.unwrap_or_default());
        assert!((p50 - 0.010).abs() <= 0.010 / 32.0, "{p50}");
        assert!((p99 - 0.200).abs() <= 0.200 / 32.0, "{p99}");
        assert_eq!(s.listed, Some(vec![0.01, 0.01, 0.01]));
        assert_eq!(s.count, 100);
        let mut unlisted = Gaps::new(false, 3);
        unlisted.push(Duration::from_micros(7));
        assert_eq!(unlisted.summary().listed, None);
        assert_eq!(unlisted.summary().p99, Some(7e-6));
    }
}
