//! A create's `browserSettings` through the router: the browser asked for (viewport, Stagehand's
//! `fingerprint.locales` and `fingerprint.screen`, certificate errors, ad blocking) reaches the
//! launcher; a malformed or mistyped field is a 400 naming it (nothing launched, no slot held,
//! no session kept); a field accepted but not done is named in `x-wallcrawler-unsupported` and
//! the operator's log, and `proxies` and `allowedDomains` never are.

use wallcrawler_contract::browser::{BrowserSettings, Viewport};
use wallcrawler_control_plane::browser_settings::UNSUPPORTED_HEADER;

use super::egress::Logs;
use super::*;

impl Harness {
    /// A create with `body`: its status, its `x-wallcrawler-unsupported` header and its body.
    async fn create_naming(&self, body: &str) -> (StatusCode, Option<String>, Value) {
        let headers = [("x-wc-api-key", KEY_A)];
        let (status, h, value) = self
            .exchange(Method::POST, "/v1/sessions", &headers, Some(body))
            .await;
        let named = h
            .get(UNSUPPORTED_HEADER)
            .map(|v| v.to_str().unwrap().to_owned());
        (status, named, value)
    }

    /// `GET /v1/sessions/{id}/logs`: its status and entries.
    async fn logs_of(&self, id: &str) -> (StatusCode, Value) {
        let path = format!("/v1/sessions/{id}/logs");
        let (status, _, entries) = self
            .exchange(Method::GET, &path, &[("x-wc-api-key", KEY_A)], None)
            .await;
        (status, entries)
    }

    /// The only launch's browser settings.
    fn launched_browser(&self) -> Option<BrowserSettings> {
        let launched = self.launched();
        assert_eq!(launched.len(), 1, "one launch");
        launched[0].browser.clone()
    }

    /// Nothing launched, no slot held, no session kept.
    fn nothing_kept(&self) {
        assert!(self.launched().is_empty(), "nothing launched");
        assert!(self.held(PROJ_A).is_empty(), "no slot held");
        assert!(
            self.sessions.0.lock().unwrap().is_empty(),
            "no session kept"
        );
    }
}

const STAGEHAND_VIEWPORT: Viewport = Viewport {
    width: 1288,
    height: 711,
};

/// What Stagehand 3 sends on every session reaches the launcher, and nothing is named.
#[tokio::test]
async fn the_viewport_reaches_the_launcher() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, named, body) = h
        .create_naming(
            r#"{"browserSettings": {"viewport": {"width": 1288, "height": 711}}, "userMetadata": {"stagehand": "true"}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(named, None);
    assert_eq!(
        h.launched_browser(),
        Some(BrowserSettings {
            viewport: Some(STAGEHAND_VIEWPORT),
            ..Default::default()
        })
    );
    // And a pool controller's claim carries it.
    assert_eq!(
        h.launched()[0].claim().browser.unwrap().viewport,
        Some(STAGEHAND_VIEWPORT)
    );
}

/// Nothing asked: nothing carried.
#[tokio::test]
async fn a_create_without_settings_carries_none() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, named, _) = h
        .create_naming(r#"{"browserSettings": {"blockAds": false, "solveCaptchas": false}}"#)
        .await;
    assert_eq!((status, named), (StatusCode::CREATED, None));
    assert_eq!(h.launched_browser(), None);
}

/// Stagehand 4's `fingerprint`: its locales, and its screen as the page area when no viewport
/// is given; with the flags the controller applies.
#[tokio::test]
async fn locales_screen_and_flags_reach_the_launcher() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let body = json!({"browserSettings": {
        "fingerprint": {"locales": ["de-DE", "en-US"], "screen": {"maxWidth": 1920, "maxHeight": 1080}},
        "ignoreCertificateErrors": true,
        "blockAds": true
    }});
    let (status, named, resp) = h.create_naming(&body.to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{resp}");
    assert_eq!(named, None);
    assert_eq!(
        h.launched_browser(),
        Some(BrowserSettings {
            viewport: Some(Viewport {
                width: 1920,
                height: 1080
            }),
            locales: vec!["de-DE".into(), "en-US".into()],
            ignore_certificate_errors: true,
            block_ads: true,
            no_session_log: false,
            no_recording: false,
        })
    );
}

