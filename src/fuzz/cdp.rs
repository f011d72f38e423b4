//! The CDP guard ([`crate::proxy::guard::judge`]) on commands as clients spell them, and the
//! frame inspector ([`crate::proxy::inspect::Inspector`]) on byte streams split at random
//! points.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes, pieces};

use crate::edge::ws::{Fatal, Segment};
use crate::file_rules::FileRules;
use crate::proxy::guard::{Scope, Verdict, judge, judge_in};
use crate::proxy::inspect::Inspector;

const METHODS: &[&str] = &[
    "Browser.close",
    "Extensions.loadUnpacked",
    "Extensions.getExtensions",
    "Extensions.uninstall",
    "Target.exposeDevToolsProtocol",
    "DOM.setFileInputFiles",
    "Input.dispatchDragEvent",
    "PWA.launchFilesInApp",
    "Browser.setDownloadBehavior",
    "Page.setDownloadBehavior",
    "Page.navigate",
    "Target.createTarget",
    "Network.loadNetworkResource",
    "Fetch.continueRequest",
    "PWA.install",
    "PWA.launch",
    "Wallcrawler.requestHandoff",
    "Wallcrawler.nope",
    "Target.sendMessageToTarget",
    "Runtime.evaluate",
    "Target.getTargets",
    "Target.attachToTarget",
    "Target.setDiscoverTargets",
    "Target.attachToBrowserTarget",
    "Network.getAllCookies",
    "Network.getCookies",
    "Storage.getCookies",
    "Browser.getVersion",
    "SystemInfo.getInfo",
];

/// The page a one-page inspector socket is held to, and another.
const PAGE: &str = "0123456789ABCDEF0123456789ABCDEF";
const OTHER_PAGE: &str = "FEDCBA9876543210FEDCBA9876543210";

/// Methods that must never pass on a one-page inspector socket, whatever their params: other
/// targets, the browser's cookie jar, the browser's own domains, a handoff (Step 20 item 1).
const NEVER_ON_ONE_PAGE: &[&str] = &[
    "Target.getTargets",
    "Target.setDiscoverTargets",
    "Target.createTarget",
    "Target.attachToBrowserTarget",
    "Target.exposeDevToolsProtocol",
    "Network.getAllCookies",
    "Storage.getCookies",
    "Browser.close",
    "Browser.getVersion",
    "SystemInfo.getInfo",
    "Extensions.loadUnpacked",
    "Wallcrawler.requestHandoff",
];

/// Values of a command's path and URL parameters: `{up}` and `{down}` stand for the session's
/// uploads and downloads directories (`{up}/a.txt` exists).
const VALUES: &[&str] = &[
    "file:///etc/passwd",
    " FILE:///etc/passwd",
    "fi\tle:///x",
    "view-source:file:///x",
    "filesystem:http://a/x",
    "http://127.0.0.1/",
    "/etc/passwd",
    "/proc/self/environ",
    "{up}/a.txt",
    "{up}/../up/a.txt",
    "{up}/missing",
    "{up}",
    "{down}",
    "a.txt",
    "log in",
    "chrome://settings",
    "about:blank",
    "0123456789ABCDEF0123456789ABCDEF",
    "FEDCBA9876543210FEDCBA9876543210",
];

/// One parameter: its name, and a value (a string of [`VALUES`], in a list or not).
fn param() -> impl Strategy<Value = (String, Value)> {
    let name = prop::sample::select(vec![
        "url",
        "files",
        "path",
        "downloadPath",
        "behavior",
        "installUrlOrBundleUrl",
        "reason",
        "timeout",
        "data",
        "targetId",
        "urls",
    ]);
    let value = prop::sample::select(VALUES).prop_map(|v| Value::String(v.to_owned()));
    let value = prop_oneof![
        value.clone(),
        value.clone().prop_map(|v| Value::Array(vec![v])),
        value.prop_map(|v| serde_json::json!({"items": [], "files": [v]})),
        prop::sample::select(vec!["allow", "default", "deny", "allowAndName"])
            .prop_map(Value::from),
        (0i64..4000).prop_map(Value::from),
    ];
    (name.prop_map(str::to_owned), value)
}

