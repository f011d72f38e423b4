//! `profilebench`: the measurements behind `scripts/bench/profile.sh` and
//! `scripts/bench/startup.sh`.
//!
//! - `gen`: writes the generated ~100 MiB Chrome profile (`benches/support/profile_gen.rs`) and
//!   prints its mix and how well deflate level 1 compresses each part.
//! - `pack`: packs a profile directory into one archive file (`profile::pack_gz`).
//! - `throughput`: persist (`profile::persist_profile`) and hydrate (`profile::hydrate`) through a
//!   directory store or an S3 endpoint (moto), timed end to end through the library; MB/s of
//!   profile data (uncompressed bytes).
//! - `startup`: process start → READY of `wallcrawler-controller run` (empty profile) against
//!   Chromium's own start → `/json/version` answering, alternating runs.
//! - `shutdown`: SIGTERM → exit of a persisting `run` whose profile is the generated one.
//!
//! MB = 10^6 bytes. Build with `cargo build --release --examples`.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

#[path = "../benches/support/profile_gen.rs"]
mod profile_gen;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use wallcrawler_controller::aws::S3Archives;
use wallcrawler_controller::chrome::flags;
use wallcrawler_controller::profile::DirectoryArchives;
use wallcrawler_controller::profile::{self, ArchiveLimits};
use wallcrawler_controller::stores::ArchiveStore;

const KEY: &str = "proj_bench/ctx_bench/profile.tar.gz";
const LIMITS: ArchiveLimits = ArchiveLimits {
    max_bytes: 1 << 31,
    max_entries: 100_000,
};

#[derive(Parser)]
#[command(about = "Profile archive and startup/shutdown measurements")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writes the generated profile into DIR (which must not exist or be empty).
    Gen {
        dir: PathBuf,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Archived profile data, MiB.
        #[arg(long, default_value_t = 100)]
        mib: u64,
        /// Also print deflate level 1 ratios per part (slower).
        #[arg(long)]
        ratios: bool,
    },
    /// Packs PROFILE into the archive file OUT.
    Pack { profile: PathBuf, out: PathBuf },
    /// Persist and hydrate timings through a store.
    Throughput {
        /// The profile directory to persist.
        #[arg(long)]
        profile: PathBuf,
        /// `dir:PATH` or `s3:BUCKET` (with --endpoint).
        #[arg(long)]
        store: String,
        /// S3 endpoint (moto).
        #[arg(long)]
        endpoint: Option<String>,
        /// Where hydrated copies go. They are left there for the caller to remove: creating
        /// files right after deleting as many makes ext4 (without a journal, as on the bench
        /// VM) scan the recently freed inodes on every create, which a task's fresh profile
        /// directory never meets.
        #[arg(long)]
        scratch: PathBuf,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// A label for the output line.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Start time to READY: controller vs Chromium alone, alternating.
    Startup {
        #[arg(long)]
        controller: PathBuf,
        #[arg(long, default_value = "/usr/lib/chromium/chromium")]
        chrome: PathBuf,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        #[arg(long)]
        scratch: PathBuf,
    },
    /// SIGTERM to exit of a persisting `run` with ARCHIVE pre-hydrated.
    Shutdown {
        #[arg(long)]
        controller: PathBuf,
        #[arg(long, default_value = "/usr/lib/chromium/chromium")]
        chrome: PathBuf,
        /// The archive of the generated profile.
        #[arg(long)]
        archive: PathBuf,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Seconds between READY and SIGTERM (lets Chrome finish its startup work).
        #[arg(long, default_value_t = 3.0)]
        settle: f64,
        #[arg(long)]
        scratch: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Gen {
            dir,
            seed,
            mib,
            ratios,
        } => gen_cmd(&dir, seed, mib, ratios),
        Cmd::Pack { profile, out } => {
            let f = std::fs::File::create(&out)?;
            let (stats, w) =
                profile::pack_gz(&profile, std::io::BufWriter::with_capacity(1 << 20, f), &[])?;
            w.into_inner()?.sync_all()?;
            let size = std::fs::metadata(&out)?.len();
            println!(
                "{}",
                json!({"entries": stats.entries, "bytes": stats.bytes, "archive_bytes": size})
            );
            Ok(())
        }
        Cmd::Throughput {
            profile,
            store,
            endpoint,
            scratch,
            runs,
            label,
        } => tokio::runtime::Runtime::new()?.block_on(throughput(
            &profile,
            &store,
            endpoint.as_deref(),
            &scratch,
            runs,
            &label,
        )),
        Cmd::Startup {
            controller,
            chrome,
            runs,
            scratch,
        } => startup(&controller, &chrome, runs, &scratch),
        Cmd::Shutdown {
            controller,
            chrome,
            archive,
            runs,
            settle,
            scratch,
        } => shutdown(&controller, &chrome, &archive, runs, settle, &scratch),
    }
}

