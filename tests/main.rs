//! Integration tests of `wallcrawler-controller`: the real binary, real Debian Chromium, the
//! real Node clients (puppeteer-core, playwright-core, chrome-remote-interface, Stagehand), and
//! a stand-in upstream where an edge case cannot be produced with real Chrome.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

mod support;

/// Every token refusal: 401, no upgrade, the upstream never contacted.
mod auth_refusals;
/// What Chrome can reach: no secrets in its environment, policy blocks, sandbox where possible.
mod chrome_reach;
/// The command line: token, --help, configuration errors (exit 64).
mod cli;
/// Real clients drive the browser through the proxy (every connection form).
mod clients;
/// Host/Origin handling and discovery URLs pointing back at the proxy.
mod discovery;
/// A client reaches no file it was not given: Extensions.* and outside paths refused.
mod file_guard;
/// The connect gateway: routing by the token's session, refusals before any dial, holding.
mod gateway;
/// Handoff: a CDP client asks for a person, a person at the live view presses Done.
mod handoff;
/// The DevTools inspector under `/inspector/<viewer credential>/`: a second Chromium opens it.
mod inspector;
/// Idle connections: the proxy's pings (through the gateway too), pongs stopped before Chrome.
mod keepalive;
/// Chrome lifecycle: SIGTERM, Browser.close, crash, exit codes, no leftover processes.
mod lifecycle;
/// Pool mode on moto: the control plane's API (its library, as its Lambda builds it) sending
/// claims to SQS, real pool controllers with Chromium serving them; and deploy/template.yaml
/// created as a stack in moto, the platform run on its resources (`pool::stack`).
mod pool;
/// Proxy edge cases against a stand-in upstream: huge frames, closes, bad requests, cap, metrics.
mod proxy_edges;
/// The PROXY v2 header: only from trusted networks, the named client counted, TLS passed on.
mod proxy_protocol;
/// Secrets Manager rotation: new key at once, previous key still, others refused.
mod rotation;
/// No token text in any log line of a debug-level run.
mod secrets_in_logs;
/// The ECS task against a local AWS: READY, context restore/save, every way to end.
mod task;
/// Hostile archives, dead dependencies and interrupted uploads: clear refusals, nothing harmed.
mod task_failures;
/// The live viewer: what a second Chromium sees, whose input reaches the page, one screencast.
mod viewer;
