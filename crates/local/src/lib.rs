//! File and process work on the contract's shapes, shared by the local platform (the control
//! plane's `serve`) and the controller, kept out of the contract so it holds shapes, rules and
//! names only.
//!
//! - [`claim_queue`]: the local platform's queue of claims, a directory with SQS's semantics
//!   ([`claim_queue::DirQueue`]).
//! - [`browser`]: which Chromium build a browser binary is (the full browser or a headless
//!   shell).
//! - [`dir_watch`]: files moved or written into a directory, told as it happens (inotify).
//! - [`chrome_uids`]: the uid of its own each Chrome runs as when its controller is root:
//!   handed out under a lock, and taken back (what still runs as it is killed).
//! - [`extension_unpack`]: an extension archive that passes the contract's checks, written
//!   into a new folder.
//! - [`mp4`]: a recorded page's segments joined into one MP4 by ffmpeg.
//! - [`session_dir`]: the local platform's session table, one document per session in a
//!   directory ([`session_dir::DirStore`]: conditional updates under a file lock).
//! - [`private_fs`]: the local platform's files ours or refused: its directory checked, files
//!   read without following links, written through exclusive random temporary names.
//!
//! Plain blocking `std::fs`; every file goes through [`private_fs`].
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

pub mod browser;
pub mod chrome_uids;
pub mod claim_queue;
pub mod dir_watch;
pub mod extension_unpack;
pub mod mp4;
pub mod private_fs;
pub mod session_dir;
