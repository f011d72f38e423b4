//! Admission of connections that have not authenticated yet (slowloris defence).
//!
//! Every accepted connection is *pending* from the moment it is accepted until it is either
//! authenticated (then an upgrade takes one of the `MAX_CONNECTIONS` slots, which only
//! authenticated clients can hold) or answered and closed (a refusal, `/health`). Pending
//! connections have their own budget, `MAX_PENDING_CONNECTIONS`, and each client address may
//! hold at most `MAX_PENDING_PER_ADDRESS` of it (IPv6 counted per /64, which one host usually
//! holds whole).
//!
//! A full budget never turns a newcomer away: it **evicts** an older pending connection, which
//! gets a 503 and is closed, and the newcomer is admitted. The victim is the oldest pending
//! connection of the newcomer's own address when that address is at its limit, otherwise the
//! oldest one of the address holding the most pending connections. So:
//! - `/health` and an authenticated client, which send their head at once, are admitted even
//!   while an attacker holds every pending slot, and are not evicted during the few
//!   milliseconds they need unless they are the oldest of the most-represented address;
//! - an attacker on one address can only ever evict its own connections once it is at its
//!   per-address limit (clients behind the same NAT lose only their oldest idle sockets);
//! - to displace a well-behaved client, an attacker must open connections from more addresses,
//!   faster than that client sends its head.
//!
//! Idle sockets are also cut by the header timeout (`PROXY_HEADER_TIMEOUT_SECONDS`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// The budget of pending connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingLimits {
    /// Connections not yet authenticated, at most (all addresses).
    pub max_pending: usize,
    /// Of those, from one client address (IPv6: one /64), at most.
    pub max_per_address: usize,
}

/// The key a client's pending connections are counted under.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut seg = v6.segments();
                seg[4..].fill(0);
                IpAddr::V6(seg.into())
            }
        },
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    total: usize,
    /// Per client key, its pending connections by admission order (ids only grow).
    by_client: HashMap<IpAddr, BTreeMap<u64, CancellationToken>>,
}

impl State {
    fn remove(&mut self, key: IpAddr, id: u64) -> Option<CancellationToken> {
        let conns = self.by_client.get_mut(&key)?;
        let token = conns.remove(&id)?;
        if conns.is_empty() {
            self.by_client.remove(&key);
        }
        self.total -= 1;
        Some(token)
    }

    /// The connection to evict to admit one more from `key`, if the budget requires one.
    fn victim(&self, key: IpAddr, limits: PendingLimits) -> Option<(IpAddr, u64)> {
        let own = self.by_client.get(&key);
        if own.is_some_and(|c| c.len() >= limits.max_per_address) {
            return own.and_then(|c| c.keys().next()).map(|id| (key, *id));
        }
        if self.total < limits.max_pending {
            return None;
        }
        self.by_client
            .iter()
            .filter_map(|(k, c)| c.keys().next().map(|oldest| (k, c.len(), *oldest)))
            // Most connections first; among equals, the one whose oldest is oldest.
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(k, _, oldest)| (*k, oldest))
    }
}

/// The registry of pending connections.
pub struct Pending {
    limits: PendingLimits,
    state: Mutex<State>,
}

/// A pending connection's place in the budget; leaves it when dropped.
pub struct PendingSlot {
    registry: Arc<Pending>,
    key: IpAddr,
    id: u64,
    evicted: CancellationToken,
}

/// Whether admitting a connection evicted another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admitted without evicting anyone.
    Free,
    /// The oldest connection of the newcomer's own address, at its limit.
    EvictedSameAddress,
    /// The oldest connection of the most-represented address, the budget being full.
    EvictedBudgetFull,
}

