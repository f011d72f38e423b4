//! `wallcrawler-control-plane`: the local platform (`serve`) and administration of projects and
//! API keys (`admin`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use wallcrawler_control_plane::app::Settings;
use wallcrawler_control_plane::serve::{LocalServer, shutdown_signal};

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
    /// processes, data in a directory. Prints `baseURL:`, `apiKey:` and `projectId:` lines.
    Serve {
        /// Port on 127.0.0.1; 0 = any free port.
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Where projects, keys, sessions and context archives are kept.
        #[arg(long, default_value = ".wallcrawler")]
        data_dir: PathBuf,
        /// Seconds `POST /v1/sessions` waits for READY before answering PENDING.
        #[arg(long, env = "CREATE_WAIT_SECONDS", default_value_t = 25)]
        create_wait_seconds: u64,
    },
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let code = rt.block_on(async {
        match cli.command {
            Command::Serve {
                port,
                data_dir,
                create_wait_seconds,
            } => {
                let settings = Settings {
                    create_wait: Duration::from_secs(create_wait_seconds),
                    ..Settings::default()
                };
                let server = match LocalServer::bind(port, &data_dir, settings).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("could not start: {e:#}");
                        return 1;
                    }
                };
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "baseURL: http://{}", server.addr);
                let _ = writeln!(out, "apiKey: {}", server.identity.api_key);
                let _ = writeln!(out, "projectId: {}", server.identity.project_id);
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
        }
    });
    std::process::exit(code);
}
