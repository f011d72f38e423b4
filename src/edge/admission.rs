//! Admission of connections that have not authenticated yet (slowloris defence).
//!
//! Every accepted connection is *pending* from the moment it is accepted until it is either
//! authenticated (then an upgrade takes one of the `MAX_CONNECTIONS` slots, which only
//! authenticated clients can hold) or answered and closed (a refusal, `/health`). Pending
//! connections have their own budget, `MAX_PENDING_CONNECTIONS`, and each client address a
//! share of it, `MAX_PENDING_PER_ADDRESS` (IPv6 counted per /64, which one host usually holds
//! whole).
//!
//! The budget is kept by **age**, not by count alone: a pending connection can be evicted
//! (answered 503 and closed) only once it has been silent for `PENDING_MIN_AGE_MS` (default
//! 500 ms, a fraction of the header timeout): that long since it was accepted, or since its
//! request head arrived ([`PendingSlot::heard`]) if it is still being answered. A client that
//! sends its request at once is never evicted, so a burst of simultaneous connects from one
//! address (a gateway, a company's NAT, a test runner) all get through, up to the hard ceiling
//! below.
//!
//! A newcomer is never turned away while the budget is full of young connections:
//! - when its address is at its share and that address's oldest connection has been silent
//!   long enough, that one is evicted; when the whole budget is full, the oldest connection of
//!   the address holding the most, among the addresses whose oldest has been silent long
//!   enough, is;
//! - when nobody is old enough, the newcomer is admitted *over* the budget, and the excess is
//!   trimmed ([`Pending::trim`], driven by [`Pending::run_trimmer`]) as soon as it ages into
//!   evictability: the budget holds again `PENDING_MIN_AGE_MS` after a burst of idle sockets;
//! - up to a hard ceiling of [`HARD_CEILING_FACTOR`] times the budget (1,024 by default),
//!   which keeps memory bounded: at the ceiling, with every pending connection younger than
//!   the minimum age, the newcomer's address loses its own oldest connection when it is at its
//!   share, otherwise the address holding the most loses its oldest (the count-only rule, as
//!   a last resort).
//!
//! So, against an attacker:
//! - idle sockets from one address or many are trimmed back to the budget once they are
//!   `PENDING_MIN_AGE_MS` old, and until then only ever take room above it: they cannot keep
//!   `/health` or an authenticated client out, which are admitted at once and, sending their
//!   head at once, are done long before they could be evicted;
//! - an attacker on one address can only ever evict its own connections (clients behind the
//!   same NAT lose only its silent sockets, or at the ceiling its oldest);
//! - to evict a well-behaved client before it is old enough, an attacker must fill the hard
//!   ceiling with connections younger than the minimum age (more than `4 × budget` new
//!   connections every `PENDING_MIN_AGE_MS`) from at least as many addresses as the ceiling
//!   (otherwise its own addresses are the most represented and pay), and then open the
//!   ceiling's worth more before that client has sent its head.
//!
//! Idle sockets are also cut by the header timeout (`PROXY_HEADER_TIMEOUT_SECONDS`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// The hard ceiling of pending connections, as a multiple of the budget.
pub const HARD_CEILING_FACTOR: usize = 4;

/// Default time a pending connection must have been silent before it can be evicted.
pub const DEFAULT_MIN_AGE: Duration = Duration::from_millis(500);

/// The budget of pending connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingLimits {
    /// Connections not yet authenticated, at most (all addresses), once the excess has aged.
    pub max_pending: usize,
    /// Of those, from one client address (IPv6: one /64), at most, likewise.
    pub max_per_address: usize,
    /// How long a pending connection must have been silent before it can be evicted.
    pub min_age: Duration,
}

