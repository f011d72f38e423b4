//! A session's egress: where each connection its browser makes goes (the session's
//! `proxies`), and which top-level navigations it may make (`allowedDomains`).
//!
//! The control plane turns a create's Browserbase-shaped `proxies` and
//! `browserSettings.allowedDomains` into an [`Egress`] and hands it to the session's controller
//! with its claim (or, for a local cold start, in its private environment): never through the
//! session item, whose stream and events anyone subscribed may read, because proxy passwords
//! are in it. The controller's egress hop applies it to every connection Chrome makes.
//!
//! Routing ([`Egress::route_for`]): the routes in order, the first whose `domainPattern` (a
//! regular expression matched against the whole host name, case-insensitively, on a
//! linear-time engine) matches wins; a route without a pattern matches every host; a host no
//! route matches goes direct (Browserbase's rule). A direct route (`type: "none"`) sends its
//! hosts direct.
//!
//! Everything here is checked again when a controller reads it ([`Egress::check`]): a claim is
//! untrusted input.

use serde::{Deserialize, Serialize};

/// The most routes a session may have.
pub const MAX_ROUTES: usize = 16;
/// The longest `domainPattern`, in bytes.
pub const MAX_PATTERN_BYTES: usize = 256;
/// The most memory a compiled `domainPattern` may take (the regex crate's size limit).
pub const MAX_PATTERN_PROGRAM_BYTES: usize = 64 << 10;
/// The longest proxy `server` URL, in bytes.
pub const MAX_SERVER_BYTES: usize = 512;
/// The longest `username` or `password` (RFC 1929's limit for SOCKS5, kept for HTTP too).
pub const MAX_CREDENTIAL_BYTES: usize = 255;
/// The most `allowedDomains` entries.
pub const MAX_ALLOWED_DOMAINS: usize = 100;
/// The longest domain name.
pub const MAX_DOMAIN_BYTES: usize = 253;

/// How the hop talks to an upstream proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyScheme {
    /// HTTP `CONNECT`, Basic authentication.
    Http,
    /// HTTP `CONNECT` inside TLS to the proxy, Basic authentication.
    Https,
    /// SOCKS5 (RFC 1928), username/password authentication (RFC 1929).
    Socks5,
}

impl ProxyScheme {
    /// The URL scheme.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
            Self::Socks5 => "socks5",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
            Self::Socks5 => 1080,
        }
    }
}

/// One upstream proxy.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyServer {
    /// How to talk to it.
    pub scheme: ProxyScheme,
    /// Its host name or address (an IPv6 address without brackets).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The user name it is given, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password it is given, if any. Never logged, never in an answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl ProxyServer {
    /// Parses a create's `server` (`http://`, `https://` or `socks5://` host and optional
    /// port; no user info, path, query or fragment) with its credentials. The error says what
    /// is wrong without repeating the input (it may hold a secret).
    pub fn parse(
        server: &str,
        username: Option<&str>,
        password: Option<&str>,
    ) -> Result<ProxyServer, String> {
        if server.len() > MAX_SERVER_BYTES {
            return Err(format!("is longer than {MAX_SERVER_BYTES} bytes"));
        }
        let url = url::Url::parse(server)
            .map_err(|e| format!("is not a URL ({e}); expected e.g. http://proxy.example:8080"))?;
        let scheme = match url.scheme() {
            "http" => ProxyScheme::Http,
            "https" => ProxyScheme::Https,
            "socks5" => ProxyScheme::Socks5,
            other => {
                return Err(format!(
                    "has the scheme {other:?}; supported: http://, https://, socks5://"
                ));
            }
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                "carries credentials in the URL; give them as username and password".into(),
            );
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err("has a path, query or fragment; give only scheme://host:port".into());
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            None => return Err("has no host".into()),
        };
        let port = url.port().unwrap_or(scheme.default_port());
        let s = ProxyServer {
            scheme,
            host,
            port,
            username: username.map(str::to_owned),
            password: password.map(str::to_owned),
        };
        s.check()?;
        Ok(s)
    }

    /// The credentials' bounds, and a password only with a user name.
    pub fn check(&self) -> Result<(), String> {
        if self.host.is_empty() || self.host.len() > MAX_DOMAIN_BYTES {
            return Err("has no valid host".into());
        }
        for (name, v) in [("username", &self.username), ("password", &self.password)] {
            if let Some(v) = v
                && (v.is_empty() || v.len() > MAX_CREDENTIAL_BYTES || v.contains(['\r', '\n']))
            {
                return Err(format!(
                    "{name} must be 1 to {MAX_CREDENTIAL_BYTES} bytes with no line break"
                ));
            }
        }
        if self.password.is_some() && self.username.is_none() {
            return Err("has a password without a username".into());
        }
        if self.scheme == ProxyScheme::Http || self.scheme == ProxyScheme::Https {
            // Basic authentication joins them with a colon.
            if self.username.as_deref().is_some_and(|u| u.contains(':')) {
                return Err("username may not contain ':' (HTTP Basic authentication)".into());
            }
        }
        Ok(())
    }

    /// `scheme://host:port`, no credentials: what logs and answers may name.
    pub fn display(&self) -> String {
        if self.host.contains(':') {
            format!("{}://[{}]:{}", self.scheme.as_str(), self.host, self.port)
        } else {
            format!("{}://{}:{}", self.scheme.as_str(), self.host, self.port)
        }
    }
}

