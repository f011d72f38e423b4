//! Where context profile archives live.

/// File name of the profile archive inside a context's prefix.
pub const PROFILE_ARCHIVE_NAME: &str = "profile.tar.gz";

/// Extra file at the archive root holding the session cookies exported over CDP.
pub const SESSION_COOKIES_FILE: &str = "wallcrawler-session-cookies.json";

/// `<projectId>/<contextId>/profile.tar.gz`.
pub fn profile_key(project_id: &str, context_id: &str) -> String {
    format!("{project_id}/{context_id}/{PROFILE_ARCHIVE_NAME}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_layout() {
        assert_eq!(
            super::profile_key("proj_1", "ctx_2"),
            "proj_1/ctx_2/profile.tar.gz"
        );
    }
}
