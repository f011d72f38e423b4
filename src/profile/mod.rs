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

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::sync::{Mutex, mpsc};

use flate2::read::GzDecoder;
use flate2::{Compress, Compression, Crc, FlushCompress};
use tar::{EntryType, PaxExtensions};

use crate::telemetry::clip;

mod directory;
mod stream;
pub use directory::DirectoryArchives;
pub use stream::{ProfileError, hydrate, persist_profile};

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

/// Makes sure every existing ancestor of `rel` under `root` is a real directory (not a link),
/// creating missing ones.
fn prepare_parents(root: &Path, rel: &Path, display: &str) -> Result<(), ArchiveError> {
    let mut cur = root.to_path_buf();
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    for c in parent.components() {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ArchiveError::ThroughLink(display.to_owned()));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(ArchiveError::ThroughLink(display.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&cur).map_err(|source| ArchiveError::Write {
                    path: display.to_owned(),
                    source,
                })?;
            }
            Err(source) => {
                return Err(ArchiveError::Write {
                    path: display.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Unpacks a gzip-compressed tar stream into `dest` (created if needed).
pub fn unpack_gz(
    reader: impl Read,
    dest: &Path,
    limits: ArchiveLimits,
) -> Result<UnpackStats, ArchiveError> {
    unpack_tar(GzDecoder::new(reader), dest, limits)
}

/// The decompressed stream as the tar reader sees it: it hands out only the bytes
/// [`unpack_tar`] has allowed for (each entry's header, padding and checked size), so every
/// decompressed byte is accounted for whatever the tar crate does with it.
struct Metered<R> {
    inner: R,
    budget: Rc<Budget>,
}

/// What [`Metered`] may still hand out; shared with the unpack loop, which raises it.
#[derive(Debug, Default)]
struct Budget {
    read: Cell<u64>,
    allowed: Cell<u64>,
    exceeded: Cell<bool>,
}

impl Budget {
    fn allow(&self, n: u64) {
        self.allowed.set(self.allowed.get().saturating_add(n));
    }
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .budget
            .allowed
            .get()
            .saturating_sub(self.budget.read.get());
        if left == 0 && !buf.is_empty() {
            self.budget.exceeded.set(true);
            return Err(io::Error::other(
                "archive data beyond what its headers declare",
            ));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.budget.read.set(self.budget.read.get() + n as u64);
        Ok(n)
    }
}

/// Extension headers seen before the entry they describe.
#[derive(Default)]
struct ExtensionHeaders {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

impl ExtensionHeaders {
    fn is_empty(&self) -> bool {
        self.long_name.is_none() && self.long_link.is_none() && self.pax.is_none()
    }

    /// The value of PAX `key`, if the entry has PAX extensions holding it.
    fn pax_value(&self, key: &str) -> Result<Option<&[u8]>, ArchiveError> {
        let Some(pax) = &self.pax else {
            return Ok(None);
        };
        for ext in PaxExtensions::new(pax) {
            let ext = ext.map_err(|_| ArchiveError::Corrupt("malformed PAX header".into()))?;
            if ext.key_bytes() == key.as_bytes() {
                return Ok(Some(ext.value_bytes()));
            }
        }
        Ok(None)
    }
}

/// A path from an archive header as bytes: a GNU long name ends with NULs; no path holds one.
fn path_from_bytes(bytes: &[u8]) -> Result<PathBuf, ArchiveError> {
    let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    let bytes = &bytes[..end];
    if bytes.contains(&0) {
        return Err(ArchiveError::Corrupt(format!(
            "entry name {:?} holds a NUL byte",
            shown(bytes)
        )));
    }
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// An entry name as shown in errors and logs: lossy UTF-8, at most [`NAME_SHOWN`] bytes.
fn shown(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(NAME_SHOWN + 4)];
    let text = String::from_utf8_lossy(head);
    let clipped = clip(&text, NAME_SHOWN);
    if clipped.len() < text.len() || head.len() < bytes.len() {
        format!("{clipped}…")
    } else {
        clipped.into_owned()
    }
}

/// Reads the whole of an extension header already checked to be at most
/// [`MAX_EXTENSION_BYTES`].
fn read_extension(entry: &mut impl Read, size: u64) -> Result<Vec<u8>, ArchiveError> {
    let mut data = Vec::with_capacity(size as usize);
    entry
        .take(size)
        .read_to_end(&mut data)
        .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
    if data.len() as u64 != size {
        return Err(ArchiveError::Corrupt(
            "an extension header is shorter than it says".into(),
        ));
    }
    Ok(data)
}

/// Unpacks a tar stream into `dest` under every rule of the module.
///
/// The tar crate reads GNU long names and PAX headers whole, before any limit of ours, when
/// it resolves them itself; so entries are read raw and those headers are checked here, by
/// their declared size, before they are read.
pub fn unpack_tar(
    reader: impl Read,
    dest: &Path,
    limits: ArchiveLimits,
) -> Result<UnpackStats, ArchiveError> {
    fs::create_dir_all(dest).map_err(|source| ArchiveError::Write {
        path: dest.display().to_string(),
        source,
    })?;
    let budget = Rc::new(Budget::default());
    budget.allow(BLOCK); // the first header
    let mut archive = tar::Archive::new(Metered {
        inner: reader,
        budget: budget.clone(),
    });
    let mut unpacker = Unpacker {
        dest,
        limits,
        budget,
        stats: UnpackStats::default(),
        declared: 0,
        pending: ExtensionHeaders::default(),
        written_files: HashSet::new(),
        buf: vec![0u8; 256 * 1024],
    };
    let entries = archive.entries().map_err(|e| unpacker.corrupt(e))?;
    for entry in entries.raw(true) {
        let mut entry = entry.map_err(|e| unpacker.corrupt(e))?;
        unpacker.entry(&mut entry)?;
    }
    if !unpacker.pending.is_empty() {
        return Err(ArchiveError::Corrupt(
            "an extension header is not followed by an entry".into(),
        ));
    }
    Ok(unpacker.stats)
}

/// The state of one unpacking: what has been read and written so far, against the limits.
struct Unpacker<'a> {
    dest: &'a Path,
    limits: ArchiveLimits,
    /// What the reader may still hand out (headers, padding, declared data).
    budget: Rc<Budget>,
    stats: UnpackStats,
    /// Every entry's declared data, files or not: what the reader may hand out beyond headers.
    declared: u64,
    /// Extension headers read for the next entry.
    pending: ExtensionHeaders,
    /// Regular files this archive wrote: the only targets a hard link may have.
    written_files: HashSet<PathBuf>,
    buf: Vec<u8>,
}

impl Unpacker<'_> {
    /// A read error: the budget ran out (the archive is larger than its headers say), or the
    /// stream is broken.
    fn corrupt(&self, e: io::Error) -> ArchiveError {
        if self.budget.exceeded.get() {
            ArchiveError::TooLarge(self.limits.max_bytes)
        } else {
            ArchiveError::Corrupt(e.to_string())
        }
    }

    /// One raw entry: an extension header kept for the next entry, or an entry written.
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), ArchiveError> {
        let kind = entry.header().entry_type();
        let size = entry.header().entry_size().map_err(|e| self.corrupt(e))?;
        // This entry's padding and the next header.
        self.budget.allow(2 * BLOCK);
        if let Some(what) = extension_kind(kind) {
            return self.extension(entry, kind, what, size);
        }
        self.count_entry()?;
        self.declared = self.declared.saturating_add(size);
        if self.declared > self.limits.max_bytes {
            return Err(ArchiveError::TooLarge(self.limits.max_bytes));
        }
        self.budget.allow(size);
        let ext = std::mem::take(&mut self.pending);
        if let Some(pax_size) = ext.pax_value("size")?
            && pax_size != size.to_string().as_bytes()
        {
            // The tar crate would let PAX override the header; we read raw, by the header.
            return Err(ArchiveError::Corrupt(
                "a PAX size disagrees with its header".into(),
            ));
        }
        let raw_path = match (&ext.long_name, ext.pax_value("path")?) {
            (Some(long), _) => path_from_bytes(long)?,
            (None, Some(pax)) => path_from_bytes(pax)?,
            (None, None) => path_from_bytes(&entry.header().path_bytes())?,
        };
        let display = shown(raw_path.as_os_str().as_bytes());
        let rel = safe_relative(&raw_path)?;
        if rel.as_os_str().is_empty() {
            return Ok(()); // "./" itself
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if is_excluded_name(&name) && kind != EntryType::Directory {
            self.stats.skipped += 1;
            return Ok(());
        }
        match kind {
            EntryType::Directory => self.directory(&rel, &display),
            EntryType::Regular | EntryType::Continuous => self.file(entry, rel, &display, size),
            EntryType::Symlink => Err(ArchiveError::Symlink(display)),
            EntryType::Link => {
                let link = link_name(&ext, entry, &display)?;
                self.hard_link(rel, &display, &link)
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                Err(ArchiveError::SpecialFile(display))
            }
            // GNU sparse files (never written by our packer) and anything else.
            _ => Err(ArchiveError::UnsupportedType(display)),
        }
    }

    /// Counts an entry against `max_entries`.
    fn count_entry(&mut self) -> Result<(), ArchiveError> {
        self.stats.entries += 1;
        if self.stats.entries > self.limits.max_entries {
            return Err(ArchiveError::TooManyEntries(self.limits.max_entries));
        }
        Ok(())
    }

    /// A GNU long name/link or PAX header, size-checked before it is read, kept for the entry
    /// it describes.
    fn extension(
        &mut self,
        entry: &mut impl Read,
        kind: EntryType,
        what: &'static str,
        size: u64,
    ) -> Result<(), ArchiveError> {
        if size > MAX_EXTENSION_BYTES {
            return Err(ArchiveError::ExtensionTooLarge { kind: what, size });
        }
        self.budget.allow(size);
        let data = read_extension(entry, size)?;
        let slot = match kind {
            EntryType::GNULongName => &mut self.pending.long_name,
            EntryType::GNULongLink => &mut self.pending.long_link,
            EntryType::XHeader => &mut self.pending.pax,
            // Global PAX records (comments, defaults) say nothing we use; each counts as an
            // entry so that they cannot come in unlimited numbers.
            _ => return self.count_entry(),
        };
        if slot.replace(data).is_some() {
            return Err(ArchiveError::Corrupt(format!(
                "two {what} headers describe the same entry"
            )));
        }
        Ok(())
    }

    /// A directory, created unless it exists as a real directory (never through a link).
    fn directory(&mut self, rel: &Path, display: &str) -> Result<(), ArchiveError> {
        prepare_parents(self.dest, rel, display)?;
        let target = self.dest.join(rel);
        match fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => Ok(()),
            Ok(_) => Err(ArchiveError::ThroughLink(display.to_owned())),
            Err(_) => fs::create_dir(&target).map_err(|source| ArchiveError::Write {
                path: display.to_owned(),
                source,
            }),
        }
    }

    /// A regular file, written new (never through a link, never onto something else) with
    /// exactly the size its header declares.
    fn file(
        &mut self,
        entry: &mut impl Read,
        rel: PathBuf,
        display: &str,
        size: u64,
    ) -> Result<(), ArchiveError> {
        prepare_parents(self.dest, &rel, display)?;
        let target = self.dest.join(&rel);
        remove_existing(&target, display)?;
        let write_err = |source| ArchiveError::Write {
            path: display.to_owned(),
            source,
        };
        // O_NOFOLLOW | O_EXCL: never through a link, never onto something else.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .mode(0o600)
            .open(&target)
            .map_err(write_err)?;
        let mut copied: u64 = 0;
        loop {
            let n = entry.read(&mut self.buf).map_err(|e| self.corrupt(e))?;
            if n == 0 {
                break;
            }
            copied += n as u64;
            file.write_all(&self.buf[..n]).map_err(write_err)?;
        }
        if copied != size {
            return Err(ArchiveError::Corrupt(format!(
                "entry {display:?} is shorter than its header says"
            )));
        }
        self.stats.bytes += copied;
        self.written_files.insert(rel);
        Ok(())
    }

    /// A hard link, only to a regular file this archive already wrote: never to anything
    /// outside.
    fn hard_link(&mut self, rel: PathBuf, display: &str, link: &Path) -> Result<(), ArchiveError> {
        let link_rel =
            safe_relative(link).map_err(|_| ArchiveError::LinkOutside(display.to_owned()))?;
        if !self.written_files.contains(&link_rel) {
            return Err(ArchiveError::LinkOutside(display.to_owned()));
        }
        prepare_parents(self.dest, &rel, display)?;
        let target = self.dest.join(&rel);
        remove_existing(&target, display)?;
        fs::hard_link(self.dest.join(&link_rel), &target).map_err(|source| {
            ArchiveError::Write {
                path: display.to_owned(),
                source,
            }
        })?;
        self.written_files.insert(rel);
        Ok(())
    }
}

/// Which extension header `kind` is, if it is one.
fn extension_kind(kind: EntryType) -> Option<&'static str> {
    match kind {
        EntryType::GNULongName => Some("GNU long name"),
        EntryType::GNULongLink => Some("GNU long link"),
        EntryType::XHeader => Some("PAX"),
        EntryType::XGlobalHeader => Some("PAX global"),
        _ => None,
    }
}

/// A link entry's target: from its GNU long link, its PAX `linkpath`, or its header.
fn link_name<R: Read>(
    ext: &ExtensionHeaders,
    entry: &tar::Entry<'_, R>,
    display: &str,
) -> Result<PathBuf, ArchiveError> {
    let bytes: Cow<'_, [u8]> = match (&ext.long_link, ext.pax_value("linkpath")?) {
        (Some(long), _) => Cow::Borrowed(long.as_slice()),
        (None, Some(pax)) => Cow::Borrowed(pax),
        (None, None) => entry.header().link_name_bytes().unwrap_or_default(),
    };
    if bytes.is_empty() {
        return Err(ArchiveError::Corrupt(format!(
            "link {display:?} has no target"
        )));
    }
    path_from_bytes(&bytes)
}

