//! A create's `proxies` and `browserSettings.allowedDomains`, checked and turned into the
//! session's [`Egress`] ([`session_egress`]), with managed proxies taken from the operator's
//! pools ([`pools`]).
//!
//! The shapes are Browserbase's (SDK 2.21.0's `SessionCreateParams`): `proxies` is `true`
//! (managed proxies), `false`, or an array of `{type: "browserbase", domainPattern?,
//! geolocation?: {country}}`, `{type: "external", server, username?, password?,
//! domainPattern?}` and `{type: "none", domainPattern?}`, each one route in order.
//! `allowedDomains` is a list of domain names (an empty list: no restriction).
//!
//! Every refusal ([`Refusal`], a 400) names the field exactly (`proxies[1].server is not a
//! URL (…)`) and never repeats a value that may be a credential. What is not supported is
//! refused, never ignored: a session that asked for a proxy never egresses directly.

pub mod pools;

use serde_json::{Map, Value};
use wallcrawler_contract::egress::{
    self, Egress, MAX_ALLOWED_DOMAINS, MAX_ROUTES, ProxyServer, Route,
};

pub use pools::{DEFAULT_POOL, ManagedProxies, PoolsError};

/// A create's egress refused: the message names the field, never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(String);

/// A refusal inside one entry: the field under it (`server`, `geolocation.country`; empty:
/// the entry itself) and what is wrong.
#[derive(Debug)]
struct Bad {
    field: String,
    why: String,
}

impl Bad {
    fn at(field: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            why: why.into(),
        }
    }

    /// The message after the entry's own path: `.server is required`, ` has …`.
    fn after_path(&self) -> String {
        if self.field.is_empty() {
            format!(" {}", self.why)
        } else {
            format!(".{} {}", self.field, self.why)
        }
    }

    /// The refusal of this, inside the entry at `at`.
    fn under(self, at: &str) -> Refusal {
        Refusal(format!("{at}{}", self.after_path()))
    }
}

/// How the operator configures managed pools, for the refusals that ask for one.
const CONFIGURE_POOLS: &str = "serve --managed-proxies FILE or MANAGED_PROXIES_FILE locally, \
                               the secret MANAGED_PROXIES_SECRET_ARN on AWS";

/// The most unknown field names a refusal lists, and the most characters of each.
const NAMES_SHOWN: usize = 5;
const NAME_CHARS: usize = 40;

/// Refuses fields of `m` other than `allowed`, naming them (never their values).
fn only_fields(m: &Map<String, Value>, allowed: &[&str], field: &str) -> Result<(), Bad> {
    let unknown: Vec<&String> = m
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = unknown
        .iter()
        .take(NAMES_SHOWN)
        .map(|k| k.chars().take(NAME_CHARS).collect())
        .collect();
    if unknown.len() > NAMES_SHOWN {
        names.push("…".into());
    }
    Err(Bad::at(
        field,
        format!(
            "has unknown fields: {} (expected {})",
            names.join(", "),
            allowed.join(", ")
        ),
    ))
}

/// Optional string field `name` of `m` (absent or null: `None`).
fn opt_str<'a>(m: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, Bad> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Bad::at(name, "must be a string")),
    }
}

/// An upstream proxy from `server`, `username` and `password` of `m`: a create's external
/// entry or a managed pool's entry.
fn proxy_server(m: &Map<String, Value>) -> Result<ProxyServer, Bad> {
    let server = opt_str(m, "server")?.ok_or_else(|| Bad::at("server", "is required"))?;
    let (username, password) = (opt_str(m, "username")?, opt_str(m, "password")?);
    // The server alone first, so its refusals are the server's; the contract's messages never
    // repeat the URL.
    let mut s = ProxyServer::parse(server, None, None).map_err(|e| Bad::at("server", e))?;
    s.username = username.map(str::to_owned);
    s.password = password.map(str::to_owned);
    s.check().map_err(|e| {
        // "username must be …", "password must be …", or about the pair ("has a password
        // without a username").
        match e.split_once(' ') {
            Some((f @ ("username" | "password"), why)) => Bad::at(f, why),
            _ => Bad::at("", e),
        }
    })?;
    Ok(s)
}