impl PendingLimits {
    /// Pending connections at most, young ones admitted over the budget included.
    pub fn hard_ceiling(&self) -> usize {
        self.max_pending.saturating_mul(HARD_CEILING_FACTOR)
    }
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

/// One pending connection.
struct Entry {
    /// When it was admitted (it has sent nothing the proxy acted on since).
    since: Instant,
    /// Cancelled when it is evicted.
    evicted: CancellationToken,
}

#[derive(Default)]
struct State {
    next_id: u64,
    total: usize,
    /// Per client key, its pending connections by admission order (ids only grow, and so do
    /// their admission times: the first entry is the oldest).
    by_client: HashMap<IpAddr, BTreeMap<u64, Entry>>,
}

/// What admitting one more connection takes.
enum Choice {
    /// Room within the budget.
    Free,
    /// Evicting this connection.
    Evict(IpAddr, u64, Admission),
    /// Nobody is old enough to go: admitted over the budget.
    Over,
}

impl State {
    fn remove(&mut self, key: IpAddr, id: u64) -> Option<CancellationToken> {
        let conns = self.by_client.get_mut(&key)?;
        let entry = conns.remove(&id)?;
        if conns.is_empty() {
            self.by_client.remove(&key);
        }
        self.total -= 1;
        Some(entry.evicted)
    }

    fn evict(&mut self, key: IpAddr, id: u64) {
        if let Some(token) = self.remove(key, id) {
            token.cancel();
        }
    }

    fn count(&self, key: IpAddr) -> usize {
        self.by_client.get(&key).map_or(0, BTreeMap::len)
    }

    /// The oldest pending connection of `key`, and when it was admitted.
    fn oldest(&self, key: IpAddr) -> Option<(u64, Instant)> {
        let (id, e) = self.by_client.get(&key)?.first_key_value()?;
        Some((*id, e.since))
    }

    /// Of the addresses whose oldest connection is `evictable`, the one holding the most
    /// pending connections (among equals, the one whose oldest is oldest), with that oldest.
    fn most_represented(&self, evictable: impl Fn(Instant) -> bool) -> Option<(IpAddr, u64)> {
        self.by_client
            .iter()
            .filter_map(|(k, c)| {
                let (id, e) = c.first_key_value()?;
                evictable(e.since).then_some((*k, c.len(), *id))
            })
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(k, _, oldest)| (k, oldest))
    }

    /// What admitting one more connection from `key` at `now` takes.
    fn choose(&self, key: IpAddr, limits: &PendingLimits, now: Instant) -> Choice {
        let aged = |since: Instant| now.saturating_duration_since(since) >= limits.min_age;
        let own_full = self.count(key) >= limits.max_per_address;
        let budget_full = self.total >= limits.max_pending;
        if !own_full && !budget_full {
            return Choice::Free;
        }
        if own_full
            && let Some((id, since)) = self.oldest(key)
            && aged(since)
        {
            return Choice::Evict(key, id, Admission::EvictedSameAddress);
        }
        if budget_full && let Some((k, id)) = self.most_represented(aged) {
            return Choice::Evict(k, id, Admission::EvictedBudgetFull);
        }
        if self.total < limits.hard_ceiling() {
            return Choice::Over;
        }
        // At the ceiling and nobody old enough: the count alone decides.
        let victim = if own_full {
            self.oldest(key).map(|(id, _)| (key, id))
        } else {
            self.most_represented(|_| true)
        };
        match victim {
            Some((k, id)) => Choice::Evict(k, id, Admission::EvictedAtCeiling),
            None => Choice::Over,
        }
    }

