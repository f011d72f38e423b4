//! Unpacking a hostile archive into the profile directory (the rules are the module's: see
//! [`super`]).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use flate2::read::GzDecoder;
use tar::{EntryType, PaxExtensions};

use super::*;

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
pub(super) struct Metered<R> {
    pub(super) inner: R,
    pub(super) budget: Rc<Budget>,
}

/// What [`Metered`] may still hand out; shared with the unpack loop, which raises it.
#[derive(Debug, Default)]
pub(super) struct Budget {
    pub(super) read: Cell<u64>,
    pub(super) allowed: Cell<u64>,
    pub(super) exceeded: Cell<bool>,
}

impl Budget {
    pub(super) fn allow(&self, n: u64) {
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
pub(super) fn shown(bytes: &[u8]) -> String {
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
