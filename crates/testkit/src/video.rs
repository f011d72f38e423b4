//! Judging a recorded video: a frame decoded by ffmpeg (from the distribution, as the image
//! has it) and its colour measured.

use std::path::Path;
use std::process::Command;

/// The share of mostly red pixels in the frame `at` seconds into the video at `path`
/// (ffmpeg decodes it to RGB). Panics, naming the file, when no frame is decoded.
pub fn red_share(path: &Path, at: &str) -> f64 {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(path)
        .args([
            "-ss",
            at,
            "-frames:v",
            "1",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-",
        ])
        .output()
        .expect("ffmpeg runs (scripts/install-test-deps.sh installs it)");
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "ffmpeg decoded no frame {at} s into {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let px = out.stdout.chunks_exact(3);
    let n = px.len();
    let red = px.filter(|p| p[0] > 200 && p[1] < 60 && p[2] < 60).count();
    red as f64 / n as f64
}
