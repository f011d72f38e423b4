//! The task refuses what it must and fails clearly: hostile profile archives (each with its
//! reason in the item, a non-zero exit and a canary outside the profile untouched), dead
//! dependencies at start, and an interrupted upload that leaves the previous archive intact.

use std::path::Path;
use std::time::Instant;

use tar::EntryType;
use wallcrawler_contract::storage::profile_key;

use crate::support::aws::{self, AttributeValue, get_session, put_session, s, text};
use crate::support::{KEY, WAIT, now, run_task};

const PROJECT: &str = "proj_fail";

/// A tar with raw headers (the tar crate's builders refuse the hostile entries).
fn raw_tar(entries: &[(&str, EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, kind, data, link) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(l) = link {
            h.as_gnu_mut().unwrap().linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

struct Scene {
    table: String,
    bucket: String,
    session: String,
    context: String,
    root: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        let table = aws::create_sessions_table();
        let bucket = aws::create_bucket();
        let session = format!("sess_{}", uuid::Uuid::new_v4());
        put_session(
            &table,
            vec![
                ("sessionId", s(&session)),
                ("internalStatus", s("PROVISIONING")),
                ("status", s("PENDING")),
                ("projectId", s(PROJECT)),
                ("expiresAt", AttributeValue::N((now() + 600).to_string())),
            ],
        );
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("canary")).unwrap();
        std::fs::write(root.path().join("canary/keep.txt"), "untouched").unwrap();
        Scene {
            table,
            bucket,
            session,
            context: aws::unique("ctx"),
            root,
        }
    }

    fn canary(&self) -> std::path::PathBuf {
        self.root.path().join("canary")
    }

    fn canary_intact(&self) {
        let names: Vec<_> = std::fs::read_dir(self.canary())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("keep.txt")],
            "something was written outside the profile"
        );
        assert_eq!(
            std::fs::read_to_string(self.canary().join("keep.txt")).unwrap(),
            "untouched"
        );
    }

    /// Runs the task on `archive` and returns the termination reason it wrote.
    fn run_with_archive(&self, archive: Vec<u8>, extra: &[(&str, &str)]) -> String {
        let key = profile_key(PROJECT, &self.context);
        aws::put_object(&self.bucket, &key, archive);
        let profile = self.root.path().join("profile");
        let profile = profile.to_str().unwrap();
        let mut env = vec![
            ("SESSION_ID", self.session.as_str()),
            ("SESSIONS_TABLE_NAME", self.table.as_str()),
            ("WALLCRAWLER_JWT_SIGNING_KEY", KEY),
            ("CONTEXT_ID", self.context.as_str()),
            ("CONTEXTS_BUCKET_NAME", self.bucket.as_str()),
            ("CONTEXT_S3_KEY", key.as_str()),
            ("USER_DATA_DIR", profile),
        ];
        env.extend_from_slice(extra);
        let mut c = run_task(&env);
        let status = c.wait_exit();
        assert_ne!(
            status.code(),
            Some(0),
            "a refused archive is a failure: {}",
            c.stderr.text()
        );
        let item = get_session(&self.table, &self.session);
        assert_eq!(
            text(&item, "internalStatus").as_deref(),
            Some("FAILED"),
            "{item:?}"
        );
        assert_eq!(text(&item, "status").as_deref(), Some("ERROR"));
        assert!(text(&item, "endedAt").is_some());
        assert!(
            !c.stderr.text().contains("chrome started"),
            "Chrome must not start on a refused profile"
        );
        self.canary_intact();
        text(&item, "terminationReason").expect("a termination reason")
    }
}

fn abs(scene: &Scene, rel: &str) -> String {
    scene.canary().join(rel).display().to_string()
}

#[test]
fn archive_with_parent_traversal() {
    let sc = Scene::new();
    let r = sc.run_with_archive(
        gzip(&raw_tar(&[(
            "../canary/evil.txt",
            EntryType::Regular,
            b"x",
            None,
        )])),
        &[],
    );
    assert!(
        r.contains("leaves the profile directory (..)") && r.contains("../canary/evil.txt"),
        "{r}"
    );
}

#[test]
fn archive_with_absolute_path() {
    let sc = Scene::new();
    let p = abs(&sc, "evil.txt");
    let r = sc.run_with_archive(gzip(&raw_tar(&[(&p, EntryType::Regular, b"x", None)])), &[]);
    assert!(r.contains("has an absolute path"), "{r}");
}

#[test]
fn archive_with_symlink_out_and_a_file_through_it() {
    let sc = Scene::new();
    let target = sc.canary().display().to_string();
    let tar = raw_tar(&[
        ("escape", EntryType::Symlink, b"", Some(&target)),
        ("escape/evil.txt", EntryType::Regular, b"x", None),
    ]);
    let r = sc.run_with_archive(gzip(&tar), &[]);
    assert!(
        r.contains("link pointing outside the profile directory"),
        "{r}"
    );
}