/// Removes whatever is at `target` (a previous entry of the same name), but never a directory.
fn remove_existing(target: &Path, display: &str) -> Result<(), ArchiveError> {
    match fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => Err(ArchiveError::ThroughLink(display.to_owned())),
        Ok(_) => fs::remove_file(target).map_err(|source| ArchiveError::Write {
            path: display.to_owned(),
            source,
        }),
        Err(_) => Ok(()),
    }
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

/// What packing wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PackStats {
    /// Entries written (the extra files included).
    pub entries: u64,
    /// Bytes of file contents written, before compression.
    pub bytes: u64,
}

/// Packs the contents of `src` as a gzip-compressed tar into `writer`, plus `extra` files at the
/// archive root. Fast deflate (level 1): profiles are large and mostly already compact. The
/// deflate work is spread over the CPUs (`ParGzWriter`); the archive is one ordinary gzip
/// member.
pub fn pack_gz<W: Write>(
    src: &Path,
    writer: W,
    extra: &[(&str, &[u8])],
) -> Result<(PackStats, W), ArchiveError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_GZ_WORKERS);
    let (tx, rx) = mpsc::channel::<GzJob>();
    let jobs = Mutex::new(rx);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| gz_worker(&jobs));
        }
        // The sender lives in the writer: once the writer is finished or dropped (an error),
        // the workers see the channel close and the scope can end.
        pack_gz_with(src, ParGzWriter::new(writer, tx, 2 * workers)?, extra)
    })
}

