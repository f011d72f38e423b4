//! Unpacking an extension archive: into a new folder only, the one top-level folder left out,
//! nothing written for a refused archive.

use wallcrawler_contract::extension_archive::ArchiveError;
use wallcrawler_local::extension_unpack::{UnpackError, unpack};

use crate::fuzz::{MANIFEST, entries, zip_of};

#[test]
fn unpack_writes_the_checked_entries_into_a_new_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ext");
    let packed = zip_of(&entries(&[
        ("mark/", b""),
        ("mark/manifest.json", MANIFEST.as_bytes()),
        ("mark/js/a.js", b"1"),
    ]));
    let root = unpack(&packed, &dest).unwrap();
    assert_eq!(root, dest, "the one top-level folder is left out");
    assert_eq!(std::fs::read(root.join("js/a.js")).unwrap(), b"1");
    assert!(root.join("manifest.json").is_file() && !dest.join("mark").exists());
    // The folder is new: unpacking into it again is refused before anything is written.
    assert!(matches!(
        unpack(&packed, &dest),
        Err(UnpackError::Write { path, .. }) if path == dest
    ));
    let other = tmp.path().join("slip");
    let slip = zip_of(&entries(&[
        ("manifest.json", MANIFEST.as_bytes()),
        ("../x", b"x"),
    ]));
    assert!(matches!(
        unpack(&slip, &other),
        Err(UnpackError::Refused(ArchiveError::Escapes(n))) if n == "../x"
    ));
    assert!(!other.exists() && !tmp.path().join("x").exists());
}
