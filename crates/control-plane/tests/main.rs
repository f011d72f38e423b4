//! Integration tests of `wallcrawler-control-plane`: the HTTP contract over the in-memory
//! ports, the AWS adapters against moto (a local AWS speaking the real wire protocol), and the
//! local platform (`serve`) with real controllers, Chromium and the Node clients.

/// The API, stores, task-state handler, `admin` and Lambda binaries on moto; pool mode and the
/// CloudFormation stack with real controllers (`aws::pool`, `aws::pool::stack`).
mod aws;
/// The HTTP contract (SPEC §8) through the one router over the in-memory ports.
mod handlers;
/// The whole platform on one machine: `serve`, real controllers and Chromium, the stock SDKs.
mod local_e2e;
