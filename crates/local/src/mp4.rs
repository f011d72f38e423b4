//! A recorded page's MP4, joined from its HLS segments by ffmpeg: the command both the
//! controller (when the page's recording ends) and the local API (on request, while it goes
//! on) run, with the contract's arguments ([`MP4_JOIN_ARGS`]).

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

pub use wallcrawler_contract::recording::MP4_NAME;
use wallcrawler_contract::recording::{MP4_JOIN_ARGS, PageIndex, mp4_join_list};

/// The most characters of ffmpeg's error output kept in a failure's text.
const ERROR_CHARS: usize = 300;

/// Writes `dir/list.txt`, naming `index`'s segments (plain file names, checked by
/// [`PageIndex::is_well_formed`]; the segments themselves are the caller's to put in `dir`). A
/// segment not in `dir` is refused by name (ffmpeg would only say the input is invalid).
pub fn write_list(dir: &Path, index: &PageIndex) -> std::io::Result<()> {
    if let Some(missing) = index.segments.iter().find(|s| !dir.join(&s.name).is_file()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("segment {} is missing", missing.name),
        ));
    }
    std::fs::write(dir.join("list.txt"), mp4_join_list(index))
}

/// Joins `dir/list.txt`'s segments (written by [`write_list`]) into `dir/recording.mp4` with
/// `ffmpeg`, within `timeout` (killed past it); `started` is given the child's pid (the
/// controller lowers its priority). The error says why, with the start of ffmpeg's own.
pub async fn join(
    ffmpeg: &Path,
    dir: &Path,
    timeout: std::time::Duration,
    started: impl FnOnce(Option<u32>),
) -> Result<(), String> {
    let mut cmd = tokio::process::Command::from(join_command(ffmpeg, dir));
    cmd.kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("ffmpeg could not start: {e}"))?;
    started(child.id());
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| "ffmpeg took too long".to_owned())?
        .map_err(|e| format!("ffmpeg failed: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(failure(out.status, &out.stderr))
}

/// ffmpeg (`ffmpeg`) joining `dir/list.txt`'s segments into `dir/recording.mp4`: no stdin,
/// its output discarded, its errors piped (for [`failure`]).
pub fn join_command(ffmpeg: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(ffmpeg);
    cmd.args(MP4_JOIN_ARGS)
        .arg(MP4_NAME)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// What a join that ended with `status` says, with the start of ffmpeg's `stderr`.
pub fn failure(status: ExitStatus, stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr);
    format!(
        "ffmpeg failed ({status}): {}",
        err.chars().take(ERROR_CHARS).collect::<String>()
    )
}
