//! A create's `proxies` and `browserSettings.allowedDomains` through the router: each malformed
//! one refused with a 400 naming the field (nothing launched, no slot held, no session kept),
//! managed proxies from the operator's pools, routes in order to the launcher, and proxy
//! passwords only there: never in the session item, an answer or a log line.

use std::io::Write;
use std::sync::Mutex;

use wallcrawler_contract::egress::Egress;
use wallcrawler_control_plane::egress::ManagedProxies;

use super::*;

/// A password planted in every request: no answer, item or log line may hold it.
const MARK: &str = "planted-password-5c09e1";

/// The operator's pools: two default servers (with credentials) and one for the US.
fn pools() -> ManagedProxies {
    ManagedProxies::parse(&format!(
        r#"{{"default": [{{"server": "http://pool-a.example:3128", "username": "pool", "password": "{MARK}"}},
                        {{"server": "http://pool-b.example:3128", "username": "pool", "password": "{MARK}"}}],
            "US": [{{"server": "socks5://us.example:1080"}}]}}"#
    ))
    .unwrap()
}

fn with_pools() -> Harness {
    Harness::with_settings(
        LaunchBehaviour::BecomeReady,
        Settings {
            managed_proxies: pools(),
            ..waiting(Duration::from_millis(400))
        },
    )
}

impl Harness {
    /// The only launch's egress.
    fn launched_egress(&self) -> Egress {
        let launched = self.launched();
        assert_eq!(launched.len(), 1, "one launch");
        launched[0]
            .egress
            .clone()
            .expect("the launch has an egress")
    }

    /// Every session the store holds, as JSON.
    fn stored(&self) -> String {
        let docs: Vec<SessionDoc> = self.sessions.0.lock().unwrap().values().cloned().collect();
        serde_json::to_string(&docs).unwrap()
    }
}

/// Every malformed `proxies` or `allowedDomains` is a 400 whose message is exactly the
/// refusal, naming the field; nothing is launched or kept, no slot stays held.
#[tokio::test]
async fn each_malformed_egress_is_a_400_naming_its_field() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let ext = |extra: &str| {
        format!(
            r#"{{"type": "external", "server": "http://p.example:8080", "username": "u", "password": "{MARK}"{extra}}}"#
        )
    };
    let cases: Vec<(String, String)> = vec![
        (
            r#"{"proxies": "yes"}"#.into(),
            "proxies must be a boolean or an array".into(),
        ),
        (
            format!(r#"{{"proxies": [{}]}}"#, vec![ext(""); 17].join(",")),
            "proxies has more than 16 entries".into(),
        ),
        (
            format!(r#"{{"proxies": [{{"type": "socks", "password": "{MARK}"}}]}}"#),
            "proxies[0].type must be one of browserbase, external, none".into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "none"}}, {{"type": "external", "server": "ftp://p.example:21", "username": "u", "password": "{MARK}"}}]}}"#
            ),
            "proxies[1].server has the scheme \"ftp\"; supported: http://, https://, socks5://"
                .into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "none"}}, {{"type": "external", "server": "p.example:8080", "username": "u", "password": "{MARK}"}}]}}"#
            ),
            "proxies[1].server has the scheme \"p.example\"; supported: http://, https://, \
             socks5://"
                .into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "external", "server": "http://", "username": "u", "password": "{MARK}"}}]}}"#
            ),
            "proxies[0].server is not a URL (empty host); expected e.g. http://proxy.example:8080"
                .into(),
        ),
        (
            format!(r#"{{"proxies": [{{"type": "external", "password": "{MARK}"}}]}}"#),
            "proxies[0].server is required".into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "none"}}, {{"type": "none"}}, {}]}}"#,
                ext(r#", "domainPattern": "*.example.com""#)
            ),
            "proxies[2].domainPattern is not a valid regular expression: regex parse error:\n    \
             *.example.com\n    ^\nerror: repetition operator missing expression"
                .into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "external", "server": "http://p.example:1", "username": "{}", "password": "{MARK}"}}]}}"#,
                "u".repeat(256)
            ),
            "proxies[0].username must be 1 to 255 bytes with no line break".into(),
        ),
        (
            format!(r#"{{"proxies": [{}]}}"#, ext(r#", "proxyHost": "h""#)),
            "proxies[0] has unknown fields: proxyHost (expected type, server, username, \
             password, domainPattern)"
                .into(),
        ),
        (
            format!(
                r#"{{"proxies": [{{"type": "browserbase", "geolocation": {{"country": "US", "state": "NY"}}}}, {}]}}"#,
                ext("")
            ),
            "proxies[0].geolocation.state is not supported: managed pools are chosen by \
             country only"
                .into(),
        ),
        (
            format!(
                r#"{{"proxies": [{}], "browserSettings": {{"allowedDomains": ["a.test", "b.test", "c.test", "*.d.test"]}}}}"#,
                ext("")
            ),
            "browserSettings.allowedDomains[3] must be a domain name such as example.com (no \
             scheme, port, path or wildcard; subdomains are included)"
                .into(),
        ),
        (
            r#"{"browserSettings": {"allowedDomains": "a.test"}}"#.into(),
            "browserSettings.allowedDomains must be an array of domain names".into(),
        ),
    ];
    for (body, want) in cases {
        let r = h.create(&body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[]);
        assert_eq!(r.1["message"], want.as_str(), "{body}");
        assert!(!r.1.to_string().contains(MARK), "{}", r.1);
    }
    assert!(h.launched().is_empty(), "nothing launched");
    assert!(h.held(PROJ_A).is_empty(), "no slot held");
    assert!(h.sessions.0.lock().unwrap().is_empty(), "no session kept");
}

