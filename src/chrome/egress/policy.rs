//! Where the egress hop may connect, and which way: the destinations a page may never reach
//! unless the operator allows them (`EGRESS_ALLOW`), and the session's proxy routes and ad
//! blocking (`blockAds`), set when the session is known (a warm pool Chrome gets its session's
//! at claim time, without a restart).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use ipnet::IpNet;
use tokio_util::sync::CancellationToken;
use wallcrawler_contract::egress::{Egress, ProxyServer, compile_pattern};

use super::ads::{self, AdBlockError, AdFilter, AdLists};

/// AWS's IPv6 instance metadata and DNS address (Nitro).
pub(crate) const EC2_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Never reachable, whatever `EGRESS_ALLOW` says: link-local (the ECS and EC2 metadata
/// endpoints, 169.254.169.254 and 169.254.170.2) and the IPv6 metadata address.
pub fn never(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local() || v6 == EC2_METADATA_V6,
    }
}

/// Reachable only when allowed: the machine's loopback, the private ranges (the task's own
/// network among them), shared address space, and addresses that are no destination.
pub fn restricted(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                // 100.64.0.0/10, carrier-grade NAT (and some VPC setups).
                || (a == 100 && (64..128).contains(&b))
                // 198.18.0.0/15, benchmarking networks.
                || (a == 198 && (b == 18 || b == 19))
        }
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || v6.is_multicast() || v6.is_unique_local()
        }
    }
}

/// One `EGRESS_ALLOW` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    /// Every port of a network (an address alone is a /32 or /128).
    Net(IpNet),
    /// One address and port.
    Addr(SocketAddr),
}

/// What the hop lets Chrome reach beyond public addresses (`EGRESS_ALLOW`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressAllow {
    entries: Vec<Allowed>,
}

/// `EGRESS_ALLOW` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an address, addr:port or CIDR (e.g. 127.0.0.1, 127.0.0.1:8080, [::1]:80, 10.0.0.0/8)"
)]
pub struct AllowError(String);

impl std::str::FromStr for EgressAllow {
    type Err = AllowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut entries = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let entry = if let Ok(a) = part.parse::<SocketAddr>() {
                Allowed::Addr(a)
            } else if let Ok(n) = part.parse::<IpNet>() {
                Allowed::Net(n.trunc())
            } else if let Ok(ip) = part.parse::<IpAddr>() {
                Allowed::Net(IpNet::from(ip))
            } else {
                return Err(AllowError(part.to_owned()));
            };
            entries.push(entry);
        }
        Ok(Self { entries })
    }
}

impl EgressAllow {
    /// The machine's whole loopback (what `local` allows by default).
    pub fn loopback() -> Self {
        Self {
            entries: vec![
                Allowed::Net("127.0.0.0/8".parse().expect("a CIDR")),
                Allowed::Net("::1/128".parse().expect("a CIDR")),
            ],
        }
    }

    /// Whether nothing beyond public addresses is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the hop may connect to `to`.
    pub fn permits(&self, to: SocketAddr) -> bool {
        let ip = to.ip().to_canonical();
        if never(ip) {
            return false;
        }
        if !restricted(ip) {
            return true;
        }
        self.entries.iter().any(|e| match e {
            Allowed::Net(n) => n.contains(&ip),
            Allowed::Addr(a) => a.ip().to_canonical() == ip && a.port() == to.port(),
        })
    }
}

/// One route as the hop applies it.
struct Compiled {
    pattern: Option<regex::Regex>,
    proxy: Option<Arc<ProxyServer>>,
}

/// The routes in force, and the token that ends the connections made under them.
struct Routes {
    routes: Arc<[Compiled]>,
    /// `blockAds`: the filter consulted for each connection; `None`: off.
    ads: Option<Arc<AdFilter>>,
    /// Cancelled when other routes replace these: no connection outlives the rules it was
    /// made under (a warm browser's connections end at its claim).
    epoch: CancellationToken,
}

/// Where one connection goes.
pub struct Way {
    /// Nowhere: an ad or tracking host, with `blockAds` on.
    pub blocked: bool,
    /// The upstream proxy; `None`: direct.
    pub proxy: Option<Arc<ProxyServer>>,
    /// Ends the connection when the routes change.
    pub epoch: CancellationToken,
}

/// The hop's policy, shared by every launch of one controller's Chrome (a claimed context's
/// relaunch keeps its session's routes): the fixed allow list and ad block lists, the routes
/// and ad blocking of the session, the bytes carried through proxies (`proxyBytes`) and the
/// connections refused as ads.
#[derive(Clone)]
pub struct Hop {
    inner: Arc<Inner>,
}