// ---------------------------------------------------------------------------------------------
// gen

fn gen_cmd(dir: &Path, seed: u64, mib: u64, ratios: bool) -> Result<()> {
    let t = Instant::now();
    let g = profile_gen::generate(dir, seed, mib << 20)?;
    eprintln!("generated in {:.2} s", t.elapsed().as_secs_f64());
    println!(
        "{}",
        json!({
            "archived_bytes": g.archived_bytes, "archived_files": g.archived_files,
            "excluded_bytes": g.excluded_bytes, "directories": g.directories,
            "symlinks": g.symlinks,
        })
    );
    if ratios {
        // Per part: raw bytes and deflate level 1 output, file by file.
        let mut parts: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
        walk(dir, dir, &mut |rel, path| {
            let data = std::fs::read(path)?;
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&data)?;
            let z = e.finish()?.len() as u64;
            let part = part_of(rel);
            let entry = parts.entry(part).or_default();
            entry.0 += 1;
            entry.1 += data.len() as u64;
            entry.2 += z;
            Ok(())
        })?;
        let (mut raw, mut z) = (0, 0);
        println!(
            "{:<34} {:>6} {:>10} {:>6} {:>7}",
            "part", "files", "MiB", "share", "ratio"
        );
        for (k, (n, r, c)) in &parts {
            raw += r;
            z += c;
            println!(
                "{k:<34} {n:>6} {:>10.2} {:>5.1}% {:>6.2}x",
                *r as f64 / (1 << 20) as f64,
                *r as f64 * 100.0 / g.archived_bytes as f64,
                *r as f64 / (*c).max(1) as f64
            );
        }
        println!(
            "{:<34} {:>6} {:>10.2} {:>6} {:>6.2}x",
            "total (archived files)",
            "",
            raw as f64 / (1 << 20) as f64,
            "",
            raw as f64 / z as f64
        );
    }
    Ok(())
}

/// Visits every regular file the packer would archive.
fn walk(
    root: &Path,
    dir: &Path,
    f: &mut dyn FnMut(&str, &Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let ft = e.file_type()?;
        if profile::is_excluded_name(&name) {
            continue;
        }
        if ft.is_dir() {
            if !profile::is_cache_dir(&name) {
                walk(root, &e.path(), f)?;
            }
        } else if ft.is_file() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            f(&rel, &p)?;
        }
    }
    Ok(())
}

fn part_of(rel: &str) -> String {
    if rel.contains(".indexeddb.blob/") {
        "IndexedDB blobs".into()
    } else if rel.contains(".indexeddb.leveldb/") {
        "IndexedDB leveldb".into()
    } else if rel.starts_with("Default/Local Storage") || rel.starts_with("Default/Session Storage")
    {
        "Local/Session Storage leveldb".into()
    } else if rel.starts_with("Default/Extensions/") {
        "Extensions (small files)".into()
    } else if rel.starts_with("Default/Service Worker/ScriptCache") {
        "Service Worker ScriptCache".into()
    } else if rel.ends_with(".ldb") || rel.ends_with(".log") || rel.contains("/MANIFEST-") {
        "other leveldb".into()
    } else if [
        "History",
        "Favicons",
        "Web Data",
        "Cookies",
        "Network Action Predictor",
        "Login Data",
        "Shortcuts",
        "Top Sites",
        "Affiliation Database",
        "Account Web Data",
        "DIPS",
        "Databases.db",
        "QuotaManager",
        "Reporting and NEL",
        "Trust Tokens",
        "SharedStorage",
        "heavy_ad_intervention_opt_out.db",
        "MediaDeviceSalts",
        "Login Data For Account",
    ]
    .iter()
    .any(|n| rel.ends_with(n))
    {
        match rel.rsplit('/').next().unwrap_or(rel) {
            n @ ("History" | "Favicons" | "Web Data" | "Cookies") => format!("sqlite {n}"),
            _ => "sqlite (others)".into(),
        }
    } else {
        "other (json, text, small)".into()
    }
}

// ---------------------------------------------------------------------------------------------
// throughput

