//! The browser a session asked for (`browserSettings` and Stagehand's `fingerprint`), as the
//! control plane hands it to the session's controller with its claim (or, for a cold start,
//! in `SESSION_BROWSER`): the page area, the locales, certificate validation, ad blocking,
//! whether the session is logged.
//! Nothing here is secret. The controller applies it to a warm browser at claim time.

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

/// The widths a viewport may have, CSS pixels.
pub const VIEWPORT_WIDTH: RangeInclusive<u32> = 200..=3840;
/// The heights a viewport may have, CSS pixels.
pub const VIEWPORT_HEIGHT: RangeInclusive<u32> = 200..=2160;
/// The most locales.
pub const MAX_LOCALES: usize = 10;
/// The longest locale tag.
pub const MAX_LOCALE_BYTES: usize = 35;

/// A page area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Viewport {
    /// CSS pixels.
    pub width: u32,
    /// CSS pixels.
    pub height: u32,
}

impl Viewport {
    /// Within [`VIEWPORT_WIDTH`] × [`VIEWPORT_HEIGHT`]; the error says the bounds.
    pub fn check(&self) -> Result<(), String> {
        if VIEWPORT_WIDTH.contains(&self.width) && VIEWPORT_HEIGHT.contains(&self.height) {
            Ok(())
        } else {
            Err(format!(
                "must be {}-{} wide and {}-{} high (CSS pixels), got {}x{}",
                VIEWPORT_WIDTH.start(),
                VIEWPORT_WIDTH.end(),
                VIEWPORT_HEIGHT.start(),
                VIEWPORT_HEIGHT.end(),
                self.width,
                self.height
            ))
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the session's browser is made to be.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BrowserSettings {
    /// The page area of every page (first and new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport: Option<Viewport>,
    /// `navigator.language(s)` and `Accept-Language`, most preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locales: Vec<String>,
    /// Pages with invalid certificates load.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_certificate_errors: bool,
    /// Requests to ad and tracking hosts never leave.
    #[serde(default, skip_serializing_if = "is_false")]
    pub block_ads: bool,
    /// Nothing of the session is logged (`browserSettings.logSession: false`; logging is the
    /// default): no entry of its CDP traffic, events or notes is recorded
    /// ([`crate::session_log`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_session_log: bool,
    /// No page of the session is recorded (`browserSettings.recordSession: false`; recording
    /// is the default): no video, no replay ([`crate::recording`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_recording: bool,
}

/// Whether `tag` is a locale tag such as `de`, `de-DE` or `zh-Hant-TW` (letters, digits and
/// hyphens in subtags of 1-8, the first 2-3 letters).
pub fn valid_locale(tag: &str) -> bool {
    let mut parts = tag.split('-');
    let first = parts.next().unwrap_or("");
    tag.len() <= MAX_LOCALE_BYTES
        && (2..=3).contains(&first.len())
        && first.bytes().all(|b| b.is_ascii_alphabetic())
        && parts.all(|p| (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

impl BrowserSettings {
    /// Whether there is anything to apply.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Every bound, as a controller checks a claim's settings.
    pub fn check(&self) -> Result<(), String> {
        if let Some(v) = &self.viewport {
            v.check().map_err(|e| format!("viewport {e}"))?;
        }
        if self.locales.len() > MAX_LOCALES {
            return Err(format!("more than {MAX_LOCALES} locales"));
        }
        if let Some(bad) = self.locales.iter().position(|l| !valid_locale(l)) {
            return Err(format!("locales[{bad}] is not a locale tag such as de-DE"));
        }
        Ok(())
    }

    /// The accepted languages for the locales (`de-DE,de,en-US,en`), when there are any: each
    /// tag in order, a tag's language alone after it. Chrome adds the falling weights when it
    /// sends them (`Accept-Language: de-DE,de;q=0.9,en-US;q=0.8,en;q=0.7`).
    pub fn accept_language(&self) -> Option<String> {
        let mut tags: Vec<String> = Vec::new();
        for l in &self.locales {
            for t in [l.clone(), l.split('-').next().unwrap_or(l).to_owned()] {
                if !tags.iter().any(|x| x.eq_ignore_ascii_case(&t)) {
                    tags.push(t);
                }
            }
        }
        (!tags.is_empty()).then(|| tags.join(","))
    }

    /// The JSON a cold controller is handed (`SESSION_BROWSER`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("settings serialize")
    }

    /// Parses and checks what [`Self::to_json`] made.
    pub fn from_json(text: &str) -> Result<BrowserSettings, String> {
        let b: BrowserSettings = serde_json::from_str(text)
            .map_err(|e| format!("not the browser settings shape: {e}"))?;
        b.check()?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewports_are_bounded() {
        assert!(
            Viewport {
                width: 1288,
                height: 711
            }
            .check()
            .is_ok()
        );
        for (w, h) in [(0, 711), (199, 711), (3841, 711), (1288, 199), (1288, 2161)] {
            let e = Viewport {
                width: w,
                height: h,
            }
            .check()
            .unwrap_err();
            assert!(e.contains("200-3840 wide and 200-2160 high"), "{e}");
        }
    }

    #[test]
    fn locales_are_tags_and_make_an_accept_language() {
        for ok in ["de", "de-DE", "zh-Hant-TW", "es-419"] {
            assert!(valid_locale(ok), "{ok}");
        }
        for bad in [
            "",
            "d",
            "deutsch",
            "de_DE",
            "de-",
            "de-DE;q=1",
            "de,en",
            "1a",
        ] {
            assert!(!valid_locale(bad), "{bad}");
        }
        let b = BrowserSettings {
            locales: vec!["de-DE".into(), "en-US".into()],
            ..Default::default()
        };
        assert_eq!(b.accept_language().unwrap(), "de-DE,de,en-US,en");
        assert_eq!(BrowserSettings::default().accept_language(), None);
    }

    #[test]
    fn a_claims_settings_are_checked_again() {
        let good = BrowserSettings {
            viewport: Some(Viewport {
                width: 1288,
                height: 711,
            }),
            locales: vec!["de-DE".into()],
            ignore_certificate_errors: true,
            block_ads: true,
            no_session_log: true,
            no_recording: true,
        };
        assert_eq!(BrowserSettings::from_json(&good.to_json()).unwrap(), good);
        // Logging is the default: nothing said about it, nothing carried.
        assert_eq!(BrowserSettings::default().to_json(), "{}");
        assert!(good.to_json().contains(r#""noSessionLog":true"#));
        assert!(BrowserSettings::from_json(r#"{"viewport":{"width":0,"height":1}}"#).is_err());
        assert!(BrowserSettings::from_json(r#"{"locales":["x y"]}"#).is_err());
        assert!(BrowserSettings::from_json(r#"{"other":1}"#).is_err());
        assert!(BrowserSettings::from_json("{}").unwrap().is_empty());
    }
}
