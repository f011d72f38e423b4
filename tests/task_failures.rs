//! The task refuses what it must and fails clearly: hostile profile archives (each with its
//! reason in the item, a non-zero exit and a canary outside the profile untouched), dead
//! dependencies at start, and an interrupted upload that leaves the previous archive intact.

use std::path::Path;
use std::time::{Duration, Instant};

use tar::EntryType;
use wallcrawler_contract::storage::profile_key;
use wallcrawler_testkit::tar::raw_tar;

use crate::support::aws::{self, AttributeValue, get_session, put_session, s, text};
use crate::support::{Controller, WAIT, now, public_key, run_task};

const PROJECT: &str = "proj_fail";

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
        self.run_measured(archive, extra).reason
    }

    /// Runs the task on `archive`, checks the common refusal, and measures the controller.
    fn run_measured(&self, archive: Vec<u8>, extra: &[(&str, &str)]) -> Run {
        let key = profile_key(PROJECT, &self.context);
        aws::put_object(&self.bucket, &key, archive);
        let profile = self.root.path().join("profile");
        let profile = profile.to_str().unwrap();
        let mut env = vec![
            ("SESSION_ID", self.session.as_str()),
            ("SESSIONS_TABLE_NAME", self.table.as_str()),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", public_key()),
            ("CONTEXT_ID", self.context.as_str()),
            ("CONTEXTS_BUCKET_NAME", self.bucket.as_str()),
            ("CONTEXT_S3_KEY", key.as_str()),
            ("USER_DATA_DIR", profile),
        ];
        env.extend_from_slice(extra);
        let mut c = run_task(&env);
        let (status, sampled_peak_kib) = wait_exit_sampling_peak(&mut c);
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
        Run {
            reason: text(&item, "terminationReason").expect("a termination reason"),
            log: c.stderr.lines(),
            sampled_peak_kib,
        }
    }
}

/// A finished task run on a refused archive.
struct Run {
    reason: String,
    log: Vec<String>,
    /// The largest `VmHWM` read from `/proc/<pid>/status` while the controller ran.
    sampled_peak_kib: u64,
}

impl Run {
    /// The peak the controller reported itself as it exited (its `VmHWM` then).
    fn reported_peak_kib(&self) -> u64 {
        let line = self
            .log
            .iter()
            .find(|l| l.contains("task finished"))
            .unwrap_or_else(|| panic!("no 'task finished' line: {:?}", self.log));
        let re = regex_lite::Regex::new(r"peak_rss_kib[=:\x22]+(\d+)").unwrap();
        re.captures(line).unwrap_or_else(|| panic!("{line}"))[1]
            .parse()
            .unwrap()
    }
}

