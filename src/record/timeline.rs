//! The timeline of one request as the proxy sees it and the figures derived from it (docs/metrics.md).
//!
//! Pure time arithmetic: it is told when the request arrived, when each output-bearing chunk passed (and
//! for which choice) and when the body ended, and computes TTFT, gaps, E2E, TPOT and tokens/s. No I/O, no
//! metrics, so every formula is tested here with exact instants.
//!
//! Several choices (OpenAI's `n` > 1) are timed as the reader of one choice sees them: TTFT is the first
//! output of any choice, a gap is between two consecutive outputs of the same choice, and TPOT and
//! tokens/s divide the request's tokens evenly over the choices that produced output.
//!
//! Output is answer or reasoning. TTFT is stopped by the first output of either kind; the time to first
//! answer by the first answer-bearing output (text, refusal, tool call), t_answer; the reasoning time
//! (t_answer − t_first) exists only when reasoning came before the answer. The time to first tool call
//! is stopped by the first output that starts a tool call, t_tool (a tool call is answer too, so
//! t_answer ≤ t_tool).

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Timeline {
    arrive: Instant,
    first: Option<Instant>,
    /// The last output of any choice.
    last: Option<Instant>,
    /// The last output of each choice that has produced one; one entry for the usual single answer.
    choices: Vec<(u32, Instant)>,
    output_chunks: u64,
    max_gap: Option<Duration>,
    /// t_answer, and whether reasoning came before it.
    answer: Option<(Instant, bool)>,
    /// t_tool: the first output that started a tool call.
    tool: Option<Instant>,
    /// t_head: the upstream's response head.
    head: Option<Instant>,
}

/// The first answer, as it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// t_answer − t_arrive.
    pub time_to_first_answer: Duration,
    /// t_answer − t_first, when reasoning came first.
    pub reasoning_time: Option<Duration>,
}

/// What one output-bearing chunk meant, so it can be observed as it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The first output of the request: TTFT = t_first − t_arrive.
    First(Duration),
    /// A later output of the same choice: the gap t_i − t_(i−1).
    Gap(Duration),
    /// The first output of another choice: neither a TTFT nor a gap.
    ChoiceStart,
}

/// The whole-request figures at t_end, and what the SLO ceilings are judged on (`record::slo`). `None`
/// where the formula does not apply.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Figures {
    pub e2e: Duration,
    pub ttft: Option<Duration>,
    /// t_answer − t_arrive: the first output that is answer (text, refusal or tool call), not reasoning.
    pub time_to_first_answer: Option<Duration>,
    /// t_answer − t_first, when reasoning came before the answer.
    pub reasoning_time: Option<Duration>,
    /// t_tool − t_arrive: the first output that started a tool call, when one did.
    pub time_to_first_tool_call: Option<Duration>,
    /// t_end − t_first.
    pub generation: Option<Duration>,
    /// (t_end − t_first) / (N/k − 1) for k choices with output, N/k ≥ 2.
    pub tpot: Option<Duration>,
    /// (N/k − 1) / (t_end − t_first), N/k ≥ 2 and a non-zero generation time.
    pub output_tokens_per_second: Option<f64>,
    /// max(t_i − t_(i−1)) over the gaps of every choice, at least one gap.
    pub max_gap: Option<Duration>,
    /// t_head − t_arrive: the upstream's status and headers, when it answered.
    pub time_to_response_head: Option<Duration>,
}

impl Timeline {
    pub fn new(arrive: Instant) -> Self {
        Timeline {
            arrive,
            first: None,
            last: None,
            choices: Vec::new(),
            output_chunks: 0,
            max_gap: None,
            answer: None,
            tool: None,
            head: None,
        }
    }

    /// Whether an output started a tool call.
    pub fn called_tool(&self) -> bool {
        self.tool.is_some()
    }

    /// The upstream's response head arrived at `at` (`None`: the answer was tokentap's own).
    pub fn on_head(&mut self, at: Option<Instant>) {
        self.head = at;
    }

