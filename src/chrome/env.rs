//! Chrome's environment: cleared, then an allow-list of what a headless browser needs.
//!
//! The controller's own environment holds secrets — `WALLCRAWLER_JWT_PRIVATE_KEY_FILE` in local
//! mode, `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (the path that hands out the task role's
//! credentials) and `ECS_CONTAINER_METADATA_URI_V4` in ECS, `AWS_*` keys wherever they are set.
//! Chrome renders pages from anywhere, and a renderer bug would read its process environment
//! (`/proc/self/environ`), so none of that may reach Chrome. Everything not named here is
//! dropped.

use std::ffi::{OsStr, OsString};

/// Variables passed through unchanged when the controller has them.
const ALLOWED: [&str; 24] = [
    // Chrome's default locations (NSS database ~/.pki, caches, ~/.fonts) hang off HOME.
    "HOME",
    // Chrome looks up helpers (xdg-open, xdg-settings) on the PATH.
    "PATH",
    // Temporary files, and the shared memory files that --disable-dev-shm-usage puts there.
    "TMPDIR",
    // Time zone: JavaScript's Date and Intl report the task's zone.
    "TZ",
    // Locale: UI language, the default Accept-Language and number/date formats. LC_* below.
    "LANG",
    "LANGUAGE",
    // Fonts: a custom fontconfig configuration (the image uses the system one).
    "FONTCONFIG_FILE",
    "FONTCONFIG_PATH",
    "FONTCONFIG_SYSROOT",
    // XDG base directories: where Chrome and fontconfig keep caches, config and runtime files.
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_HOME",
    "XDG_DATA_DIRS",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    // An egress proxy the operator configured: on Linux without a desktop, Chrome takes its
    // proxy settings from these. They were always Chrome's route out; a proxy URL's
    // credentials are no more than what the browser can already use through it.
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
];

/// Whether Chrome may see the variable `name`: the names above and the `LC_*` locale
/// categories (`LC_ALL`, `LC_CTYPE`, `LC_TIME`, …).
pub fn allowed(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    ALLOWED.contains(&name)
        || name
            .strip_prefix("LC_")
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_uppercase()))
}

/// The environment Chrome gets from the controller's `vars`: the allowed ones only.
pub fn chrome_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.into_iter().filter(|(k, _)| allowed(k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(vars: &[(&str, &str)]) -> Vec<String> {
        chrome_env(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
        .into_iter()
        .map(|(k, _)| k.into_string().unwrap())
        .collect()
    }

    #[test]
    fn secrets_are_dropped_and_the_allow_list_kept() {
        let kept = names(&[
            ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", "/k.pem"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", "k"),
            (
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "/v2/credentials/x",
            ),
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://x"),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t"),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://x"),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "t"),
            ("SESSION_SIGNING_SECRET_ARN", "arn"),
            ("LD_PRELOAD", "/x.so"),
            ("SSLKEYLOGFILE", "/tmp/keys"),
            ("HOME", "/home/w"),
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("LC_TIME", "de_DE.UTF-8"),
            ("TZ", "UTC"),
            ("FONTCONFIG_FILE", "/f"),
            ("XDG_CACHE_HOME", "/c"),
        ]);
        assert_eq!(
            kept,
            [
                "HOME",
                "PATH",
                "LANG",
                "LC_ALL",
                "LC_TIME",
                "TZ",
                "FONTCONFIG_FILE",
                "XDG_CACHE_HOME"
            ]
        );
    }

    #[test]
    fn lc_prefix_is_matched_exactly() {
        assert!(allowed(OsStr::new("LC_MESSAGES")));
        assert!(!allowed(OsStr::new("LC_")));
        assert!(!allowed(OsStr::new("LC_x_SECRET")));
        assert!(!allowed(OsStr::new("LCX")));
        assert!(!allowed(OsStr::new("home")));
    }
}
