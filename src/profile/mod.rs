//! The profile archive: a gzip-compressed tar of the *contents* of Chrome's user-data-dir.
//!
//! Archives are customer-supplied and hostile until proven otherwise. Unpacking refuses
//! absolute paths, `..`, symbolic links (a profile needs none, and a link's target is resolved
//! on disk, not on paper: `x -> .` makes `x/x/../..` climb out), hard links to anything but a
//! file the archive itself wrote, device files and FIFOs; caps every decompressed byte (file
//! contents against `max_bytes`, tar headers and extension headers — GNU long names, PAX —
//! at [`MAX_EXTENSION_BYTES`] each, checked before they are read) and the entry count; never
//! follows a link on the way to a file it writes; and never writes outside the profile
//! directory. A refusal names the offending entry, shortened to [`NAME_SHOWN`] characters.
//!
//! Packing leaves out what must not travel between sessions: the `Singleton*` lock files,
//! `DevToolsActivePort`, sockets, caches, and symbolic links (which unpacking would refuse).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::telemetry::clip;

mod directory;
mod gzip;
mod pack;
mod stream;
mod unpack;
pub use directory::DirectoryArchives;
pub use pack::{PackStats, pack_gz};
pub use stream::{ProfileError, hydrate, persist_profile};
use unpack::shown;
pub use unpack::{unpack_gz, unpack_tar};

/// The most one extension header (GNU long name or long link, PAX) may hold. Its size is
/// checked before a byte of it is read; real ones hold a path of a few hundred bytes.
pub const MAX_EXTENSION_BYTES: u64 = 64 * 1024;

/// Bytes of an entry name shown in errors and logs (cut on a character boundary).
pub const NAME_SHOWN: usize = 256;

/// A tar block: every header is one, every entry's data is padded to a whole number of them.
const BLOCK: u64 = 512;

/// Limits applied while unpacking.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveLimits {
    /// Cap on the entries' decompressed file contents, in bytes, all entries together.
    pub max_bytes: u64,
    /// Cap on the number of entries.
    pub max_entries: u64,
}

/// Why an archive was refused or could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// An entry's path is absolute.
    #[error("archive entry {0:?} has an absolute path")]
    AbsolutePath(String),
    /// An entry's path contains `..`.
    #[error("archive entry {0:?} leaves the profile directory (..)")]
    ParentTraversal(String),
    /// A hard link whose target is not a regular file this archive already wrote.
    #[error("archive entry {0:?} is a link pointing outside the profile directory")]
    LinkOutside(String),
    #[error(
        "archive entry {0:?} is a symbolic link; profile archives may not contain symbolic links"
    )]
    /// A symbolic link (never allowed).
    Symlink(String),
    #[error(
        "archive has a {kind} header of {size} bytes (at most {MAX_EXTENSION_BYTES} are allowed)"
    )]
    /// An extension header larger than [`MAX_EXTENSION_BYTES`].
    ExtensionTooLarge {
        /// Which extension header (e.g. a GNU long name or PAX header).
        kind: &'static str,
        /// Its declared size in bytes.
        size: u64,
    },
    /// Writing the entry would go through a link (or onto a directory) already on disk.
    #[error("archive entry {0:?} would be written through a link")]
    ThroughLink(String),
    /// A device file or FIFO.
    #[error("archive entry {0:?} is a device file or FIFO")]
    SpecialFile(String),
    /// An entry type the unpacker does not support (e.g. GNU sparse files).
    #[error("archive entry {0:?} has an unsupported type")]
    UnsupportedType(String),
    /// The contents exceed [`ArchiveLimits::max_bytes`] (the cap).
    #[error("archive unpacks to more than {0} bytes")]
    TooLarge(u64),
    /// More entries than [`ArchiveLimits::max_entries`] (the cap).
    #[error("archive has more than {0} entries")]
    TooManyEntries(u64),
    /// The archive stream is truncated or corrupt; the text says what was wrong.
    #[error("archive is truncated or corrupt: {0}")]
    Corrupt(String),
    /// Writing into the profile directory failed.
    #[error("writing the profile failed at {path:?}")]
    Write {
        /// The path being written, as shown in errors.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Reading from the profile directory (while packing) failed.
    #[error("reading the profile failed at {path:?}")]
    Read {
        /// The path being read, as shown in errors.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// What unpacking did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnpackStats {
    /// Entries unpacked (every entry counted against [`ArchiveLimits::max_entries`]).
    pub entries: u64,
    /// Bytes of file contents written.
    pub bytes: u64,
    /// Excluded entries (e.g. `Singleton*` lock files) left out.
    pub skipped: u64,
}

/// Names never restored or saved (compared with the file name at any depth).
pub fn is_excluded_name(name: &str) -> bool {
    name.starts_with("Singleton")
        || name == "DevToolsActivePort"
        || name == "lockfile"
        || name == "LOCK"
}

/// Directories not worth carrying between sessions (caches Chrome rebuilds).
pub fn is_cache_dir(name: &str) -> bool {
    matches!(
        name,
        "Cache"
            | "Code Cache"
            | "GPUCache"
            | "GrShaderCache"
            | "ShaderCache"
            | "DawnCache"
            | "DawnGraphiteCache"
            | "DawnWebGPUCache"
            | "GraphiteDawnCache"
            | "component_crx_cache"
            | "Crashpad"
            | "BrowserMetrics"
            | "optimization_guide_model_store"
            | "Safe Browsing"
    )
}

/// Validates an entry path: relative, no `..`, no root or prefix. Returns the clean path.
pub fn safe_relative(raw: &Path) -> Result<PathBuf, ArchiveError> {
    let display = shown(raw.as_os_str().as_bytes());
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(ArchiveError::ParentTraversal(display)),
            Component::RootDir | Component::Prefix(_) => {
                return Err(ArchiveError::AbsolutePath(display));
            }
        }
    }
    Ok(out)
}

