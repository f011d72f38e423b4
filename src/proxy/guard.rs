//! What a client's CDP command may reach: the proxy's rules for commands that name local files.
//!
//! Chrome runs as a user that can read the controller's files, so a command naming a path
//! would hand the page (or the client) whatever that user can read. The inspector asks
//! [`judge`] about every complete text message a client sends; the decision per command
//! (Chromium 156's protocol, every command with a path or a URL parameter read for local
//! reach):
//!
//! | command | decision |
//! |---|---|
//! | `Browser.close` | withheld; the session ends normally |
//! | `Extensions.getExtensions` | forwarded (read-only: Stagehand 4 finds the extension the session was created with this way) |
//! | every other `Extensions.*` | refused (`loadUnpacked` loads any directory on the browser's disk as an extension; the others change extensions or their storage) |
//! | `Target.exposeDevToolsProtocol` | refused (gives the page's script its own browser-wide DevTools channel, which never passes this proxy) |
//! | `DOM.setFileInputFiles` `files`, `Input.dispatchDragEvent` `data.files`, `PWA.launchFilesInApp` `files` | each path must be inside the session's uploads or downloads directory, else refused |
//! | `Browser.setDownloadBehavior`, `Page.setDownloadBehavior` `downloadPath` | rewritten to the session's downloads directory (the behaviour is kept, the path is not; `default`, the browser's own directory, becomes `allow` into it) |
//! | `Page.navigate`, `Target.createTarget`, `Network.loadNetworkResource`, `Fetch.continueRequest` `url`; `PWA.install` `installUrlOrBundleUrl`; `PWA.launch` `url` | refused when the URL is `file:`, `filesystem:` or a `view-source:` of one |
//! | `Wallcrawler.requestHandoff` | withheld and answered by the proxy (a handoff to a person: [`crate::viewer::handoff`]); bad params answered `-32602` |
//! | every other `Wallcrawler.*` | answered `-32601` (`'<method>' wasn't found`), never forwarded |
//! | `Target.sendMessageToTarget` `message` | the inner command judged by these same rules; refused unless it is forwarded as is |
//! | HTTP `PUT /json/new?<url>` (not a CDP message: checked by the proxy's `/json` handler) | 403 when the URL, percent-decoded, reaches files ([`query_reaches_files`]) |
//! | everything else | forwarded (no other command of that protocol names a local path: `Tracing.start` and `Page.captureSnapshot` answer through streams, not files) |
//!
//! Paths are checked canonicalised: absolute, no `..` component, every symlink resolved, and
//! the result strictly inside a directory; a path that does not exist is refused. One named
//! directly in the uploads directory and not there yet is first asked of the session's
//! [`FetchUpload`](crate::file_rules::FetchUpload) (an upload the API stored, brought down on first use by the session's
//! uploads fetcher); the check then runs on what is there. A message
//! that mentions none of these names and has no JSON escape cannot be one of these commands
//! whatever parser reads it, so it is forwarded unparsed; one that does and that serde cannot
//! read as a JSON object (Chrome refuses those too) is [`Verdict::Unreadable`].
//!
//! An inspector socket (`/inspector/<credential>/page/<id>`, a person's DevTools opened with a
//! live-view credential) is judged in a narrower [`Scope`]: no `Wallcrawler.requestHandoff`
//! (the answer would be the session's control URL, wider and longer-lived than the credential
//! that asked), and with a credential for one page, only what concerns that page
//! ([`super::one_page`]): an allowlist of the protocol's domains whose commands act on the target
//! they are sent to, and command by command in the domains that also reach the browser
//! (`Target`, `Network`'s cookie jar and cache, `Storage`, `Security`). Every message is
//! parsed there (no fast path: a person's DevTools sends few).

use std::borrow::Cow;
use std::path::Path;
use std::sync::LazyLock;

use crate::file_rules::FileRules;

use memchr::memmem;

use super::one_page::{PageRule, page_rule};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

/// A URL as a browser reads its scheme: tabs and newlines dropped anywhere, C0 controls and
/// spaces trimmed, lowercased.
pub(crate) fn as_browser_reads(url: &str) -> String {
    let cleaned: String = url
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    cleaned
        .trim_matches(|c: char| c <= ' ')
        .to_ascii_lowercase()
}