struct Inner {
    allow: EgressAllow,
    ad_lists: AdLists,
    /// `AD_FILTER_CACHE`: where the built filter is kept for the machine's next controller.
    ad_cache: Option<PathBuf>,
    routes: RwLock<Arc<Routes>>,
    proxied_bytes: AtomicU64,
    ads_blocked: AtomicU64,
    /// Where the session's own notes go (its log), and how many were sent.
    notes: RwLock<Option<Notes>>,
    noted: AtomicU64,
}

/// What takes the session's notes (the session's log: [`crate::session_log`]).
pub type Notes = Arc<dyn Fn(String) + Send + Sync>;

/// The most notes one session's hop sends (a proxy that fails fails every page's every
/// connection); past them one more says so.
pub const MAX_NOTES: u64 = 20;

impl std::fmt::Debug for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hop")
            .field("allow", &self.inner.allow)
            .field("ad_lists", &self.inner.ad_lists)
            .finish_non_exhaustive()
    }
}

impl Hop {
    /// Direct routes only, and `allow` beyond public addresses; ad blocking, when a session
    /// asks for it, by Debian's EasyList and EasyPrivacy.
    pub fn new(allow: EgressAllow) -> Self {
        Self::with_ad_lists(allow, AdLists::default(), None)
    }

    /// As [`Hop::new`], with ad blocking by `ad_lists` (`AD_BLOCK_LISTS`), the built filter
    /// kept in `ad_cache` (`AD_FILTER_CACHE`) when given.
    pub fn with_ad_lists(allow: EgressAllow, ad_lists: AdLists, ad_cache: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Inner {
                allow,
                ad_lists,
                ad_cache,
                routes: RwLock::new(Arc::new(Routes {
                    routes: Arc::from([]),
                    ads: None,
                    epoch: CancellationToken::new(),
                })),
                proxied_bytes: AtomicU64::new(0),
                ads_blocked: AtomicU64::new(0),
                notes: RwLock::new(None),
                noted: AtomicU64::new(0),
            }),
        }
    }

    /// Where the session's notes go from now on (`None`: nowhere, the count begun again).
    pub fn set_notes(&self, notes: Option<Notes>) {
        *self.inner.notes.write().unwrap_or_else(|p| p.into_inner()) = notes;
        self.inner.noted.store(0, Ordering::Relaxed);
    }

    /// Tells the session `message` (what its proxy did to it), within [`MAX_NOTES`].
    pub fn note(&self, message: impl FnOnce() -> String) {
        let notes = self.inner.notes.read().unwrap_or_else(|p| p.into_inner());
        let Some(notes) = notes.as_ref() else {
            return;
        };
        match self.inner.noted.fetch_add(1, Ordering::Relaxed) {
            n if n < MAX_NOTES => notes(message()),
            MAX_NOTES => notes(format!(
                "the session's proxy failed {MAX_NOTES} connections; later failures are not noted"
            )),
            _ => {}
        }
    }

    /// Replaces the rules in force by what `change` makes of them, if anything (under the
    /// lock: a concurrent change is not lost), and ends every connection made under the old.
    fn replace(&self, change: impl FnOnce(&Routes) -> Option<Routes>) {
        let old = {
            let mut current = self.inner.routes.write().unwrap_or_else(|p| p.into_inner());
            match change(&current) {
                Some(new) => std::mem::replace(&mut *current, Arc::new(new)),
                None => return,
            }
        };
        old.epoch.cancel();
    }

    /// The session's routes from now on; every connection made before ends.
    pub fn configure(&self, egress: &Egress) -> Result<(), String> {
        let mut routes = Vec::with_capacity(egress.routes.len());
        for (i, r) in egress.routes.iter().enumerate() {
            let pattern = match &r.domain_pattern {
                Some(p) => {
                    Some(compile_pattern(p).map_err(|e| format!("routes[{i}].domainPattern {e}"))?)
                }
                None => None,
            };
            routes.push(Compiled {
                pattern,
                proxy: r.proxy.clone().map(Arc::new),
            });
        }
        let routes: Arc<[Compiled]> = routes.into();
        self.replace(|old| {
            Some(Routes {
                routes,
                ads: old.ads.clone(),
                epoch: CancellationToken::new(),
            })
        });
        Ok(())
    }

    /// `blockAds` from now on: on, connections to ad and tracking hosts are refused ("connection
    /// not allowed by ruleset"; [`super::ads`] says which). The filter is built at the first
    /// call that turns it on in this process (a second or so, off the runtime's threads) and
    /// shared after that. An error leaves the hop as it was: the session, which asked for ad
    /// blocking, must not start without it.
    ///
    /// A change ends every connection made before, as new routes do: none made unfiltered
    /// outlives the switch (a warm browser's connections end at its claim). Setting what is
    /// already in force changes nothing and ends nothing.
    pub async fn set_block_ads(&self, on: bool) -> Result<(), AdBlockError> {
        let filter = if on {
            Some(ads::shared(&self.inner.ad_lists, self.inner.ad_cache.as_deref()).await?)
        } else {
            None
        };
        self.replace(|old| {
            (old.ads.is_some() != on).then(|| Routes {
                routes: old.routes.clone(),
                ads: filter,
                epoch: CancellationToken::new(),
            })
        });
        Ok(())
    }

    /// Builds the ad filter now, without turning `blockAds` on, so that a session that asks for
    /// it later does not wait for the build (a warm pool browser's claim: 0.1-0.7 s otherwise,
    /// see [`super::ads`]); it then holds its ~9 MiB whether or not a session asks.
    /// A failure is the asking session's to report ([`Hop::set_block_ads`] tries again).
    /// Built at `nice` (a warm-up's `BACKGROUND_NICE`; `None`: the controller's own).
    pub async fn prepare_block_ads(&self, nice: Option<i32>) -> Result<(), AdBlockError> {
        let cache = self.inner.ad_cache.as_deref();
        ads::shared_at(&self.inner.ad_lists, cache, nice)
            .await
            .map(drop)
    }

    /// The rules in force.
    fn routes(&self) -> Arc<Routes> {
        self.inner
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where a connection to `host:port` goes: nowhere when `blockAds` blocks the host; else
    /// through the first route whose pattern matches (or that has none); no route: direct.
    pub fn way(&self, host: &str, port: u16) -> Way {
        let routes = self.routes();
        let host = host.trim_end_matches('.');
        let blocked = routes.ads.as_ref().is_some_and(|f| f.blocks(host, port));
        let proxy = routes
            .routes
            .iter()
            .find(|r| r.pattern.as_ref().is_none_or(|p| p.is_match(host)))
            .and_then(|r| r.proxy.clone());
        Way {
            blocked,
            proxy,
            epoch: routes.epoch.clone(),
        }
    }

    /// What the hop may connect to.
    pub fn allow(&self) -> &EgressAllow {
        &self.inner.allow
    }

    /// Adds bytes carried through an upstream proxy.
    pub fn count_proxied(&self, n: u64) {
        self.inner.proxied_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Bytes carried through upstream proxies so far, both directions (`proxyBytes`).
    pub fn proxied_bytes(&self) -> u64 {
        self.inner.proxied_bytes.load(Ordering::Relaxed)
    }

    /// Adds a connection refused by `blockAds`.
    pub fn count_ad_blocked(&self) {
        self.inner.ads_blocked.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections refused by `blockAds` so far (for the session's logs).
    pub fn ads_blocked(&self) -> u64 {
        self.inner.ads_blocked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallcrawler_contract::egress::Route;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn private_loopback_and_metadata_are_refused_by_default() {
        let none = EgressAllow::default();
        for bad in [
            "127.0.0.1:80",
            "127.9.9.9:80",
            "10.0.0.5:443",
            "172.16.0.1:443",
            "192.168.1.1:80",
            "100.64.0.1:80",
            "0.0.0.0:80",
            "169.254.169.254:80",
            "169.254.170.2:80",
            "[::1]:80",
            "[fd00:ec2::254]:80",
            "[fc00::1]:80",
            "[fe80::1]:80",
            "[::ffff:127.0.0.1]:80",
            "[::ffff:169.254.169.254]:80",
            "[::]:80",
        ] {
            assert!(!none.permits(a(bad)), "{bad}");
        }
        for good in ["93.184.216.34:443", "[2001:db8::1]:443", "8.8.8.8:53"] {
            assert!(none.permits(a(good)), "{good}");
        }
    }

    #[test]
    fn egress_allow_opens_what_it_names_and_never_the_metadata() {
        let allow: EgressAllow = "127.0.0.1:8080, 10.1.0.0/16,::1".parse().unwrap();
        assert!(allow.permits(a("127.0.0.1:8080")));
        assert!(!allow.permits(a("127.0.0.1:8081")));
        assert!(allow.permits(a("10.1.200.3:5432")));
        assert!(!allow.permits(a("10.2.0.1:5432")));
        assert!(allow.permits(a("[::1]:9")));
        assert!(allow.permits(a("[::ffff:127.0.0.1]:8080")));
        let wide: EgressAllow = "0.0.0.0/0,::/0".parse().unwrap();
        assert!(!wide.permits(a("169.254.169.254:80")));
        assert!(!wide.permits(a("[fd00:ec2::254]:80")));
        assert!(EgressAllow::loopback().permits(a("127.0.0.1:1")));
        assert!(!EgressAllow::loopback().permits(a("192.168.0.1:1")));
        for bad in ["localhost", "10.0.0.0/33", "1.2.3.4:99999", "http://x"] {
            assert!(bad.parse::<EgressAllow>().is_err(), "{bad}");
        }
        assert!("".parse::<EgressAllow>().unwrap().is_empty());
    }

    fn proxy(port: u16) -> Option<ProxyServer> {
        Some(ProxyServer::parse(&format!("http://127.0.0.1:{port}"), None, None).unwrap())
    }

    /// One route, every host through the proxy on `port`.
    fn everything_through(port: u16) -> Egress {
        Egress {
            routes: vec![Route {
                domain_pattern: None,
                proxy: proxy(port),
            }],
            allowed_domains: vec![],
        }
    }

    #[test]
    fn the_first_matching_route_wins_and_no_match_goes_direct() {
        let hop = Hop::new(EgressAllow::default());
        assert!(hop.way("a.test", 443).proxy.is_none());
        hop.configure(&Egress {
            routes: vec![
                Route {
                    domain_pattern: Some(r"direct\.a\.test".into()),
                    proxy: None,
                },
                Route {
                    domain_pattern: Some(r".*\.a\.test".into()),
                    proxy: proxy(1),
                },
                Route {
                    domain_pattern: Some(r"b\.test".into()),
                    proxy: proxy(2),
                },
            ],
            allowed_domains: vec![],
        })
        .unwrap();
        let port = |h: &str| hop.way(h, 443).proxy.map(|p| p.port);
        assert_eq!(port("www.a.test"), Some(1));
        assert_eq!(port("WWW.A.TEST."), Some(1));
        assert_eq!(port("direct.a.test"), None);
        assert_eq!(port("b.test"), Some(2));
        assert_eq!(port("c.test"), None);
        assert_eq!(port("a.test.evil"), None);
    }

    #[tokio::test]
    async fn block_ads_ends_the_connections_made_before_and_keeps_the_routes() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "||ads.test^\n").unwrap();
        let hop = Hop::with_ad_lists(
            EgressAllow::default(),
            list.display().to_string().parse().unwrap(),
            None,
        );
        hop.configure(&everything_through(1)).unwrap();
        hop.prepare_block_ads(None).await.unwrap();
        assert!(!hop.way("ads.test", 443).blocked, "off until asked");
        let before = hop.way("a.test", 443);
        hop.set_block_ads(true).await.unwrap();
        assert!(before.epoch.is_cancelled());
        assert!(hop.way("ads.test", 443).blocked);
        assert!(hop.way("www.ads.test", 80).blocked);
        let after = hop.way("a.test", 443);
        assert!(!after.blocked);
        assert_eq!(after.proxy.map(|p| p.port), Some(1), "the routes are kept");
        hop.set_block_ads(true).await.unwrap();
        assert!(!after.epoch.is_cancelled(), "no change, no cut");
        hop.configure(&Egress {
            routes: vec![],
            allowed_domains: vec![],
        })
        .unwrap();
        assert!(after.epoch.is_cancelled());
        assert!(hop.way("ads.test", 443).blocked, "new routes keep blockAds");
        hop.set_block_ads(false).await.unwrap();
        assert!(!hop.way("ads.test", 443).blocked);
    }

    /// A session that asks for `blockAds` where no list can be read does not run unblocked:
    /// the switch fails (and the session is refused by its caller), changing nothing.
    #[tokio::test]
    async fn block_ads_without_a_readable_list_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let hop = Hop::with_ad_lists(
            EgressAllow::default(),
            dir.path()
                .join("missing.txt")
                .display()
                .to_string()
                .parse()
                .unwrap(),
            None,
        );
        let before = hop.way("a.test", 443);
        let e = hop.set_block_ads(true).await.unwrap_err();
        assert!(e.to_string().contains("missing.txt"), "{e}");
        assert!(!before.epoch.is_cancelled());
        hop.set_block_ads(false).await.unwrap();
    }

    #[test]
    fn new_routes_end_the_connections_made_under_the_old() {
        let hop = Hop::new(EgressAllow::default());
        let before = hop.way("a.test", 443);
        hop.configure(&everything_through(1)).unwrap();
        assert!(before.epoch.is_cancelled());
        let after = hop.way("a.test", 443);
        assert!(!after.epoch.is_cancelled());
        assert_eq!(after.proxy.map(|p| p.port), Some(1));
        assert!(
            hop.configure(&Egress {
                routes: vec![Route {
                    domain_pattern: Some("(".into()),
                    proxy: None
                }],
                allowed_domains: vec![],
            })
            .is_err()
        );
        assert!(
            !after.epoch.is_cancelled(),
            "a refused configuration changes nothing"
        );
    }
}
