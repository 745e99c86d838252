//! The exported series (each one explained in docs/metrics.md), registered into an owned registry, and the
//! bounds that keep their number fixed whatever clients send.
//!
//! Labelled children are resolved once per request into a [`Series`], never per chunk. Label values come
//! from closed enums, the closed `status` set, or [`ModelLabels`], which admits at most `max_models`
//! model names the upstream confirmed and retires idle ones. Only requests on a path a dialect knows get
//! the token-level families; the rest are counted in `requests_total`, E2E and goodput only. So the
//! number of series has a fixed ceiling, computed in [`bound`] and exported next to the current count;
//! [`scrape`] encodes the page off the async workers and lets concurrent scrapes share one encoding, in
//! the format the scraper asks for (`format.rs`): the text page, OpenMetrics with the exemplars a sampled
//! request leaves on its buckets (`exemplars.rs`), or protobuf with the native histograms kept beside
//! the classic buckets of the SLO families (`native.rs`).

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use crate::config::{Config, SloKind};
use crate::govern::Governor;
use crate::record::api::Api;
use crate::record::figure::Figure;
use crate::record::served::ServedModels;

mod admission;
mod agents;
mod bound;
mod budgets;
mod by_series;
mod capture;
mod exemplars;
pub mod family;
mod finish;
pub mod format;
pub mod forwarding;
mod inside;
mod labels;
mod native;
mod openmetrics;
mod otlp;
mod protobuf;
mod purge;
mod rebucket;
mod reconfigure;
mod refusals;
mod registry;
mod scrape;
mod series;
mod sessions;
mod spans;
mod upstream;

pub use agents::Agents;
pub use bound::{Boundaries, PairCosts, SeriesBound};
pub use budgets::Budgets;
pub use capture::{CaptureCounters, Placed, Unmetered};
pub use exemplars::Exemplar;
pub use inside::Inside;
pub use labels::{
    status_label, status_labels, Lookup, ModelLabels, NO_TENANT, OTHER_MODEL, UNADMITTED_MODEL,
    UNKNOWN_MODEL,
};
pub use otlp::OtlpMetricCounters;
use rebucket::Rebucketable;
pub use rebucket::Rebuckets;
pub use reconfigure::{ConfigReloads, ReloadResult};
pub use refusals::{
    MetricsPortRefusals, Refusals, SessionCounts, METRICS_PORT_REASONS, TLS_HANDSHAKE_REASONS,
};
use registry::{Registered, Registrar};
pub use series::Series;
pub use sessions::SessionSkips;
pub use spans::SpanCounters;
pub use upstream::UpstreamCounters;