    /// The first output that starts a tool call passed at `now`: t_tool − t_arrive, the first time
    /// only (later calls return `None`).
    pub fn on_tool_call(&mut self, now: Instant) -> Option<Duration> {
        if self.tool.is_some() {
            return None;
        }
        self.tool = Some(now);
        Some(now.saturating_duration_since(self.arrive))
    }

    /// The first answer-bearing output passed at `now` (after its output marks), `after_reasoning` when
    /// reasoning passed before it. Only the first call counts; later ones return `None`.
    pub fn on_answer(&mut self, now: Instant, after_reasoning: bool) -> Option<Answer> {
        if self.answer.is_some() {
            return None;
        }
        self.answer = Some((now, after_reasoning));
        Some(self.answer_figures(now, after_reasoning))
    }

    fn answer_figures(&self, at: Instant, after_reasoning: bool) -> Answer {
        let first = self.first.unwrap_or(at);
        Answer {
            time_to_first_answer: at.saturating_duration_since(self.arrive),
            reasoning_time: after_reasoning.then(|| at.saturating_duration_since(first)),
        }
    }

    pub fn arrive(&self) -> Instant {
        self.arrive
    }

    /// Output-bearing chunks, one per event and choice it advanced.
    pub fn output_chunks(&self) -> u64 {
        self.output_chunks
    }

    pub fn first(&self) -> Option<Instant> {
        self.first
    }

    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    /// An output of `choice` passed at `now`.
    pub fn on_output(&mut self, choice: u32, now: Instant) -> Mark {
        self.output_chunks += 1;
        self.last = Some(now);
        let Some(slot) = self.choices.iter_mut().find(|(c, _)| *c == choice) else {
            self.choices.push((choice, now));
            if self.first.is_some() {
                return Mark::ChoiceStart;
            }
            self.first = Some(now);
            return Mark::First(now.saturating_duration_since(self.arrive));
        };
        let gap = now.saturating_duration_since(slot.1);
        slot.1 = now;
        self.max_gap = Some(self.max_gap.map_or(gap, |m| m.max(gap)));
        Mark::Gap(gap)
    }

    /// Figures at t_end, with N output tokens over all choices (from usage, a tokenizer, or the chunk
    /// count).
    pub fn figures(&self, end: Instant, tokens: u64) -> Figures {
        let e2e = end.saturating_duration_since(self.arrive);
        let ttft = self
            .first
            .map(|first| first.saturating_duration_since(self.arrive));
        let generation = self.first.map(|first| end.saturating_duration_since(first));
        let per_choice = tokens as f64 / self.choices.len().max(1) as f64;
        let (tpot, output_tokens_per_second) = match generation {
            Some(generation) if per_choice >= 2.0 => {
                let steps = per_choice - 1.0;
                let tpot = Duration::from_secs_f64(generation.as_secs_f64() / steps);
                let rate = (!generation.is_zero()).then(|| steps / generation.as_secs_f64());
                (Some(tpot), rate)
            }
            _ => (None, None),
        };
        let answer = self.answer.map(|(at, r)| self.answer_figures(at, r));
        Figures {
            e2e,
            ttft,
            time_to_first_answer: answer.map(|a| a.time_to_first_answer),
            reasoning_time: answer.and_then(|a| a.reasoning_time),
            time_to_first_tool_call: self.tool.map(|t| t.saturating_duration_since(self.arrive)),
            time_to_response_head: self.head.map(|t| t.saturating_duration_since(self.arrive)),
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
        assert_eq!(tl.on_output(0, t0 + ms(200)), Mark::First(ms(200)));
        assert_eq!(tl.on_output(0, t0 + ms(220)), Mark::Gap(ms(20)));
        assert_eq!(tl.on_output(0, t0 + ms(300)), Mark::Gap(ms(80)));
        assert_eq!(tl.on_output(0, t0 + ms(310)), Mark::Gap(ms(10)));
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
    fn the_first_tool_call_stops_its_own_clock_once() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        tl.on_output(0, t0 + ms(100));
        assert_eq!(tl.figures(t0 + ms(150), 1).time_to_first_tool_call, None);
        assert_eq!(tl.on_tool_call(t0 + ms(400)), Some(ms(400)));
        assert_eq!(tl.on_tool_call(t0 + ms(900)), None);
        let f = tl.figures(t0 + ms(1_000), 5);
        assert_eq!(
            (f.ttft, f.time_to_first_tool_call),
            (Some(ms(100)), Some(ms(400)))
        );
    }

    #[test]
    fn reasoning_then_answer_splits_the_wait_into_ttft_reasoning_and_first_answer() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        assert_eq!(tl.on_output(0, t0 + ms(100)), Mark::First(ms(100)));
        tl.on_output(0, t0 + ms(900));
        let answer = tl.on_answer(t0 + ms(1_300), true);
        assert_eq!(
            answer,
            Some(Answer {
                time_to_first_answer: ms(1_300),
                reasoning_time: Some(ms(1_200)),
            })
        );
        assert_eq!(tl.on_answer(t0 + ms(1_400), true), None, "only the first");
        let f = tl.figures(t0 + ms(2_000), 10);
        assert_eq!(f.ttft, Some(ms(100)));
        assert_eq!(f.time_to_first_answer, Some(ms(1_300)));
        assert_eq!(f.reasoning_time, Some(ms(1_200)));
    }

