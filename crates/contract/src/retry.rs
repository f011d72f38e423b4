//! The one retry policy of both crates, and what counts as transient.
//!
//! Plain data, no runtime: the callers add their own sleep (the controller's startup reads and
//! archive fetch; the local platform's restarts of failed controllers). An error is retried
//! only when it says it is transient ([`Transient`]); for AWS services that is an unreachable
//! endpoint, a timeout, or one of the service error codes in [`TRANSIENT_CODES`] — classified
//! once, the same way on both sides.

use std::time::Duration;

use backon::ExponentialBuilder;

/// AWS service error codes that mean "try again later" rather than "refused": throttling and
/// the service's own failures.
pub const TRANSIENT_CODES: [&str; 6] = [
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ServiceUnavailable",
    "InternalServerError",
    "ServerException",
];

/// Whether an AWS service error code is worth retrying.
pub fn is_transient_code(code: Option<&str>) -> bool {
    code.is_some_and(|c| TRANSIENT_CODES.contains(&c))
}

/// Errors that know whether trying again later may succeed.
pub trait Transient {
    /// True when the same request may succeed later (unreachable, throttled, timed out).
    fn is_transient(&self) -> bool;
}

/// First wait between attempts.
pub const FIRST_DELAY: Duration = Duration::from_millis(200);

/// Longest wait between attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// Exponential backoff from [`FIRST_DELAY`] doubling to [`MAX_DELAY`], with jitter (many tasks
/// retrying one throttled table do not retry in step), sleeping at most `within` in all.
pub fn policy(within: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(within))
}

/// Exponential backoff without an end, for restarting something that keeps failing: `first`
/// doubling up to `max`, without jitter (one restarter per process).
pub fn restart_delays(first: Duration, max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use backon::BackoffBuilder;

    use super::*;

    #[test]
    fn throttling_is_transient_and_a_refusal_is_not() {
        assert!(is_transient_code(Some("ThrottlingException")));
        assert!(is_transient_code(Some(
            "ProvisionedThroughputExceededException"
        )));
        assert!(!is_transient_code(Some("ConditionalCheckFailedException")));
        assert!(!is_transient_code(Some("AccessDeniedException")));
        assert!(!is_transient_code(None));
    }

    #[test]
    fn the_policy_sleeps_at_most_its_budget() {
        let within = Duration::from_secs(10);
        let delays: Vec<Duration> = policy(within).build().collect();
        assert!(!delays.is_empty());
        assert!(delays.iter().sum::<Duration>() <= within, "{delays:?}");
        // Jitter adds up to one more delay's worth; never beyond twice the cap.
        assert!(delays.iter().all(|d| *d <= MAX_DELAY * 2), "{delays:?}");
    }

    #[test]
    fn restart_delays_double_up_to_their_cap() {
        // Whole milliseconds: the factor is an f32, so a delay may be a few ns off.
        let d: Vec<u128> = restart_delays(Duration::from_millis(100), Duration::from_secs(30))
            .build()
            .take(12)
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(&d[..4], &[100, 200, 400, 800]);
        assert_eq!(d[9], 30_000);
        assert_eq!(d[11], 30_000);
    }
}