/// Why a file the controller itself reads from the profile was not read.
#[derive(Debug, thiserror::Error)]
pub enum OwnFileError {
    /// The file is a symbolic link.
    #[error("{0:?} is a symbolic link")]
    Link(String),
    /// The file is not a regular file (a directory, FIFO, device...).
    #[error("{0:?} is not a regular file")]
    NotRegular(String),
    /// The file is larger than the cap.
    #[error("{path:?} is larger than {max} bytes")]
    TooLarge {
        /// The file, as shown in errors.
        path: String,
        /// The cap in bytes.
        max: u64,
    },
    /// Opening, inspecting or reading the file failed.
    #[error("reading {path:?} failed")]
    Io {
        /// The file, as shown in errors.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// Reads a file of the profile that the controller itself uses (the saved session cookies):
/// never through a symbolic link, only a regular file, at most `max` bytes. `None` when there
/// is no such file.
pub fn read_own_file(path: &Path, max: u64) -> Result<Option<Vec<u8>>, OwnFileError> {
    let shown = || path.display().to_string();
    let io_err = |source| OwnFileError::Io {
        path: shown(),
        source,
    };
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(OwnFileError::Link(shown()));
        }
        Err(e) => return Err(io_err(e)),
    };
    let meta = file.metadata().map_err(io_err)?;
    if !meta.file_type().is_file() {
        return Err(OwnFileError::NotRegular(shown()));
    }
    let too_large = || OwnFileError::TooLarge { path: shown(), max };
    if meta.len() > max {
        return Err(too_large());
    }
    // The file may grow after the check: read one byte past the cap to notice.
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(io_err)?;
    if data.len() as u64 > max {
        return Err(too_large());
    }
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::gzip::*;
    use super::pack::*;
    use super::unpack::*;
    use super::*;
    use flate2::read::GzDecoder;
    use std::fs::{self, File};
    use std::rc::Rc;
    use tar::EntryType;