pub struct Metrics {
    registry: Registry,
    /// Each figure's histogram family (its row's), by [`Figure`].
    figure_histograms: [Option<Rebucketable>; Figure::COUNT],
    itl: Rebucketable,
    /// Bumped each time a reload swapped histogram families (`rebucket.rs`).
    rebuckets: Rebuckets,
    requests: IntCounterVec,
    input_tokens: IntCounterVec,
    output_tokens: IntCounterVec,
    goodput: IntCounterVec,
    slo_violations: IntCounterVec,
    in_flight: IntGaugeVec,
    metering_skipped: IntCounterVec,
    token_source: IntCounterVec,
    series_count: IntGauge,
    /// `tokentap_metrics_series_limit`, set again by a reload.
    limit: IntGauge,
    encodes: IntCounter,
    retired: IntCounter,
    /// The pages being encoded and sent, one set per format.
    scrapes: [scrape::Coalesce; 3],
    pub models: ModelLabels,
    /// The names the upstream lists (and the configured ones): which model names may take a place.
    pub served: Arc<ServedModels>,
    /// `tenants.allow`: the only tenant values that may take a place; empty: any answered 2xx.
    tenants_allowed: RwLock<HashSet<String>>,
    /// The `tenant` label values, when `tenants:` is configured.
    pub tenants: Option<ModelLabels>,
    pub refusals: Refusals,
    /// tokentap's own upstream connections.
    pub upstream: UpstreamCounters,
    /// The request_log writer's counters, when `request_log:` is configured.
    pub records: Option<crate::logging::records::RecordCounters>,
    bound: RwLock<SeriesBound>,
    /// The series without labels (tokentap's own counters and gauges), as registered.
    unlabelled: usize,
    /// Config reloads and the last one that succeeded.
    pub reloads: ConfigReloads,
    /// What is inside a TTFT: reasoning, the prefix cache, the server's own timings.
    pub inside: Inside,
    /// The conversation families without a `model` label.
    pub agents: Agents,
    /// `tokentap_forwarding_delay_seconds`: tokentap's own delay per forwarded frame (`forwarding.rs`).
    pub forwarding_delay: Histogram,
    /// The spans exported to a collector (`traces:`), and those dropped.
    pub spans: SpanCounters,
    /// The WebSocket messages the realtime meter passed over unread.
    pub session_skips: SessionSkips,
    /// The governor's budgets, and what was not metered because one was spent.
    pub budgets: Budgets,
    /// The governor whose figures the budget families show, once [`Metrics::watch`] was told it.
    governor: budgets::GovernorSlot,
    /// The metric exports pushed to a collector (`otlp_metrics:`), and those dropped.
    pub otlp: OtlpMetricCounters,
    /// `tokentap capture`'s own reading: packets, segments, connections not metered.
    pub capture: CaptureCounters,
    /// The families labelled by model (and tenant), for retiring idle values.
    families: Registered,
}