    /// Evicts the connections beyond the budget that are old enough, oldest first: those of
    /// addresses beyond their share, then, while the whole budget is exceeded, those of the
    /// address holding the most. Returns how many went, and when the next connection beyond
    /// the budget will be old enough (`None`: within the budget).
    fn trim(&mut self, limits: &PendingLimits, now: Instant) -> (usize, Option<Instant>) {
        let aged = |since: Instant| now.saturating_duration_since(since) >= limits.min_age;
        let mut evicted = 0;
        let mut next: Option<Instant> = None;
        let beyond_share: Vec<IpAddr> = self
            .by_client
            .iter()
            .filter(|(_, c)| c.len() > limits.max_per_address)
            .map(|(k, _)| *k)
            .collect();
        for key in beyond_share {
            while self.count(key) > limits.max_per_address {
                let Some((id, since)) = self.oldest(key) else {
                    break;
                };
                if !aged(since) {
                    let at = since + limits.min_age;
                    next = Some(next.map_or(at, |n| n.min(at)));
                    break;
                }
                self.evict(key, id);
                evicted += 1;
            }
        }
        while self.total > limits.max_pending {
            let Some((key, id)) = self.most_represented(aged) else {
                break;
            };
            self.evict(key, id);
            evicted += 1;
        }
        if self.total > limits.max_pending {
            // No address's oldest is old enough: the first to be is the oldest of all.
            let first = self
                .by_client
                .values()
                .filter_map(|c| c.first_key_value().map(|(_, e)| e.since))
                .min();
            if let Some(since) = first {
                let at = since + limits.min_age;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        (evicted, next)
    }
}

/// The registry of pending connections.
pub struct Pending {
    limits: PendingLimits,
    state: Mutex<State>,
    /// Notified when a connection is admitted over the budget: wakes the trimmer
    /// ([`Pending::run_trimmer`]), the only waiter.
    over_budget: Notify,
}

/// A pending connection's place in the budget; leaves it when dropped.
pub struct PendingSlot {
    registry: Arc<Pending>,
    key: IpAddr,
    id: u64,
    evicted: CancellationToken,
}

/// How a connection was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Within the budget, evicting no one.
    Free,
    /// Over the budget, every pending connection being too young to evict; the excess is
    /// trimmed once it is old enough.
    OverBudget,
    /// Evicting the oldest connection of the newcomer's own address, at its share and silent
    /// for the minimum age.
    EvictedSameAddress,
    /// Evicting the oldest silent connection of the most-represented address, the budget
    /// being full.
    EvictedBudgetFull,
    /// Evicting a connection younger than the minimum age, at the hard ceiling (the
    /// newcomer's own address's oldest when it is at its share, else the oldest of the
    /// most-represented address).
    EvictedAtCeiling,
}

impl Admission {
    /// Whether another connection was evicted to admit this one.
    pub fn evicted(self) -> bool {
        !matches!(self, Admission::Free | Admission::OverBudget)
    }
}

impl Pending {
    /// An empty pending budget with these limits (each count raised to at least 1).
    pub fn new(limits: PendingLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: PendingLimits {
                max_pending: limits.max_pending.max(1),
                max_per_address: limits.max_per_address.max(1),
                min_age: limits.min_age,
            },
            state: Mutex::default(),
            over_budget: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent after every statement: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection from `ip`: within the budget, or by evicting a connection silent
    /// for the minimum age, or over the budget up to the hard ceiling (see the module doc).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (PendingSlot, Admission) {
        let key = client_key(ip);
        let evicted = CancellationToken::new();
        let now = Instant::now();
        let mut st = self.state();
        let admission = match st.choose(key, &self.limits, now) {
            Choice::Free => Admission::Free,
            Choice::Over => Admission::OverBudget,
            Choice::Evict(victim_key, victim_id, admission) => {
                st.evict(victim_key, victim_id);
                admission
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        st.total += 1;
        st.by_client.entry(key).or_default().insert(
            id,
            Entry {
                since: now,
                evicted: evicted.clone(),
            },
        );
        drop(st);
        if admission == Admission::OverBudget {
            self.over_budget.notify_one();
        }
        let slot = PendingSlot {
            registry: self.clone(),
            key,
            id,
            evicted,
        };
        (slot, admission)
    }

    /// Evicts the connections beyond the budget that have been silent for the minimum age.
    /// Returns how many went, and when the next one beyond the budget will be old enough
    /// (`None`: the budget holds).
    pub fn trim(&self) -> (usize, Option<Instant>) {
        self.state().trim(&self.limits, Instant::now())
    }

    /// Trims the budget until `stop` fires: whenever connections admitted over it age into
    /// evictability. `on_evicted` is told how many each pass evicted.
    pub async fn run_trimmer(self: Arc<Self>, stop: CancellationToken, on_evicted: impl Fn(usize)) {
        loop {
            let (evicted, next) = self.trim();
            if evicted > 0 {
                on_evicted(evicted);
            }
            // Created before waiting: an admission over the budget from here on wakes it.
            let over = self.over_budget.notified();
            let aged = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = over => {}
                () = aged => {}
            }
        }
    }

    /// Pending connections now.
    pub fn len(&self) -> usize {
        self.state().total
    }

    /// Whether no connection is pending now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The limits in force.
    pub fn limits(&self) -> PendingLimits {
        self.limits
    }
}

impl PendingSlot {
    /// The client sent its request head: the connection is no longer silent, and counts as
    /// admitted now (young again for the minimum age) while it is being answered.
    pub fn heard(&mut self) {
        let mut st = self.registry.state();
        let Some(entry) = st
            .by_client
            .get_mut(&self.key)
            .and_then(|c| c.remove(&self.id))
        else {
            return; // evicted already
        };
        let id = st.next_id;
        st.next_id += 1;
        st.by_client.entry(self.key).or_default().insert(
            id,
            Entry {
                since: Instant::now(),
                evicted: entry.evicted,
            },
        );
        self.id = id;
    }

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

