//! Where context profile archives, extension archives and session files live.

/// File name of the profile archive inside a context's prefix.
pub const PROFILE_ARCHIVE_NAME: &str = "profile.tar.gz";

/// Extra file at the archive root holding the session cookies exported over CDP.
pub const SESSION_COOKIES_FILE: &str = "wallcrawler-session-cookies.json";

/// `<projectId>/<contextId>/profile.tar.gz`.
pub fn profile_key(project_id: &str, context_id: &str) -> String {
    format!("{project_id}/{context_id}/{PROFILE_ARCHIVE_NAME}")
}

/// Where extension archives live in the contexts bucket (the data directory's `contexts/`
/// locally): one copy per project and content.
pub const EXTENSIONS_PREFIX: &str = "extensions";

/// `extensions/<projectId>/<sha256 hex>.zip`: an extension archive, named by its content so that
/// the same archive uploaded twice is kept once.
pub fn extension_key(project_id: &str, sha256_hex: &str) -> String {
    format!("{EXTENSIONS_PREFIX}/{project_id}/{sha256_hex}.zip")
}

/// Where archives too large for one API request wait between their presigned `PUT` and the
/// request that checks and keeps them (`POST /v1/extensions/uploads/{id}`); the bucket's
/// lifecycle removes what was never finished after a day.
pub const EXTENSION_UPLOADS_PREFIX: &str = "extension-uploads";

/// `extension-uploads/<projectId>/<uploadId>.zip`: a staged archive, not yet checked.
pub fn extension_upload_key(project_id: &str, upload_id: &str) -> String {
    format!("{EXTENSION_UPLOADS_PREFIX}/{project_id}/{upload_id}.zip")
}

/// Whether `key` is an extension archive's key of project `project_id`: what a claim may name.
pub fn is_extension_key(project_id: &str, key: &str) -> bool {
    key.strip_prefix(&format!("{EXTENSIONS_PREFIX}/{project_id}/"))
        .and_then(|k| k.strip_suffix(".zip"))
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Where a session's files live in the contexts bucket (the data directory's `contexts/`
/// locally): `files/<projectId>/<sessionId>/`, with `downloads/` (what the page downloaded,
/// uploaded by the controller) and `uploads/` (what the API was given for the browser) below.
/// No project id can be `files` (ids are `proj_…`), so the prefix never meets a profile's.
pub const FILES_PREFIX: &str = "files";

/// `files/<projectId>/<sessionId>/`: everything of one session's files, and nothing else.
pub fn session_files_prefix(project_id: &str, session_id: &str) -> String {
    format!("{FILES_PREFIX}/{project_id}/{session_id}/")
}

/// `files/<projectId>/<sessionId>/downloads/<name>`: a finished download (`name` is already the
/// stored name, `<stem>-<unix ms>.<ext>`, one path component).
pub fn download_key(project_id: &str, session_id: &str, name: &str) -> String {
    format!(
        "{}downloads/{name}",
        session_files_prefix(project_id, session_id)
    )
}

/// The largest uploaded file a controller brings down to the browser's disk (an upload through
/// the API is smaller still; one `PUT` to a presigned URL may be this large).
pub const MAX_UPLOAD_FETCH_BYTES: u64 = 64 * 1024 * 1024;

/// `files/<projectId>/<sessionId>/uploads/<escaped name>`: a file uploaded for the session's
/// browser (`name` one path component, see [`upload_name_problem`]), escaped by
/// [`key_segment`] so that any file name makes a key both S3 and the data directory's store
/// take.
pub fn upload_key(project_id: &str, session_id: &str, name: &str) -> String {
    format!(
        "{}uploads/{}",
        session_files_prefix(project_id, session_id),
        key_segment(name)
    )
}

/// `name` as one key segment of `A-Z a-z 0-9 . -` and `_`: every other byte (of its UTF-8), and
/// `_` itself, as `_XX` (upper-case hex). Reversible, and never `.` or `..` for a name that
/// is neither.
pub fn key_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    out
}

/// The longest uploaded file's name (bytes): what Linux file systems take.
pub const MAX_UPLOAD_NAME_BYTES: usize = 255;

/// Why `name` cannot be an uploaded file's name, if it cannot: it must be one path component
/// (not empty, not `.` or `..`, no `/` or `\`), without NUL or other control characters,
/// at most [`MAX_UPLOAD_NAME_BYTES`] bytes. The API refuses such names; the controller never
/// fetches one.
pub fn upload_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("the file has no name")
    } else if name == "." || name == ".." {
        Some("the file name cannot be . or ..")
    } else if name.contains(['/', '\\']) {
        Some("the file name must be one path component (no / or \\)")
    } else if name.chars().any(char::is_control) {
        Some("the file name cannot contain NUL or other control characters")
    } else if name.len() > MAX_UPLOAD_NAME_BYTES {
        Some("the file name is longer than 255 bytes")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn upload_names_are_one_path_component() {
        use super::upload_name_problem as problem;
        assert_eq!(problem("report 2026.csv"), None);
        assert_eq!(problem(".env"), None);
        for (bad, why) in [
            ("", "no name"),
            ("..", ". or .."),
            (".", ". or .."),
            ("../../x", "one path component"),
            ("/etc/passwd", "one path component"),
            ("a\\b", "one path component"),
            ("a\u{0}b", "control"),
            ("a\nb", "control"),
        ] {
            let e = problem(bad).unwrap();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(problem(&"x".repeat(256)).is_some());
        assert!(problem(&"x".repeat(255)).is_none());
    }

    #[test]
    fn key_layout() {
        assert_eq!(
            super::profile_key("proj_1", "ctx_2"),
            "proj_1/ctx_2/profile.tar.gz"
        );
        assert_eq!(
            super::download_key("proj_1", "s_2", "a-1.csv"),
            "files/proj_1/s_2/downloads/a-1.csv"
        );
        assert_eq!(
            super::upload_key("proj_1", "s_2", "b.txt"),
            "files/proj_1/s_2/uploads/b.txt"
        );
        assert_eq!(
            super::upload_key("proj_1", "s_2", "my_file (1).é"),
            "files/proj_1/s_2/uploads/my_5Ffile_20_281_29._C3_A9"
        );
        let h = "ab".repeat(32);
        let k = super::extension_key("proj_1", &h);
        assert_eq!(k, format!("extensions/proj_1/{h}.zip"));
        assert!(super::is_extension_key("proj_1", &k));
        assert!(!super::is_extension_key("proj_2", &k));
        assert!(!super::is_extension_key(
            "proj_1",
            "extensions/proj_1/../x.zip"
        ));
        assert!(!super::is_extension_key(
            "proj_1",
            &format!("extensions/proj_1/{}.zip", "AB".repeat(32))
        ));
    }
}
