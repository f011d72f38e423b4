//! `wsload`: the load generator and echo upstream behind `scripts/bench/compare.sh`.
//!
//! - `echo-server`: a raw WebSocket echo upstream (answers `/json/version` like Chrome; after
//!   the 101 it returns every byte verbatim). Stops itself after `--exit-after-secs`.
//! - `compare`: measures several targets (direct to the upstream, through the proxy, through
//!   nginx, …) in one run, interleaving them where the machine's drift would otherwise decide
//!   the result, and prints one table (and JSON with `--json`):
//!   - 1 MiB echo throughput over `--conns` connections, and the CPU time (utime+stime from
//!     `/proc/<pid>/stat`, the pid and its children summed) the target's processes spent per
//!     message in the same window;
//!   - 256 B round-trip latency, one connection per target, targets taking turns in a fresh
//!     random order per sample;
//!   - connection setup (TCP connect + upgrade + 101 read), likewise, each connection closed
//!     and its teardown awaited outside the timed part; with `--fresh-token-key`, also with a
//!     token minted for that one connection (the same token every time can be answered from a
//!     verified-token cache; a fresh one cannot), the two kinds taking turns with the targets;
//!   - RSS (VmRSS, pid and children summed) with `--idle-conns` upgraded connections held idle,
//!     and with `--idle-warm-bytes` as many again, each having echoed one message that large.
//! - `burst`: opens `--conns` upgraded connections to one target from one address,
//!   `--concurrency` at a time (each connect followed at once by its upgrade request), holds
//!   them all and counts the answers: 101s, refusals by status, errors.
//! - `free-port`, `wait-port`: small helpers for the script.
//!
//! A `compare` target given as `NAME=wss://HOST:PORT` is reached over TLS (rustls on aws-lc-rs,
//! trusting only `--ca-cert`, no session resumption: every setup is a full handshake), so
//! `scripts/bench/gateway.sh` can measure TLS-terminating relays.
//!
//! Build with `cargo build --release --examples`; all traffic is on loopback.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

#[path = "../benches/support/ws.rs"]
mod ws;

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

const MIB: usize = 1024 * 1024;

#[derive(Parser)]
#[command(about = "WebSocket load generator and echo upstream for the relay benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the raw WebSocket echo upstream.
    EchoServer {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Written with the bound port once listening.
        #[arg(long)]
        port_file: Option<PathBuf>,
        /// Exits after this long whatever happens (a safety net for scripts).
        #[arg(long, default_value_t = 1800)]
        exit_after_secs: u64,
    },
    /// Prints a free port on 127.0.0.1.
    FreePort,
    /// Waits until ADDR accepts TCP connections.
    WaitPort {
        addr: SocketAddr,
        #[arg(long, default_value_t = 10)]
        timeout_secs: u64,
    },
    /// Measures the targets in one run.
    Compare(CompareArgs),
    /// Opens many upgraded connections at once from one address and counts the refusals.
    Burst(BurstArgs),
}

#[derive(clap::Args)]
struct BurstArgs {
    /// HOST:PORT to connect to.
    #[arg(long)]
    target: SocketAddr,
    /// Request path of every upgrade (may carry `?signingKey=`).
    #[arg(long)]
    path: String,
    /// Connections opened, and held until all are done.
    #[arg(long, default_value_t = 200)]
    conns: usize,
    /// Connections being set up at the same time (`--conns` = all at once).
    #[arg(long, default_value_t = 50)]
    concurrency: usize,
    /// Times the whole burst is repeated (connections of one round closed before the next).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
}

