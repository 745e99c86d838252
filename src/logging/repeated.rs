//! A warning that a flood can repeat thousands of times a second (accepts failing at the file
//! descriptor limit, connections or requests refused at a configured limit): the first occurrence is
//! logged at once, then at most one line per interval, saying how many occurred since the last line.
//! The log only has to say that it is happening; the exact figures are the counters on `/metrics`.

use std::time::Duration;

use tokio::time::Instant;

/// How often a repeated warning may be logged.
pub const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct RepeatedWarning {
    interval: Duration,
    last_line: Option<Instant>,
    unlogged: u64,
}

impl Default for RepeatedWarning {
    fn default() -> Self {
        RepeatedWarning::new(INTERVAL)
    }
}

impl RepeatedWarning {
    pub fn new(interval: Duration) -> Self {
        RepeatedWarning {
            interval,
            last_line: None,
            unlogged: 0,
        }
    }

    /// Records one occurrence at `now`. When a line is due, returns how many occurrences it reports
    /// (this one and those since the last line).
    pub fn occurred(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last_line
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_the_first_at_once_then_one_line_per_interval_with_the_count() {
        let start = Instant::now();
        let mut warning = RepeatedWarning::new(Duration::from_secs(10));
        assert_eq!(warning.occurred(start), Some(1));
        // Every 50 ms for 10 s, as the accept loop's backoff would fail.
        let lines: Vec<(u64, u64)> = (1..=400u64)
            .filter_map(|i| {
                let at = start + Duration::from_millis(50 * i);
                warning.occurred(at).map(|n| (50 * i, n))
            })
            .collect();
        assert_eq!(lines, [(10_000, 200), (20_000, 200)]);
    }
}
