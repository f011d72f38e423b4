//! A create's browser: its `browserSettings` (with Stagehand's `browserSettings.fingerprint`)
//! read into the [`BrowserSettings`] the session's controller applies ([`read`]), and every
//! field the platform accepts without doing what it asks named ([`Unsupported`]) — in the
//! create answer's [`UNSUPPORTED_HEADER`] and the operator's log — never dropped without a word.
//!
//! The shapes are the Browserbase SDK 2.21.0's `SessionCreateParams` and Stagehand 3.7 and
//! 4.4's `BrowserbaseSessionCreateParamsSchema`, which adds `browserSettings.fingerprint`
//! (`browsers`, `devices`, `httpVersion`, `locales`, `operatingSystems`, `screen {maxWidth,
//! maxHeight, minWidth, minHeight}`). Read leniently: `null` is the field absent, and a field
//! not known is named, not refused. Refused exactly ([`Refusal`], a 400 naming the field's
//! path): a known field of the wrong JSON type, a value outside its enum, a viewport out of
//! bounds, a locale that is not a tag.
//!
//! Named (as its path from the body's top: `browserSettings.solveCaptchas`,
//! `browserSettings.fingerprint.browsers`, `fooBar`) is a field whose value asks for what the
//! platform does not do: a flag set to true (`solveCaptchas`, `verified`, `advancedStealth`),
//! a captcha selector, an `os` other than linux (what the
//! browser reports), a fingerprint list without what the browser is (Chrome, desktop, Linux),
//! `httpVersion` "1", a `fingerprint.screen` not applied, `proxySettings.caCertificates`, and
//! every field not known, at the top or inside `browserSettings`. A value asking for what
//! happens anyway (`solveCaptchas: false`, `os: "linux"`) is not named. Never named: `proxies`
//! and `allowedDomains`, which work or refuse the create ([`crate::egress`]); nor the fields
//! the handler reads (`projectId`, `keepAlive`, `timeout`, `region`, `userMetadata`,
//! `extensionId`, `browserSettings.context`), whose types are checked here.

use std::fmt;

use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use serde_json::{Map, Number, Value};
use tracing::{info, warn};
use wallcrawler_contract::browser::{
    BrowserSettings, MAX_LOCALES, VIEWPORT_HEIGHT, VIEWPORT_WIDTH, Viewport, valid_locale,
};

/// The create answer's header naming what was accepted but not done, comma-separated.
pub const UNSUPPORTED_HEADER: &str = "x-wallcrawler-unsupported";
/// The most names the header shows; the rest are counted (`+3 more`).
pub const MAX_NAMES: usize = 20;
/// The longest name the header shows; a longer one is counted.
pub const MAX_NAME_CHARS: usize = 64;

/// A create's browser settings refused: the message names the field's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(String);

fn refuse(at: &str, why: impl fmt::Display) -> Refusal {
    Refusal(format!("{at} {why}"))
}

/// `at.name` (`name` at the top).
fn path(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_owned()
    } else {
        format!("{at}.{name}")
    }
}

/// What a create asked of its browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// What the controller applies; `None` when nothing.
    pub settings: Option<BrowserSettings>,
    /// What it does not.
    pub unsupported: Unsupported,
}

/// The paths of the fields accepted but not done, sorted, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unsupported(Vec<String>);

impl Unsupported {
    fn new(mut names: Vec<String>) -> Self {
        names.sort();
        names.dedup();
        Self(names)
    }

    /// Whether every field asked for is done.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every path, sorted.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Whether `name` may be shown: at most [`MAX_NAME_CHARS`] of `[A-Za-z0-9_.]` (a client's
    /// unknown field name is echoed only when it is plainly a name).
    fn shown(name: &str) -> bool {
        name.len() <= MAX_NAME_CHARS
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
    }

    /// The header's value, when anything is unsupported: the first [`MAX_NAMES`] showable
    /// paths in order, comma-separated, then `+N more` counting the rest and those not shown
    /// (`browserSettings.solveCaptchas,fooBar,+2 more`).
    pub fn header_value(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut out: Vec<&str> = self
            .0
            .iter()
            .map(String::as_str)
            .filter(|n| Self::shown(n))
            .take(MAX_NAMES)
            .collect();
        let more = self.0.len() - out.len();
        let more_text = format!("+{more} more");
        if more > 0 {
            out.push(&more_text);
        }
        Some(out.join(","))
    }