/// What a create asked for, checked: its egress, or `None` when there is nothing to apply.
/// `proxies` and `allowed_domains` as the client sent them (absent or null: none); managed
/// entries take a server of `pools` chosen by `session_id`.
pub fn session_egress(
    proxies: Option<&Value>,
    allowed_domains: Option<&Value>,
    pools: &ManagedProxies,
    session_id: &str,
) -> Result<Option<Egress>, Refusal> {
    let e = Egress {
        routes: match proxies {
            Some(p) => routes(p, pools, session_id)?,
            None => Vec::new(),
        },
        allowed_domains: match allowed_domains {
            Some(a) => allowed(a)?,
            None => Vec::new(),
        },
    };
    // What a controller checks again: never a claim it would refuse.
    e.check()
        .map_err(|why| Refusal(format!("the session's egress is refused: {why}")))?;
    Ok((!e.is_empty()).then_some(e))
}

/// `proxies`: a boolean or an array of entries, each a route in order.
fn routes(proxies: &Value, pools: &ManagedProxies, sid: &str) -> Result<Vec<Route>, Refusal> {
    match proxies {
        Value::Null | Value::Bool(false) => Ok(Vec::new()),
        Value::Bool(true) => {
            let proxy = pools.pick(DEFAULT_POOL, sid).ok_or_else(|| {
                Refusal(format!(
                    "proxies is true (managed proxies), but this platform has no default \
                     managed proxy pool: its operator can configure one ({CONFIGURE_POOLS}), or \
                     use [{{type: \"external\", server: \"http://host:port\"}}]"
                ))
            })?;
            Ok(vec![Route {
                domain_pattern: None,
                proxy: Some(proxy),
            }])
        }
        Value::Array(entries) if entries.len() > MAX_ROUTES => Err(Refusal(format!(
            "proxies has more than {MAX_ROUTES} entries"
        ))),
        Value::Array(entries) => entries
            .iter()
            .enumerate()
            .map(|(i, e)| route(&format!("proxies[{i}]"), e, pools, sid))
            .collect(),
        _ => Err(Refusal("proxies must be a boolean or an array".into())),
    }
}

/// The three types of entry.
#[derive(Clone, Copy)]
enum Kind {
    Managed,
    External,
    Direct,
}

impl Kind {
    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Managed => &["type", "domainPattern", "geolocation"],
            Kind::External => &["type", "server", "username", "password", "domainPattern"],
            Kind::Direct => &["type", "domainPattern"],
        }
    }
}

/// One entry of `proxies`, at `at` (`proxies[i]`).
fn route(at: &str, entry: &Value, pools: &ManagedProxies, sid: &str) -> Result<Route, Refusal> {
    let Value::Object(m) = entry else {
        return Err(Bad::at("", "must be an object with a type").under(at));
    };
    let kind = match m.get("type").and_then(Value::as_str) {
        Some("browserbase") => Kind::Managed,
        Some("external") => Kind::External,
        Some("none") => Kind::Direct,
        _ => {
            return Err(Bad::at("type", "must be one of browserbase, external, none").under(at));
        }
    };
    only_fields(m, kind.fields(), "").map_err(|b| b.under(at))?;
    let domain_pattern = opt_str(m, "domainPattern")
        .and_then(|p| match p {
            Some(p) => egress::compile_pattern(p)
                .map(|_| Some(p.to_owned()))
                .map_err(|e| Bad::at("domainPattern", e)),
            None => Ok(None),
        })
        .map_err(|b| b.under(at))?;
    let proxy = match kind {
        Kind::External => Some(proxy_server(m).map_err(|b| b.under(at))?),
        Kind::Direct => None,
        Kind::Managed => Some(managed(at, m, pools, sid)?),
    };
    Ok(Route {
        domain_pattern,
        proxy,
    })
}

/// A managed entry's server: from the pool of its `geolocation.country`, or the default pool.
fn managed(
    at: &str,
    m: &Map<String, Value>,
    pools: &ManagedProxies,
    sid: &str,
) -> Result<ProxyServer, Refusal> {
    let country = match m.get("geolocation") {
        None | Some(Value::Null) => None,
        Some(Value::Object(g)) => Some(country(g).map_err(|b| b.under(at))?),
        Some(_) => return Err(Bad::at("geolocation", "must be an object with a country").under(at)),
    };
    let pool = country.as_deref().unwrap_or(DEFAULT_POOL);
    pools.pick(pool, sid).ok_or_else(|| {
        Refusal(match &country {
            Some(c) => format!(
                "{at}.geolocation.country is {c}, but this platform has no managed proxies for \
                 {c}: its operator can configure a \"{c}\" pool ({CONFIGURE_POOLS}), or use \
                 {{type: \"external\", server: \"http://host:port\"}}"
            ),
            None => format!(
                "{at}.type is browserbase (managed proxies), but this platform has no default \
                 managed proxy pool: its operator can configure one ({CONFIGURE_POOLS}), or use \
                 {{type: \"external\", server: \"http://host:port\"}}"
            ),
        })
    })
}

