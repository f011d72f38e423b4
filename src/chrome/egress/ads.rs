//! `blockAds`: connections to ad and tracking hosts refused at the hop, so neither Chrome nor
//! the hop ever reaches them (nor the session's proxy: it is never asked).
//!
//! The rules are EasyList and EasyPrivacy, as Debian's `webext-ublock-origin-chromium` installs
//! them (`AD_BLOCK_LISTS`, [`AdLists`]; they are updated with that package, i.e. with the
//! image), matched by Brave's engine (the `adblock` crate).
//!
//! The hop sees a connection's host and port, never a URL, so it applies only rules about a
//! whole host: the host-anchored ones, `||host^` with at most options after it (`@@||host^`
//! for exceptions), and only those are loaded. A rule with a path (`||host/ads/*`) or no
//! anchor (`-ad-banner.`) says nothing about a host — asked about `https://host/` it could
//! only misfire on a name — and a cosmetic rule (`##.ad`) hides elements, which needs the
//! page. In Debian's 1.67.0 lists (`examples/adblockbench.rs`):
//!
//! | list        | network rules | host-anchored (loaded) | of those, exceptions | cosmetic |
//! |-------------|---------------|------------------------|----------------------|----------|
//! | EasyList    | 52,452        | 48,814                 | 228                  | 23,807   |
//! | EasyPrivacy | 54,340        | 46,169                 | 92                   | 30       |
//!
//! The hop cannot apply the other 3,638 + 8,171 network rules (paths, patterns), nor the
//! cosmetic ones. So 94,983 of the 106,792 network rules (89 %) are host rules; 89,880 of
//! them have no option or only `$third-party`. A host is refused when a request to
//! `https://host/` (`http://` on port 80) from an unknown page — so third-party, from no
//! particular site — is blocked as some request type (image, script, xhr, document, …) and no
//! exception applies to a request of any type. Hence:
//! - `||host^` and `||host^$third-party` refuse the host and every name under it;
//! - a type-bound rule (`||host^$script`, `$image`, `$document`: 1,012, 819 of them
//!   `$document`) refuses the whole host — the hop cannot tell the script from the rest —
//!   unless an exception lets some type through (`@@||host^$image`), which keeps the host open;
//! - page-bound rules (`$domain=site`: 152) and first-party ones (`$~third-party`: 8) never
//!   apply (the hop does not know the page), nor `$popup` ones (3,587: the engine drops them);
//! - a blocked host's every path is gone, including one a path exception would have let
//!   through on some page; a session that navigates to such a host itself gets a network
//!   error (the hop cannot tell a navigation from a subresource).
//!
//! Of the hosts of the lists' 94,642 plain blocking host rules (no wildcard), the hop refuses
//! 93,290 (the rest are page-bound, first-party-only or excepted); of 20,000 made-up hosts,
//! none.
//!
//! The engine is built once per process and list set, on a blocking thread, at the first
//! session that asks for `blockAds` ([`shared`]; or ahead of it, at the warm-up's
//! `BACKGROUND_NICE`: [`super::Hop::prepare_block_ads`], [`shared_at`]), and shared by every
//! connection after it. With `AD_FILTER_CACHE` the built engine is kept on disk and the
//! machine's next controller loads it instead of building it ([`super::ad_cache`]). Measured with
//! `examples/adblockbench.rs` (release build, this 2-core machine shared with other builds,
//! three runs, 2026-12-07): both Debian lists read and built in 81-145 ms, holding 9.2-9.3 MiB
//! more resident memory (VmRSS before and after, the lists' text freed); a host is checked in
//! 11 µs (not listed) to 15 µs (listed): 12 look-ups, one per request type, once per
//! connection. Inside a release controller starting Chrome beside it, under load, the build
//! took 150-660 ms; in a debug build (tests, the local platform) about 1-1.6 s, this crate's
//! own parsing unoptimised.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use adblock::Engine;
use adblock::lists::{FilterSet, ParseOptions, RuleTypes};
use adblock::request::Request;
use tokio::sync::OnceCell;
use tracing::{info, warn};

use super::ad_cache;

/// Where Debian's `webext-ublock-origin-chromium` puts EasyList and EasyPrivacy.
pub const DEFAULT_LISTS: [&str; 2] = [
    "/usr/share/chromium/extensions/ublock-origin/assets/thirdparties/easylist/easylist.txt",
    "/usr/share/chromium/extensions/ublock-origin/assets/thirdparties/easylist/easyprivacy.txt",
];

/// The request types a host is asked about: the filter syntax's network types, and the
/// document (a navigation: the hop cannot tell one from a subresource).
const REQUEST_TYPES: [&str; 12] = [
    "other",
    "script",
    "image",
    "stylesheet",
    "xmlhttprequest",
    "subdocument",
    "font",
    "media",
    "object",
    "ping",
    "websocket",
    "document",
];

