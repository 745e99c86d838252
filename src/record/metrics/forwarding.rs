//! tokentap's own cost, as a figure operators see in production: the delay it adds to each response
//! frame it forwards, from its bytes reaching the upstream socket (the kernel's receive timestamp,
//! `proxy/upstream/arrival.rs`) to the start of the client write that took its last byte (`net/delay.rs`
//! measures it). One unlabelled histogram for the whole process:
//! the figure is the proxy's, not a model's, and observing it resolves no label. Its row is
//! [`super::family::FORWARDING_DELAY`]; its boundaries are these.

/// Fine from 5 µs to 1 ms, where a proxy that keeps up lives, then coarse up to 1 s for a core that is
/// falling behind. From 100 µs to 500 µs, where the p50 of a proxy woken from idle sits on a VM, no step
/// is wider than a quarter of its lower bound: `histogram_quantile` interpolates inside a bucket, so a
/// quantile there is off by at most that.
pub const BUCKETS: [f64; 30] = [
    0.000_005, 0.000_01, 0.000_015, 0.000_02, 0.000_025, 0.000_03, 0.000_04, 0.000_05, 0.000_06,
    0.000_07, 0.000_08, 0.000_1, 0.000_125, 0.000_15, 0.000_175, 0.000_2, 0.000_25, 0.000_3,
    0.000_35, 0.000_4, 0.000_5, 0.000_75, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 0.25, 1.0,
];

#[cfg(test)]
mod tests {
    use super::BUCKETS;

    #[test]
    fn from_100_to_500_microseconds_no_step_is_wider_than_a_quarter_of_its_lower_bound() {
        for pair in BUCKETS.windows(2) {
            let (low, high) = (pair[0], pair[1]);
            assert!(low < high, "{low} {high}");
            if (0.000_1..0.000_5).contains(&low) {
                assert!(high - low <= low / 4.0 + 1e-12, "{low} -> {high}");
            }
        }
    }
}
