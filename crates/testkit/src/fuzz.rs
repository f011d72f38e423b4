//! The fuzz targets' runner: property-based fuzzing on the stable toolchain (`proptest`).
//!
//! Each target is a plain `#[test]` in a `fuzz` module (so `fuzz::` selects them) beside the crate's
//! parsers that calls [`run`] with a strategy (random input, and the crate's existing hostile
//! cases mutated: [`mutated`]) and the property. Under `cargo test` a target runs
//! [`DEFAULT_CASES`] cases; with `FUZZ_SECONDS` set it runs batches of cases until that many
//! seconds have passed (`scripts/fuzz.sh SECONDS` runs every target so, printing each one's name
//! and time). Inputs are random each run; a failure prints the smallest input found (shrunk by
//! proptest) and the seed, and `PROPTEST_RNG_SEED=<seed>` replays the run. Nothing is written to
//! disk (no failure-persistence files): a failure found becomes a plain `#[test]` with its input.

use std::fmt::Debug;
use std::time::{Duration, Instant};

pub use proptest;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// Cases per target when `FUZZ_SECONDS` is not set (a plain `cargo test`).
pub const DEFAULT_CASES: u32 = 64;

/// Cases per batch when running for a time.
const BATCH: u32 = 256;

/// The time each target runs for, from `FUZZ_SECONDS` (none: [`DEFAULT_CASES`] cases).
fn budget() -> Option<Duration> {
    let s = std::env::var("FUZZ_SECONDS").ok()?;
    let secs: f64 = s
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("FUZZ_SECONDS={s:?} is not a number of seconds"));
    Some(Duration::from_secs_f64(secs.max(0.0)))
}

/// Runs the target `name`: `property` on inputs drawn from `strategy`, for [`DEFAULT_CASES`]
/// cases or `FUZZ_SECONDS` seconds. Panics with the smallest failing input when the property
/// fails or the code under test panics.
pub fn run<S>(name: &str, strategy: S, property: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let budget = budget();
    let started = Instant::now();
    let mut cases = 0u64;
    loop {
        let cases_now = if budget.is_some() {
            BATCH
        } else {
            DEFAULT_CASES
        };
        let config = Config {
            cases: cases_now,
            failure_persistence: None,
            // A failure shrinks for at most this long, so a failing CI run still ends soon.
            max_shrink_time: 60_000,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        if let Err(e) = runner.run(&strategy, &property) {
            panic!("fuzz target {name} failed after {cases} cases: {e}");
        }
        cases += u64::from(cases_now);
        if budget.is_none_or(|b| started.elapsed() >= b) {
            break;
        }
    }
    eprintln!(
        "fuzz {name}: {cases} cases in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One edit of a seed: what, where (taken modulo the input's length), and with which byte.
#[derive(Debug, Clone)]
pub struct Edit {
    op: u8,
    at: usize,
    len: usize,
    byte: u8,
}

fn edit() -> impl Strategy<Value = Edit> + Clone {
    (0u8..6, any::<usize>(), 0usize..64, any::<u8>()).prop_map(|(op, at, len, byte)| Edit {
        op,
        at,
        len,
        byte,
    })
}

/// Applies `edits` to `input`: overwrite, insert or delete a byte, cut a run, repeat a run,
/// or truncate.
pub fn apply(input: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut v = input.to_vec();
    for e in edits {
        let at = if v.is_empty() {
            0
        } else {
            e.at % (v.len() + 1)
        };
        match e.op {
            0 if at < v.len() => v[at] = e.byte,
            1 => v.insert(at, e.byte),
            2 if at < v.len() => {
                v.remove(at);
            }
            3 => {
                let end = (at + e.len).min(v.len());
                v.drain(at..end);
            }
            4 => {
                let end = (at + e.len).min(v.len());
                let run = v[at..end].to_vec();
                v.splice(at..at, run);
            }
            5 => v.truncate(at),
            _ => {}
        }
    }
    v
}

/// One of `seeds` with up to `max_edits` random edits ([`apply`]).
pub fn mutated(seeds: Vec<Vec<u8>>, max_edits: usize) -> impl Strategy<Value = Vec<u8>> + Clone {
    assert!(!seeds.is_empty(), "a mutation needs a seed");
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 0..=max_edits),
    )
        .prop_map(|(seed, edits)| apply(&seed, &edits))
}

/// Random bytes (up to `max_len`) or one of `seeds` mutated: what a hostile peer sends.
pub fn hostile_bytes(
    seeds: Vec<Vec<u8>>,
    max_len: usize,
) -> impl Strategy<Value = Vec<u8>> + Clone {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..=max_len),
        3 => mutated(seeds, 8),
    ]
}

/// [`hostile_bytes`] as text (invalid UTF-8 replaced), for parsers that take `&str`.
pub fn hostile_text(seeds: &[&str], max_len: usize) -> impl Strategy<Value = String> + Clone {
    let seeds = seeds.iter().map(|s| s.as_bytes().to_vec()).collect();
    hostile_bytes(seeds, max_len).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// `input` cut at random points (the reads a peer's bytes arrive in).
pub fn split(input: Vec<u8>) -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    let n = input.len();
    (
        Just(input),
        prop::collection::vec(0..=n, 0..8).prop_map(|mut cuts| {
            cuts.sort_unstable();
            cuts
        }),
    )
}

/// The pieces of `input` between `cuts` (sorted offsets), in order.
pub fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &c in cuts {
        let c = c.min(input.len());
        out.push(&input[from..c.max(from)]);
        from = c.max(from);
    }
    out.push(&input[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_stay_in_bounds_and_pieces_cover_the_input() {
        let seed = b"0123456789".to_vec();
        let edits: Vec<Edit> = (0..6)
            .flat_map(|op| {
                [0, 5, 10, usize::MAX].map(|at| Edit {
                    op,
                    at,
                    len: 63,
                    byte: b'x',
                })
            })
            .collect();
        for e in &edits {
            let _ = apply(&seed, std::slice::from_ref(e));
            let _ = apply(&[], std::slice::from_ref(e));
        }
        assert_eq!(apply(&seed, &edits[..1]), b"x123456789");
        let p = pieces(b"abcdef", &[0, 2, 2, 9]);
        assert_eq!(p.concat(), b"abcdef");
        assert_eq!(p.len(), 5);
    }
}
