//! Wallcrawler's per-task browser controller.
//!
//! One process per ECS task: it runs Chrome with DevTools on loopback only and exposes it
//! through an authenticating WebSocket proxy. Map of the modules:
//!
//! - [`config`]: flags and environment variables → checked configuration (exit 64 on errors).
//! - [`telemetry`]: logging to stderr and the proxy's Prometheus metrics.
//! - [`auth`]: token extraction from requests and validation against the public keys
//!   (the rules themselves live in the shared `wallcrawler-contract` crate), and the cache of
//!   tokens whose signature was verified ([`auth::token_cache`]: a reconnect skips the
//!   signature check, never the claim rules; the task's and the gateway's).
//! - [`edge`]: what every listener shares — accept, admission, the connection driver, the
//!   request head, routes, refusals, the PROXY v2 header, WebSocket frames, the relay thread
//!   and the TLS copy; the proxy and the gateway are siblings on top of it.
//! - [`proxy`]: a task's CDP door: the upgrade to Chrome, discovery rewriting, the inspector
//!   and its guard, the DevTools frontend, health.
//! - [`file_rules`]: where a session's files may be (its uploads and downloads directories).
//! - [`upstream`]: the CDP endpoint behind the proxy (dialled in its network) and a tiny HTTP
//!   client for `/json/*`.
//! - [`netns`]: Chrome's private network namespace (`CHROME_NETWORK`) and the sockets made in it.
//! - [`chrome`]: finding, launching (as its own user, `CHROME_USER`, in a network of its own,
//!   `CHROME_NETWORK`, with its SOCKS5 egress), readiness, supervision and clean closing of
//!   Chrome.
//! - [`cdp`]: a minimal CDP client for the controller's own commands to Chrome (closing it,
//!   cookies, downloads, the extension, the viewer's screencasts).
//! - [`browser`]: a browser behind the proxy (Chrome and its listener; a warm one before any
//!   session has it), or the proxy alone.
//! - [`shutdown`]: the root cancellation token, the tracker every task runs on, and the
//!   shutdown budget as named steps with their deadlines.
//! - [`session`]: one session's lifecycle, the steps both drivers of `run` take (session item,
//!   public key secret, profile, extension, READY, the downloads captured and stored, the end
//!   sequence), and how a run ends ([`session::Ending`]: the terminal writes and the exit
//!   status, in one place).
//! - [`modes`]: the drivers `cli` chooses between: `local`, `run` (one session's task, or a pool
//!   controller: a warm browser waiting for a claim, then the claimed session), `proxy` and
//!   `gateway`.
//! - [`profile`]: the profile archive, packed and (safely) unpacked, and streamed to and from
//!   its store (and a local directory of archives).
//! - [`secrets`]: the Secrets Manager key cache (TTL, coalescing, rotation).
//! - [`public_ip`]: which address the task announces.
//! - [`stores`]: the narrow interfaces to outside services, and the local platform's session
//!   and claim directories.
//! - [`aws`]: the AWS SDK adapters behind those interfaces.
//! - [`gateway`]: the connect gateway: one listener for every session, routed by the token's
//!   session to its task's proxy (token check, session lookup, holding, relay).
//! - [`scale_in`]: a claimed pool task's protection from the service's scale-in.
//! - [`task_api`]: the control plane's task API as a task on AWS calls it (`TASK_API_URL`):
//!   a pool task's claims, a task's session credentials.
//! - [`session_log`]: the session's log: the proxy's copies of its clients' CDP traffic,
//!   queued without blocking the relay, matched into entries and stored in batches.
//! - [`recording`]: the session's recording: each page's screencast encoded by ffmpeg into
//!   HLS segments stored as the session runs.
//! - [`session_credentials`]: those credentials, as the SDK clients of the session's services
//!   ask for them (refreshed before they expire).
//! - [`tls`]: the connect gateway's TLS: a certificate read again from its PEM files when they
//!   change, and the local platform's certificate authority.
//! - [`viewer`]: the live viewer on the proxy: its page, its socket, one screencast per
//!   watched page shared by its viewers.
//! - [`cli`]: the subcommands as `main` runs them.
//!
//! Modules only the controller itself uses are private to the crate; the public ones are what
//! the binary, the integration tests, the benches and the examples drive.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

/// The `User-Agent` of every HTTP request the controller makes to a service of ours or an
/// operator's (the task API, an upstream proxy): AWS's managed WAF rules block requests
/// without one (`NoUserAgent_HEADER`), and an operator's logs can tell the controller apart.
pub const USER_AGENT: &str = concat!("wallcrawler-controller/", env!("CARGO_PKG_VERSION"));

pub mod auth;
pub mod aws;
pub(crate) mod browser;
pub mod cdp;
pub mod chrome;
pub mod cli;
pub mod config;
pub mod edge;
pub mod file_rules;
pub mod gateway;
pub(crate) mod modes;
pub mod netns;
pub mod pool_metric;
pub mod profile;
pub mod proxy;
pub(crate) mod public_ip;
pub(crate) mod recording;
pub(crate) mod scale_in;
pub(crate) mod secrets;
pub(crate) mod session;
pub(crate) mod session_credentials;
pub mod session_log;
pub mod shutdown;
pub mod stores;
pub(crate) mod task_api;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod viewer;

/// Fuzz targets for the parsers of hostile input (tests only; `scripts/fuzz.sh`).
#[cfg(test)]
mod fuzz;
