//! Extensions read no file. Chromium gives an unpacked extension access to `file://` URLs by
//! default ("Allow access to file URLs" starts on for a developer's unpacked extension), so an
//! extension asking for `file:///*` (or `<all_urls>`) reads whatever Chrome's user can read,
//! from its own page or service worker: the managed `URLBlocklist` stops navigations, not an
//! extension's `fetch`. Chromium 156 has no policy or switch that turns that default off
//! (`ExtensionSettings`' `runtime_blocked_hosts` refuses a `file:` pattern, its
//! `file_url_navigation_allowed` is about navigations, `--disable-extensions-file-access-check`
//! grants rather than denies). What it does read, when it installs an unpacked extension
//! (`UnpackedInstaller::GetFlags`) and on every file access (`extensions::util::AllowFileAccess`),
//! is the profile's per-extension preference `extensions.settings.<id>.newAllowFileAccess`,
//! which takes precedence over the default.
//!
//! An unpacked extension's id is a hash of its absolute path (or of its manifest's `key`, which
//! the controller removes when it unpacks one). So before every launch the controller writes
//! `false` there for the one path it ever loads an extension from, [`extension_dir`] of the
//! profile, and for every extension the profile already names (a restored context's); after a
//! load it checks that Chrome gave the extension that very id ([`unpacked_id`]), and unloads it
//! otherwise. This holds in every mode: each mode's Chrome is started by [`super::Chrome::launch`].

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The preference Chromium reads for "Allow access to file URLs".
const ALLOW_FILE_ACCESS: &str = "newAllowFileAccess";
/// The most of an existing `Preferences` file read (Chrome's own is tens of KiB).
const MAX_PREFERENCES_BYTES: u64 = 16 * 1024 * 1024;

/// `<profile>-extension`: where a session's extension is unpacked and loaded from, beside the
/// profile and never inside it (so it is not archived with it).
pub fn extension_dir(user_data_dir: &Path) -> PathBuf {
    let mut dir = user_data_dir.as_os_str().to_owned();
    dir.push("-extension");
    dir.into()
}

/// The id Chromium gives an unpacked extension without a manifest `key` loaded from the
/// absolute, link-free `path` (`crx_file::id_util::GenerateIdForPath`): the first 16 bytes of
/// the SHA-256 of the path, each hex digit written as a letter from `a` to `p`.
pub fn unpacked_id(path: &Path) -> String {
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    digest[..16]
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .map(|nibble| char::from(b'a' + nibble))
        .collect()
}

/// The id the session's extension will have in Chrome on `user_data_dir` (which must exist).
pub fn expected_id(user_data_dir: &Path) -> std::io::Result<String> {
    let profile = std::fs::canonicalize(user_data_dir)?;
    Ok(unpacked_id(&extension_dir(&profile)))
}

/// Writes "no file access" into `user_data_dir`'s `Default/Preferences` for the session's
/// extension and every extension the profile names, keeping every other preference. Before
/// Chrome starts on the profile (Chrome rewrites the file from memory while it runs). A file
/// that is not a JSON object is replaced (Chrome would start with empty preferences, and the
/// default, from it), and so is a link or anything else that is not a regular file: never
/// followed (a restored profile is the client's).
pub fn deny_file_access(user_data_dir: &Path) -> std::io::Result<()> {
    let id = expected_id(user_data_dir)?;
    let dir = user_data_dir.join("Default");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let path = dir.join("Preferences");
    let existing = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) if file.metadata()?.is_file() => {
            let mut bytes = Vec::new();
            file.take(MAX_PREFERENCES_BYTES).read_to_end(&mut bytes)?;
            Some(bytes)
        }
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => None,
        Err(e) => return Err(e),
    };
    let out = denied(existing.as_deref(), &id);
    // A new file renamed over the old one: Chrome never reads half a file, and a link
    // planted at the name is replaced, not written through.
    let tmp = dir.join(".Preferences.wallcrawler");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// `prefs` (a `Preferences` file's bytes, if any) with `newAllowFileAccess: false` for `id` and