    /// A file reached through a folder swapped for a link (outside the profile) is not packed.
    #[test]
    fn a_file_reached_through_a_swapped_folder_is_not_packed() {
        let d = tempfile::tempdir().unwrap();
        let profile = fs::canonicalize(d.path()).unwrap().join("p");
        let outside = fs::canonicalize(d.path()).unwrap().join("outside");
        fs::create_dir_all(profile.join("Default")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(profile.join("Default/Prefs"), b"{}").unwrap();
        fs::write(outside.join("Prefs"), b"secret").unwrap();
        let rel = Path::new("Default/Prefs");
        let f = File::open(profile.join(rel)).unwrap();
        assert!(opened_under_root(&f, &profile.join(rel), rel));
        // The folder swapped for a link after the walk saw it.
        fs::remove_dir_all(profile.join("Default")).unwrap();
        std::os::unix::fs::symlink(&outside, profile.join("Default")).unwrap();
        let f = File::open(profile.join(rel)).unwrap();
        assert!(!opened_under_root(&f, &profile.join(rel), rel));
    }

    const LIMITS: ArchiveLimits = ArchiveLimits {
        max_bytes: 1 << 20,
        max_entries: 100,
    };

    /// Path, type, data and link target of an entry of [`raw_tar`].
    type RawEntry<'a> = (&'a str, EntryType, &'a [u8], Option<&'a str>);

