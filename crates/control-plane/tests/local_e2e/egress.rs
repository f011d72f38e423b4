//! A session's egress on the local platform, as users set it: the stock Browserbase SDK's
//! `proxies` and `browserSettings.allowedDomains`, Playwright driving the pages, upstream
//! proxies of the test's own on 127.0.0.1 (tests/node/proxies.mjs: their logs name the host
//! and the user they were asked, and count the bytes they carried). Pages are served under
//! names no resolver knows (`a.test`…): such a page loads only through a proxy.

use super::Server;

/// The proxies' password: it must appear in no answer, log or file.
const PASSWORD: &str = "pw-3c1f9e-not-in-any-answer";

/// `serve` with Chrome on the shared network (the image's setting on Fargate, where WebRTC's
/// UDP could leave beside a proxy), `pool` warm controllers, and `env`; its log in a file.
fn platform(pool: &str, env: &[(&str, &str)]) -> (Server, tempfile::NamedTempFile) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let controller = std::path::PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"))
        .with_file_name("wallcrawler-controller");
    let mut all = vec![
        ("CHROME_NETWORK", "shared"),
        ("WALLCRAWLER_POOL_SIZE", pool),
        ("WALLCRAWLER_CONTROLLER_LOG", "info"),
    ];
    all.extend_from_slice(env);
    let s = Server::spawn_to("25", &controller, &all, log.reopen().unwrap().into());
    (s, log)
}

fn egress(s: &Server, scenario: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let mut all = vec![("PASSWORD", PASSWORD)];
    all.extend_from_slice(env);
    let r = s.node_script("egress.mjs", scenario, &all);
    assert_eq!(r["ok"], true, "{r}");
    r
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if std::fs::read(&p)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(p.display().to_string());
            }
        }
    }
    found
}

/// The title of the scenario's one page.
fn only_title(r: &serde_json::Value) -> serde_json::Value {
    let titles = r["titles"].as_object().unwrap();
    titles.values().next().unwrap().clone()
}

/// Stops `s` and checks the proxies' password stayed nowhere: not in serve's log, not in any
/// file of its data directory. Returns the data directory and the log, for the test's own
/// checks.
fn stopped_without_the_password(
    s: Server,
    log: &tempfile::NamedTempFile,
) -> (tempfile::TempDir, String) {
    let data = s.stop_keeping_data();
    let logged = std::fs::read_to_string(log.path()).unwrap();
    assert!(!logged.contains(PASSWORD), "the password is in serve's log");
    assert_eq!(
        files_holding(data.path(), PASSWORD),
        Vec::<String>::new(),
        "the password outlived the session"
    );
    (data, logged)
}

fn proxies_route_by_host(pool: &str) {
    let (s, log) = platform(pool, &[]);
    let r = egress(&s, "proxies", &[]);
    let titles = &r["titles"];
    let port = r["siteHits"][0]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(titles[format!("http://a.test:{port}/")], "a.test", "{r}");
    assert_eq!(titles[format!("http://b.test:{port}/")], "b.test", "{r}");
    assert_eq!(
        titles[format!("http://127.0.0.1:{port}/")],
        "127.0.0.1",
        "{r}"
    );
    // Each proxy was asked for its own host only, with its own user; nothing else.
    for (proxy, host, user) in [
        ("httpProxy", "a.test", "alice"),
        ("socksProxy", "b.test", "bob"),
    ] {
        let asked = r[proxy].as_array().unwrap();
        assert!(!asked.is_empty(), "{r}");
        for a in asked {
            assert_eq!(a.as_str().unwrap(), format!("{host} {user} true"), "{r}");
        }
    }
    // proxyBytes: what the proxies carried, within a few percent (two pages of 300 KiB).
    let carried = r["proxiedBytesCarried"].as_f64().unwrap();
    let counted = r["proxyBytes"].as_f64().unwrap();
    assert!(carried > 600_000.0, "{r}");
    assert!(
        (counted - carried).abs() <= carried * 0.03,
        "proxyBytes {counted} vs carried {carried}"
    );
    assert_eq!(r["status"], "COMPLETED", "{r}");
    assert_eq!(r["passwordInAnswers"], false, "{r}");
    let (data, logged) = stopped_without_the_password(s, &log);
    assert!(
        data.path().join("data/sessions").is_dir(),
        "the data directory is looked into"
    );
    assert!(
        logged.contains("the session's proxy routes are in force"),
        "{logged}"
    );
}

#[test]
fn proxies_route_hosts_through_http_and_socks5_proxies_in_a_warm_browser() {
    proxies_route_by_host("1");
}

#[test]
fn proxies_route_hosts_through_http_and_socks5_proxies_in_a_cold_browser() {
    proxies_route_by_host("0");
}

