//! The command line: `token`, `--help`, configuration errors (exit 64, every problem listed).

use std::process::Command;

use wallcrawler_contract::token::{Validation, validate};

use crate::support::{KEY, bin, now, private_key_file};

fn run(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(args)
        .env_remove("WALLCRAWLER_JWT_SIGNING_KEY")
        .env_remove("WALLCRAWLER_JWT_PRIVATE_KEY_FILE")
        .env_remove("SESSION_ID");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn token_prints_one_valid_token_line() {
    let out = run(
        &[
            "token",
            "--session-id",
            "sess_x",
            "--project-id",
            "proj_y",
            "--ttl",
            "120",
        ],
        &[("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", private_key_file())],
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.ends_with('\n') && stdout.lines().count() == 1,
        "{stdout:?}"
    );
    let t = stdout.trim_end();
    let v = Validation {
        session_id: "sess_x",
        project_id: Some("proj_y"),
        leeway_seconds: 0,
        now: now(),
    };
    let ok = validate(t, &[wallcrawler_testkit::keys::public_key(KEY)], &v).unwrap();
    assert!(ok.exp <= (now() + 121) as f64 && ok.exp >= (now() + 100) as f64);
}

#[test]
fn token_without_a_key_is_a_configuration_error() {
    let out = run(&["token", "--session-id", "s"], &[]);
    assert_eq!(out.status.code(), Some(64));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("WALLCRAWLER_JWT_PRIVATE_KEY_FILE is required")
    );
    // The HS256 key of before is refused, naming the private key file.
    let out = run(
        &["token", "--session-id", "s"],
        &[("WALLCRAWLER_JWT_SIGNING_KEY", "hunter2")],
    );
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WALLCRAWLER_JWT_SIGNING_KEY is no longer read")
            && err.contains("WALLCRAWLER_JWT_PRIVATE_KEY_FILE")
            && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn run_lists_every_configuration_problem_and_exits_64() {
    let out = run(
        &["run"],
        &[
            ("CDP_PROXY_PORT", "70000"),
            ("CONTEXT_ID", "ctx_1"),
            ("LOG_FORMAT", "yaml"),
        ],
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "SESSION_ID is required",
        "a public key is required",
        "CDP_PROXY_PORT",
        "CONTEXT_S3_KEY",
        "LOG_FORMAT",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
    assert!(out.stdout.is_empty());
}

/// The task's identity never goes to a task API in clear, nor to one a local controller has
/// no use for: refused at start, before any AWS client or Chrome.
#[test]
fn a_task_api_in_clear_or_off_aws_is_refused_at_start() {
    let out = run(
        &["run"],
        &[
            ("SESSION_ID", "sess_1"),
            ("SESSIONS_DIR", "/nonexistent"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", crate::support::public_key()),
            ("TASK_API_URL", "http://192.0.2.1/prod"),
        ],
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "TASK_API_URL must be an https:// URL (http:// only to a loopback address",
        "TASK_API_URL is for a task on AWS",
        "TASK_API_URL needs ECS_CONTAINER_METADATA_URI_V4",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
}

#[test]
fn an_invalid_cdp_keepalive_is_a_configuration_error() {
    for (value, says) in [
        ("soon", "CDP_KEEPALIVE_SECONDS must be a whole number"),
        ("86400", "CDP_KEEPALIVE_SECONDS must be between 0 and 3600"),
    ] {
        let out = run(
            &[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
            ],
            &[
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", crate::support::public_key()),
                ("CDP_KEEPALIVE_SECONDS", value),
            ],
        );
        assert_eq!(out.status.code(), Some(64), "{value}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{value}: {err}");
    }
}

#[test]
fn unknown_flags_exit_64() {
    let out = run(&["local", "--no-such-flag"], &[]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn help_documents_every_variable() {
    let out = run(&["run", "--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for var in [
        "SESSION_ID",
        "PROJECT_ID",
        "SESSIONS_TABLE_NAME",
        "SESSIONS_DIR",
        "CONTEXT_ID",
        "CONTEXTS_BUCKET_NAME",
        "CONTEXT_S3_KEY",
        "CONTEXTS_DIR",
        "CONTEXT_PERSIST",
        "FILES_BUCKET_NAME",
        "FILES_DIR",
        "CDP_PROXY_PORT",
        "CDP_DISCONNECT_TIMEOUT",
        "CDP_DISCONNECT_GRACE",
        "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
        "WALLCRAWLER_JWT_PUBLIC_KEY",
        "JWT_LEEWAY_SECONDS",
        "CDP_KEEPALIVE_SECONDS",
        "CHROME_PATH",
        "CHROME_DEBUG_PORT",
        "PUBLIC_IP",
        "KEEP_ALIVE",
        "SESSION_EXPIRES_AT",
        "PROFILE_MAX_BYTES",
        "PROFILE_MAX_ENTRIES",
        "SHUTDOWN_BUDGET_SECONDS",
        "ITEM_WATCH_SECONDS",
        "MAX_CONNECTIONS",
        "MAX_PENDING_CONNECTIONS",
        "MAX_PENDING_PER_ADDRESS",
        "PENDING_MIN_AGE_MS",
        "PROXY_HEADER_TIMEOUT_SECONDS",
        "METRICS_ADDR",
        "LOG_FORMAT",
        "POOL_QUEUE_URL",
        "POOL_QUEUE_DIR",
        "POOL_IDLE_LIFETIME_SECONDS",
        "POOL_CLAIM_VISIBILITY_SECONDS",
        "POOL_TASK_NAME",
        "EXIT_WITH_PARENT",
        "TASK_API_URL",
        "LIVE_VIEW_GRANT",
    ] {
        assert!(help.contains(var), "{var} not in run --help");
    }
    let top = String::from_utf8(run(&["--help"], &[]).stdout).unwrap();
    for sub in ["local", "run", "proxy", "gateway", "token"] {
        assert!(top.contains(sub), "{sub} not in --help");
    }
}

#[test]
fn gateway_help_documents_every_variable_and_its_errors_exit_64() {
    let out = run(&["gateway", "--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for var in [
        "GATEWAY_LISTEN",
        "SESSIONS_TABLE_NAME",
        "SESSIONS_DIR",
        "WALLCRAWLER_JWT_PUBLIC_KEY",
        "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
        "JWT_LEEWAY_SECONDS",
        "GATEWAY_HOLD_SECONDS",
        "GATEWAY_MAX_HELD",
        "GATEWAY_MAX_HELD_PER_SESSION",
        "GATEWAY_LOOKUP_TTL_MS",
        "EXIT_WITH_PARENT",
        "MAX_CONNECTIONS",
        "MAX_PENDING_CONNECTIONS",
        "MAX_PENDING_PER_ADDRESS",
        "PROXY_HEADER_TIMEOUT_SECONDS",
        "METRICS_ADDR",
        "LOG_FORMAT",
    ] {
        assert!(help.contains(var), "{var} not in gateway --help");
    }
    let out = run(
        &["gateway"],
        &[
            ("GATEWAY_LISTEN", "nowhere"),
            ("GATEWAY_HOLD_SECONDS", "0"),
            ("SESSIONS_DIR", "/tmp/x"),
            ("SESSIONS_TABLE_NAME", "t"),
        ],
    );
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "GATEWAY_LISTEN must be an address",
        "GATEWAY_HOLD_SECONDS must be between 1 and 3600",
        "set SESSIONS_TABLE_NAME or SESSIONS_DIR, not both",
        "a public key is required",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
    assert!(out.stdout.is_empty());
}