/// Whether a URL, read the way a browser reads it, reaches local files.
pub fn reaches_files(url: &str) -> bool {
    let lower = as_browser_reads(url);
    let mut rest = lower.as_str();
    while let Some(inner) = rest.strip_prefix("view-source:") {
        rest = inner.trim_start_matches(|c: char| c <= ' ');
    }
    rest.starts_with("file:") || rest.starts_with("filesystem:")
}

/// Whether a `/json/new?<url>` query (the URL, percent-encoded or not, as Chrome reads it)
/// reaches local files.
pub fn query_reaches_files(query: &str) -> bool {
    let decoded = percent_decode(query);
    reaches_files(&decoded) || reaches_files(query)
}

/// Percent-decodes (invalid escapes kept as they are; invalid UTF-8 replaced).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex(*c)),
                b.get(i + 2).and_then(|c| hex(*c)),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whose socket a message came on: what it may reach beyond the file rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// A CDP client holding the session's token: the whole browser.
    #[default]
    Session,
    /// An inspector socket opened with a live-view credential: no handoff request, and with
    /// `page` (the credential names one), only what concerns that target.
    Viewer {
        /// The credential's page (a CDP target id), if it names one.
        page: Option<String>,
    },
}

impl Scope {
    /// The one page this scope is held to, if any.
    fn page(&self) -> Option<&str> {
        match self {
            Self::Viewer { page } => page.as_deref(),
            Self::Session => None,
        }
    }
}

/// What to do with one client message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pass it on as it came.
    Forward,
    /// A `Browser.close`: withhold it and end the session normally.
    BrowserClose,
    /// Withhold it and answer the client with this CDP error (a complete JSON text).
    Refuse(String),
    /// Pass on this payload instead (a rewritten command).
    Rewrite(Vec<u8>),
    /// Names a guarded command but cannot be read: the connection is closed.
    Unreadable,
    /// A `Wallcrawler.requestHandoff` with valid params: withheld and answered by the proxy
    /// ([`crate::viewer::handoff`]).
    Handoff(Box<crate::viewer::handoff::Request>),
}

/// Names whose presence makes a message worth parsing; without one of them (and without a
/// backslash, which could spell one) no parser can read a guarded command out of it.
const WATCHED: [&[u8]; 14] = [
    b"Browser.close",
    b"Extensions.",
    b"setFileInputFiles",
    b"dispatchDragEvent",
    b"launchFilesInApp",
    b"setDownloadBehavior",
    b"navigate",
    b"createTarget",
    b"loadNetworkResource",
    b"continueRequest",
    b"PWA.",
    b"sendMessageToTarget",
    b"exposeDevToolsProtocol",
    b"Wallcrawler.",
];

/// `Target.sendMessageToTarget` nests commands; deeper nesting than this is refused.
const MAX_NESTING: usize = 2;

/// Decides on one complete, unmasked text message from a session's CDP client.
pub fn judge(plain: &[u8], rules: &FileRules) -> Verdict {
    judge_at(plain, rules, &Scope::Session, 0)
}

/// Decides on one complete, unmasked text message sent on a socket of `scope`.
pub fn judge_in(plain: &[u8], rules: &FileRules, scope: &Scope) -> Verdict {
    judge_at(plain, rules, scope, 0)
}

/// The searchers for [`WATCHED`], built once (building one costs more than a search of a
/// typical command).
static FINDERS: LazyLock<Vec<memmem::Finder<'static>>> =
    LazyLock::new(|| WATCHED.iter().map(memmem::Finder::new).collect());

fn judge_at(plain: &[u8], rules: &FileRules, scope: &Scope, depth: usize) -> Verdict {
    // A one-page inspector judges every command by its name: no message passes unread.
    if scope.page().is_none()
        && memchr::memchr(b'\\', plain).is_none()
        && !FINDERS.iter().any(|f| f.find(plain).is_some())
    {
        return Verdict::Forward;
    }
    match judge_parsed(plain, rules, scope, depth) {
        Ok(v) => v,
        Err(_) => Verdict::Unreadable,
    }
}

