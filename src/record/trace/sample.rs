//! Which finished requests become spans, decided at the end, when the outcome and the SLO verdict are
//! known (tail sampling): a ratio of all requests, and, each on its own, every request whose caller
//! samples its trace, every request that missed an SLO ceiling and every one that failed. So the evidence
//! for the slow and failing tail is complete whatever the ratio.
//!
//! The ratio is decided on the trace id exactly as OpenTelemetry's `TraceIdRatioBased` sampler does it
//! (the Go, Java and Rust SDKs): the id's last 8 bytes, big-endian, shifted right by one, below
//! `ratio × 2^63`. Every replica, and every SDK that samples the same way, keeps the same traces.

use crate::config::Sample;

use super::context::{TraceContext, TraceId};

/// How a request ended, as sampling reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ending {
    /// An outcome other than `ok`, or a status of 500 or more.
    pub failed: bool,
    /// At least one SLO ceiling missed.
    pub missed_slo: bool,
}

/// `traces.sample`, ready to decide.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// `ratio × 2^63`: a trace id whose low half (shifted right by one) is below it is kept.
    bound: u64,
    always: bool,
    parent: bool,
    slo_misses: bool,
    failures: bool,
}

impl Sampler {
    pub fn new(sample: &Sample) -> Self {
        let ratio = sample.ratio.clamp(0.0, 1.0);
        Sampler {
            // As the SDKs compute it: the product truncated to an integer.
            bound: (ratio * (1u64 << 63) as f64) as u64,
            always: ratio >= 1.0,
            parent: sample.parent,
            slo_misses: sample.slo_misses,
            failures: sample.failures,
        }
    }

    /// Whether the request in `context` that ended as `ending` becomes a span.
    pub fn keep(&self, context: &TraceContext, ending: Ending) -> bool {
        (self.failures && ending.failed)
            || (self.slo_misses && ending.missed_slo)
            || (self.parent && context.parent_sampled())
            || self.ratio_keeps(context.trace_id)
    }

    /// The ratio's decision alone.
    pub fn ratio_keeps(&self, trace_id: TraceId) -> bool {
        if self.always {
            return true;
        }
        let mut low = [0; 8];
        low.copy_from_slice(&trace_id.0[8..]);
        (u64::from_be_bytes(low) >> 1) < self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::super::context::{ids_for, parse_traceparent, SpanId};
    use super::*;

    fn sampler(ratio: f64) -> Sampler {
        Sampler::new(&Sample {
            ratio,
            parent: false,
            slo_misses: false,
            failures: false,
        })
    }

    fn trace(low: u64) -> TraceId {
        let mut id = [0xab; 16];
        id[8..].copy_from_slice(&low.to_be_bytes());
        TraceId(id)
    }

    #[test]
    fn the_ratio_is_decided_on_the_trace_ids_low_half_as_the_sdks_do() {
        let half = sampler(0.5);
        // Shifted right by one: below 2^62 is kept.
        assert!(half.ratio_keeps(trace((1 << 63) - 2)));
        assert!(!half.ratio_keeps(trace(1 << 63)));
        assert!(half.ratio_keeps(trace(0)));
        assert!(!half.ratio_keeps(trace(u64::MAX)));
        // The high half plays no part.
        let mut other = trace(5);
        other.0[..8].copy_from_slice(&[0; 8]);
        assert_eq!(half.ratio_keeps(other), half.ratio_keeps(trace(5)));
        assert!(!sampler(0.0).ratio_keeps(trace(0)));
        assert!(sampler(1.0).ratio_keeps(trace(u64::MAX)));
    }

    #[test]
    fn the_same_trace_gets_the_same_decision_everywhere_and_the_share_is_the_ratio() {
        let (a, b) = (sampler(0.1), sampler(0.1));
        let head = http::HeaderMap::new();
        let mut kept = 0;
        for _ in 0..20_000 {
            let context = ids_for(&head);
            let decided = a.ratio_keeps(context.trace_id);
            assert_eq!(decided, b.ratio_keeps(context.trace_id));
            kept += usize::from(decided);
        }
        // 2,000 expected; the binomial's standard deviation is 42.
        assert!((1_800..=2_200).contains(&kept), "{kept}");
        // The W3C example's id: 0xa3ce929d0e0e4736 >> 1 is 0x51e7…, 64 % of 2^63.
        let parent = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let id = parent.map(|p| p.trace_id).unwrap_or(TraceId([1; 16]));
        assert!(sampler(0.65).ratio_keeps(id) && !sampler(0.63).ratio_keeps(id));
    }

    #[test]
    fn misses_failures_and_a_sampling_caller_are_kept_whatever_the_ratio() {
        let none = sampler(0.0);
        let every = Sampler::new(&Sample {
            ratio: 0.0,
            ..Sample::default()
        });
        let root = ids_for(&http::HeaderMap::new());
        let missed = Ending {
            missed_slo: true,
            ..Ending::default()
        };
        let failed = Ending {
            failed: true,
            ..Ending::default()
        };
        for ending in [missed, failed] {
            assert!(every.keep(&root, ending));
            assert!(!none.keep(&root, ending));
        }
        assert!(!every.keep(&root, Ending::default()));
        let sampled = TraceContext {
            parent: Some(SpanId([7; 8])),
            ..root.clone()
        };
        assert!(every.keep(&sampled, Ending::default()));
        let unsampled = TraceContext {
            flags: 0,
            ..sampled
        };
        assert!(!every.keep(&unsampled, Ending::default()));
    }
}
