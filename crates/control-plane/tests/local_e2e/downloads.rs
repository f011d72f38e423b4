//! Downloads through the local platform: real controllers and Chromium, Playwright and
//! Puppeteer clicking links served on 127.0.0.1, the stock Node and Python SDKs reading
//! `sessions.downloads.list(id)` (tests/node/downloads.mjs).

use std::io::Read;
use std::path::Path;

use super::*;

/// downloads.mjs `scenario` against `s`, files and zips in `out`.
fn run_scenario(s: &Server, scenario: &str, out: &Path, elsewhere: &Path) -> serde_json::Value {
    let output = node::command("downloads.mjs")
        .args(["--base", &s.base, "--key", &s.key, "--project", &s.project])
        .args(["--scenario", scenario, "--out"])
        .arg(out)
        .arg("--elsewhere")
        .arg(elsewhere)
        .output()
        .unwrap();
    node::output_json(scenario, &output)
}

/// Every entry of the zip at `path`: name and bytes.
fn entries(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).unwrap();
            let mut v = Vec::new();
            f.read_to_end(&mut v).unwrap();
            (f.name().unwrap().into_owned(), v)
        })
        .collect()
}

/// The entry stored for the download `stem.ext`: named `<stem>-<unix ms>.<ext>`.
fn entry<'a>(all: &'a [(String, Vec<u8>)], stem: &str, ext: &str) -> &'a [u8] {
    let found = all.iter().find(|(n, _)| {
        n.strip_prefix(&format!("{stem}-"))
            .and_then(|r| r.strip_suffix(&format!(".{ext}")))
            .is_some_and(|ms| ms.len() >= 13 && ms.bytes().all(|b| b.is_ascii_digit()))
    });
    let names: Vec<_> = all.iter().map(|(n, _)| n).collect();
    &found
        .unwrap_or_else(|| panic!("no {stem}.{ext} entry in {names:?}"))
        .1
}

/// Playwright (in a context of its own, with its own download path) and Puppeteer (after
/// pointing the browser's download path elsewhere) each download a file of a few MB; the
/// zip the stock Node SDK gets holds exactly those bytes, nothing landed where Puppeteer
/// pointed, the files are under the session's prefix, and the stock Python SDK gets the same
/// zip.
#[test]
fn playwright_and_puppeteer_downloads_are_stored_and_served_as_a_zip() {
    let s = Server::start("25");
    let out = tempfile::tempdir().unwrap();
    let elsewhere = out.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let r = run_scenario(&s, "capture", out.path(), &elsewhere);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["playwright"]["failure"], serde_json::Value::Null, "{r}");
    assert_eq!(r["playwright"]["suggested"], "report.csv", "{r}");
    assert_eq!(r["puppeteer"]["state"], "completed", "{r}");
    let all = entries(&out.path().join("downloads.zip"));
    assert_eq!(all.len(), 2, "{r}");
    let served = |n: &str| std::fs::read(out.path().join(n)).unwrap();
    assert!(entry(&all, "report", "csv") == served("report.csv"));
    assert!(entry(&all, "data", "bin") == served("data.bin"));
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing lands where the client pointed"
    );
    let sid = r["sessionId"].as_str().unwrap();
    let stored = s
        .dir()
        .join("contexts/files")
        .join(&s.project)
        .join(sid)
        .join("downloads");
    assert_eq!(std::fs::read_dir(&stored).unwrap().count(), 2);
    // The session's log notes both downloads, begun and completed (stored within its 500 ms
    // flush: looked for until a generous deadline), each in one entry (one line).
    let completed = |text: &str| {
        text.lines()
            .filter(|l| l.contains("a download completed"))
            .count()
    };
    let logs = stored.with_file_name("logs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let noted = loop {
        let text: String = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        if completed(&text) >= 2 || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    for said in [
        "a download began: \\\"report.csv\\\"",
        "a download began: \\\"data.bin\\\"",
    ] {
        assert!(noted.contains(said), "no {said} in the log: {noted}");
    }
    assert_eq!(completed(&noted), 2, "{noted}");

    // The stock Python SDK, as written.
    let py = out.path().join("py.zip");
    let status = Command::new(wallcrawler_testkit::repo_root().join(".venv/bin/python"))
        .args([
            "-c",
            "import sys\nfrom browserbase import Browserbase\n\
             bb = Browserbase(api_key=sys.argv[1], base_url=sys.argv[2])\n\
             open(sys.argv[4], 'wb').write(bb.sessions.downloads.list(sys.argv[3]).read())",
            &s.key,
            &s.base,
            sid,
        ])
        .arg(&py)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(entries(&py), all);
    s.stop();
}

/// A download whose server sends half the body and holds is reported in progress (202 with
/// Retry-After), never as a zip; once the body is finished the zip holds all of it.
#[test]
fn a_download_in_progress_is_reported_as_such_then_served_whole() {
    let s = Server::start("25");
    let out = tempfile::tempdir().unwrap();
    let r = run_scenario(&s, "progress", out.path(), out.path());
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["held"]["status"], 202, "{r}");
    assert_eq!(r["held"]["retryAfter"], "2", "{r}");
    let all = entries(&out.path().join("downloads.zip"));
    assert_eq!(all.len(), 1, "{r}");
    assert!(entry(&all, "slow", "bin") == std::fs::read(out.path().join("slow.bin")).unwrap());
    s.stop();
}

/// Past the per-session caps (2 files, 4 MiB here) a download is cancelled in the browser
/// (the client sees it fail) and not stored; the others are.
#[test]
fn downloads_past_the_caps_are_refused_and_not_stored() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
    let s = Server::spawn_with(
        "25",
        &bin.with_file_name("wallcrawler-controller"),
        &[
            ("DOWNLOADS_MAX_FILES", "2"),
            ("DOWNLOADS_MAX_BYTES", "4194304"),
        ],
    );
    let out = tempfile::tempdir().unwrap();
    let r = run_scenario(&s, "caps", out.path(), out.path());
    assert_eq!(r["ok"], true, "{r}");
    let f = &r["failures"];
    assert_eq!(f["small-1.bin"], serde_json::Value::Null, "{r}");
    assert_eq!(f["big.bin"], "canceled", "over the byte cap: {r}");
    assert_eq!(f["small-2.bin"], serde_json::Value::Null, "{r}");
    assert_eq!(f["small-3.bin"], "canceled", "over the file cap: {r}");
    let all = entries(&out.path().join("downloads.zip"));
    let names: Vec<_> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(all.len(), 2, "{names:?}");
    assert!(
        entry(&all, "small-1", "bin") == std::fs::read(out.path().join("small-1.bin")).unwrap()
    );
    assert!(
        entry(&all, "small-2", "bin") == std::fs::read(out.path().join("small-2.bin")).unwrap()
    );
    s.stop();
}
