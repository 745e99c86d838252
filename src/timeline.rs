//! The timeline of one request as the proxy sees it (SPEC §1) and the figures derived from it (SPEC §2).
//!
//! Pure time arithmetic: it is told when the request arrived, when each output-bearing chunk passed and
//! when the body ended, and computes TTFT, gaps, E2E, TPOT and tokens/s. No I/O, no metrics, so every
//! formula is tested here with exact instants.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Timeline {
    arrive: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    output_chunks: u64,
    max_gap: Option<Duration>,
}

/// What one output-bearing chunk meant, so it can be observed as it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The first output: TTFT = t_first − t_arrive.
    First(Duration),
    /// A later output: the gap t_i − t_(i−1).
    Gap(Duration),
}

/// The whole-request figures at t_end. `None` where the formula does not apply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub e2e: Duration,
    pub ttft: Option<Duration>,
    /// t_end − t_first.
    pub generation: Option<Duration>,
    /// (t_end − t_first) / (N − 1), N ≥ 2.
    pub tpot: Option<Duration>,
    /// (N − 1) / (t_end − t_first), N ≥ 2 and a non-zero generation time.
    pub output_tokens_per_second: Option<f64>,
    /// max(t_i − t_(i−1)), at least two output chunks.
    pub max_gap: Option<Duration>,
}

impl Timeline {
    pub fn new(arrive: Instant) -> Self {
        Timeline {
            arrive,
            first: None,
            last: None,
            output_chunks: 0,
            max_gap: None,
        }
    }

    pub fn arrive(&self) -> Instant {
        self.arrive
    }

    pub fn output_chunks(&self) -> u64 {
        self.output_chunks
    }

    pub fn first(&self) -> Option<Instant> {
        self.first
    }

    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    pub fn on_output(&mut self, now: Instant) -> Mark {
        self.output_chunks += 1;
        let mark = match self.last {
            None => {
                self.first = Some(now);
                Mark::First(now.saturating_duration_since(self.arrive))
            }
            Some(last) => {
                let gap = now.saturating_duration_since(last);
                self.max_gap = Some(self.max_gap.map_or(gap, |m| m.max(gap)));
                Mark::Gap(gap)
            }
        };
        self.last = Some(now);
        mark
    }

    /// Figures at t_end, with N output tokens (from usage, or the chunk count when the server sent none).
    pub fn figures(&self, end: Instant, tokens: u64) -> Figures {
        let e2e = end.saturating_duration_since(self.arrive);
        let ttft = self
            .first
            .map(|first| first.saturating_duration_since(self.arrive));
        let generation = self.first.map(|first| end.saturating_duration_since(first));
        let (tpot, output_tokens_per_second) = match generation {
            Some(generation) if tokens >= 2 => {
                let steps = (tokens - 1) as f64;
                let tpot = Duration::from_secs_f64(generation.as_secs_f64() / steps);
                let rate = (!generation.is_zero()).then(|| steps / generation.as_secs_f64());
                (Some(tpot), rate)
            }
            _ => (None, None),
        };
        Figures {
            e2e,
            ttft,
            generation,
            tpot,
            output_tokens_per_second,
            max_gap: self.max_gap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ttft_gaps_tpot_and_rate_follow_the_spec_formulas() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        assert_eq!(tl.on_output(t0 + ms(200)), Mark::First(ms(200)));
        assert_eq!(tl.on_output(t0 + ms(220)), Mark::Gap(ms(20)));
        assert_eq!(tl.on_output(t0 + ms(300)), Mark::Gap(ms(80)));
        assert_eq!(tl.on_output(t0 + ms(310)), Mark::Gap(ms(10)));
        let f = tl.figures(t0 + ms(350), 4);
        assert_eq!(f.e2e, ms(350));
        assert_eq!(f.ttft, Some(ms(200)));
        assert_eq!(f.generation, Some(ms(150)));
        assert_eq!(f.tpot, Some(ms(50)));
        assert_eq!(f.max_gap, Some(ms(80)));
        let rate = f.output_tokens_per_second.unwrap_or_default();
        assert!((rate - 20.0).abs() < 1e-9, "{rate}");
    }

    #[test]
    fn single_token_has_ttft_but_no_tpot_rate_or_gap() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        tl.on_output(t0 + ms(5));
        let f = tl.figures(t0 + ms(9), 1);
        assert_eq!(f.ttft, Some(ms(5)));
        assert_eq!(
            (f.tpot, f.output_tokens_per_second, f.max_gap),
            (None, None, None)
        );
    }

    #[test]
    fn usage_count_not_chunk_count_drives_tpot() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        tl.on_output(t0 + ms(100));
        tl.on_output(t0 + ms(200));
        let f = tl.figures(t0 + ms(200), 11);
        assert_eq!(f.tpot, Some(ms(10)));
    }

    #[test]
    fn no_output_means_only_e2e() {
        let t0 = Instant::now();
        let tl = Timeline::new(t0);
        let f = tl.figures(t0 + ms(42), 0);
        assert_eq!(f.e2e, ms(42));
        assert_eq!((f.ttft, f.generation, f.tpot), (None, None, None));
    }
}