fn pack_gz_with<W: Write>(
    src: &Path,
    gz: ParGzWriter<W>,
    extra: &[(&str, &[u8])],
) -> Result<(PackStats, W), ArchiveError> {
    let mut builder = tar::Builder::new(gz);
    builder.follow_symlinks(false);
    // Unpacking reads entries raw and refuses GNU sparse ones: holes are written as zeros.
    builder.sparse(false);
    let mut stats = PackStats::default();
    // Canonical, so that what each opened file really is can be checked against it.
    let src = fs::canonicalize(src).map_err(|source| ArchiveError::Read {
        path: src.display().to_string(),
        source,
    })?;
    pack_dir(&mut builder, &src, Path::new(""), &mut stats)?;
    for (name, data) in extra {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_entry_type(EntryType::Regular);
        h.set_mtime(wallcrawler_contract::time::unix_millis() / 1000);
        builder
            .append_data(&mut h, name, *data)
            .map_err(|source| ArchiveError::Write {
                path: (*name).to_owned(),
                source,
            })?;
        stats.entries += 1;
        stats.bytes += data.len() as u64;
    }
    let gz = builder.into_inner().map_err(|source| ArchiveError::Write {
        path: "<archive>".into(),
        source,
    })?;
    let w = gz.finish().map_err(|source| ArchiveError::Write {
        path: "<archive>".into(),
        source,
    })?;
    Ok((stats, w))
}