async fn throughput(
    profile_dir: &Path,
    store: &str,
    endpoint: Option<&str>,
    scratch: &Path,
    runs: usize,
    label: &str,
) -> Result<()> {
    let store: Arc<dyn ArchiveStore> = if let Some(dir) = store.strip_prefix("dir:") {
        std::fs::create_dir_all(dir)?;
        Arc::new(DirectoryArchives { dir: dir.into() })
    } else if let Some(bucket) = store.strip_prefix("s3:") {
        let endpoint = endpoint.context("s3: needs --endpoint")?;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "testing", "testing", None, None, "bench",
            ))
            .load()
            .await;
        let s3 = S3Archives::new(&sdk, bucket.to_owned());
        match s3.client.create_bucket().bucket(bucket).send().await {
            Ok(_) => {}
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_bucket_already_owned_by_you()) => {}
            Err(e) => bail!("creating the bucket: {e:?}"),
        }
        Arc::new(s3)
    } else {
        bail!("--store must be dir:PATH or s3:BUCKET");
    };
    // The profile's data bytes, and a warm page cache (a task packs a profile Chrome has just
    // written, so it is in memory).
    let (stats, _) = profile::pack_gz(profile_dir, std::io::sink(), &[])?;
    let data = stats.bytes;
    std::fs::create_dir_all(scratch)?;
    let mut persist = Vec::new();
    let mut hydrate = Vec::new();
    let mut archive = 0;
    for i in 0..runs {
        let t = Instant::now();
        archive = profile::persist_profile(store.clone(), KEY, profile_dir, vec![]).await?;
        persist.push(t.elapsed().as_secs_f64());
        let dest = scratch.join(format!("hydrated-{}-{i}", std::process::id()));
        let t = Instant::now();
        let got = profile::hydrate(store.as_ref(), KEY, &dest, LIMITS, Duration::from_secs(10))
            .await?
            .context("the archive is missing")?;
        hydrate.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            got.bytes == data,
            "hydrated {} of {} bytes",
            got.bytes,
            data
        );
    }
    let mbs = |secs: &[f64]| {
        let mut v: Vec<f64> = secs.iter().map(|s| data as f64 / s / 1e6).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (p, h) = (mbs(&persist), mbs(&hydrate));
    eprintln!(
        "{label}: {:.1} MB profile -> {:.1} MB archive; persist {:.0} MB/s (min {:.0}, max {:.0}), hydrate {:.0} MB/s (min {:.0}, max {:.0}), {runs} runs",
        data as f64 / 1e6,
        archive as f64 / 1e6,
        median(&p),
        p[0],
        p[p.len() - 1],
        median(&h),
        h[0],
        h[h.len() - 1],
    );
    println!(
        "{}",
        json!({
            "label": label, "profile_bytes": data, "archive_bytes": archive, "runs": runs,
            "persist_mb_s": {"median": median(&p), "min": p[0], "max": p[p.len() - 1]},
            "hydrate_mb_s": {"median": median(&h), "min": h[0], "max": h[h.len() - 1]},
            "persist_s": persist, "hydrate_s": hydrate,
        })
    );
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile.
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

// ---------------------------------------------------------------------------------------------
// startup and shutdown

/// A `run` child whose JSON log lines arrive on a channel.
struct Controller {
    child: Child,
    lines: mpsc::Receiver<Value>,
    started: Instant,
}

impl Controller {
    fn spawn(bin: &Path, chrome: &Path, env: &[(&str, String)]) -> Result<Self> {
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .env("SESSION_ID", "sess_bench")
            // Nothing here connects with a token: any public key will do.
            .env(
                "WALLCRAWLER_JWT_PUBLIC_KEY",
                wallcrawler_contract::SigningKey::generate()
                    .verifying_key()
                    .to_pem(),
            )
            .env("CDP_PROXY_PORT", "0")
            .env("CHROME_DEBUG_PORT", "0")
            .env("LOG_FORMAT", "json")
            .env("METRICS_ADDR", "")
            .env("CHROME_PATH", chrome)
            .env("RUST_LOG", "info")
            .env("KEEP_ALIVE", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().context("starting the controller")?;
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines: rx,
            started,
        })
    }

    /// Waits for the log line whose message is `msg`; returns it and when it arrived.
    fn wait_for(&self, msg: &str, timeout: Duration) -> Result<(Value, Duration)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .lines
                .recv_timeout(left)
                .with_context(|| format!("no {msg:?} log line"))?;
            if v.get("message").and_then(Value::as_str) == Some(msg) {
                return Ok((v, self.started.elapsed()));
            }
            if v.get("level").and_then(Value::as_str) == Some("ERROR") {
                eprintln!("controller: {v}");
            }
        }
    }

    /// SIGTERM, then the time until the process has exited.
    fn terminate(mut self, timeout: Duration) -> Result<(Duration, Vec<Value>)> {
        let pid = Pid::from_raw(self.child.id() as i32);
        let t = Instant::now();
        kill(pid, Signal::SIGTERM)?;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let took = t.elapsed();
                let rest: Vec<Value> = self.lines.try_iter().collect();
                if !status.success() {
                    eprintln!("controller exited with {status}");
                }
                // Anything of Chrome's left over (there should be none).
                let _ = killpg(pid, Signal::SIGKILL);
                return Ok((took, rest));
            }
            if t.elapsed() > timeout {
                let _ = killpg(pid, Signal::SIGKILL);
                let _ = self.child.wait();
                bail!("the controller did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Chromium alone, with the controller's command line, until `/json/version` answers.
fn chromium_alone(chrome: &Path, dir: &Path) -> Result<Duration> {
    let file_flags = flags::parse_flags(flags::BUILTIN_FLAGS)?;
    // Startup only: no page loads, so the egress port (the hop's, in the controller) need not
    // answer. A closed port of loopback: any request would fail rather than leave.
    let args = flags::chrome_args(&file_flags, dir, 0, 9);
    let started = Instant::now();
    let mut child = Command::new(chrome)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting chromium")?;
    let pid = Pid::from_raw(child.id() as i32);
    let port_file = dir.join("DevToolsActivePort");
    let result = (|| {
        let deadline = started + Duration::from_secs(30);
        let mut port = None;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                bail!("chromium exited early: {status}");
            }
            if port.is_none() {
                port = std::fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u16>().ok()));
            }
            if let Some(p) = port
                && json_version(p).is_ok()
            {
                return Ok(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        bail!("chromium did not answer in 30 s")
    })();
    let _ = killpg(pid, Signal::SIGTERM);
    let t = Instant::now();
    while child.try_wait()?.is_none() {
        if t.elapsed() > Duration::from_secs(5) {
            let _ = killpg(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = killpg(pid, Signal::SIGKILL);
    result
}

fn json_version(port: u16) -> Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    // Chrome keeps the connection open: read the head, then Content-Length bytes.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        anyhow::ensure!(n > 0, "closed early");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break;
            }
        }
    }
    anyhow::ensure!(buf.starts_with(b"HTTP/1.1 200"), "not 200");
    anyhow::ensure!(
        buf.windows(22).any(|w| w == b"webSocketDebuggerUrl\":"),
        "no webSocketDebuggerUrl"
    );
    Ok(())
}