#[test]
fn a_proxy_refusing_the_credentials_fails_closed_and_says_why() {
    let (s, log) = platform("1", &[]);
    let r = egress(&s, "wrong-password", &[]);
    let title = only_title(&r);
    assert_eq!(title, "error: net::ERR_SOCKS_CONNECTION_FAILED", "{r}");
    assert_eq!(
        r["siteHits"], 0,
        "the site was reached around the proxy: {r}"
    );
    assert!(
        r["httpProxy"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "127.0.0.1 alice false"),
        "{r}"
    );
    assert_eq!(r["proxyBytes"], 0, "{r}");
    assert_eq!(r["passwordInAnswers"], false, "{r}");
    let (data, logged) = stopped_without_the_password(s, &log);
    assert!(
        logged.contains("the session's proxy did not connect")
            && logged.contains("the proxy refused the credentials"),
        "the log does not say why: {logged}"
    );
    // And the session's own log says it, as a platform note.
    let noted = files_holding(data.path(), "the session's proxy did not connect: ");
    assert!(
        noted
            .iter()
            .any(|f| f.contains("/logs/") && f.ends_with(".jsonl")),
        "the session's log does not say why: {noted:?}"
    );
}

#[test]
fn allowed_domains_let_their_navigations_through_and_no_other() {
    let (s, _log) = platform("1", &[]);
    let r = egress(&s, "allowed-domains", &[]);
    let titles = r["titles"].as_object().unwrap();
    let by_host = |h: &str| {
        titles
            .iter()
            .find(|(u, _)| u.starts_with(&format!("http://{h}:")))
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(by_host("a.test"), "a.test", "{r}");
    assert_eq!(by_host("www.a.test"), "www.a.test", "{r}");
    assert_eq!(
        by_host("b.test"),
        "error: net::ERR_BLOCKED_BY_CLIENT",
        "{r}"
    );
    // Refused before it left the browser: neither the proxy nor the site heard of b.test.
    assert!(
        !r["proxyAsked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "b.test"),
        "{r}"
    );
    assert!(
        !r["siteHits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().starts_with("b.test")),
        "{r}"
    );
    s.stop();
}

/// The `webrtc` scenario on a platform with `env`: a page's STUN packets with and without a
/// proxy.
fn webrtc_stays_behind_the_proxy(env: &[(&str, &str)]) {
    let (s, _log) = platform("1", env);
    let r = egress(&s, "webrtc", &[]);
    // The probe works: without a proxy the page's ICE gathering reaches the STUN server.
    assert!(r["withoutProxy"]["packets"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["withProxy"]["loaded"], "a.test", "{r}");
    assert_eq!(r["withProxy"]["packets"], 0, "{r}");
    s.stop();
}

#[test]
fn with_a_proxy_webrtc_sends_no_udp_beside_it() {
    webrtc_stays_behind_the_proxy(&[]);
}

/// The same with a headless shell for the browser (`CHROME_PATH`): it has no WebRTC preference
/// and reads only `--force-webrtc-ip-handling-policy`.
#[test]
fn with_a_proxy_a_headless_shell_s_webrtc_sends_no_udp_beside_it_either() {
    let shell = wallcrawler_testkit::headless_shell();
    webrtc_stays_behind_the_proxy(&[("CHROME_PATH", shell.to_str().unwrap())]);
}

#[test]
fn a_page_reaches_the_machines_loopback_only_where_egress_allow_names_it() {
    let (s, _log) = platform("1", &[("EGRESS_ALLOW", "")]);
    let r = egress(&s, "loopback", &[]);
    let title = only_title(&r);
    assert_eq!(title, "error: net::ERR_SOCKS_CONNECTION_FAILED", "{r}");
    assert_eq!(r["siteHits"], 0, "{r}");
    s.stop();
    let (s, _log) = platform("1", &[("EGRESS_ALLOW", "127.0.0.1")]);
    let r = egress(&s, "loopback", &[]);
    let title = only_title(&r);
    assert_eq!(title, "127.0.0.1", "{r}");
    s.stop();
}

#[test]
fn managed_proxies_come_from_the_operators_pools_or_are_refused() {
    // A free port for the pool's proxy, which the scenario starts (the pool file is read at
    // serve's start).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pools = tempfile::NamedTempFile::new().unwrap();
    let entry = serde_json::json!([{ "server": format!("http://127.0.0.1:{port}"), "username": "pool-user", "password": PASSWORD }]);
    std::fs::write(
        pools.path(),
        serde_json::json!({ "default": entry, "DE": entry }).to_string(),
    )
    .unwrap();
    let (s, _log) = platform(
        "1",
        &[("MANAGED_PROXIES_FILE", pools.path().to_str().unwrap())],
    );
    let r = egress(&s, "managed", &[("MANAGED_PROXY_PORT", &port.to_string())]);
    assert_eq!(
        r["true"].as_object().unwrap().values().next().unwrap(),
        "a.test",
        "{r}"
    );
    assert_eq!(
        r["country"].as_object().unwrap().values().next().unwrap(),
        "a.test",
        "{r}"
    );
    assert!(
        r["proxyAsked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "a.test pool-user true"),
        "{r}"
    );
    let unknown = r["unknownCountry"].as_str().unwrap();
    assert!(unknown.starts_with("400 proxies[0].geolocation.country is FR, but this platform has no managed proxies for FR"), "{unknown}");
    s.stop();
}

#[test]
fn malformed_proxies_and_domains_are_refused_naming_the_field() {
    let (s, _log) = platform("0", &[]);
    let r = egress(&s, "refusals", &[]);
    let got = &r["refusals"];
    for (case, start) in [
        (
            "proxies-true",
            "400 proxies is true (managed proxies), but this platform has no default managed proxy pool",
        ),
        (
            "proxies-string",
            "400 proxies must be a boolean or an array",
        ),
        (
            "unknown-type",
            "400 proxies[0].type must be one of browserbase, external, none",
        ),
        ("no-server", "400 proxies[0].server is required"),
        (
            "ftp",
            "400 proxies[0].server has the scheme \"ftp\"; supported: http://, https://, socks5://",
        ),
        ("not-a-url", "400 proxies[0].server is not a URL"),
        (
            "bad-pattern",
            "400 proxies[0].domainPattern is not a valid regular expression",
        ),
        (
            "long-pattern",
            "400 proxies[0].domainPattern must be 1 to 256 bytes",
        ),
        (
            "long-password",
            "400 proxies[0].password must be 1 to 255 bytes",
        ),
        ("too-many", "400 proxies has more than 16 entries"),
        (
            "allowed-domain-url",
            "400 browserSettings.allowedDomains[0] must be a domain name",
        ),
    ] {
        let text = got[case].as_str().unwrap_or_default();
        assert!(text.starts_with(start), "{case}: {text}");
    }
    assert_eq!(r["passwordInAnswers"], false, "{r}");
    s.stop();
}

/// `blockAds` with the session's traffic through a local upstream proxy: the proxy is asked
/// for the ad network's hosts without it and never with it, and the page loads both times.
#[test]
fn block_ads_keeps_ad_hosts_from_ever_reaching_the_proxy() {
    let (s, _log) = platform("1", &[]);
    let r = egress(&s, "block-ads", &[]);
    let ad_hosts = ["g.doubleclick.net", "pagead2.googlesyndication.com"];
    let asked = |run: &str| -> Vec<String> {
        r[run]["proxyAsked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_owned())
            .collect()
    };
    for run in ["without", "with"] {
        assert_eq!(r[run]["title"], "with ads", "{run}: {r}");
        assert!(asked(run).iter().any(|h| h == "a.test"), "{run}: {r}");
        // Chrome itself asks nothing of Google (its on-device model manifest check:
        // chrome/flags.conf), through the session's proxy or otherwise.
        let google: Vec<String> = asked(run)
            .into_iter()
            .filter(|h| h.ends_with("googleapis.com") || h.ends_with("google.com"))
            .collect();
        assert!(google.is_empty(), "{run}: Chrome asked {google:?}: {r}");
    }
    for host in ad_hosts {
        assert!(asked("without").iter().any(|h| h == host), "{host}: {r}");
        assert!(!asked("with").iter().any(|h| h == host), "{host}: {r}");
    }
    assert_eq!(r["without"]["adScriptRan"], true, "{r}");
    assert_eq!(r["with"]["adScriptRan"], false, "{r}");
    // The stand-in answers every name outside .test (Chrome's own update checks too): none of
    // the ad hosts was served with blockAds.
    let served = r["with"]["standInServed"].as_array().unwrap();
    for host in ad_hosts {
        assert!(
            !served.iter().any(|u| u.as_str().unwrap().starts_with(host)),
            "{host}: {r}"
        );
    }
    // The filter the controllers built is kept for the next ones (AD_FILTER_CACHE, set by
    // serve): one file, the controller's own, in a directory nobody else may enter.
    use std::os::unix::fs::PermissionsExt;
    let kept_dir = s.dir().join("ad-filter");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&kept_dir), 0o700);
    let kept: Vec<_> = std::fs::read_dir(&kept_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("ad-filter-")
    );
    assert_eq!(mode(&kept[0]), 0o600);
    s.stop();
}
