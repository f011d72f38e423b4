//! Fuzz targets for what the local crate reads from hostile input (`wallcrawler_testkit::fuzz`
//! runs them: a few cases under `cargo test`, `FUZZ_SECONDS` each under `scripts/fuzz.sh`).

use std::io::{Cursor, Write as _};
use std::path::Path;

use wallcrawler_contract::extension_archive::{self, MAX_ARCHIVE_BYTES};
use wallcrawler_local::extension_unpack;
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes};
use zip::write::SimpleFileOptions;

pub(crate) const MANIFEST: &str = r#"{"manifest_version":3,"name":"Mark","version":"1.0"}"#;

/// A zip of `(name, bytes)` entries (a name ending in `/` is a folder; one starting with `@`
/// a symbolic link to `bytes`).
pub(crate) fn zip_of(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default();
    for (name, bytes) in entries {
        if let Some(link) = name.strip_prefix('@') {
            let _ = w.add_symlink(link, String::from_utf8_lossy(bytes), o);
        } else if name.ends_with('/') {
            let _ = w.add_directory(name.as_str(), o);
        } else if w.start_file(name.as_str(), o).is_ok() {
            w.write_all(bytes).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

pub(crate) fn entries(list: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(n, b)| ((*n).to_owned(), b.to_vec()))
        .collect()
}

/// Entry names built from the pieces hostile archives use.
fn hostile_name() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "..",
        ".",
        "",
        "/",
        "\\",
        "C:",
        "a",
        "js",
        "manifest.json",
        "\0",
        "~",
        "x/../..",
        "//",
        "%2e%2e",
        "..\\..",
        "\u{2215}",
        "/etc/passwd",
        "@",
    ]);
    prop::collection::vec(piece, 1..6).prop_map(|p| p.concat())
}

/// Every path under `root` (links not followed), relative to it.
fn tree(root: &Path) -> Vec<(std::path::PathBuf, std::fs::FileType)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path().strip_prefix(root).unwrap().to_owned(), t));
        }
    }
    out
}

/// Unpacks `bytes` into a fresh folder and checks that nothing was written beside it, that
/// only folders and files were made, and that a refused archive is refused by `check` too.
fn unpack_stays_inside(bytes: &[u8]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ext");
    let checked = extension_archive::check(bytes);
    let unpacked = extension_unpack::unpack(bytes, &dest);
    if checked.is_err() {
        prop_assert!(unpacked.is_err(), "unpacked what check refuses");
    }
    for (path, kind) in tree(tmp.path()) {
        prop_assert!(
            path.starts_with("ext"),
            "written outside the target folder: {}",
            path.display()
        );
        prop_assert!(
            kind.is_dir() || kind.is_file(),
            "{} is a link",
            path.display()
        );
    }
    if let Ok(root) = unpacked {
        prop_assert!(root.join("manifest.json").is_file());
    }
    Ok(())
}

/// Extension archives: a zip of hostile entry names (traversal, absolute, drive letters,
/// links, empty components) and random or mutated zips never panic; unpacking writes nothing
/// outside its folder, makes no link, and writes only what `check` passes; over
/// [`MAX_ARCHIVE_BYTES`] is refused unread.
#[test]
fn extension_archive() {
    let named = prop::collection::vec(
        (
            prop_oneof![
                hostile_name(),
                Just("manifest.json".to_owned()),
                Just("mark/manifest.json".to_owned())
            ],
            prop_oneof![
                Just(MANIFEST.as_bytes().to_vec()),
                prop::collection::vec(any::<u8>(), 0..16)
            ],
        ),
        1..6,
    )
    .prop_map(|e| zip_of(&e));
    let m: (&str, &[u8]) = ("manifest.json", MANIFEST.as_bytes());
    let seeds = vec![
        zip_of(&entries(&[m, ("a.js", b"1")])),
        zip_of(&entries(&[
            ("mark/", b""),
            ("mark/manifest.json", MANIFEST.as_bytes()),
            ("mark/js/a.js", b"1"),
        ])),
        zip_of(&entries(&[m, ("../../evil.sh", b"x")])),
        zip_of(&entries(&[m, ("/etc/passwd", b"x")])),
        zip_of(&entries(&[m, ("@key", b"/work/data/local.json")])),
        zip_of(&entries(&[m, ("a//b", b"x")])),
        zip_of(&entries(&[("manifest.json", b"{\"manifest_version\":2}")])),
    ];
    fuzz::run(
        "extension_archive",
        prop_oneof![named, hostile_bytes(seeds, 512)],
        |bytes| unpack_stays_inside(&bytes),
    );
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ext");
    assert!(extension_unpack::unpack(&vec![0; MAX_ARCHIVE_BYTES + 1], &dest).is_err());
    assert!(!dest.exists());
}
