//! Which exposition a scrape gets, read from its `Accept` as Prometheus writes it: the classic text
//! format unless the scraper asks for OpenMetrics (which carries exemplars, `openmetrics.rs`) or for
//! Prometheus's delimited protobuf (native histograms and exemplars, `protobuf.rs`). Prometheus 2.x
//! asks for OpenMetrics first by default, and for protobuf first with native histograms on; curl, a
//! browser or any client that names neither gets the text page, unchanged.

/// An exposition format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`, with exemplars.
    OpenMetrics,
    /// `application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited`,
    /// with native histograms and exemplars.
    Protobuf,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Text, Format::OpenMetrics, Format::Protobuf];

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
        }
    }

    /// The format an `Accept` value asks for: of the media ranges tokentap serves, the one with the
    /// highest `q` (the first of equals); text when it names none of them, or there is none.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best = (Format::Text, 0.0f64);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let (mut q, mut proto, mut delimited) = (1.0, false, false);
            for param in parts {
                let (name, value) = param.split_once('=').unwrap_or((param, ""));
                let value = value.trim().trim_matches('"');
                match name.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse().unwrap_or(0.0),
                    "proto" => proto = value == "io.prometheus.client.MetricFamily",
                    "encoding" => delimited = value == "delimited",
                    _ => {}
                }
            }
            let format = match media.as_str() {
                "application/vnd.google.protobuf" if proto && delimited => Format::Protobuf,
                "application/openmetrics-text" => Format::OpenMetrics,
                "text/plain" | "*/*" | "text/*" => Format::Text,
                _ => continue,
            };
            if q > best.1 {
                best = (format, q);
            }
        }
        best.0
    }
}

#[cfg(test)]
mod tests {
    use super::Format::{self, *};

    #[test]
    fn what_prometheus_asks_for_is_served_and_anything_else_gets_text() {
        // Prometheus 2.42, by default and with --enable-feature=native-histograms.
        let default = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(default)), OpenMetrics);
        assert_eq!(Format::negotiate(Some(native)), Protobuf);
        for text in [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain;version=0.0.4"),
            Some("text/html,application/xhtml+xml,*/*;q=0.8"),
            Some("application/json"),
            Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"),
            Some("application/openmetrics-text;q=0"),
            Some("application/openmetrics-text;q=0.2,text/plain;q=0.9"),
        ] {
            assert_eq!(Format::negotiate(text), Text, "{text:?}");
        }
    }
}