    const AGE: Duration = Duration::from_millis(500);

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn registry(max_pending: usize, max_per_address: usize, min_age: Duration) -> Arc<Pending> {
        Pending::new(PendingLimits {
            max_pending,
            max_per_address,
            min_age,
        })
    }

    /// Moves the paused clock on by `d`.
    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_from_one_address_is_admitted_whole() {
        let r = registry(256, 32, AGE);
        let burst: Vec<_> = (0..200).map(|_| r.admit(ip("127.0.0.1"))).collect();
        assert!(burst.iter().all(|(s, _)| !s.is_evicted()));
        assert_eq!(burst[31].1, Admission::Free);
        assert!(burst[32..].iter().all(|(_, a)| *a == Admission::OverBudget));
        assert_eq!(r.len(), 200);
        // Each sends its request at once and leaves the budget: nothing was ever evicted.
        drop(burst);
        assert!(r.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_at_its_share_evicts_its_own_oldest_once_silent() {
        let r = registry(100, 2, AGE);
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        advance(AGE - Duration::from_millis(1)).await;
        let (a3, adm) = r.admit(ip("127.0.0.1"));
        assert_eq!(
            adm,
            Admission::OverBudget,
            "a1 is not silent long enough yet"
        );
        advance(Duration::from_millis(1)).await;
        let (b1, _) = r.admit(ip("127.0.0.2"));
        let (a4, adm) = r.admit(ip("127.0.0.1"));
        assert_eq!(adm, Admission::EvictedSameAddress);
        assert!(a1.is_evicted());
        assert!(!a2.is_evicted() && !a3.is_evicted() && !a4.is_evicted() && !b1.is_evicted());
        assert_eq!(r.len(), 4);
        drop(a1);
        assert_eq!(r.len(), 4, "dropping an evicted slot frees nothing twice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_budget_evicts_the_oldest_silent_one_of_the_most_represented_address() {
        let r = registry(4, 10, AGE);
        let (b1, _) = r.admit(ip("127.0.0.2"));
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        let (a3, _) = r.admit(ip("127.0.0.1"));
        advance(AGE).await;
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
        // a3 and b1 are silent long enough, c1 and d1 are not: b1's address and a3's hold
        // one each, b1 is older.
        let (_e1, _) = r.admit(ip("127.0.0.5"));
        assert!(b1.is_evicted());
        assert!(!a3.is_evicted() && !c1.is_evicted() && !d1.is_evicted());
    }

    #[tokio::test(start_paused = true)]
    async fn young_connections_are_never_evicted_below_the_ceiling() {
        // Budget 4, ceiling 16.
        let r = registry(4, 2, AGE);
        let (old, _) = r.admit(ip("127.0.0.9"));
        advance(AGE).await;
        let (client, _) = r.admit(ip("127.0.0.1"));
        // A flood of young sockets from many addresses, up to the ceiling.
        let flood: Vec<_> = (0..14u8)
            .map(|i| r.admit(IpAddr::from([127, 0, 1, i])))
            .collect();
        // Only the one old enough went, to admit the first beyond the budget; the rest came
        // over it.
        assert!(old.is_evicted());
        assert_eq!(flood[2].1, Admission::EvictedBudgetFull);
        assert!(flood[3..].iter().all(|(_, a)| *a == Admission::OverBudget));
        assert!(flood.iter().all(|(s, _)| !s.is_evicted()));
        assert!(!client.is_evicted());
        assert_eq!(r.len(), 15);
    }

    #[tokio::test(start_paused = true)]
    async fn the_excess_is_trimmed_once_it_is_old_enough() {
        let r = registry(3, 2, AGE);
        let start = Instant::now();
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        let (a3, _) = r.admit(ip("127.0.0.1"));
        advance(Duration::from_millis(100)).await;
        let (b1, _) = r.admit(ip("127.0.0.2"));
        let (c1, _) = r.admit(ip("127.0.0.3"));
        assert_eq!(r.len(), 5);
        // Nothing is old enough: the next trim is due when a1 is.
        assert_eq!(r.trim(), (0, Some(start + AGE)));
        advance(AGE).await;
        // a1 goes for its address's share (3 > 2); then the budget (4 > 3) takes the oldest
        // silent one of the most-represented address: a2.
        assert_eq!(r.trim(), (2, None));
        assert!(a1.is_evicted() && a2.is_evicted());
        assert!(!a3.is_evicted() && !b1.is_evicted() && !c1.is_evicted());
        assert_eq!(r.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_head_arrived_is_young_again() {
        let r = registry(1, 1, AGE);
        let (mut a1, _) = r.admit(ip("127.0.0.1"));
        let (a2, _) = r.admit(ip("127.0.0.1"));
        advance(AGE).await;
        // a1's head arrives as it ages: it is being answered, not idle; a2 is idle.
        a1.heard();
        assert_eq!(r.trim(), (1, None));
        assert!(a2.is_evicted() && !a1.is_evicted());
        drop(a1);
        assert!(r.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_trimmer_evicts_idle_sockets_admitted_over_the_budget() {
        let r = registry(2, 2, AGE);
        let stop = CancellationToken::new();
        let evictions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = evictions.clone();
        let trimmer = tokio::spawn(r.clone().run_trimmer(stop.clone(), move |n| {
            counted.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        }));
        let idle: Vec<_> = (0..5).map(|_| r.admit(ip("127.0.0.7"))).collect();
        let quick = r.admit(ip("127.0.0.8")).0;
        drop(quick); // a client that sent its request at once
        let started = Instant::now();
        // The three oldest go, once silent for the minimum age, and not before.
        for (s, _) in &idle[..3] {
            s.evicted().await;
        }
        assert!(started.elapsed() >= AGE && started.elapsed() < 2 * AGE);
        assert!(!idle[3].0.is_evicted() && !idle[4].0.is_evicted());
        assert_eq!(r.len(), 2);
        assert_eq!(evictions.load(std::sync::atomic::Ordering::SeqCst), 3);
        stop.cancel();
        trimmer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_ceiling_the_count_decides() {
        // Budget 2, ceiling 8.
        let r = registry(2, 3, AGE);
        let flood: Vec<_> = (0..8u8)
            .map(|i| r.admit(IpAddr::from([127, 0, 1, i])))
            .collect();
        assert_eq!(r.len(), 8);
        // A newcomer from a new address: the oldest of the (equally represented) others goes.
        let (health, adm) = r.admit(ip("127.0.0.1"));
        assert_eq!(adm, Admission::EvictedAtCeiling);
        assert!(flood[0].0.is_evicted() && !health.is_evicted());
        assert_eq!(r.len(), 8);
        // An address that becomes the most represented at the ceiling evicts its own.
        let mine: Vec<_> = (0..3).map(|_| r.admit(ip("127.0.0.2"))).collect();
        // The first two each evict the oldest of the others (one each, like 127.0.0.2); the
        // third finds 127.0.0.2 the most represented: it pays itself.
        assert!(flood[1].0.is_evicted() && flood[2].0.is_evicted());
        assert!(mine[0].0.is_evicted());
        assert!(!mine[1].0.is_evicted() && !mine[2].0.is_evicted());
        assert!(!health.is_evicted() && !flood[3].0.is_evicted());
        assert_eq!(r.len(), 8);
    }

    #[test]
    fn a_zero_minimum_age_evicts_at_once() {
        let r = registry(100, 2, Duration::ZERO);
        let (a1, _) = r.admit(ip("127.0.0.1"));
        let (_a2, _) = r.admit(ip("127.0.0.1"));
        let (_a3, adm) = r.admit(ip("127.0.0.1"));
        assert_eq!(adm, Admission::EvictedSameAddress);
        assert!(a1.is_evicted());
    }

    #[test]
    fn slots_leave_when_dropped() {
        let r = registry(2, 2, AGE);
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
        let r = registry(1, 1, Duration::ZERO);
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
        let r = registry(100, 1, Duration::ZERO);
        let (a, _) = r.admit(ip("2001:db8::1"));
        let (_b, adm) = r.admit(ip("2001:db8::2"));
        assert_eq!(adm, Admission::EvictedSameAddress);
        assert!(a.is_evicted());
    }
}
