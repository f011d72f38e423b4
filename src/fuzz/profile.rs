//! Profile archives ([`crate::profile::unpack_gz`], [`crate::profile::unpack_tar`]) as a
//! store hands them back: anything a session, or someone with write access to the bucket,
//! put there.

use std::collections::HashSet;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use tar::EntryType;
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, mutated};
use wallcrawler_testkit::tar::raw_tar;

use crate::profile::{ArchiveLimits, unpack_gz, unpack_tar};

const LIMITS: ArchiveLimits = ArchiveLimits {
    max_bytes: 1 << 16,
    max_entries: 64,
};

/// Names and link targets built from the pieces hostile archives use (at most 100 bytes, a
/// GNU header's name field).
fn hostile_path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "..",
        ".",
        "/",
        "a",
        "Default",
        "x",
        "canary",
        "keep.txt",
        "SingletonLock",
        "//",
        "../canary/keep.txt",
        "/tmp",
        "\u{0}",
        "Local State",
        "x/../..",
    ]);
    prop::collection::vec(piece, 1..6).prop_map(|p| {
        let mut s = p.concat();
        s.truncate(100);
        while !s.is_char_boundary(s.len()) {
            s.pop();
        }
        s
    })
}

/// An entry of [`raw_tar`]: name, type, data and link target.
type Entry = (String, EntryType, Vec<u8>, Option<String>);

fn entry() -> impl Strategy<Value = Entry> {
    let kind = prop_oneof![
        prop::sample::select(vec![
            EntryType::Regular,
            EntryType::Directory,
            EntryType::Symlink,
            EntryType::Link,
            EntryType::Char,
            EntryType::Fifo,
            EntryType::GNULongName,
            EntryType::GNULongLink,
            EntryType::XHeader,
            EntryType::XGlobalHeader,
        ]),
        any::<u8>().prop_map(EntryType::new),
    ];
    let data = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        Just(b"../../canary/evil\0".to_vec()),
        Just(b"23 path=../canary/evil\n".to_vec()),
        Just(b"26 linkpath=/etc/passwd\n\n".to_vec()),
        Just(b"99999999999 path=x\n".to_vec()),
    ];
    (hostile_path(), kind, data, prop::option::of(hostile_path()))
}

fn tar_of(entries: &[Entry]) -> Vec<u8> {
    let raw: Vec<_> = entries
        .iter()
        .map(|(n, k, d, l)| (n.as_str(), *k, d.as_slice(), l.as_deref()))
        .collect();
    raw_tar(&raw)
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Checks what an unpack left: the canary beside the profile untouched (one link to its
/// file, its content the same, nothing added), and in the profile only folders and plain
/// files within the limits.
fn harmless(root: &Path) -> Result<(), TestCaseError> {
    let mut top: Vec<_> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    top.sort();
    prop_assert!(
        top.len() <= 2 && top.iter().all(|n| n == "canary" || n == "profile"),
        "{top:?}"
    );
    let canary: Vec<_> = fs::read_dir(root.join("canary")).unwrap().collect();
    prop_assert_eq!(canary.len(), 1);
    let keep = root.join("canary/keep.txt");
    prop_assert_eq!(fs::symlink_metadata(&keep).unwrap().nlink(), 1);
    prop_assert_eq!(fs::read(&keep).unwrap(), b"untouched");
    let mut stack = vec![root.join("profile")];
    let (mut bytes, mut entries, mut inodes) = (0, 0, HashSet::new());
    while let Some(dir) = stack.pop() {
        let Ok(list) = fs::read_dir(&dir) else {
            continue;
        };
        for e in list {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            entries += 1;
            if m.is_dir() {
                stack.push(e.path());
            } else {
                prop_assert!(m.is_file(), "{} is not a plain file", e.path().display());
                if inodes.insert(m.ino()) {
                    bytes += m.len();
                }
            }
        }
    }
    prop_assert!(bytes <= LIMITS.max_bytes);
    prop_assert!(entries <= 2 * LIMITS.max_entries, "{entries} entries");
    Ok(())
}

/// A fresh root with a canary folder beside where the profile goes.
fn setup() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    fs::create_dir(root.path().join("canary")).unwrap();
    fs::write(root.path().join("canary/keep.txt"), "untouched").unwrap();
    root
}

/// Tar and tar.gz archives of hostile entries (traversal and absolute names, links out,
/// special files, long-name and PAX headers naming other paths, entries of any type byte),
/// and those archives mutated as bytes: never a panic; nothing outside the profile folder is
/// written or linked to; inside it only folders and plain files, within the byte limit.
#[test]
fn profile_archive() {
    let archives = prop::collection::vec(entry(), 1..5).prop_map(|e| tar_of(&e));
    let seeds = vec![
        tar_of(&[(
            "../canary/evil.txt".into(),
            EntryType::Regular,
            b"x".to_vec(),
            None,
        )]),
        tar_of(&[
            ("x".into(), EntryType::Symlink, vec![], Some(".".into())),
            (
                "evil".into(),
                EntryType::Symlink,
                vec![],
                Some("../x/x/x/x/x/../../../../../etc/passwd".into()),
            ),
        ]),
        tar_of(&[(
            "hl".into(),
            EntryType::Link,
            vec![],
            Some("../canary/keep.txt".into()),
        )]),
        tar_of(&[
            ("a".into(), EntryType::Regular, b"abc".to_vec(), None),
            ("b".into(), EntryType::Link, vec![], Some("a".into())),
            (
                "SingletonLock".into(),
                EntryType::Symlink,
                vec![],
                Some("h".into()),
            ),
        ]),
    ];
    let mutated_tars = mutated(seeds.clone(), 8);
    let cases = prop_oneof![
        2 => (archives, any::<bool>()).prop_map(|(t, z)| (if z { gz(&t) } else { t }, z)),
        1 => (mutated_tars.clone(), Just(false)),
        1 => (mutated(seeds.iter().map(|t| gz(t)).collect(), 8), Just(true)),
        1 => (mutated_tars.prop_map(|t| gz(&t)), Just(true)),
    ];
    fuzz::run("profile_archive", cases, |(bytes, zipped)| {
        let root = setup();
        let profile = root.path().join("profile");
        let _ = if zipped {
            unpack_gz(&bytes[..], &profile, LIMITS)
        } else {
            unpack_tar(&bytes[..], &profile, LIMITS)
        };
        harmless(root.path())
    });
}
