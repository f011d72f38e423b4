//! A session's recording (`GET /v1/sessions/{id}/replays`, `…/replays/{pageId}`,
//! `…/recording/downloads`): per page, HLS segments (MPEG-TS, H.264) and a small index the
//! controller writes during the session, the MP4 built from them (by the controller when the
//! page's recording ends, or by the API on request while it goes on), and the request's state. Where they are stored, their shapes, and the playlist made from an index.
//!
//! Keys, beside the session's log: `files/<projectId>/<sessionId>/recordings/<pageId>.json`
//! is a page's index ([`PageIndex`]; the API lists them), and the folder
//! `…/recordings/<pageId>/` holds its segments `seg-00000.ts`, `seg-00001.ts`, …
//! ([`segment_name`]), `recording.mp4` and `download.json` ([`DownloadState`]). A `pageId` is
//! the page's place in the session's order of pages (`"0"` the first), as Browserbase numbers
//! them.

use serde::{Deserialize, Serialize};

use crate::storage::session_files_prefix;

/// The MP4 built from a page's segments.
pub const MP4_NAME: &str = "recording.mp4";
/// The state of a page's MP4 build.
pub const DOWNLOAD_NAME: &str = "download.json";
/// The most pages of one session recorded (a page id has at most 4 digits).
pub const MAX_PAGES: usize = 1000;
/// The most segments of one page (at 2 s each, over 11 hours).
pub const MAX_SEGMENTS: usize = 20_000;
/// The largest index read (20,000 segments at about 40 bytes each).
pub const MAX_INDEX_BYTES: u64 = 2 << 20;
/// The content type of an HLS playlist.
pub const PLAYLIST_CONTENT_TYPE: &str = "application/vnd.apple.mpegurl";

/// `files/<projectId>/<sessionId>/recordings/`: every page of one session's recording.
pub fn recordings_prefix(project_id: &str, session_id: &str) -> String {
    format!(
        "{}recordings/",
        session_files_prefix(project_id, session_id)
    )
}

/// `files/<projectId>/<sessionId>/recordings/<pageId>/`: one page's objects. `page_id` must be
/// valid ([`valid_page_id`]).
pub fn page_prefix(project_id: &str, session_id: &str, page_id: &str) -> String {
    format!("{}{page_id}/", recordings_prefix(project_id, session_id))
}

/// `files/<projectId>/<sessionId>/recordings/<pageId>.json`: a page's index.
pub fn index_key(project_id: &str, session_id: &str, page_id: &str) -> String {
    format!(
        "{}{page_id}.json",
        recordings_prefix(project_id, session_id)
    )
}

/// The page id whose index is named `name` (a name below [`recordings_prefix`]), if it is one.
pub fn page_of_index_name(name: &str) -> Option<&str> {
    name.strip_suffix(".json").filter(|id| valid_page_id(id))
}

/// The page id of the `n`th page of a session (0 first).
pub fn page_id(n: usize) -> String {
    n.to_string()
}

/// Whether `id` is a page id: a decimal number below [`MAX_PAGES`] without leading zeros.
/// Anything else (`..`, a slash, a long string) names no page.
pub fn valid_page_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 4
        && id.bytes().all(|b| b.is_ascii_digit())
        && (id == "0" || !id.starts_with('0'))
        && id.parse::<usize>().is_ok_and(|n| n < MAX_PAGES)
}

/// `seg-<n, 5 digits>.ts`: segment `n` of a page (0 first).
pub fn segment_name(n: usize) -> String {
    format!("seg-{n:05}.ts")
}

/// Whether `name` is a segment's name ([`segment_name`]).
pub fn is_segment_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 4 + 5 + 3
        && name.starts_with("seg-")
        && b[4..9].iter().all(u8::is_ascii_digit)
        && name.ends_with(".ts")
}

/// One stored segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    /// Its name below the page's prefix ([`segment_name`]).
    pub name: String,
    /// Its length in seconds.
    pub duration: f64,
}