/// `logSession: false` and `recordSession: false` reach the controller (which then logs, or
/// records, nothing); `true`, absent or null is the default (logged, recorded) and carries
/// nothing; neither is ever named as not done.
#[tokio::test]
async fn log_and_record_session_false_reach_the_launcher() {
    let off = |field| match field {
        "logSession" => BrowserSettings {
            no_session_log: true,
            ..Default::default()
        },
        _ => BrowserSettings {
            no_recording: true,
            ..Default::default()
        },
    };
    for field in ["logSession", "recordSession"] {
        for (asked, want) in [("false", Some(off(field))), ("true", None), ("null", None)] {
            let h = Harness::new(LaunchBehaviour::BecomeReady);
            let (status, named, resp) = h
                .create_naming(&format!(r#"{{"browserSettings": {{"{field}": {asked}}}}}"#))
                .await;
            assert_eq!(
                (status, named),
                (StatusCode::CREATED, None),
                "{field} {asked}: {resp}"
            );
            assert_eq!(h.launched_browser(), want, "{field} {asked}");
            // And a pool controller's claim carries it.
            assert_eq!(h.launched()[0].claim().browser, want, "{field} {asked}");
        }
    }
}

/// The exact refusals, each naming its field; nothing is launched or kept.
#[tokio::test]
async fn each_malformed_setting_is_a_400_naming_its_field() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for (body, message) in [
        (
            json!({"browserSettings": {"viewport": {"width": 0, "height": 711}}}),
            "browserSettings.viewport must be 200-3840 wide and 200-2160 high (CSS pixels), got 0x711",
        ),
        (
            json!({"browserSettings": {"viewport": "1288x711"}}),
            "browserSettings.viewport must be an object {width, height}",
        ),
        (
            json!({"browserSettings": {"viewport": {"width": 1288.5, "height": 711}}}),
            "browserSettings.viewport.width must be a whole number of CSS pixels, got 1288.5",
        ),
        (
            json!({"browserSettings": {"fingerprint": {"locales": ["de-DE", "deutsch"]}}}),
            "browserSettings.fingerprint.locales[1] is not a locale tag such as de-DE",
        ),
        (
            json!({"browserSettings": {"fingerprint": {"screen": {"minWidth": 2000, "maxWidth": 1000}}}}),
            "browserSettings.fingerprint.screen.minWidth is more than maxWidth",
        ),
        (
            json!({"browserSettings": {"solveCaptchas": "yes"}}),
            "browserSettings.solveCaptchas must be a boolean",
        ),
        (
            json!({"browserSettings": {"blockAds": 1}}),
            "browserSettings.blockAds must be a boolean",
        ),
        (
            json!({"browserSettings": {"os": "amiga"}}),
            "browserSettings.os must be one of windows, mac, linux, mobile, tablet",
        ),
        (
            json!({"browserSettings": {"extensionId": 42}}),
            "browserSettings.extensionId must be a string",
        ),
        (json!({"keepAlive": "yes"}), "keepAlive must be a boolean"),
    ] {
        let r = h.create(&body.to_string()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[]);
        assert_eq!(r.1["message"], message, "{body}");
    }
    h.nothing_kept();
}

/// `solveCaptchas: true` is a 201 naming it, in the header and in the operator's log with the
/// session's id; an unknown field is named too; what is done is not.
#[tokio::test]
async fn what_is_not_done_is_named_in_the_answer_and_the_log() {
    let (logs, _capture) = Logs::capture();

    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, named, body) = h
        .create_naming(
            r#"{"fooBar": {"secret-ish": "value-7d1c"}, "browserSettings": {"solveCaptchas": true, "viewport": {"width": 1288, "height": 711}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        named.as_deref(),
        Some("browserSettings.solveCaptchas,fooBar")
    );
    // The rest is still applied.
    assert_eq!(
        h.launched_browser().unwrap().viewport,
        Some(STAGEHAND_VIEWPORT)
    );
    let id = body["id"].as_str().unwrap();
    let log = logs.text();
    let line = log
        .lines()
        .find(|l| l.contains("accepts but does not do"))
        .unwrap_or_else(|| panic!("no log line: {log}"));
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains(&format!("session.id={id}")), "{line}");
    assert!(
        line.contains("unsupported=browserSettings.solveCaptchas,fooBar"),
        "{line}"
    );
    assert!(
        !log.contains("value-7d1c"),
        "names only, never values: {log}"
    );
    // The session's own log says it too, first.
    let (status, entries) = h.logs_of(id).await;
    assert_eq!(status, StatusCode::OK, "{entries}");
    let first = &entries[0];
    assert_eq!(first["method"], "Wallcrawler.note", "{entries}");
    let said = first["response"]["result"]["message"].as_str().unwrap();
    assert!(
        said.contains("browserSettings.solveCaptchas,fooBar") && !said.contains("value-7d1c"),
        "{said}"
    );
}