    #[test]
    fn answer_first_has_no_reasoning_time_and_reasoning_only_no_answer() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        tl.on_output(0, t0 + ms(50));
        tl.on_answer(t0 + ms(50), false);
        let f = tl.figures(t0 + ms(80), 1);
        assert_eq!(
            (f.ttft, f.time_to_first_answer),
            (Some(ms(50)), Some(ms(50)))
        );
        assert_eq!(f.reasoning_time, None);
        let mut tl = Timeline::new(t0);
        tl.on_output(0, t0 + ms(50));
        let f = tl.figures(t0 + ms(80), 1);
        assert_eq!((f.time_to_first_answer, f.reasoning_time), (None, None));
    }

    #[test]
    fn single_token_has_ttft_but_no_tpot_rate_or_gap() {
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        tl.on_output(0, t0 + ms(5));
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
        tl.on_output(0, t0 + ms(100));
        tl.on_output(0, t0 + ms(200));
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

    #[test]
    fn several_choices_are_timed_as_one_reader_sees_them() {
        // n = 2: choice 0 at 100, 120, 140 ms; choice 1 at 110, 150 ms (one event carries both at 140
        // and 150 would be two marks at one instant: here they interleave).
        let t0 = Instant::now();
        let mut tl = Timeline::new(t0);
        assert_eq!(tl.on_output(0, t0 + ms(100)), Mark::First(ms(100)));
        assert_eq!(tl.on_output(1, t0 + ms(110)), Mark::ChoiceStart);
        assert_eq!(tl.on_output(0, t0 + ms(120)), Mark::Gap(ms(20)));
        assert_eq!(tl.on_output(0, t0 + ms(140)), Mark::Gap(ms(20)));
        assert_eq!(tl.on_output(1, t0 + ms(150)), Mark::Gap(ms(40)));
        assert_eq!(tl.output_chunks(), 5);
        // 6 tokens over 2 choices: 3 a choice, TPOT = 100 ms / (3 − 1).
        let f = tl.figures(t0 + ms(200), 6);
        assert_eq!(f.ttft, Some(ms(100)));
        assert_eq!(f.tpot, Some(ms(50)));
        assert_eq!(f.max_gap, Some(ms(40)));
        let rate = f.output_tokens_per_second.unwrap_or_default();
        assert!((rate - 20.0).abs() < 1e-9, "{rate}");
        // Fewer than two tokens a choice: no TPOT.
        assert_eq!(tl.figures(t0 + ms(200), 3).tpot, None);
    }
}
