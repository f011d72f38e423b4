//! `wallcrawler-control-plane`: the local platform (`serve`) and administration of projects and
//! API keys in the AWS tables (`admin`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use wallcrawler_contract::claim::ClaimWait;
use wallcrawler_control_plane::admin::{self, NewProject};
use wallcrawler_control_plane::app::Settings;
use wallcrawler_control_plane::aws::{self, DynamoKeys, DynamoProjects};
use wallcrawler_control_plane::egress::ManagedProxies;
use wallcrawler_control_plane::local::serve::{Connect, LocalServer, shutdown_signal};

/// Wallcrawler's Browserbase-compatible control plane.
#[derive(Parser)]
#[command(name = "wallcrawler-control-plane", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole platform locally: the API on 127.0.0.1, sessions as local controller
    /// processes, data in a directory. Prints `baseURL:`, `apiKey:` and `projectId:` lines,
    /// and `gateway:` (the connect gateway every connectUrl points at) unless `--direct`.
    ///
    /// Controllers take some settings from this environment (CHROME_PATH, FFMPEG_PATH,
    /// EGRESS_ALLOW, …: docs/operating.md). CHROME_PATH=/usr/lib/chromium/chromium-headless-shell
    /// runs Chromium's headless shell, the lighter browser: about half the CPU per session, no
    /// extensions (a create naming one is refused), the tells of a headless browser.
    Serve(ServeArgs),
    /// Serve the task API alone, as the stack's task API service does in gateway mode: `POST
    /// /v1/internal/claims` and `/credentials` for the browser tasks (each proving which task
    /// it is with a signed STS request), `GET /health`, nothing else. Configured by the API
    /// function's environment (tables, bucket, queue, secrets: see the deploy guide) with
    /// TASKS_TABLE_NAME, SESSION_ROLE_ARN and TASK_ROLE_ARN; AWS region and credentials from
    /// the standard AWS environment. Plain HTTP: TLS ends at the internal load balancer.
    /// Prints `taskApi: http://ADDR`; ends on SIGTERM once the requests in flight are answered.
    TaskApi {
        /// Address and port to listen on.
        #[arg(long, env = "TASK_API_LISTEN", default_value = aws::task_service::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
    },
    /// Administer projects and API keys in the DynamoDB tables of an AWS deployment. AWS
    /// region, credentials and `AWS_ENDPOINT_URL` come from the standard AWS environment.
    Admin {
        #[command(flatten)]
        tables: AdminTables,
        #[command(subcommand)]
        command: AdminCommand,
    },
}

/// `serve`'s options.
#[derive(Args)]
struct ServeArgs {
    /// Port on 127.0.0.1; 0 = any free port.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Where projects, keys, sessions and context archives are kept.
    #[arg(long, default_value = ".wallcrawler")]
    data_dir: PathBuf,
    /// Seconds `POST /v1/sessions` waits for READY before answering PENDING.
    #[arg(long, env = "CREATE_WAIT_SECONDS", default_value_t = 25)]
    create_wait_seconds: u64,
    /// Controllers kept warm (Chrome running, waiting for a session), so a create answers
    /// in milliseconds; each costs an idle Chrome. 0 = start one controller per session.
    #[arg(long, env = "WALLCRAWLER_POOL_SIZE", default_value_t = 2)]
    pool: usize,
    /// The most warm controllers one project takes at once: a project's sessions beyond it
    /// get a controller started for them alone (as with --pool 0), so other projects keep
    /// finding warm ones. 0 = no share (one project may take every warm controller).
    #[arg(long, env = "WALLCRAWLER_POOL_SHARE", default_value_t = 0)]
    pool_share: u64,
    /// Direct mode: no connect gateway; each session's connectUrl is its controller's own
    /// port, known once READY (the create waits for it). By default one gateway on a free
    /// port of 127.0.0.1 serves every session, and creates answer at once.
    #[arg(long, env = "WALLCRAWLER_DIRECT_CONNECT")]
    direct: bool,
    /// The gateway serves wss:// with a certificate for 127.0.0.1 and localhost from a
    /// local certificate authority, made in `<data-dir>/tls/` on first start; prints
    /// `caCert: PATH`, the authority a client trusts (`NODE_EXTRA_CA_CERTS=PATH` for Node).
    #[arg(long, env = "WALLCRAWLER_TLS", conflicts_with = "direct")]
    tls: bool,
    /// Seconds a new session waits for a browser (its claim's deadline), moved on by each
    /// `GET /v1/sessions/{id}` while it is not READY; past it, a warm controller taking its
    /// claim ends it ("no browser was available in time") instead of serving it.
    #[arg(long, env = "CLAIM_WAIT_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    claim_wait_seconds: u64,
    /// The latest claim deadline, in seconds after the create, however often the client polls.
    #[arg(long, env = "CLAIM_WAIT_MAX_SECONDS", default_value_t = 600)]
    claim_wait_max_seconds: u64,
    /// Seconds between two runs of the sweeper, which ends sessions stranded past their
    /// claim's deadline or their expiry and gives back their slots and leases; 0 = never.
    #[arg(long, env = "SWEEP_INTERVAL_SECONDS", default_value_t = 30)]
    sweep_interval_seconds: u64,
    /// A JSON file of managed proxy pools, which `proxies: true` and `{type: "browserbase"}`
    /// map to: `{"default": [{"server": "http://host:port", "username": "…", "password":
    /// "…"}], "US": [...]}` (pools named "default" or by country code). Without it such a
    /// create is refused (400).
    #[arg(long, env = "MANAGED_PROXIES_FILE")]
    managed_proxies: Option<PathBuf>,
    /// Days a session's log and recording are kept after they were last written (checked
    /// hourly and at the start; the contexts bucket's lifecycle rule does it on AWS); 0 = for
    /// ever.
    #[arg(long, env = "WALLCRAWLER_RECORDS_RETENTION_DAYS", default_value_t = wallcrawler_control_plane::local::retention::DEFAULT_RETENTION_DAYS)]
    records_retention_days: u64,
}

