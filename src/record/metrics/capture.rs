//! What `tokentap capture` counts of its own reading (docs/metrics.md, "Capture mode"): the packets it
//! read, how their segments were put back in order, the connections (or the rest of one) it did not
//! meter and why, and what it follows and holds now. The requests it meters go to the request families
//! like any other's. Registered whether or not this process captures, every reason there from the
//! start, so a dashboard reads 0 rather than nothing.

use prometheus::{IntCounter, IntGauge};

use super::family::{self, CAPTURE_SEGMENT_RESULTS, CAPTURE_UNMETERED_REASONS};
use super::registry::Registrar;

/// How a segment with data was put in its place ([`CAPTURE_SEGMENT_RESULTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    InOrder,
    OutOfOrder,
    Duplicate,
    Overlap,
}

impl Placed {
    pub const ALL: [Placed; 4] = [
        Placed::InOrder,
        Placed::OutOfOrder,
        Placed::Duplicate,
        Placed::Overlap,
    ];
}

/// Why a connection, or the rest of one, was not metered ([`CAPTURE_UNMETERED_REASONS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmetered {
    /// It began before the capture did: metered from its first whole request head on.
    MidStream,
    /// Bytes the capture never read.
    LostSegment,
    /// Bytes that are not HTTP/1.1 (TLS, h2c, a malformed head).
    NotHttp,
    /// A WebSocket (or other) upgrade: not read in capture mode.
    Upgrade,
    /// `capture.max_connections` were followed.
    MaxConnections,
    /// `capture.max_connection_bytes`, or the governor's `capture_flows` (its cap, or the client's share).
    Buffer,
}

impl Unmetered {
    pub const ALL: [Unmetered; 6] = [
        Unmetered::MidStream,
        Unmetered::LostSegment,
        Unmetered::NotHttp,
        Unmetered::Upgrade,
        Unmetered::MaxConnections,
        Unmetered::Buffer,
    ];

    pub fn as_str(self) -> &'static str {
        CAPTURE_UNMETERED_REASONS[self as usize]
    }
}

/// The capture's own families.
#[derive(Clone)]
pub struct CaptureCounters {
    pub packets: IntCounter,
    placed: [IntCounter; 4],
    unmetered: [IntCounter; 6],
    /// Connections followed now.
    pub connections: IntGauge,
}

impl CaptureCounters {
    pub(super) fn register(rows: &Registrar<'_>) -> Result<Self, prometheus::Error> {
        let placed = rows.fixed_counter(&family::CAPTURE_SEGMENTS)?;
        let unmetered = rows.fixed_counter(&family::CAPTURE_UNMETERED)?;
        Ok(CaptureCounters {
            packets: rows.single_counter(&family::CAPTURE_PACKETS)?,
            placed: Placed::ALL
                .map(|p| placed.with_label_values(&[CAPTURE_SEGMENT_RESULTS[p as usize]])),
            unmetered: Unmetered::ALL.map(|u| unmetered.with_label_values(&[u.as_str()])),
            connections: rows.single_gauge(&family::CAPTURE_CONNECTIONS)?,
        })
    }

    pub fn placed(&self, placed: Placed) {
        self.placed[placed as usize].inc();
    }

    pub fn unmetered(&self, why: Unmetered) {
        self.unmetered[why as usize].inc();
    }

    /// How many were counted for `why` so far (for tests and the capture's own log line).
    pub fn unmetered_count(&self, why: Unmetered) -> u64 {
        self.unmetered[why as usize].get()
    }

    pub fn placed_count(&self, placed: Placed) -> u64 {
        self.placed[placed as usize].get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_is_a_value_of_its_label_in_order() {
        assert_eq!(Placed::ALL.len(), CAPTURE_SEGMENT_RESULTS.len());
        let names: Vec<&str> = Unmetered::ALL.iter().map(|u| u.as_str()).collect();
        assert_eq!(names, CAPTURE_UNMETERED_REASONS);
    }
}
