//! `adblockbench`: the figures behind `src/chrome/egress/ads.rs` — what the filter lists hold
//! (network, cosmetic and host rules), how long the hop's engine takes to build and how much
//! resident memory it holds, how long loading it as a controller kept it (`AD_FILTER_CACHE`)
//! takes, what one host check costs, and how many of the lists' host rules
//! the hop ends up refusing a connection for.
//!
//! `cargo build --release --example adblockbench && target/release/examples/adblockbench
//! [--every N] [LIST...]` (default: Debian's EasyList and EasyPrivacy; `--every 10` checks
//! every tenth listed host only). Prints one JSON object.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use wallcrawler_controller::chrome::egress::ads::{self, AdFilter, AdLists};

/// The process's resident memory, KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether a rule line is cosmetic (element hiding, scriptlets): `##`, `#@#`, `#?#`, `#$#`, …
fn cosmetic(line: &str) -> bool {
    [
        "##", "#@#", "#?#", "#@?#", "#$#", "#@$#", "#%#", "#@%#", "#+js",
    ]
    .iter()
    .any(|m| line.contains(m))
}

/// The host of a plain host rule (`||host^`, options allowed, no wildcard), if it is one.
fn plain_host(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("||")?;
    let pattern = rest.split_once('$').map_or(rest, |(p, _)| p);
    let host = pattern.strip_suffix('^').unwrap_or(pattern);
    (!host.contains('*') && host.contains('.')).then_some(host)
}

/// One list's figures, and the hosts of its plain blocking host rules (added to `hosts`).
fn list_figures(path: &std::path::Path, hosts: &mut Vec<String>) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let (mut network, mut cosmetics, mut host, mut host_exceptions, mut bare) = (0, 0, 0, 0, 0);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('!') || line.starts_with('[') {
            continue;
        }
        if cosmetic(line) {
            cosmetics += 1;
            continue;
        }
        network += 1;
        if !ads::is_host_rule(line) {
            continue;
        }
        host += 1;
        if line.starts_with("@@") {
            host_exceptions += 1;
            continue;
        }
        let options = line.split_once('$').map(|(_, o)| o);
        if matches!(options, None | Some("third-party") | Some("3p")) {
            bare += 1;
        }
        if let Some(h) = plain_host(line) {
            hosts.push(h.to_owned());
        }
    }
    Ok(json!({
        "list": path.display().to_string(),
        "lines": text.lines().count(),
        "networkRules": network,
        "cosmeticRules": cosmetics,
        "hostRules": host,
        "hostExceptions": host_exceptions,
        "hostRulesWithoutOptionsOrOnlyThirdParty": bare,
    }))
}

/// Microseconds per [`AdFilter::blocks`] over `hosts`, and how many it refused.
fn check(filter: &AdFilter, hosts: &[String]) -> (f64, usize) {
    let started = Instant::now();
    let refused = hosts.iter().filter(|h| filter.blocks(h, 443)).count();
    let us = started.elapsed().as_secs_f64() * 1e6 / hosts.len().max(1) as f64;
    ((us * 100.0).round() / 100.0, refused)
}

fn main() -> Result<()> {
    let mut paths: Vec<String> = std::env::args().skip(1).collect();
    let mut every = 1;
    if paths.first().map(String::as_str) == Some("--every") {
        every = paths.get(1).context("--every N")?.parse()?;
        paths.drain(..2);
    }
    let lists: AdLists = if paths.is_empty() {
        AdLists::default()
    } else {
        paths.join(",").parse()?
    };
    let mut blocking_hosts = Vec::new();
    let per_list = lists
        .paths()
        .iter()
        .map(|p| list_figures(p, &mut blocking_hosts))
        .collect::<Result<Vec<_>>>()?;

    let before = rss_kib();
    let started = Instant::now();
    let filter = AdFilter::load(&lists, None)?;
    let build_ms = started.elapsed().as_secs_f64() * 1e3;
    let after = rss_kib();

    // The same lists through AD_FILTER_CACHE: built and kept once, then loaded as the
    // machine's next controller would.
    let cache = tempfile::tempdir()?;
    AdFilter::load(&lists, Some(cache.path()))?;
    let started = Instant::now();
    let kept = AdFilter::load(&lists, Some(cache.path()))?;
    let kept_ms = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(kept.rules() == filter.rules(), "the kept filter differs");
    let kept_bytes: u64 = std::fs::read_dir(cache.path())?
        .map(|e| Ok(e?.metadata()?.len()))
        .sum::<Result<u64>>()?;

    let blocking_hosts: Vec<String> = blocking_hosts.into_iter().step_by(every).collect();
    let (listed_us, refused) = check(&filter, &blocking_hosts);
    let sites: Vec<String> = (0..20_000 / every)
        .map(|i| format!("www.site{i}.example"))
        .collect();
    let (unlisted_us, wrongly) = check(&filter, &sites);

    let out = json!({
        "lists": per_list,
        "engine": {
            "hostRulesLoaded": filter.rules(),
            "buildMs": build_ms.round(),
            "keptLoadMs": (kept_ms * 10.0).round() / 10.0,
            "keptFileMiB": (kept_bytes as f64 / 1048576.0 * 10.0).round() / 10.0,
            "rssBeforeKiB": before,
            "rssAfterKiB": after,
            "rssAddedMiB": ((after as f64 - before as f64) / 1024.0 * 10.0).round() / 10.0,
        },
        "plainBlockingHostRulesChecked": blocking_hosts.len(),
        "ofThoseRefusedByTheHop": refused,
        "checkUsPerListedHost": listed_us,
        "unlistedHostsChecked": sites.len(),
        "unlistedHostsRefused": wrongly,
        "checkUsPerUnlistedHost": unlisted_us,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
