//! Which Chromium build a browser binary is, by its file name: the controller runs a headless
//! shell with what it lacks in mind, and the local platform refuses at create what it cannot do.

use std::path::Path;

/// Whether `binary` is a Chromium headless shell (Debian's `chromium-headless-shell`, Google's
/// `chrome-headless-shell`, a build's `headless_shell`), by its file name or, when it is a link,
/// by the name of the file it leads to, rather than the full browser. The shell starts with about half of the full browser's CPU, and has no
/// extensions, no PDF viewer, no managed policy, and the tells of a headless browser (no
/// `window.chrome`, no plugins, `HeadlessChrome` in `Sec-CH-UA`): `docs/operating.md`, "A
/// lighter browser".
pub fn is_headless_shell(binary: &Path) -> bool {
    let named = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains("headless-shell") || n.contains("headless_shell"))
    };
    named(binary) || std::fs::canonicalize(binary).is_ok_and(|real| named(&real))
}

/// Why sessions on a platform whose browser is `binary` cannot have an extension, if they
/// cannot: the answer to a create that names one.
pub fn no_extensions(binary: &Path) -> Option<String> {
    is_headless_shell(binary).then(|| {
        format!(
            "this platform's browser ({}) is a headless shell, which cannot load extensions",
            binary.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_headless_shell_is_known_by_its_name() {
        for shell in [
            "/usr/lib/chromium/chromium-headless-shell",
            "/usr/bin/chromium-headless-shell",
            "/opt/chrome-headless-shell-linux64/chrome-headless-shell",
            "out/Release/headless_shell",
        ] {
            assert!(is_headless_shell(Path::new(shell)), "{shell}");
            assert!(no_extensions(Path::new(shell)).is_some(), "{shell}");
        }
        for full in [
            "/usr/lib/chromium/chromium",
            "/opt/google/chrome/chrome",
            "/opt/headless-shell/chromium",
        ] {
            assert!(!is_headless_shell(Path::new(full)), "{full}");
            assert_eq!(no_extensions(Path::new(full)), None, "{full}");
        }
    }

    #[test]
    fn a_link_to_a_headless_shell_is_one_too() {
        let dir = tempfile::tempdir().unwrap();
        let shell = dir.path().join("chrome-headless-shell");
        std::fs::write(&shell, "").unwrap();
        let link = dir.path().join("chrome");
        std::os::unix::fs::symlink(&shell, &link).unwrap();
        assert!(is_headless_shell(&link));
        let full = dir.path().join("chromium");
        std::fs::write(&full, "").unwrap();
        let other = dir.path().join("browser");
        std::os::unix::fs::symlink(&full, &other).unwrap();
        assert!(!is_headless_shell(&other));
    }
}