/// A page's recording as the controller stores it (`index.json`), rewritten after each
/// stored segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PageIndex {
    /// The page's id ([`page_id`]).
    pub page_id: String,
    /// The page's last URL seen.
    pub url: String,
    /// When its recording began, ms since the epoch.
    pub start_time_ms: u64,
    /// When its last stored segment ends, ms since the epoch.
    pub end_time_ms: u64,
    /// Its segments in order.
    pub segments: Vec<Segment>,
    /// The recording of the page is over (the page closed, the session ended, the cap met).
    #[serde(default)]
    pub ended: bool,
    /// The controller stored `recording.mp4`, joined from every segment listed, once the
    /// recording ended (so an API without ffmpeg, AWS's Lambda, can answer downloads).
    #[serde(default)]
    pub mp4: bool,
}

impl PageIndex {
    /// Whether the index is one the API may use: a valid page id and segment names only.
    pub fn is_well_formed(&self) -> bool {
        valid_page_id(&self.page_id)
            && self.segments.len() <= MAX_SEGMENTS
            && self
                .segments
                .iter()
                .all(|s| is_segment_name(&s.name) && s.duration.is_finite() && s.duration >= 0.0)
    }
}

/// The HLS media playlist of `index`, each segment at the URL `url_of` gives its name (an
/// absolute URL the client can fetch). A VOD playlist (`#EXT-X-ENDLIST`) once the page's
/// recording ended, an EVENT playlist while it goes on.
pub fn playlist(index: &PageIndex, url_of: impl Fn(&str) -> String) -> String {
    let target = index
        .segments
        .iter()
        .map(|s| s.duration.ceil() as u64)
        .max()
        .unwrap_or(2)
        .max(1);
    let kind = if index.ended { "VOD" } else { "EVENT" };
    let mut out = format!(
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:{target}\n\
         #EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-PLAYLIST-TYPE:{kind}\n"
    );
    for s in &index.segments {
        out.push_str(&format!(
            "#EXTINF:{:.3},\n{}\n",
            s.duration,
            url_of(&s.name)
        ));
    }
    if index.ended {
        out.push_str("#EXT-X-ENDLIST\n");
    }
    out
}

/// ffmpeg's arguments that join the segments named in `list.txt` (one file name a line, in the
/// working directory) into one MP4 named [`MP4_NAME`] there: the segments' bytes read as one
/// MPEG-TS stream (the `concatf` protocol; a page's segments come from one encoder, so they
/// follow on), streams copied, no re-encoding, the index at the front (`+faststart`: a player
/// starts before the end). The format is named, not probed: an idle page's segments are a few
/// hundred bytes each, too few for ffmpeg to tell MPEG-TS (the concat demuxer, which probes each
/// file, refused them).
pub const MP4_JOIN_ARGS: [&str; 17] = [
    "-nostdin",
    "-hide_banner",
    "-loglevel",
    "error",
    "-y",
    "-f",
    "mpegts",
    "-i",
    "concatf:list.txt",
    "-c",
    "copy",
    "-movflags",
    "+faststart",
    "-avoid_negative_ts",
    "make_zero",
    "-f",
    "mp4",
];

/// `list.txt` for [`MP4_JOIN_ARGS`]: each segment of `index`, in order, one a line.
pub fn mp4_join_list(index: &PageIndex) -> String {
    index
        .segments
        .iter()
        .map(|s| format!("{}\n", s.name))
        .collect()
}

/// A page's MP4 build, as `…/recording/downloads` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DownloadStatus {
    /// No MP4 was asked for.
    NotRequested,
    /// Being built.
    Pending,
    /// Built: `recording.mp4` holds it.
    Completed,
    /// The build failed; asking again retries it.
    Failed,
}

