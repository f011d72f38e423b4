//! Fuzz targets for the control plane's parsers of hostile input (`wallcrawler_testkit::fuzz`
//! runs them: a few cases under `cargo test`, `FUZZ_SECONDS` each under `scripts/fuzz.sh`),
//! each seeded with the hostile cases of the parser's own unit tests: the metadata query
//! (`q`), upload names, and the multipart bodies uploads and extensions come in. Every target
//! checks at least that the parser never panics and answers in bounded time and memory.

use std::path::{Component, Path};

use axum::body::Body;
use axum::extract::{FromRequest as _, Multipart};
use wallcrawler_contract::storage::{key_segment, upload_key, upload_name_problem};
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes, hostile_text};

use crate::error::ApiError;
use crate::extensions::file_part;
use crate::metadata::{MAX_DEPTH, MAX_QUERY_CHARS, MetadataQuery, QueryError};

/// `q` written back: the grammar's encoder (quotes and backslashes escaped).
fn encode(m: &MetadataQuery) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let path: String = m.path.iter().map(|p| format!("[{}]", quote(p))).collect();
    format!("user_metadata{path}:{}", quote(&m.value))
}

/// Strings of the characters that matter to the grammar, and any others.
fn grammar_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(vec!['\'', '\\', '[', ']', ':', ' ', 'a', 'é', '\u{0}']),
            any::<char>(),
        ],
        0..12,
    )
    .prop_map(|c| c.into_iter().collect())
}

/// The metadata query: random and mutated `q`s (the unit tests' examples and refusals) never
/// panic; a refusal says a position within the query; what parses has 1 to 16 path segments
/// and reads the same written back (parse → encode → parse); and any query written by the
/// encoder parses to itself (encode → parse).
#[test]
fn metadata_query() {
    let seeds = [
        "user_metadata['order']['status']:'shipped'",
        r"user_metadata['it\'s']['a\\b']:''",
        "user_metadata['k:]']:'a:b][c'",
        "user_metadata['env']:'staging",
        "user_metadata[env]:'x'",
        r"user_metadata['e\nv']:'x'",
        "user_metadata['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']['k']:'v'",
    ];
    let written = (
        prop::collection::vec(grammar_text(), 1..=MAX_DEPTH),
        grammar_text(),
    )
        .prop_map(|(path, value)| encode(&MetadataQuery { path, value }));
    fuzz::run(
        "metadata_query",
        prop_oneof![hostile_text(&seeds, 80), written],
        |q| {
            match MetadataQuery::parse(&q) {
                Ok(m) => {
                    prop_assert!((1..=MAX_DEPTH).contains(&m.path.len()));
                    prop_assert_eq!(MetadataQuery::parse(&encode(&m)), Ok(m.clone()));
                    if q.starts_with("user_metadata[") && !q.contains(['\\']) {
                        prop_assert_eq!(encode(&m), q);
                    }
                }
                Err(QueryError::Malformed { at, .. }) => {
                    prop_assert!(at >= 1 && at <= q.chars().count() + 1, "at {}", at);
                }
                Err(QueryError::TooLong) => prop_assert!(q.chars().count() > MAX_QUERY_CHARS),
                Err(QueryError::TooDeep) => {}
            }
            Ok(())
        },
    );
}

/// `key_segment` undone: `_XX` back to its byte.
fn unescape(segment: &str) -> Option<String> {
    let b = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'_' {
            out.push(u8::from_str_radix(segment.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Upload names: random and mutated names (the unit tests' refusals: empty, `.`, `..`,
/// separators, control characters, too long) never panic; a name taken is one path component
/// (joined to the uploads folder it names a file directly in it), and its key is one segment
/// of safe bytes under the session's uploads prefix that reads back as the name.
#[test]
fn upload_name() {
    let seeds = [
        "report 2026.csv",
        ".env",
        "",
        "..",
        ".",
        "a/b",
        "a\\b",
        "../../etc/passwd",
        "a\0b",
        "a\nb",
        "\u{202e}gpj.exe",
        "%2e%2e",
    ];
    let long = "x".repeat(256);
    let mut seeds = seeds.to_vec();
    seeds.push(&long);
    let prefix = "files/proj_1/sess_1/uploads/";
    fuzz::run("upload_name", hostile_text(&seeds, 300), |name| {
        if upload_name_problem(&name).is_some() {
            return Ok(());
        }
        let joined = Path::new("/up").join(&name);
        prop_assert_eq!(joined.parent(), Some(Path::new("/up")));
        let parts: Vec<_> = Path::new(&name).components().collect();
        prop_assert!(matches!(parts[..], [Component::Normal(_)]), "{:?}", parts);
        let key = upload_key("proj_1", "sess_1", &name);
        let segment = key.strip_prefix(prefix).unwrap();
        prop_assert!(segment != "." && segment != "..");
        prop_assert!(
            segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
        prop_assert_eq!(segment, key_segment(&name));
        prop_assert_eq!(unescape(segment), Some(name));
        Ok(())
    });
}

/// A multipart body's part: its headers (as given) and content.
fn part(headers: &str, content: &[u8]) -> Vec<u8> {
    let mut p = format!("--XyZ\r\n{headers}\r\n\r\n").into_bytes();
    p.extend_from_slice(content);
    p.extend_from_slice(b"\r\n");
    p
}

fn too_large() -> ApiError {
    ApiError::bad_request("too large".to_owned())
}

/// Multipart bodies (an upload's, an extension's): random and mutated bodies around the hostile
/// parts of the API tests (file names with traversal, quotes, control characters, no file
/// part, parts over the limit, a missing end) never panic; a file taken is within the limit,
/// and its name is taken only when it is one path component.
#[test]
fn multipart_upload() {
    let file = "Content-Disposition: form-data; name=\"file\"; filename=";
    let seeds: Vec<Vec<u8>> = vec![
        [
            part(&format!("{file}\"a.txt\""), b"abc"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part(&format!("{file}\"../../etc/passwd\""), b"x"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part(&format!("{file}\"a\\\"b\\\\c\""), b"x"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part(&format!("{file}\"a\r\nb\""), b"x"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part(&format!("{file}*=UTF-8''%2e%2e%2fx"), b"x"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part("Content-Disposition: form-data; name=\"other\"", b"x"),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        [
            part(&format!("{file}\"big\""), &[7; 80]),
            b"--XyZ--\r\n".to_vec(),
        ]
        .concat(),
        part(&format!("{file}\"cut\""), b"no end"),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    fuzz::run("multipart_upload", hostile_bytes(seeds, 200), |body| {
        let req = axum::http::Request::builder()
            .method("POST")
            .header("content-type", "multipart/form-data; boundary=XyZ")
            .body(Body::from(body))
            .unwrap();
        let taken = rt.block_on(async {
            let form = Multipart::from_request(req, &()).await.ok()?;
            file_part(form, 64, too_large, "the file").await.ok()
        });
        if let Some((name, bytes)) = taken {
            prop_assert!(bytes.len() <= 64);
            if let Some(n) = name
                && upload_name_problem(&n).is_none()
            {
                prop_assert_eq!(Path::new(&n).components().count(), 1, "{:?}", n);
            }
        }
        Ok(())
    });
}
