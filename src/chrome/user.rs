//! Chrome's own user (`CHROME_USER`): Chrome runs as another uid/gid than the controller, so
//! what a page or a client reaches through Chrome (`DOM.setFileInputFiles`, a renderer bug) is
//! limited to what that user can read — not the controller's configuration, the local
//! platform's `local.json`, nor `/proc/<controller>/environ`.
//!
//! Chrome never runs as root: `CHROME_USER` may not name uid 0, and a controller running as
//! root with no `CHROME_USER` runs Chrome as a uid:gid of its own ([`OwnUid`], from
//! [`chrome_uids`]' default range), held for the controller's life. A controller started
//! unprivileged with no `CHROME_USER` runs Chrome as its own user.
//!
//! The controller must then be able to switch users and to own and read Chrome's files (root,
//! or `CAP_SETUID`, `CAP_SETGID`, `CAP_CHOWN` and `CAP_DAC_OVERRIDE`): it checks that at start.
//! It hands Chrome the profile (the whole tree, after a restore) and the session's directories
//! beside it (`<profile>-files`):
//!
//! | path | owner | mode | why |
//! |---|---|---|---|
//! | `<profile>` | Chrome | 0700 | another uid's Chrome (the local platform's) cannot read it |
//! | `<profile>` (tree below) | Chrome | as unpacked | Chrome writes its profile; the save reads it as root |
//! | `<profile>-files` | root:Chrome's group | 0710 | Chrome may enter, not rename what is inside |
//! | `…/uploads` | root:Chrome's group | 2750 | Chrome reads uploads; only the controller writes them |
//! | `…/downloads` | Chrome | 0700 | Chrome writes downloads |
//! | `…/home` | Chrome | 0700 | Chrome's `HOME` (caches, `~/.pki`), kept out of the profile |
//!
//! `TMPDIR` stays the system's (`/tmp`, or the operator's): Chrome puts its singleton socket
//! there, whose path must fit a socket address (108 bytes), which one beside the profile
//! would not.
//!
//! The directories the controller writes into stay its own, so a Chrome that swapped one for
//! a symlink could not redirect the controller's writes. Ownership is changed through
//! directory descriptors opened with `O_NOFOLLOW` and `fchownat(AT_SYMLINK_NOFOLLOW)`: a link
//! in the tree (or one swapped in during the walk) is never followed.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{Gid, Uid, User, fchown, fchownat};
use rustix::thread::CapabilitySet;
use wallcrawler_local::chrome_uids::{self, ChromeUids, UidError};

/// Deepest directory nesting handed over; a tar path is at most 4096 bytes, so a real profile
/// is far shallower.
const MAX_DEPTH: usize = 512;

/// What the controller needs to run Chrome as another user.
const NEEDED: [(CapabilitySet, &str); 4] = [
    (CapabilitySet::SETUID, "CAP_SETUID"),
    (CapabilitySet::SETGID, "CAP_SETGID"),
    (CapabilitySet::CHOWN, "CAP_CHOWN"),
    (CapabilitySet::DAC_OVERRIDE, "CAP_DAC_OVERRIDE"),
];

/// What can go wrong with `CHROME_USER`.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// Neither `uid:gid` nor a user known to the system.
    #[error("CHROME_USER must be uid:gid or a user name known to this system, got {0:?}")]
    Unknown(String),
    /// uid 0: Chrome would run as root, which is what the setting is there to avoid.
    #[error("CHROME_USER must not be root (uid 0)")]
    Root,
    /// The controller cannot switch to the user or own its files.
    #[error(
        "CHROME_USER is set but this process lacks {0} (run the controller as root, or give it these capabilities)"
    )]
    Privileges(String),
}

/// The uid and gid Chrome runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChromeUser {
    /// Chrome's uid.
    pub uid: Uid,
    /// Chrome's gid (its only group).
    pub gid: Gid,
}

impl ChromeUser {
    /// Parses `uid:gid` (numbers) or a user name (its uid and primary group, from the system's
    /// user database).
    pub fn parse(text: &str) -> Result<Self, UserError> {
        let unknown = || UserError::Unknown(text.to_owned());
        let user = match text.split_once(':') {
            Some((u, g)) => Self {
                uid: Uid::from_raw(u.parse().map_err(|_| unknown())?),
                gid: Gid::from_raw(g.parse().map_err(|_| unknown())?),
            },
            None => {
                let u = User::from_name(text).ok().flatten().ok_or_else(unknown)?;
                Self {
                    uid: u.uid,
                    gid: u.gid,
                }
            }
        };
        if user.uid.is_root() {
            return Err(UserError::Root);
        }
        Ok(user)
    }