impl Pending {
    /// An empty pending budget with these limits (each raised to at least 1).
    pub fn new(limits: PendingLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: PendingLimits {
                max_pending: limits.max_pending.max(1),
                max_per_address: limits.max_per_address.max(1),
            },
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection from `ip`, evicting another one when the budget is full.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (PendingSlot, Admission) {
        let key = client_key(ip);
        let evicted = CancellationToken::new();
        let mut st = self.state();
        let admission = match st.victim(key, self.limits) {
            None => Admission::Free,
            Some((victim_key, victim_id)) => {
                if let Some(token) = st.remove(victim_key, victim_id) {
                    token.cancel();
                }
                if victim_key == key {
                    Admission::EvictedSameAddress
                } else {
                    Admission::EvictedBudgetFull
                }
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        st.total += 1;
        st.by_client
            .entry(key)
            .or_default()
            .insert(id, evicted.clone());
        drop(st);
        let slot = PendingSlot {
            registry: self.clone(),
            key,
            id,
            evicted,
        };
        (slot, admission)
    }

    /// Pending connections now.
    pub fn len(&self) -> usize {
        self.state().total
    }

    /// Whether no connection is pending now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PendingSlot {
    /// Completes when this connection has been evicted to admit another.
    pub fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.evicted.cancelled()
    }

    /// The token cancelled when this connection is evicted, for a watcher that does not hold
    /// the slot itself (the slot may leave the budget first, and then it never fires).
    pub fn eviction(&self) -> CancellationToken {
        self.evicted.clone()
    }

    /// Whether this connection has been evicted to admit another.
    pub fn is_evicted(&self) -> bool {
        self.evicted.is_cancelled()
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.registry.state().remove(self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn registry(max_pending: usize, max_per_address: usize) -> Arc<Pending> {
        Pending::new(PendingLimits {
            max_pending,
            max_per_address,
        })
    }

    #[test]
    fn an_address_at_its_limit_evicts_its_own_oldest() {
        let r = registry(100, 2);
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        let (b1, _) = r.admit(ip("127.0.0.2"));
        let (a3, adm) = r.admit(ip("127.0.0.1"));
        assert_eq!(adm, Admission::EvictedSameAddress);
        assert!(a1.is_evicted());
        assert!(!a2.is_evicted() && !a3.is_evicted() && !b1.is_evicted());
        assert_eq!(r.len(), 3);
        drop(a1);
        assert_eq!(r.len(), 3, "dropping an evicted slot frees nothing twice");
    }

    #[test]
    fn a_full_budget_evicts_the_oldest_of_the_most_represented_address() {
        let r = registry(4, 10);
        let (b1, _) = r.admit(ip("127.0.0.2"));
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        let (a3, _) = r.admit(ip("127.0.0.1"));
        let (c1, adm) = r.admit(ip("127.0.0.3"));
        assert_eq!(adm, Admission::EvictedBudgetFull);
        assert!(a1.is_evicted(), "the oldest of the biggest address goes");
        for s in [&b1, &a2, &a3, &c1] {
            assert!(!s.is_evicted());
        }
        assert_eq!(r.len(), 4);
        // Equal counts: the address whose oldest connection is oldest loses it.
        let (d1, _) = r.admit(ip("127.0.0.4"));
        assert!(a2.is_evicted() && !b1.is_evicted() && !d1.is_evicted());
        let (_e1, _) = r.admit(ip("127.0.0.5"));
        assert!(b1.is_evicted(), "{:?}", r.len());
        assert!(!a3.is_evicted());
    }

    #[test]
    fn slots_leave_when_dropped() {
        let r = registry(2, 2);
        let (a, adm) = r.admit(ip("::1"));
        assert_eq!(adm, Admission::Free);
        let (b, _) = r.admit(ip("::1"));
        drop(a);
        drop(b);
        assert!(r.is_empty());
        let (_c, adm) = r.admit(ip("::1"));
        assert_eq!(adm, Admission::Free);
    }

    #[tokio::test]
    async fn eviction_wakes_the_victim() {
        let r = registry(1, 1);
        let (a, _) = r.admit(ip("127.0.0.2"));
        let (_b, adm) = r.admit(ip("127.0.0.3"));
        assert_eq!(adm, Admission::EvictedBudgetFull);
        tokio::time::timeout(std::time::Duration::from_secs(5), a.evicted())
            .await
            .expect("the victim is woken");
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        assert_eq!(
            client_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(client_key(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        let r = registry(100, 1);
        let (a, _) = r.admit(ip("2001:db8::1"));
        let (_b, adm) = r.admit(ip("2001:db8::2"));
        assert_eq!(adm, Admission::EvictedSameAddress);
        assert!(a.is_evicted());
    }
}