/// Deflate workers per pack, at most.
const MAX_GZ_WORKERS: usize = 4;
/// Input deflated per job.
const GZ_CHUNK: usize = 1 << 20;
/// Deflate's window: each job is primed with this much of the input before it.
const GZ_WINDOW: usize = 32 * 1024;

/// One piece of the stream to deflate.
struct GzJob {
    dictionary: Vec<u8>,
    data: Vec<u8>,
    reply: mpsc::SyncSender<io::Result<GzDone>>,
}

struct GzDone {
    deflated: Vec<u8>,
    crc: Crc,
}

/// Runs jobs until the channel closes.
fn gz_worker(jobs: &Mutex<mpsc::Receiver<GzJob>>) {
    let mut c = Compress::new(Compression::fast(), false);
    loop {
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let done = deflate_piece(&mut c, &job.dictionary, &job.data).map(|deflated| {
            let mut crc = Crc::new();
            crc.update(&job.data);
            GzDone { deflated, crc }
        });
        let _ = job.reply.send(done);
    }
}

/// Raw deflate of `data` after `dictionary`, ending sync-flushed on a byte boundary (not final).
///
/// Blocks that look incompressible (random or already compressed: IndexedDB blobs, images,
/// compressed values) are stored rather than deflated: deflate's fast level would spend about
/// four times as long per byte on them as on text, only to make them bigger.
fn deflate_piece(c: &mut Compress, dictionary: &[u8], data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 16 + 1024);
    prime(c, dictionary, &[])?;
    let mut storing = false;
    for (i, block) in data.chunks(GZ_BLOCK).enumerate() {
        if looks_incompressible(block) {
            if !storing {
                // End the deflated run on a byte boundary.
                compress_all(c, &[], &mut out, FlushCompress::Sync)?;
                storing = true;
            }
            for part in block.chunks(usize::from(u16::MAX)) {
                let len = part.len() as u16;
                out.push(0); // not final, stored
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&(!len).to_le_bytes());
                out.extend_from_slice(part);
            }
        } else {
            if storing {
                // The compressor did not see the stored bytes: start it again on what the
                // decoder's window holds.
                prime(c, dictionary, &data[..i * GZ_BLOCK])?;
                storing = false;
            }
            compress_all(c, block, &mut out, FlushCompress::None)?;
        }
    }
    if !storing {
        compress_all(c, &[], &mut out, FlushCompress::Sync)?;
    }
    Ok(out)
}

