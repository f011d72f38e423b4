//! The data directory is ours or refused (issue 25, item 4): `serve` refuses a directory
//! another user owns or may write, a path through a link, a planted `local.json`, each with a
//! message naming what is wrong; links planted where the platform writes are never followed.
//! Tests run as root, so "another user" is uid 65534 (`chown`).

use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_control_plane::local::{FileMap, load_or_init};
use wallcrawler_local::session_dir::DirStore;

const OTHER: u32 = 65534;

fn other_owns(p: &Path) {
    chown(p, Some(OTHER), Some(OTHER)).unwrap();
}

/// A root-only file outside the data directory: what a planted link points at.
fn victim(dir: &Path) -> PathBuf {
    let v = dir.join("root-only");
    std::fs::write(&v, b"precious").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

/// `serve --data-dir <data_dir>` as a process, expected to refuse to start: its exit status
/// and stderr. One that starts (prints its `baseURL:`) is killed and the test fails.
fn serve_refusing(data_dir: &Path) -> (i32, String) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
    let out_dir = tempfile::tempdir().unwrap();
    let (out, err) = (out_dir.path().join("out"), out_dir.path().join("err"));
    let mut child = Command::new(bin)
        .args(["serve", "--port", "0", "--pool", "0", "--data-dir"])
        .arg(data_dir)
        .env("WALLCRAWLER_DIRECT_CONNECT", "true")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        let started = std::fs::read_to_string(&out).unwrap_or_default();
        if started.contains("baseURL:") || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve started on {}: {}",
                data_dir.display(),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out).unwrap();
    assert!(stdout.is_empty(), "nothing printed, no key: {stdout}");
    (
        status.code().expect("exited"),
        std::fs::read_to_string(&err).unwrap(),
    )
}

#[test]
fn serve_refuses_a_data_dir_another_user_owns_and_leaves_it_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    other_owns(&data);
    let (code, err) = serve_refusing(&data);
    assert_eq!(code, 1, "{err}");
    let want = format!(
        "{} is owned by uid {OTHER}, not by this user",
        data.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("the data directory"), "{err}");
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "nothing written"
    );
    let m = std::fs::metadata(&data).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o755, "not chmodded");
}

#[test]
fn serve_refuses_a_planted_local_json_and_never_uses_its_keys() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let planted = data.join("local.json");
    std::fs::write(
        &planted,
        br#"{"projectId":"proj_local","apiKey":"wc_local_attacker","signingKey":"attackerkey"}"#,
    )
    .unwrap();
    other_owns(&planted);
    let (code, err) = serve_refusing(&data);
    assert_eq!(code, 1, "{err}");
    let want = format!("{} is owned by uid {OTHER}", planted.display());
    assert!(err.contains(&want), "{err}");
    assert!(!err.contains("attacker"), "no key in the log: {err}");

    // Ours but writable by others: refused all the same, through the library too.
    chown(&planted, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = load_or_init(&data).err().expect("refused");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("local.json is writable by group or others (mode 666)"),
        "{msg}"
    );
}

#[test]
fn a_data_dir_writable_by_others_or_reached_through_a_link_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, err) = serve_refusing(&shared);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "{} is writable by group or others (mode 777)",
            shared.display()
        )),
        "{err}"
    );
    let m = std::fs::metadata(&shared).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o777, "not chmodded");

    // Group-writable: refused too.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
    let e = format!("{:#}", load_or_init(&shared).err().expect("refused"));
    assert!(e.contains("writable by group or others (mode 770)"), "{e}");

    // The data directory a link, or a link on its path: refused, nothing made at the target.
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = t.path().join("link");
    symlink(&real, &link).unwrap();
    let (code, err) = serve_refusing(&link);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("{} is a symbolic link", link.display())),
        "{err}"
    );
    let e = format!(
        "{:#}",
        load_or_init(&link.join("data")).err().expect("refused")
    );
    assert!(
        e.contains(&format!("{} is a symbolic link", link.display())),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(&real).unwrap().count(),
        0,
        "nothing written"
    );

    // Inside a directory another user owns (who could swap ours for theirs): refused.
    let theirs = t.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    other_owns(&theirs);
    let e = format!(
        "{:#}",
        load_or_init(&theirs.join("data")).err().expect("refused")
    );
    assert!(
        e.contains(&format!("inside {} (owner uid {OTHER}", theirs.display())),
        "{e}"
    );
}

/// The names the platform wrote through before (`<file>.json.tmp`, `<id>.json.tmp-<pid>`),
/// each planted as a link to a root-only file: the first start, the file stores and the
/// session documents write around them, the file keeps its bytes.
#[test]
fn links_planted_at_temporary_names_and_documents_are_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let victim = victim(t.path());
    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in ["local", "projects", "api-keys", "usage"] {
        symlink(&victim, data.join(format!("{f}.json.tmp"))).unwrap();
    }
    let id = load_or_init(&data).unwrap();
    assert!(id.api_key.starts_with("wc_local_"));
    let usage: FileMap<u64> = FileMap::new(data.join("usage.json"));
    usage.modify(|m| m.insert("p".into(), 1)).unwrap();
    for f in ["local", "projects", "api-keys", "usage"] {
        let written = data.join(format!("{f}.json"));
        assert!(
            std::fs::symlink_metadata(&written).unwrap().is_file(),
            "{f}"
        );
        let mode = std::fs::metadata(&written).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }

    let sessions = data.join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let tmp = sessions.join(format!("sess_1.json.tmp-{}", std::process::id()));
    symlink(&victim, &tmp).unwrap();
    symlink(&victim, sessions.join(".lock")).unwrap();
    let store = DirStore::new(&sessions);
    let doc = SessionDoc {
        session_id: "sess_1".into(),
        project_id: "p".into(),
        ..Default::default()
    };
    let e = store.create(&doc).unwrap_err();
    assert!(e.to_string().contains(".lock is a symbolic link"), "{e}");
    std::fs::remove_file(sessions.join(".lock")).unwrap();
    store.create(&doc).unwrap();
    store.update::<()>("sess_1", |_| Ok(true)).unwrap().unwrap();

    // A document that is a link is refused, not read (nor written) through.
    symlink(&victim, sessions.join("sess_2.json")).unwrap();
    let e = store.get("sess_2").unwrap_err();
    assert!(
        e.to_string().contains("sess_2.json is a symbolic link"),
        "{e}"
    );
    assert!(store.update::<()>("sess_2", |_| Ok(true)).is_err());

    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}
