//! Integration tests of `wallcrawler-control-plane`: the HTTP contract over the in-memory
//! ports, the AWS adapters against moto (a local AWS speaking the real wire protocol), and the
//! local platform (`serve`) with real controllers, Chromium and the Node clients.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

/// The API, stores, task-state handler, `admin` and the Lambda binaries on moto (pool mode and
/// the CloudFormation stack, which run real controllers, are the root package's `pool` tests).
mod aws;
/// The HTTP contract (SPEC §8) through the one router over the in-memory ports.
mod handlers;
/// The whole platform on one machine: the `serve` binary's process, real controllers and
/// Chromium, the stock SDKs. The controller is found beside `serve`'s binary, as `serve` itself
/// finds it (a binary of another package, built by `cargo test --workspace`).
mod local_e2e;
/// Helpers the modules share (a loopback stand-in for a session's proxy).
mod support;
