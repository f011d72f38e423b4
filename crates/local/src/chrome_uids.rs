//! One uid per Chrome: a controller started as root never runs Chrome as root. The local
//! platform's `serve` started as root gives each controller's Chrome a uid:gid of its own (the
//! same number for both, passed as `CHROME_USER`), so a compromised Chrome cannot read another
//! session's profile (its cookies and logins, 0700 its owner's) nor signal or ptrace the other
//! browsers, as it could when they all shared one user. A controller started as root with no
//! `CHROME_USER` (`local`, `run`) takes its Chrome's uid from the same allocator, so it cannot
//! read the controller's files nor `/proc/<controller>/environ` either.
//!
//! The uids come from `LOCAL_CHROME_UIDS=<first>-<last>` (default [`DEFAULT_UIDS`], far above
//! the accounts of a normal system, below 2^31 where some tools treat uids as signed). A uid
//! is handed out only when no account uses it (`/etc/passwd`, nor as a gid `/etc/group`), no
//! running process uses it (`/proc/*/status`: real, effective, saved or file-system uid or
//! gid), and no other controller holds it — of this server, or of another `serve` running
//! as root on the machine: a holder keeps `<lock dir>/<uid>` locked (`flock`, in
//! [`LOCK_DIR`], a directory of root's alone), which covers the moment before its Chrome
//! runs. When the controller ends its uid is released: any process still running as it is
//! killed first, so the next holder shares nothing with the last.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::private_fs;

/// The setting naming the range (`<first>-<last>`, inclusive).
pub const LOCAL_CHROME_UIDS: &str = "LOCAL_CHROME_UIDS";

/// The range used when `LOCAL_CHROME_UIDS` is not set.
pub const DEFAULT_UIDS: &str = "1900000000-1900009999";

/// Where holders lock their uids (made 0700, ours or refused: [`private_fs`]).
pub const LOCK_DIR: &str = "/run/wallcrawler-chrome-uids";

/// The smallest first uid accepted: below it live the system's and people's accounts.
const LOWEST: u32 = 100_000;

/// What can go wrong handing out uids.
#[derive(Debug, thiserror::Error)]
pub enum UidError {
    /// The setting is not a range this module accepts.
    #[error(
        "{LOCAL_CHROME_UIDS} must be <first>-<last> with {LOWEST} <= first <= last < 2147483648, got {0:?}"
    )]
    Range(String),
    /// Every uid of the range is in use.
    #[error("no free uid left in {LOCAL_CHROME_UIDS} {first}-{last}")]
    Exhausted {
        /// The range's first uid.
        first: u32,
        /// Its last.
        last: u32,
    },
    /// The directory for the profiles of Chrome's own users could not be made.
    #[error("a directory for the profiles of Chrome's own users under {path}: {source}")]
    Profiles {
        /// Where it was to be made.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The lock directory is not ours alone, or a lock could not be taken.
    #[error("the uid locks in {path}: {source}")]
    Locks {
        /// The directory or lock file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
}

/// The uids of the range and those this server holds (with their locks).
#[derive(Debug)]
pub struct ChromeUids {
    first: u32,
    last: u32,
    locks: PathBuf,
    held: Mutex<BTreeMap<u32, File>>,
}

impl ChromeUids {
    /// The range `text` names (`None`: [`DEFAULT_UIDS`]), its holders' locks in `locks`
    /// (created when missing).
    pub fn new(text: Option<&str>, locks: &Path) -> Result<Self, UidError> {
        let (first, last) = parse_range(text)?;
        private_fs::ensure_private_dir(locks).map_err(|source| UidError::Locks {
            path: locks.to_owned(),
            source,
        })?;
        Ok(Self {
            first,
            last,
            locks: locks.to_owned(),
            held: Mutex::new(BTreeMap::new()),
        })
    }

    /// A uid of the range no account, no process and no other controller uses, held until
    /// [`ChromeUids::release`].
    pub fn take(&self) -> Result<u32, UidError> {
        let used = used_uids();
        let mut held = self.held.lock().expect("not poisoned");
        for uid in self.first..=self.last {
            if held.contains_key(&uid) || used.contains(&uid) {
                continue;
            }
            if let Some(lock) = self.lock(uid)? {
                held.insert(uid, lock);
                return Ok(uid);
            }
        }
        Err(UidError::Exhausted {
            first: self.first,
            last: self.last,
        })
    }

    /// `<locks>/<uid>` locked for us; `None`: another server holds it.
    fn lock(&self, uid: u32) -> Result<Option<File>, UidError> {
        let path = self.locks.join(uid.to_string());
        let failed = |source| UidError::Locks {
            path: path.clone(),
            source,
        };
        let f = private_fs::open_lock(&path).map_err(failed)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(f)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(failed(e)),
        }
    }

    /// The controller holding `uid` ended: what still runs as it is killed, then it is free.
    pub fn release(&self, uid: u32) {
        for pid in processes_of(uid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Dropping the file gives its lock back.
        self.held.lock().expect("not poisoned").remove(&uid);
    }
}

/// `<first>-<last>` (`None`: [`DEFAULT_UIDS`]).
fn parse_range(text: Option<&str>) -> Result<(u32, u32), UidError> {
    let text = text.unwrap_or(DEFAULT_UIDS);
    let bad = || UidError::Range(text.to_owned());
    let (first, last) = text.trim().split_once('-').ok_or_else(bad)?;
    let first: u32 = first.trim().parse().map_err(|_| bad())?;
    let last: u32 = last.trim().parse().map_err(|_| bad())?;
    if first < LOWEST || first > last || last > i32::MAX as u32 {
        return Err(bad());
    }
    Ok((first, last))
}

/// The ids in the third field of each line of an `/etc/passwd` or `/etc/group` text.
fn ids_of_accounts(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.lines()
        .filter_map(|l| l.split(':').nth(2).and_then(|n| n.parse().ok()))
}

/// The numbers of the `Uid:` and `Gid:` lines of a `/proc/<pid>/status` text.
fn ids_of_process(status: &str) -> impl Iterator<Item = u32> + '_ {
    status
        .lines()
        .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
        .flat_map(|l| l.split_whitespace().skip(1).filter_map(|n| n.parse().ok()))
}

