//! The proxy's hot paths, in process: the real [`Proxy`] (token check, upstream dial, relay)
//! on 127.0.0.1:0 in front of a raw WebSocket echo upstream, each figure also taken straight
//! to the upstream so the proxy's share is the difference.
//!
//! - `rtt_256B`: one 256-byte text frame there and back over an established connection.
//! - `echo_1MiB`: one 1 MiB binary frame there and back (throughput = payload echoed).
//! - `setup`: TCP connect + upgrade request (with a valid token) + the 101 read.
//! - `rtt_256B_log`: the same round trip (a `Runtime.evaluate` command, echoed as its own
//!   answer) through a proxy whose session is logged (`on`: every message copied to the
//!   session log's writer, running on this runtime and storing nowhere) and one whose is not
//!   (`off`); then, outside criterion, the CPU per message each way (`schedstat` of the relay
//!   threads, and of the whole process, 50,000 round trips, twice each), printed as
//!   `relay_cpu_per_message`, and what logging costs in all as `session_log_cost`.
//! - `check_token`: the proxy's token check alone ([`Authenticator::check_one`]), for the
//!   same token again (`cached`: answered by the verified-token cache, only the claim rules
//!   judged) and for a token never seen (`fresh`: minted outside the timed part; the Ed25519
//!   check, then remembered).
//!
//! Everything runs on one current-thread runtime (client, proxy and upstream take turns on
//! this thread), so a figure is the sum of the work along the path with no cross-thread
//! wake-ups: steady enough to catch regressions. The proxy uses the default limits, as in
//! `run` mode: the client's frames pass the `Browser.close` inspector. For proxy-vs-nginx
//! figures across processes see `scripts/bench/compare.sh`.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

#[path = "support/ws.rs"]
mod ws;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wallcrawler_contract::{Claims, SigningKey};
use wallcrawler_controller::auth::{Authenticator, KeySource, StaticKeys, unix_now};
use wallcrawler_controller::edge::Limits;
use wallcrawler_controller::proxy::Proxy;
use wallcrawler_controller::session_log::RoundTripWork;
use wallcrawler_controller::session_log::writer::{Sink, Writer};
use wallcrawler_controller::shutdown::Shutdown;
use wallcrawler_controller::stores::{ArchiveStore, BoxRead, StoreError};
use wallcrawler_controller::telemetry::Metrics;
use wallcrawler_controller::upstream::{Endpoint, Upstream, UpstreamState};

const KEY: &[u8; 32] = b"bench-signing-key-0123456789abcd";
const SESSION: &str = "sess_bench";
const MIB: usize = 1024 * 1024;

/// The echo upstream and the proxy in front of it, running on `rt`.
struct Bed {
    rt: Runtime,
    upstream: SocketAddr,
    proxy: SocketAddr,
    /// Upgrade request with a valid token, for either address (neither checks `Host`).
    request: Vec<u8>,
    _upstream_tx: watch::Sender<UpstreamState>,
    stop: CancellationToken,
}

/// A store that keeps nothing (the writer's work is measured, not S3's).
struct Nowhere;

