//! The gateway's Prometheus metrics: connections held for starting sessions and how long,
//! store lookups, dials, refusals by reason, bytes relayed. Labels are fixed words.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use wallcrawler_contract::TokenError;

use super::lookup::{Place, Read};
use crate::telemetry::{AuthRefusals, Exposition, Metrics, counter, counters, encode, gauge};

/// Why the gateway answered a request itself instead of relaying it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The credential was refused (401).
    Unauthorized,
    /// The session has ended (410).
    SessionEnded,
    /// No such session (404).
    UnknownSession,
    /// The session did not become ready within the hold bound (503).
    HoldTimeout,
    /// Too many clients held (for this session or in all) (503).
    HeldAtCapacity,
    /// Too many relayed connections (503).
    AtCapacity,
    /// The session store could not be read (503).
    LookupFailed,
    /// The task could not be dialled, or its item names no address (502).
    BadGateway,
    /// No public key loaded (503).
    NotReady,
    /// Malformed request, bad upgrade, unknown route (4xx).
    BadRequest,
    /// Headers not complete in time (408).
    HeaderTimeout,
    /// Evicted from the pending budget (503).
    Evicted,
    /// A malformed PROXY protocol header from a trusted network (closed).
    ProxyHeader,
    /// The TLS handshake failed (closed).
    TlsHandshake,
}

impl Refused {
    /// Every reason, one series each, in this order.
    pub const ALL: [Refused; 14] = [
        Self::Unauthorized,
        Self::SessionEnded,
        Self::UnknownSession,
        Self::HoldTimeout,
        Self::HeldAtCapacity,
        Self::AtCapacity,
        Self::LookupFailed,
        Self::BadGateway,
        Self::NotReady,
        Self::BadRequest,
        Self::HeaderTimeout,
        Self::Evicted,
        Self::ProxyHeader,
        Self::TlsHandshake,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::SessionEnded => "session_ended",
            Self::UnknownSession => "unknown_session",
            Self::HoldTimeout => "hold_timeout",
            Self::HeldAtCapacity => "held_at_capacity",
            Self::AtCapacity => "at_capacity",
            Self::LookupFailed => "lookup_failed",
            Self::BadGateway => "bad_gateway",
            Self::NotReady => "not_ready",
            Self::BadRequest => "bad_request",
            Self::HeaderTimeout => "header_timeout",
            Self::Evicted => "evicted",
            Self::ProxyHeader => "proxy_header",
            Self::TlsHandshake => "tls_handshake",
        }
    }
}

/// Lookup results, one series each.
const LOOKUPS: [&str; 6] = [
    "ready",
    "starting",
    "ended",
    "unknown",
    "unroutable",
    "error",
];

/// The relay thread's metrics, of which only the bytes each way are registered (under the
/// gateway's names).
fn relay_bytes(registry: &mut Registry) -> Arc<Metrics> {
    let relay = Metrics::new();
    registry.register(
        "wallcrawler_gateway_bytes_client_to_task",
        "Bytes relayed from clients to tasks",
        relay.bytes_client_to_chrome.clone(),
    );
    registry.register(
        "wallcrawler_gateway_bytes_task_to_client",
        "Bytes relayed from tasks to clients",
        relay.bytes_chrome_to_client.clone(),
    );
    relay
}

/// The gateway's series.
pub struct GatewayMetrics {
    /// TCP connections being handled now.
    pub connections_open: Gauge,
    /// Clients held now, waiting for their session to become ready.
    pub held: Gauge,
    /// How long held clients waited (until served, refused or gone), seconds.
    pub hold_seconds: Histogram,
    /// Connections relayed to a task now.
    pub relayed: Gauge,
    /// Connections made to tasks (each dial attempt).
    pub dials: Counter,
    /// Dials that failed.
    pub dial_failures: Counter,
    lookups: [Counter; LOOKUPS.len()],
    refusals: [Counter; Refused::ALL.len()],
    auth_refusals: AuthRefusals,
    /// The relay thread's byte counters (its own [`Metrics`]; only the bytes are exposed).
    pub relay: Arc<Metrics>,
    registry: Registry,
}

impl GatewayMetrics {
    /// Every series registered, at zero.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let connections_open = gauge(
            &mut registry,
            "wallcrawler_gateway_connections_open",
            "TCP connections being handled now",
        );
        let held = gauge(
            &mut registry,
            "wallcrawler_gateway_held",
            "Clients held now, waiting for their session to become ready",
        );
        let relayed = gauge(
            &mut registry,
            "wallcrawler_gateway_relayed",
            "Connections relayed to a task now",
        );
        let hold_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        registry.register_with_unit(
            "wallcrawler_gateway_hold",
            "Time clients were held for a starting session",
            Unit::Seconds,
            hold_seconds.clone(),
        );
        let dials = counter(
            &mut registry,
            "wallcrawler_gateway_dials",
            "Connections made to tasks",
        );
        let dial_failures = counter(
            &mut registry,
            "wallcrawler_gateway_dial_failures",
            "Connections to tasks that failed",
        );
        let lookups = counters(
            &mut registry,
            (
                "wallcrawler_gateway_lookups",
                "Reads of the session store, by what they found",
            ),
            "result",
            LOOKUPS,
        );
        let refusals = counters(
            &mut registry,
            (
                "wallcrawler_gateway_refusals",
                "Requests answered by the gateway itself, by reason",
            ),
            "reason",
            Refused::ALL.map(Refused::label),
        );
        let auth_refusals =
            AuthRefusals::register(&mut registry, "wallcrawler_gateway_auth_refusals");
        let relay = relay_bytes(&mut registry);
        Arc::new(Self {
            connections_open,
            held,
            hold_seconds,
            relayed,
            dials,
            dial_failures,
            lookups,
            refusals,
            auth_refusals,
            relay,
            registry,
        })
    }

    /// Counts one read of the session store.
    pub fn lookup(&self, found: &Read) {
        let i = match found {
            Ok(Place::Ready(_)) => 0,
            Ok(Place::Starting) => 1,
            Ok(Place::Ended) => 2,
            Ok(Place::Unknown) => 3,
            Ok(Place::Unroutable) => 4,
            Err(_) => 5,
        };
        self.lookups[i].inc();
    }

    /// Counts a request the gateway answered itself.
    pub fn refused(&self, r: Refused) {
        self.refusals[r as usize].inc();
    }

    /// Counts a refused credential.
    pub fn auth_refused(&self, e: TokenError) {
        self.auth_refusals.count(e);
    }

    /// Requests refused for `r` so far.
    pub fn refused_count(&self, r: Refused) -> u64 {
        self.refusals[r as usize].get()
    }
}

impl Exposition for GatewayMetrics {
    fn render(&self) -> String {
        encode(&[&self.registry])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_exposed_and_indexed() {
        for (i, r) in Refused::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
        let m = GatewayMetrics::new();
        m.refused(Refused::SessionEnded);
        m.lookup(&Ok(Place::Starting));
        m.auth_refused(TokenError::Expired);
        m.held.inc();
        m.dials.inc();
        m.relay.bytes_client_to_chrome.inc_by(3);
        let text = m.render();
        for line in [
            "wallcrawler_gateway_refusals_total{reason=\"session_ended\"} 1",
            "wallcrawler_gateway_lookups_total{result=\"starting\"} 1",
            "wallcrawler_gateway_auth_refusals_total{reason=\"expired\"} 1",
            "wallcrawler_gateway_held 1",
            "wallcrawler_gateway_dials_total 1",
            "wallcrawler_gateway_bytes_client_to_task_total 3",
            "wallcrawler_gateway_hold_seconds_count 0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