/// for every extension under `extensions.settings`.
fn denied(prefs: Option<&[u8]>, id: &str) -> Vec<u8> {
    let mut root = prefs
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    let settings = object_at(object_at(&mut root, "extensions"), "settings");
    let Value::Object(settings) = settings else {
        unreachable!("object_at makes an object");
    };
    settings
        .entry(id)
        .or_insert_with(|| Value::Object(Map::new()));
    for entry in settings.values_mut() {
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(e) = entry {
            e.insert(ALLOW_FILE_ACCESS.to_owned(), Value::Bool(false));
        }
    }
    serde_json::to_vec(&root).expect("a JSON value serializes")
}

/// The object under `key` of the object `v`, made (replacing anything else there) if needed.
fn object_at<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    let Value::Object(m) = v else {
        unreachable!("called on objects only");
    };
    let slot = m.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_chromiums_for_the_path() {
        // What Chromium 156 answered to `Extensions.loadUnpacked {"path": "/tmp/xp/ext"}`.
        assert_eq!(
            unpacked_id(Path::new("/tmp/xp/ext")),
            "mlnjlhheojclbbefpgcmopfloibahhpi"
        );
    }

    #[test]
    fn every_extension_named_and_the_sessions_lose_file_access() {
        let prefs = br#"{"browser":{"x":1},"extensions":{"settings":{
            "aaaa":{"location":4,"path":"/p","newAllowFileAccess":true},
            "bbbb":7}}}"#;
        let out: Value = serde_json::from_slice(&denied(Some(prefs), "cccc")).unwrap();
        assert_eq!(out["browser"]["x"], 1, "other preferences kept");
        let s = &out["extensions"]["settings"];
        for id in ["aaaa", "bbbb", "cccc"] {
            assert_eq!(s[id][ALLOW_FILE_ACCESS], false, "{id}: {out}");
        }
        assert_eq!(s["aaaa"]["path"], "/p");
        for broken in [&b"not json"[..], b"[1]", b"{\"extensions\":[]}"] {
            let out: Value = serde_json::from_slice(&denied(Some(broken), "cccc")).unwrap();
            assert_eq!(
                out["extensions"]["settings"]["cccc"][ALLOW_FILE_ACCESS],
                false
            );
        }
    }

    #[test]
    fn the_profiles_preferences_are_rewritten_and_a_link_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let profile = tmp.path().join("p");
        std::fs::create_dir_all(profile.join("Default")).unwrap();
        deny_file_access(&profile).unwrap();
        let id = expected_id(&profile).unwrap();
        let written: Value =
            serde_json::from_slice(&std::fs::read(profile.join("Default/Preferences")).unwrap())
                .unwrap();
        assert_eq!(
            written["extensions"]["settings"][&id][ALLOW_FILE_ACCESS],
            false
        );
        assert_eq!(
            id,
            unpacked_id(
                &std::fs::canonicalize(tmp.path())
                    .unwrap()
                    .join("p-extension")
            )
        );

        let secret = tmp.path().join("secret");
        std::fs::write(&secret, b"{\"s\":1}").unwrap();
        std::fs::remove_file(profile.join("Default/Preferences")).unwrap();
        std::os::unix::fs::symlink(&secret, profile.join("Default/Preferences")).unwrap();
        deny_file_access(&profile).unwrap();
        assert_eq!(
            std::fs::read(&secret).unwrap(),
            b"{\"s\":1}",
            "not written through"
        );
        let prefs = profile.join("Default/Preferences");
        assert!(std::fs::symlink_metadata(&prefs).unwrap().is_file());
        let written: Value = serde_json::from_slice(&std::fs::read(&prefs).unwrap()).unwrap();
        assert!(
            written.get("s").is_none(),
            "nothing read through the link: {written}"
        );
        assert_eq!(
            written["extensions"]["settings"][&id][ALLOW_FILE_ACCESS],
            false
        );
    }
}