    /// Checks that this process can launch Chrome as another user and own its files.
    pub fn check_privileges() -> Result<(), UserError> {
        let effective = rustix::thread::capabilities(None)
            .map(|c| c.effective)
            .unwrap_or(CapabilitySet::empty());
        let missing: Vec<&str> = NEEDED
            .iter()
            .filter(|(cap, _)| !effective.contains(*cap))
            .map(|(_, name)| *name)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(UserError::Privileges(missing.join(", ")))
        }
    }

    /// Makes the calling thread this user: its only group, its gid, then its uid. For a child
    /// about to exec (or exit), single-threaded: these are the kernel's per-thread calls, not
    /// the C library's, which signal every thread the library believes exists — in a child
    /// cloned from a multi-threaded process those are gone, and it would wait forever.
    pub fn become_user(&self) -> std::io::Result<()> {
        let gid = rustix::process::Gid::from_raw(self.gid.as_raw());
        rustix::thread::set_thread_groups(&[gid])?;
        rustix::thread::set_thread_gid(gid)?;
        rustix::thread::set_thread_uid(rustix::process::Uid::from_raw(self.uid.as_raw()))?;
        Ok(())
    }

    /// Hands Chrome its directories (see the module's table); Chrome's `HOME`.
    pub fn prepare(&self, user_data_dir: &Path) -> std::io::Result<PathBuf> {
        self.give_tree(user_data_dir)?;
        // The profile (cookies, logins) is its Chrome's alone: on the local platform another
        // session's Chrome runs as another uid, and the folder was made as the umask said.
        let profile = open_dir(nix::fcntl::AT_FDCWD, user_data_dir)?;
        nix::sys::stat::fchmod(&profile, Mode::from_bits_truncate(0o700))?;
        let files = crate::file_rules::files_dir(user_data_dir);
        self.dir(&files, false, 0o710)?;
        self.dir(&files.join("uploads"), false, 0o2750)?;
        self.dir(&files.join("downloads"), true, 0o700)?;
        let home = files.join("home");
        self.dir(&home, true, 0o700)?;
        Ok(home)
    }

    /// Creates `path` if missing, owned by Chrome (`chrome_owns`) or by this process with
    /// Chrome's group, with `mode`.
    fn dir(&self, path: &Path, chrome_owns: bool, mode: u32) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
        let fd = open_dir(nix::fcntl::AT_FDCWD, path)?;
        let owner = chrome_owns.then_some(self.uid);
        fchown(&fd, owner.or(Some(nix::unistd::geteuid())), Some(self.gid))?;
        // After the chown, which clears the setgid bit.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }

    /// Makes Chrome the owner of `dir` and everything under it, following no link.
    pub fn give_tree(&self, dir: &Path) -> std::io::Result<()> {
        let fd = open_dir(nix::fcntl::AT_FDCWD, dir)?;
        self.give_dir(fd, 0)
    }

    fn give_dir(&self, dir: OwnedFd, depth: usize) -> std::io::Result<()> {
        if depth > MAX_DEPTH {
            return Err(std::io::Error::other("directory tree too deep"));
        }
        fchown(&dir, Some(self.uid), Some(self.gid))?;
        // The names first: the listing's descriptor shares its offset with `dir`.
        let mut names = Vec::new();
        for entry in Dir::from_fd(dir.try_clone()?)?.into_iter() {
            let entry = entry?;
            let name = entry.file_name();
            if name != c"." && name != c".." {
                names.push((name.to_owned(), entry.file_type()));
            }
        }
        for (name, kind) in names {
            if is_dir(&dir, &name, kind)? {
                self.give_dir(open_dir(&dir, name.as_c_str())?, depth + 1)?;
            } else {
                fchownat(
                    &dir,
                    name.as_c_str(),
                    Some(self.uid),
                    Some(self.gid),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
            }
        }
        Ok(())
    }
}

/// The uid:gid of Chrome's own a root controller with no `CHROME_USER` holds for its life:
/// dropped at its end, what still runs as it is killed and the uid is free again.
#[derive(Debug)]
pub struct OwnUid {
    uids: ChromeUids,
    uid: u32,
}