/// The fields every decision needs; `params` is read again only for guarded methods. Serde
/// refuses a repeated field, as Chrome does.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", default)]
    session_id: Option<Value>,
    #[serde(default)]
    #[allow(dead_code)]
    params: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct With<P> {
    #[serde(default = "Option::default")]
    params: Option<P>,
}

#[derive(Deserialize)]
struct Files {
    #[serde(default)]
    files: Vec<String>,
}

#[derive(Deserialize)]
struct Drag {
    data: Option<Files>,
}

#[derive(Deserialize)]
struct Url {
    #[serde(default)]
    url: Option<String>,
    #[serde(rename = "installUrlOrBundleUrl", default)]
    install_url: Option<String>,
}

#[derive(Deserialize)]
struct Nested {
    message: String,
}

fn judge_parsed(
    plain: &[u8],
    rules: &FileRules,
    scope: &Scope,
    depth: usize,
) -> serde_json::Result<Verdict> {
    let head = head_of(plain)?;
    let Some(method) = head.method.as_deref() else {
        return Ok(Verdict::Forward);
    };
    let refuse = |why: &str| Ok(Verdict::Refuse(error_reply(&head, method, why)));
    if let Some(v) = scope_verdict(plain, &head, method, scope)? {
        return Ok(v);
    }
    match method {
        "Browser.close" => Ok(Verdict::BrowserClose),
        m if m.starts_with("Wallcrawler.") => wallcrawler_method(plain, &head, m),
        // Read-only; what a client needs to find the extension the session was created with.
        "Extensions.getExtensions" => Ok(Verdict::Forward),
        m if m.starts_with("Extensions.") => refuse("is not allowed through this proxy"),
        // The page would get a DevTools channel to the browser target that bypasses this guard.
        "Target.exposeDevToolsProtocol" => refuse("is not allowed through this proxy"),
        "DOM.setFileInputFiles" | "PWA.launchFilesInApp" | "Input.dispatchDragEvent" => {
            if files_allowed(plain, method, rules)? {
                Ok(Verdict::Forward)
            } else {
                refuse("is not allowed for a file outside this session's uploads and downloads")
            }
        }
        "Browser.setDownloadBehavior" | "Page.setDownloadBehavior" => {
            match rewrite_download_path(plain, rules)? {
                Some(v) => Ok(v),
                None => refuse("is not allowed: this session has no downloads directory"),
            }
        }
        "Page.navigate"
        | "Target.createTarget"
        | "Network.loadNetworkResource"
        | "Fetch.continueRequest"
        | "PWA.install"
        | "PWA.launch" => {
            if names_local_file(plain)? {
                refuse("is not allowed for a local file URL")
            } else {
                Ok(Verdict::Forward)
            }
        }
        "Target.sendMessageToTarget" => {
            let Some(nested) = serde_json::from_slice::<With<Nested>>(plain)?.params else {
                return Ok(Verdict::Forward);
            };
            if depth < MAX_NESTING
                && judge_at(nested.message.as_bytes(), rules, scope, depth + 1) == Verdict::Forward
            {
                Ok(Verdict::Forward)
            } else {
                refuse("is not allowed for this inner command")
            }
        }
        _ => Ok(Verdict::Forward),
    }
}

/// Whether every file a file-naming `method` names lies where `rules` allow.
fn files_allowed(plain: &[u8], method: &str, rules: &FileRules) -> serde_json::Result<bool> {
    let files = if method == "Input.dispatchDragEvent" {
        let drag = serde_json::from_slice::<With<Drag>>(plain)?.params;
        drag.and_then(|d| d.data).map(|f| f.files)
    } else {
        serde_json::from_slice::<With<Files>>(plain)?
            .params
            .map(|f| f.files)
    };
    Ok(files
        .unwrap_or_default()
        .iter()
        .all(|f| rules.allows_path(f)))
}

/// Whether a URL-taking command names a local file URL (in `url` or `installUrlOrBundleUrl`).
fn names_local_file(plain: &[u8]) -> serde_json::Result<bool> {
    let url = serde_json::from_slice::<With<Url>>(plain)?.params;
    let named = url.map(|u| [u.url, u.install_url]).unwrap_or_default();
    Ok(named.iter().flatten().any(|u| reaches_files(u)))
}

