//! Which label a request's model (and tenant) is counted under, and when a place is given back: the
//! rules of docs/metrics.md ("which model names take a label") in one place.
//!
//! A place goes to a name the upstream lists (`record::served`), the configured names always; while the
//! fetcher has had no answer yet, to the configured names only; and only when the upstream has no list
//! (or none is asked for) to a name on its first 2xx. A place is given back when its name has had no
//! request for `metrics.model_idle`, or when the upstream's list no longer names it (a name admitted on
//! a 2xx before a list came, a model the server unloaded): its series are removed from every family, as
//! soon as no request in flight holds the name (a request holding it writes on to its series; the name
//! goes at the next retirement after it ends). Retirement runs at each scrape and when a name needs a
//! place and every one is taken.

use std::sync::{Arc, PoisonError};

use super::family::Label;
use super::{Lookup, Metrics};
use crate::record::served::ListState;

/// What a request's name may do with a place.
enum Admission<'a> {
    /// Counted under this name's own label if it holds a place, or takes a free one when `take`.
    Lookup(Option<&'a str>, bool),
    /// A name the upstream's list lacks (or any unconfigured name while the list is pending): counted
    /// as `unadmitted` even while it still holds a place the list dropped.
    Refused(Option<&'a str>),
}

impl Metrics {
    /// The `tenant` label for a request's tenant (`None`: it named none), `two_xx` when the upstream
    /// answered 2xx; `None` when `tenants:` is not configured. Capped as the model is; with
    /// `tenants.allow`, only those values (and the `tenants.slo` ones) take a place, else a value takes
    /// one on its first 2xx.
    pub fn tenant_label(&self, tenant: Option<&str>, two_xx: bool) -> Option<Arc<str>> {
        let tenants = self.tenants.as_ref()?;
        let admit = {
            let allowed = (self.tenants_allowed.read()).unwrap_or_else(PoisonError::into_inner);
            match allowed.is_empty() {
                true => two_xx,
                false => tenant.is_some_and(|t| allowed.contains(t)),
            }
        };
        Some(match tenants.lookup(tenant, admit) {
            Lookup::Label(label) => label,
            Lookup::Full if self.retire() == 0 => tenants.overflow(),
            Lookup::Full => match tenants.lookup(tenant, admit) {
                Lookup::Label(label) => label,
                Lookup::Full => tenants.overflow(),
            },
        })
    }

    /// The `model` label of a request that named `request` (its body's `model`) and whose response named
    /// `response`, `two_xx` when the upstream answered 2xx. While the upstream lists its models (and
    /// while its list is pending), a name it lists (or the configuration names) takes a place, the
    /// request's own name first, else the one the response gives (the model that answered, when the
    /// client's name was an alias); any other is `unadmitted`. An upstream that lists nothing admits a
    /// name with its first 2xx. When every place is taken, names idle or no longer listed are retired
    /// first.
    pub fn model_label(
        &self, request: Option<&str>, response: Option<&str>, two_xx: bool,
    ) -> Arc<str> {
        let (model, admit) = match self.admission(request, response, two_xx) {
            Admission::Lookup(model, admit) => (model, admit),
            Admission::Refused(named) => return self.models.refused(named),
        };
        match self.models.lookup(model, admit) {
            Lookup::Label(label) => label,
            Lookup::Full if self.retire() == 0 => self.models.overflow(),
            Lookup::Full => match self.models.lookup(model, admit) {
                Lookup::Label(label) => label,
                Lookup::Full => self.models.overflow(),
            },
        }
    }

    /// Which name a request is counted under, and what it may do with a place.
    fn admission<'a>(
        &self, request: Option<&'a str>, response: Option<&'a str>, two_xx: bool,
    ) -> Admission<'a> {
        let named = request.filter(|n| !n.is_empty()).or(response);
        if self.served.state() == ListState::Unlisted {
            return Admission::Lookup(named, two_xx);
        }
        // Listed, or pending (the configured names only, as a list of them).
        let listed = [request, response].into_iter().flatten();
        if let Some(listed) = listed.into_iter().find(|n| self.served.lists(n)) {
            return Admission::Lookup(Some(listed), true);
        }
        if two_xx && named.is_some() {
            self.served.want_refresh();
        }
        Admission::Refused(named)
    }

    /// Retires the model names idle for `metrics.model_idle`, and those the upstream's list no longer
    /// names, that no request in flight holds: each one's series are removed from every family labelled
    /// by model, and its place under `max_models` is free again; idle tenants likewise.
    pub fn retire(&self) -> usize {
        let listing = self.served.has_list();
        let dropped = |name: &str| listing && !self.served.lists(name);
        let mut retired = self
            .models
            .retire(dropped, |names| self.families.purge(Label::Model, names));
        if let Some(tenants) = &self.tenants {
            retired += tenants.retire(|_| false, |names| self.families.purge(Label::Tenant, names));
        }
        if retired > 0 {
            self.retired.inc_by(retired as u64);
            tracing::debug!(retired, "model labels retired (idle, or no longer listed)");
        }
        retired
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::record::metrics::Metrics;
    use crate::record::served::ServedModel;

    fn model(id: &str) -> ServedModel {
        ServedModel {
            id: id.into(),
            root: None,
        }
    }

    #[test]
    fn pending_admits_the_configured_names_only_and_a_new_list_takes_back_what_it_lacks() {
        let config = Config::from_yaml_str("max_models: 2\nmodel_list: {names: [pinned]}").unwrap();
        let metrics = Metrics::new(&config).unwrap();
        let label = |name: &str, two_xx: bool| metrics.model_label(Some(name), None, two_xx);
        // No fetcher: the 2xx admits.
        assert_eq!(&*label("early", true), "early");
        metrics.served.set(vec![model("listed")]);
        assert_eq!(&*label("early", true), "unadmitted", "the list lacks it");
        assert_eq!(metrics.retire(), 1, "its place given back");
        assert_eq!(&*label("listed", false), "listed", "listed: any status");
        assert_eq!(&*label("pinned", true), "pinned");
        // A list in the response: the client's alias counts as the model that answered.
        assert_eq!(
            &*metrics.model_label(Some("alias"), Some("listed"), true),
            "listed"
        );
        assert_eq!(&*metrics.model_label(None, None, true), "unknown");
        // Pending (a fetcher that has not answered) admits nothing but the configured names.
        let pending = Metrics::new(&config).unwrap();
        pending.served.ask();
        let label = |name: &str| pending.model_label(Some(name), None, true);
        assert_eq!(
            [&*label("junk"), &*label("pinned")],
            ["unadmitted", "pinned"]
        );
        pending.served.set(Vec::new());
        assert_eq!(
            &*label("junk"),
            "junk",
            "an explicit no-list: the 2xx admits"
        );
    }
}
