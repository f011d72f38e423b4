//! Files moved or written into directories, told as it happens (inotify) on a thread of its
//! own, whose blocking reads need no runtime: the gateway's watch of the session documents, a
//! pool controller's wait for a claim, the local pool's wait for something to refill.

use std::path::Path;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// What happened in a watched directory.
#[derive(Debug)]
pub enum Change<'a> {
    /// A file of this name was moved in, or written and closed.
    File(&'a str),
    /// Events were lost (the kernel's queue overflowed): anything may have changed.
    Overflow,
    /// Reading the events failed: this is the watch's last call.
    Failed(std::io::Error),
}

/// Watches `dirs` (which must exist): `on_change` is called on a thread named `thread` for
/// every file moved or written into one of them (a rename in, or a write closed), until it
/// answers false. It is asked at each event, so the thread ends at the first event after its
/// caller lost interest (a thread blocked on the read costs nothing meanwhile).
pub fn watch(
    dirs: &[&Path],
    thread: &str,
    mut on_change: impl FnMut(Change<'_>) -> bool + Send + 'static,
) -> std::io::Result<()> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    for dir in dirs {
        inotify.add_watch(
            *dir,
            AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE,
        )?;
    }
    std::thread::Builder::new()
        .name(thread.to_owned())
        .spawn(move || {
            loop {
                let events = match inotify.read_events() {
                    Ok(events) => events,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        on_change(Change::Failed(e.into()));
                        return;
                    }
                };
                for e in events {
                    if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) && !on_change(Change::Overflow)
                    {
                        return;
                    }
                    let name = e.name.as_ref().and_then(|n| n.to_str());
                    if let Some(name) = name
                        && !on_change(Change::File(name))
                    {
                        return;
                    }
                }
            }
        })?;
    Ok(())
}