#[derive(clap::Args)]
struct CompareArgs {
    /// NAME=[wss://]HOST:PORT[@PID,PID…]: a target and the processes whose CPU and RSS are
    /// charged to it (children included); `wss://` = over TLS. Give the baseline first.
    #[arg(long = "target", required = true)]
    targets: Vec<Target>,
    /// PEM file of the certificate authority `wss://` targets' certificates chain to.
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// Request path of every upgrade (may carry `?signingKey=`).
    #[arg(long)]
    path: String,
    /// Connections streaming 1 MiB messages at once.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Size of a throughput message.
    #[arg(long, default_value_t = MIB)]
    message_bytes: usize,
    /// Seconds measured per target per round (after 0.5 s of warm-up).
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Throughput rounds (targets take turns; the median round is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// 256 B round trips per target.
    #[arg(long, default_value_t = 20_000)]
    rtt_samples: usize,
    /// Connection setups per target.
    #[arg(long, default_value_t = 2_000)]
    setup_samples: usize,
    /// Also measure setups each with a token of its own, signed with this Ed25519 private key
    /// (PKCS#8 PEM) for `--fresh-token-session`; the `signingKey` of `--path` is replaced.
    #[arg(long, requires = "fresh_token_session")]
    fresh_token_key: Option<PathBuf>,
    /// The session of the fresh tokens.
    #[arg(long, requires = "fresh_token_key")]
    fresh_token_session: Option<String>,
    /// Idle connections held for the RSS figure (0 skips it).
    #[arg(long, default_value_t = 1_000)]
    idle_conns: usize,
    /// Also hold `--idle-conns` connections that each echoed one message of this size first
    /// (0 skips it): what a relay keeps per connection once it has carried a large message.
    #[arg(long, default_value_t = 0)]
    idle_warm_bytes: usize,
    /// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Also write the results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone)]
struct Target {
    name: String,
    addr: SocketAddr,
    pids: Vec<u32>,
    /// Given as `wss://`.
    wss: bool,
    /// The TLS client for a `wss://` target (set once `--ca-cert` is read).
    tls: Option<TlsConnector>,
}

impl Target {
    /// Connects (TCP, then TLS for `wss://`), upgrades on `request` and reads the 101.
    async fn connect(&self, request: &[u8]) -> std::io::Result<Conn> {
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let mut conn = match &self.tls {
            None => Conn::Plain(tcp),
            Some(c) => {
                let name = ServerName::IpAddress(self.addr.ip().into());
                Conn::Tls(Box::new(c.connect(name, tcp).await?))
            }
        };
        ws::upgrade(&mut conn, request).await?;
        Ok(conn)
    }
}

/// A client connection, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Conn {
    /// Protocol version, cipher suite and key exchange group, for the record.
    fn tls_params(&self) -> Option<String> {
        let Conn::Tls(s) = self else { return None };
        let c = s.get_ref().1;
        Some(format!(
            "{:?} {:?} {:?}",
            c.protocol_version()?,
            c.negotiated_cipher_suite()?.suite(),
            c.negotiated_key_exchange_group()?.name()
        ))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A TLS client trusting only the certificates in `ca` (PEM), without session resumption so
/// that every connection setup measures a full handshake.
fn tls_connector(ca: &std::path::Path) -> Result<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for c in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))?
    {
        roots.add(c.with_context(|| format!("parsing {}", ca.display()))?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    Ok(TlsConnector::from(Arc::new(config)))
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, rest) = s
            .split_once('=')
            .ok_or("expected NAME=[wss://]HOST:PORT[@PID,…]")?;
        let (wss, rest) = match rest.strip_prefix("wss://") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let (addr, pids) = match rest.split_once('@') {
            Some((a, p)) => (
                a,
                p.split(',')
                    .map(|x| x.parse::<u32>().map_err(|e| format!("pid {x}: {e}")))
                    .collect::<Result<_, _>>()?,
            ),
            None => (rest, Vec::new()),
        };
        let addr = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
        Ok(Self {
            name: name.to_owned(),
            addr,
            pids,
            wss,
            tls: None,
        })
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::EchoServer {
            listen,
            port_file,
            exit_after_secs,
        } => rt.block_on(async move {
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let port = listener.local_addr()?.port();
            if let Some(f) = port_file {
                // Written whole then renamed, so a reader never sees a partial number.
                let tmp = f.with_extension("tmp");
                std::fs::write(&tmp, format!("{port}\n"))?;
                std::fs::rename(&tmp, &f)?;
            }
            let _ = tokio::time::timeout(
                Duration::from_secs(exit_after_secs),
                ws::serve_echo(listener),
            )
            .await;
            Ok(())
        }),
        Command::FreePort => {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            println!("{}", l.local_addr()?.port());
            Ok(())
        }
        Command::WaitPort { addr, timeout_secs } => rt.block_on(async move {
            let deadline = Instant::now() + Duration::from_secs(timeout_secs);
            while TcpStream::connect(addr).await.is_err() {
                if Instant::now() > deadline {
                    bail!("{addr} did not accept connections within {timeout_secs} s");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        }),
        Command::Compare(args) => rt.block_on(compare(args)),
        Command::Burst(args) => rt.block_on(burst(args)),
    }
}

/// What one connection of a burst got.
enum BurstAnswer {
    Upgraded(TcpStream),
    /// Another status (its number; 0 if the status line did not parse).
    Refused(u16),
    /// Closed or failed before a complete answer.
    Failed,
}

async fn burst_one(addr: SocketAddr, request: &[u8]) -> BurstAnswer {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return BurstAnswer::Failed;
    };
    let _ = stream.set_nodelay(true);
    if stream.write_all(request).await.is_err() {
        return BurstAnswer::Failed;
    }
    let mut buf = Vec::with_capacity(512);
    if ws::read_head(&mut stream, &mut buf).await.is_err() {
        return BurstAnswer::Failed;
    }
    let status = std::str::from_utf8(&buf)
        .ok()
        .and_then(|h| h.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    if status == 101 {
        BurstAnswer::Upgraded(stream)
    } else {
        BurstAnswer::Refused(status)
    }
}

async fn burst(a: BurstArgs) -> Result<()> {
    let request = ws::upgrade_request("127.0.0.1", &a.path);
    let concurrency = a.concurrency.clamp(1, a.conns.max(1));
    for round in 0..a.rounds {
        let started = Instant::now();
        let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (next, request, conns, addr) = (next.clone(), request.clone(), a.conns, a.target);
            workers.spawn(async move {
                let mut got = Vec::new();
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < conns {
                    let t0 = Instant::now();
                    let answer = burst_one(addr, &request).await;
                    got.push((answer, t0.elapsed().as_secs_f64() * 1e6));
                }
                got
            });
        }
        let (mut held, mut refused, mut failed) = (Vec::new(), Vec::<u16>::new(), 0usize);
        let mut setup_us = Vec::new();
        while let Some(got) = workers.join_next().await {
            for (answer, us) in got.context("a burst worker panicked")? {
                setup_us.push(us);
                match answer {
                    BurstAnswer::Upgraded(s) => held.push(s),
                    BurstAnswer::Refused(code) => refused.push(code),
                    BurstAnswer::Failed => failed += 1,
                }
            }
        }
        let wall_ms = started.elapsed().as_secs_f64() * 1e3;
        refused.sort_unstable();
        let mut by_status = serde_json::Map::new();
        for code in &refused {
            let n = by_status
                .entry(code.to_string())
                .or_insert(json!(0))
                .as_u64()
                .unwrap_or(0);
            by_status.insert(code.to_string(), json!(n + 1));
        }
        let doc = json!({
            "round": round + 1,
            "conns": a.conns,
            "concurrency": concurrency,
            "upgraded": held.len(),
            "refused": refused.len(),
            "refused_by_status": by_status,
            "failed": failed,
            "setup": stats(&mut setup_us),
            "wall_ms": wall_ms,
        });
        println!("{doc}");
        drop(held);
    }
    Ok(())
}

/// Sum of utime+stime (clock ticks) and of VmRSS (KiB) over `pids` and their children.
#[derive(Clone, Copy, Default)]
struct ProcSample {
    ticks: u64,
    rss_kib: u64,
}

fn with_children(pids: &[u32]) -> Vec<u32> {
    let mut all = pids.to_vec();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) =
                stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()))
                && pids.contains(&ppid)
                && !all.contains(&pid)
            {
                all.push(pid);
            }
        }
    }
    all
}