#[test]
fn archive_with_hard_link_outside() {
    let sc = Scene::new();
    let target = abs(&sc, "keep.txt");
    let r = sc.run_with_archive(
        gzip(&raw_tar(&[("hl", EntryType::Link, b"", Some(&target))])),
        &[],
    );
    assert!(r.contains("link pointing outside"), "{r}");
    // The canary's link count shows no link was made to it.
    assert_eq!(
        std::os::unix::fs::MetadataExt::nlink(
            &std::fs::metadata(sc.canary().join("keep.txt")).unwrap()
        ),
        1
    );
}

#[test]
fn archive_with_device_node() {
    let sc = Scene::new();
    let r = sc.run_with_archive(
        gzip(&raw_tar(&[("Default/dev", EntryType::Char, b"", None)])),
        &[],
    );
    assert!(r.contains("device file or FIFO"), "{r}");
}

#[test]
fn archive_over_the_size_limit() {
    let sc = Scene::new();
    let big = vec![0u8; 64 * 1024];
    let r = sc.run_with_archive(
        gzip(&raw_tar(&[("Default/big", EntryType::Regular, &big, None)])),
        &[("PROFILE_MAX_BYTES", "10000")],
    );
    assert!(r.contains("more than 10000 bytes"), "{r}");
}

#[test]
fn archive_with_truncated_gzip() {
    let sc = Scene::new();
    let data: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let full = gzip(&raw_tar(&[(
        "Default/data",
        EntryType::Regular,
        &data,
        None,
    )]));
    let r = sc.run_with_archive(full[..full.len() / 2].to_vec(), &[]);
    assert!(r.contains("truncated or corrupt"), "{r}");
}

#[test]
fn aws_unreachable_at_start_is_a_clear_error_in_bounded_time() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let started = Instant::now();
    let mut c = run_task(&[
        ("SESSION_ID", "sess_dead"),
        ("SESSIONS_TABLE_NAME", "wallcrawler-sessions"),
        ("WALLCRAWLER_JWT_SIGNING_KEY", KEY),
        ("AWS_ENDPOINT_URL", &dead),
    ]);
    assert_ne!(c.wait_exit().code(), Some(0));
    assert!(started.elapsed() < WAIT);
    let log = c.stderr.text();
    assert!(
        log.contains("the sessions table cannot be read") && log.contains("unreachable"),
        "{log}"
    );
}

#[test]
fn missing_secret_with_a_reachable_table_is_failed() {
    let sc = Scene::new();
    let mut c = run_task(&[
        ("SESSION_ID", sc.session.as_str()),
        ("SESSIONS_TABLE_NAME", sc.table.as_str()),
        (
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:no-such-secret",
        ),
    ]);
    assert_ne!(c.wait_exit().code(), Some(0));
    let item = get_session(&sc.table, &sc.session);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert!(
        text(&item, "terminationReason")
            .unwrap()
            .contains("signing secret is unavailable"),
        "{item:?}"
    );
    assert!(text(&item, "endedAt").is_some());
}

/// An upload that fails halfway (the archive stream breaks after three 8 MiB parts) leaves the
/// previous archive in place and readable, and no multipart upload behind.
#[test]
fn an_interrupted_upload_keeps_the_previous_archive() {
    use wallcrawler_controller::stores::ArchiveStore;
    let bucket = aws::create_bucket();
    let key = "proj/ctx/profile.tar.gz";
    aws::put_object(&bucket, key, b"previous good archive".to_vec());
    let store = wallcrawler_controller::aws::S3Archives::new(&aws::sdk(), bucket.clone());
    struct BreaksAfter(u64);
    impl tokio::io::AsyncRead for BreaksAfter {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.0 == 0 {
                return std::task::Poll::Ready(Err(std::io::Error::other(
                    "connection to the packer lost",
                )));
            }
            let n = (buf.remaining() as u64).min(self.0) as usize;
            buf.put_slice(&vec![7u8; n]);
            self.0 -= n as u64;
            std::task::Poll::Ready(Ok(()))
        }
    }
    let result = aws::rt().block_on(store.put(key, Box::pin(BreaksAfter(26 * 1024 * 1024))));
    assert!(result.is_err());
    assert_eq!(
        aws::get_object(&bucket, key).as_deref(),
        Some(&b"previous good archive"[..])
    );
    let uploads = aws::rt()
        .block_on(aws::s3().list_multipart_uploads().bucket(&bucket).send())
        .unwrap();
    assert!(
        uploads.uploads().is_empty(),
        "the incomplete upload was aborted"
    );
    // And a complete one replaces it.
    let n = aws::rt()
        .block_on(store.put(key, Box::pin(&b"new"[..])))
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(aws::get_object(&bucket, key).as_deref(), Some(&b"new"[..]));
    let _ = Path::new(key);
}
