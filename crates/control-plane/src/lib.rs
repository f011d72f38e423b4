//! Wallcrawler's control plane: the Browserbase-compatible API behind `POST /v1/sessions` and
//! friends, written once over narrow ports and served locally (`wallcrawler-control-plane
//! serve`) or from AWS Lambda. Depends on the shared contract, never on the controller.
//!
//! - [`error`]: Browserbase's error shape.
//! - [`model`]: project, API key and context records; the JSON the API answers with.
//! - [`stores`]: what the handlers need (stores, presigned URLs, task launcher, signer, clock),
//!   as async traits.
//! - [`rules`]: the conditional rules the file and memory stores apply (DynamoDB's are
//!   condition expressions).
//! - [`auth`]: API-key authorisation and project selection.
//! - [`limits`]: the concurrency cap and the one-writer-per-context rule, by conditional
//!   writes (slots and leases).
//! - [`handlers`] and [`router`]: the endpoints, one router for every deployment; [`ids`]: the
//!   path's `{id}` and the check every id passes before a store sees it.
//! - [`egress`]: a create's `proxies` and `allowedDomains` checked into the session's egress,
//!   and the operator's managed proxy pools they may name.
//! - [`browser_settings`]: a create's `browserSettings` read into the browser its controller
//!   makes (viewport, locales, certificate errors, ad blocking, logging), and every field accepted but
//!   not done named (`x-wallcrawler-unsupported`).
//! - [`extensions`]: the extensions API (archives checked, kept per project by content) and
//!   the lookup of a create's `extensionId`.
//! - [`files`]: a session's files: `GET /v1/sessions/{id}/downloads` (202 while in progress,
//!   else the zip, or on AWS a redirect to it).
//! - [`session_logs`]: a session's log (`GET /v1/sessions/{id}/logs`, and its SSE stream,
//!   `…/logs/stream`), read from the chunks its controller stores.
//! - [`recordings`]: a session's recording: its pages (`…/replays`), a page's HLS playlist with
//!   signed segment URLs, the MP4 downloads built from the segments, and `…/recording`'s 410.
//! - [`zips`]: a zip of stored objects (the writer, bounded) and what a store hands back.
//! - [`uploads`]: session uploads (files stored for the session's browser, which its
//!   controller fetches when a client names them).
//! - [`cursor`]: the tamper-evident paging cursor of `GET /v1/sessions`.
//! - [`metadata`]: `userMetadata`'s bounds and Browserbase's metadata query (`q`).
//! - [`usage`]: projects' usage as a running total, each session counted once.
//! - [`debug`]: a running session's page list, from its proxy.
//! - [`dashboard`]: `GET /dashboard`, the static page a person opens with an API key to see
//!   the project's sessions (live view, log, recording, downloads) through the API.
//! - [`sweep`]: the sweeper, which ends sessions stranded past their claim's deadline or
//!   their expiry (a Lambda on a schedule, a periodic task of the local platform).
//! - [`session_events`]: the sessions-stream processor: stream records in, session events
//!   out to the topic and EventBridge, a partial-batch answer for what failed.
//! - [`memory`]: in-memory ports (tests, reference semantics).
//! - [`local`]: the local platform: file-backed stores shared with local controllers;
//!   [`local::controllers`] runs `wallcrawler-controller run` child processes (a warm pool
//!   taking claims, or one per session); [`local::serve`] wires it up.
//! - [`aws`]: the AWS platform, one file per service: DynamoDB stores, S3 presigned URLs, ECS
//!   and SQS-pool launchers, Secrets Manager signer, configuration from the environment;
//!   [`aws::lambda`] has the authorizer and the ECS task-state handler the Lambda binaries run.
//! - [`task_api`]: the routes tasks call, outside the API-key check (`/v1/internal/claims`,
//!   `/v1/internal/credentials`): a task proves which task it is with a signed STS request,
//!   and gets its claim and credentials scoped to its session ([`aws::TaskBroker`]).
//! - [`admin`]: create projects and API keys, revoke keys.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod auth;
pub mod aws;
pub mod browser_settings;
pub mod cursor;
pub mod dashboard;
pub mod debug;
pub mod egress;
pub mod error;
pub mod extensions;
pub mod files;
/// Fuzz targets for the parsers of hostile input (tests only; `scripts/fuzz.sh`).
#[cfg(test)]
mod fuzz;
pub mod handlers;
pub mod ids;
pub mod limits;
pub mod local;
pub mod memory;
pub mod metadata;
pub mod model;
pub mod recordings;
pub mod router;
pub mod rules;
pub mod session_events;
pub mod session_logs;
pub mod stores;
pub mod sweep;
pub mod task_api;
pub mod uploads;
pub mod usage;
pub mod zips;
