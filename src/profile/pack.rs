//! Packing the profile directory: what travels between sessions, read without following a
//! link out of it.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Mutex, mpsc};

use tar::EntryType;

use super::gzip::*;
use super::*;

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

pub(super) fn pack_gz_with<W: Write>(
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
pub(super) fn opened_under_root(f: &fs::File, path: &Path, rel: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Some(root) = path.ancestors().nth(rel.components().count()) else {
        return false;
    };
    fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .is_ok_and(|real| real.starts_with(root) && real != root)
}
