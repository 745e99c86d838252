//! The OpenMetrics text exposition (`application/openmetrics-text; version=1.0.0`): the same families,
//! series and values as the classic text page, written as OpenMetrics 1.0 wants them (a counter's
//! family named without `_total`, help escaped, `# EOF` at the end), and each bucket of the families
//! that carry exemplars followed by its exemplar (`exemplars.rs`):
//!
//! ```text
//! tokentap_time_to_first_token_seconds_bucket{api="chat",model="m",le="0.5"} 7 # {trace_id="4bf9…",span_id="00f0…",request_id="3f2a9c1e-1b"} 0.43 1796288442.123
//! ```
//!
//! The `prometheus` crate's encoder writes no exemplars, so this one writes the page from the gathered
//! families; `le` values are written exactly as the classic page writes them, so a series is the same
//! series whichever format Prometheus scraped it in.

use std::io::Write;

use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::exemplars::Exemplar;
use super::rebucket::Rebucketable;

/// Writes `families` to `out`; `joined` names the registered family of a histogram that carries
/// exemplars.
pub fn encode<'a>(
    families: &[MetricFamily], joined: impl Fn(&str) -> Option<&'a Rebucketable>, out: &mut Vec<u8>,
) {
    for family in families {
        let name = family.name();
        let kind = family.get_field_type();
        let (family_name, kind_name) = match kind {
            MetricType::COUNTER => match name.strip_suffix("_total") {
                Some(stem) => (stem, "counter"),
                None => (name, "unknown"),
            },
            MetricType::GAUGE => (name, "gauge"),
            MetricType::HISTOGRAM => (name, "histogram"),
            _ => (name, "unknown"),
        };
        let _ = writeln!(out, "# TYPE {family_name} {kind_name}");
        if !family.help().is_empty() {
            let _ = writeln!(out, "# HELP {family_name} {}", escape(family.help()));
        }
        let registered = match kind {
            MetricType::HISTOGRAM => joined(name),
            _ => None,
        };
        for metric in family.get_metric() {
            match kind {
                MetricType::COUNTER => sample(
                    out,
                    name,
                    "",
                    metric,
                    None,
                    metric.get_counter().get_value(),
                ),
                MetricType::GAUGE => {
                    sample(out, name, "", metric, None, metric.get_gauge().get_value())
                }
                MetricType::HISTOGRAM => histogram(out, name, metric, registered),
                _ => {}
            }
        }
    }
    out.extend_from_slice(b"# EOF\n");
}

fn histogram(out: &mut Vec<u8>, name: &str, metric: &Metric, registered: Option<&Rebucketable>) {
    let h = metric.get_histogram();
    let exemplars = registered
        .map(|r| r.exemplars_of(metric))
        .unwrap_or_default();
    let exemplar_of = |bucket: usize| exemplars.iter().find(|(b, _)| *b == bucket).map(|(_, e)| e);
    let buckets = h.get_bucket();
    for (i, bucket) in buckets.iter().enumerate() {
        let le = bucket.upper_bound().to_string();
        let count = bucket.cumulative_count() as f64;
        bucket_sample(out, name, metric, &le, count, exemplar_of(i));
    }
    let count = h.get_sample_count() as f64;
    bucket_sample(out, name, metric, "+Inf", count, exemplar_of(buckets.len()));
    sample(out, name, "_sum", metric, None, h.get_sample_sum());
    sample(out, name, "_count", metric, None, count);
}

fn bucket_sample(
    out: &mut Vec<u8>, name: &str, metric: &Metric, le: &str, count: f64,
    exemplar: Option<&Exemplar>,
) {
    labelled(out, name, "_bucket", metric, Some(le));
    let _ = write!(out, " {}", number(count));
    if let Some(exemplar) = exemplar {
        out.extend_from_slice(b" # {");
        for (i, (label, value)) in exemplar.labels().iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(out, "{comma}{label}=\"{}\"", escape(value));
        }
        let at = exemplar
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let _ = write!(
            out,
            "}} {} {}.{:03}",
            number(exemplar.value),
            at.as_secs(),
            at.subsec_millis()
        );
    }
    out.push(b'\n');
}

fn sample(
    out: &mut Vec<u8>, name: &str, suffix: &str, metric: &Metric, le: Option<&str>, value: f64,
) {
    labelled(out, name, suffix, metric, le);
    let _ = writeln!(out, " {}", number(value));
}

/// `name{labels}` (with `le` last, when given).
fn labelled(out: &mut Vec<u8>, name: &str, suffix: &str, metric: &Metric, le: Option<&str>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(suffix.as_bytes());
    let labels = metric.get_label();
    if labels.is_empty() && le.is_none() {
        return;
    }
    let mut separator = '{';
    for pair in labels {
        let _ = write!(
            out,
            "{separator}{}=\"{}\"",
            pair.name(),
            escape(pair.value())
        );
        separator = ',';
    }
    if let Some(le) = le {
        let _ = write!(out, "{separator}le=\"{le}\"");
    }
    out.push(b'}');
}

/// A value as OpenMetrics writes one: the classic page's digits, `+Inf`, `-Inf`, `NaN`.
fn number(value: f64) -> String {
    match value {
        v if v == f64::INFINITY => "+Inf".to_owned(),
        v if v == f64::NEG_INFINITY => "-Inf".to_owned(),
        v if v.is_nan() => "NaN".to_owned(),
        v => v.to_string(),
    }
}

/// OpenMetrics' escapes, in help and label values alike: `\\`, `\"`, `\n`.
fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\\', '"', '\n']) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped.into()
}

#[cfg(test)]
mod tests {
    use crate::record::metrics::format::Format;
    use crate::record::metrics::protobuf::tests::observed;

    #[test]
    fn the_page_is_the_text_pages_series_with_the_exemplar_on_its_bucket() {
        let metrics = observed();
        let page = metrics.encode_as(Format::OpenMetrics);
        let page = std::str::from_utf8(&page).unwrap();
        let bucket = "tokentap_time_to_first_token_seconds_bucket{api=\"chat\",model=\"m\",le=\"1\"} 3 # {trace_id=\"4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b\",span_id=\"0000000000000000\",request_id=\"3f2a9c1e-1b\"} 0.7 1796288442.123\n";
        assert!(page.contains(bucket), "{page}");
        assert!(
            page.contains("# TYPE tokentap_metrics_encodes counter\n"),
            "{page}"
        );
        assert!(page.ends_with("# EOF\n"));
        // Every sample of the text page is on this one, with the same name, labels and value.
        let samples = |text: &str| -> Vec<String> {
            (text.lines())
                .filter(|l| !l.starts_with('#'))
                .map(|l| {
                    l.split(" # ")
                        .next()
                        .unwrap_or_default()
                        .replace(" inf", " +Inf")
                })
                .collect()
        };
        let text = metrics.encode_as(Format::Text);
        let mut classic = samples(std::str::from_utf8(&text).unwrap());
        let mut open = samples(page);
        // The encodes counter moved between the two pages.
        for list in [&mut classic, &mut open] {
            list.retain(|s| !s.starts_with("tokentap_metrics_encodes_total"));
        }
        assert_eq!(classic, open);
    }
}