impl std::fmt::Debug for ProxyServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyServer")
            .field("server", &self.display())
            .field("username", &self.username.is_some())
            .field("password", &self.password.is_some())
            .finish()
    }
}

/// One route: the hosts it takes, and where they go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    /// The hosts this route takes (a regular expression on the whole host name); absent:
    /// every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_pattern: Option<String>,
    /// The upstream proxy; absent: direct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyServer>,
}

/// A session's egress settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Egress {
    /// The routes, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// The domains top-level navigations may reach (subdomains included); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_domains: Vec<String>,
}

/// Compiles a `domainPattern`: anchored to the whole host, case-insensitive, bounded in size.
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.is_empty() || pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!("must be 1 to {MAX_PATTERN_BYTES} bytes"));
    }
    let build = |p: &str| {
        regex::RegexBuilder::new(p)
            .case_insensitive(true)
            .size_limit(MAX_PATTERN_PROGRAM_BYTES)
            .dfa_size_limit(MAX_PATTERN_PROGRAM_BYTES)
            .build()
            .map_err(|e| match e {
                regex::Error::CompiledTooBig(_) => "is too complex".to_owned(),
                // The parser's message quotes the pattern: the client's own text, as written.
                regex::Error::Syntax(text) => format!("is not a valid regular expression: {text}"),
                e => format!("is not a valid regular expression: {e}"),
            })
    };
    // Alone first, so an error is about the text the client wrote (inside the anchors, `[a-`
    // would be misread as a class ending in `)`), then anchored to the whole host.
    build(pattern)?;
    build(&format!("^(?:{pattern})$"))
}

/// Normalises one `allowedDomains` entry: a host name (no scheme, port, path or wildcard),
/// lower-cased, without a trailing dot.
pub fn allowed_domain(entry: &str) -> Result<String, String> {
    let d = entry.trim().trim_end_matches('.').to_ascii_lowercase();
    let ok = !d.is_empty()
        && d.len() <= MAX_DOMAIN_BYTES
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(d)
    } else {
        Err(
            "must be a domain name such as example.com (no scheme, port, path or wildcard; \
             subdomains are included)"
                .into(),
        )
    }
}

/// Whether `host` is one of `allowed` or a subdomain of one (`example.com` allows
/// `www.example.com`, not `notexample.com`). An empty list allows everything.
pub fn host_allowed(allowed: &[String], host: &str) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allowed.iter().any(|d| {
        host == *d
            || host
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.ends_with('.'))
    })
}