/// `proxies: true` and managed entries on a platform without pools: a 400 that says what to do
/// instead, never a session that egresses directly.
#[tokio::test]
async fn managed_proxies_without_a_pool_are_a_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(r#"{"proxies": true}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &[
            "proxies is true (managed proxies)",
            "no default managed proxy pool",
            "MANAGED_PROXIES_FILE",
            "MANAGED_PROXIES_SECRET_ARN",
            "type: \"external\"",
        ],
    );
    let h = with_pools();
    let r = h
        .create(r#"{"proxies": [{"type": "browserbase", "geolocation": {"country": "de"}}]}"#)
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &[
            "proxies[0].geolocation.country is DE",
            "no managed proxies for DE",
            "\"DE\" pool",
        ],
    );
    assert!(h.launched().is_empty());
    assert!(!r.1.to_string().contains(MARK));
}

/// `proxies: true` with a default pool: one route, every host, through the pool's server chosen
/// by the session's id (with the pool's credentials); a country's entry through its own pool.
#[tokio::test]
async fn managed_proxies_come_from_the_operators_pools() {
    let h = with_pools();
    let (status, body) = h.create(r#"{"proxies": true}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap();
    let e = h.launched_egress();
    assert_eq!(e.routes.len(), 1);
    assert_eq!(e.routes[0].domain_pattern, None);
    let chosen = e.routes[0].proxy.clone().unwrap();
    assert_eq!(chosen, pools().pick("default", id).unwrap());
    assert_eq!(chosen.password.as_deref(), Some(MARK));

    let h = with_pools();
    let (status, body) = h
        .create(r#"{"proxies": [{"type": "browserbase", "domainPattern": ".*\\.us\\.test", "geolocation": {"country": "us"}}]}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let e = h.launched_egress();
    assert_eq!(
        e.routes[0].domain_pattern.as_deref(),
        Some(".*\\.us\\.test")
    );
    assert_eq!(
        e.routes[0].proxy.as_ref().unwrap().display(),
        "socks5://us.example:1080"
    );
}

/// Entries become routes in their order (`none` direct), and `allowedDomains` is normalised.
#[tokio::test]
async fn routes_keep_their_order_and_allowed_domains_are_normalised() {
    let h = with_pools();
    let body = format!(
        r#"{{"proxies": [
            {{"type": "none", "domainPattern": "direct\\.test"}},
            {{"type": "external", "server": "socks5://127.0.0.1:1081", "username": "u", "password": "{MARK}", "domainPattern": ".*\\.a\\.test"}},
            {{"type": "browserbase", "geolocation": {{"country": "US"}}}},
            {{"type": "external", "server": "http://[::1]:8080"}}
         ],
         "browserSettings": {{"allowedDomains": ["Example.COM.", "docs.rs"]}}}}"#
    );
    let (status, created) = h.create(&body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let e = h.launched_egress();
    let routes: Vec<(Option<&str>, Option<String>)> = e
        .routes
        .iter()
        .map(|r| {
            (
                r.domain_pattern.as_deref(),
                r.proxy.as_ref().map(|p| p.display()),
            )
        })
        .collect();
    assert_eq!(
        routes,
        [
            (Some("direct\\.test"), None),
            (
                Some(".*\\.a\\.test"),
                Some("socks5://127.0.0.1:1081".into())
            ),
            (None, Some("socks5://us.example:1080".into())),
            (None, Some("http://[::1]:8080".into())),
        ]
    );
    assert_eq!(e.allowed_domains, ["example.com", "docs.rs"]);

    // allowedDomains alone, and an empty list is no restriction at all.
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, _) = h
        .create(r#"{"browserSettings": {"allowedDomains": ["a.test"]}}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(h.launched_egress().allowed_domains, ["a.test"]);
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, _) = h
        .create(r#"{"proxies": false, "browserSettings": {"allowedDomains": []}}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(h.launched()[0].egress, None);
}

