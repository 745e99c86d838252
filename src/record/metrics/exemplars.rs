//! Exemplars: on each bucket of the families `family::EXEMPLARS` names, the latest observation there
//! whose request's span was exported, with that span's `trace_id` and `span_id` and tokentap's
//! request id, so a slow bucket leads to a span and a record that exist (docs/metrics.md, "Exemplars").
//!
//! Whether a request becomes a span is decided at its end (`record/emit`), after its TTFT was observed
//! as it happened: so the exemplar is set then, on the bucket the request's value falls in, apart
//! from the count it was observed into. A series holds at most one exemplar per bucket; a reload that
//! changes the boundaries places each again by its value, the latest kept where two now share one.
//! Only OpenMetrics and the protobuf exposition carry them (`openmetrics.rs`, `protobuf.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use super::by_series::BySeries;

/// One exemplar: the observation's value and the request's ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// tokentap's own id of the request (`3f2a9c1e-1b`, at most 25 bytes).
    pub request_id: Arc<str>,
    pub value: f64,
    /// When it was set: the request's end, when its span was decided. Prometheus keeps an exemplar
    /// only if it is newer than the last one of its series, so this only grows.
    pub at: SystemTime,
}

impl Exemplar {
    /// Its labels, as both expositions write them: `trace_id` and `span_id` in lowercase hex (as
    /// W3C `traceparent` and Grafana's trace links read them), `request_id`. 98 characters at most,
    /// under OpenMetrics' 128.
    pub fn labels(&self) -> [(&'static str, String); 3] {
        [
            ("trace_id", hex(&self.trace_id)),
            ("span_id", hex(&self.span_id)),
            ("request_id", self.request_id.to_string()),
        ]
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The bucket `value` falls in: the index of the first boundary at or above it (`edges.len()`: `+Inf`).
pub fn bucket_of(edges: &[f64], value: f64) -> usize {
    edges.partition_point(|&edge| edge < value)
}

/// A family's exemplars: per series, (bucket, exemplar) by bucket.
#[derive(Default)]
pub struct Exemplars(Mutex<BySeries<Vec<(usize, Exemplar)>>>);

impl Exemplars {
    fn lock(&self) -> MutexGuard<'_, BySeries<Vec<(usize, Exemplar)>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets `exemplar` on its bucket of the series `values`, whose boundaries are `edges`.
    pub fn set(&self, values: &[&str], edges: &[f64], exemplar: Exemplar) {
        let bucket = bucket_of(edges, exemplar.value);
        let mut all = self.lock();
        let kept = all.get_or_insert_with(values, Vec::new);
        match kept.binary_search_by_key(&bucket, |(b, _)| *b) {
            Ok(at) => kept[at].1 = exemplar,
            Err(at) => kept.insert(at, (bucket, exemplar)),
        }
    }

    /// The exemplars of the series `values`, by bucket.
    pub fn of<S: AsRef<str>>(&self, values: &[S]) -> Vec<(usize, Exemplar)> {
        self.lock().get(values).cloned().unwrap_or_default()
    }

    /// Places every exemplar again under new boundaries, the latest kept where two share a bucket.
    pub fn rebucket(&self, edges: &[f64]) {
        for (_, kept) in self.lock().iter_mut() {
            let mut placed: Vec<(usize, Exemplar)> = Vec::with_capacity(kept.len());
            for (_, exemplar) in kept.drain(..) {
                let bucket = bucket_of(edges, exemplar.value);
                match placed.binary_search_by_key(&bucket, |(b, _)| *b) {
                    Ok(at) if placed[at].1.at <= exemplar.at => placed[at].1 = exemplar,
                    Ok(_) => {}
                    Err(at) => placed.insert(at, (bucket, exemplar)),
                }
            }
            *kept = placed;
        }
    }

    /// Forgets the series whose label at `position` is one of `names` (a retired model or tenant).
    pub fn purge(&self, position: usize, names: &HashSet<Arc<str>>) {
        self.lock()
            .retain(|key, _| !key.get(position).is_some_and(|v| names.contains(&**v)));
    }

    /// Exemplars held, over every series.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().iter_mut().map(|(_, kept)| kept.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn exemplar(value: f64, at: u64) -> Exemplar {
        Exemplar {
            trace_id: [at as u8; 16],
            span_id: [1; 8],
            request_id: Arc::from(format!("r-{at}")),
            value,
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at),
        }
    }

    #[test]
    fn a_bucket_keeps_its_latest_and_a_rebucket_places_each_by_its_value() {
        let kept = Exemplars::default();
        let edges = [0.1, 0.5, 1.0];
        kept.set(&["m"], &edges, exemplar(0.3, 1));
        kept.set(&["m"], &edges, exemplar(0.4, 2));
        kept.set(&["m"], &edges, exemplar(0.5, 3));
        kept.set(&["m"], &edges, exemplar(7.0, 4));
        let buckets = |k: &Exemplars| -> Vec<(usize, u64)> {
            (k.of(&["m"]).iter())
                .map(|(b, e)| {
                    (
                        *b,
                        e.at.duration_since(SystemTime::UNIX_EPOCH)
                            .unwrap()
                            .as_secs(),
                    )
                })
                .collect()
        };
        // 0.5 is in the bucket whose upper edge is 0.5 (le="0.5"), with 0.3 and 0.4; 7 is +Inf's.
        assert_eq!(buckets(&kept), [(1, 3), (3, 4)]);
        kept.rebucket(&[0.45, 1.0]);
        assert_eq!(buckets(&kept), [(1, 3), (2, 4)]);
        assert_eq!(kept.len(), 2);
        let labels = exemplar(0.3, 1).labels();
        assert_eq!(labels[0].1, "01".repeat(16));
        let written: usize = labels.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert!(written + "ffffffff-ffffffffffffffff".len() - 3 <= 128);
        kept.purge(0, &[Arc::from("m")].into_iter().collect());
        assert_eq!(kept.len(), 0);
    }
}