impl Egress {
    /// Whether there is anything to apply.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty() && self.allowed_domains.is_empty()
    }

    /// Whether any route goes through a proxy.
    pub fn proxied(&self) -> bool {
        self.routes.iter().any(|r| r.proxy.is_some())
    }

    /// Whether any proxy has credentials (which only a private channel may carry).
    pub fn has_credentials(&self) -> bool {
        self.routes
            .iter()
            .filter_map(|r| r.proxy.as_ref())
            .any(|p| p.username.is_some() || p.password.is_some())
    }

    /// Every bound and rule, as a controller checks a claim's egress. The error names the
    /// part (`routes[i]…`, `allowedDomains[i]`), never a credential.
    pub fn check(&self) -> Result<(), String> {
        if self.routes.len() > MAX_ROUTES {
            return Err(format!("more than {MAX_ROUTES} routes"));
        }
        for (i, r) in self.routes.iter().enumerate() {
            if let Some(p) = &r.domain_pattern {
                compile_pattern(p).map_err(|e| format!("routes[{i}].domainPattern {e}"))?;
            }
            if let Some(s) = &r.proxy {
                s.check().map_err(|e| format!("routes[{i}].proxy {e}"))?;
            }
        }
        if self.allowed_domains.len() > MAX_ALLOWED_DOMAINS {
            return Err(format!("more than {MAX_ALLOWED_DOMAINS} allowedDomains"));
        }
        for (i, d) in self.allowed_domains.iter().enumerate() {
            if allowed_domain(d).as_deref() != Ok(d.as_str()) {
                return Err(format!("allowedDomains[{i}] is not a normalised domain"));
            }
        }
        Ok(())
    }

    /// The JSON a controller is handed (a claim's member, or `SESSION_EGRESS`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("egress serializes")
    }

    /// Parses and checks what [`Self::to_json`] made.
    pub fn from_json(text: &str) -> Result<Egress, String> {
        let e: Egress =
            serde_json::from_str(text).map_err(|e| format!("not the egress shape: {e}"))?;
        e.check()?;
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_by_scheme_with_default_ports() {
        let s = ProxyServer::parse("http://proxy.example:3128", Some("u"), Some("p")).unwrap();
        assert_eq!(
            (s.scheme, s.host.as_str(), s.port),
            (ProxyScheme::Http, "proxy.example", 3128)
        );
        assert_eq!(
            ProxyServer::parse("https://p.example", None, None)
                .unwrap()
                .port,
            443
        );
        let v6 = ProxyServer::parse("socks5://[::1]", None, None).unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 1080));
        assert_eq!(v6.display(), "socks5://[::1]:1080");
        assert_eq!(
            ProxyServer::parse("http://127.0.0.1:8080/", None, None)
                .unwrap()
                .display(),
            "http://127.0.0.1:8080"
        );
    }

    #[test]
    fn bad_servers_are_refused_without_repeating_them() {
        for (server, why) in [
            ("ftp://p.example:21", "scheme"),
            ("socks4://p.example", "scheme"),
            ("p.example:8080", "scheme"),
            ("not a url", "not a URL"),
            ("http://user:secretpw@p.example", "credentials in the URL"),
            ("http://p.example/path", "path"),
            ("http://p.example?q=1", "path, query"),
            ("http://", "not a URL"),
        ] {
            let e = ProxyServer::parse(server, None, None).unwrap_err();
            assert!(e.contains(why), "{server}: {e}");
            assert!(!e.contains("secretpw"), "{e}");
        }
        let long = format!("http://{}.example", "a".repeat(600));
        assert!(
            ProxyServer::parse(&long, None, None)
                .unwrap_err()
                .contains("longer")
        );
    }

    #[test]
    fn credentials_are_bounded() {
        let long = "x".repeat(256);
        assert!(ProxyServer::parse("http://p:1", Some(&long), None).is_err());
        assert!(ProxyServer::parse("http://p:1", Some("u"), Some(&long)).is_err());
        assert!(ProxyServer::parse("http://p:1", Some("u"), Some("a\r\nb")).is_err());
        assert!(ProxyServer::parse("http://p:1", None, Some("p")).is_err());
        assert!(ProxyServer::parse("http://p:1", Some("a:b"), Some("p")).is_err());
        assert!(ProxyServer::parse("socks5://p:1", Some("a:b"), Some("p")).is_ok());
        assert!(ProxyServer::parse("http://p:1", Some(""), None).is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let s = ProxyServer::parse("http://p:1", Some("user"), Some("hunter2")).unwrap();
        let e = Egress {
            routes: vec![Route {
                domain_pattern: None,
                proxy: Some(s),
            }],
            allowed_domains: vec![],
        };
        let text = format!("{e:?}");
        assert!(
            !text.contains("hunter2") && text.contains("http://p:1"),
            "{text}"
        );
    }

    #[test]
    fn patterns_match_the_whole_host_and_are_bounded() {
        let r = compile_pattern(r".*\.example\.com").unwrap();
        assert!(r.is_match("www.Example.com"));
        assert!(!r.is_match("www.example.com.evil.net"));
        assert!(!r.is_match("example.com"));
        let e = compile_pattern("(").unwrap_err();
        assert!(e.contains("not a valid") && !e.contains("^(?:"), "{e}");
        assert!(compile_pattern("[a-").unwrap_err().contains("not a valid"));
        assert!(compile_pattern("").is_err());
        assert!(compile_pattern(&"a".repeat(257)).is_err());
        // Small to write, enormous to compile: refused, not built.
        assert_eq!(
            compile_pattern(r"\w{200}\w{200}").unwrap_err(),
            "is too complex"
        );
    }

    #[test]
    fn allowed_domains_include_subdomains_only() {
        let allowed = vec![allowed_domain("Example.com.").unwrap()];
        assert!(host_allowed(&allowed, "example.com"));
        assert!(host_allowed(&allowed, "www.example.com"));
        assert!(host_allowed(&allowed, "a.b.EXAMPLE.com."));
        assert!(!host_allowed(&allowed, "notexample.com"));
        assert!(!host_allowed(&allowed, "example.com.evil.net"));
        assert!(!host_allowed(&allowed, "com"));
        assert!(host_allowed(&[], "anything.test"));
        for bad in [
            "https://example.com",
            "example.com/x",
            "*.example.com",
            "example.com:80",
            "",
            "a..b",
        ] {
            assert!(allowed_domain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_claims_egress_is_checked_again() {
        let good = Egress {
            routes: vec![
                Route {
                    domain_pattern: Some("a\\.test".into()),
                    proxy: Some(
                        ProxyServer::parse("socks5://127.0.0.1:1", Some("u"), Some("p")).unwrap(),
                    ),
                },
                Route {
                    domain_pattern: None,
                    proxy: None,
                },
            ],
            allowed_domains: vec!["a.test".into()],
        };
        assert_eq!(Egress::from_json(&good.to_json()).unwrap(), good);
        assert!(good.proxied() && good.has_credentials());
        let mut bad = good.clone();
        bad.routes[0].domain_pattern = Some("(".into());
        assert!(
            Egress::from_json(&bad.to_json())
                .unwrap_err()
                .starts_with("routes[0].domainPattern")
        );
        let mut bad = good.clone();
        bad.allowed_domains = vec!["A.test".into()];
        assert!(Egress::from_json(&bad.to_json()).is_err());
        let mut bad = good;
        bad.routes = vec![
            Route {
                domain_pattern: None,
                proxy: None
            };
            MAX_ROUTES + 1
        ];
        assert!(Egress::from_json(&bad.to_json()).is_err());
        assert!(Egress::from_json(r#"{"routes":[],"extra":1}"#).is_err());
    }
}
