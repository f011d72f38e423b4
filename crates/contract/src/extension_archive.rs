//! The check an extension archive passes before it is kept: a zip of bounded size and entry
//! count whose entries expand within a bound (counted while decompressing: the sizes the
//! central directory claims are never trusted), with no absolute or `..` paths and no links,
//! and a `manifest.json` Chrome loads — at the root, or in the one top-level folder Chrome's
//! packer makes. The local crate's `extension_unpack` writes an archive that passes into a new
//! directory (a controller's, before it loads the extension into Chrome): the archive came from
//! our own store, but it is checked again there, as hostile.

use std::io::{Cursor, Read};

use serde_json::Value;

/// The largest archive the API takes in one request. API Gateway caps a body at 10 MB and
/// Lambda an invocation at 6 MB, and a binary body reaches Lambda base64-encoded (4/3 of its
/// size) inside the event's JSON: 4 MiB (5.6 MB encoded, with room for the headers) is what
/// every deployment passes.
pub const MAX_ARCHIVE_BYTES: usize = 4 * 1024 * 1024;
/// The most the entries may expand to, all together.
pub const MAX_EXPANDED_BYTES: u64 = 64 * 1024 * 1024;
/// The most entries (files and folders) an archive may hold.
pub const MAX_ENTRIES: usize = 2_000;
/// The largest `manifest.json` read.
const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;
/// The `manifest_version` Chrome loads.
const MANIFEST_VERSION: u64 = 3;

/// Why an archive was refused; the message is the answer's (a 400), naming the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    /// Not a zip, or a damaged one (the zip reader's reason).
    #[error("the extension archive is not a valid zip: {0}")]
    NotZip(String),
    /// More than [`MAX_ENTRIES`] entries.
    #[error("the extension archive has {0} entries; at most {MAX_ENTRIES} are allowed")]
    TooManyEntries(usize),
    /// The entries expand beyond the budget ([`MAX_EXPANDED_BYTES`]).
    #[error("the extension archive expands to more than {0} bytes")]
    TooLarge(u64),
    /// An entry's name is absolute (`/x`, `\x`, `C:x`).
    #[error("entry {0:?} has an absolute path")]
    Absolute(String),
    /// An entry's name has a `..` component (zip-slip).
    #[error("entry {0:?} leaves the extension's folder (a `..` component)")]
    Escapes(String),
    /// An entry's name is empty, has a NUL or an empty or `.` component.
    #[error("entry {0:?} has a name that is not a plain relative path")]
    BadName(String),
    /// An entry is a symbolic link.
    #[error("entry {0:?} is a symbolic link; links are not allowed")]
    Link(String),
    /// No `manifest.json` at the root or in a single top-level folder.
    #[error(
        "the extension archive has no manifest.json at its root (or in its one top-level folder)"
    )]
    NoManifest,
    /// The manifest is not a JSON object.
    #[error("manifest.json does not parse as a JSON object: {0}")]
    ManifestSyntax(String),
    /// The manifest parses but Chrome would not load it.
    #[error("manifest.json {0}")]
    Manifest(String),
    /// The manifest asks for access to `file://` URLs ([`check_upload`] only).
    #[error(
        "the extension's manifest asks for file access ({pattern:?} in {field}); extensions may not read the browser's disk"
    )]
    FileAccess {
        /// The match pattern, as written.
        pattern: String,
        /// Where: `host_permissions`, `content_scripts[0].matches`…
        field: String,
    },
}

/// What the check learnt of an archive that passed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The manifest's `name`.
    pub name: String,
    /// The manifest's `version`.
    pub version: String,
    /// The folder holding `manifest.json` (`""` at the root).
    pub root: String,
}

/// Checks `bytes` (at most [`MAX_ARCHIVE_BYTES`], which the caller enforces) as above.
pub fn check(bytes: &[u8]) -> Result<Checked, ArchiveError> {
    check_within(bytes, MAX_EXPANDED_BYTES).map(|(checked, _)| checked)
}

/// [`check`], and the refusal of a manifest asking for file access ([`file_access`]): what
/// the API takes. The controller's unpacking does not refuse it: the browser denies every
/// extension file access whatever its manifest says (`<all_urls>`, which the API accepts,
/// would otherwise grant it too), so the refusal here tells the client early and plainly, and
/// Chrome's denial is the guard.
pub fn check_upload(bytes: &[u8]) -> Result<Checked, ArchiveError> {
    let (checked, manifest) = check_within(bytes, MAX_EXPANDED_BYTES)?;
    match file_access(&manifest) {
        Some(refused) => Err(refused),
        None => Ok(checked),
    }
}