/// A command as a JSON object.
fn command(depth: u32) -> BoxedStrategy<Value> {
    let flat = (
        any::<u16>(),
        prop::sample::select(METHODS),
        prop::collection::vec(param(), 0..4),
        prop::option::of(Just("S1")),
    )
        .prop_map(|(id, method, params, session)| {
            let mut c = serde_json::json!({"id": id, "method": method});
            c["params"] = Value::Object(params.into_iter().collect());
            if let Some(s) = session {
                c["sessionId"] = s.into();
            }
            c
        });
    if depth == 0 {
        return flat.boxed();
    }
    prop_oneof![
        3 => flat,
        1 => (any::<u16>(), command(depth - 1)).prop_map(|(id, inner)| {
            serde_json::json!({"id": id, "method": "Target.sendMessageToTarget",
                "params": {"sessionId": "S", "message": inner.to_string()}})
        }),
    ]
    .boxed()
}

/// `v` written as JSON with the characters picked by `escape` spelled `\uXXXX` (in keys and
/// string values alike) and spaces between tokens: the same command, spelled otherwise.
fn spelled(v: &Value, escape: &[bool], spaced: bool) -> String {
    fn lit(s: &str, escape: &[bool], at: &mut usize, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            *at += 1;
            if escape.get(*at % escape.len().max(1)) == Some(&true) && (c as u32) < 0x10000 {
                out.push_str(&format!("\\u{:04x}", c as u32));
            } else {
                let quoted = Value::String(c.to_string()).to_string();
                out.push_str(&quoted[1..quoted.len() - 1]);
            }
        }
        out.push('"');
    }
    fn go(v: &Value, escape: &[bool], sp: &str, at: &mut usize, out: &mut String) {
        match v {
            Value::Object(m) => {
                out.push('{');
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(sp);
                    lit(k, escape, at, out);
                    out.push_str(sp);
                    out.push(':');
                    out.push_str(sp);
                    go(x, escape, sp, at, out);
                }
                out.push_str(sp);
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go(x, escape, sp, at, out);
                }
                out.push(']');
            }
            Value::String(s) => lit(s, escape, at, out),
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    go(v, escape, if spaced { " \n" } else { "" }, &mut 0, &mut out);
    out
}

/// The session's directories for [`VALUES`], and the rules over them.
fn rules() -> (tempfile::TempDir, FileRules) {
    let dir = tempfile::tempdir().unwrap();
    let rules = FileRules::new(&dir.path().join("up"), &dir.path().join("down")).unwrap();
    std::fs::write(rules.uploads().unwrap().join("a.txt"), b"x").unwrap();
    (dir, rules)
}

