//! Reading [`Settings`] into typed values, collecting every problem.

use std::time::Duration;

use super::*;

/// Collects typed values and problems from a [`Settings`] map.
pub(super) struct Reader<'a> {
    pub(super) s: &'a Settings,
    pub(super) errors: Vec<String>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(s: &'a Settings) -> Self {
        Self {
            s,
            errors: Vec::new(),
        }
    }

    /// A non-empty value, trimmed.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        self.s
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    pub(super) fn required(&mut self, name: &str) -> String {
        self.text(name).unwrap_or_else(|| {
            self.errors.push(format!("{name} is required"));
            String::new()
        })
    }

    pub(super) fn parse<T: std::str::FromStr>(&mut self, name: &str, what: &str) -> Option<T> {
        let raw = self.text(name)?;
        match raw.parse::<T>() {
            Ok(v) => Some(v),
            Err(_) => {
                self.errors
                    .push(format!("{name} must be {what}, got {raw:?}"));
                None
            }
        }
    }

    pub(super) fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        match self.parse::<u64>(name, "a whole number") {
            Some(v) if v < min || v > max => {
                self.errors
                    .push(format!("{name} must be between {min} and {max}, got {v}"));
                default
            }
            Some(v) => v,
            None => default,
        }
    }

    /// A count of connections or clients, 1 to a million.
    pub(super) fn count(&mut self, name: &str, default: usize) -> usize {
        self.number(name, default as u64, 1, 1_000_000) as usize
    }

    /// A duration given in whole seconds, `min..=max` of them.
    pub(super) fn seconds(
        &mut self,
        name: &str,
        default: Duration,
        min: u64,
        max: u64,
    ) -> Duration {
        Duration::from_secs(self.number(name, default.as_secs(), min, max))
    }

    /// A duration given in whole milliseconds, `min..=max` of them.
    pub(super) fn millis(&mut self, name: &str, default: Duration, min: u64, max: u64) -> Duration {
        Duration::from_millis(self.number(name, default.as_millis() as u64, min, max))
    }

    pub(super) fn boolean(&mut self, name: &str, default: bool) -> bool {
        match self.text(name).map(|v| v.to_ascii_lowercase()) {
            None => default,
            Some(v) if v == "true" || v == "1" || v == "yes" => true,
            Some(v) if v == "false" || v == "0" || v == "no" => false,
            Some(v) => {
                self.errors
                    .push(format!("{name} must be true or false, got {v:?}"));
                default
            }
        }
    }

    /// Two settings of which at most one may be given: both given is a problem (and neither
    /// is returned).
    pub(super) fn exclusive(&mut self, a: &str, b: &str) -> (Option<String>, Option<String>) {
        match (self.text(a), self.text(b)) {
            (Some(_), Some(_)) => {
                self.errors.push(format!("set {a} or {b}, not both"));
                (None, None)
            }
            pair => pair,
        }
    }

    pub(super) fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}