/// `download.json`: the state of a page's MP4 build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadState {
    /// Where the build is.
    pub status: DownloadStatus,
    /// When it was asked for or last changed (ms since the epoch): a PENDING build much older
    /// than its deadline was lost (the process building it ended) and may be asked again.
    pub at_ms: u64,
    /// When it completed (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Why it failed, for the operator (never a path or a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(ended: bool) -> PageIndex {
        PageIndex {
            page_id: "0".into(),
            url: "http://127.0.0.1/".into(),
            start_time_ms: 1_700_000_000_000,
            end_time_ms: 1_700_000_004_100,
            segments: vec![
                Segment {
                    name: segment_name(0),
                    duration: 2.0,
                },
                Segment {
                    name: segment_name(1),
                    duration: 2.1,
                },
            ],
            ended,
            mp4: false,
        }
    }

    #[test]
    fn the_join_list_names_the_segments_in_order() {
        assert_eq!(mp4_join_list(&index(true)), "seg-00000.ts\nseg-00001.ts\n");
        // An index from before the field: no MP4.
        let old = r#"{"pageId":"0","url":"","startTimeMs":1,"endTimeMs":2,"segments":[]}"#;
        assert!(!serde_json::from_str::<PageIndex>(old).unwrap().mp4);
    }

    #[test]
    fn keys_sit_beside_the_logs() {
        assert_eq!(
            page_prefix("proj_a", "sess_b", &page_id(3)),
            "files/proj_a/sess_b/recordings/3/"
        );
        assert_eq!(
            index_key("proj_a", "sess_b", "3"),
            "files/proj_a/sess_b/recordings/3.json"
        );
        assert_eq!(page_of_index_name("12.json"), Some("12"));
        for bad in ["../1.json", "01.json", "1.jsonl", "x.json", "1"] {
            assert_eq!(page_of_index_name(bad), None, "{bad}");
        }
        assert_eq!(segment_name(7), "seg-00007.ts");
        assert!(is_segment_name("seg-00007.ts"));
        for bad in [
            "seg-7.ts",
            "seg-0000a.ts",
            "../seg-00001.ts",
            "seg-00001.tsx",
            "",
        ] {
            assert!(!is_segment_name(bad), "{bad}");
        }
    }

    #[test]
    fn page_ids_are_small_numbers_only() {
        for ok in ["0", "1", "42", "999"] {
            assert!(valid_page_id(ok), "{ok}");
        }
        for bad in [
            "", "01", "1000", "-1", "../0", "0/..", "..", "1a", "१", "99999",
        ] {
            assert!(!valid_page_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_playlist_names_every_segment_by_its_url() {
        let p = playlist(&index(true), |n| format!("https://x.test/{n}?sig=1"));
        assert!(p.starts_with("#EXTM3U\n"));
        assert!(p.contains("#EXT-X-TARGETDURATION:3\n"));
        assert!(p.contains("#EXT-X-PLAYLIST-TYPE:VOD\n"));
        assert!(p.contains("#EXTINF:2.000,\nhttps://x.test/seg-00000.ts?sig=1\n"));
        assert!(p.contains("#EXTINF:2.100,\nhttps://x.test/seg-00001.ts?sig=1\n"));
        assert!(p.ends_with("#EXT-X-ENDLIST\n"));
        let live = playlist(&index(false), |n| n.to_owned());
        assert!(live.contains("EVENT") && !live.contains("ENDLIST"));
    }

    #[test]
    fn an_index_naming_a_foreign_object_is_not_used() {
        assert!(index(true).is_well_formed());
        let mut bad = index(true);
        bad.segments[0].name = "../../other/seg-00000.ts".into();
        assert!(!bad.is_well_formed());
        let mut bad = index(true);
        bad.page_id = "../1".into();
        assert!(!bad.is_well_formed());
    }

    #[test]
    fn download_states_read_as_browserbase_spells_them() {
        let s = DownloadState {
            status: DownloadStatus::NotRequested,
            at_ms: 1,
            completed_at: None,
            error: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["status"], "NOT_REQUESTED");
        assert_eq!(v["atMs"], 1);
    }
}