    /// `res` with [`UNSUPPORTED_HEADER`] when anything is unsupported.
    pub fn name_in(&self, res: &mut Response) {
        if let Some(v) = self
            .header_value()
            .and_then(|v| HeaderValue::try_from(v).ok())
        {
            res.headers_mut()
                .insert(HeaderName::from_static(UNSUPPORTED_HEADER), v);
        }
    }

    /// The operator's log line for session `id`, when anything is unsupported (the header's
    /// value: names only, bounded).
    pub fn log(&self, id: &str) {
        if !self.is_empty() {
            info!(session.id = %id, unsupported = %self, "the session asked for what this platform accepts but does not do (named in {UNSUPPORTED_HEADER})");
        }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.header_value().unwrap_or_default())
    }
}

/// What a known field must be.
#[derive(Clone, Copy)]
enum Shape {
    Bool,
    Str,
    Object,
    /// Checked by its own reader (`timeout`, `proxies`, `userMetadata`, `allowedDomains`).
    Any,
}

/// Field `name` of `m` under `at`, checked to be `shape` (absent or null: `None`).
fn typed<'a>(
    m: &'a Map<String, Value>,
    at: &str,
    name: &str,
    shape: Shape,
) -> Result<Option<&'a Value>, Refusal> {
    let v = match m.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let why = match (shape, v) {
        (Shape::Bool, Value::Bool(_))
        | (Shape::Str, Value::String(_))
        | (Shape::Object, Value::Object(_))
        | (Shape::Any, _) => return Ok(Some(v)),
        (Shape::Bool, _) => "must be a boolean",
        (Shape::Str, _) => "must be a string",
        (Shape::Object, _) => "must be an object",
    };
    Err(refuse(&path(at, name), why))
}

fn flag(m: &Map<String, Value>, at: &str, name: &str) -> Result<bool, Refusal> {
    Ok(typed(m, at, name, Shape::Bool)?.and_then(Value::as_bool) == Some(true))
}

fn text<'a>(m: &'a Map<String, Value>, at: &str, name: &str) -> Result<Option<&'a str>, Refusal> {
    Ok(typed(m, at, name, Shape::Str)?.and_then(Value::as_str))
}

/// Names the fields of `m` (under `at`) not `known`, set to anything but null.
fn name_unknown(m: &Map<String, Value>, at: &str, known: &[&str], named: &mut Vec<String>) {
    named.extend(
        m.iter()
            .filter(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
            .map(|(k, _)| path(at, k)),
    );
}

/// The create's top-level fields the handler reads, with their shapes.
const TOP: [(&str, Shape); 8] = [
    ("browserSettings", Shape::Object),
    ("extensionId", Shape::Str),
    ("keepAlive", Shape::Bool),
    ("projectId", Shape::Str),
    ("proxies", Shape::Any),
    ("region", Shape::Str),
    ("timeout", Shape::Any),
    ("userMetadata", Shape::Any),
];

/// A create's body (`{}` when it was empty) read: its browser settings and what is
/// unsupported. A body that is not an object has neither (the handler's own parse refuses it).
pub fn read(body: &Value) -> Result<Asked, Refusal> {
    let Value::Object(top) = body else {
        return Ok(Asked::default());
    };
    let mut named = Vec::new();
    for (name, shape) in TOP {
        typed(top, "", name, shape)?;
    }
    proxy_settings(top.get("proxySettings"), &mut named)?;
    let mut known: Vec<&str> = TOP.iter().map(|(n, _)| *n).collect();
    known.push("proxySettings");
    name_unknown(top, "", &known, &mut named);
    let settings = match top.get("browserSettings") {
        Some(Value::Object(b)) => browser_settings(b, &mut named)?,
        _ => BrowserSettings::default(),
    };
    // What a controller checks again: never a claim it would refuse.
    settings
        .check()
        .map_err(|why| Refusal(format!("the session's browser settings are refused: {why}")))?;
    Ok(Asked {
        settings: (!settings.is_empty()).then_some(settings),
        unsupported: Unsupported::new(named),
    })
}

/// `proxySettings` (SDK 2.21.0): its CA certificates are not trusted by the session's browser.
fn proxy_settings(v: Option<&Value>, named: &mut Vec<String>) -> Result<(), Refusal> {
    const AT: &str = "proxySettings";
    let m = match v {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(refuse(AT, "must be an object")),
    };
    match m.get("caCertificates") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            if !a.is_empty() {
                named.push(path(AT, "caCertificates"));
            }
        }
        Some(_) => {
            return Err(refuse(
                &path(AT, "caCertificates"),
                "must be an array of strings",
            ));
        }
    }
    name_unknown(m, AT, &["caCertificates"], named);
    Ok(())
}