    /// A tar with raw headers (the tar crate's safe builders refuse what we need to test).
    fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            {
                let name = &mut h.as_gnu_mut().unwrap().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
            }
            if let Some(l) = link {
                let ln = &mut h.as_gnu_mut().unwrap().linkname;
                ln[..l.len()].copy_from_slice(l.as_bytes());
            }
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let profile = root.path().join("profile");
        let canary = root.path().join("canary");
        fs::create_dir_all(&canary).unwrap();
        fs::write(canary.join("keep.txt"), "untouched").unwrap();
        (root, profile, canary)
    }

    fn canary_intact(canary: &Path) {
        let names: Vec<_> = fs::read_dir(canary)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("keep.txt")]);
        assert_eq!(
            fs::read_to_string(canary.join("keep.txt")).unwrap(),
            "untouched"
        );
    }

    #[test]
    fn round_trip_keeps_content_and_drops_locks_and_caches() {
        let src = tempfile::tempdir().unwrap();
        fs::create_dir_all(src.path().join("Default/Cache")).unwrap();
        fs::write(src.path().join("Default/Cookies"), b"cookies").unwrap();
        fs::write(src.path().join("Default/Cache/data_0"), b"cache").unwrap();
        fs::write(src.path().join("Local State"), b"{}").unwrap();
        fs::write(src.path().join("DevToolsActivePort"), b"9222").unwrap();
        std::os::unix::fs::symlink("host-123", src.path().join("SingletonLock")).unwrap();
        std::os::unix::fs::symlink("Cookies", src.path().join("Default/CookiesLink")).unwrap();
        let (stats, gz) = pack_gz(
            src.path(),
            Vec::new(),
            &[("wallcrawler-session-cookies.json", b"[]")],
        )
        .unwrap();
        assert_eq!(stats.bytes, 7 + 2 + 2);
        let dest = tempfile::tempdir().unwrap();
        unpack_gz(&gz[..], dest.path(), LIMITS).unwrap();
        assert_eq!(
            fs::read(dest.path().join("Default/Cookies")).unwrap(),
            b"cookies"
        );
        assert_eq!(fs::read(dest.path().join("Local State")).unwrap(), b"{}");
        assert_eq!(
            fs::read(dest.path().join("wallcrawler-session-cookies.json")).unwrap(),
            b"[]"
        );
        // Links are not carried: unpacking would refuse them.
        assert!(fs::symlink_metadata(dest.path().join("Default/CookiesLink")).is_err());
        assert!(!dest.path().join("DevToolsActivePort").exists());
        assert!(fs::symlink_metadata(dest.path().join("SingletonLock")).is_err());
        assert!(!dest.path().join("Default/Cache").exists());
    }

    #[test]
    fn parent_traversal_is_refused() {
        let (_r, profile, canary) = setup();
        let tar = raw_tar(&[("../canary/evil.txt", EntryType::Regular, b"x", None)]);
        let e = unpack_tar(&tar[..], &profile, LIMITS).unwrap_err();
        assert!(matches!(e, ArchiveError::ParentTraversal(_)), "{e}");
        canary_intact(&canary);
    }

    #[test]
    fn absolute_paths_are_refused() {
        let (_r, profile, canary) = setup();
        let p = format!("{}/evil.txt", canary.display());
        let tar = raw_tar(&[(&p, EntryType::Regular, b"x", None)]);
        let e = unpack_tar(&tar[..], &profile, LIMITS).unwrap_err();
        assert!(matches!(e, ArchiveError::AbsolutePath(_)), "{e}");
        canary_intact(&canary);
    }

    /// Each archive with a symbolic link is refused, wherever the link points; nothing outside
    /// the profile is touched.
    #[test]
    fn symbolic_links_are_refused() {
        let (_r, profile, canary) = setup();
        let c = canary.display().to_string();
        let chain = "../x/x/x/x/x/x/x/x/x/x/x/x/../../../../../../../../../../../../etc/passwd";
        let cases: Vec<Vec<RawEntry<'_>>> = vec![
            // `x -> .` makes the next link climb out on disk, though not on paper.
            vec![
                ("x", EntryType::Symlink, b"", Some(".")),
                ("evil", EntryType::Symlink, b"", Some(chain)),
            ],
            vec![(
                "wallcrawler-session-cookies.json",
                EntryType::Symlink,
                b"",
                Some("/dev/zero"),
            )],
            vec![
                ("escape", EntryType::Symlink, b"", Some(&c)),
                ("escape/evil.txt", EntryType::Regular, b"x", None),
            ],
            vec![
                ("escape", EntryType::Symlink, b"", Some("../canary")),
                ("escape/evil.txt", EntryType::Regular, b"x", None),
            ],
            vec![
                ("a", EntryType::Regular, b"x", None),
                ("b", EntryType::Symlink, b"", Some("a")),
                ("c", EntryType::Symlink, b"", Some("b")),
            ],
        ];
        for entries in cases {
            let _ = fs::remove_dir_all(&profile);
            let tar = raw_tar(&entries);
            let e = unpack_tar(&tar[..], &profile, LIMITS).unwrap_err();
            assert!(matches!(e, ArchiveError::Symlink(_)), "{e}");
            let links: Vec<_> = fs::read_dir(&profile)
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().unwrap().is_symlink())
                .collect();
            assert!(links.is_empty(), "a link was made: {links:?}");
            canary_intact(&canary);
        }
        assert!(
            unpack_tar(
                &raw_tar(&[("x", EntryType::Symlink, b"", Some("."))])[..],
                &profile,
                LIMITS
            )
            .unwrap_err()
            .to_string()
            .contains("\"x\" is a symbolic link; profile archives may not contain symbolic links")
        );
    }

    /// Archives saved before links were refused may hold Chrome's `Singleton*` links: those
    /// are left out, as before, and the archive is restored.
    #[test]
    fn singleton_links_are_skipped_not_refused() {
        let (_r, profile, _c) = setup();
        let tar = raw_tar(&[
            ("SingletonLock", EntryType::Symlink, b"", Some("host-123")),
            ("SingletonSocket", EntryType::Symlink, b"", Some("/tmp/x/s")),
            ("Local State", EntryType::Regular, b"{}", None),
        ]);
        let stats = unpack_tar(&tar[..], &profile, LIMITS).unwrap();
        assert_eq!(stats.skipped, 2);
        assert_eq!(fs::read(profile.join("Local State")).unwrap(), b"{}");
        assert!(fs::symlink_metadata(profile.join("SingletonLock")).is_err());
    }

    #[test]
    fn hard_link_to_outside_is_refused() {
        let (_r, profile, canary) = setup();
        let target = canary.join("keep.txt").display().to_string();
        let tar = raw_tar(&[("hl", EntryType::Link, b"", Some(&target))]);
        assert!(matches!(
            unpack_tar(&tar[..], &profile, LIMITS).unwrap_err(),
            ArchiveError::LinkOutside(_)
        ));
        let rel = raw_tar(&[("hl", EntryType::Link, b"", Some("../canary/keep.txt"))]);
        assert!(matches!(
            unpack_tar(&rel[..], &profile, LIMITS).unwrap_err(),
            ArchiveError::LinkOutside(_)
        ));
        canary_intact(&canary);
        // A hard link to a file of the archive itself is allowed.
        let ok = raw_tar(&[
            ("a", EntryType::Regular, b"abc", None),
            ("b", EntryType::Link, b"", Some("a")),
        ]);
        unpack_tar(&ok[..], &profile, LIMITS).unwrap();
        assert_eq!(fs::read(profile.join("b")).unwrap(), b"abc");
    }

    #[test]
    fn device_nodes_and_fifos_are_refused() {
        let (_r, profile, canary) = setup();
        for kind in [EntryType::Char, EntryType::Block, EntryType::Fifo] {
            let tar = raw_tar(&[("dev", kind, b"", None)]);
            assert!(matches!(
                unpack_tar(&tar[..], &profile, LIMITS).unwrap_err(),
                ArchiveError::SpecialFile(_)
            ));
        }
        canary_intact(&canary);
    }

    #[test]
    fn size_and_entry_limits() {
        let (_r, profile, _c) = setup();
        let big = vec![7u8; 2000];
        let tar = raw_tar(&[("a", EntryType::Regular, &big, None)]);
        let small = ArchiveLimits {
            max_bytes: 1000,
            max_entries: 10,
        };
        assert!(matches!(
            unpack_tar(&tar[..], &profile, small).unwrap_err(),
            ArchiveError::TooLarge(1000)
        ));
        let many: Vec<(String, EntryType, &[u8], Option<&str>)> = (0..11)
            .map(|i| (format!("f{i}"), EntryType::Regular, &b"x"[..], None))
            .collect();
        let refs: Vec<(&str, EntryType, &[u8], Option<&str>)> = many
            .iter()
            .map(|(p, k, d, l)| (p.as_str(), *k, *d, *l))
            .collect();
        let tar = raw_tar(&refs);
        assert!(matches!(
            unpack_tar(&tar[..], &profile, small).unwrap_err(),
            ArchiveError::TooManyEntries(10)
        ));
    }

    /// `n` bytes deflate cannot shrink (xorshift64 from `seed`).
    fn xorshift_bytes(mut x: u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_parallel_pack_is_one_gzip_member_with_the_right_trailer() {
        let src = tempfile::tempdir().unwrap();
        // Several pieces: repetitive text, then bytes deflate cannot shrink.
        let text: Vec<u8> = (0..3_000_000u32)
            .map(|i| b"History Cookies Local State "[(i % 28) as usize])
            .collect();
        let noise = xorshift_bytes(0x9E37_79B9_7F4A_7C15, 2_500_000);
        fs::write(src.path().join("text"), &text).unwrap();
        fs::write(src.path().join("noise"), &noise).unwrap();
        let (stats, gz) = pack_gz(src.path(), Vec::new(), &[]).unwrap();
        assert_eq!(stats.bytes, (text.len() + noise.len()) as u64);
        assert!(
            gz.len() < noise.len() + text.len() / 10,
            "{} bytes",
            gz.len()
        );
        // One member: the decoder checks CRC-32 and size and leaves nothing behind.
        let mut rest = &gz[..];
        let mut tar = Vec::new();
        GzDecoder::new(&mut rest).read_to_end(&mut tar).unwrap();
        assert!(
            rest.is_empty(),
            "{} bytes after the first member",
            rest.len()
        );
        assert!(tar.len() > GZ_CHUNK * 5);
        let dest = tempfile::tempdir().unwrap();
        let big = ArchiveLimits {
            max_bytes: 1 << 30,
            max_entries: 10,
        };
        unpack_gz(&gz[..], dest.path(), big).unwrap();
        assert_eq!(fs::read(dest.path().join("text")).unwrap(), text);
        assert_eq!(fs::read(dest.path().join("noise")).unwrap(), noise);
        // An empty profile is a valid archive too.
        let empty = tempfile::tempdir().unwrap();
        let (_, gz) = pack_gz(empty.path(), Vec::new(), &[]).unwrap();
        let mut tar = Vec::new();
        GzDecoder::new(&gz[..]).read_to_end(&mut tar).unwrap();
    }

    #[test]
    fn only_random_looking_blocks_are_stored() {
        let random = xorshift_bytes(0x2545_F491_4F6C_DD1D, GZ_BLOCK);
        assert!(looks_incompressible(&random));
        let text: Vec<u8> = b"https://example.com/inbox?id=42 Inbox - Mail "
            .iter()
            .copied()
            .cycle()
            .take(GZ_BLOCK)
            .collect();
        assert!(!looks_incompressible(&text));
        assert!(!looks_incompressible(&vec![0u8; GZ_BLOCK]));
        // Random bytes followed by text: the end sample sees text, so it is deflated.
        let mut mixed = random[..GZ_BLOCK / 2].to_vec();
        mixed.extend_from_slice(&text[..GZ_BLOCK / 2]);
        assert!(!looks_incompressible(&mixed));
        // Base64 of random bytes still shrinks (6 bits per byte): deflated.
        let b64: Vec<u8> = random
            .iter()
            .map(|b| {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                    [(b & 63) as usize]
            })
            .collect();
        assert!(!looks_incompressible(&b64));
    }

    #[test]
    fn truncated_gzip_is_reported() {
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("f"), vec![1u8; 100_000]).unwrap();
        let (_, gz) = pack_gz(src.path(), Vec::new(), &[]).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let e = unpack_gz(&gz[..gz.len() / 2], dest.path(), LIMITS).unwrap_err();
        assert!(matches!(e, ArchiveError::Corrupt(_)), "{e}");
    }

    /// A bare header of `kind` declaring `size` bytes, with nothing after it.
    fn header_only(kind: EntryType, size: u64) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    /// An extension header over the cap is refused by its declared size, before any of it is
    /// read (here none of it even exists).
    #[test]
    fn extension_headers_over_the_cap_are_refused_before_reading() {
        let (_r, profile, _c) = setup();
        for (kind, what) in [
            (EntryType::GNULongName, "GNU long name"),
            (EntryType::GNULongLink, "GNU long link"),
            (EntryType::XHeader, "PAX"),
            (EntryType::XGlobalHeader, "PAX global"),
        ] {
            let tar = header_only(kind, 1 << 30);
            let e = unpack_tar(&tar[..], &profile, LIMITS).unwrap_err();
            assert!(
                matches!(e, ArchiveError::ExtensionTooLarge { kind, size } if kind == what && size == 1 << 30),
                "{e}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "archive has a {what} header of 1073741824 bytes (at most 65536 are allowed)"
                )
            );
        }
    }

    #[test]
    fn long_names_and_pax_paths_are_honoured() {
        let (_r, profile, _c) = setup();
        let long_dir = format!("Default/{}", "d".repeat(120));
        let long_file = format!("{long_dir}/{}", "f".repeat(200));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o600);
        b.append_data(&mut h, &long_file, &b"abc"[..]).unwrap();
        // PAX path and linkpath (a hard link to the file above) override the header's names.
        b.append_pax_extensions([("path", &b"Default/pax-name"[..])])
            .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(2);
        h.set_mode(0o600);
        b.append_data(&mut h, "ignored", &b"de"[..]).unwrap();
        b.append_pax_extensions([
            ("path", &b"Default/pax-link"[..]),
            ("linkpath", long_file.as_bytes()),
        ])
        .unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(EntryType::Link);
        h.set_size(0);
        h.set_mode(0o600);
        h.set_path("ignored-link").unwrap();
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let tar = b.into_inner().unwrap();
        let stats = unpack_tar(&tar[..], &profile, LIMITS).unwrap();
        assert_eq!(stats.entries, 3);
        assert_eq!(fs::read(profile.join(&long_file)).unwrap(), b"abc");
        assert_eq!(fs::read(profile.join("Default/pax-name")).unwrap(), b"de");
        assert_eq!(fs::read(profile.join("Default/pax-link")).unwrap(), b"abc");
        assert!(!profile.join("ignored").exists());
    }

    #[test]
    fn extension_header_rules() {
        let (_r, profile, _c) = setup();
        // A PAX size the raw reader would not honour.
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("size", &b"1"[..])]).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_size(2);
        h.set_mode(0o600);
        b.append_data(&mut h, "f", &b"ab"[..]).unwrap();
        let e = unpack_tar(&b.into_inner().unwrap()[..], &profile, LIMITS).unwrap_err();
        assert!(e.to_string().contains("PAX size disagrees"), "{e}");
        // Two long names for one entry; a long name with no entry after it.
        let mut long = header_only(EntryType::GNULongName, 2);
        long.extend_from_slice(&[b'a', 0]);
        long.resize(1024, 0);
        let mut two = long.clone();
        two.extend_from_slice(&long);
        let e = unpack_tar(&two[..], &profile, LIMITS).unwrap_err();
        assert!(e.to_string().contains("two GNU long name headers"), "{e}");
        let e = unpack_tar(&long[..], &profile, LIMITS).unwrap_err();
        assert!(e.to_string().contains("not followed by an entry"), "{e}");
        // GNU sparse entries are refused (the packer never writes them).
        let tar = raw_tar(&[("s", EntryType::GNUSparse, b"", None)]);
        assert!(matches!(
            unpack_tar(&tar[..], &profile, LIMITS).unwrap_err(),
            ArchiveError::UnsupportedType(_)
        ));
    }

    /// Names in errors are cut to a few hundred characters, whatever their length.
    #[test]
    fn names_in_errors_are_short() {
        let (_r, profile, _c) = setup();
        let name = format!("../{}", "é".repeat(30_000));
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(EntryType::GNULongName);
        h.set_size(name.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, name.as_bytes()).unwrap();
        b.append(&raw_header(EntryType::Regular, 0), &b""[..])
            .unwrap();
        let e = unpack_tar(&b.into_inner().unwrap()[..], &profile, LIMITS).unwrap_err();
        assert!(matches!(e, ArchiveError::ParentTraversal(_)), "{e}");
        let text = e.to_string();
        assert!(text.len() < NAME_SHOWN + 100, "{} bytes", text.len());
        assert!(text.contains("../éé") && text.contains('…'), "{text}");
    }

    fn raw_header(kind: EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..1].copy_from_slice(b"f");
        h.set_cksum();
        h
    }

    /// Entries left out or skipped still count: their bytes are decompressed too.
    #[test]
    fn every_declared_byte_counts_toward_the_limit() {
        let (_r, profile, _c) = setup();
        let small = ArchiveLimits {
            max_bytes: 1000,
            max_entries: 10,
        };
        let big = vec![0u8; 2000];
        for entries in [
            vec![("DevToolsActivePort", EntryType::Regular, &big[..], None)],
            vec![("d", EntryType::Directory, &big[..], None)],
        ] {
            let tar = raw_tar(&entries);
            assert!(matches!(
                unpack_tar(&tar[..], &profile, small).unwrap_err(),
                ArchiveError::TooLarge(1000)
            ));
        }
    }

    /// The reader under the tar parser hands out only what the unpack loop allowed.
    #[test]
    fn the_metered_reader_stops_at_its_allowance() {
        let budget = Rc::new(Budget::default());
        budget.allow(10);
        let mut r = Metered {
            inner: &[7u8; 100][..],
            budget: budget.clone(),
        };
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).unwrap_err();
        assert_eq!(out.len(), 10);
        assert!(budget.exceeded.get(), "{e}");
    }

    #[test]
    fn own_files_are_read_only_when_regular_and_small() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("cookies.json");
        assert!(read_own_file(&f, 100).unwrap().is_none());
        fs::write(&f, b"[]").unwrap();
        assert_eq!(read_own_file(&f, 100).unwrap().unwrap(), b"[]");
        // A huge (sparse) file is refused by its size, without reading it.
        let huge = dir.path().join("huge.json");
        File::create(&huge).unwrap().set_len(1 << 32).unwrap();
        assert!(matches!(
            read_own_file(&huge, 16 << 20).unwrap_err(),
            OwnFileError::TooLarge { max, .. } if max == 16 << 20
        ));
        // Links are never followed: not to a file, not to a device.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(matches!(
            read_own_file(&link, 100).unwrap_err(),
            OwnFileError::Link(_)
        ));
        let zero = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(matches!(
            read_own_file(&zero, 100).unwrap_err(),
            OwnFileError::Link(_)
        ));
        let fifo = dir.path().join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_own_file(&fifo, 100).unwrap_err(),
            OwnFileError::NotRegular(_)
        ));
        assert!(matches!(
            read_own_file(dir.path(), 100).unwrap_err(),
            OwnFileError::NotRegular(_)
        ));
    }
}