/// Resets the compressor with the last window of `dictionary` followed by `before` as history.
fn prime(c: &mut Compress, dictionary: &[u8], before: &[u8]) -> io::Result<()> {
    c.reset();
    let history: std::borrow::Cow<'_, [u8]> = if before.len() >= GZ_WINDOW {
        before[before.len() - GZ_WINDOW..].into()
    } else {
        let from_dictionary = GZ_WINDOW - before.len();
        let mut h = dictionary[dictionary.len().saturating_sub(from_dictionary)..].to_vec();
        h.extend_from_slice(before);
        h.into()
    };
    if !history.is_empty() {
        c.set_dictionary(&history).map_err(io::Error::other)?;
    }
    Ok(())
}

/// Feeds all of `data`; with a flush, also until the flush is complete.
fn compress_all(
    c: &mut Compress,
    data: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> io::Result<()> {
    let start = c.total_in();
    loop {
        let consumed = (c.total_in() - start) as usize;
        if out.capacity() - out.len() < 1024 {
            out.reserve(64 * 1024 + data.len() - consumed);
        }
        c.compress_vec(&data[consumed..], out, flush)
            .map_err(io::Error::other)?;
        let all_in = (c.total_in() - start) as usize == data.len();
        // A flush is complete when it did not run out of room.
        if all_in && (matches!(flush, FlushCompress::None) || out.len() < out.capacity()) {
            return Ok(());
        }
    }
}

/// Unit of the store-or-deflate decision.
const GZ_BLOCK: usize = 64 * 1024;

/// Whether `block` looks like it will not shrink: random and compressed data have near-uniform
/// byte frequencies. Three 1 KiB samples (start, middle, end) must all look so. Uniform bytes
/// measure about 7.8 bits per byte on 1 KiB; text and databases 3-6; base64 6.
fn looks_incompressible(block: &[u8]) -> bool {
    const SAMPLE: usize = 1024;
    if block.len() < 4 * SAMPLE {
        return false;
    }
    let mid = block.len() / 2 - SAMPLE / 2;
    [0, mid, block.len() - SAMPLE]
        .iter()
        .all(|&at| byte_entropy(&block[at..at + SAMPLE]) > 7.5)
}

/// Shannon entropy of the byte values, bits per byte.
fn byte_entropy(sample: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in sample {
        counts[b as usize] += 1;
    }
    let n = sample.len() as f64;
    counts
        .iter()
        .filter(|&&k| k > 0)
        .map(|&k| {
            let p = f64::from(k) / n;
            -p * p.log2()
        })
        .sum()
}

/// A gzip writer that deflates [`GZ_CHUNK`] pieces of its input on worker threads and writes
/// them in order as one gzip member, pigz's scheme: every piece is primed with the 32 KiB
/// before it (so the output is about the size one stream would be) and ends sync-flushed on a
/// byte boundary; `finish` adds an empty final block and the trailer (CRC-32, size). At most
/// `max_pending` pieces are in flight, so memory stays bounded whatever the profile's size.
struct ParGzWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    window: Vec<u8>,
    jobs: mpsc::Sender<GzJob>,
    pending: VecDeque<mpsc::Receiver<io::Result<GzDone>>>,
    max_pending: usize,
    crc: Crc,
}