/// `VmHWM` of process `pid` in KiB (none once it has exited).
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Waits for the controller to exit (bounded), reading its peak RSS meanwhile.
fn wait_exit_sampling_peak(c: &mut Controller) -> (std::process::ExitStatus, u64) {
    let deadline = Instant::now() + WAIT;
    let mut peak = 0;
    loop {
        if let Some(kib) = vm_hwm_kib(c.child.id()) {
            peak = peak.max(kib);
        }
        if let Some(status) = c.child.try_wait().unwrap() {
            return (status, peak);
        }
        assert!(
            Instant::now() < deadline,
            "controller did not exit in time (peak so far {peak} KiB); stderr:\n{}",
            c.stderr.text()
        );
        // A child's exit and its memory have no event to wait on in std: 10 ms steps.
        std::thread::sleep(Duration::from_millis(10));
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

/// The refusal of an archive holding a symbolic link (the one named `name`).
fn assert_link_refused(reason: &str, name: &str) {
    assert_eq!(
        reason,
        format!(
            "the profile could not be restored: archive entry {name:?} is a symbolic link; \
             profile archives may not contain symbolic links"
        )
    );
}

impl Scene {
    /// Runs the task on `entries`; asserts the refusal of the link `name` and that no link
    /// was made in the profile.
    fn run_with_links(&self, entries: &[(&str, EntryType, &[u8], Option<&str>)], name: &str) {
        let r = self.run_with_archive(gzip(&raw_tar(entries)), &[]);
        assert_link_refused(&r, name);
        let profile = self.root.path().join("profile");
        for e in walk(&profile) {
            assert!(
                !std::fs::symlink_metadata(&e)
                    .unwrap()
                    .file_type()
                    .is_symlink(),
                "{e:?} is a link"
            );
        }
    }
}

/// Every path under `dir`, not following links.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// What `x -> .` makes of a link one directory down: on paper it never climbs above the
/// profile; on disk every `x/` stays at the profile's root, so the `..`s climb out to `/`.
const CHAIN: &str = "../x/x/x/x/x/x/x/x/x/x/x/x/../../../../../../../../../../../../";

#[test]
fn archive_with_a_link_chain_climbing_out() {
    let sc = Scene::new();
    let evil = format!("{CHAIN}etc/passwd");
    sc.run_with_links(
        &[
            ("x", EntryType::Symlink, b"", Some(".")),
            ("Default", EntryType::Directory, b"", None),
            ("Default/evil", EntryType::Symlink, b"", Some(&evil)),
        ],
        "x",
    );
}

/// The saved session cookies as a link (through a chain) to `/dev/zero`: read whole, it would
/// fill the controller's memory.
#[test]
fn archive_with_session_cookies_linked_to_dev_zero() {
    let sc = Scene::new();
    let zero = format!("{CHAIN}dev/zero");
    sc.run_with_links(
        &[
            ("x", EntryType::Symlink, b"", Some(".")),
            ("Default", EntryType::Directory, b"", None),
            ("Default/zero", EntryType::Symlink, b"", Some(&zero)),
            (
                "wallcrawler-session-cookies.json",
                EntryType::Symlink,
                b"",
                Some("Default/zero"),
            ),
        ],
        "x",
    );
}

#[test]
fn archive_with_symlink_out_and_a_file_through_it() {
    let sc = Scene::new();
    let target = sc.canary().display().to_string();
    sc.run_with_links(
        &[
            ("escape", EntryType::Symlink, b"", Some(&target)),
            ("escape/evil.txt", EntryType::Regular, b"x", None),
        ],
        "escape",
    );
}

/// A link whose target is another link, which leads out of the profile (to the directory
/// holding the canary) though on paper it stays inside.
#[test]
fn archive_with_a_link_to_a_link() {
    let sc = Scene::new();
    sc.run_with_links(
        &[
            ("Default", EntryType::Directory, b"", None),
            ("Default/hop", EntryType::Symlink, b"", Some("out")),
            ("x", EntryType::Symlink, b"", Some(".")),
            (
                "Default/out",
                EntryType::Symlink,
                b"",
                Some("../x/x/../canary"),
            ),
        ],
        "Default/hop",
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

/// A gzip member holding `head`, then `mib` MiB of `fill`, then `tail`, made without
/// holding or deflating the middle whole: one MiB is deflated from an empty window (so it
/// refers only to itself) and its deflate output repeated.
fn gzip_with_filler(head: &[u8], fill: u8, mib: usize, tail: &[u8]) -> Vec<u8> {
    use flate2::{Compress, Compression, Crc, FlushCompress, Status};
    fn deflate(data: &[u8], flush: FlushCompress) -> Vec<u8> {
        let mut c = Compress::new(Compression::best(), false);
        let mut out = Vec::with_capacity(64 * 1024);
        loop {
            if out.len() == out.capacity() {
                out.reserve(64 * 1024);
            }
            let consumed = c.total_in() as usize;
            let status = c.compress_vec(&data[consumed..], &mut out, flush).unwrap();
            let all_in = c.total_in() as usize == data.len();
            match flush {
                FlushCompress::Finish if status == Status::StreamEnd => return out,
                FlushCompress::Sync if all_in && out.len() < out.capacity() => return out,
                _ => {}
            }
        }
    }
    let chunk = vec![fill; 1 << 20];
    let mut chunk_crc = Crc::new();
    chunk_crc.update(&chunk);
    let mut crc = Crc::new();
    crc.update(head);
    for _ in 0..mib {
        crc.combine(&chunk_crc);
    }
    crc.update(tail);
    let middle = deflate(&chunk, FlushCompress::Sync);
    let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    gz.extend_from_slice(&deflate(head, FlushCompress::Sync));
    for _ in 0..mib {
        gz.extend_from_slice(&middle);
    }
    gz.extend_from_slice(&deflate(tail, FlushCompress::Finish));
    gz.extend_from_slice(&crc.sum().to_le_bytes());
    gz.extend_from_slice(&crc.amount().to_le_bytes());
    gz
}

/// MiB of the huge extension headers: hundreds of MB decompressed, well under 1 MB stored.
const HUGE_MIB: usize = 300;

/// A tar of one extension header of `kind` holding `prefix`, `HUGE_MIB` MiB of `a` and
/// `suffix`, then a small file it describes, gzipped.
fn huge_extension_archive(kind: EntryType, prefix: &[u8], suffix: &[u8]) -> (Vec<u8>, u64) {
    let size = (prefix.len() + (HUGE_MIB << 20) + suffix.len()) as u64;
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
    h.set_cksum();
    let mut head = h.as_bytes().to_vec();
    head.extend_from_slice(prefix);
    let mut tail = suffix.to_vec();
    tail.resize(tail.len() + (512 - size as usize % 512) % 512, 0);
    tail.extend_from_slice(&raw_tar(&[("Default/f", EntryType::Regular, b"x", None)]));
    (gzip_with_filler(&head, b'a', HUGE_MIB, &tail), size)
}

/// With `PROFILE_MAX_BYTES` at 1 MiB, a huge extension header is refused by its declared size:
/// the controller stays small, its log lines short, and the item FAILED with a short reason.
fn huge_extension_is_refused_in_small_memory(
    kind: EntryType,
    prefix: &[u8],
    suffix: &[u8],
    what: &str,
) {
    let (archive, size) = huge_extension_archive(kind, prefix, suffix);
    assert!(archive.len() < 1 << 20, "{} bytes stored", archive.len());
    let sc = Scene::new();
    let run = sc.run_measured(archive, &[("PROFILE_MAX_BYTES", "1048576")]);
    assert_eq!(
        run.reason,
        format!(
            "the profile could not be restored: archive has a {what} header of {size} bytes \
             (at most 65536 are allowed)"
        )
    );
    assert!(run.reason.len() <= 1024);
    let longest = run.log.iter().map(String::len).max().unwrap_or(0);
    assert!(longest <= 16 * 1024, "a log line of {longest} bytes");
    let reported = run.reported_peak_kib();
    assert!(run.sampled_peak_kib > 0, "VmHWM was never read");
    for peak in [reported, run.sampled_peak_kib] {
        assert!(peak < 200 * 1024, "peak RSS {peak} KiB");
    }
}

#[test]
fn archive_with_a_huge_gnu_long_name() {
    huge_extension_is_refused_in_small_memory(
        EntryType::GNULongName,
        b"Default/",
        b"\0",
        "GNU long name",
    );
}

#[test]
fn archive_with_a_huge_pax_path() {
    // One PAX record, "<length> path=<value>\n", its length counting its own digits.
    let body = 1 + "path=".len() + (HUGE_MIB << 20) + 1;
    let mut len = body;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let prefix = format!("{len} path=");
    huge_extension_is_refused_in_small_memory(EntryType::XHeader, prefix.as_bytes(), b"\n", "PAX");
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
        ("WALLCRAWLER_JWT_PUBLIC_KEY", public_key()),
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
            "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:no-such-secret",
        ),
    ]);
    assert_ne!(c.wait_exit().code(), Some(0));
    let item = get_session(&sc.table, &sc.session);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    // A short reason in the item; the SDK's detail only in the log.
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some(
            "the public key secret is unavailable: the Secrets Manager refused the request \
             (see the task log)"
        ),
        "{item:?}"
    );
    assert!(
        c.stderr.text().contains("ResourceNotFoundException"),
        "the detail is in the log: {}",
        c.stderr.text()
    );
    assert!(text(&item, "endedAt").is_some());
}