/// A new, empty directory. Nothing is deleted between runs (see `Throughput::scratch`); the
/// scripts remove the scratch directory at the end.
fn fresh(scratch: &Path, name: &str, run: usize) -> Result<PathBuf> {
    let p = scratch.join(format!("{name}-{}-{run}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn startup(controller: &Path, chrome: &Path, runs: usize, scratch: &Path) -> Result<()> {
    std::fs::create_dir_all(scratch)?;
    let mut ctl = Vec::new();
    let mut raw = Vec::new();
    let mut chrome_in_ctl = Vec::new();
    // One warm-up of each (page cache, fontconfig cache), not counted.
    for i in 0..=runs {
        let dir = fresh(scratch, "chromium", i)?;
        let c = chromium_alone(chrome, &dir)?;
        let dir = fresh(scratch, "controller", i)?;
        let proc_ = Controller::spawn(
            controller,
            chrome,
            &[("USER_DATA_DIR", dir.display().to_string())],
        )?;
        let (_, ready) = proc_.wait_for("session ready", Duration::from_secs(60))?;
        let (stop, _) = proc_.terminate(Duration::from_secs(30))?;
        if i == 0 {
            eprintln!(
                "warm-up: chromium {:.0} ms, controller {:.0} ms, stop {:.0} ms",
                ms(c),
                ms(ready),
                ms(stop)
            );
            continue;
        }
        eprintln!(
            "run {i}: chromium {:.0} ms, controller {:.0} ms",
            ms(c),
            ms(ready)
        );
        raw.push(ms(c));
        ctl.push(ms(ready));
        chrome_in_ctl.push(ms(stop));
    }
    let diffs: Vec<f64> = ctl.iter().zip(&raw).map(|(a, b)| a - b).collect();
    eprintln!(
        "start to ready, {runs} runs each: chromium median {:.0} ms p90 {:.0} ms; controller median {:.0} ms p90 {:.0} ms; overhead median {:.0} ms p90 {:.0} ms (pairwise median {:.0} ms)",
        median(&raw),
        percentile(&raw, 90.0),
        median(&ctl),
        percentile(&ctl, 90.0),
        median(&ctl) - median(&raw),
        percentile(&ctl, 90.0) - percentile(&raw, 90.0),
        median(&diffs),
    );
    println!(
        "{}",
        json!({
            "runs": runs,
            "chromium_ms": {"median": median(&raw), "p90": percentile(&raw, 90.0), "all": raw},
            "controller_ms": {"median": median(&ctl), "p90": percentile(&ctl, 90.0), "all": ctl},
            "overhead_ms": {
                "median_of_medians": median(&ctl) - median(&raw),
                "p90_of_p90s": percentile(&ctl, 90.0) - percentile(&raw, 90.0),
                "median_pairwise": median(&diffs),
            },
            "controller_stop_empty_profile_ms": {"median": median(&chrome_in_ctl)},
        })
    );
    Ok(())
}

fn shutdown(
    controller: &Path,
    chrome: &Path,
    archive: &Path,
    runs: usize,
    settle: f64,
    scratch: &Path,
) -> Result<()> {
    std::fs::create_dir_all(scratch)?;
    let mut took = Vec::new();
    let mut saved_ms = Vec::new();
    let mut details = Vec::new();
    for i in 1..=runs {
        let contexts = fresh(scratch, "contexts", i)?;
        let dest = contexts.join(KEY);
        std::fs::create_dir_all(dest.parent().unwrap())?;
        std::fs::copy(archive, &dest)?;
        let profile_dir = fresh(scratch, "profile", i)?;
        let proc_ = Controller::spawn(
            controller,
            chrome,
            &[
                ("USER_DATA_DIR", profile_dir.display().to_string()),
                ("CONTEXT_ID", "ctx_bench".into()),
                ("CONTEXTS_DIR", contexts.display().to_string()),
                ("CONTEXT_S3_KEY", KEY.into()),
                ("CONTEXT_PERSIST", "true".into()),
            ],
        )?;
        let (restored, _) = proc_.wait_for("profile restored", Duration::from_secs(60))?;
        let (_, ready) = proc_.wait_for("session ready", Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_secs_f64(settle));
        let (stop, rest) = proc_.terminate(Duration::from_secs(60))?;
        let saved = rest
            .iter()
            .find(|v| v.get("message").and_then(Value::as_str) == Some("profile saved"))
            .cloned();
        let Some(saved) = saved else {
            bail!("no \"profile saved\" line: {rest:?}");
        };
        // What the archive held: unpack it and count (the packer's view of the profile).
        let check = fresh(scratch, "check", i)?;
        let f = std::fs::File::open(&dest)?;
        let unpacked = profile::unpack_gz(BufReader::new(f), &check, LIMITS)?;
        let elapsed = saved.get("elapsed_ms").and_then(Value::as_u64).unwrap_or(0);
        eprintln!(
            "run {i}: ready {:.0} ms, SIGTERM→exit {:.0} ms (pack+store {} ms, {} profile bytes → {} archive bytes)",
            ms(ready),
            ms(stop),
            elapsed,
            unpacked.bytes,
            saved.get("bytes").and_then(Value::as_u64).unwrap_or(0),
        );
        took.push(ms(stop));
        saved_ms.push(elapsed as f64);
        details.push(json!({
            "ready_ms": ms(ready), "sigterm_to_exit_ms": ms(stop),
            "restored_bytes": restored.get("bytes"), "saved_profile_bytes": unpacked.bytes,
            "saved_archive_bytes": saved.get("bytes"), "pack_store_ms": elapsed,
        }));
    }
    eprintln!(
        "SIGTERM to exit, {runs} runs: median {:.0} ms, max {:.0} ms (pack+store median {:.0} ms)",
        median(&took),
        took.iter().copied().fold(0.0, f64::max),
        median(&saved_ms),
    );
    println!(
        "{}",
        json!({
            "runs": runs,
            "sigterm_to_exit_ms": {"median": median(&took), "max": took.iter().copied().fold(0.0, f64::max)},
            "pack_store_ms": {"median": median(&saved_ms)},
            "runs_detail": details,
        })
    );
    Ok(())
}
