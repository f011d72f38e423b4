//! Files only this user can have written: the local platform's data directory and what it
//! keeps there (its identity and keys, projects, API keys, session documents with their tokens,
//! claims, archives).
//!
//! A directory another user can write into, or a file another user owns, would let them hand
//! us their keys or make one of our writes land where they chose (through a link). So:
//!
//! - [`ensure_private_dir`] creates a missing directory 0700 and refuses an existing one that
//!   is not ours: a symbolic link anywhere on its absolute path (each component below `/` is
//!   `lstat`ed: a link could be re-pointed later), an ancestor another user could change (owned
//!   by someone other than root or us, or writable by group or others without the sticky bit:
//!   they could rename our directory away and put theirs in its place), the directory itself
//!   not owned by the effective user or writable by group or others. Ours, it is made 0700; a
//!   foreign one is never chmodded into shape.
//! - [`read_ours`] opens without following a link (`O_NOFOLLOW`) and refuses a file that is
//!   not a regular file owned by us, or that group or others may write.
//! - [`write_atomic`] writes through a temporary file created exclusively under a random name
//!   beside the target (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600) and renamed onto it: no write
//!   follows a link (a link at the target itself is replaced, its target untouched), and a
//!   reader never sees half a file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;

/// Why a path is not trusted. Turned into an [`io::Error`] of kind `PermissionDenied`.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// A symbolic link where none may be.
    #[error("{path} is a symbolic link: refusing to follow it")]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// Owned by another user.
    #[error("{path} is owned by uid {owner}, not by this user (uid {me}): refusing to trust it")]
    Owner {
        /// The file or directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid.
        me: u32,
    },
    /// Group or others may write it.
    #[error("{path} is writable by group or others (mode {mode:o}): refusing to trust it")]
    Writable {
        /// The file or directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// An ancestor of the directory that another user could change.
    #[error(
        "{path} is inside {ancestor} (owner uid {owner}, mode {mode:o}), which another user \
         can change: refusing it"
    )]
    Ancestor {
        /// The directory asked for.
        path: PathBuf,
        /// The ancestor.
        ancestor: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// Not of the kind expected (a directory, a regular file).
    #[error("{path} is not a {want}")]
    Kind {
        /// The path.
        path: PathBuf,
        /// What it should have been.
        want: &'static str,
    },
    /// A `..` in the path: what it names depends on links this module does not follow.
    #[error("{path} has a `..` component: give the path without one")]
    DotDot {
        /// The path.
        path: PathBuf,
    },
}

impl From<Untrusted> for io::Error {
    fn from(e: Untrusted) -> Self {
        io::Error::new(io::ErrorKind::PermissionDenied, e)
    }
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Refused when owned by another user or writable by group or others.
fn check_owned(path: &Path, m: &fs::Metadata) -> Result<(), Untrusted> {
    let me = euid();
    if m.uid() != me {
        return Err(Untrusted::Owner {
            path: path.to_owned(),
            owner: m.uid(),
            me,
        });
    }
    if m.mode() & 0o022 != 0 {
        return Err(Untrusted::Writable {
            path: path.to_owned(),
            mode: m.mode() & 0o7777,
        });
    }
    Ok(())
}

/// Whether a user other than root and us could rename entries of the directory `m`.
fn others_can_change(m: &fs::Metadata) -> bool {
    let owner_ok = m.uid() == 0 || m.uid() == euid();
    let shared = m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0;
    !owner_ok || shared
}

/// `dir` made absolute (from the working directory, which `getcwd` gives without links).
fn absolute(dir: &Path) -> io::Result<PathBuf> {
    if dir.is_absolute() {
        Ok(dir.to_owned())
    } else {
        Ok(std::env::current_dir()?.join(dir))
    }
}

/// Checks each existing component of `dir`'s absolute path below `/` (see the module doc);
/// stops at the first missing one (what is created below it is ours).
fn check_path(dir: &Path) -> io::Result<()> {
    let abs = absolute(dir)?;
    let mut at = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::Normal(name) => at.push(name),
            Component::ParentDir => Err(Untrusted::DotDot { path: abs.clone() })?,
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        }
        let m = match fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if m.file_type().is_symlink() {
            Err(Untrusted::Link { path: at.clone() })?;
        }
        if !m.is_dir() {
            Err(Untrusted::Kind {
                path: at.clone(),
                want: "directory",
            })?;
        }
        if at != abs && others_can_change(&m) {
            Err(Untrusted::Ancestor {
                path: abs.clone(),
                ancestor: at.clone(),
                owner: m.uid(),
                mode: m.mode() & 0o7777,
            })?;
        }
    }
    Ok(())
}

/// Makes sure `dir` is ours alone (see the module doc): created 0700 when missing (with its
/// missing parents), refused with the reason when not ours, made 0700 when ours.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    check_path(dir)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // Again, now that every component exists.
    check_path(dir)?;
    let m = fs::symlink_metadata(dir)?;
    check_owned(dir, &m)?;
    if m.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// `opts` opening `path` without following a link (nor blocking on a FIFO), the file refused
