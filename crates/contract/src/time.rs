//! ISO 8601 timestamps as the session table stores them (`2026-11-21T21:55:27.123Z`), on `jiff`.
//!
//! One shape only, in both directions: UTC (`Z`), `T` between date and time, seconds always, an
//! optional fraction. The calendar is `jiff`'s, so a date that does not exist (`2026-02-31`,
//! `2027-02-29`) is refused rather than rolled over into the next month.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::Offset;

/// What [`iso8601_millis`] writes: always three fraction digits, always `Z`.
const PRINT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";
/// What [`parse_iso8601`] reads: the fraction optional (up to nanoseconds), nothing but `Z` after
/// it. A literal `Z` rather than an offset directive: an offset such as `+02:00` is refused, as
/// it always was (the table only ever holds UTC).
const PARSE: &str = "%Y-%m-%dT%H:%M:%S%.fZ";

/// Formats milliseconds since the Unix epoch as UTC ISO 8601 with milliseconds.
///
/// Saturates at `jiff`'s last instant, 9999-12-30T22:00:00.999Z (today's callers pass the
/// clock or an expiry hours ahead of it).
pub fn iso8601_millis(unix_millis: u64) -> String {
    let ms = i64::try_from(unix_millis).unwrap_or(i64::MAX);
    let at = Timestamp::from_millisecond(ms).unwrap_or(Timestamp::MAX);
    at.strftime(PRINT).to_string()
}

/// The current time as ISO 8601.
pub fn now_iso8601() -> String {
    iso8601_millis(unix_millis())
}

/// Milliseconds since the Unix epoch.
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Parses the format [`iso8601_millis`] writes (and the same without fraction, or with up to
/// nine fraction digits, truncated to milliseconds). Returns milliseconds since the epoch;
/// `None` for anything else, an impossible date or an instant before 1970 included.
pub fn parse_iso8601(s: &str) -> Option<u64> {
    let civil = DateTime::strptime(PARSE, s).ok()?;
    let at = Offset::UTC.to_timestamp(civil).ok()?;
    u64::try_from(at.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(iso8601_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            iso8601_millis(1_795_297_972_123),
            "2026-11-21T21:52:52.123Z"
        );
    }

    #[test]
    fn round_trip() {
        for ms in [
            0u64,
            1,
            86_399_999,
            951_782_400_000,
            1_795_297_972_123,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_iso8601(&iso8601_millis(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            parse_iso8601("2026-11-21T21:52:52Z"),
            Some(1_795_297_972_000)
        );
        assert_eq!(parse_iso8601("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_iso8601("yesterday"), None);
    }

    #[test]
    fn dates_that_do_not_exist_are_refused() {
        assert_eq!(parse_iso8601("2026-02-31T00:00:00Z"), None);
        assert_eq!(parse_iso8601("2027-02-29T00:00:00.000Z"), None);
        assert_eq!(parse_iso8601("2026-04-31T12:00:00Z"), None);
        assert_eq!(parse_iso8601("2026-11-21T24:00:00Z"), None);
        assert_eq!(parse_iso8601("2026-11-21T23:60:00Z"), None);
        // A leap day that exists.
        assert_eq!(
            parse_iso8601("2028-02-29T00:00:00.000Z"),
            Some(1_835_395_200_000)
        );
        assert_eq!(
            iso8601_millis(1_835_395_200_000),
            "2028-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn only_utc_in_the_one_shape() {
        for s in [
            // No offset at all.
            "2026-11-21T21:52:52",
            "2026-11-21T21:52:52.123",
            // An offset, even a zero one: the table holds `Z` only.
            "2026-11-21T21:52:52+00:00",
            "2026-11-21T23:52:52+02:00",
            "2026-11-21T21:52:52.123-05:00",
            // Other ISO 8601 / RFC 9557 spellings.
            "2026-11-21 21:52:52Z",
            "2026-11-21T21:52Z",
            "20261121T215252Z",
            "2026-11-21T21:52:52Z[UTC]",
            "2026-11-21T21:52:52.Z",
            "1969-12-31T23:59:59.999Z",
            "",
        ] {
            assert_eq!(parse_iso8601(s), None, "{s:?}");
        }
        // Any fraction up to nanoseconds, truncated to milliseconds.
        assert_eq!(
            parse_iso8601("2026-11-21T21:52:52.1Z"),
            Some(1_795_297_972_100)
        );
        assert_eq!(
            parse_iso8601("2026-11-21T21:52:52.123999999Z"),
            Some(1_795_297_972_123)
        );
    }

    #[test]
    fn printing_saturates_at_the_last_instant_jiff_names() {
        assert_eq!(iso8601_millis(u64::MAX), "9999-12-30T22:00:00.999Z");
        assert_eq!(
            iso8601_millis(253_402_207_200_999),
            "9999-12-30T22:00:00.999Z"
        );
    }
}
