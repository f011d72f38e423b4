//! Fuzz targets for the controller's parsers of hostile input (`wallcrawler_testkit::fuzz`
//! runs them: a few cases under `cargo test`, `FUZZ_SECONDS` each under `scripts/fuzz.sh`),
//! each seeded with the hostile cases of the parser's own unit tests. Every target checks at
//! least that the parser never panics and answers in bounded time and memory; each says what
//! more it checks. The SOCKS5 handshake's target sits beside it (`chrome::egress::fuzz`), as
//! it drives the hop's private handshake.

mod cdp;
mod profile;
mod proxy_header;