/// The filter lists `blockAds` loads (`AD_BLOCK_LISTS`): files in Adblock Plus syntax.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdLists(Vec<PathBuf>);

impl Default for AdLists {
    /// EasyList and EasyPrivacy from Debian's package.
    fn default() -> Self {
        Self(DEFAULT_LISTS.iter().map(PathBuf::from).collect())
    }
}

/// `AD_BLOCK_LISTS` named no file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("name at least one filter list file (comma-separated paths)")]
pub struct NoListNamed;

impl std::str::FromStr for AdLists {
    type Err = NoListNamed;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let paths: Vec<PathBuf> = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        if paths.is_empty() {
            return Err(NoListNamed);
        }
        Ok(Self(paths))
    }
}

impl AdLists {
    /// The list files.
    pub fn paths(&self) -> &[PathBuf] {
        &self.0
    }
}

/// Why `blockAds` cannot be applied. A session that asked for it does not start without it.
#[derive(Debug, thiserror::Error)]
pub enum AdBlockError {
    /// None of the list files could be read.
    #[error(
        "no ad block list could be read ({0}); install Debian's webext-ublock-origin-chromium or set AD_BLOCK_LISTS"
    )]
    NoList(String),
    /// The lists were read but hold no host rule (not filter lists in Adblock Plus syntax).
    #[error("the ad block lists ({0}) hold no host rule")]
    NoRule(String),
    /// The thread building the engine failed.
    #[error("building the ad filter failed")]
    Build(#[source] tokio::task::JoinError),
    /// No thread could be started for a background build.
    #[error("no thread for building the ad filter")]
    Thread(#[source] std::io::Error),
    /// The background build's thread ended without a filter (it panicked).
    #[error("building the ad filter stopped")]
    Stopped,
}

/// The engine over the lists' host rules.
pub struct AdFilter {
    pub(super) engine: Engine,
    pub(super) rules: usize,
}

impl std::fmt::Debug for AdFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdFilter")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl AdFilter {
    /// The host rules of `lists` (each a list's text).
    pub fn from_lists<'a>(lists: impl IntoIterator<Item = &'a str>) -> Self {
        let mut rules = 0;
        let mut set = FilterSet::new(false);
        for text in lists {
            let mut hosts = String::new();
            for line in text.lines().filter(|l| is_host_rule(l)) {
                hosts.push_str(line);
                hosts.push('\n');
                rules += 1;
            }
            set.add_filter_list(
                hosts,
                ParseOptions {
                    rule_types: RuleTypes::NetworkOnly,
                    ..ParseOptions::default()
                },
            );
        }
        Self {
            engine: Engine::new_with_filter_set(set),
            rules,
        }
    }

    /// Reads and builds `lists` (blocking: a second or so for EasyList and EasyPrivacy), or,
    /// with a `cache` directory (`AD_FILTER_CACHE`), loads the filter a controller built from
    /// the same lists before and keeps a new one there ([`super::ad_cache`]). A list that
    /// cannot be read is logged and left out; none readable, or no host rule in them, is an
    /// error.
    pub fn load(lists: &AdLists, cache: Option<&Path>) -> Result<Self, AdBlockError> {
        let names = || {
            lists
                .paths()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut texts = Vec::new();
        for path in lists.paths() {
            match std::fs::read_to_string(path) {
                Ok(t) => texts.push(t),
                Err(e) => {
                    warn!(list = %path.display(), error = %e, "an ad block list could not be read; blockAds goes on without it")
                }
            }
        }
        if texts.is_empty() {
            return Err(AdBlockError::NoList(names()));
        }
        let started = std::time::Instant::now();
        let kept = cache.map(|dir| ad_cache::path(dir, &texts));
        if let Some(filter) = kept.as_deref().and_then(ad_cache::load)
            && filter.rules > 0
        {
            info!(
                host_rules = filter.rules,
                ms = started.elapsed().as_millis() as u64,
                "ad filter loaded as a controller kept it"
            );
            return Ok(filter);
        }
        let filter = Self::from_lists(texts.iter().map(String::as_str));
        if filter.rules == 0 {
            return Err(AdBlockError::NoRule(names()));
        }
        info!(
            lists = texts.len(),
            host_rules = filter.rules,
            ms = started.elapsed().as_millis() as u64,
            "ad block lists loaded"
        );
        if let Some(file) = &kept {
            ad_cache::store(file, &filter);
        }
        Ok(filter)
    }

    /// Host rules loaded (blocking rules and exceptions).
    pub fn rules(&self) -> usize {
        self.rules
    }

    /// Whether a connection to `host:port` is refused: a request of some type to the host, from
    /// an unknown (so third-party) page, is blocked, and no exception applies to a request of
    /// any type.
    pub fn blocks(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return false;
        }
        let name = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let url = match port {
            80 => format!("http://{name}/"),
            443 => format!("https://{name}/"),
            p => format!("https://{name}:{p}/"),
        };
        let mut blocked = false;
        for kind in REQUEST_TYPES {
            let request = Request::preparsed(&url, &host, "", kind, true, "GET");
            // Exceptions looked for even where no rule blocks this type: an exception for the
            // host's images keeps the host open, whatever blocks its scripts.
            let r = self
                .engine
                .check_network_request_subset(&request, false, true);
            if r.important {
                return true;
            }
            if r.exception.is_some() {
                return false;
            }
            blocked |= r.filter.is_some();
        }
        blocked
    }
}

