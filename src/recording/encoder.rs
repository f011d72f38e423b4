//! The encoder of one page: Debian's `ffmpeg`, reading the page's JPEG frames on its stdin and
//! writing HLS segments (MPEG-TS, H.264) into a scratch directory, at a lower priority, on one
//! thread.
//!
//! Frames carry the time they were written (`-use_wallclock_as_timestamps`) and are encoded
//! as they come (`-fps_mode vfr`): the frame rate follows the page's changes, at most
//! [`EncoderSettings::fps`] (the feed's cap, [`super::page`]), and an idle page is sent only a
//! heartbeat frame a second. Keyframes fall on the segment boundaries by time
//! (`-force_key_frames`), whatever the rate. Measured on a 1280x656 still page fed one frame a
//! second: 2 % of a core and 50 KB a minute, against 5.4 % and 155 KB for a constant 10 fps
//! (the `fps` filter repeating the frame). `-probesize 32 -analyzeduration 0` start the
//! encoding at the first frame (ffmpeg would otherwise read seconds of input before its first
//! output), and `zerolatency` has x264 hold no frame back, so a segment is on disk about one
//! segment after its end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tracing::debug;
use wallcrawler_contract::recording::PageIndex;
use wallcrawler_local::mp4;

/// The name of the playlist ffmpeg keeps in the scratch directory: the segments it lists are
/// complete.
pub(crate) const LOCAL_PLAYLIST: &str = "index.m3u8";

/// How a page is encoded.
#[derive(Debug, Clone)]
pub(crate) struct EncoderSettings {
    /// The ffmpeg binary.
    pub ffmpeg: PathBuf,
    /// The most frames per second of the video (a faster page's frames are dropped).
    pub fps: u32,
    /// Seconds per segment.
    pub segment_seconds: u32,
    /// ffmpeg's niceness (0 = the controller's priority, 19 = the lowest).
    pub nice: i32,
}

/// How long joining a page's segments into its MP4 may take (a copy, no encoding: well under
/// a second for an hour of video).
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest side of the video: a larger page is scaled down.
const MAX_SIDE: u32 = 1280;

/// The video's size for a first frame of `w`×`h`: within [`MAX_SIDE`], aspect kept, even (as
/// H.264's 4:2:0 needs), at least 2×2.
pub(crate) fn video_size(w: u32, h: u32) -> (u32, u32) {
    let (w, h) = (w.max(2), h.max(2));
    let scale = f64::from(MAX_SIDE) / f64::from(w.max(h));
    let (w, h) = if scale < 1.0 {
        ((f64::from(w) * scale) as u32, (f64::from(h) * scale) as u32)
    } else {
        (w, h)
    };
    ((w & !1).max(2), (h & !1).max(2))
}

/// ffmpeg's arguments: JPEG frames on stdin, the video `size`, segments and the playlist in
/// `dir`. A later frame of another size (the page resized) is fitted into the first's.
pub(crate) fn args(s: &EncoderSettings, size: (u32, u32), dir: &Path) -> Vec<String> {
    let (w, h) = size;
    let filter = format!(
        "scale={w}:{h}:force_original_aspect_ratio=decrease,\
         pad={w}:{h}:(ow-iw)/2:(oh-ih)/2,format=yuv420p"
    );
    let seg = dir.join("seg-%05d.ts");
    let playlist = dir.join(LOCAL_PLAYLIST);
    let words = |text: &str| {
        text.split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let mut a = words(
        "-nostdin -hide_banner -loglevel warning -probesize 32 -analyzeduration 0 \
         -fflags nobuffer -use_wallclock_as_timestamps 1 -f image2pipe -c:v mjpeg -i pipe:0 \
         -an -vf",
    );
    a.push(filter);
    a.extend(words(&format!(
        "-fps_mode vfr -c:v libx264 -preset veryfast -tune zerolatency -crf 30 -threads 1 \
         -force_key_frames expr:gte(t,n_forced*{seg}) -sc_threshold 0 -f hls -hls_time {seg} \
         -hls_list_size 0 -hls_flags temp_file+independent_segments -hls_segment_filename",
        seg = s.segment_seconds
    )));
    a.push(seg.to_string_lossy().into_owned());
    a.push(playlist.to_string_lossy().into_owned());
    a
}

/// Starts ffmpeg with `args` at niceness `nice`: stdin piped (the frames), stdout to
/// nowhere, stderr drained into the debug log; killed if dropped.
pub(crate) fn spawn(s: &EncoderSettings, args: &[String]) -> std::io::Result<Child> {
    let mut child = Command::new(&s.ffmpeg)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    lower(child.id(), s.nice);
    if let Some(err) = child.stderr.take() {
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                debug!(line = %l.chars().take(300).collect::<String>(), "ffmpeg");
            }
        });
    }
    Ok(child)
}

/// Lowers process `pid`'s priority to niceness `nice`. Lower only: ffmpeg yields the CPU to
/// Chrome and the relay. A failure leaves it at the controller's priority.
fn lower(pid: Option<u32>, nice: i32) {
    if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32))
        && let Err(e) = rustix::process::setpriority_process(Some(pid), nice)
    {
        debug!(error = %e, "ffmpeg's priority could not be lowered");
    }
}

