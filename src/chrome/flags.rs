//! Chrome's command line: the reviewed flags file plus the flags the controller owns.

use std::path::Path;

pub use wallcrawler_local::browser::is_headless_shell;

/// The flags file shipped in `chrome/flags.conf`, compiled in.
pub const BUILTIN_FLAGS: &str = include_str!("../../chrome/flags.conf");

/// Flags the controller sets itself; the flags file may not contain them. The proxy flags are
/// the controller's because a private network's only way out is its SOCKS5 egress
/// (`netns.rs`), and a proxy chosen in the file would bypass its refusals.
const OWNED: [&str; 12] = [
    "--user-data-dir",
    "--remote-debugging-port",
    "--remote-debugging-address",
    "--remote-debugging-pipe",
    "--headless",
    "--proxy-server",
    "--proxy-bypass-list",
    "--no-proxy-server",
    "--proxy-pac-url",
    "--proxy-auto-detect",
    "--webrtc-ip-handling-policy",
    "--force-webrtc-ip-handling-policy",
];

/// Flags that would weaken isolation and are refused outright.
const FORBIDDEN: [&str; 2] = ["--disable-web-security", "--remote-allow-origins"];

/// A problem in a flags file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagsError {
    /// The file contains a flag the controller sets itself (profile directory, DevTools port, headless).
    #[error("line {line}: {flag} is set by the controller and may not appear in the flags file")]
    Owned {
        /// 1-based line number in the flags file.
        line: usize,
        /// The flag as written.
        flag: String,
    },
    /// The file contains a flag refused outright because it would weaken isolation.
    #[error("line {line}: {flag} is not allowed")]
    Forbidden {
        /// 1-based line number in the flags file.
        line: usize,
        /// The flag as written.
        flag: String,
    },
    /// A line that is not a flag (flags start with `--`).
    #[error("line {line}: {text:?} is not a flag (flags start with --)")]
    NotAFlag {
        /// 1-based line number in the flags file.
        line: usize,
        /// The line's text.
        text: String,
    },
}

/// Parses a flags file: one flag per line, `#` comments, every `--disable-features=` merged
/// into one flag placed last.
pub fn parse_flags(text: &str) -> Result<Vec<String>, FlagsError> {
    let mut flags = Vec::new();
    let mut disabled: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.split_once('#').map_or(raw, |(a, _)| a).trim();
        if l.is_empty() {
            continue;
        }
        if !l.starts_with("--") || l.contains(char::is_whitespace) {
            return Err(FlagsError::NotAFlag {
                line,
                text: l.to_owned(),
            });
        }
        let name = l.split_once('=').map_or(l, |(n, _)| n);
        if OWNED.contains(&name) {
            return Err(FlagsError::Owned {
                line,
                flag: name.to_owned(),
            });
        }
        if FORBIDDEN.contains(&name) {
            return Err(FlagsError::Forbidden {
                line,
                flag: name.to_owned(),
            });
        }
        if let Some(list) = l.strip_prefix("--disable-features=") {
            for f in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
                if !disabled.iter().any(|d| d == f) {
                    disabled.push(f.to_owned());
                }
            }
            continue;
        }
        flags.push(l.to_owned());
    }
    if !disabled.is_empty() {
        flags.push(format!("--disable-features={}", disabled.join(",")));
    }
    Ok(flags)
}

/// The full argument list: file flags, then the controller's own. Every connection goes
/// through the egress hop at `egress` (the port of its SOCKS5 server in Chrome's network),
/// loopback included (`<-loopback>`: Chrome otherwise never proxies 127.0.0.1).
pub fn chrome_args(
    file_flags: &[String],
    user_data_dir: &Path,
    debug_port: u16,
    egress: u16,
) -> Vec<String> {
    let mut args = file_flags.to_vec();
    args.push("--headless=new".to_owned());
    args.push(format!("--user-data-dir={}", user_data_dir.display()));
    args.push("--remote-debugging-address=127.0.0.1".to_owned());
    args.push(format!("--remote-debugging-port={debug_port}"));
    args.push(format!("--proxy-server=socks5://127.0.0.1:{egress}"));
    args.push("--proxy-bypass-list=<-loopback>".to_owned());
    args.push("about:blank".to_owned());
    args
}

/// The `User-Agent` a headful Chrome of `version_line`'s major version on Linux sends (the
/// reduced form: `Chrome/<major>.0.0.0`), from `chromium --version`'s output (`Chromium
/// 156.0.8078.129 built on Debian…`, `Google Chrome 156.0.…`). Headless Chrome names itself
/// `HeadlessChrome/…`, the first thing a bot check reads; every hosted peer removes it.
pub fn headful_user_agent(version_line: &str) -> Option<String> {
    let version = version_line
        .split_whitespace()
        .find(|w| w.split('.').count() == 4 && w.split('.').all(|p| p.parse::<u32>().is_ok()))?;
    let major = version.split('.').next()?;
    Some(format!(
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{major}.0.0.0 Safari/537.36"
    ))
}

/// Adds `--user-agent` (before the start page) unless the flags file chose one.
pub fn user_agent(args: &mut Vec<String>, ua: &str) {
    if args.iter().any(|a| a.starts_with("--user-agent=")) {
        return;
    }
    let at = args.len().saturating_sub(1);
    args.insert(at, format!("--user-agent={ua}"));
}