impl Metrics {
    pub fn new(config: &Config) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let boundaries = bound::Boundaries::of(config);
        let mut rows = Registrar::new(&registry, &boundaries, config.tenants.is_some());
        let mut figure_histograms: [Option<Rebucketable>; Figure::COUNT] = Default::default();
        for figure in Figure::ALL {
            if figure.row().histogram.is_some() {
                let family = family::of_figure(figure);
                figure_histograms[figure as usize] = Some(rows.histogram(family)?);
            }
        }
        let itl = rows.histogram(&family::ITL)?;
        let requests = rows.counter(&family::REQUESTS)?;
        let input_tokens = rows.counter(&family::INPUT_TOKENS)?;
        let output_tokens = rows.counter(&family::OUTPUT_TOKENS)?;
        let goodput = rows.counter(&family::GOODPUT)?;
        let slo_violations = rows.counter(&family::SLO_VIOLATIONS)?;
        let metering_skipped = rows.fixed_counter(&family::METERING_SKIPPED)?;
        let token_source = rows.counter(&family::TOKEN_SOURCE)?;
        let in_flight = rows.gauge(&family::IN_FLIGHT)?;
        registry.register(Box::new(crate::logging::DroppedLinesCollector::new()?))?;
        let refusals = Refusals::register(&rows)?;
        let upstream = UpstreamCounters::register(&rows)?;
        let records = match &config.request_log {
            Some(_) => Some(crate::logging::records::RecordCounters::register(
                &registry,
            )?),
            None => None,
        };
        let inside = Inside::register(&mut rows)?;
        let forwarding_delay = rows.single_histogram(&family::FORWARDING_DELAY)?;
        let agents = Agents::register(&rows)?;
        let spans = SpanCounters::register(&rows)?;
        let reloads = ConfigReloads::register(&rows)?;
        let session_skips = SessionSkips::register(&rows)?;
        let (budgets, governor) = Budgets::register(&rows)?;
        let otlp = OtlpMetricCounters::register(&rows)?;
        let capture = CaptureCounters::register(&rows)?;
        for api in Api::ALL {
            in_flight.with_label_values(&[api.as_str()]).set(0);
        }
        let configured = || {
            let slo = config.slo.models.keys().map(String::as_str);
            slo.chain(config.model_list.names.iter().map(String::as_str))
        };
        let models = ModelLabels::new(config.max_models, config.metrics.model_idle, configured());
        let listed = rows.single_gauge(&family::MODELS_LISTED)?;
        let served = Arc::new(ServedModels::new(configured(), listed));
        let tenants_allowed = RwLock::new(reconfigure::tenants_allowed(config));
        let tenants = config.tenants.as_ref().map(|t| {
            let pinned = config.slo.tenants.keys().map(String::as_str);
            ModelLabels::for_tenants(t.max, config.metrics.model_idle, pinned)
        });
        let limit = rows.single_gauge(&family::SERIES_LIMIT)?;
        let series_count = rows.single_gauge(&family::SERIES)?;
        let encodes = rows.single_counter(&family::ENCODES)?;
        let retired = rows.single_counter(&family::LABELS_RETIRED)?;
        let families = rows.finish()?;
        let unlabelled = registry
            .gather()
            .iter()
            .filter(|family| family.get_metric().iter().all(|m| m.get_label().is_empty()))
            .map(scrape::series_in)
            .sum();
        let tenant_values = tenants.as_ref().map_or(1, ModelLabels::max_values);
        let bound = boundaries.series_limit(&bound::Caps {
            slo: &config.slo,
            reserved_values: models.pinned() + 3,
            places: models.max_values() - models.pinned() - 3,
            tenant_values,
            unlabelled,
            records: records.is_some(),
            max_series: config.metrics.max_series,
        });
        models.set_budget(bound.costs.clone(), bound.budget());
        limit.set(bound.total);
        Ok(Metrics {
            registry,
            figure_histograms,
            itl,
            rebuckets: Rebuckets::default(),
            limit,
            requests,
            input_tokens,
            output_tokens,
            goodput,
            slo_violations,
            in_flight,
            metering_skipped,
            token_source,
            series_count,
            encodes,
            retired,
            scrapes: Default::default(),
            models,
            served,
            tenants_allowed,
            tenants,
            refusals,
            upstream,
            records,
            bound: RwLock::new(bound),
            unlabelled,
            reloads,
            inside,
            agents,
            forwarding_delay,
            spans,
            session_skips,
            budgets,
            governor,
            otlp,
            capture,
            families,
        })
    }

    /// Shows `governor`'s budgets in the budget families (once; a second governor is refused).
    pub fn watch(&self, governor: Arc<Governor>) -> Result<(), prometheus::Error> {
        self.governor.set(governor).map_err(|_| {
            prometheus::Error::Msg("the budget families already show a governor".into())
        })
    }

    /// The most series this process can export, and how that figure is made.
    pub fn bound(&self) -> SeriesBound {
        self.bound
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every family's current values, as a scrape would see them (the live page's snapshots read this).
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    pub fn in_flight(&self, api: Api) -> IntGauge {
        self.in_flight.with_label_values(&[api.as_str()])
    }

    /// Counts a finished request (`status` from [`status_label`]); its model name was in use until now.
    pub fn count_request(&self, series: &Series, status: &str, outcome: &str) {
        let (model, api) = (&*series.model, series.api.as_str());
        match &series.tenant {
            Some(tenant) => {
                let labels = [model, api, status, outcome, tenant];
                self.requests.with_label_values(&labels).inc();
                if let Some(tenants) = &self.tenants {
                    tenants.touch(tenant);
                }
            }
            None => self
                .requests
                .with_label_values(&[model, api, status, outcome])
                .inc(),
        }
        self.models.touch(&series.model);
    }

    pub fn count_violation(&self, series: &Series, slo: SloKind) {
        self.slo_violations
            .with_label_values(&[&*series.model, series.api.as_str(), slo.as_str()])
            .inc();
    }

    pub fn count_token_source(&self, series: &Series, source: &str) {
        self.token_source
            .with_label_values(&[&*series.model, series.api.as_str(), source])
            .inc();
    }

    pub fn count_metering_skipped(&self, api: Api, reason: &str) {
        self.metering_skipped
            .with_label_values(&[api.as_str(), reason])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tokens::TokenSource;

    #[test]
    fn slo_ceilings_become_bucket_boundaries() {
        assert_eq!(
            bound::with_boundaries(&[0.1, 0.5, 1.0], &[0.25, 0.5]),
            vec![0.1, 0.25, 0.5, 1.0]
        );
    }

    fn page_series(metrics: &Metrics) -> i64 {
        let families = metrics.registry.gather();
        families.iter().map(scrape::series_in).sum::<usize>() as i64
    }

    fn limit(metrics: &Metrics) -> i64 {
        let family = metrics.registry.gather();
        let limit = family
            .iter()
            .find(|f| f.name() == family::SERIES_LIMIT.name);
        limit.map_or(0, |f| f.get_metric()[0].get_gauge().get_value() as i64)
    }

    /// Counts every label value each family can take, for every model (and tenant) value and API.
    fn fill_every_combination(metrics: &Metrics, tenants: &[Option<&str>]) {
        use crate::record::outcome::Outcome;
        for reason in family::SESSION_SKIP_REASONS {
            metrics.session_skips.count(reason);
        }
        let outcomes = ["ok", "cancelled", "upstream_error", "timeout"];
        let sources = TokenSource::ALL.map(TokenSource::as_str);
        let reasons = ["event_too_large", "malformed_event"];
        let names = [Some("a"), Some("b"), Some("c"), None, Some("bad\n")];
        for (name, confirmed) in names.iter().flat_map(|n| [(n, true), (n, false)]) {
            for (tenant, tenant_confirmed) in tenants.iter().flat_map(|t| [(t, true), (t, false)]) {
                let label = metrics.model_label(*name, None, confirmed);
                let tenant = metrics.tenant_label(*tenant, tenant_confirmed);
                for api in Api::ALL {
                    let mut series = metrics.series_of(label.clone(), tenant.clone(), api);
                    for figure in Figure::ALL {
                        series.observe(metrics, figure, 1.0);
                    }
                    series.observe_gap(metrics, 1.0);
                    finish::count_on(&metrics.goodput, &family::GOODPUT, &series, 1);
                    for (status, outcome) in status_labels().flat_map(|s| outcomes.map(|o| (s, o)))
                    {
                        metrics.count_request(&series, status, outcome);
                    }
                    let kinds = match api {
                        Api::Other => &[SloKind::E2e][..],
                        _ => &[SloKind::E2e, SloKind::Ttft][..],
                    };
                    for &kind in kinds {
                        metrics.count_violation(&series, kind);
                    }
                    if series.known() {
                        finish::count_on(&metrics.input_tokens, &family::INPUT_TOKENS, &series, 1);
                        finish::count_on(
                            &metrics.output_tokens,
                            &family::OUTPUT_TOKENS,
                            &series,
                            1,
                        );
                        metrics.observe_at(&series, &family::THINK_TIME, None, 1.0);
                        for turn in crate::record::conversations::TURN_LABELS {
                            for row in [&family::TURN_TTFT, &family::TURN_INPUT_TOKENS] {
                                metrics.observe_at(&series, row, Some(turn), 1.0);
                            }
                        }
                        let second = std::time::Duration::from_secs(1);
                        metrics.inside.count_tokens(&series, Some(1), Some(1));
                        let server = crate::record::server::ServerTimings {
                            queue: Some(second),
                            ttft: Some(second),
                            prefill: Some(second),
                            generation: Some(second),
                        };
                        let outside =
                            crate::record::server::outside(Some(second), Some(2 * second));
                        metrics.inside.observe_server(&series, &server, outside);
                        for source in sources {
                            metrics.count_token_source(&series, source);
                        }
                        for reason in reasons {
                            metrics.count_metering_skipped(api, reason);
                        }
                        for outcome in [
                            Outcome::Ok,
                            Outcome::Cancelled,
                            Outcome::UpstreamError,
                            Outcome::Timeout,
                        ] {
                            metrics.count_session(&series, outcome, 1.0, 1);
                        }
                    }
                }
            }
        }
    }

    /// The page then holds exactly the series limit, so the limit is neither too low (a bound that
    /// lies) nor loose.
    #[test]
    fn every_combination_of_label_values_fills_exactly_the_series_limit() {
        let yaml = "max_models: 2\nslo: {e2e: 30s, ttft: 1s}\nbuckets: {ttft: [0.5], itl: [0.1], tpot: [0.1], e2e: [1, 10], output_tokens_per_second: [10]}";
        let config = Config::from_yaml_str(yaml).unwrap();
        let metrics = Metrics::new(&config).unwrap();
        fill_every_combination(&metrics, &[None]);
        // a, b, unknown, other, unadmitted.
        assert_eq!(metrics.models.max_values(), 5);
        assert_eq!(page_series(&metrics), limit(&metrics));
    }

    #[test]
    fn with_tenants_and_records_every_combination_fills_exactly_the_series_limit() {
        let yaml = "max_models: 2\nslo: {e2e: 30s, ttft: 1s}\nbuckets: {ttft: [0.5], itl: [0.1], tpot: [0.1], e2e: [1, 10], output_tokens_per_second: [10]}\ntenants: {header: x-tenant, max: 2}\nrequest_log: {path: /dev/null}";
        let config = Config::from_yaml_str(yaml).unwrap();
        let metrics = Metrics::new(&config).unwrap();
        let tenants = [Some("x"), Some("y"), Some("z"), None, Some("bad\r")];
        fill_every_combination(&metrics, &tenants);
        // x, y, none, other, unadmitted.
        assert_eq!(metrics.bound().tenants, 5);
        assert_eq!(page_series(&metrics), limit(&metrics));
        let plain = Metrics::new(
            &Config::from_yaml_str(&yaml[..yaml.find("\ntenants").unwrap_or(0)]).unwrap(),
        )
        .unwrap();
        assert!(
            limit(&metrics) > 2 * limit(&plain),
            "the tenant label multiplies four families"
        );
    }

    #[test]
    fn tenant_labels_are_capped_with_overflow_other_and_none_without_a_tenant() {
        let config =
            Config::from_yaml_str("tenants: {header: t, max: 2, slo: {pinned: {ttft: 1s}}}")
                .unwrap();
        let metrics = Metrics::new(&config).unwrap();
        let label = |t: Option<&str>| metrics.tenant_label(t, true).map(|l| l.to_string());
        assert_eq!(label(Some("acme")), Some("acme".into()));
        assert_eq!(
            label(Some("globex")),
            Some("other".into()),
            "one place left was the pinned one's"
        );
        assert_eq!(label(Some("pinned")), Some("pinned".into()));
        assert_eq!(label(None), Some("none".into()));
        assert_eq!(
            metrics.tenant_label(Some("new"), false).as_deref(),
            Some("unadmitted")
        );
        let plain = Metrics::new(&Config::default()).unwrap();
        assert_eq!(plain.tenant_label(Some("acme"), true), None);
    }

    #[test]
    fn only_the_values_always_counted_can_make_a_configuration_too_large() {
        let bound = |yaml: &str| {
            Metrics::new(&Config::from_yaml_str(yaml).unwrap())
                .unwrap()
                .bound()
        };
        // 500 LoRA adapters and 32 tenants: both fit, since the names share the budget.
        for yaml in [
            "max_models: 500",
            "max_models: 64\ntenants: {header: t, max: 32}",
        ] {
            let bound = bound(yaml);
            assert!(bound.check(750_000).is_ok(), "{yaml}: {}", bound.describe());
            assert_eq!(bound.total, 750_000, "{yaml}");
        }
        // Twenty configured names with a tenant label of 35 values are counted up front: too many.
        let names: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        let yaml = format!(
            "model_list: {{names: [{}]}}\ntenants: {{header: t, max: 32}}",
            names.join(", ")
        );
        let refusal = bound(&yaml).check(750_000).unwrap_err();
        let want = "metrics.max_series: the 23 model values always counted (unknown, other, unadmitted and the names under slo.models and model_list.names), each up to ";
        assert!(refusal.starts_with(want), "{refusal}");
        assert!(refusal.contains("with 35 tenant values"), "{refusal}");
        assert!(refusal.contains("above the budget of 750000"), "{refusal}");
        let small = bound("max_models: 2");
        assert!(small.total < 750_000, "two names cannot fill the budget");
        assert_eq!(
            small.total as usize,
            small.reserved + 2 * small.costs.of(u16::MAX)
        );
    }

    /// A budget for one pair and a bit: a second name's first pair counts as `other`, a name's second
    /// pair too; retiring the first name gives its pair back.
    #[tokio::test(start_paused = true)]
    async fn a_pair_beyond_the_budget_counts_as_other_until_a_name_is_retired() {
        let probe = Metrics::new(&Config::from_yaml_str("max_models: 5").unwrap())
            .unwrap()
            .bound();
        let chat = probe.costs.of(1 << Api::Chat as usize);
        let max_series = probe.reserved + chat + chat / 2;
        let yaml = format!("max_models: 5\nmetrics: {{max_series: {max_series}, model_idle: 1m}}");
        let metrics = Metrics::new(&Config::from_yaml_str(&yaml).unwrap()).unwrap();
        let series = |name: &str, api: Api| {
            let label = metrics.model_label(Some(name), None, true);
            metrics.series(label, api).model.to_string()
        };
        assert_eq!(series("a", Api::Chat), "a");
        assert_eq!(series("a", Api::Chat), "a", "a pair is counted once");
        assert_eq!(series("b", Api::Chat), OTHER_MODEL);
        assert_eq!(series("a", Api::Completions), OTHER_MODEL);
        assert_eq!(
            series("c", Api::Other),
            "c",
            "a pair that fits what is left"
        );
        tokio::time::advance(std::time::Duration::from_secs(61)).await;
        assert_eq!(
            series("b", Api::Chat),
            "b",
            "a and the other idle name were retired"
        );
        let (spent, cap) = metrics.models.budget().unwrap();
        assert!(
            spent <= cap && cap == metrics.bound().budget(),
            "{spent} {cap}"
        );
    }

    #[test]
    fn with_a_small_budget_every_combination_stays_within_the_limit() {
        let probe = Metrics::new(&Config::from_yaml_str("max_models: 2").unwrap())
            .unwrap()
            .bound();
        let yaml = format!(
            "max_models: 2\nmetrics: {{max_series: {}}}",
            probe.reserved + 500
        );
        let metrics = Metrics::new(&Config::from_yaml_str(&yaml).unwrap()).unwrap();
        fill_every_combination(&metrics, &[None]);
        let (page, limit) = (page_series(&metrics), limit(&metrics));
        assert!(
            page <= limit && limit == probe.reserved as i64 + 500,
            "{page} {limit}"
        );
    }

    #[test]
    fn the_default_limit_is_the_one_docs_metrics_states() {
        let metrics = Metrics::new(&Config::default()).unwrap();
        // Adding a series family moves these figures: update docs/metrics.md (the series bound) with
        // them. The defaults' limit is the budget itself.
        assert_eq!(limit(&metrics), 750_000);
        let bound = metrics.bound();
        let chat = bound.costs.of(1 << Api::Chat as usize);
        assert_eq!((bound.reserved, chat), (17_410, 777));
    }
}