/// Bytes the logged bed's writer stored (each chunk counted at every store), so the bench
/// shows the log was written.
static STORED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[async_trait::async_trait]
impl ArchiveStore for Nowhere {
    async fn open(&self, _: &str) -> Result<Option<BoxRead>, StoreError> {
        Ok(None)
    }
    async fn put(&self, _: &str, mut body: BoxRead) -> Result<u64, StoreError> {
        let n = tokio::io::copy(&mut body, &mut tokio::io::sink())
            .await
            .unwrap_or(0);
        STORED.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// The ids of this process's threads whose name is `wc-relay` (the relay threads), or all of
/// them when `relay_only` is false.
fn threads(relay_only: bool) -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    !relay_only
                        || std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "wc-relay")
                })
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Nanoseconds thread `tid` has run on a CPU so far (the first field of its `schedstat`: the
/// scheduler's own account, not 10 ms ticks).
fn thread_ns(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Bed {
    fn start() -> Self {
        Self::start_logged(false)
    }

    /// A bed whose session is logged when `logged` (the writer on this bed's runtime).
    fn start_logged(logged: bool) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (upstream, proxy, upstream_tx, stop) = rt.block_on(async {
            let up = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind upstream");
            let upstream = up.local_addr().expect("upstream addr");
            tokio::spawn(ws::serve_echo(up));

            let keys: Arc<dyn KeySource> = Arc::new(StaticKeys::new(
                SigningKey::from_seed(KEY).verifying_key().clone(),
            ));
            let auth = Authenticator::new(keys, SESSION.to_owned(), None, 30);
            let state = UpstreamState::Ready(Arc::new(Upstream::new(
                Endpoint::host(upstream),
                Some("/devtools/browser/echo".to_owned()),
            )));
            let (upstream_tx, upstream_rx) = watch::channel(state);
            let proxy = Proxy::new(
                auth,
                upstream_rx,
                Metrics::new(),
                Limits::default(),
                &Shutdown::new(),
            )
            .expect("relay thread");
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
            let proxy_addr = listener.local_addr().expect("proxy addr");
            let stop = CancellationToken::new();
            if logged {
                let (writer, recorder) = Writer::start(Sink {
                    store: Arc::new(Nowhere),
                    project_id: "proj_bench".to_owned(),
                    session_id: SESSION.to_owned(),
                });
                proxy.session_log().set(Some(recorder));
                // Runs until the runtime is dropped with the bed.
                std::mem::forget(writer);
            }
            tokio::spawn(proxy.serve(listener, stop.clone(), TaskTracker::new()));
            (upstream, proxy_addr, upstream_tx, stop)
        });
        let token = Claims::new(SESSION, "", unix_now(), 3600).mint(&SigningKey::from_seed(KEY));
        let request = ws::upgrade_request(
            "127.0.0.1",
            &format!("/devtools/page/bench?signingKey={token}"),
        );
        Self {
            rt,
            upstream,
            proxy,
            request,
            _upstream_tx: upstream_tx,
            stop,
        }
    }

    fn targets(&self) -> [(&'static str, SocketAddr); 2] {
        [("direct", self.upstream), ("proxy", self.proxy)]
    }

    fn connect(&self, addr: SocketAddr) -> TcpStream {
        self.rt
            .block_on(ws::connect_upgraded(addr, &self.request))
            .expect("upgrade")
    }

    /// Times `iters` round trips of `frame` over one upgraded connection to `addr`.
    fn round_trips(
        &self,
        conn: &mut TcpStream,
        frame: &[u8],
        scratch: &mut [u8],
        iters: u64,
    ) -> Duration {
        self.rt.block_on(async {
            let start = Instant::now();
            for _ in 0..iters {
                ws::round_trip(conn, frame, scratch)
                    .await
                    .expect("round trip");
            }
            start.elapsed()
        })
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn bench_relay(c: &mut Criterion) {
    let bed = Bed::start();

    let frame = ws::masked_frame(1, 256);
    let mut scratch = vec![0u8; frame.len()];
    let mut g = c.benchmark_group("rtt_256B");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, addr) in bed.targets() {
        let mut conn = bed.connect(addr);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| bed.round_trips(&mut conn, &frame, &mut scratch, iters))
        });
    }
    g.finish();

    // Text: the inspector refuses binary client messages (Chrome reads only text).
    let frame = ws::masked_frame(1, MIB);
    let mut scratch = vec![0u8; frame.len()];
    let mut g = c.benchmark_group("echo_1MiB");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.throughput(Throughput::Bytes(MIB as u64));
    for (name, addr) in bed.targets() {
        let mut conn = bed.connect(addr);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| bed.round_trips(&mut conn, &frame, &mut scratch, iters))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("setup");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, addr) in bed.targets() {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                bed.rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let conn = ws::connect_upgraded(addr, &bed.request)
                            .await
                            .expect("upgrade");
                        // Closed with a reset so that tens of thousands of iterations do not
                        // leave as many client ports in TIME_WAIT (connect() slows down badly
                        // as the ephemeral range fills). The teardown itself is done by the
                        // next iterations, so it is counted too.
                        conn.set_zero_linger().expect("SO_LINGER");
                    }
                    start.elapsed()
                })
            })
        });
    }
    g.finish();
}