impl<W: Write> ParGzWriter<W> {
    fn new(
        mut out: W,
        jobs: mpsc::Sender<GzJob>,
        max_pending: usize,
    ) -> Result<Self, ArchiveError> {
        // ID, deflate, no flags, no mtime, "fastest", Unix.
        out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3])
            .map_err(|source| ArchiveError::Write {
                path: "<archive>".into(),
                source,
            })?;
        Ok(Self {
            out,
            buf: Vec::with_capacity(GZ_CHUNK),
            window: Vec::new(),
            jobs,
            pending: VecDeque::new(),
            max_pending: max_pending.max(1),
            crc: Crc::new(),
        })
    }

    fn dispatch(&mut self) -> io::Result<()> {
        while self.pending.len() >= self.max_pending {
            self.write_oldest()?;
        }
        let data = std::mem::replace(&mut self.buf, Vec::with_capacity(GZ_CHUNK));
        // Only the last piece can be shorter than the window; nothing follows it.
        let tail = data[data.len().saturating_sub(GZ_WINDOW)..].to_vec();
        let dictionary = std::mem::replace(&mut self.window, tail);
        let (reply, done) = mpsc::sync_channel(1);
        self.jobs
            .send(GzJob {
                dictionary,
                data,
                reply,
            })
            .map_err(|_| io::Error::other("the deflate workers stopped"))?;
        self.pending.push_back(done);
        Ok(())
    }

    fn write_oldest(&mut self) -> io::Result<()> {
        let Some(done) = self.pending.pop_front() else {
            return Ok(());
        };
        let done = done
            .recv()
            .map_err(|_| io::Error::other("a deflate worker stopped"))??;
        self.crc.combine(&done.crc);
        self.out.write_all(&done.deflated)
    }

    /// Writes what is left, the final block and the trailer; returns the inner writer.
    fn finish(mut self) -> io::Result<W> {
        if !self.buf.is_empty() {
            self.dispatch()?;
        }
        while !self.pending.is_empty() {
            self.write_oldest()?;
        }
        // An empty final block with fixed codes, then CRC-32 and size mod 2^32.
        self.out.write_all(&[0x03, 0x00])?;
        self.out.write_all(&self.crc.sum().to_le_bytes())?;
        self.out.write_all(&self.crc.amount().to_le_bytes())?;
        Ok(self.out)
    }
}