/// Adds the flags that keep WebRTC's UDP behind the proxy: with a session's proxy in force, a
/// page's ICE gathering (STUN) would otherwise send UDP from the task's own address, which
/// the egress hop (TCP only) never sees. Before the last argument (the start page). The full
/// browser reads the first (it sets the preference); a headless shell
/// ([`is_headless_shell`]) has no such preference and reads only the second, which the full
/// browser does not know and ignores (`tests/local_e2e/egress.rs` sends STUN through both).
pub fn proxied_udp_only(args: &mut Vec<String>) {
    let at = args.len().saturating_sub(1);
    for flag in [
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    ] {
        args.insert(at, flag.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_flags_parse_with_one_disable_features() {
        let flags = parse_flags(BUILTIN_FLAGS).unwrap();
        let df: Vec<_> = flags
            .iter()
            .filter(|f| f.starts_with("--disable-features"))
            .collect();
        assert_eq!(df.len(), 1);
        assert!(df[0].contains("Translate") && df[0].contains("MediaRouter"));
        // The sandbox is the controller's decision (sandbox.rs), not a fixed flag.
        assert!(!flags.iter().any(|f| f == "--no-sandbox"));
        assert!(!flags.iter().any(|f| f.contains("disable-web-security")));
    }

    #[test]
    fn owned_and_forbidden_flags_are_refused() {
        assert_eq!(
            parse_flags("--no-first-run\n--user-data-dir=/x\n"),
            Err(FlagsError::Owned {
                line: 2,
                flag: "--user-data-dir".into()
            })
        );
        assert_eq!(
            parse_flags("--disable-web-security"),
            Err(FlagsError::Forbidden {
                line: 1,
                flag: "--disable-web-security".into()
            })
        );
        assert!(matches!(
            parse_flags("no-dashes"),
            Err(FlagsError::NotAFlag { .. })
        ));
    }

    #[test]
    fn disable_features_are_merged_and_deduplicated() {
        let f = parse_flags("--disable-features=A,B\n--mute-audio # c\n--disable-features=B,C\n")
            .unwrap();
        assert_eq!(
            f,
            vec![
                "--mute-audio".to_owned(),
                "--disable-features=A,B,C".to_owned()
            ]
        );
    }

    #[test]
    fn controller_flags_bind_loopback() {
        let mut a = chrome_args(&[], Path::new("/p"), 0, 1);
        assert!(a.contains(&"--remote-debugging-address=127.0.0.1".to_owned()));
        assert!(a.contains(&"--user-data-dir=/p".to_owned()));
        assert!(a.contains(&"--headless=new".to_owned()));
        assert!(!a.iter().any(|f| f.starts_with("--webrtc")));
        proxied_udp_only(&mut a);
        assert_eq!(
            a[a.len() - 3..],
            [
                "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".to_owned(),
                "--webrtc-ip-handling-policy=disable_non_proxied_udp".to_owned(),
                "about:blank".to_owned()
            ]
        );
    }

    #[test]
    fn the_managed_policy_leaves_the_proxy_to_the_flags() {
        // A proxy policy would override `--proxy-server` and take Chrome past its egress.
        let policy: serde_json::Value = serde_json::from_str(include_str!(
            "../../chrome/policies/managed/wallcrawler.json"
        ))
        .unwrap();
        let keys: Vec<&String> = policy.as_object().unwrap().keys().collect();
        assert!(!keys.is_empty());
        assert!(!keys.iter().any(|k| k.starts_with("Proxy")), "{keys:?}");
    }

    #[test]
    fn the_user_agent_names_chrome_not_headless_chrome() {
        let ua =
            headful_user_agent("Chromium 156.0.8078.129 built on Debian GNU/Linux 12 (bookworm)")
                .unwrap();
        assert_eq!(
            ua,
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
        );
        assert_eq!(
            headful_user_agent("Google Chrome 157.0.1.2 "),
            Some(ua.replace("156", "157"))
        );
        assert_eq!(headful_user_agent("garbage"), None);
        let mut a = chrome_args(&[], Path::new("/p"), 0, 1);
        user_agent(&mut a, &ua);
        assert_eq!(a[a.len() - 2], format!("--user-agent={ua}"));
        let mut own = chrome_args(&["--user-agent=mine".to_owned()], Path::new("/p"), 0, 1);
        user_agent(&mut own, &ua);
        assert_eq!(
            own.iter()
                .filter(|f| f.starts_with("--user-agent="))
                .count(),
            1
        );
    }

    #[test]
    fn every_network_sends_everything_through_the_egress() {
        let a = chrome_args(&[], Path::new("/p"), 0, 4321);
        assert!(a.contains(&"--proxy-server=socks5://127.0.0.1:4321".to_owned()));
        assert!(a.contains(&"--proxy-bypass-list=<-loopback>".to_owned()));
        for owned in [
            "--proxy-server=http://evil:1",
            "--proxy-bypass-list=*",
            "--no-proxy-server",
            "--proxy-pac-url=http://x/p.pac",
            "--webrtc-ip-handling-policy=default",
        ] {
            assert!(
                matches!(parse_flags(owned), Err(FlagsError::Owned { .. })),
                "{owned}"
            );
        }
    }
}
