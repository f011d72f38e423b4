//! Whether Chrome's sandbox can run here, decided at each launch.
//!
//! Debian's Chromium ships no setuid `chrome-sandbox` helper, so its only sandbox is the
//! namespace one: the zygote clones renderers into new user, PID and network namespaces and
//! then applies its seccomp-bpf filters. That needs (a) a non-root user (Chrome refuses to run
//! as root without `--no-sandbox`) and (b) unprivileged user namespaces, which a container
//! runtime's seccomp profile may refuse (Docker's default profile refuses `clone` with
//! namespace flags without CAP_SYS_ADMIN, which Fargate does not grant). Without both, Chrome
//! would exit at start ("No usable sandbox!"), so the controller adds `--no-sandbox` then and
//! says why in the log. A flags file that already has `--no-sandbox` keeps it unconditionally.
//!
//! Both are asked of Chrome's user, not the controller's: with `CHROME_USER` a root controller
//! launches Chrome as another uid, and the probe runs as that uid too (measured here with
//! Chromium 156 as uid 65534: the sandbox starts).

use std::fmt;

use nix::sched::CloneFlags;
use nix::sys::wait::{WaitStatus, waitpid};

use super::user::ChromeUser;

/// The flag that turns the sandbox off.
pub const NO_SANDBOX: &str = "--no-sandbox";

/// Why the sandbox is on or off for a launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Namespaces are available and Chrome's user is not root: Chrome sandboxes its renderers.
    On,
    /// The flags file has `--no-sandbox`.
    OffByFlag,
    /// Chrome runs as root.
    OffAsRoot,
    /// Creating user+PID+network namespaces failed with this error.
    OffNoNamespaces(nix::errno::Errno),
}

impl Decision {
    /// Whether the sandbox is on for this launch.
    pub fn enabled(&self) -> bool {
        matches!(self, Self::On)
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::On => f.write_str("on (user namespaces + seccomp-bpf)"),
            Self::OffByFlag => f.write_str("off (--no-sandbox in the flags file)"),
            Self::OffAsRoot => f.write_str("off (running as root)"),
            Self::OffNoNamespaces(e) => {
                write!(f, "off (cannot create user namespaces: {e})")
            }
        }
    }
}

/// Decides for a launch with `flags`, of Chrome as `user` (`None`: as this process).
pub fn decide(flags: &[String], user: Option<&ChromeUser>) -> Decision {
    if flags.iter().any(|f| f == NO_SANDBOX) {
        return Decision::OffByFlag;
    }
    let uid = user.map_or_else(nix::unistd::geteuid, |u| u.uid);
    if uid.is_root() {
        return Decision::OffAsRoot;
    }
    match probe_namespaces(user) {
        Ok(()) => Decision::On,
        Err(e) => Decision::OffNoNamespaces(e),
    }
}

/// Does what Chrome's zygote does first, as Chrome's `user` (`None`: as this process): a
/// child (switched to that user) unshares into new user, PID and network namespaces. A root
/// process could create them where Chrome's user cannot, hence the switch. The child exits at
/// once with the error number (0: created); it is reaped here.
#[allow(unsafe_code)]
pub fn probe_namespaces(user: Option<&ChromeUser>) -> Result<(), nix::errno::Errno> {
    let mut stack = vec![0u8; 64 * 1024];
    let flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNET;
    let user = user.copied();
    let child = move || -> isize {
        if let Some(Err(e)) = user.map(|u| u.become_user()) {
            return e.raw_os_error().unwrap_or(nix::errno::Errno::EPERM as i32) as isize;
        }
        match nix::sched::unshare(flags) {
            Ok(()) => 0,
            Err(e) => e as isize,
        }
    };
    // SAFETY: the child (a copy of this process, sharing no memory) runs only this closure,
    // which makes four system calls (the kernel's, see `become_user`) and allocates nothing,
    // takes no locks and touches nothing shared with the parent's threads; its stack is the
    // buffer above, far larger than it needs.
    let pid = unsafe {
        nix::sched::clone(
            Box::new(child),
            &mut stack,
            CloneFlags::empty(),
            Some(nix::sys::signal::Signal::SIGCHLD as i32),
        )
    }?;
    match waitpid(pid, None)? {
        WaitStatus::Exited(_, 0) => Ok(()),
        WaitStatus::Exited(_, code) => Err(nix::errno::Errno::from_raw(code)),
        _ => Err(nix::errno::Errno::ECHILD),
    }
}

/// The flags for the launch: `flags`, plus `--no-sandbox` when the decision is off.
pub fn apply(mut flags: Vec<String>, decision: &Decision) -> Vec<String> {
    if !decision.enabled() && !flags.iter().any(|f| f == NO_SANDBOX) {
        flags.push(NO_SANDBOX.to_owned());
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_no_sandbox_flag_wins_and_off_adds_the_flag_once() {
        let with = vec![NO_SANDBOX.to_owned()];
        assert_eq!(decide(&with, None), Decision::OffByFlag);
        assert_eq!(apply(with.clone(), &Decision::OffByFlag), with);
        assert_eq!(apply(vec![], &Decision::OffAsRoot), with);
        assert_eq!(
            apply(vec![], &Decision::OffNoNamespaces(nix::errno::Errno::EPERM)),
            with
        );
        assert!(apply(vec![], &Decision::On).is_empty());
    }

    #[test]
    fn root_never_gets_the_sandbox() {
        if nix::unistd::geteuid().is_root() {
            assert_eq!(decide(&[], None), Decision::OffAsRoot);
        } else {
            assert!(matches!(
                decide(&[], None),
                Decision::On | Decision::OffNoNamespaces(_)
            ));
        }
    }

    #[test]
    fn chrome_as_another_user_is_decided_by_that_user() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        // Root here, Chrome as nobody: the sandbox is on (namespaces work here, see below).
        let nobody = ChromeUser::parse("65534:65534").unwrap();
        assert_eq!(decide(&[], Some(&nobody)), Decision::On);
        assert_eq!(probe_namespaces(Some(&nobody)), Ok(()));
    }

    #[test]
    fn the_probe_succeeds_where_namespaces_work() {
        // Our test machines allow user namespaces (ENVIRONMENT.md: `unshare --net` works), so
        // the probe must say so, twice (its child is reaped, nothing is left behind).
        assert_eq!(probe_namespaces(None), Ok(()));
        assert_eq!(probe_namespaces(None), Ok(()));
    }
}