impl<W: Write> Write for ParGzWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(GZ_CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == GZ_CHUNK {
            self.dispatch()?;
        }
        Ok(n)
    }

    /// Pieces are cut at fixed sizes; flushing only writes out the finished ones.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn pack_dir<W: Write>(
    b: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    stats: &mut PackStats,
) -> Result<(), ArchiveError> {
    let dir = root.join(rel);
    let read_err = |source| ArchiveError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .map_err(read_err)?
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let child_rel = rel.join(&name);
        let path = root.join(&child_rel);
        let display = child_rel.display().to_string();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        }; // vanished meanwhile
        let ft = meta.file_type();
        if is_excluded_name(&name)
            || ft.is_socket()
            || ft.is_fifo()
            || ft.is_char_device()
            || ft.is_block_device()
        {
            continue;
        }
        if ft.is_dir() {
            if is_cache_dir(&name) {
                continue;
            }
            b.append_dir(&child_rel, &path)
                .map_err(|source| ArchiveError::Read {
                    path: display.clone(),
                    source,
                })?;
            stats.entries += 1;
            pack_dir(b, root, &child_rel, stats)?;
        } else if ft.is_symlink() {
            // Unpacking refuses symbolic links; Chrome makes the ones it needs (`Singleton*`).
            continue;
        } else if ft.is_file() {
            pack_file(b, &path, &child_rel, meta.len(), stats)?;
        }
    }
    Ok(())
}

/// Appends the regular file at `path` as `rel`: never through a link, should the file have
/// been replaced by one meanwhile, and nothing when it has vanished. What was opened is
/// checked to be under the profile (its real path, `/proc/self/fd`): Chrome's user owns the
/// profile (`CHROME_USER`) and could swap a folder on the way for a link to the controller's
/// files after the walk looked at it.
fn pack_file<W: Write>(
    b: &mut tar::Builder<W>,
    path: &Path,
    rel: &Path,
    len: u64,
    stats: &mut PackStats,
) -> Result<(), ArchiveError> {
    let read_err = |source| ArchiveError::Read {
        path: rel.display().to_string(),
        source,
    };
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => return Ok(()),
        Err(source) => return Err(read_err(source)),
    };
    if !opened_under_root(&f, path, rel) {
        return Ok(());
    }
    b.append_file(rel, &mut f).map_err(read_err)?;
    stats.entries += 1;
    stats.bytes += len;
    Ok(())
}

/// Whether the file `f`, opened at `path` (= the profile's root joined with `rel`), really is
/// under that root, whatever links the path met on the way.
fn opened_under_root(f: &fs::File, path: &Path, rel: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Some(root) = path.ancestors().nth(rel.components().count()) else {
        return false;
    };
    fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .is_ok_and(|real| real.starts_with(root) && real != root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

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
