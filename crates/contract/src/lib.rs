//! The wire contract shared by the Wallcrawler controller and the control plane.
//!
//! Plain data and pure functions, no async runtime, so both sides agree on the same rules
//! without the control plane depending on the proxy's runtime, and no I/O: the file and
//! process work on these shapes is the local crate's (`wallcrawler-local`: the claims queue and
//! session directories, private files, Chrome's uids, unpacking an extension archive).
//!
//! - [`token`]: the CDP access token (EdDSA JWT), in two files: the JWT mechanics every
//!   credential shares (the key pair, signing, the structure, header and signature rules) and
//!   the claims (the registered claims and their rules, the token's own and its acceptance).
//! - [`viewer`]: the live view's credential (EdDSA JWT of its own audience, `view` or
//!   `control`, optionally one page): its own claims and rules, on the token's mechanics and
//!   registered claims.
//! - [`extension_archive`]: the checks an extension archive (a zip) passes and its limits, on
//!   both sides (the local crate unpacks it).
//! - [`browser`]: the browser a session asked for (viewport, locales, certificate errors, ad
//!   blocking), as the control plane hands it to the session's controller.
//! - [`claim`]: how a session reaches a warm pool controller (the local queue of claims is the
//!   local crate's).
//! - [`egress`]: a session's egress — its proxy routes and allowed top-level domains — as
//!   the control plane hands it to the session's controller, and the rules both apply.
//! - [`events`]: the session events (created, ready, ended) the sessions-stream processor
//!   publishes, and which change of the session item makes which.
//! - [`recording`]: a session's recording: the per-page HLS segments and index the controller
//!   stores, the playlist made from them, and the MP4 download's state.
//! - [`retry`]: the one retry policy, and which failures are transient.
//! - [`secret`]: the JSON shapes of the signing (private) and public key secrets in Secrets
//!   Manager.
//! - [`session`]: the session item's lifecycle statuses and their SDK-visible mapping.
//! - [`session_doc`]: the session item as a document (the local platform's directory of them is
//!   the local crate's).
//! - [`session_log`]: a session's log entries (Browserbase's `SessionLog`), where they are
//!   stored, and the redaction every entry passes.
//! - [`storage`]: the S3 key layout of context profile archives.
//! - [`task_api`]: how a task on AWS takes its claim and its session's credentials from the
//!   control plane (its identity: a signed STS request).
//! - [`task_env`]: the environment variable names the control plane hands a controller.
//! - [`time`]: ISO 8601 timestamps as the session table stores them.
//! - [`whole`]: whole-number attributes, read back even when another tool wrote `1.7e9`.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

pub mod browser;
pub mod claim;
pub mod egress;
pub mod events;
pub mod extension_archive;
pub mod recording;
pub mod retry;
pub mod secret;
pub mod session;
pub mod session_doc;
pub mod session_log;
pub mod storage;
pub mod task_api;
pub mod task_env;
pub mod time;
pub mod token;
pub mod viewer;
pub mod whole;

pub use session::{InternalStatus, SdkStatus};
pub use token::{Claims, SigningKey, TokenError, Validation, VerifyingKey};