/// The first `file:` match pattern the manifest asks for: in `host_permissions` or
/// `optional_host_permissions`, in `permissions` or `optional_permissions` (where manifest
/// version 2 put hosts, and Chrome still reads a pattern, with a warning), or in a content
/// script's `matches`. `<all_urls>` and `*://…` are not refused: `*` stands for http and
/// https only, and `<all_urls>` reaches `file:` only with the browser's "Allow access to file
/// URLs", which the controller never grants (a common extension asks for `<all_urls>`).
pub fn file_access(manifest: &serde_json::Map<String, Value>) -> Option<ArchiveError> {
    let patterns = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut places: Vec<(String, Vec<String>)> = [
        "host_permissions",
        "optional_host_permissions",
        "permissions",
        "optional_permissions",
    ]
    .into_iter()
    .map(|field| (field.to_owned(), patterns(manifest.get(field))))
    .collect();
    if let Some(scripts) = manifest.get("content_scripts").and_then(Value::as_array) {
        for (i, script) in scripts.iter().enumerate() {
            places.push((
                format!("content_scripts[{i}].matches"),
                patterns(script.get("matches")),
            ));
        }
    }
    places.into_iter().find_map(|(field, patterns)| {
        patterns
            .into_iter()
            .find(|p| grants_files(p))
            .map(|pattern| ArchiveError::FileAccess { pattern, field })
    })
}

/// Whether a match pattern names the `file` scheme (Chrome reads schemes case-insensitively,
/// and ignores spaces around a pattern).
fn grants_files(pattern: &str) -> bool {
    pattern
        .trim()
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("file:"))
}

/// [`check`] with an expansion budget of `expanded` bytes (the tests' bombs stay small); also
/// the manifest.
fn check_within(
    bytes: &[u8],
    expanded: u64,
) -> Result<(Checked, serde_json::Map<String, Value>), ArchiveError> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| ArchiveError::NotZip(e.to_string()))?;
    if zip.len() > MAX_ENTRIES {
        return Err(ArchiveError::TooManyEntries(zip.len()));
    }
    let mut budget = expanded;
    let mut tops: Vec<String> = Vec::new();
    let mut manifests: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| ArchiveError::NotZip(e.to_string()))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let parts = checked_name(&name)?;
        if entry
            .unix_mode()
            .is_some_and(|m| m & 0o170_000 == 0o120_000)
        {
            return Err(ArchiveError::Link(name));
        }
        if !tops.contains(&parts[0]) {
            tops.push(parts[0].clone());
        }
        let is_manifest = parts.last().is_some_and(|p| p == "manifest.json") && parts.len() <= 2;
        let limit = if is_manifest {
            budget.min(MAX_MANIFEST_BYTES)
        } else {
            budget
        };
        // Read one byte past the limit: reaching it is how an over-expansion shows.
        let mut sink = Vec::new();
        let read = if is_manifest {
            (&mut entry).take(limit + 1).read_to_end(&mut sink)
        } else {
            std::io::copy(&mut (&mut entry).take(limit + 1), &mut std::io::sink())
                .map(|n| n as usize)
        }
        .map_err(|e| ArchiveError::NotZip(format!("entry {name:?}: {e}")))?;
        if read as u64 > limit {
            return Err(ArchiveError::TooLarge(expanded));
        }
        budget -= read as u64;
        if is_manifest && !entry.is_dir() {
            manifests.push((parts[..parts.len() - 1].join("/"), sink));
        }
    }
    let (root, manifest) = pick_manifest(manifests, &tops)?;
    let (name, version, manifest) = check_manifest(&manifest)?;
    Ok((
        Checked {
            name,
            version,
            root,
        },
        manifest,
    ))
}

/// The components of `name`, if it is a plain relative path (a trailing `/` marks a folder).
pub fn checked_name(name: &str) -> Result<Vec<String>, ArchiveError> {
    let bytes = name.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if name.starts_with('/') || name.starts_with('\\') || drive {
        return Err(ArchiveError::Absolute(name.to_owned()));
    }
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    let parts: Vec<&str> = trimmed.split(['/', '\\']).collect();
    if parts.contains(&"..") {
        return Err(ArchiveError::Escapes(name.to_owned()));
    }
    if trimmed.is_empty() || name.contains('\0') || parts.iter().any(|p| p.is_empty() || *p == ".")
    {
        return Err(ArchiveError::BadName(name.to_owned()));
    }
    Ok(parts.into_iter().map(str::to_owned).collect())
}