/// Whether `line` is a host-anchored network rule: `||host^` or `@@||host^`, the `^` (or
/// `^|`) optional, options after `$` allowed, no path. `host` may hold `*` wildcards.
pub fn is_host_rule(line: &str) -> bool {
    let line = line.trim();
    let rule = line.strip_prefix("@@").unwrap_or(line);
    let Some(rest) = rule.strip_prefix("||") else {
        return false;
    };
    let pattern = rest.split_once('$').map_or(rest, |(p, _)| p);
    let host = pattern
        .strip_suffix("^|")
        .or_else(|| pattern.strip_suffix('^'))
        .unwrap_or(pattern);
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'*'))
}

/// The engine for `lists`, built once per process (on a blocking thread, at the first call)
/// and shared: every hop that names the same lists gets the same one. A failed build is not
/// kept: the next call tries again (and reports again).
pub async fn shared(lists: &AdLists, cache: Option<&Path>) -> Result<Arc<AdFilter>, AdBlockError> {
    shared_at(lists, cache, None).await
}

/// [`shared`], a build this call starts running at `nice` (`None`: as the controller) on a
/// thread of its own: the warm-up's build ahead of any session, which nobody waits on, yields
/// to the sessions being driven (Linux: a thread's nice value is its own; the thread ends
/// with the build, so no pooled thread keeps it).
pub async fn shared_at(
    lists: &AdLists,
    cache: Option<&Path>,
    nice: Option<i32>,
) -> Result<Arc<AdFilter>, AdBlockError> {
    type Cell = Arc<OnceCell<Arc<AdFilter>>>;
    // Only grows by the list sets a process names (one in production).
    static BUILT: Mutex<Vec<(AdLists, Cell)>> = Mutex::new(Vec::new());
    let cell = {
        let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
        match built.iter().find(|(l, _)| l == lists) {
            Some((_, c)) => c.clone(),
            None => {
                let c = Cell::default();
                built.push((lists.clone(), c.clone()));
                c
            }
        }
    };
    cell.get_or_try_init(|| {
        let lists = lists.clone();
        let cache = cache.map(Path::to_path_buf);
        async move {
            let Some(nice) = nice else {
                return tokio::task::spawn_blocking(move || {
                    AdFilter::load(&lists, cache.as_deref()).map(Arc::new)
                })
                .await
                .map_err(AdBlockError::Build)?;
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("ad-filter".into())
                .spawn(move || {
                    // A miss only costs the sessions some speed.
                    let _ = rustix::process::setpriority_process(None, nice);
                    let _ = tx.send(AdFilter::load(&lists, cache.as_deref()).map(Arc::new));
                });
            match spawned {
                Ok(_) => rx.await.unwrap_or(Err(AdBlockError::Stopped)),
                Err(e) => Err(AdBlockError::Thread(e)),
            }
        }
    })
    .await
    .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TINY: &str = "\
[Adblock Plus 2.0]
! a comment
||pagead2.googlesyndication.com^
||g.doubleclick.net^$third-party
||tracker.test^$script
||landing.test^$document
||first-party.test^$~third-party
||page-bound.test^$domain=a.test
||allowed-images.test^
@@||allowed-images.test^$image
||vetoed.test^$script
@@||vetoed.test^$image
||important.test^$important
@@||important.test^
||popup.test^$popup
||path.test/ads/*
-ad-banner.
##.ad
";

    #[test]
    fn host_anchored_rules_only() {
        for yes in [
            "||a.test^",
            "@@||a.test^$image",
            "||a.test^$third-party",
            "||ads.*.test^",
            "||a.test^|",
            "||a.test",
            "||1.2.3.4^",
        ] {
            assert!(is_host_rule(yes), "{yes}");
        }
        for no in [
            "||a.test/ads/",
            "||a.test^*/x.js",
            "/banner/*",
            "-ad-banner.",
            "a.test##.ad",
            "! ||a.test^",
            "||",
            "|https://a.test^",
        ] {
            assert!(!is_host_rule(no), "{no}");
        }
    }

    #[test]
    fn a_host_is_blocked_when_a_request_to_it_would_be_and_none_is_excepted() {
        let f = AdFilter::from_lists([TINY]);
        assert_eq!(f.rules(), 13);
        for (host, port) in [
            ("pagead2.googlesyndication.com", 443),
            ("pagead2.googlesyndication.com", 80),
            ("PageAd2.GoogleSyndication.com.", 443),
            ("g.doubleclick.net", 443),
            ("sub.g.doubleclick.net", 8443),
            // Type-bound: the hop cannot tell the script from the rest of the host.
            ("tracker.test", 443),
            ("landing.test", 443),
            ("important.test", 443),
        ] {
            assert!(f.blocks(host, port), "{host}:{port}");
        }
        for host in [
            "example.test",
            "googlesyndication.com",
            "doubleclick.net",
            // The hop does not know the page: never first-party, never a.test's.
            "first-party.test",
            "page-bound.test",
            "popup.test",
            // An exception for some of its requests.
            "allowed-images.test",
            "vetoed.test",
            // Path and unanchored rules are not loaded.
            "path.test",
            "x-ad-banner.test",
            "::1",
            "",
        ] {
            assert!(!f.blocks(host, 443), "{host}");
        }
    }

    /// With `AD_FILTER_CACHE` the first build is kept, and a later load (another controller's)
    /// takes the kept filter instead of building: shown by planting a filter of other rules
    /// under the same name, which the load then answers with.
    #[test]
    fn a_kept_filter_is_loaded_instead_of_built() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "||ads.test^\n").unwrap();
        let lists = AdLists(vec![list]);
        let cache = dir.path().join("cache");
        let built = AdFilter::load(&lists, Some(&cache)).unwrap();
        assert!(built.blocks("ads.test", 443));
        let kept: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
        assert_eq!(kept.len(), 1, "one file, no temporary one left");
        let file = kept[0].as_ref().unwrap().path();

        ad_cache::store(&file, &AdFilter::from_lists(["||planted.test^\n"]));
        let loaded = AdFilter::load(&lists, Some(&cache)).unwrap();
        assert!(loaded.blocks("planted.test", 443), "loaded, not built");
        assert!(!loaded.blocks("ads.test", 443));
        // Without the cache, the lists as they are.
        assert!(
            AdFilter::load(&lists, None)
                .unwrap()
                .blocks("ads.test", 443)
        );
    }

    #[test]
    fn ad_lists_setting() {
        let l: AdLists = " /a.txt, ,/b.txt ".parse().unwrap();
        assert_eq!(
            l.paths(),
            [PathBuf::from("/a.txt"), PathBuf::from("/b.txt")]
        );
        assert!(" , ".parse::<AdLists>().is_err());
        assert_eq!(AdLists::default().paths().len(), 2);
    }

    #[tokio::test]
    async fn unreadable_lists_are_an_error_and_one_list_is_enough() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.txt");
        let none = AdLists(vec![missing.clone()]);
        assert!(matches!(
            shared(&none, None).await,
            Err(AdBlockError::NoList(_))
        ));
        let empty = dir.path().join("empty.txt");
        std::fs::write(&empty, "! only a comment\n##.ad\n").unwrap();
        assert!(matches!(
            shared(&AdLists(vec![empty]), None).await,
            Err(AdBlockError::NoRule(_))
        ));
        let tiny = dir.path().join("tiny.txt");
        std::fs::write(&tiny, TINY).unwrap();
        let lists = AdLists(vec![missing, tiny]);
        let a = shared(&lists, None).await.unwrap();
        assert!(a.blocks("g.doubleclick.net", 443));
        let b = shared(&lists, None).await.unwrap();
        assert!(Arc::ptr_eq(&a, &b), "built once, shared");
    }

    /// The real lists, as `scripts/install-test-deps.sh` installs them (so in CI too).
    #[tokio::test]
    async fn the_debian_lists_block_ad_hosts_and_not_sites() {
        for p in DEFAULT_LISTS {
            assert!(
                Path::new(p).is_file(),
                "{p}: install webext-ublock-origin-chromium (scripts/install-test-deps.sh)"
            );
        }
        let f = shared(&AdLists::default(), None).await.unwrap();
        assert!(f.rules() > 50_000, "{} host rules", f.rules());
        for host in [
            "pagead2.googlesyndication.com",
            "g.doubleclick.net",
            "www.google-analytics.com",
        ] {
            assert!(f.blocks(host, 443), "{host}");
        }
        for host in [
            "example.com",
            "www.wikipedia.org",
            "github.com",
            "www.google.com",
            "fonts.googleapis.com",
            "a.test",
        ] {
            assert!(!f.blocks(host, 443), "{host}");
        }
    }
}
