//! The browser a session asks for, on the local platform with the stock SDK and Playwright:
//! its viewport and locales on the first and on a new page, in a warm and in a cold browser;
//! no headless tells; certificate errors only when asked; unsupported fields named.

use super::Server;

fn platform(pool: &str) -> Server {
    let controller = std::path::PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"))
        .with_file_name("wallcrawler-controller");
    Server::spawn_with("25", &controller, &[("WALLCRAWLER_POOL_SIZE", pool)])
}

fn scenario(s: &Server, name: &str) -> serde_json::Value {
    let r = s.node_script("browser-settings.mjs", name, &[]);
    assert_eq!(r["ok"], true, "{r}");
    r
}

/// No `Headless` anywhere a page or a server can read it; `navigator.webdriver` false.
fn no_headless_tells(r: &serde_json::Value) {
    for page in ["first", "new"] {
        let p = &r[page];
        let ua = p["userAgent"].as_str().unwrap();
        assert!(ua.contains(" Chrome/") && !ua.contains("Headless"), "{r}");
        assert_eq!(p["webdriver"], false, "{r}");
        let brands = p["brands"].as_array().expect("userAgentData.brands");
        assert!(!brands.is_empty(), "{r}");
        assert!(
            brands
                .iter()
                .all(|b| !b.as_str().unwrap().contains("Headless")),
            "{r}"
        );
    }
    let h = &r["headers"];
    assert!(!h["ua"].as_str().unwrap().contains("Headless"), "{r}");
    assert!(!h["secChUa"].as_str().unwrap().contains("Headless"), "{r}");
}

fn viewport_and_locales(pool: &str) {
    let s = platform(pool);
    let r = scenario(&s, "page");
    for page in ["first", "new"] {
        assert_eq!(
            (r[page]["width"].as_u64(), r[page]["height"].as_u64()),
            (Some(1288), Some(711)),
            "{page}: {r}"
        );
        assert_eq!(r[page]["language"], "de-DE", "{page}: {r}");
    }
    assert!(
        r["headers"]["acceptLanguage"]
            .as_str()
            .unwrap()
            .starts_with("de-DE"),
        "{r}"
    );
    no_headless_tells(&r);
    s.stop();
}

#[test]
fn viewport_and_locales_reach_every_page_of_a_warm_browser() {
    viewport_and_locales("1");
}

#[test]
fn viewport_and_locales_reach_every_page_of_a_cold_browser() {
    viewport_and_locales("0");
}

#[test]
fn a_session_without_settings_has_no_headless_tells_either() {
    let s = platform("1");
    let r = scenario(&s, "plain");
    no_headless_tells(&r);
    // The browser's own defaults: no override of ours.
    assert_eq!(r["first"]["language"], "en-US", "{r}");
    s.stop();
}

#[test]
fn certificate_errors_are_ignored_only_when_asked() {
    let s = platform("1");
    let r = scenario(&s, "certificates");
    assert_eq!(
        r["default"], "error: net::ERR_CERT_AUTHORITY_INVALID",
        "{r}"
    );
    assert_eq!(r["ignoring"], "page", "{r}");
    s.stop();
}

#[test]
fn unsupported_fields_are_named_and_a_malformed_viewport_refused() {
    let s = platform("0");
    let r = scenario(&s, "unsupported");
    let header = r["header"].as_str().unwrap_or_default();
    assert!(
        header.contains("solveCaptchas") && header.contains("fooBar"),
        "{r}"
    );
    assert!(
        !header.contains("proxies") && !header.contains("allowedDomains"),
        "{r}"
    );
    let malformed = r["malformed"].as_str().unwrap();
    assert!(
        malformed
            .starts_with("400 browserSettings.viewport must be 200-3840 wide and 200-2160 high"),
        "{malformed}"
    );
    s.stop();
}