#[derive(Args)]
struct AdminTables {
    /// The projects table.
    #[arg(
        long,
        global = true,
        env = "PROJECTS_TABLE_NAME",
        default_value = "wallcrawler-projects"
    )]
    projects_table: String,
    /// The API keys table.
    #[arg(
        long,
        global = true,
        env = "API_KEYS_TABLE_NAME",
        default_value = "wallcrawler-api-keys"
    )]
    api_keys_table: String,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an ACTIVE project; prints its id on stdout.
    CreateProject {
        /// Human-friendly name.
        #[arg(long)]
        name: String,
        /// The id (default: `proj_` and random hex). An existing id is refused.
        #[arg(long)]
        project_id: Option<String>,
        /// Sessions the project may run at once.
        #[arg(long, default_value_t = 10)]
        concurrency: u64,
        /// Session timeout in seconds when a request names none (60-21600).
        #[arg(long, default_value_t = 3600)]
        default_timeout: u64,
        /// External owner identifier.
        #[arg(long)]
        owner_id: Option<String>,
    },
    /// Create an ACTIVE API key for a project (and optionally more projects, selected per
    /// request with `x-wc-project-id`). Prints the key on stdout — once: only its SHA-256 hash
    /// is stored, so it cannot be shown again.
    CreateKey {
        /// The key's own project (the default when a request selects none).
        #[arg(long)]
        project_id: String,
        /// Further projects the key may use, comma-separated.
        #[arg(long, value_delimiter = ',')]
        project_ids: Vec<String>,
        /// A label for the key.
        #[arg(long)]
        name: Option<String>,
    },
    /// Revoke an API key (status INACTIVE): requests with it are refused with 403.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["key", "hash"])))]
    RevokeKey {
        /// The raw key; `-` reads it from stdin (keeps it out of the shell history).
        #[arg(long)]
        key: Option<String>,
        /// The key's SHA-256 hash (hex), as stored in the table.
        #[arg(long)]
        hash: Option<String>,
    },
}

/// Runs one admin command; the exit status.
async fn admin(tables: AdminTables, command: AdminCommand) -> i32 {
    let sdk = aws::sdk_config().await;
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let projects = DynamoProjects::new(dynamo.clone(), &tables.projects_table);
    let keys = DynamoKeys::new(dynamo, &tables.api_keys_table);
    let now = wallcrawler_contract::time::now_iso8601();
    let result = match command {
        AdminCommand::CreateProject {
            name,
            project_id,
            concurrency,
            default_timeout,
            owner_id,
        } => {
            let new = NewProject {
                name,
                project_id,
                concurrency,
                default_timeout,
                owner_id,
            };
            admin::create_project(&projects, new, &now).await.map(|p| {
                tracing::info!(project.id = %p.project_id, "project created");
                println!("{}", p.project_id);
            })
        }
        AdminCommand::CreateKey {
            project_id,
            project_ids,
            name,
        } => {
            let new = admin::NewKey {
                project_id: &project_id,
                extra: &project_ids,
                name: name.as_deref(),
            };
            admin::create_key(&keys, &projects, new, &now)
                .await
                .map(|(raw, rec)| {
                    tracing::info!(
                        key.id = rec.key_id.as_deref().unwrap_or(""),
                        projects = %rec.project_ids.join(","),
                        "API key created; it is printed once and stored only as a hash"
                    );
                    println!("{raw}");
                })
        }
        AdminCommand::RevokeKey { key, hash } => revoke(&keys, key, hash).await,
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{}", wallcrawler_control_plane::error::chain(&e));
            1
        }
    }
}

/// `revoke-key`: the key from `--key` (or its hash from `--hash`) made INACTIVE.
async fn revoke(
    keys: &DynamoKeys,
    key: Option<String>,
    hash: Option<String>,
) -> Result<(), admin::AdminError> {
    let h = match (key, hash) {
        (Some(k), _) => wallcrawler_control_plane::model::hash_api_key(&read_key(&k)?),
        (None, Some(h)) => admin::parse_hash(&h)?,
        (None, None) => unreachable!("clap requires --key or --hash"),
    };
    admin::revoke_key(keys, &h).await?;
    tracing::info!(key.hash = %&h[..16], "API key revoked (INACTIVE)");
    Ok(())
}

