//! The per-request records (`request_log:`, docs/records.md): each finished request as one JSON line,
//! handed to the records' writer (`logging/records.rs`), which never waits. A record names the
//! request's span when the emitter sampled one (`trace_id`, `span_id`).

use std::sync::Arc;

use super::{Finished, Sink};
use crate::logging::records::RecordWriter;
use crate::record::request_record::{self, RequestRecord, SessionRecord};
use crate::record::session::SessionEnded;

/// Where finished requests' records go, and what they list.
pub struct Records {
    pub writer: Arc<RecordWriter>,
    /// `request_log.gaps`: list every gap.
    pub gaps: bool,
    pub max_gaps: usize,
}

impl Sink for Records {
    fn emit(&self, finished: &Finished<'_>) {
        let who = &finished.who;
        let identity = request_record::Identity {
            id: who.id,
            client_id: who.client_id,
            start: who.start,
            model: &finished.series.model,
            api: finished.api.as_str(),
            tenant: finished.series.tenant.as_deref(),
            turn: finished.turn,
            session: finished.session,
            captured: who.captured,
        };
        // Plain numbers and strings: serialising cannot fail; a record that did is not written.
        self.writer.send_with(who.client, || {
            let mut record = RequestRecord::of(&identity, finished.record, finished.gaps);
            // The span the emitter sampled, so records, spans and metrics point at each other.
            if let Some(span) = finished.span {
                record.trace_id = Some(span.trace_id.to_string());
                record.span_id = Some(span.span_id.to_string());
            }
            serde_json::to_string(&record).ok()
        });
    }

    fn session(&self, ended: &SessionEnded<'_>, model: &str) {
        let client = &crate::govern::Client::Unknown;
        self.writer.send_with(client, || {
            serde_json::to_string(&SessionRecord::of(ended, model)).ok()
        });
    }

    fn gaps(&self) -> Option<(bool, usize)> {
        Some((self.gaps, self.max_gaps))
    }
}