/// The contexts bucket is unreachable: the item says so in a few words, without the SDK's
/// error dump, which goes to the log.
#[test]
fn unreachable_bucket_is_a_short_reason() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let sc = Scene::new();
    let run = sc.run_measured(
        gzip(&raw_tar(&[("f", EntryType::Regular, b"x", None)])),
        &[("AWS_ENDPOINT_URL_S3", &dead)],
    );
    assert_eq!(
        run.reason,
        "the profile could not be restored: the contexts bucket is unreachable (see the task log)"
    );
    let log = run.log.join("\n");
    assert!(
        log.contains("restoring the profile failed") && log.contains("dispatch failure"),
        "the detail is in the log: {log}"
    );
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

/// A session log chunk is stored with the tag the bucket's lifecycle rule expires
/// (`SessionRecordRetentionDays`); a profile archive is not.
#[test]
fn a_log_chunk_is_tagged_to_expire_and_an_archive_is_not() {
    use wallcrawler_contract::session_log::{RECORD_TAGGING, session_log_chunk_key};
    use wallcrawler_controller::stores::ArchiveStore;
    let bucket = aws::create_bucket();
    let store = wallcrawler_controller::aws::S3Archives::new(&aws::sdk(), bucket.clone());
    let chunk = session_log_chunk_key("proj_a", "sess_1", 1_765_100_000_000, 0);
    let archive = "proj_a/ctx_1/profile.tar.gz";
    let tags = |key: &str| {
        aws::rt()
            .block_on(store.put(key, Box::pin(&b"{}\n"[..])))
            .unwrap();
        let out = aws::rt()
            .block_on(
                aws::s3()
                    .get_object_tagging()
                    .bucket(&bucket)
                    .key(key)
                    .send(),
            )
            .unwrap();
        out.tag_set()
            .iter()
            .map(|t| format!("{}={}", t.key(), t.value()))
            .collect::<Vec<_>>()
    };
    assert_eq!(tags(&chunk), vec![RECORD_TAGGING.to_owned()]);
    assert_eq!(tags(archive), Vec::<String>::new());
}