/// Joins `index`'s segments, whose files are in `dir`, into `dir/recording.mp4`
/// ([`wallcrawler_local::mp4`]: streams copied, no encoding), at the encoder's niceness, within
/// [`JOIN_TIMEOUT`].
pub(crate) async fn join_mp4(
    s: &EncoderSettings,
    dir: &Path,
    index: &PageIndex,
) -> Result<(), String> {
    mp4::write_list(dir, index).map_err(|e| format!("writing the list: {e}"))?;
    mp4::join(&s.ffmpeg, dir, JOIN_TIMEOUT, |pid| lower(pid, s.nice)).await
}

/// The complete segments ffmpeg's playlist lists, in order: each one's file name and length
/// in seconds. Lines of any other shape are passed over.
pub(crate) fn listed_segments(playlist: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut duration = None;
    for line in playlist.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#EXTINF:") {
            duration = rest.split(',').next().and_then(|d| d.parse::<f64>().ok());
        } else if !line.is_empty()
            && !line.starts_with('#')
            && let Some(d) = duration.take()
            && wallcrawler_contract::recording::is_segment_name(line)
        {
            out.push((line.to_owned(), d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_video_is_even_and_bounded() {
        assert_eq!(video_size(800, 600), (800, 600));
        assert_eq!(video_size(801, 601), (800, 600));
        assert_eq!(video_size(2560, 1440), (1280, 720));
        assert_eq!(video_size(0, 0), (2, 2));
        assert_eq!(video_size(1, 5000), (2, 1280));
    }

    #[test]
    fn the_arguments_segment_by_time_at_any_rate() {
        let s = EncoderSettings {
            ffmpeg: "ffmpeg".into(),
            fps: 10,
            segment_seconds: 2,
            nice: 10,
        };
        let a = args(&s, (800, 600), Path::new("/tmp/rec"));
        let joined = a.join(" ");
        assert!(
            joined.contains("-f image2pipe -c:v mjpeg -i pipe:0"),
            "{joined}"
        );
        assert!(joined.contains("-vf scale=800:600:"), "{joined}");
        assert!(joined.contains("-fps_mode vfr"), "{joined}");
        assert!(joined.contains("expr:gte(t,n_forced*2)"), "{joined}");
        assert!(joined.contains("-hls_time 2"), "{joined}");
        assert!(
            joined.ends_with("/tmp/rec/seg-%05d.ts /tmp/rec/index.m3u8"),
            "{joined}"
        );
    }

    #[test]
    fn only_complete_segments_of_our_names_are_listed() {
        let p = "#EXTM3U\n#EXT-X-VERSION:6\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.000000,\n\
                 seg-00000.ts\n#EXTINF:1.5,\nseg-00001.ts\n#EXTINF:2,\n../../etc/passwd\n\
                 seg-00009.ts\n#EXT-X-ENDLIST\n";
        assert_eq!(
            listed_segments(p),
            vec![("seg-00000.ts".into(), 2.0), ("seg-00001.ts".into(), 1.5)]
        );
        assert!(listed_segments("").is_empty());
    }

    /// Segments as the encoder writes them for an idle page (ffmpeg's HLS muxer, here from a
    /// test source), joined
    /// into one MP4 by the real ffmpeg; a missing segment is a failure that says so.
    #[tokio::test]
    async fn a_page_s_segments_join_into_one_mp4() {
        let dir = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-f", "lavfi", "-i"])
            // An idle page's: one white frame a second, a few hundred bytes a segment (too few
            // for ffmpeg to tell MPEG-TS by probing).
            .arg("color=c=white:s=64x48:d=6:r=1")
            .args(["-c:v", "libx264", "-g", "2", "-f", "hls", "-hls_time", "2"])
            .args(["-hls_list_size", "0", "-hls_segment_filename"])
            .arg(dir.path().join("seg-%05d.ts"))
            .arg(dir.path().join(LOCAL_PLAYLIST))
            .status()
            .expect("ffmpeg runs");
        assert!(made.success());
        let text = std::fs::read_to_string(dir.path().join(LOCAL_PLAYLIST)).unwrap();
        let segments: Vec<_> = listed_segments(&text)
            .into_iter()
            .map(|(name, duration)| wallcrawler_contract::recording::Segment { name, duration })
            .collect();
        assert!(segments.len() >= 2, "{text}");
        let mut index = PageIndex {
            page_id: "0".into(),
            url: String::new(),
            start_time_ms: 0,
            end_time_ms: 0,
            segments,
            ended: true,
            mp4: false,
        };
        let s = EncoderSettings {
            ffmpeg: "ffmpeg".into(),
            fps: 10,
            segment_seconds: 2,
            nice: 10,
        };
        join_mp4(&s, dir.path(), &index).await.unwrap();
        let mp4 = std::fs::read(dir.path().join(mp4::MP4_NAME)).unwrap();
        assert_eq!(&mp4[4..8], b"ftyp", "an MP4");
        let probe = std::process::Command::new("ffprobe")
            .args([
                "-v",
                "error",
                "-show_entries",
                "format=duration",
                "-of",
                "csv=p=0",
            ])
            .arg(dir.path().join(mp4::MP4_NAME))
            .output()
            .unwrap();
        let seconds: f64 = String::from_utf8_lossy(&probe.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(seconds > 4.0, "every segment joined: {seconds} s");
        index.segments[0].name = "seg-00099.ts".into();
        let e = join_mp4(&s, dir.path(), &index).await.unwrap_err();
        assert!(e.contains("seg-00099.ts"), "{e}");
    }
}