/// `geolocation`'s country as a pool name (upper case). State and city are refused: pools are
/// by country only.
fn country(g: &Map<String, Value>) -> Result<String, Bad> {
    only_fields(g, &["country", "state", "city"], "geolocation")?;
    for f in ["state", "city"] {
        if g.get(f).is_some_and(|v| !v.is_null()) {
            return Err(Bad::at(
                format!("geolocation.{f}"),
                "is not supported: managed pools are chosen by country only",
            ));
        }
    }
    match g.get("country").and_then(Value::as_str) {
        Some(c) if c.len() == 2 && c.bytes().all(|b| b.is_ascii_alphabetic()) => {
            Ok(c.to_ascii_uppercase())
        }
        _ => Err(Bad::at(
            "geolocation.country",
            "must be an ISO 3166-1 alpha-2 country code such as US",
        )),
    }
}

/// `browserSettings.allowedDomains`, normalised; an empty list (or null) is no restriction.
fn allowed(v: &Value) -> Result<Vec<String>, Refusal> {
    const AT: &str = "browserSettings.allowedDomains";
    let list = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        _ => return Err(Refusal(format!("{AT} must be an array of domain names"))),
    };
    if list.len() > MAX_ALLOWED_DOMAINS {
        return Err(Refusal(format!(
            "{AT} has more than {MAX_ALLOWED_DOMAINS} entries"
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, d) in list.iter().enumerate() {
        let d = d
            .as_str()
            .ok_or_else(|| Refusal(format!("{AT}[{i}] must be a string")))?;
        let d = egress::allowed_domain(d).map_err(|e| Refusal(format!("{AT}[{i}] {e}")))?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

/// Refuses an egress with credentials where the launcher cannot pass them on privately
/// ([`crate::stores::Launcher::carries_secrets`]).
pub fn check_credentials(egress: Option<&Egress>, carries_secrets: bool) -> Result<(), Refusal> {
    if carries_secrets || !egress.is_some_and(Egress::has_credentials) {
        return Ok(());
    }
    Err(Refusal(
        "proxies with a username or password are not possible on this deployment: it starts a \
         task per session, whose settings anyone allowed to describe its tasks can read; proxy \
         credentials need the warm pool (POOL_QUEUE_URL)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A password planted in every case: no refusal may repeat it.
    const MARK: &str = "planted-secret-42b1";

    fn pools() -> ManagedProxies {
        ManagedProxies::parse(
            r#"{"default": [{"server": "http://pool.example:3128", "username": "pu", "password": "pp"}],
                "US": [{"server": "socks5://us.example:1080"}]}"#,
        )
        .unwrap()
    }

    fn egress_of(proxies: Value) -> Result<Option<Egress>, Refusal> {
        session_egress(Some(&proxies), None, &pools(), "sess_1")
    }

    #[test]
    fn entries_become_routes_in_order() {
        let e = egress_of(json!([
            {"type": "external", "server": "http://p1.example:8080", "username": "u",
             "password": MARK, "domainPattern": ".*\\.a\\.test"},
            {"type": "none", "domainPattern": "direct\\.test"},
            {"type": "browserbase", "geolocation": {"country": "us"}},
            {"type": "browserbase", "domainPattern": "b\\.test", "geolocation": null},
            {"type": "external", "server": "socks5://[::1]:1081", "username": null},
        ]))
        .unwrap()
        .unwrap();
        let shown: Vec<(Option<&str>, Option<String>)> = e
            .routes
            .iter()
            .map(|r| {
                (
                    r.domain_pattern.as_deref(),
                    r.proxy.as_ref().map(ProxyServer::display),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (Some(".*\\.a\\.test"), Some("http://p1.example:8080".into())),
                (Some("direct\\.test"), None),
                (None, Some("socks5://us.example:1080".into())),
                (Some("b\\.test"), Some("http://pool.example:3128".into())),
                (None, Some("socks5://[::1]:1081".into())),
            ]
        );
        let first = e.routes[0].proxy.as_ref().unwrap();
        assert_eq!(
            (first.username.as_deref(), first.password.as_deref()),
            (Some("u"), Some(MARK))
        );
        assert_eq!(
            e.routes[3].proxy.as_ref().unwrap().password.as_deref(),
            Some("pp"),
            "a managed pool's credentials go with the route"
        );
        assert!(e.has_credentials());
    }

    #[test]
    fn true_is_the_default_pool_and_false_or_empty_is_nothing() {
        let e = egress_of(json!(true)).unwrap().unwrap();
        assert_eq!(e.routes.len(), 1);
        assert_eq!(e.routes[0].domain_pattern, None);
        assert_eq!(
            e.routes[0].proxy.as_ref().unwrap().display(),
            "http://pool.example:3128"
        );
        assert_eq!(egress_of(json!(false)).unwrap(), None);
        assert_eq!(egress_of(json!([])).unwrap(), None);
        assert_eq!(egress_of(Value::Null).unwrap(), None);
        assert_eq!(
            session_egress(None, None, &ManagedProxies::default(), "s").unwrap(),
            None
        );
    }

    #[test]
    fn allowed_domains_are_normalised_and_empty_is_off() {
        let allowed = json!(["Example.com.", "docs.rs", "example.com"]);
        let e = session_egress(None, Some(&allowed), &pools(), "s")
            .unwrap()
            .unwrap();
        assert_eq!(e.allowed_domains, ["example.com", "docs.rs"]);
        assert!(e.routes.is_empty());
        assert_eq!(
            session_egress(None, Some(&json!([])), &pools(), "s").unwrap(),
            None
        );
    }

    #[test]
    fn every_malformed_entry_is_refused_by_its_field_without_its_secret() {
        let long = "x".repeat(256);
        let cases: Vec<(Value, String)> = vec![
            (json!("yes"), "proxies must be a boolean or an array".into()),
            (json!({"type": "none"}), "proxies must be a boolean or an array".into()),
            (
                Value::Array(vec![json!({"type": "none"}); 17]),
                "proxies has more than 16 entries".into(),
            ),
            (json!([MARK]), "proxies[0] must be an object with a type".into()),
            (
                json!([{"type": "ftp", "server": "ftp://a:1", "password": MARK}]),
                "proxies[0].type must be one of browserbase, external, none".into(),
            ),
            (
                json!([{"server": "http://a:1", "username": "u", "password": MARK}]),
                "proxies[0].type must be one of browserbase, external, none".into(),
            ),
            (
                json!([{"type": "none"}, {"type": "external", "server": "not a url",
                        "username": "u", "password": MARK}]),
                "proxies[1].server is not a URL (relative URL without a base); expected e.g. \
                 http://proxy.example:8080"
                    .into(),
            ),
            (
                json!([{"type": "external", "server": "ftp://a.example:21", "username": "u",
                        "password": MARK}]),
                "proxies[0].server has the scheme \"ftp\"; supported: http://, https://, socks5://"
                    .into(),
            ),
            (
                json!([{"type": "external", "server": format!("http://u:{MARK}@a.example:1")}]),
                "proxies[0].server carries credentials in the URL; give them as username and \
                 password"
                    .into(),
            ),
            (
                json!([{"type": "external", "username": "u", "password": MARK}]),
                "proxies[0].server is required".into(),
            ),
            (
                json!([{"type": "external", "server": 8080, "password": MARK}]),
                "proxies[0].server must be a string".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": long,
                        "password": MARK}]),
                "proxies[0].username must be 1 to 255 bytes with no line break".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": "u",
                        "password": format!("{MARK}\r\n")}]),
                "proxies[0].password must be 1 to 255 bytes with no line break".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": "a:b",
                        "password": MARK}]),
                "proxies[0].username may not contain ':' (HTTP Basic authentication)".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "password": MARK}]),
                "proxies[0] has a password without a username".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": "u",
                        "password": MARK, "pasword": MARK}]),
                "proxies[0] has unknown fields: pasword (expected type, server, username, \
                 password, domainPattern)"
                    .into(),
            ),
            (
                json!([{"type": "none", "server": "http://a:1", "password": MARK}]),
                "proxies[0] has unknown fields: password, server (expected type, domainPattern)"
                    .into(),
            ),
            (
                json!([{"type": "none"}, {"type": "none"}, {"type": "external",
                        "server": "http://a:1", "username": "u", "password": MARK,
                        "domainPattern": "("}]),
                "proxies[2].domainPattern is not a valid regular expression: regex parse error:\n    \
                 (\n    ^\nerror: unclosed group"
                    .into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": "u",
                        "password": MARK, "domainPattern": "\\w{200}\\w{200}"}]),
                "proxies[0].domainPattern is too complex".into(),
            ),
            (
                json!([{"type": "external", "server": "http://a:1", "username": "u",
                        "password": MARK, "domainPattern": 1}]),
                "proxies[0].domainPattern must be a string".into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": "US"}]),
                "proxies[0].geolocation must be an object with a country".into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": {"country": "USA"}}]),
                "proxies[0].geolocation.country must be an ISO 3166-1 alpha-2 country code \
                 such as US"
                    .into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": {"state": "NY"}}]),
                "proxies[0].geolocation.state is not supported: managed pools are chosen by \
                 country only"
                    .into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": {"country": "US",
                        "city": "New York"}}]),
                "proxies[0].geolocation.city is not supported: managed pools are chosen by \
                 country only"
                    .into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": {"country": "US", "zip": MARK}}]),
                "proxies[0].geolocation has unknown fields: zip (expected country, state, city)"
                    .into(),
            ),
            (
                json!([{"type": "browserbase", "server": "http://a:1", "password": MARK}]),
                "proxies[0] has unknown fields: password, server (expected type, \
                 domainPattern, geolocation)"
                    .into(),
            ),
            (
                json!([{"type": "browserbase", "geolocation": {"country": "de"}}]),
                format!(
                    "proxies[0].geolocation.country is DE, but this platform has no managed \
                     proxies for DE: its operator can configure a \"DE\" pool \
                     ({CONFIGURE_POOLS}), or use {{type: \"external\", server: \
                     \"http://host:port\"}}"
                ),
            ),
        ];
        for (proxies, want) in cases {
            let e = egress_of(proxies.clone()).unwrap_err().to_string();
            assert_eq!(e, want, "{proxies}");
            assert!(!e.contains(MARK), "{e}");
        }
    }

    #[test]
    fn managed_proxies_without_a_pool_say_what_to_do_instead() {
        let none = ManagedProxies::default();
        let e = session_egress(Some(&json!(true)), None, &none, "s").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "proxies is true (managed proxies), but this platform has no default managed \
                 proxy pool: its operator can configure one ({CONFIGURE_POOLS}), or use \
                 [{{type: \"external\", server: \"http://host:port\"}}]"
            )
        );
        let e =
            session_egress(Some(&json!([{"type": "browserbase"}])), None, &none, "s").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "proxies[0].type is browserbase (managed proxies), but this platform has no \
                 default managed proxy pool: its operator can configure one \
                 ({CONFIGURE_POOLS}), or use {{type: \"external\", server: \"http://host:port\"}}"
            )
        );
    }

    #[test]
    fn malformed_allowed_domains_are_refused_by_index() {
        let at = |v: Value| {
            session_egress(None, Some(&v), &pools(), "s")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            at(json!("example.com")),
            "browserSettings.allowedDomains must be an array of domain names"
        );
        assert_eq!(
            at(json!(["a.test", "b.test", "c.test", "https://d.test/"])),
            "browserSettings.allowedDomains[3] must be a domain name such as example.com (no \
             scheme, port, path or wildcard; subdomains are included)"
        );
        assert_eq!(
            at(json!(["a.test", 7])),
            "browserSettings.allowedDomains[1] must be a string"
        );
        assert_eq!(
            at(Value::Array(vec![json!("a.test"); 101])),
            "browserSettings.allowedDomains has more than 100 entries"
        );
    }

    #[test]
    fn unknown_fields_are_listed_bounded() {
        let mut m = Map::new();
        for i in 0..7 {
            m.insert(format!("{i}{}", "k".repeat(60)), Value::Null);
        }
        let e = only_fields(&m, &["type"], "").unwrap_err().why;
        assert_eq!(e.matches(&"k".repeat(39)).count(), 5, "{e}");
        assert!(!e.contains(&"k".repeat(40)), "{e}");
        assert!(e.contains(", …"), "{e}");
    }

    #[test]
    fn credentials_only_where_the_launcher_carries_them() {
        let with = egress_of(json!([{"type": "external", "server": "http://a:1",
                                     "username": "u", "password": MARK}]))
        .unwrap();
        let without = egress_of(json!([{"type": "external", "server": "http://a:1"}])).unwrap();
        assert!(check_credentials(with.as_ref(), true).is_ok());
        assert!(check_credentials(without.as_ref(), false).is_ok());
        assert!(check_credentials(None, false).is_ok());
        let e = check_credentials(with.as_ref(), false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("proxies with a username or password"), "{e}");
        assert!(e.contains("POOL_QUEUE_URL") && !e.contains(MARK), "{e}");
    }
}