/// The head of a message Chrome would read: a JSON object (serde would read a struct from an
/// array too).
fn head_of(plain: &[u8]) -> serde_json::Result<Head<'_>> {
    if plain.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(serde::de::Error::custom("not an object"));
    }
    serde_json::from_slice(plain)
}

/// What an inspector socket's [`Scope`] decides before the file rules: `None` when it lets
/// the command on to them.
fn scope_verdict(
    plain: &[u8],
    head: &Head<'_>,
    method: &str,
    scope: &Scope,
) -> serde_json::Result<Option<Verdict>> {
    let Scope::Viewer { page } = scope else {
        return Ok(None);
    };
    let refuse = |why: &str| Ok(Some(Verdict::Refuse(error_reply(head, method, why))));
    if method == crate::viewer::handoff::REQUEST {
        return refuse(
            "is not allowed on an inspector: a live-view credential is never handed a wider one",
        );
    }
    let Some(page) = page else {
        return Ok(None);
    };
    match page_rule(plain, method, page)? {
        PageRule::Pass => Ok(None),
        PageRule::Refuse => refuse("is not allowed: this inspector's credential is for one page"),
        PageRule::Rewrite(payload) => Ok(Some(Verdict::Rewrite(payload))),
    }
}

/// The command with its `downloadPath` set to the session's downloads directory: `None` when
/// there is none. `deny` without a path passes as it came; `default` (the browser's own
/// directory, outside the session's: Chromium 156 writes to `~/Downloads`) becomes `allow`
/// into the session's, which is what it means here.
fn rewrite_download_path(plain: &[u8], rules: &FileRules) -> serde_json::Result<Option<Verdict>> {
    let mut command: serde_json::Map<String, Value> = serde_json::from_slice(plain)?;
    let Some(Value::Object(params)) = command.get_mut("params") else {
        return Ok(Some(Verdict::Forward));
    };
    if params.get("behavior").and_then(Value::as_str) == Some("default") {
        params.insert("behavior".into(), Value::String("allow".into()));
        params.insert("downloadPath".into(), Value::Null);
    }
    if !params.contains_key("downloadPath") {
        return Ok(Some(Verdict::Forward));
    }
    let Some(dir) = rules.downloads().and_then(Path::to_str) else {
        return Ok(None);
    };
    if params.get("downloadPath").and_then(Value::as_str) == Some(dir) {
        return Ok(Some(Verdict::Forward));
    }
    params.insert("downloadPath".into(), Value::String(dir.to_owned()));
    Ok(Some(Verdict::Rewrite(serde_json::to_vec(&command)?)))
}

/// The CDP error answering a refused command, for its id (and flattened session).
/// A `Wallcrawler.*` command: a handoff request read strictly, or an unknown method's error.
fn wallcrawler_method(plain: &[u8], head: &Head<'_>, method: &str) -> serde_json::Result<Verdict> {
    use crate::viewer::handoff;
    let id = head.id.clone().unwrap_or(Value::Null);
    let sid = head.session_id.as_ref();
    if method != handoff::REQUEST {
        let msg = format!("'{method}' wasn't found");
        return Ok(Verdict::Refuse(handoff::error_answer(
            &id,
            sid,
            handoff::METHOD_NOT_FOUND,
            &msg,
        )));
    }
    let params = serde_json::from_slice::<With<Value>>(plain)?.params;
    Ok(match handoff::read_params(params.as_ref()) {
        Ok((reason, timeout)) => Verdict::Handoff(Box::new(handoff::Request {
            id,
            session_id: sid.cloned(),
            reason,
            timeout,
        })),
        Err(why) => Verdict::Refuse(handoff::error_answer(
            &id,
            sid,
            handoff::INVALID_PARAMS,
            why,
        )),
    })
}