/// The manifest at the root, else the one in the single top-level folder.
fn pick_manifest(
    found: Vec<(String, Vec<u8>)>,
    tops: &[String],
) -> Result<(String, Vec<u8>), ArchiveError> {
    let mut in_folder = None;
    for (dir, bytes) in found {
        if dir.is_empty() {
            return Ok((dir, bytes));
        }
        if tops.len() == 1 && tops[0] == dir {
            in_folder = Some((dir, bytes));
        }
    }
    in_folder.ok_or(ArchiveError::NoManifest)
}

/// `name` and `version` of a manifest Chrome loads, and the manifest: an object,
/// `manifest_version` 3 (Chrome no longer loads 2), a non-empty `name`, a `version` of one to
/// four dot-separated numbers.
#[allow(clippy::type_complexity)]
fn check_manifest(
    bytes: &[u8],
) -> Result<(String, String, serde_json::Map<String, Value>), ArchiveError> {
    // Chrome accepts a UTF-8 byte-order mark before the JSON.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| ArchiveError::ManifestSyntax(e.to_string()))?;
    let Value::Object(m) = v else {
        return Err(ArchiveError::ManifestSyntax("not an object".to_owned()));
    };
    match m.get("manifest_version").and_then(Value::as_u64) {
        Some(MANIFEST_VERSION) => {}
        Some(2) => {
            return Err(ArchiveError::Manifest(
                "has manifest_version 2, which Chrome no longer loads; use 3".to_owned(),
            ));
        }
        _ => {
            return Err(ArchiveError::Manifest(
                "must have \"manifest_version\": 3".to_owned(),
            ));
        }
    }
    let name = m.get("name").and_then(Value::as_str).unwrap_or("").trim();
    if name.is_empty() {
        return Err(ArchiveError::Manifest(
            "must have a non-empty \"name\"".to_owned(),
        ));
    }
    let version = m.get("version").and_then(Value::as_str).unwrap_or("");
    let numbers: Vec<&str> = version.split('.').collect();
    let ok = numbers.len() <= 4
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        return Err(ArchiveError::Manifest(format!(
            "must have a \"version\" of one to four dot-separated numbers, got {version:?}"
        )));
    }
    let (name, version) = (name.to_owned(), version.to_owned());
    Ok((name, version, m))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::write::SimpleFileOptions;

    use super::*;

    const MANIFEST: &str = r#"{"manifest_version":3,"name":"Mark","version":"1.0"}"#;

    /// A zip of `(name, bytes)` entries, deflated.
    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, bytes) in entries {
            if name.ends_with('/') {
                w.add_directory(*name, SimpleFileOptions::default())
                    .unwrap();
            } else {
                w.start_file(*name, SimpleFileOptions::default()).unwrap();
                w.write_all(bytes).unwrap();
            }
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn a_plain_extension_passes_at_the_root_or_in_one_folder() {
        let c = check(&zip_of(&[
            ("manifest.json", MANIFEST.as_bytes()),
            ("a.js", b"1"),
        ]))
        .unwrap();
        assert_eq!(
            (c.name.as_str(), c.version.as_str(), c.root.as_str()),
            ("Mark", "1.0", "")
        );
        let packed = zip_of(&[
            ("mark/", b""),
            ("mark/manifest.json", MANIFEST.as_bytes()),
            ("mark/js/a.js", b"1"),
        ]);
        assert_eq!(check(&packed).unwrap().root, "mark");
    }

    #[test]
    fn hostile_names_and_links_are_refused_by_name() {
        let m = ("manifest.json", MANIFEST.as_bytes());
        let refused = |name: &str| check(&zip_of(&[m, (name, b"x")])).unwrap_err();
        assert_eq!(
            refused("../../evil.sh"),
            ArchiveError::Escapes("../../evil.sh".into())
        );
        assert_eq!(
            refused("js/../../x"),
            ArchiveError::Escapes("js/../../x".into())
        );
        assert_eq!(refused("..\\x"), ArchiveError::Escapes("..\\x".into()));
        assert_eq!(
            refused("/etc/passwd"),
            ArchiveError::Absolute("/etc/passwd".into())
        );
        assert_eq!(refused("C:/x"), ArchiveError::Absolute("C:/x".into()));
        assert_eq!(refused("a//b"), ArchiveError::BadName("a//b".into()));

        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        w.start_file("manifest.json", SimpleFileOptions::default())
            .unwrap();
        w.write_all(MANIFEST.as_bytes()).unwrap();
        w.add_symlink("key", "/work/data/local.json", SimpleFileOptions::default())
            .unwrap();
        let with_link = w.finish().unwrap().into_inner();
        assert_eq!(check(&with_link), Err(ArchiveError::Link("key".into())));
    }

    /// A manifest and `entries` entries of `actual` bytes of zeros each, deflated.
    fn bomb(entries: usize, actual: usize) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        w.start_file("manifest.json", SimpleFileOptions::default())
            .unwrap();
        w.write_all(MANIFEST.as_bytes()).unwrap();
        let zeros = vec![0u8; actual];
        for i in 0..entries {
            w.start_file(format!("zeros{i}"), SimpleFileOptions::default())
                .unwrap();
            w.write_all(&zeros).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn a_zip_bomb_is_refused_while_decompressing_in_bounded_time() {
        // 8 entries of 1 MiB of zeros (about 1 KiB each deflated) against a 4 MiB budget: the
        // check counts what decompresses and stops at the budget, in the fifth entry.
        let bomb = bomb(8, 1 << 20);
        assert!(
            bomb.len() < 32 * 1024,
            "a tiny archive: {} bytes",
            bomb.len()
        );
        let started = std::time::Instant::now();
        assert_eq!(
            check_within(&bomb, 4 << 20),
            Err(ArchiveError::TooLarge(4 << 20))
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(
            check_within(&bomb, 9 << 20).is_ok(),
            "within the budget it passes"
        );
    }

    #[test]
    fn a_manifest_asking_for_files_is_refused_at_upload_naming_the_pattern() {
        let refused = |manifest: &str| {
            let zip = zip_of(&[("manifest.json", manifest.as_bytes())]);
            assert!(check(&zip).is_ok(), "the controller's check takes it");
            check_upload(&zip).map(|_| ()).map_err(|e| e.to_string())
        };
        let with = |field: &str, value: &str| {
            format!(r#"{{"manifest_version":3,"name":"R","version":"1","{field}":{value}}}"#)
        };
        for (field, value, pattern, named) in [
            (
                "host_permissions",
                r#"["file:///*"]"#,
                "file:///*",
                "host_permissions",
            ),
            (
                "permissions",
                r#"["storage","file:///etc/*"]"#,
                "file:///etc/*",
                "permissions",
            ),
            (
                "optional_host_permissions",
                r#"["https://a.test/*","FILE:///*"]"#,
                "FILE:///*",
                "optional_host_permissions",
            ),
            (
                "optional_permissions",
                r#"[" file://*/*"]"#,
                " file://*/*",
                "optional_permissions",
            ),
            (
                "content_scripts",
                r#"[{"matches":["https://a.test/*"],"js":["a.js"]},{"matches":["file:///home/*"],"js":["a.js"]}]"#,
                "file:///home/*",
                "content_scripts[1].matches",
            ),
        ] {
            assert_eq!(
                refused(&with(field, value)),
                Err(format!(
                    "the extension's manifest asks for file access ({pattern:?} in {named}); extensions may not read the browser's disk"
                ))
            );
        }
        // `*` is http and https; `<all_urls>` reaches files only with a toggle never granted.
        for ok in [
            with(
                "host_permissions",
                r#"["<all_urls>","*://*/*","http://127.0.0.1/*"]"#,
            ),
            with(
                "content_scripts",
                r#"[{"matches":["<all_urls>"],"js":["a.js"]}]"#,
            ),
            with("permissions", r#"["storage",{"not":"a pattern"}]"#),
        ] {
            assert_eq!(refused(&ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn too_many_entries_and_bad_manifests_are_refused() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("f{i}")).collect();
        let mut entries: Vec<(&str, &[u8])> =
            names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        entries.push(("manifest.json", MANIFEST.as_bytes()));
        assert_eq!(
            check(&zip_of(&entries)),
            Err(ArchiveError::TooManyEntries(MAX_ENTRIES + 2))
        );
        assert_eq!(
            check(&zip_of(&[("a.js", b"1")])),
            Err(ArchiveError::NoManifest)
        );
        // Two folders: Chrome's packer makes one, so neither's manifest is the extension's.
        let two = zip_of(&[("a/manifest.json", MANIFEST.as_bytes()), ("b/x", b"")]);
        assert_eq!(check(&two), Err(ArchiveError::NoManifest));
        assert!(matches!(
            check(&zip_of(&[("manifest.json", b"{nope")])),
            Err(ArchiveError::ManifestSyntax(_))
        ));
        let v2 = br#"{"manifest_version":2,"name":"Old","version":"1"}"#;
        assert_eq!(
            check(&zip_of(&[("manifest.json", v2)]))
                .unwrap_err()
                .to_string(),
            "manifest.json has manifest_version 2, which Chrome no longer loads; use 3"
        );
        let bad_version = br#"{"manifest_version":3,"name":"X","version":"1.x"}"#;
        assert!(matches!(
            check(&zip_of(&[("manifest.json", bad_version)])),
            Err(ArchiveError::Manifest(_))
        ));
        assert!(matches!(check(b"not a zip"), Err(ArchiveError::NotZip(_))));
    }
}
