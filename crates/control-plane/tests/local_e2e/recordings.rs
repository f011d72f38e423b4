//! A session's recording through the local platform: real controllers, Chromium and ffmpeg,
//! Puppeteer showing a red page served on 127.0.0.1, the stock Node SDK reading
//! `sessions.replays` and `sessions.recording.downloads` (tests/node/recordings.mjs); the
//! video judged by decoding it with ffmpeg.

use serde_json::Value;
use wallcrawler_testkit::video::red_share;

use super::*;

/// Another project's session, with a recording in the data directory as its controller
/// would have stored it: it exists, so a 404 for it is the project's scope at work.
fn foreign_recorded_session(s: &Server) -> String {
    let mut foreign = SessionDoc {
        session_id: "sess_recording_foreign".into(),
        project_id: "proj_someone_else".into(),
        created_at: wallcrawler_contract::time::iso8601_millis(1_767_225_600_000),
        expires_at: 4_102_444_800,
        ..Default::default()
    };
    foreign.set_status(wallcrawler_contract::InternalStatus::Ready);
    DirStore::new(s.dir().join("sessions"))
        .create(&foreign)
        .unwrap();
    let (p, id) = (&foreign.project_id, &foreign.session_id);
    let key = wallcrawler_contract::recording::index_key(p, id, "0");
    let index = serde_json::json!({"pageId": "0", "url": "http://127.0.0.1/secret",
        "startTimeMs": 1, "endTimeMs": 2001, "ended": true,
        "segments": [{"name": "seg-00000.ts", "duration": 2.0}]});
    let path = s.dir().join("contexts").join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, index.to_string()).unwrap();
    foreign.session_id
}

/// The page is listed while the session runs; after the end its playlist's segments, fetched
/// by their signed URLs, show the red page one second in; the MP4 download is built
/// (`PENDING`, then `COMPLETED` with a URL) and shows it too; `…/recording` is a 410 pointing
/// at `/replays`; a page id that is not one, another project's session and an altered
/// signature are refused.
#[test]
fn a_session_is_recorded_as_video_and_downloads_as_mp4() {
    let s = Server::start("25");
    let out = tempfile::tempdir().unwrap();
    let foreign = foreign_recorded_session(&s);
    let run = node::command("recordings.mjs")
        .args(["--base", &s.base, "--key", &s.key, "--project", &s.project])
        .args(["--scenario", "recorded", "--foreign", &foreign])
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let r = node::output_json("recorded", &run);
    judge_recorded(&s, &r);
}

fn judge_recorded(s: &Server, r: &Value) {
    assert_eq!(r["ok"], true, "{r}");
    // While it ran: the page, its URL, at least 3 s of video.
    let running = &r["running"]["pages"][0];
    assert_eq!(running["pageId"], "0", "{r}");
    assert_eq!(running["url"], r["url"], "{r}");
    // After: one page, its times within the session's.
    assert_eq!(r["replays"]["pageCount"], 1, "{r}");
    let page = &r["replays"]["pages"][0];
    let ms = |v: &Value| wallcrawler_contract::time::parse_iso8601(v.as_str().unwrap()).unwrap();
    let (start, end) = (
        page["startTimeMs"].as_u64().unwrap(),
        page["endTimeMs"].as_u64().unwrap(),
    );
    assert!(
        ms(&r["createdAt"]) - 1000 <= start && start + 3000 <= end,
        "{page}"
    );
    assert!(end <= ms(&r["endedAt"]) + 3000, "{page} {}", r["endedAt"]);
    // The playlist: HLS, VOD, each segment a signed URL of this server.
    assert_eq!(r["contentType"], "application/vnd.apple.mpegurl", "{r}");
    let playlist = r["playlist"].as_str().unwrap();
    assert!(playlist.starts_with("#EXTM3U\n"), "{playlist}");
    assert!(playlist.contains("#EXT-X-ENDLIST"), "{playlist}");
    let seg_urls: Vec<&str> = playlist.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(seg_urls.len() >= 2, "{playlist}");
    for u in &seg_urls {
        assert!(
            u.starts_with(&format!("{}/_local/objects/files/", s.base)),
            "{u}"
        );
        assert!(u.contains("signature="), "{u}");
    }
    let ts = Path::new(r["ts"].as_str().unwrap());
    let share = red_share(ts, "1");
    assert!(share > 0.9, "{share} of the replay's frame at 1 s is red");
    // The MP4: PENDING when asked, COMPLETED with a URL, red at 1 s.
    let created = &r["downloads"]["created"][0];
    assert_eq!(created["pageId"], "0", "{r}");
    assert!(
        created["status"] == "PENDING" || created["status"] == "COMPLETED",
        "{created}"
    );
    let listed = &r["downloads"]["listed"][0];
    assert_eq!(listed["status"], "COMPLETED", "{listed}");
    assert!(listed["completedAt"].is_string(), "{listed}");
    let mp4 = Path::new(r["downloads"]["mp4"].as_str().unwrap());
    let share = red_share(mp4, "1");
    assert!(share > 0.9, "{share} of the MP4's frame at 1 s is red");
    // rrweb: gone, pointing at the replays.
    assert_eq!(r["gone"]["status"], 410, "{r}");
    assert!(
        r["gone"]["error"]["replays"]
            .as_str()
            .is_some_and(|p| p.ends_with("/replays")),
        "{r}"
    );
    let h = &r["hostile"];
    for (what, status) in [
        ("dotdot", 404),
        ("leadingZero", 404),
        ("notRecorded", 404),
        ("alteredSignature", 403),
    ] {
        assert_eq!(h[what], status, "{what}: {h}");
    }
    for what in [
        "foreignReplays",
        "foreignPage",
        "foreignDownloads",
        "foreignRecording",
    ] {
        assert_eq!(h[what]["status"], 404, "{what}: {h}");
    }
}

/// `recordSession: false`: no page recorded, nothing stored.
#[test]
fn a_session_created_with_record_session_false_records_nothing() {
    let s = Server::start("25");
    let r = s.node_script("recordings.mjs", "unrecorded", &[]);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["replays"]["pageCount"], 0, "{r}");
    assert_eq!(r["replays"]["pages"], serde_json::json!([]), "{r}");
    assert_eq!(r["downloads"]["downloads"], serde_json::json!([]), "{r}");
    let sid = r["sessionId"].as_str().unwrap();
    let dir = s.dir().join("contexts/files").join(&s.project).join(sid);
    assert!(!dir.join("recordings").exists(), "{}", dir.display());
}

/// An encoder that cannot start (`FFMPEG_PATH` naming no program, passed by `serve` to its
/// controllers): the session runs, no page is listed, and its log says why.
#[test]
fn a_page_whose_encoder_cannot_start_is_not_recorded_and_the_log_says_so() {
    let s = Server::spawn_with(
        "25",
        &controller_bin(),
        &[("FFMPEG_PATH", "/nonexistent/ffmpeg")],
    );
    let r = s.node_script("recordings.mjs", "no-encoder", &[]);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["replays"]["pageCount"], 0, "{r}");
    let notes = r["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("the video encoder (ffmpeg) could not start"))),
        "{r}"
    );
}