fn error_reply(head: &Head<'_>, method: &str, why: &str) -> String {
    let mut reply = serde_json::Map::new();
    reply.insert("id".into(), head.id.clone().unwrap_or(Value::Null));
    if let Some(s) = &head.session_id {
        reply.insert("sessionId".into(), s.clone());
    }
    reply.insert(
        "error".into(),
        serde_json::json!({ "code": -32000, "message": format!("{method} {why}") }),
    );
    Value::Object(reply).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wallcrawler_methods_are_the_proxys_own() {
        let r = FileRules::default();
        let reply = |m: &[u8]| match judge(m, &r) {
            Verdict::Refuse(t) => serde_json::from_str::<Value>(&t).unwrap(),
            v => panic!("{v:?}"),
        };
        assert_eq!(
            reply(br#"{"id":3,"sessionId":"S","method":"Wallcrawler.nope","params":{}}"#),
            serde_json::json!({"id":3,"sessionId":"S","error":{"code":-32601,"message":"'Wallcrawler.nope' wasn't found"}})
        );
        // However it is spelled.
        assert_eq!(
            reply(br#"{"id":4,"method":"Wallcrawler\u002enope"}"#)["error"]["code"],
            -32601
        );
        assert_eq!(
            reply(br#"{"id":5,"method":"Wallcrawler.requestHandoff","params":{"reason":"x","timeout":0}}"#),
            serde_json::json!({"id":5,"error":{"code":-32602,"message":"Invalid parameters: timeout must be an integer from 1 to 3600 (seconds)"}})
        );
        assert_eq!(
            judge(
                br#"{"id":6,"method":"Wallcrawler.requestHandoff","params":{"reason":"log in","timeout":60}}"#,
                &r
            ),
            Verdict::Handoff(Box::new(crate::viewer::handoff::Request {
                id: serde_json::json!(6),
                session_id: None,
                reason: "log in".into(),
                timeout: 60,
            }))
        );
        // Not smuggled through another target's session either.
        let inner = r#"{"id":1,"method":"Wallcrawler.requestHandoff","params":{"reason":"x"}}"#;
        let c = serde_json::json!({"id":9,"method":"Target.sendMessageToTarget","params":{"sessionId":"S","message":inner}});
        assert!(refused(&judge(c.to_string().as_bytes(), &r)));
    }

    #[test]
    fn an_inspector_socket_asks_for_no_handoff_and_a_one_page_one_reaches_only_its_page() {
        let r = FileRules::default();
        let page = "0123456789ABCDEF0123456789ABCDEF";
        let whole = Scope::Viewer { page: None };
        let one = Scope::Viewer {
            page: Some(page.into()),
        };
        let reply = |m: &[u8], scope: &Scope| match judge_in(m, &r, scope) {
            Verdict::Refuse(t) => serde_json::from_str::<Value>(&t).unwrap(),
            v => panic!("{v:?}: {}", String::from_utf8_lossy(m)),
        };
        let handoff = br#"{"id":6,"sessionId":"S","method":"Wallcrawler.requestHand\u006fff","params":{"reason":"x"}}"#;
        for scope in [&whole, &one] {
            let v = reply(handoff, scope);
            assert_eq!(
                (v["id"].as_i64(), v["sessionId"].as_str()),
                (Some(6), Some("S"))
            );
            assert_eq!(v["error"]["code"], -32000);
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Wallcrawler.requestHandoff is not allowed on an inspector"),
                "{v}"
            );
        }
        // A session's client still asks.
        assert!(matches!(judge(handoff, &r), Verdict::Handoff(_)));
        // One page: every command is read, however spelled, nested or flattened.
        for m in [
            br#"{"id":1,"method":"Target.getTargets"}"#.as_slice(),
            br#"{"id":1,"method":"Target.getT\u0061rgets"}"#,
            br#"{"id":1,"sessionId":"C","method":"Network.getAllCookies"}"#,
            br#"{"id":1,"method":"Target.attachToTarget","params":{"targetId":"FEDCBA9876543210FEDCBA9876543210","flatten":true}}"#,
            br#"{"id":1,"method":"Browser.close"}"#,
        ] {
            let v = reply(m, &one);
            assert!(
                v["error"]["message"].as_str().unwrap().ends_with("is for one page"),
                "{v}"
            );
        }
        let inner = r#"{"id":2,"method":"Storage.getCookies"}"#;
        let nested = serde_json::json!({"id":9,"method":"Target.sendMessageToTarget","params":{"sessionId":"C","message":inner}});
        assert!(refused(&judge_in(nested.to_string().as_bytes(), &r, &one)));
        for m in [
            br#"{"id":1,"method":"Runtime.evaluate","params":{"expression":"1"}}"#.as_slice(),
            br#"{"id":1,"method":"Target.setAutoAttach","params":{"autoAttach":true,"waitForDebuggerOnStart":false,"flatten":true}}"#,
        ] {
            assert_eq!(judge_in(m, &r, &one), Verdict::Forward);
        }
        // What the session's client may do, the whole-session inspector may too.
        assert_eq!(
            judge_in(br#"{"id":1,"method":"Target.getTargets"}"#, &r, &whole),
            Verdict::Forward
        );
        // File rules hold there as well.
        let ext = br#"{"id":1,"method":"Extensions.loadUnpacked","params":{"path":"/"}}"#;
        assert!(refused(&judge_in(ext, &r, &whole)));
        // A one-page socket reads what it cannot parse as the end of it.
        assert_eq!(
            judge_in(br#"{"id":1,"method":"Page.enable",}"#, &r, &one),
            Verdict::Unreadable
        );
    }

    fn rules() -> (tempfile::TempDir, FileRules) {
        let dir = tempfile::tempdir().unwrap();
        let rules = FileRules::new(&dir.path().join("up"), &dir.path().join("down")).unwrap();
        (dir, rules)
    }

    fn refused(v: &Verdict) -> bool {
        matches!(v, Verdict::Refuse(_))
    }

    #[test]
    fn extensions_commands_are_refused_with_their_id_and_session() {
        let (_d, r) = rules();
        for m in [
            br#"{"id":4,"sessionId":"S1","method":"Extensions.loadUnpacked","params":{"path":"/x"}}"#.as_slice(),
            br#"{"id":4,"sessionId":"S1","method":"Extensions.loadUnpack\u0065d"}"#,
            br#"{"id":4,"sessionId":"S1","method":"\u0045xtensions.uninstall"}"#,
            br#"{"id":4,"sessionId":"S1","method":"Target.exposeDevToolsProtocol","params":{"targetId":"T","bindingName":"cdp"}}"#,
        ] {
            let Verdict::Refuse(reply) = judge(m, &r) else {
                panic!("not refused: {}", String::from_utf8_lossy(m));
            };
            let v: Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(v["id"], 4);
            assert_eq!(v["sessionId"], "S1");
            assert_eq!(v["error"]["code"], -32000);
            assert!(v["error"]["message"].as_str().unwrap().contains("not allowed"));
        }
        // Listing is read-only: Stagehand 4 finds its extension this way.
        for m in [
            br#"{"id":5,"method":"Extensions.getExtensions"}"#.as_slice(),
            br#"{"id":5,"method":"Extensions.getExtensi\u006fns"}"#,
        ] {
            assert!(matches!(judge(m, &r), Verdict::Forward));
        }
    }

    #[test]
    fn file_paths_must_be_inside_the_session_directories() {
        let (d, r) = rules();
        let inside = r.uploads().unwrap().join("a.txt");
        std::fs::write(&inside, b"x").unwrap();
        let outside = d.path().join("secret.json");
        std::fs::write(&outside, b"{}").unwrap();
        std::os::unix::fs::symlink(&outside, r.uploads().unwrap().join("link")).unwrap();
        let cmd = |p: &str| {
            format!(
                r#"{{"id":1,"method":"DOM.setFileInputFiles","params":{{"files":[{}],"nodeId":3}}}}"#,
                Value::from(p)
            )
        };
        let up = r.uploads().unwrap().to_str().unwrap().to_owned();
        assert_eq!(
            judge(cmd(inside.to_str().unwrap()).as_bytes(), &r),
            Verdict::Forward
        );
        for bad in [
            outside.to_str().unwrap().to_owned(),
            format!("{up}/link"),
            format!("{up}/../secret.json"),
            format!("{up}/../up/a.txt"),
            up.clone(),
            "a.txt".to_owned(),
            "/proc/self/environ".to_owned(),
            format!("{up}/missing"),
        ] {
            assert!(refused(&judge(cmd(&bad).as_bytes(), &r)), "{bad}");
        }
        let drag = format!(
            r#"{{"id":2,"method":"Input.dispatchDragEvent","params":{{"type":"drop","x":1,"y":1,"data":{{"items":[],"dragOperationsMask":1,"files":[{}]}}}}}}"#,
            Value::from(outside.to_str().unwrap())
        );
        assert!(refused(&judge(drag.as_bytes(), &r)));
    }

    #[test]
    fn file_urls_are_refused_however_spelled() {
        let (_d, r) = rules();
        for url in [
            "file:///etc/passwd",
            " FILE:///etc/passwd",
            "fi\tle:///x",
            "view-source:file:///x",
            "filesystem:http://a/x",
        ] {
            for m in [
                "Page.navigate",
                "Target.createTarget",
                "Network.loadNetworkResource",
            ] {
                let c = serde_json::json!({"id":1,"method":m,"params":{"url":url}}).to_string();
                assert!(refused(&judge(c.as_bytes(), &r)), "{m} {url:?}");
            }
        }
        let ok = br#"{"id":1,"method":"Page.navigate","params":{"url":"http://127.0.0.1/"}}"#;
        assert_eq!(judge(ok, &r), Verdict::Forward);
    }

    #[test]
    fn json_new_queries_naming_files_are_caught() {
        assert!(query_reaches_files("file:///etc/passwd"));
        assert!(query_reaches_files("%66ile:%2F%2F%2Fetc"));
        assert!(query_reaches_files("view-source%3Afile:///x"));
        assert!(!query_reaches_files("http://127.0.0.1/file:"));
    }

    #[test]
    fn download_paths_are_rewritten_to_the_session_downloads() {
        let (_d, r) = rules();
        let c = br#"{"id":1,"method":"Browser.setDownloadBehavior","params":{"behavior":"allowAndName","downloadPath":"/tmp/elsewhere","eventsEnabled":true}}"#;
        let Verdict::Rewrite(p) = judge(c, &r) else {
            panic!("not rewritten")
        };
        let v: Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(
            v["params"]["downloadPath"],
            r.downloads().unwrap().to_str().unwrap()
        );
        assert_eq!(v["params"]["behavior"], "allowAndName");
        assert_eq!(v["id"], 1);
        let none = FileRules::default();
        assert!(refused(&judge(c, &none)));
        let deny =
            br#"{"id":1,"method":"Browser.setDownloadBehavior","params":{"behavior":"deny"}}"#;
        assert_eq!(judge(deny, &none), Verdict::Forward);
        // `default` would write to the browser's own directory: allowed into the session's.
        let default =
            br#"{"id":2,"method":"Page.setDownloadBehavior","params":{"behavior":"default"}}"#;
        let Verdict::Rewrite(p) = judge(default, &r) else {
            panic!("default not rewritten")
        };
        let v: Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v["params"]["behavior"], "allow");
        assert_eq!(
            v["params"]["downloadPath"],
            r.downloads().unwrap().to_str().unwrap()
        );
        assert!(refused(&judge(default, &none)));
    }

    #[test]
    fn nested_commands_are_judged_too() {
        let (_d, r) = rules();
        let inner = r#"{"id":1,"method":"Extensions.loadUnpacked","params":{"path":"/x"}}"#;
        let c = serde_json::json!({"id":9,"method":"Target.sendMessageToTarget","params":{"sessionId":"S","message":inner}});
        assert!(refused(&judge(c.to_string().as_bytes(), &r)));
        let fine = serde_json::json!({"id":9,"method":"Target.sendMessageToTarget","params":{"sessionId":"S","message":r#"{"id":1,"method":"Page.enable"}"#}});
        assert_eq!(judge(fine.to_string().as_bytes(), &r), Verdict::Forward);
    }

    #[test]
    fn unreadable_messages_naming_a_guarded_command_are_unreadable() {
        let (_d, r) = rules();
        let deep = format!(
            r#"{{"method":"Extensions.loadUnpacked","id":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for m in [
            br#"{"id":1,"method":"Page.enable","method":"Extensions.loadUnpacked"}"#.as_slice(),
            br#"["Browser.close"]"#,
            br#"{"id":1,"method":"Extensions.loadUnpacked",}"#,
            deep.as_bytes(),
        ] {
            assert_eq!(
                judge(m, &r),
                Verdict::Unreadable,
                "{}",
                String::from_utf8_lossy(m)
            );
        }
        // Nothing guarded named: forwarded unparsed, for Chrome to refuse.
        assert_eq!(
            judge(br#"{"id":1,"method":"Page.enable",}"#, &r),
            Verdict::Forward
        );
    }
}
