//! `capture:`: `tokentap capture`, the same meter fed from packets read off an interface instead of a
//! proxied connection (src/capture/, docs/deploy.md "Capture mode"): which interface and ports, and the
//! bounds on what following the connections may hold.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{format_duration, invalid, values, ConfigError};

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Capture {
    /// The interface whose packets are read (`lo`, `eth0`); `tokentap capture --interface` overrides it.
    pub interface: String,
    /// The model server's TCP ports; empty: the port of `upstream`.
    pub ports: Vec<u16>,
    /// Connections followed at once; a new one beyond them is not metered.
    pub max_connections: usize,
    /// The bytes one connection may hold (segments that came out of order, an unfinished head, a request
    /// body kept for its message list); beyond it, the connection is not metered from there on. What all
    /// connections hold together, and each client address, is the governor's `budgets.capture_flows`.
    #[serde(with = "values::size")]
    pub max_connection_bytes: usize,
    /// A connection with no packet for this long is forgotten (a request in progress on it ends as
    /// `timeout`).
    #[serde(with = "values::duration")]
    pub connection_idle: Duration,
    /// The kernel's receive buffer of the packet socket: packets that arrive while it is full are lost
    /// (each loss leaves its connection not metered).
    #[serde(with = "values::size")]
    pub socket_buffer: usize,
}

impl Default for Capture {
    fn default() -> Self {
        Capture {
            interface: "lo".to_owned(),
            ports: Vec::new(),
            max_connections: 10_000,
            max_connection_bytes: 4 << 20,
            connection_idle: Duration::from_secs(600),
            socket_buffer: 8 << 20,
        }
    }
}

impl Capture {
    /// The most ports one capture filters on (its packet filter's jumps are counted in bytes).
    pub const MAX_PORTS: usize = 16;

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let name_ok = |c: char| c.is_ascii_alphanumeric() || "-_.:@".contains(c);
        if self.interface.is_empty()
            || self.interface.len() > 15
            || !self.interface.chars().all(name_ok)
        {
            let reason = "must be an interface name of 1 to 15 characters (lo, eth0)";
            return Err(invalid(
                "capture.interface",
                "name",
                &self.interface,
                reason,
            ));
        }
        if self.ports.len() > Self::MAX_PORTS || self.ports.contains(&0) {
            let value = format!("{:?}", self.ports);
            let reason = "must be at most 16 ports, each from 1 to 65535";
            return Err(invalid("capture.ports", "list", &value, reason));
        }
        let positive = [
            ("capture.max_connections", self.max_connections),
            ("capture.max_connection_bytes", self.max_connection_bytes),
            ("capture.socket_buffer", self.socket_buffer),
        ];
        for (key, value) in positive {
            if value == 0 {
                return Err(invalid(key, "value", "0", "must be at least 1"));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(24 * 3600))
            .contains(&self.connection_idle)
        {
            let value = format_duration(self.connection_idle);
            let reason = "must be between 1s and 1d";
            return Err(invalid(
                "capture.connection_idle",
                "duration",
                &value,
                reason,
            ));
        }
        Ok(())
    }
}

impl Capture {
    /// The server's ports: `ports`, or the port of `upstream` (its scheme's when it names none).
    pub fn ports_of(&self, upstream: &http::Uri) -> Vec<u16> {
        if !self.ports.is_empty() {
            return self.ports.clone();
        }
        let default = match upstream.scheme_str() {
            Some("https") => 443,
            _ => 80,
        };
        vec![upstream.port_u16().unwrap_or(default)]
    }
}