/// `browserSettings`' fields.
const BROWSER_FIELDS: [&str; 15] = [
    "advancedStealth",
    "allowedDomains",
    "blockAds",
    "captchaImageSelector",
    "captchaInputSelector",
    "context",
    "extensionId",
    "fingerprint",
    "ignoreCertificateErrors",
    "logSession",
    "os",
    "recordSession",
    "solveCaptchas",
    "verified",
    "viewport",
];
/// `browserSettings` flags asking for what the platform does not do: named when true.
const FLAGS_NOT_DONE: [&str; 3] = ["advancedStealth", "solveCaptchas", "verified"];
/// `browserSettings.os`'s values; the browser reports linux.
const OS: [&str; 5] = ["windows", "mac", "linux", "mobile", "tablet"];

/// `browserSettings`, an object: what the controller applies; what it does not, named.
fn browser_settings(
    m: &Map<String, Value>,
    named: &mut Vec<String>,
) -> Result<BrowserSettings, Refusal> {
    const AT: &str = "browserSettings";
    // The handler's (the context, the extension) and the egress's: types only.
    context(m.get("context"), named)?;
    typed(m, AT, "extensionId", Shape::Str)?;
    typed(m, AT, "allowedDomains", Shape::Any)?;

    for f in FLAGS_NOT_DONE {
        if flag(m, AT, f)? {
            named.push(path(AT, f));
        }
    }
    for f in ["captchaImageSelector", "captchaInputSelector"] {
        if text(m, AT, f)?.is_some_and(|s| !s.is_empty()) {
            named.push(path(AT, f));
        }
    }
    match text(m, AT, "os")? {
        None | Some("linux") => {}
        Some(os) if OS.contains(&os) => named.push(path(AT, "os")),
        Some(_) => return Err(refuse(&path(AT, "os"), one_of(&OS))),
    }
    let viewport = viewport(m.get("viewport"), named)?;
    let fp = fingerprint(m.get("fingerprint"), named)?;
    // The screen sets the page area only when no viewport does.
    let screen = match (viewport, fp.screen) {
        (Some(_), Some(_)) | (None, Some(None)) => {
            named.push(path(AT, "fingerprint.screen"));
            None
        }
        (_, Some(s)) => s,
        (_, None) => None,
    };
    name_unknown(m, AT, &BROWSER_FIELDS, named);
    Ok(BrowserSettings {
        viewport: viewport.or(screen),
        locales: fp.locales,
        ignore_certificate_errors: flag(m, AT, "ignoreCertificateErrors")?,
        block_ads: flag(m, AT, "blockAds")?,
        // Logged unless asked not to be: absent and null are the default, true.
        no_session_log: match m.get("logSession") {
            None | Some(Value::Null) => false,
            Some(_) => !flag(m, AT, "logSession")?,
        },
        // Recorded unless asked not to be, likewise.
        no_recording: match m.get("recordSession") {
            None | Some(Value::Null) => false,
            Some(_) => !flag(m, AT, "recordSession")?,
        },
    })
}

fn one_of(values: &[&str]) -> String {
    format!("must be one of {}", values.join(", "))
}

/// `browserSettings.context`: the handler reads it; its types are checked here.
fn context(v: Option<&Value>, named: &mut Vec<String>) -> Result<(), Refusal> {
    const AT: &str = "browserSettings.context";
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) => {
            typed(m, AT, "id", Shape::Str)?;
            typed(m, AT, "persist", Shape::Bool)?;
            name_unknown(m, AT, &["id", "persist"], named);
            Ok(())
        }
        Some(_) => Err(refuse(AT, "must be an object {id, persist}")),
    }
}