/// `(pid, status text)` of every process running now.
fn processes() -> impl Iterator<Item = (i32, String)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            Some((pid, std::fs::read_to_string(e.path().join("status")).ok()?))
        })
}

/// Every uid and gid an account or a running process uses.
fn used_uids() -> BTreeSet<u32> {
    let mut used = BTreeSet::new();
    for file in ["/etc/passwd", "/etc/group"] {
        used.extend(ids_of_accounts(
            &std::fs::read_to_string(file).unwrap_or_default(),
        ));
    }
    for (_, status) in processes() {
        used.extend(ids_of_process(&status));
    }
    used
}

/// The processes running with `uid` as any of their uids.
fn processes_of(uid: u32) -> Vec<i32> {
    processes()
        .filter(|(_, status)| ids_of_process(status).any(|u| u == uid))
        .map(|(pid, _)| pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_range(None).unwrap(), (1_900_000_000, 1_900_009_999));
        assert_eq!(
            parse_range(Some("200000-200001")).unwrap(),
            (200_000, 200_001)
        );
        for bad in [
            "",
            "5",
            "1000-2000",
            "300000-200000",
            "200000-4294967295",
            "a-b",
        ] {
            let e = parse_range(Some(bad)).unwrap_err();
            assert!(e.to_string().contains(LOCAL_CHROME_UIDS), "{bad}: {e}");
        }
    }

    #[test]
    fn accounts_and_processes_name_their_ids() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/bin/false\n";
        assert_eq!(ids_of_accounts(passwd).collect::<Vec<_>>(), [0, 65534]);
        let status = "Name:\tcat\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\nGroups:\t9\n";
        assert_eq!(
            ids_of_process(status).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
    }

    /// A uid a running process uses is passed over; one held (here or by another server) is
    /// not handed out twice; a released one is handed out again, what ran as it killed.
    #[test]
    fn a_uid_in_use_is_never_handed_out() {
        use std::os::unix::process::CommandExt;
        if !nix::unistd::geteuid().is_root() {
            return; // Running a process as another uid needs root.
        }
        let locks = tempfile::tempdir().unwrap();
        let ids = ChromeUids::new(Some("1900100000-1900100003"), locks.path()).unwrap();
        let other = ChromeUids::new(Some("1900100003-1900100003"), locks.path()).unwrap();
        assert_eq!(other.take().unwrap(), 1_900_100_003, "another server's");
        let mut squatter = std::process::Command::new("sleep")
            .arg("600")
            .uid(1_900_100_000)
            .gid(1_900_100_000)
            .spawn()
            .unwrap();
        let a = ids.take().unwrap();
        assert_eq!(a, 1_900_100_001, "the squatter's uid is passed over");
        let _ = squatter.kill();
        let _ = squatter.wait();
        let b = ids.take().unwrap();
        assert_eq!(b, 1_900_100_000, "free again once the squatter is gone");
        assert_eq!(ids.take().unwrap(), 1_900_100_002);
        assert!(matches!(ids.take(), Err(UidError::Exhausted { .. })));
        other.release(1_900_100_003);
        assert_eq!(ids.take().unwrap(), 1_900_100_003);

        let mut left = std::process::Command::new("sleep")
            .arg("600")
            .uid(a)
            .gid(a)
            .spawn()
            .unwrap();
        ids.release(a);
        let status = left.wait().unwrap();
        assert!(!status.success(), "killed at release: {status}");
        assert_eq!(ids.take().unwrap(), a);
    }
}