/// unless it is a regular file of ours that only we may write. `None`: there is none.
fn open_checked(path: &Path, opts: &mut OpenOptions) -> io::Result<Option<File>> {
    let opened = opts
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path);
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // What O_NOFOLLOW answers for a link.
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(Untrusted::Link {
                path: path.to_owned(),
            }
            .into());
        }
        Err(e) => return Err(e),
    };
    let m = f.metadata()?;
    if !m.is_file() {
        Err(Untrusted::Kind {
            path: path.to_owned(),
            want: "regular file",
        })?;
    }
    check_owned(path, &m)?;
    Ok(Some(f))
}

/// Opens `path` for reading when it is ours ([`open_checked`]). `None`: there is none.
pub fn open_ours(path: &Path) -> io::Result<Option<File>> {
    open_checked(path, OpenOptions::new().read(true))
}

/// Opens the lock file `path` (created 0600 when missing, never truncated) when it is ours
/// ([`open_checked`]): a link planted there would have us create or lock its target.
pub fn open_lock(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.create(true).truncate(false).write(true).mode(0o600);
    open_checked(path, &mut opts)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
}

/// The bytes of `path` when it is ours ([`open_ours`]); `None`: there is no such file.
pub fn read_ours(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(mut f) = open_ours(path)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(Some(out))
}

/// A new, empty file in `dir` named `.<stem>.tmp-<random>`, created exclusively without
/// following a link (`O_CREAT|O_EXCL|O_NOFOLLOW`), 0600; its path and the open file.
pub fn create_temp(dir: &Path, stem: &str) -> io::Result<(PathBuf, File)> {
    let mut random = [0u8; 12];
    getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!(".{stem}.tmp-{hex}"));
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .mode(0o600)
        .open(&path)?;
    Ok((path, f))
}

/// [`create_temp`] in the folder `path` will be in, named after it.
pub fn create_temp_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let stem = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    create_temp(dir, &stem)
}

/// Writes `data` to `path` as a complete new 0600 file: through [`create_temp_beside`], synced,
/// then renamed onto `path` (which replaces a link there rather than following it).
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let (tmp, mut f) = create_temp_beside(path)?;
    let done = f
        .write_all(data)
        .and_then(|()| f.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn untrusted(e: &io::Error) -> &Untrusted {
        e.get_ref()
            .and_then(|e| e.downcast_ref::<Untrusted>())
            .unwrap_or_else(|| panic!("not a refusal: {e}"))
    }

    #[test]
    fn a_write_replaces_a_link_at_the_target_and_leaves_what_it_pointed_at() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let target = d.path().join("doc.json");
        symlink(&victim, &target).unwrap();
        write_atomic(&target, b"new").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert!(!fs::symlink_metadata(&target).unwrap().is_symlink());
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o777, 0o600);
        let left: Vec<_> = fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file left behind");
    }

    #[test]
    fn temporary_names_are_fresh_and_never_follow_a_link() {
        let d = tempfile::tempdir().unwrap();
        let (a, _) = create_temp(d.path(), "x").unwrap();
        let (b, _) = create_temp(d.path(), "x").unwrap();
        assert_ne!(a, b);
        assert!(
            a.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(".x.tmp-")
        );
        // Opening a name that is a link fails even with O_CREAT (O_EXCL), its target untouched.
        let victim = d.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let link = d.path().join("link");
        symlink(&victim, &link).unwrap();
        let again = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&link);
        assert!(again.is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn reads_refuse_links_foreign_and_shared_files_naming_them() {
        let d = tempfile::tempdir().unwrap();
        let mine = d.path().join("mine.json");
        write_atomic(&mine, b"{}").unwrap();
        assert_eq!(read_ours(&mine).unwrap().unwrap(), b"{}");
        assert!(read_ours(&d.path().join("none")).unwrap().is_none());

        let link = d.path().join("link.json");
        symlink(&mine, &link).unwrap();
        let e = read_ours(&link).unwrap_err();
        assert!(matches!(untrusted(&e), Untrusted::Link { .. }), "{e}");
        assert!(
            e.to_string().contains("link.json is a symbolic link"),
            "{e}"
        );

        fs::set_permissions(&mine, fs::Permissions::from_mode(0o620)).unwrap();
        let e = read_ours(&mine).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");

        if euid() == 0 {
            fs::set_permissions(&mine, fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
            let e = read_ours(&mine).unwrap_err();
            assert!(
                e.to_string().contains("mine.json is owned by uid 65534"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_directory_is_created_private_or_refused_when_not_ours() {
        let d = tempfile::tempdir().unwrap();
        let fresh = d.path().join("a/b");
        ensure_private_dir(&fresh).unwrap();
        assert_eq!(fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);

        let shared = d.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure_private_dir(&shared).unwrap_err();
        assert!(matches!(untrusted(&e), Untrusted::Writable { .. }), "{e}");
        assert_eq!(
            fs::metadata(&shared).unwrap().mode() & 0o777,
            0o777,
            "not chmodded"
        );

        let link = d.path().join("link");
        symlink(&fresh, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err();
        assert!(matches!(untrusted(&e), Untrusted::Link { .. }), "{e}");
        let e = ensure_private_dir(&link.join("below")).unwrap_err();
        assert!(matches!(untrusted(&e), Untrusted::Link { .. }), "{e}");
        assert!(!fresh.join("below").exists());

        let e = ensure_private_dir(&d.path().join("a/../a")).unwrap_err();
        assert!(matches!(untrusted(&e), Untrusted::DotDot { .. }), "{e}");
    }
}
