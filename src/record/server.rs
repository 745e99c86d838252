//! What the upstream server says about its own handling of a request, where it reports it (vLLM's
//! per-request metrics, llama.cpp's `timings`, Ollama's durations, TGI's timing headers), kept beside
//! tokentap's own figures so the part of a TTFT outside the server can be shown (docs/metrics.md).

use std::time::Duration;

/// The server's own timings for one request; every field `None` when the server reports nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTimings {
    /// Waiting before the server scheduled the request (vLLM's queue time, TGI's queue time).
    pub queue: Option<Duration>,
    /// The server's own time to first token, from the request's arrival at the server.
    pub ttft: Option<Duration>,
    /// Prompt processing (prefill): llama.cpp `prompt_ms`, Ollama `prompt_eval_duration`.
    pub prefill: Option<Duration>,
    /// Token generation (decode): llama.cpp `predicted_ms`, Ollama `eval_duration`.
    pub generation: Option<Duration>,
}

impl ServerTimings {
    pub fn is_empty(&self) -> bool {
        *self == ServerTimings::default()
    }
}

impl ServerTimings {
    /// Takes every figure `other` reports (a later report of the same request wins).
    pub fn merge(&mut self, other: ServerTimings) {
        let fields = [
            (&mut self.queue, other.queue),
            (&mut self.ttft, other.ttft),
            (&mut self.prefill, other.prefill),
            (&mut self.generation, other.generation),
        ];
        for (kept, reported) in fields {
            if reported.is_some() {
                *kept = reported;
            }
        }
    }
}

/// TTFT − the server's TTFT of the same request: the part of the wait outside the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outside {
    pub duration: Duration,
    /// The server's TTFT was longer than tokentap's (clocks or spans that disagree): observed as 0.
    pub clamped: bool,
}

/// The part of `ttft` outside the server, when both figures exist; never negative.
pub fn outside(ttft: Option<Duration>, server_ttft: Option<Duration>) -> Option<Outside> {
    let (ttft, server) = (ttft?, server_ttft?);
    Some(Outside {
        duration: ttft.saturating_sub(server),
        clamped: server > ttft,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn outside_the_server_is_ttft_minus_the_servers_ttft_clamped_at_zero() {
        let o = outside(ms(250), ms(180));
        assert_eq!(
            o,
            Some(Outside {
                duration: Duration::from_millis(70),
                clamped: false
            })
        );
        let clamped = outside(ms(100), ms(120));
        assert_eq!(
            clamped.map(|o| (o.duration, o.clamped)),
            Some((Duration::ZERO, true))
        );
        assert_eq!(outside(ms(100), None), None);
        assert_eq!(outside(None, ms(100)), None);
    }

    #[test]
    fn a_later_report_wins_field_by_field() {
        let mut t = ServerTimings {
            queue: ms(1),
            prefill: ms(2),
            ..ServerTimings::default()
        };
        t.merge(ServerTimings {
            queue: ms(5),
            generation: ms(9),
            ..ServerTimings::default()
        });
        assert_eq!(
            (t.queue, t.prefill, t.generation, t.ttft),
            (ms(5), ms(2), ms(9), None)
        );
    }
}