/// Commands as clients may send them: generated (guarded and ordinary methods, hostile paths
/// and URLs, nested in `Target.sendMessageToTarget`, escaped and spaced), the guard tests'
/// hostile messages mutated, or random bytes.
fn messages(rules: &FileRules) -> impl Strategy<Value = Vec<u8>> + Clone + use<> {
    let dirs = |s: &str, rules: &FileRules| {
        let up = rules.uploads().and_then(Path::to_str).unwrap_or("");
        let down = rules.downloads().and_then(Path::to_str).unwrap_or("");
        s.replace("{up}", up).replace("{down}", down)
    };
    let (r1, r2) = (dirs("{up}", rules), dirs("{down}", rules));
    let generated = (
        command(2),
        prop::collection::vec(prop::bool::weighted(0.05), 1..64),
        any::<bool>(),
    )
        .prop_map(move |(c, escape, spaced)| {
            let text = spelled(&c, &escape, spaced);
            text.replace("{up}", &r1)
                .replace("{down}", &r2)
                .into_bytes()
        });
    let seeds: Vec<Vec<u8>> = [
        r#"{"id":3,"sessionId":"S","method":"Wallcrawler.nope","params":{}}"#,
        r#"{"id":4,"method":"Wallcrawler\u002enope"}"#,
        r#"{"id":5,"method":"Wallcrawler.requestHandoff","params":{"reason":"x","timeout":0}}"#,
        r#"{"id":4,"sessionId":"S1","method":"Extensions.loadUnpack\u0065d"}"#,
        r#"{"id":4,"sessionId":"S1","method":"\u0045xtensions.uninstall"}"#,
        r#"{"id":5,"method":"Extensions.getExtensi\u006fns"}"#,
        r#"{"id":1,"method":"Page.navigate","params":{"url":"fi\tle:///x"}}"#,
        r#"{"id":1,"method":"Browser.setDownloadBehavior","params":{"behavior":"allowAndName","downloadPath":"/tmp/elsewhere","eventsEnabled":true}}"#,
        r#"{"id":1,"method":"Browser.close"}"#,
        r#"{"id":1,"method":"Browser\u002eclose","params":{}}"#,
        r#"[{"id":1,"method":"Browser.close"}]"#,
        r#"{"id":1,"method":"Page.navigate","params":{"url":"http://a/"},"method":"Page.navigate"}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    prop_oneof![3 => generated, 1 => hostile_bytes(seeds, 256)]
}

/// Whether `plain` is forwarded as it is.
fn forwarded_as_is(plain: &[u8], rules: &FileRules) -> bool {
    judge(plain, rules) == Verdict::Forward
}

/// The guard: never a panic; a rewritten command passes the guard as it is (a rewrite is
/// final); a refusal is a CDP error answer (JSON with `error`); and a command forwarded as it
/// came means nothing else spelled plainly: the same JSON written without escapes or spaces
/// is forwarded too (no spelling slips a guarded command past the guard).
#[test]
fn guard() {
    let (_dir, rules) = rules();
    fuzz::run("guard", messages(&rules), |m| {
        match judge(&m, &rules) {
            Verdict::Rewrite(p) => prop_assert!(forwarded_as_is(&p, &rules)),
            Verdict::Refuse(reply) => {
                let v: Value = serde_json::from_str(&reply).unwrap();
                prop_assert!(v.get("error").is_some(), "{}", reply);
            }
            Verdict::Forward => {
                if let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(&m) {
                    let plain = serde_json::to_vec(&v).unwrap();
                    prop_assert!(
                        forwarded_as_is(&plain, &rules),
                        "{} forwarded, but spelled plainly it is not",
                        String::from_utf8_lossy(&m)
                    );
                }
            }
            Verdict::BrowserClose | Verdict::Unreadable | Verdict::Handoff(_) => {}
        }
        Ok(())
    });
}

/// The guard on a one-page inspector socket (a live-view credential naming one page), on the
/// same commands: never a panic; a rewrite is final; a command forwarded as it came is
/// forwarded spelled plainly too; none of [`NEVER_ON_ONE_PAGE`] is ever forwarded, however
/// spelled; and `Target.attachToTarget` passes only for the credential's page.
#[test]
fn guard_one_page() {
    let (_dir, rules) = rules();
    let scope = Scope::Viewer {
        page: Some(PAGE.to_owned()),
    };
    let forwarded = |m: &[u8]| judge_in(m, &rules, &scope) == Verdict::Forward;
    fuzz::run("guard_one_page", messages(&rules), |m| {
        let verdict = judge_in(&m, &rules, &scope);
        if let Verdict::Rewrite(p) = &verdict {
            prop_assert!(forwarded(p));
        }
        let passes = matches!(verdict, Verdict::Forward | Verdict::Rewrite(_));
        let Ok(v @ Value::Object(_)) = serde_json::from_slice::<Value>(&m) else {
            return Ok(());
        };
        if verdict == Verdict::Forward {
            prop_assert!(
                forwarded(&serde_json::to_vec(&v).unwrap()),
                "{} forwarded, but spelled plainly it is not",
                String::from_utf8_lossy(&m)
            );
        }
        let method = v["method"].as_str().unwrap_or("");
        prop_assert!(
            !(passes && NEVER_ON_ONE_PAGE.contains(&method)),
            "{} passes on a one-page socket",
            String::from_utf8_lossy(&m)
        );
        if passes && method == "Target.attachToTarget" {
            prop_assert_eq!(v["params"]["targetId"].as_str(), Some(PAGE));
        }
        Ok(())
    });
    // The other page is named in the values: attaching to it is refused.
    let attach = format!(
        r#"{{"id":1,"method":"Target.attachToTarget","params":{{"targetId":"{OTHER_PAGE}"}}}}"#
    );
    assert!(!forwarded(attach.as_bytes()));
}

/// One WebSocket frame from the client.
#[derive(Debug, Clone)]
struct Frame {
    fin: bool,
    opcode: u8,
    payload: Vec<u8>,
    mask: Option<[u8; 4]>,
    /// Length written in the 16-bit (1) or 64-bit (2) form whatever it is.
    wide: u8,
}

impl Frame {
    fn bytes(&self) -> Vec<u8> {
        let mut f = vec![(if self.fin { 0x80 } else { 0 }) | self.opcode];
        let bit = if self.mask.is_some() { 0x80 } else { 0 };
        let n = self.payload.len();
        match (self.wide, n) {
            (0, n) if n < 126 => f.push(bit | n as u8),
            (0 | 1, n) if n <= 0xffff => {
                f.push(bit | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            (_, n) => {
                f.push(bit | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        match self.mask {
            Some(m) => {
                f.extend_from_slice(&m);
                f.extend(self.payload.iter().enumerate().map(|(i, b)| b ^ m[i & 3]));
            }
            None => f.extend_from_slice(&self.payload),
        }
        f
    }
}

/// A frame parsed back: fin, opcode and unmasked payload.
type Parsed = (bool, u8, Vec<u8>);

/// Frames parsed back from bytes: each whole frame, and the opcode of a last frame cut short,
/// if any.
fn parse_frames(mut b: &[u8]) -> (Vec<Parsed>, Option<u8>) {
    let mut out = Vec::new();
    while !b.is_empty() {
        let opcode = b[0] & 0x0f;
        let Some(&b1) = b.get(1) else {
            return (out, Some(opcode));
        };
        let (len, mut at) = match b1 & 0x7f {
            126 if b.len() >= 4 => (u64::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() >= 10 => (u64::from_be_bytes(b[2..10].try_into().unwrap()), 10),
            126 | 127 => return (out, Some(opcode)),
            n => (u64::from(n), 2),
        };
        let mask = if b1 & 0x80 != 0 {
            let Some(m) = b.get(at..at + 4) else {
                return (out, Some(opcode));
            };
            at += 4;
            Some([m[0], m[1], m[2], m[3]])
        } else {
            None
        };
        if ((b.len() - at) as u64) < len {
            return (out, Some(opcode));
        }
        let end = at + len as usize;
        let payload = b[at..end]
            .iter()
            .enumerate()
            .map(|(i, x)| mask.map_or(*x, |m| x ^ m[i & 3]))
            .collect();
        out.push((b[0] & 0x80 != 0, opcode, payload));
        b = &b[end..];
    }
    (out, None)
}

/// Feeds `stream` in `cuts` pieces; what went on to Chrome.
fn feed(insp: &mut Inspector, stream: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut forwarded = Vec::new();
    for piece in pieces(stream, cuts) {
        let mut out = Vec::new();
        insp.feed(piece, &mut out);
        for s in out {
            match s {
                Segment::Input(r) => forwarded.extend_from_slice(&piece[r]),
                Segment::Owned(o) => forwarded.extend_from_slice(&o),
            }
        }
        let _ = insp.take_replies();
    }
    forwarded
}

/// The text messages in forwarded frames (control frames may come between fragments).
fn text_messages(frames: &[Parsed]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for (fin, opcode, payload) in frames {
        match (opcode, open.as_mut()) {
            (8..=15, _) => continue,
            (1, None) => open = Some(payload.clone()),
            (0, Some(m)) => m.extend_from_slice(payload),
            _ => return Err(format!("frame {opcode} out of order forwarded")),
        }
        if *fin {
            out.extend(open.take());
        }
    }
    match open {
        Some(_) => Err("part of a message forwarded".into()),
        None => Ok(out),
    }
}

/// A client's message as frames: text split into fragments (controls between them), or a
/// ping or pong.
fn client_message(rules: &FileRules) -> impl Strategy<Value = (Vec<u8>, Vec<Frame>)> + use<> {
    let mask = prop::option::of(any::<[u8; 4]>());
    let control = (
        prop::sample::select(vec![0x9u8, 0xA]),
        prop::collection::vec(any::<u8>(), 0..8),
        mask.clone(),
    )
        .prop_map(|(opcode, payload, mask)| Frame {
            fin: true,
            opcode,
            payload,
            mask,
            wide: 0,
        });
    let text = (
        messages(rules),
        prop::collection::vec((any::<usize>(), prop::option::of(control.clone())), 0..3),
        mask,
        0u8..3,
    )
        .prop_map(|(m, cuts, mask, wide)| {
            let mut at: Vec<usize> = cuts.iter().map(|(c, _)| c % (m.len() + 1)).collect();
            at.sort_unstable();
            let parts = pieces(&m, &at);
            let mut frames = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                frames.push(Frame {
                    fin: i + 1 == parts.len(),
                    opcode: if i == 0 { 1 } else { 0 },
                    payload: part.to_vec(),
                    mask,
                    wide,
                });
                if let Some(Some(c)) = cuts.get(i).map(|(_, c)| c)
                    && i + 1 < parts.len()
                {
                    frames.push(c.clone());
                }
            }
            (m, frames)
        });
    prop_oneof![
        4 => text,
        1 => control.prop_map(|c| (Vec::new(), vec![c])),
    ]
}

/// The inspector on well-formed streams of client messages (commands of [`messages`], in
/// fragments with pings and pongs between them), split at random points: exactly the text
/// messages the guard forwards reach Chrome, as they came or as rewritten, in order; a
/// refused, withheld or unreadable message forwards not one byte (an unreadable one ends the
/// connection); and no part of a held message is forwarded before the whole of it is judged.
#[test]
fn inspector_messages() {
    let (_dir, rules) = rules();
    let rules = Arc::new(rules);
    let streams = prop::collection::vec(client_message(&rules), 1..6).prop_flat_map(|msgs| {
        let bytes: Vec<u8> = msgs
            .iter()
            .flat_map(|(_, f)| f)
            .flat_map(Frame::bytes)
            .collect();
        (Just(msgs), fuzz::split(bytes))
    });
    fuzz::run("inspector_messages", streams, |(msgs, (stream, cuts))| {
        let mut insp = Inspector::new(rules.clone());
        let forwarded = feed(&mut insp, &stream, &cuts);
        let mut expected = Vec::new();
        let mut unreadable = false;
        for (m, frames) in &msgs {
            if frames[0].opcode != 1 {
                continue;
            }
            match judge(m, &rules) {
                Verdict::Forward => expected.push(m.clone()),
                Verdict::Rewrite(p) => expected.push(p),
                Verdict::Unreadable => {
                    unreadable = true;
                    break;
                }
                Verdict::Refuse(_) | Verdict::BrowserClose | Verdict::Handoff(_) => {}
            }
        }
        let (frames, cut) = parse_frames(&forwarded);
        prop_assert_eq!(cut, None);
        let got = text_messages(&frames).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got, expected);
        prop_assert_eq!(insp.fatal().is_some(), unreadable);
        Ok(())
    });
}

/// The inspector on any bytes (random frames of any opcode, lengths declared up to 2^64 - 1,
/// and random bytes), split at random points: never a panic; memory bounded (nothing is
/// allocated by a declared length: a frame declaring more than the limit ends the connection at
/// its header, and nothing more goes out than came in); what is forwarded is whole frames,
/// never a part of a text message nor a binary one, each text message one the guard forwards
/// (an allocation by a declared length of up to 2^64 - 1 would abort the run).
#[test]
fn inspector_bytes() {
    let (_dir, rules) = rules();
    let rules = Arc::new(rules);
    let frame = (
        any::<bool>(),
        prop_oneof![3 => 0u8..3, 1 => 0u8..16],
        prop::collection::vec(any::<u8>(), 0..40),
        prop::option::of(any::<[u8; 4]>()),
        0u8..3,
        prop::option::of(prop_oneof![
            Just(u64::MAX),
            Just(1u64 << 63),
            any::<u64>(),
            0u64..300
        ]),
    )
        .prop_map(|(fin, opcode, payload, mask, wide, lie)| {
            let mut b = Frame {
                fin,
                opcode,
                payload,
                mask,
                wide,
            }
            .bytes();
            if let Some(n) = lie {
                // The declared length replaced by `n` in the 64-bit form.
                let body = b.split_off(
                    2 + match b[1] & 0x7f {
                        126 => 2,
                        127 => 8,
                        _ => 0,
                    },
                );
                b[1] = (b[1] & 0x80) | 127;
                b.extend_from_slice(&n.to_be_bytes());
                b.extend(body);
            }
            b
        });
    let chunk = prop_oneof![
        4 => frame,
        1 => prop::collection::vec(any::<u8>(), 0..32),
    ];
    let streams =
        prop::collection::vec(chunk, 0..8).prop_flat_map(|chunks| fuzz::split(chunks.concat()));
    fuzz::run("inspector_bytes", streams, |(stream, cuts)| {
        let mut insp = Inspector::new(rules.clone());
        let forwarded = feed(&mut insp, &stream, &cuts);
        let (frames, cut) = parse_frames(&forwarded);
        if let Some(opcode) = cut {
            prop_assert!(opcode & 0x8 != 0, "a cut data frame forwarded");
        }
        prop_assert!(
            frames.iter().all(|(_, op, _)| *op != 2),
            "a binary frame forwarded"
        );
        for m in text_messages(&frames).map_err(TestCaseError::fail)? {
            prop_assert!(forwarded_as_is(&m, &rules));
        }
        // Held frames go on as they came: nothing is added to a stream without commands.
        prop_assert!(forwarded.len() <= stream.len());
        Ok(())
    });
}

/// Found by [`inspector_bytes`]: a text frame declaring 2^64 - 1 bytes overflowed the end of
/// the fast path's message (a panic in debug builds, the tests' and the local platform's).
/// It ends the connection at its header, forwarding nothing.
#[test]
fn a_frame_declaring_the_largest_length_ends_the_connection() {
    for first in [0x81, 0x01, 0x00] {
        let mut stream = vec![first, 127];
        stream.extend_from_slice(&u64::MAX.to_be_bytes());
        let mut insp = Inspector::default();
        assert!(feed(&mut insp, &stream, &[]).is_empty(), "{first:#x}");
        assert!(insp.fatal().is_some(), "{first:#x}");
    }
}

/// Found by [`inspector_bytes`]: a continuation frame declaring 2^64 - 1 bytes while a message
/// is held overflowed the held message's length (a panic in debug builds). The message is too
/// large: the connection ends and nothing of it is forwarded. (The fast path's overflow, above,
/// came first when the header was whole in one read.)
#[test]
fn a_continuation_declaring_the_largest_length_ends_the_connection() {
    let start = Frame {
        fin: false,
        opcode: 1,
        payload: br#"{"id":1,"#.to_vec(),
        mask: Some([1, 2, 3, 4]),
        wide: 0,
    };
    let mut stream = start.bytes();
    stream.extend_from_slice(&[0x80, 0xff]);
    stream.extend_from_slice(&u64::MAX.to_be_bytes());
    stream.extend_from_slice(&[0; 4]);
    // Whole in one read, and with the header cut (read from the inspector's header buffer).
    for cuts in [vec![], vec![start.bytes().len() + 1]] {
        let mut insp = Inspector::default();
        assert!(feed(&mut insp, &stream, &cuts).is_empty(), "{cuts:?}");
        assert_eq!(insp.fatal(), Some(Fatal::TooLarge), "{cuts:?}");
    }
}