/// `--key`: the key itself, or `-` for one line of stdin.
fn read_key(arg: &str) -> Result<String, admin::AdminError> {
    let key = if arg == "-" {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| admin::AdminError::Invalid(format!("reading the key from stdin: {e}")))?;
        line.trim().to_owned()
    } else {
        arg.trim().to_owned()
    };
    if key.is_empty() {
        return Err(admin::AdminError::Invalid("the key is empty".into()));
    }
    Ok(key)
}

/// Serves the task API on `listen` until a signal; the exit status.
async fn task_api(listen: std::net::SocketAddr) -> i32 {
    let cfg = match aws::Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return 64;
        }
    };
    let sdk = aws::sdk_config().await;
    let identities = match aws::StsIdentities::new(&sdk) {
        Ok(i) => std::sync::Arc::new(i),
        Err(e) => {
            tracing::error!("the task API cannot check identities: {e}");
            return 64;
        }
    };
    let Some(api) = aws::build_task_api(&sdk, &cfg, identities) else {
        tracing::error!(
            "the task API needs TASKS_TABLE_NAME, SESSION_ROLE_ARN, TASK_ROLE_ARN and POOL_QUEUE_URL"
        );
        return 64;
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen on {listen}: {e}");
            return 1;
        }
    };
    let addr = listener.local_addr().map_or(listen, |a| a);
    println!("taskApi: http://{addr}");
    let _ = std::io::stdout().flush();
    tracing::info!(%addr, "the task API is serving");
    let app = aws::task_service::router(api);
    match axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
    {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("the task API failed: {e}");
            1
        }
    }
}

/// The API's settings for `serve`: its arguments, and what it passes on to its controllers
/// from its environment.
fn serve_settings(args: &ServeArgs, managed_proxies: ManagedProxies) -> Settings {
    Settings {
        create_wait: Duration::from_secs(args.create_wait_seconds),
        claim_wait: ClaimWait {
            wait: args.claim_wait_seconds,
            max: args.claim_wait_max_seconds,
        },
        pool_share: (args.pool_share > 0).then_some(args.pool_share),
        managed_proxies,
        // The MP4s of recordings, built by this process with the controllers' ffmpeg.
        mp4: wallcrawler_control_plane::app::Mp4Build::Background(
            std::env::var_os("FFMPEG_PATH").map_or_else(|| "ffmpeg".into(), Into::into),
        ),
        // The controllers' browser (CHROME_PATH, passed on to them): a headless shell loads no
        // extension, so a create naming one is refused here rather than failed at its start.
        no_extensions: std::env::var_os("CHROME_PATH")
            .and_then(|p| wallcrawler_local::browser::no_extensions(std::path::Path::new(&p))),
        ..Settings::default()
    }
}

/// Runs the local platform until a signal; the exit status.
async fn serve(args: ServeArgs) -> i32 {
    if args.claim_wait_seconds > args.claim_wait_max_seconds {
        tracing::error!("CLAIM_WAIT_SECONDS must not be more than CLAIM_WAIT_MAX_SECONDS");
        return 64;
    }
    let managed_proxies = match args
        .managed_proxies
        .as_deref()
        .map(ManagedProxies::read_file)
    {
        None => ManagedProxies::default(),
        Some(Ok(p)) => {
            tracing::info!(pools = %p.summary(), "managed proxy pools");
            p
        }
        Some(Err(e)) => {
            let e = wallcrawler_control_plane::error::chain(&e);
            tracing::error!("--managed-proxies (MANAGED_PROXIES_FILE): {e}");
            return 64;
        }
    };
    let settings = serve_settings(&args, managed_proxies);
    let connect = if args.direct {
        Connect::Direct
    } else {
        Connect::Gateway { tls: args.tls }
    };
    let bound = LocalServer::bind(args.port, &args.data_dir, settings, args.pool, connect).await;
    let server = match bound {
        Ok(s) => s
            .sweep_every(Duration::from_secs(args.sweep_interval_seconds))
            .retention_days(args.records_retention_days),
        Err(e) => {
            tracing::error!("could not start: {e:#}");
            return 1;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "baseURL: http://{}", server.addr);
    let _ = writeln!(out, "apiKey: {}", server.identity.api_key);
    let _ = writeln!(out, "projectId: {}", server.identity.project_id);
    if let Some(g) = server.gateway_url() {
        let _ = writeln!(out, "gateway: {g}");
    }
    if let Some(ca) = server.ca_cert() {
        let _ = writeln!(out, "caCert: {}", ca.display());
    }
    let _ = out.flush();
    drop(out);
    match server.run(shutdown_signal()).await {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("server failed: {e:#}");
            1
        }
    }
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    // LOG_FORMAT=json: JSON lines (the task API service on ECS, as the controller's).
    match std::env::var("LOG_FORMAT").as_deref() {
        Ok("json") => logs.json().with_ansi(false).init(),
        _ => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let code = rt.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::TaskApi { listen } => task_api(listen).await,
            Command::Admin { tables, command } => admin(tables, command).await,
        }
    });
    std::process::exit(code);
}