/// Fields of /proc/<pid>/stat after the command name: index 0 is the state (field 3).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn sample(pids: &[u32]) -> ProcSample {
    let mut out = ProcSample::default();
    for pid in with_children(pids) {
        if let Some(f) = stat_fields(pid) {
            // utime and stime are fields 14 and 15, i.e. 11 and 12 after the state.
            out.ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            out.ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            out.rss_kib += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(v, 0.5)
}

struct Throughput {
    mib_per_s: f64,
    cpu_us_per_msg: Option<f64>,
    cpu_share: Option<f64>,
    messages: u64,
}

/// Streams `message_bytes` echoes over `conns` connections for `secs` (after a warm-up) and
/// charges the CPU the target's processes used in exactly that window.
async fn throughput(t: &Target, request: &[u8], a: &CompareArgs) -> Result<Throughput> {
    let frame = Rc::new(ws::masked_frame(2, a.message_bytes));
    let done = Rc::new(Cell::new(0u64));
    let stop = Rc::new(Cell::new(false));
    let local = tokio::task::LocalSet::new();
    let mut tasks = Vec::new();
    for _ in 0..a.conns {
        let mut conn = t
            .connect(request)
            .await
            .with_context(|| format!("{}: upgrade", t.name))?;
        let (frame, done, stop) = (frame.clone(), done.clone(), stop.clone());
        tasks.push(local.spawn_local(async move {
            let mut scratch = vec![0u8; frame.len()];
            while !stop.get() {
                ws::round_trip(&mut conn, &frame, &mut scratch).await?;
                done.set(done.get() + 1);
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    local
        .run_until(async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (m0, p0, t0) = (done.get(), sample(&t.pids), Instant::now());
            tokio::time::sleep(Duration::from_secs_f64(a.secs)).await;
            let (m1, p1, elapsed) = (done.get(), sample(&t.pids), t0.elapsed());
            stop.set(true);
            for task in tasks {
                task.await?.with_context(|| format!("{}: echo", t.name))?;
            }
            let messages = m1 - m0;
            let cpu_s = (p1.ticks - p0.ticks) as f64 / a.clk_tck as f64;
            let charged = !t.pids.is_empty();
            Ok(Throughput {
                mib_per_s: messages as f64 * a.message_bytes as f64
                    / MIB as f64
                    / elapsed.as_secs_f64(),
                cpu_us_per_msg: (charged && messages > 0).then(|| cpu_s * 1e6 / messages as f64),
                cpu_share: charged.then(|| cpu_s / elapsed.as_secs_f64()),
                messages,
            })
        })
        .await
}

/// CPU time (ns) used so far by `pids` and their children, summed over all their threads
/// (`/proc/<pid>/task/<tid>/schedstat`, nanosecond resolution unlike the ticks of `stat`).
fn cpu_ns(pids: &[u32]) -> u64 {
    let mut total = 0;
    for pid in with_children(pids) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            total += std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// Round-trip latencies of one target, and the CPU its processes used per round trip.
struct Rtt {
    samples_us: Vec<f64>,
    cpu_us_per_rtt: Option<f64>,
}

/// Latency samples in µs, one list per target, taken in turns (shuffled per sample), with the
/// CPU each target's processes spent per round trip over the same window.
async fn rtt(targets: &[Target], request: &[u8], samples: usize) -> Result<Vec<Rtt>> {
    let frame = ws::masked_frame(1, 256);
    let mut scratch = vec![0u8; frame.len()];
    let mut conns = Vec::new();
    for t in targets {
        let mut c = t
            .connect(request)
            .await
            .with_context(|| format!("{}: upgrade", t.name))?;
        for _ in 0..2_000 {
            ws::round_trip(&mut c, &frame, &mut scratch).await?;
        }
        conns.push(c);
    }
    let mut out = vec![Vec::with_capacity(samples); targets.len()];
    let mut order = Order::new(targets.len());
    let cpu_before: Vec<u64> = targets.iter().map(|t| cpu_ns(&t.pids)).collect();
    for _ in 0..samples {
        for &j in order.next() {
            let start = Instant::now();
            ws::round_trip(&mut conns[j], &frame, &mut scratch).await?;
            out[j].push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    Ok(out
        .into_iter()
        .zip(targets)
        .zip(cpu_before)
        .map(|((samples_us, t), before)| Rtt {
            cpu_us_per_rtt: (!t.pids.is_empty() && !samples_us.is_empty()).then(|| {
                cpu_ns(&t.pids).saturating_sub(before) as f64 / 1e3 / samples_us.len() as f64
            }),
            samples_us,
        })
        .collect())
}

/// Upgrade requests each with a token of its own (minted here, before anything is timed).
struct FreshTokens {
    requests: std::vec::IntoIter<Vec<u8>>,
}

impl FreshTokens {
    /// `n` requests for `path` with its `signingKey` replaced by a new token for `session`.
    fn mint(path: &str, key_file: &std::path::Path, session: &str, n: usize) -> Result<Self> {
        let pem = std::fs::read_to_string(key_file)
            .with_context(|| format!("reading {}", key_file.display()))?;
        let key = wallcrawler_contract::SigningKey::from_pem(&pem)?;
        let (before, rest) = path
            .split_once("signingKey=")
            .context("--fresh-token-key needs a --path with signingKey=")?;
        let after = rest.find('&').map_or("", |i| &rest[i..]);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let requests = (0..n)
            .map(|_| {
                let token = wallcrawler_contract::Claims::new(session, "", now, 3600).mint(&key);
                ws::upgrade_request("127.0.0.1", &format!("{before}signingKey={token}{after}"))
            })
            .collect::<Vec<_>>();
        Ok(Self {
            requests: requests.into_iter(),
        })
    }
}

/// Setup samples in µs of one kind, one list per target.
type Setups = Vec<Vec<f64>>;

/// Connection setup samples in µs, one list per target, taken in turns (shuffled per sample);
/// with `fresh`, a second set whose every connection presents a token of its own, its turns
/// shuffled in with the first's.
async fn setup(
    targets: &[Target],
    request: &[u8],
    samples: usize,
    mut fresh: Option<FreshTokens>,
) -> Result<(Setups, Option<Setups>)> {
    let n = targets.len();
    let kinds = if fresh.is_some() { 2 } else { 1 };
    let mut out = vec![Vec::with_capacity(samples); n * kinds];
    let mut order = Order::new(n * kinds);
    for i in 0..samples + 200 {
        for &slot in order.next() {
            let j = slot % n;
            let fresh_request = match (&mut fresh, slot >= n) {
                (Some(f), true) => Some(f.requests.next().context("out of fresh tokens")?),
                _ => None,
            };
            let request = fresh_request.as_deref().unwrap_or(request);
            let start = Instant::now();
            let mut conn = targets[j]
                .connect(request)
                .await
                .with_context(|| format!("{}: upgrade", targets[j].name))?;
            let took = start.elapsed().as_secs_f64() * 1e6;
            // Let the target finish tearing this connection down before the next sample,
            // so its work does not land in another target's measurement.
            conn.shutdown().await?;
            let mut sink = [0u8; 256];
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while let Ok(1..) = conn.read(&mut sink).await {}
            })
            .await;
            if i >= 200 {
                out[slot].push(took);
            }
        }
    }
    let fresh_out = (kinds == 2).then(|| out.split_off(n));
    Ok((out, fresh_out))
}

/// The order targets take their turn in, shuffled afresh for every sample: work a target
/// leaves behind (a teardown, a last empty read) would otherwise always fall on the same
/// neighbour's measurement.
struct Order {
    slots: Vec<usize>,
    state: u64,
}

impl Order {
    fn new(n: usize) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self {
            slots: (0..n).collect(),
            state: seed | 1,
        }
    }

    /// Fisher–Yates with xorshift64: only the order matters, not the randomness' quality.
    fn next(&mut self) -> &[usize] {
        for i in (1..self.slots.len()).rev() {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let j = (self.state % (i as u64 + 1)) as usize;
            self.slots.swap(i, j);
        }
        &self.slots
    }
}

struct Idle {
    before_kib: u64,
    held_kib: u64,
}

/// RSS of the target's processes before and while `n` upgraded connections (each having
/// echoed one 256 B message, then one `warm_bytes` message when not 0) sit idle.
async fn idle(t: &Target, request: &[u8], n: usize, warm_bytes: usize) -> Result<Idle> {
    let before = sample(&t.pids).rss_kib;
    let frame = ws::masked_frame(1, 256);
    let warm = (warm_bytes > 0).then(|| ws::masked_frame(2, warm_bytes));
    let mut scratch = vec![0u8; frame.len().max(warm.as_ref().map_or(0, Vec::len))];
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = t
            .connect(request)
            .await
            .with_context(|| format!("{}: upgrade", t.name))?;
        ws::round_trip(&mut c, &frame, &mut scratch).await?;
        if let Some(w) = &warm {
            ws::round_trip(&mut c, w, &mut scratch).await?;
        }
        held.push(c);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held_kib = sample(&t.pids).rss_kib;
    drop(held);
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(Idle {
        before_kib: before,
        held_kib,
    })
}

fn stats(samples: &mut [f64]) -> Value {
    samples.sort_by(f64::total_cmp);
    json!({
        "n": samples.len(),
        "p50_us": percentile(samples, 0.5),
        "p90_us": percentile(samples, 0.9),
        "p99_us": percentile(samples, 0.99),
        "max_us": samples.last().copied().unwrap_or(f64::NAN),
    })
}

async fn compare(mut a: CompareArgs) -> Result<()> {
    if a.targets.iter().any(|t| t.wss) {
        let ca = a
            .ca_cert
            .as_deref()
            .context("a wss:// target needs --ca-cert")?;
        let connector = tls_connector(ca)?;
        for t in a.targets.iter_mut().filter(|t| t.wss) {
            t.tls = Some(connector.clone());
        }
    }
    let a = a;
    let targets = &a.targets;
    let request = ws::upgrade_request("127.0.0.1", &a.path);
    let mut tls_params = Vec::new();
    for t in targets {
        let mut c = t
            .connect(&request)
            .await
            .with_context(|| format!("{} ({}) does not upgrade", t.name, t.addr))?;
        tls_params.push(c.tls_params());
        if let Some(p) = c.tls_params() {
            eprintln!("wsload: {} negotiated {p}", t.name);
        }
        let frame = ws::masked_frame(1, 256);
        let mut scratch = vec![0u8; frame.len()];
        ws::round_trip(&mut c, &frame, &mut scratch)
            .await
            .with_context(|| format!("{} does not echo", t.name))?;
    }
    let started = Instant::now();
    eprintln!(
        "wsload: throughput, {} round(s) × {} target(s) × {:.1} s …",
        a.rounds,
        targets.len(),
        a.secs + 0.5
    );
    let mut rounds: Vec<Vec<Throughput>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..a.rounds {
        for (i, t) in targets.iter().enumerate() {
            rounds[i].push(throughput(t, &request, &a).await?);
        }
    }
    eprintln!("wsload: 256 B round trips ({} per target) …", a.rtt_samples);
    let mut rtts = rtt(targets, &request, a.rtt_samples).await?;
    eprintln!(
        "wsload: connection setups ({} per target) …",
        a.setup_samples
    );
    let fresh = match (&a.fresh_token_key, &a.fresh_token_session) {
        (Some(key), Some(session)) => Some(FreshTokens::mint(
            &a.path,
            key,
            session,
            (a.setup_samples + 200) * targets.len(),
        )?),
        _ => None,
    };
    let (mut setups, mut fresh_setups) = setup(targets, &request, a.setup_samples, fresh).await?;
    let mut idles = Vec::new();
    for t in targets {
        if a.idle_conns > 0 && !t.pids.is_empty() {
            eprintln!(
                "wsload: {} idle connections through {} …",
                a.idle_conns, t.name
            );
            idles.push(Some(idle(t, &request, a.idle_conns, 0).await?));
        } else {
            idles.push(None);
        }
    }
    let mut warm_idles = Vec::new();
    for t in targets {
        if a.idle_conns > 0 && a.idle_warm_bytes > 0 && !t.pids.is_empty() {
            eprintln!(
                "wsload: {} idle connections through {}, each after a {} B message …",
                a.idle_conns, t.name, a.idle_warm_bytes
            );
            warm_idles.push(Some(
                idle(t, &request, a.idle_conns, a.idle_warm_bytes).await?,
            ));
        } else {
            warm_idles.push(None);
        }
    }

    let mut results = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let r = &rounds[i];
        let tput = median(&mut r.iter().map(|x| x.mib_per_s).collect::<Vec<_>>());
        let cpu: Vec<f64> = r.iter().filter_map(|x| x.cpu_us_per_msg).collect();
        let share: Vec<f64> = r.iter().filter_map(|x| x.cpu_share).collect();
        results.push(json!({
            "name": t.name,
            "addr": t.addr.to_string(),
            "tls": tls_params[i],
            "pids": with_children(&t.pids),
            "throughput": {
                "mib_per_s": tput,
                "cpu_us_per_msg": (!cpu.is_empty()).then(|| median(&mut cpu.clone())),
                "cpu_share_of_core": (!share.is_empty()).then(|| median(&mut share.clone())),
                "rounds": r.iter().map(|x| json!({
                    "mib_per_s": x.mib_per_s, "cpu_us_per_msg": x.cpu_us_per_msg,
                    "cpu_share_of_core": x.cpu_share, "messages": x.messages,
                })).collect::<Vec<_>>(),
            },
            "rtt_256b": stats(&mut rtts[i].samples_us),
            "rtt_cpu_us_per_round_trip": rtts[i].cpu_us_per_rtt,
            "setup": stats(&mut setups[i]),
            "setup_fresh_token": fresh_setups.as_mut().map(|f| stats(&mut f[i])),
            "idle": idles[i].as_ref().map(|x| json!({
                "conns": a.idle_conns,
                "rss_before_mib": x.before_kib as f64 / 1024.0,
                "rss_held_mib": x.held_kib as f64 / 1024.0,
                "kib_per_conn": (x.held_kib as f64 - x.before_kib as f64) / a.idle_conns as f64,
            })),
            // Per connection over the RSS before the first idle test: memory the first one
            // freed may stay with the process and be reused by the second.
            "idle_after_message": warm_idles[i].as_ref().map(|x| {
                let base = idles[i].as_ref().map_or(x.before_kib, |f| f.before_kib);
                json!({
                    "conns": a.idle_conns,
                    "message_bytes": a.idle_warm_bytes,
                    "rss_before_mib": x.before_kib as f64 / 1024.0,
                    "rss_held_mib": x.held_kib as f64 / 1024.0,
                    "kib_per_conn": (x.held_kib as f64 - base as f64) / a.idle_conns as f64,
                })
            }),
        }));
    }
    let doc = json!({
        "tool": "wsload compare",
        "conns": a.conns,
        "message_bytes": a.message_bytes,
        "secs_per_round": a.secs,
        "rounds": a.rounds,
        "elapsed_s": started.elapsed().as_secs_f64(),
        "targets": results,
    });
    print_table(&doc);
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print_table(doc: &Value) {
    let targets = doc["targets"].as_array().cloned().unwrap_or_default();
    let base = &targets[0];
    let cell = |v: &Value, digits: usize| {
        v.as_f64()
            .map_or("-".to_owned(), |x| format!("{x:.digits$}"))
    };
    let added = |t: &Value, path: &[&str]| {
        let get = |v: &Value| path.iter().fold(v, |v, k| &v[*k]).as_f64();
        match (get(t), get(base)) {
            (Some(x), Some(b)) => Value::from(x - b),
            _ => Value::Null,
        }
    };
    type Row<'a> = (&'a str, Box<dyn Fn(&Value) -> String + 'a>);
    let mut rows: Vec<Row> = vec![
        (
            "1 MiB echo, MiB/s (payload, median round)",
            Box::new(|t: &Value| cell(&t["throughput"]["mib_per_s"], 0)),
        ),
        (
            "CPU µs per 1 MiB message (target procs)",
            Box::new(|t: &Value| cell(&t["throughput"]["cpu_us_per_msg"], 1)),
        ),
        (
            "CPU share of one core during it",
            Box::new(|t: &Value| cell(&t["throughput"]["cpu_share_of_core"], 2)),
        ),
        (
            "256 B RTT p50 µs",
            Box::new(|t: &Value| cell(&t["rtt_256b"]["p50_us"], 1)),
        ),
        (
            "256 B RTT p99 µs",
            Box::new(|t: &Value| cell(&t["rtt_256b"]["p99_us"], 1)),
        ),
        (
            "  added over baseline p50 µs",
            Box::new(|t: &Value| cell(&added(t, &["rtt_256b", "p50_us"]), 1)),
        ),
        (
            "  added over baseline p99 µs",
            Box::new(|t: &Value| cell(&added(t, &["rtt_256b", "p99_us"]), 1)),
        ),
        (
            "  CPU µs per round trip (target procs)",
            Box::new(|t: &Value| cell(&t["rtt_cpu_us_per_round_trip"], 2)),
        ),
        (
            "setup p50 µs (connect+upgrade+101)",
            Box::new(|t: &Value| cell(&t["setup"]["p50_us"], 1)),
        ),
        (
            "setup p99 µs",
            Box::new(|t: &Value| cell(&t["setup"]["p99_us"], 1)),
        ),
        (
            "  added over baseline p50 µs",
            Box::new(|t: &Value| cell(&added(t, &["setup", "p50_us"]), 1)),
        ),
        (
            "  added over baseline p99 µs",
            Box::new(|t: &Value| cell(&added(t, &["setup", "p99_us"]), 1)),
        ),
        (
            "RSS before idle test MiB",
            Box::new(|t: &Value| cell(&t["idle"]["rss_before_mib"], 1)),
        ),
        (
            "RSS with idle conns held MiB",
            Box::new(|t: &Value| cell(&t["idle"]["rss_held_mib"], 1)),
        ),
        (
            "  KiB per idle connection",
            Box::new(|t: &Value| cell(&t["idle"]["kib_per_conn"], 1)),
        ),
        (
            "RSS with idle conns held, each after a big message, MiB",
            Box::new(|t: &Value| cell(&t["idle_after_message"]["rss_held_mib"], 1)),
        ),
        (
            "  KiB per such conn (over RSS before idle test)",
            Box::new(|t: &Value| cell(&t["idle_after_message"]["kib_per_conn"], 1)),
        ),
    ];
    // The fresh-token setup rows, after the same-token ones, when they were measured.
    if targets.iter().any(|t| t["setup_fresh_token"].is_object()) {
        let fresh: Vec<Row> = vec![
            (
                "setup, fresh token each, p50 µs",
                Box::new(|t: &Value| cell(&t["setup_fresh_token"]["p50_us"], 1)),
            ),
            (
                "setup, fresh token each, p99 µs",
                Box::new(|t: &Value| cell(&t["setup_fresh_token"]["p99_us"], 1)),
            ),
            (
                "  added over baseline p50 µs",
                Box::new(|t: &Value| cell(&added(t, &["setup_fresh_token", "p50_us"]), 1)),
            ),
            (
                "  added over baseline p99 µs",
                Box::new(|t: &Value| cell(&added(t, &["setup_fresh_token", "p99_us"]), 1)),
            ),
        ];
        let at = rows
            .iter()
            .position(|(label, _)| label.starts_with("RSS before"))
            .unwrap_or(rows.len());
        rows.splice(at..at, fresh);
    }
    let idle_n = targets
        .iter()
        .find_map(|t| t["idle"]["conns"].as_u64())
        .unwrap_or(0);
    println!();
    println!(
        "{} conns × {} B messages, {} round(s) of {} s; {} idle conns; baseline = {}",
        doc["conns"],
        doc["message_bytes"],
        doc["rounds"],
        doc["secs_per_round"],
        idle_n,
        base["name"].as_str().unwrap_or("?")
    );
    print!("{:<44}", "");
    for t in &targets {
        print!("{:>12}", t["name"].as_str().unwrap_or("?"));
    }
    println!();
    for (label, f) in &rows {
        print!("{label:<44}");
        for t in &targets {
            print!("{:>12}", f(t));
        }
        println!();
    }
}