/// A size in CSS pixels, field `name` of `m` under `at`: a whole number (absent or null:
/// `None`). Beyond `u32` it is `u32::MAX`, which every bound refuses.
fn pixels(m: &Map<String, Value>, at: &str, name: &str) -> Result<Option<u32>, Refusal> {
    let whole = |n: &Number| {
        n.as_u64()
            .map(|u| u32::try_from(u).unwrap_or(u32::MAX))
            .or_else(|| {
                let f = n.as_f64()?;
                // 1288.0 is 1288; `as` saturates beyond u32.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                (f.fract() == 0.0 && f >= 0.0).then_some(f as u32)
            })
    };
    let at = path(at, name);
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => whole(n).map(Some).ok_or_else(|| {
            refuse(
                &at,
                format!("must be a whole number of CSS pixels, got {n}"),
            )
        }),
        Some(_) => Err(refuse(&at, "must be a whole number of CSS pixels")),
    }
}

/// `browserSettings.viewport`: both sizes, in bounds.
fn viewport(v: Option<&Value>, named: &mut Vec<String>) -> Result<Option<Viewport>, Refusal> {
    const AT: &str = "browserSettings.viewport";
    let m = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(refuse(AT, "must be an object {width, height}")),
    };
    let required =
        |name: &str| pixels(m, AT, name)?.ok_or_else(|| refuse(&path(AT, name), "is required"));
    let v = Viewport {
        width: required("width")?,
        height: required("height")?,
    };
    v.check().map_err(|e| refuse(AT, e))?;
    name_unknown(m, AT, &["width", "height"], named);
    Ok(Some(v))
}

/// What `browserSettings.fingerprint` gives the browser.
#[derive(Debug, Default)]
struct Fingerprint {
    locales: Vec<String>,
    /// The screen's page area: `None` without a screen, `Some(None)` for a screen that gives
    /// none (it names one dimension only).
    screen: Option<Option<Viewport>>,
}

/// `fingerprint`'s fields.
const FINGERPRINT_FIELDS: [&str; 6] = [
    "browsers",
    "devices",
    "httpVersion",
    "locales",
    "operatingSystems",
    "screen",
];