/// `logSession: false`: not even that note.
#[tokio::test]
async fn a_session_not_logged_gets_no_note_of_what_is_not_done() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, named, body) = h
        .create_naming(r#"{"browserSettings": {"solveCaptchas": true, "logSession": false}}"#)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(named.as_deref(), Some("browserSettings.solveCaptchas"));
    let id = body["id"].as_str().unwrap();
    let (status, entries) = h.logs_of(id).await;
    assert_eq!((status, entries), (StatusCode::OK, json!([])));
}

/// Behind the connect gateway (an answer at once) and when the create answers PENDING, the
/// header is there too.
#[tokio::test(start_paused = true)]
async fn every_created_answer_names_what_is_not_done() {
    let body = r#"{"browserSettings": {"verified": true, "os": "windows"}}"#;
    let gateway = Harness::with_settings(
        LaunchBehaviour::StayPending,
        Settings {
            connect_base: Some("wss://connect.example.test".into()),
            ..waiting(Duration::from_secs(5))
        },
    );
    let pending = Harness::new(LaunchBehaviour::StayPending);
    for h in [gateway, pending] {
        let (status, named, resp) = h.create_naming(body).await;
        assert_eq!(status, StatusCode::CREATED, "{resp}");
        assert_eq!(
            named.as_deref(),
            Some("browserSettings.os,browserSettings.verified")
        );
    }
}

/// `proxies` and `allowedDomains` work or refuse the create: never named as unsupported.
#[tokio::test]
async fn proxies_and_allowed_domains_are_never_named() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, named, body) = h
        .create_naming(
            r#"{"proxies": [{"type": "external", "server": "http://p.example:8080"}], "browserSettings": {"allowedDomains": ["example.com"], "solveCaptchas": true}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(named.as_deref(), Some("browserSettings.solveCaptchas"));
    let launched = h.launched();
    let egress = launched[0].egress.as_ref().unwrap();
    assert_eq!(
        (egress.routes.len(), egress.allowed_domains.clone()),
        (1, vec!["example.com".to_owned()])
    );
    // Refused, not named, when it cannot be done.
    let (status, named, _) = h.create_naming(r#"{"proxies": true}"#).await;
    assert_eq!((status, named), (StatusCode::BAD_REQUEST, None));
}

/// The header is bounded: at most 20 names of plain characters, the rest counted.
#[tokio::test]
async fn the_header_is_bounded() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let mut body = serde_json::Map::new();
    for i in 0..30 {
        body.insert(format!("field{i:02}"), json!(true));
    }
    body.insert("x".repeat(100), json!(1));
    body.insert("not a name".into(), json!(1));
    let (status, named, resp) = h.create_naming(&Value::Object(body).to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{resp}");
    let named = named.unwrap();
    let parts: Vec<&str> = named.split(',').collect();
    assert_eq!(parts.len(), 21, "{named}");
    assert_eq!(parts[0], "field00");
    assert_eq!(parts[19], "field19");
    assert_eq!(parts[20], "+12 more");
}