impl OwnUid {
    /// A uid no account, process or other controller uses, from [`chrome_uids::DEFAULT_UIDS`]
    /// (locked in [`chrome_uids::LOCK_DIR`], shared with the local platform's `serve`).
    pub fn take() -> Result<Self, UidError> {
        let uids = ChromeUids::new(None, Path::new(chrome_uids::LOCK_DIR))?;
        let uid = uids.take()?;
        Ok(Self { uids, uid })
    }

    /// Chrome's user: the uid, and the same number as its only group.
    pub fn user(&self) -> ChromeUser {
        ChromeUser {
            uid: Uid::from_raw(self.uid),
            gid: Gid::from_raw(self.uid),
        }
    }
}

impl Drop for OwnUid {
    fn drop(&mut self) {
        self.uids.release(self.uid);
    }
}

/// Whether `name` in `dir` is a directory (not a link to one), asking the file system when the
/// listing does not say.
fn is_dir(dir: &OwnedFd, name: &CStr, kind: Option<Type>) -> std::io::Result<bool> {
    Ok(match kind {
        Some(t) => t == Type::Directory,
        None => {
            let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
            SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
        }
    })
}

/// Opens the directory `path` relative to `at`, refusing a symlink in its last component.
fn open_dir<Fd: AsFd, P: ?Sized + nix::NixPath>(at: Fd, path: &P) -> std::io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::openat(at, path, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn uid_gid_and_names_parse_and_root_is_refused() {
        let u = ChromeUser::parse("65534:65534").unwrap();
        assert_eq!((u.uid.as_raw(), u.gid.as_raw()), (65534, 65534));
        assert_eq!(ChromeUser::parse("nobody").unwrap().uid.as_raw(), 65534);
        assert!(matches!(ChromeUser::parse("0:0"), Err(UserError::Root)));
        assert!(matches!(ChromeUser::parse("root"), Err(UserError::Root)));
        for bad in ["x:1", "1:", "no-such-user-here", "1:2:3"] {
            assert!(
                matches!(ChromeUser::parse(bad), Err(UserError::Unknown(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_tree_is_handed_over_without_following_links() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let user = ChromeUser::parse("65534:65534").unwrap();
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "x").unwrap();
        let profile = root.path().join("p");
        std::fs::create_dir_all(profile.join("Default/Cache")).unwrap();
        std::fs::write(profile.join("Default/Cookies"), "c").unwrap();
        std::os::unix::fs::symlink(&secret, profile.join("Default/link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), profile.join("dirlink")).unwrap();
        user.give_tree(&profile).unwrap();
        for p in ["", "Default", "Default/Cache", "Default/Cookies"] {
            let m = std::fs::symlink_metadata(profile.join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), (65534, 65534), "{p}");
        }
        let link = std::fs::symlink_metadata(profile.join("Default/link")).unwrap();
        assert_eq!(link.uid(), 65534, "the link itself is handed over");
        for p in [secret.as_path(), outside.path()] {
            assert_eq!(std::fs::metadata(p).unwrap().uid(), 0, "{}", p.display());
        }
        // A symlink given as the tree itself is refused, not followed.
        assert!(user.give_tree(&profile.join("dirlink")).is_err());
    }

    #[test]
    fn the_session_directories_get_their_owners_and_modes() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let user = ChromeUser::parse("65534:65534").unwrap();
        let root = tempfile::tempdir().unwrap();
        let profile = root.path().join("p");
        std::fs::create_dir(&profile).unwrap();
        let home = user.prepare(&profile).unwrap();
        let files = crate::file_rules::files_dir(&profile);
        assert_eq!(home, files.join("home"));
        for (p, uid, mode) in [
            (profile.clone(), 65534, Some(0o700)),
            (files.clone(), 0, Some(0o710)),
            (files.join("uploads"), 0, Some(0o2750)),
            (files.join("downloads"), 65534, Some(0o700)),
            (home, 65534, Some(0o700)),
        ] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!((m.uid(), m.gid()), (uid, 65534), "{}", p.display());
            if let Some(mode) = mode {
                assert_eq!(m.mode() & 0o7777, mode, "{}", p.display());
            }
        }
    }

    #[test]
    fn privileges_are_checked() {
        // Tests run as root here, with every capability.
        if nix::unistd::geteuid().is_root() {
            ChromeUser::check_privileges().unwrap();
        } else {
            assert!(matches!(
                ChromeUser::check_privileges(),
                Err(UserError::Privileges(_))
            ));
        }
    }
}