/// `browserSettings.fingerprint` (Stagehand's): its locales and screen applied; its lists
/// named when they leave out what the browser is.
fn fingerprint(v: Option<&Value>, named: &mut Vec<String>) -> Result<Fingerprint, Refusal> {
    const AT: &str = "browserSettings.fingerprint";
    let m = match v {
        None | Some(Value::Null) => return Ok(Fingerprint::default()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(refuse(AT, "must be an object")),
    };
    for (name, values, ours) in [
        (
            "browsers",
            &["chrome", "edge", "firefox", "safari"][..],
            "chrome",
        ),
        ("devices", &["desktop", "mobile"][..], "desktop"),
        (
            "operatingSystems",
            &["android", "ios", "linux", "macos", "windows"][..],
            "linux",
        ),
    ] {
        if !choices(m, name, values)?.is_none_or(|c| c.is_empty() || c.contains(&ours)) {
            named.push(path(AT, name));
        }
    }
    // Chrome speaks HTTP/2 wherever a server offers it.
    match text(m, AT, "httpVersion")? {
        None | Some("2") => {}
        Some("1") => named.push(path(AT, "httpVersion")),
        Some(_) => return Err(refuse(&path(AT, "httpVersion"), "must be \"1\" or \"2\"")),
    }
    let screen = match m.get("screen") {
        None | Some(Value::Null) => None,
        Some(Value::Object(s)) => screen(s, named)?,
        Some(_) => return Err(refuse(&path(AT, "screen"), "must be an object")),
    };
    name_unknown(m, AT, &FINGERPRINT_FIELDS, named);
    Ok(Fingerprint {
        locales: locales(m.get("locales"))?,
        screen,
    })
}

/// A fingerprint list, field `name` of `fingerprint`: strings of `values` (absent or null:
/// `None`).
fn choices<'a>(
    m: &'a Map<String, Value>,
    name: &str,
    values: &[&str],
) -> Result<Option<Vec<&'a str>>, Refusal> {
    let at = format!("browserSettings.fingerprint.{name}");
    let list = match m.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(refuse(
                &at,
                format!("must be an array of {}", values.join(", ")),
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| match v.as_str() {
            Some(s) if values.contains(&s) => Ok(s),
            _ => Err(refuse(&format!("{at}[{i}]"), one_of(values))),
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `fingerprint.screen`: the range a fingerprint's screen falls in, as the page area when no
/// viewport is given. Of the range, the largest size (`maxWidth` × `maxHeight`, or a `min`
/// where there is no `max`): a client naming a screen means a screen that size (Browserbase
/// generates one within it), and the page fills the window. Kept within the viewport's bounds
/// (a 5120 wide screen gets 3840): degraded, never refused. `None` inside: a screen naming
/// one dimension only, not applied.
fn screen(
    m: &Map<String, Value>,
    named: &mut Vec<String>,
) -> Result<Option<Option<Viewport>>, Refusal> {
    const AT: &str = "browserSettings.fingerprint.screen";
    let mut sizes = [0u32; 2];
    let mut given = 0;
    for (i, (dim, bounds)) in [("Width", &VIEWPORT_WIDTH), ("Height", &VIEWPORT_HEIGHT)]
        .into_iter()
        .enumerate()
    {
        let (min, max) = (
            pixels(m, AT, &format!("min{dim}"))?,
            pixels(m, AT, &format!("max{dim}"))?,
        );
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            return Err(refuse(
                &format!("{AT}.min{dim}"),
                format!("is more than max{dim}"),
            ));
        }
        if let Some(size) = max.or(min) {
            sizes[i] = size.clamp(*bounds.start(), *bounds.end());
            given += 1;
        }
    }
    let known = ["maxWidth", "maxHeight", "minWidth", "minHeight"];
    name_unknown(m, AT, &known, named);
    Ok(match given {
        0 => None,
        1 => Some(None),
        _ => Some(Some(Viewport {
            width: sizes[0],
            height: sizes[1],
        })),
    })
}

/// `fingerprint.locales`: tags, most preferred first.
fn locales(v: Option<&Value>) -> Result<Vec<String>, Refusal> {
    const AT: &str = "browserSettings.fingerprint.locales";
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(refuse(AT, "must be an array of locale tags such as de-DE")),
    };
    if list.len() > MAX_LOCALES {
        return Err(refuse(AT, format!("has more than {MAX_LOCALES} entries")));
    }
    list.iter()
        .enumerate()
        .map(|(i, l)| match l.as_str() {
            Some(tag) if valid_locale(tag) => Ok(tag.to_owned()),
            Some(_) => Err(refuse(
                &format!("{AT}[{i}]"),
                "is not a locale tag such as de-DE",
            )),
            None => Err(refuse(&format!("{AT}[{i}]"), "must be a string")),
        })
        .collect()
}

/// The session's first log entry (`GET …/logs`), when its create asked for what this platform
/// accepts but does not do: a note naming it (as the create's header does), in a chunk of its own whose key
/// sorts before its controller's (named by now, before the controller starts writing). For a
/// session that is logged (not `logSession: false`); a store that fails is logged.
pub async fn note_unsupported(
    app: &crate::app::App,
    project_id: &str,
    session_id: &str,
    unsupported: &Unsupported,
) {
    let Some(names) = unsupported.header_value() else {
        return;
    };
    let now = app.clock.now_millis();
    let note = wallcrawler_contract::session_log::SessionLog::note(
        &format!(
            "the session asked for what this platform accepts but does not do: {names} (named in the create's {} header too)",
            UNSUPPORTED_HEADER
        ),
        now,
    );
    let mut line = serde_json::to_vec(&note).unwrap_or_default();
    line.push(b'\n');
    let key =
        wallcrawler_contract::session_log::session_log_chunk_key(project_id, session_id, now, 0);
    if let Err(e) = app.objects.put(&key, line.into()).await {
        warn!(session.id = %session_id, error = %crate::error::chain(&e), "the session's note of what it asked for and did not get could not be stored");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read_ok(body: Value) -> Asked {
        read(&body).unwrap_or_else(|e| panic!("{body} refused: {e}"))
    }

    fn refusal(body: Value) -> String {
        read(&body)
            .map(|a| panic!("{body} accepted: {a:?}"))
            .unwrap_err()
            .to_string()
    }

    fn settings(browser: Value) -> BrowserSettings {
        read_ok(json!({ "browserSettings": browser }))
            .settings
            .unwrap_or_default()
    }

    fn named(body: Value) -> Vec<String> {
        read_ok(body).unsupported.names().to_vec()
    }

    #[test]
    fn nothing_asked_is_nothing_to_apply() {
        for body in [
            json!(null),
            json!({}),
            json!([]),
            json!({"browserSettings": {}}),
            json!({"browserSettings": null, "proxySettings": null, "fooBar": null}),
            json!({"browserSettings": {"blockAds": false, "viewport": null, "fingerprint": {}}}),
        ] {
            assert_eq!(read_ok(body), Asked::default());
        }
    }

    #[test]
    fn a_viewport_is_applied_in_bounds() {
        let s = settings(json!({"viewport": {"width": 1288, "height": 711.0}}));
        assert_eq!(
            s.viewport,
            Some(Viewport {
                width: 1288,
                height: 711
            })
        );
        for (viewport, message) in [
            (
                json!({"width": 0, "height": 711}),
                "browserSettings.viewport must be 200-3840 wide and 200-2160 high (CSS pixels), got 0x711",
            ),
            (
                json!({"width": 1288, "height": 5000}),
                "browserSettings.viewport must be 200-3840 wide and 200-2160 high (CSS pixels), got 1288x5000",
            ),
            (
                json!({"width": 1e12, "height": 711}),
                "browserSettings.viewport must be 200-3840 wide and 200-2160 high (CSS pixels), got 4294967295x711",
            ),
            (
                json!({"width": "1288", "height": 711}),
                "browserSettings.viewport.width must be a whole number of CSS pixels",
            ),
            (
                json!({"width": 1288.5, "height": 711}),
                "browserSettings.viewport.width must be a whole number of CSS pixels, got 1288.5",
            ),
            (
                json!({"width": -5, "height": 711}),
                "browserSettings.viewport.width must be a whole number of CSS pixels, got -5",
            ),
            (
                json!({"width": 1288}),
                "browserSettings.viewport.height is required",
            ),
            (
                json!([1288, 711]),
                "browserSettings.viewport must be an object {width, height}",
            ),
        ] {
            assert_eq!(
                refusal(json!({"browserSettings": {"viewport": viewport}})),
                message
            );
        }
    }

    #[test]
    fn a_screen_is_the_viewport_when_there_is_none() {
        let vp = |w, h| {
            Some(Viewport {
                width: w,
                height: h,
            })
        };
        let screen = |s: Value| settings(json!({"fingerprint": {"screen": s}})).viewport;
        assert_eq!(
            screen(
                json!({"maxWidth": 1920, "maxHeight": 1080, "minWidth": 1024, "minHeight": 768})
            ),
            vp(1920, 1080)
        );
        assert_eq!(
            screen(json!({"minWidth": 1024, "minHeight": 768})),
            vp(1024, 768)
        );
        // Kept within the viewport's bounds.
        assert_eq!(
            screen(json!({"maxWidth": 5120, "maxHeight": 100})),
            vp(3840, 200)
        );
        // A viewport wins; the screen is then named.
        let a = read_ok(json!({"browserSettings": {
            "viewport": {"width": 1288, "height": 711},
            "fingerprint": {"screen": {"maxWidth": 1920, "maxHeight": 1080}}}}));
        assert_eq!(a.settings.unwrap().viewport, vp(1288, 711));
        assert_eq!(
            a.unsupported.names(),
            ["browserSettings.fingerprint.screen"]
        );
        // One dimension: not applied, named.
        let a =
            read_ok(json!({"browserSettings": {"fingerprint": {"screen": {"maxWidth": 1920}}}}));
        assert_eq!(a.settings, None);
        assert_eq!(
            a.unsupported.names(),
            ["browserSettings.fingerprint.screen"]
        );
        for (s, message) in [
            (
                json!({"maxWidth": "wide"}),
                "browserSettings.fingerprint.screen.maxWidth must be a whole number of CSS pixels",
            ),
            (
                json!({"minHeight": 900, "maxHeight": 800}),
                "browserSettings.fingerprint.screen.minHeight is more than maxHeight",
            ),
            (
                json!(1920),
                "browserSettings.fingerprint.screen must be an object",
            ),
        ] {
            assert_eq!(
                refusal(json!({"browserSettings": {"fingerprint": {"screen": s}}})),
                message
            );
        }
    }

    #[test]
    fn locales_are_tags() {
        let s = settings(json!({"fingerprint": {"locales": ["de-DE", "en"]}}));
        assert_eq!(s.locales, ["de-DE", "en"]);
        for (locales, message) in [
            (
                json!(["de-DE", "de_DE"]),
                "browserSettings.fingerprint.locales[1] is not a locale tag such as de-DE",
            ),
            (
                json!([7]),
                "browserSettings.fingerprint.locales[0] must be a string",
            ),
            (
                json!("de-DE"),
                "browserSettings.fingerprint.locales must be an array of locale tags such as de-DE",
            ),
            (
                json!(vec!["en"; 11]),
                "browserSettings.fingerprint.locales has more than 10 entries",
            ),
        ] {
            assert_eq!(
                refusal(json!({"browserSettings": {"fingerprint": {"locales": locales}}})),
                message
            );
        }
    }

    #[test]
    fn log_session_is_on_unless_false() {
        assert!(!settings(json!({})).no_session_log);
        assert!(!settings(json!({"logSession": true})).no_session_log);
        assert!(!settings(json!({"logSession": null})).no_session_log);
        assert!(settings(json!({"logSession": false})).no_session_log);
        assert!(!settings(json!({"recordSession": true})).no_recording);
        assert!(!settings(json!({"recordSession": null})).no_recording);
        assert!(settings(json!({"recordSession": false})).no_recording);
        assert!(named(json!({"browserSettings": {"recordSession": true}})).is_empty());
        assert!(named(json!({"browserSettings": {"logSession": true}})).is_empty());
    }

    #[test]
    fn flags_are_booleans() {
        let s = settings(json!({"blockAds": true, "ignoreCertificateErrors": true}));
        assert!(s.block_ads && s.ignore_certificate_errors);
        for f in [
            "blockAds",
            "ignoreCertificateErrors",
            "solveCaptchas",
            "verified",
            "advancedStealth",
            "recordSession",
            "logSession",
        ] {
            assert_eq!(
                refusal(json!({"browserSettings": {f: "true"}})),
                format!("browserSettings.{f} must be a boolean")
            );
        }
    }

    #[test]
    fn known_fields_of_the_wrong_type_are_refused_by_name() {
        for (body, message) in [
            (
                json!({"browserSettings": "x"}),
                "browserSettings must be an object",
            ),
            (json!({"keepAlive": "yes"}), "keepAlive must be a boolean"),
            (json!({"projectId": 7}), "projectId must be a string"),
            (json!({"region": 1}), "region must be a string"),
            (json!({"extensionId": true}), "extensionId must be a string"),
            (
                json!({"proxySettings": []}),
                "proxySettings must be an object",
            ),
            (
                json!({"proxySettings": {"caCertificates": "pem"}}),
                "proxySettings.caCertificates must be an array of strings",
            ),
            (
                json!({"browserSettings": {"extensionId": 7}}),
                "browserSettings.extensionId must be a string",
            ),
            (
                json!({"browserSettings": {"context": "ctx_1"}}),
                "browserSettings.context must be an object {id, persist}",
            ),
            (
                json!({"browserSettings": {"context": {"id": 1}}}),
                "browserSettings.context.id must be a string",
            ),
            (
                json!({"browserSettings": {"context": {"id": "c", "persist": "yes"}}}),
                "browserSettings.context.persist must be a boolean",
            ),
            (
                json!({"browserSettings": {"captchaImageSelector": 1}}),
                "browserSettings.captchaImageSelector must be a string",
            ),
            (
                json!({"browserSettings": {"os": "beos"}}),
                "browserSettings.os must be one of windows, mac, linux, mobile, tablet",
            ),
            (
                json!({"browserSettings": {"os": 1}}),
                "browserSettings.os must be a string",
            ),
            (
                json!({"browserSettings": {"fingerprint": []}}),
                "browserSettings.fingerprint must be an object",
            ),
            (
                json!({"browserSettings": {"fingerprint": {"browsers": "chrome"}}}),
                "browserSettings.fingerprint.browsers must be an array of chrome, edge, firefox, safari",
            ),
            (
                json!({"browserSettings": {"fingerprint": {"devices": ["desktop", "tv"]}}}),
                "browserSettings.fingerprint.devices[1] must be one of desktop, mobile",
            ),
            (
                json!({"browserSettings": {"fingerprint": {"operatingSystems": [1]}}}),
                "browserSettings.fingerprint.operatingSystems[0] must be one of android, ios, linux, macos, windows",
            ),
            (
                json!({"browserSettings": {"fingerprint": {"httpVersion": 2}}}),
                "browserSettings.fingerprint.httpVersion must be a string",
            ),
            (
                json!({"browserSettings": {"fingerprint": {"httpVersion": "3"}}}),
                "browserSettings.fingerprint.httpVersion must be \"1\" or \"2\"",
            ),
        ] {
            assert_eq!(refusal(body), message);
        }
    }

    #[test]
    fn what_is_not_done_is_named_and_what_is_done_is_not() {
        assert_eq!(
            named(json!({
                "projectId": "p", "keepAlive": true, "timeout": 60, "region": "us-east-1",
                "userMetadata": {"a": 1}, "extensionId": "e", "proxies": true,
                "proxySettings": {"caCertificates": ["cert_1"]}, "fooBar": 1, "api_timeout": 5,
                "browserSettings": {
                    "solveCaptchas": true, "verified": true, "advancedStealth": true,
                    "recordSession": true, "logSession": true, "captchaImageSelector": "#i",
                    "captchaInputSelector": "#t", "os": "windows", "allowedDomains": ["a.test"],
                    "context": {"id": "c", "persist": true, "mode": "x"},
                    "blockAds": true, "ignoreCertificateErrors": true, "newThing": {},
                    "viewport": {"width": 1288, "height": 711, "deviceScaleFactor": 2},
                    "fingerprint": {
                        "browsers": ["firefox"], "devices": ["mobile"], "httpVersion": "1",
                        "operatingSystems": ["ios"], "locales": ["de-DE"], "other": 1,
                        "screen": {"maxWidth": 1920, "maxHeight": 1080, "dpr": 2}
                    }
                }
            })),
            [
                "api_timeout",
                "browserSettings.advancedStealth",
                "browserSettings.captchaImageSelector",
                "browserSettings.captchaInputSelector",
                "browserSettings.context.mode",
                "browserSettings.fingerprint.browsers",
                "browserSettings.fingerprint.devices",
                "browserSettings.fingerprint.httpVersion",
                "browserSettings.fingerprint.operatingSystems",
                "browserSettings.fingerprint.other",
                "browserSettings.fingerprint.screen",
                "browserSettings.fingerprint.screen.dpr",
                "browserSettings.newThing",
                "browserSettings.os",
                "browserSettings.solveCaptchas",
                "browserSettings.verified",
                "browserSettings.viewport.deviceScaleFactor",
                "fooBar",
                "proxySettings.caCertificates",
            ]
        );
        // Asking for what happens anyway, or for nothing.
        assert!(
            named(json!({
                "proxies": [{"type": "none"}], "proxySettings": {"caCertificates": []},
                "browserSettings": {
                    "solveCaptchas": false, "verified": false, "recordSession": false,
                    "logSession": false, "advancedStealth": null, "os": "linux",
                    "captchaImageSelector": "", "allowedDomains": [],
                    "fingerprint": {"browsers": ["chrome", "edge"], "devices": ["desktop"],
                                    "operatingSystems": ["linux", "windows"], "httpVersion": "2"}
                }
            }))
            .is_empty()
        );
        for os in ["mac", "mobile", "tablet"] {
            assert_eq!(
                named(json!({"browserSettings": {"os": os}})),
                ["browserSettings.os"]
            );
        }
    }

    #[test]
    fn the_header_is_bounded_and_names_only_names() {
        let u = |names: Vec<String>| Unsupported::new(names).header_value();
        assert_eq!(u(vec![]), None);
        assert_eq!(
            u(vec![
                "browserSettings.verified".into(),
                "browserSettings.solveCaptchas".into(),
                "browserSettings.verified".into(),
            ])
            .unwrap(),
            "browserSettings.solveCaptchas,browserSettings.verified"
        );
        let many: Vec<String> = (0..25).map(|i| format!("field{i:02}")).collect();
        let v = u(many).unwrap();
        assert!(v.starts_with("field00,field01,"), "{v}");
        assert!(v.ends_with(",field19,+5 more"), "{v}");
        assert_eq!(v.split(',').count(), MAX_NAMES + 1);
        // A name that is not plainly a name is counted, never shown.
        let odd = vec![
            "a b".into(),
            "x".repeat(MAX_NAME_CHARS + 1),
            "ok".into(),
            "é".into(),
            "semi;colon".into(),
        ];
        assert_eq!(u(odd).unwrap(), "ok,+4 more");
        let odd = read_ok(json!({"line\r\nbreak": 1, "browserSettings": {"x-y": 1}}));
        assert_eq!(odd.unsupported.header_value().unwrap(), "+2 more");
        assert!(HeaderValue::try_from(u(vec!["+".into()]).unwrap()).is_ok());
    }
}