fn bench_check_token(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let key = SigningKey::from_seed(KEY);
    let keys: Arc<dyn KeySource> = Arc::new(StaticKeys::new(key.verifying_key().clone()));
    let auth = Authenticator::new(keys, SESSION.to_owned(), None, 30);
    let token = Claims::new(SESSION, "", unix_now(), 3600).mint(&key);
    rt.block_on(auth.check_one(&token)).expect("a valid token");

    let mut g = c.benchmark_group("check_token");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("cached", |b| {
        b.iter(|| rt.block_on(auth.check_one(std::hint::black_box(&token))))
    });
    g.bench_function("fresh", |b| {
        b.iter_batched(
            || Claims::new(SESSION, "", unix_now(), 3600).mint(&key),
            |t| rt.block_on(auth.check_one(&t)),
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// Round trips of a 256-byte command with the session logged and not; then the relay thread's
/// CPU per message for each (the figure Step 18 holds to at most 10 % more).
fn bench_logging(c: &mut Criterion) {
    let off = Bed::start_logged(false);
    let on = Bed::start_logged(true);

    let frame = ws::masked_frame(1, 256);
    let mut scratch = vec![0u8; frame.len()];
    // The log's work for one round trip, alone on this thread (its cost in time, steady where
    // the relay's CPU is not): to set against relay_cpu_per_message/off, two messages.
    let text = ws::text_payload(256);
    let mut work = RoundTripWork::default();
    let mut g = c.benchmark_group("session_log_work");
    g.bench_function("round_trip_256B", |b| {
        b.iter(|| work.run(std::hint::black_box(&text), &text))
    });
    g.finish();

    let mut g = c.benchmark_group("rtt_256B_log");
    g.sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, bed) in [("off", &off), ("on", &on)] {
        let mut conn = bed.connect(bed.proxy);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| bed.round_trips(&mut conn, &frame, &mut scratch, iters))
        });
    }
    g.finish();

    const N: u64 = 50_000;
    // CPU measured around one bed's round trips at a time (the other bed idle meanwhile): the
    // relay threads alone, and the whole process (bench client, echo upstream, relay, and the
    // log's writer, which runs on the bed's runtime), whose difference between on and off is
    // everything logging costs.
    let cpu = |relay_only| threads(relay_only).into_iter().map(thread_ns).sum::<u64>();
    let mut runs = Vec::new();
    for (name, bed) in [("off", &off), ("on", &on), ("off", &off), ("on", &on)] {
        let mut conn = bed.connect(bed.proxy);
        let (relay0, all0) = (cpu(true), cpu(false));
        let wall = bed.round_trips(&mut conn, &frame, &mut scratch, N);
        let relay = (cpu(true) - relay0) as f64 / 1000.0 / (2 * N) as f64;
        let all = (cpu(false) - all0) as f64 / 1000.0 / (2 * N) as f64;
        eprintln!(
            "relay_cpu_per_message/{name}: relay {relay:.2} us, process {all:.2} us ({} messages, {:.0} ms wall)",
            2 * N,
            wall.as_secs_f64() * 1000.0
        );
        runs.push((name, relay, all));
    }
    let mean = |n: &str, f: fn(&(&str, f64, f64)) -> f64| {
        let v: Vec<f64> = runs.iter().filter(|r| r.0 == n).map(f).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let relay_off = mean("off", |r| r.1);
    let extra = mean("on", |r| r.2) - mean("off", |r| r.2);
    eprintln!(
        "session_log_stored: {} bytes",
        STORED.load(std::sync::atomic::Ordering::Relaxed)
    );
    eprintln!(
        "session_log_cost: {extra:.2} us more process CPU per message, {:.1} % of the relay's {relay_off:.2} us",
        100.0 * extra / relay_off
    );
}

/// `RELAY_LOG_ROUND_TRIPS=<n> RELAY_LOG=on|off`: no criterion, only `n` logged (or not) round
/// trips then exit, for counting instructions under `valgrind --tool=callgrind`: a count is
/// the same run after run whatever else the machine does (CPU time on two shared cores is
/// not); `scripts/bench/log-cost.sh` takes the difference of two `n` so start-up cancels.
fn count_only() -> bool {
    let Some(n) = std::env::var("RELAY_LOG_ROUND_TRIPS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return false;
    };
    let bed = Bed::start_logged(std::env::var("RELAY_LOG").as_deref() == Ok("on"));
    let frame = ws::masked_frame(1, 256);
    let mut scratch = vec![0u8; frame.len()];
    let mut conn = bed.connect(bed.proxy);
    bed.round_trips(&mut conn, &frame, &mut scratch, n);
    true
}

criterion_group!(benches, bench_relay, bench_logging, bench_check_token);

fn main() {
    if count_only() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
