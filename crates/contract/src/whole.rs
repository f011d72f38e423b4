//! Whole numbers as the tables hold them (`expiresAt`, `proxyBytes`, `defaultTimeout`, …).
//!
//! Our own writes are integers (`N` `"1700000000"`), but another tool may write a whole float
//! (`"1700000000.0"`, or `1.7e9` in a JSON document); both read back as the same `u64`. A
//! fraction, a negative number or a non-number is refused: such an attribute is malformed, and
//! rounding it would hide that. Use with `#[serde(deserialize_with = "...")]`.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Unexpected, Visitor};

/// 2^53: the largest float every integer below which is exact.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A required whole-number field.
pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Whole::deserialize(d).map(|w| w.0)
}

/// An optional whole-number field (absent or null = `None`; pair it with `#[serde(default)]`).
pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<Whole>::deserialize(d).map(|o| o.map(|w| w.0))
}

/// An optional whole-number field read leniently: anything but a whole number (a string, a
/// fraction, a map) reads as `None`, as if absent, instead of making the whole record
/// malformed. For fields an older or foreign writer may have left in another shape, where
/// "absent" has a safe meaning (`claimDeadline`: no deadline).
pub fn lenient<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Maybe {
        Whole(Whole),
        Other(de::IgnoredAny),
    }
    Option::<Maybe>::deserialize(d).map(|m| match m {
        Some(Maybe::Whole(w)) => Some(w.0),
        _ => None,
    })
}

struct Whole(u64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Self-describing formats only (JSON, DynamoDB items): the number's own form decides.
        d.deserialize_any(WholeVisitor)
    }
}

struct WholeVisitor;

impl<'de> Visitor<'de> for WholeVisitor {
    type Value = Whole;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a whole number, 0 or more")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Whole, E> {
        Ok(Whole(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Whole, E> {
        u64::try_from(v)
            .map(Whole)
            .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Whole, E> {
        if v.fract() == 0.0 && (0.0..=EXACT).contains(&v) {
            Ok(Whole(v as u64))
        } else {
            Err(E::invalid_value(Unexpected::Float(v), &self))
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Whole, E> {
        // The text is not echoed: a misplaced attribute might hold a token.
        Err(E::invalid_type(Unexpected::Other("a string"), &self))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "required")]
        n: u64,
        #[serde(default, deserialize_with = "optional")]
        o: Option<u64>,
    }

    fn read(json: &str) -> Result<Doc, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn whole_floats_read_as_integers_fractions_and_negatives_do_not() {
        assert_eq!(read(r#"{"n": 7}"#).unwrap().n, 7);
        assert_eq!(read(r#"{"n": 1700000000.0}"#).unwrap().n, 1_700_000_000);
        assert!(read(r#"{"n": -2}"#).is_err());
        assert!(read(r#"{"n": 1.5}"#).is_err());
        assert!(read(r#"{"n": 1e300}"#).is_err());
        let e = read(r#"{"n": "sekrit"}"#).unwrap_err().to_string();
        assert!(!e.contains("sekrit"), "{e}");
        assert!(read(r#"{}"#).is_err(), "a required field stays required");
    }

    #[test]
    fn an_optional_number_may_be_absent_or_null() {
        assert_eq!(read(r#"{"n": 1}"#).unwrap().o, None);
        assert_eq!(read(r#"{"n": 1, "o": null}"#).unwrap().o, None);
        assert_eq!(read(r#"{"n": 1, "o": 42.0}"#).unwrap().o, Some(42));
        assert!(read(r#"{"n": 1, "o": 0.5}"#).is_err());
    }
}