/// Log lines of everything the test runs on this thread (a current-thread runtime: every task).
#[derive(Clone, Default)]
pub(super) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Every log line of this thread, from now until the guard drops. A second (silent)
    /// dispatcher lives beside the capture: with one scoped dispatcher alone, tracing-core
    /// decides a callsite's interest from the default of the thread that first reaches it —
    /// another test's, which has none — and caches `never` for this thread too.
    pub(super) fn capture() -> (Logs, Capture) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let silent = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        let guard = tracing::subscriber::set_default(subscriber);
        (
            logs,
            Capture {
                _guard: guard,
                _silent: silent,
            },
        )
    }
}

/// A capture's life ([`Logs::capture`]).
pub(super) struct Capture {
    _guard: tracing::subscriber::DefaultGuard,
    _silent: tracing::Dispatch,
}

/// A proxy's password reaches the launcher and nothing else: not the session item, not the
/// create's answer nor any read of the session, not a log line.
#[tokio::test]
async fn a_proxy_password_goes_to_the_launcher_only() {
    let (logs, _capture) = Logs::capture();

    let h = with_pools();
    let body = format!(
        r#"{{"proxies": [{{"type": "external", "server": "http://proxy.example:3128", "username": "alice", "password": "{MARK}"}}, {{"type": "browserbase"}}]}}"#
    );
    let (status, created) = h.create(&body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (_, read) = h.get(&format!("/v1/sessions/{id}")).await;
    let (_, listed) = h.get("/v1/sessions").await;
    let (_, released) = h.release(&id).await;

    let e = h.launched_egress();
    let p = e.routes[0].proxy.as_ref().unwrap();
    assert_eq!(
        (p.username.as_deref(), p.password.as_deref()),
        (Some("alice"), Some(MARK)),
        "the launcher has it"
    );
    for (what, text) in [
        ("the stored session", h.stored()),
        ("the create's answer", created.to_string()),
        ("the session read", read.to_string()),
        ("the listing", listed.to_string()),
        ("the release's answer", released.to_string()),
        ("the logs", logs.text()),
    ] {
        assert!(!text.contains(MARK), "{what} holds the password: {text}");
        assert!(
            !text.contains("proxy.example"),
            "{what} names the proxy: {text}"
        );
    }
    let log = logs.text();
    assert!(
        log.contains("the session has egress settings") && log.contains("routes=2"),
        "the capture saw the create: {log}"
    );
}

/// A launcher that cannot pass secrets on (ECS's task per session): otherwise the recording
/// launcher.
struct NoSecrets(MemLauncher);

#[async_trait::async_trait]
impl Launcher for NoSecrets {
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        self.0.launch(spec).await
    }
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        self.0.stop(session_id, task_arn).await
    }
    fn carries_secrets(&self, _cold: bool) -> bool {
        false
    }
}

/// Where the launcher cannot pass secrets on, proxies with credentials are a 400 (nothing
/// launched, the slot given back); proxies without are launched.
#[tokio::test]
async fn proxy_credentials_are_refused_where_the_launcher_cannot_carry_them() {
    let sessions = MemSessions::default();
    let launcher = MemLauncher::new(sessions.clone(), LaunchBehaviour::BecomeReady);
    let h = Harness::with_launcher(
        sessions,
        launcher.clone(),
        Arc::new(NoSecrets(launcher)),
        Settings {
            managed_proxies: pools(),
            ..waiting(Duration::from_millis(400))
        },
    );
    let with = format!(
        r#"{{"proxies": [{{"type": "external", "server": "http://p.example:1", "username": "u", "password": "{MARK}"}}]}}"#
    );
    for body in [with.as_str(), r#"{"proxies": true}"#] {
        let r = h.create(body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[]);
        assert_eq!(
            r.1["message"],
            "proxies with a username or password are not possible on this deployment: it \
             starts a task per session, whose settings anyone allowed to describe its tasks \
             can read; proxy credentials need the warm pool (POOL_QUEUE_URL)"
        );
    }
    assert!(h.launched().is_empty());
    assert!(h.held(PROJ_A).is_empty(), "the slot is given back");
    assert!(h.sessions.0.lock().unwrap().is_empty(), "no session kept");

    let (status, body) = h
        .create(r#"{"proxies": [{"type": "browserbase", "geolocation": {"country": "US"}}, {"type": "external", "server": "http://p.example:1"}]}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(!h.launched_egress().has_credentials());
}
