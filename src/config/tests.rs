use std::path::PathBuf;
use std::time::Duration;

use wallcrawler_contract::VerifyingKey;

use super::*;
use crate::edge::{self, Limits};
use crate::gateway;
use crate::netns::ChromeNetwork;

/// An Ed25519 public key, SPKI PEM (`openssl pkey -pubout`).
const PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEA9wFNLln1FAfDioMFnpReLaKEhyk0em6z3gbXQRbFQkQ=
-----END PUBLIC KEY-----
";

/// Asserts that `e` lists every one of `needles` (each a part of one problem's line).
fn assert_lists(e: &ConfigErrors, needles: &[&str]) {
    let text = e.to_string();
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
}

fn map(pairs: &[(&'static str, &str)]) -> Settings {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

#[test]
fn the_proxy_listen_address_is_configurable() {
    let base = [
        ("SESSION_ID", "sess_1"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ];
    let mut pairs = base.to_vec();
    pairs.push(("CDP_PROXY_HOST", "127.0.0.1"));
    let c = RunConfig::from_settings(&map(&pairs)).unwrap();
    assert_eq!(c.proxy_host, std::net::IpAddr::from([127, 0, 0, 1]));
    let mut pairs = base.to_vec();
    pairs.push(("CDP_PROXY_HOST", "localhost"));
    let e = RunConfig::from_settings(&map(&pairs))
        .unwrap_err()
        .to_string();
    assert!(e.contains("CDP_PROXY_HOST must be an IP address"), "{e}");
}

#[test]
fn run_defaults() {
    let c = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "sess_1"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ]))
    .unwrap();
    assert_eq!(c.proxy_port, 9223);
    assert_eq!(c.proxy_host, std::net::IpAddr::from([0, 0, 0, 0]));
    assert_eq!(c.chrome.debug_port, 9222);
    assert_eq!(c.disconnect_timeout, Duration::from_secs(120));
    assert_eq!(c.disconnect_grace, Duration::from_secs(10));
    assert_eq!(c.auth.leeway_seconds, 30);
    assert_eq!(c.tuning.max_connections, edge::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(c.tuning.max_pending, 256);
    assert_eq!(c.tuning.max_pending_per_address, 32);
    assert_eq!(c.tuning.pending_min_age, Duration::from_millis(500));
    assert_eq!(c.tuning.header_timeout, Duration::from_secs(3));
    assert_eq!(c.tuning.keepalive, Some(Duration::from_secs(60)));
    assert_eq!(
        c.tuning.metrics_addr,
        Some("127.0.0.1:9224".parse().unwrap())
    );
    assert_eq!(c.tuning.log_format, LogFormat::Json);
    assert_eq!(c.shutdown_budget, Duration::from_secs(25));
    assert_eq!(c.item_watch, Duration::from_secs(5));
    assert_eq!(c.profile_max_bytes, 2_147_483_648);
    assert_eq!(c.profile_max_entries, 100_000);
    assert_eq!(c.context, ContextSource::None);
    assert!(!c.keep_alive && !c.context_persist);
    assert_eq!(
        c.recording,
        RecordingSettings {
            max_bytes: 1 << 30,
            fps: 10,
            ffmpeg: "ffmpeg".into(),
        }
    );
}

#[test]
fn recording_settings_are_read_and_bounded() {
    let c = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "sess_1"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("RECORDING_MAX_BYTES", "1000"),
        ("RECORDING_FPS", "30"),
        ("FFMPEG_PATH", "/opt/bin/ffmpeg"),
    ]))
    .unwrap();
    assert_eq!(c.recording.max_bytes, 1000);
    assert_eq!(c.recording.fps, 30);
    assert_eq!(
        c.recording.ffmpeg,
        std::path::PathBuf::from("/opt/bin/ffmpeg")
    );
    for (name, bad) in [
        ("RECORDING_FPS", "31"),
        ("RECORDING_FPS", "0"),
        ("RECORDING_MAX_BYTES", "0"),
    ] {
        let e = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            (name, bad),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(name), "{name}={bad}: {e}");
    }
}

#[test]
fn disconnect_grace_is_between_one_second_and_an_hour() {
    let with = |grace: &str| {
        RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("CDP_DISCONNECT_GRACE", grace),
        ]))
    };
    assert_eq!(with("1").unwrap().disconnect_grace, Duration::from_secs(1));
    assert_eq!(
        with("3600").unwrap().disconnect_grace,
        Duration::from_secs(3600)
    );
    for bad in ["0", "3601"] {
        assert_eq!(
            with(bad).unwrap_err().0,
            vec![format!(
                "CDP_DISCONNECT_GRACE must be between 1 and 3600, got {bad}"
            )]
        );
    }
}

#[test]
fn chrome_user_is_off_by_default_and_checked() {
    fn with(user: &'static str) -> Result<RunConfig, ConfigErrors> {
        RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("CHROME_USER", user),
        ]))
    }
    assert_eq!(with("").unwrap().chrome.user, None);
    let u = with("10001:10002").unwrap().chrome.user.unwrap();
    assert_eq!((u.uid.as_raw(), u.gid.as_raw()), (10001, 10002));
    assert_eq!(
        with("0:0").unwrap_err().0,
        vec!["CHROME_USER must not be root (uid 0)".to_owned()]
    );
    assert_eq!(
        with("nosuchuser-x").unwrap_err().0,
        vec![
            "CHROME_USER must be uid:gid or a user name known to this system, got \"nosuchuser-x\""
                .to_owned()
        ]
    );
}

#[test]
fn ad_block_lists_default_to_debians_and_name_at_least_one_file() {
    use crate::chrome::egress::AdLists;
    fn with(lists: &'static str) -> Result<RunConfig, ConfigErrors> {
        RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("AD_BLOCK_LISTS", lists),
        ]))
    }
    assert_eq!(with("").unwrap().chrome.ad_block_lists, AdLists::default());
    assert_eq!(
        with("/a.txt,/b.txt").unwrap().chrome.ad_block_lists,
        "/a.txt,/b.txt".parse::<AdLists>().unwrap()
    );
    assert_eq!(
        with(",").unwrap_err().0,
        vec![
            "AD_BLOCK_LISTS: name at least one filter list file (comma-separated paths)".to_owned()
        ]
    );
    let local = LocalConfig::from_args(&LocalArgs {
        ad_block_lists: Some("/a.txt".into()),
        ..LocalArgs::default()
    })
    .unwrap();
    assert_eq!(
        local.chrome.ad_block_lists.paths(),
        [PathBuf::from("/a.txt")]
    );
}

#[test]
fn chrome_network_is_decided_at_start_unless_set_and_checked() {
    fn with(network: &'static str) -> Result<RunConfig, ConfigErrors> {
        RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("CHROME_NETWORK", network),
        ]))
    }
    assert_eq!(with("").unwrap().chrome.network, None);
    assert_eq!(
        with("private").unwrap().chrome.network,
        Some(ChromeNetwork::Private)
    );
    assert_eq!(
        with("shared").unwrap().chrome.network,
        Some(ChromeNetwork::Shared)
    );
    assert_eq!(
        with("host").unwrap_err().0,
        vec!["CHROME_NETWORK must be private or shared, got \"host\"".to_owned()]
    );
    let local = LocalConfig::from_args(&LocalArgs {
        chrome_network: Some("shared".into()),
        ..LocalArgs::default()
    })
    .unwrap();
    assert_eq!(local.chrome.network, Some(ChromeNetwork::Shared));
    use clap::CommandFactory;
    let cli = Cli::command();
    for mode in ["run", "local"] {
        let sub = cli.find_subcommand(mode).unwrap();
        let a = sub
            .get_arguments()
            .find(|a| a.get_id() == "chrome_network")
            .unwrap();
        assert_eq!(a.get_long(), Some("chrome-network"), "{mode}");
        assert!(a.get_help().unwrap().to_string().contains("CAP_SYS_ADMIN"));
    }
}

#[test]
fn background_nice_is_off_by_default_and_at_most_19() {
    fn with(nice: &[(&'static str, &'static str)]) -> Result<RunConfig, ConfigErrors> {
        let mut v = vec![
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        v.extend_from_slice(nice);
        RunConfig::from_settings(&map(&v))
    }
    assert_eq!(with(&[]).unwrap().background_nice, None);
    assert_eq!(
        with(&[("BACKGROUND_NICE", "0")]).unwrap().background_nice,
        None
    );
    assert_eq!(
        with(&[("BACKGROUND_NICE", "19")]).unwrap().background_nice,
        Some(19)
    );
    assert_eq!(
        with(&[("BACKGROUND_NICE", "20")]).unwrap_err().0,
        vec!["BACKGROUND_NICE must be between 0 and 19, got 20".to_owned()]
    );
    assert_eq!(
        with(&[("BACKGROUND_NICE", "-5")]).unwrap_err().0,
        vec![r#"BACKGROUND_NICE must be a whole number, got "-5""#.to_owned()]
    );
}

#[test]
fn the_pool_metric_is_both_names_or_neither() {
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![
            ("POOL_QUEUE_DIR", "/q"),
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        v.extend_from_slice(extra);
        RunConfig::from_settings(&map(&v)).map(|c| c.pool.unwrap().metric)
    };
    assert_eq!(with(&[]).unwrap(), None);
    assert_eq!(
        with(&[
            ("POOL_METRIC_NAMESPACE", "Wallcrawler"),
            ("POOL_METRIC_POOL", "wc")
        ])
        .unwrap(),
        Some(PoolMetric {
            namespace: "Wallcrawler".into(),
            pool: "wc".into(),
            period: Duration::from_secs(10),
        })
    );
    assert_lists(
        &with(&[("POOL_METRIC_NAMESPACE", "Wallcrawler")]).unwrap_err(),
        &["POOL_METRIC_NAMESPACE and POOL_METRIC_POOL go together"],
    );
    assert_lists(
        &with(&[
            ("POOL_METRIC_NAMESPACE", "AWS/ECS"),
            ("POOL_METRIC_POOL", "w\u{7}c"),
            ("POOL_METRIC_PERIOD_SECONDS", "7"),
        ])
        .unwrap_err(),
        &[
            "POOL_METRIC_PERIOD_SECONDS must be one of 1, 5, 10, 30, 60",
            "POOL_METRIC_NAMESPACE must be 1-255 printable ASCII characters, not under AWS/",
            "POOL_METRIC_POOL must be 1-255 printable ASCII characters",
        ],
    );
}

#[test]
fn pool_mode_takes_the_session_from_claims() {
    let c = RunConfig::from_settings(&map(&[
        ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
        ("SESSIONS_TABLE_NAME", "sessions"),
        ("CONTEXTS_BUCKET_NAME", "contexts"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("POOL_TASK_NAME", "pool-1"),
    ]))
    .unwrap();
    let pool = c.pool.unwrap();
    assert_eq!(
        pool.queue,
        PoolQueue::Sqs("http://127.0.0.1:1/queue/claims".into())
    );
    assert_eq!(pool.archives, ArchivePlace::Bucket("contexts".into()));
    assert_eq!(pool.idle_lifetime, Duration::from_secs(3600));
    assert_eq!(pool.visibility, Duration::from_secs(60));
    assert_eq!(pool.task_name, "pool-1");
    assert_eq!(c.context, ContextSource::None);
    // Without a name, a unique one: never one every Fargate task shares (pid 1).
    let unnamed = || {
        let c = RunConfig::from_settings(&map(&[
            ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ]))
        .unwrap();
        c.pool.unwrap().task_name
    };
    let (a, b) = (unnamed(), unnamed());
    assert!(a.starts_with("pool-") && a.len() > 20, "{a}");
    assert_ne!(a, b);
    assert_eq!(c.auth.session_id, "");

    let e = RunConfig::from_settings(&map(&[
        ("POOL_QUEUE_DIR", "/q"),
        ("SESSION_ID", "sess_1"),
        ("CONTEXT_ID", "ctx_1"),
        ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("POOL_TASK_NAME", "../x"),
    ]))
    .unwrap_err();
    assert_lists(
        &e,
        &[
            "SESSION_ID comes from each claim",
            "CONTEXT_ID comes from each claim",
            "CONTEXT_S3_KEY comes from each claim",
            "POOL_TASK_NAME must be",
            "pool mode needs the session item",
        ],
    );
    let both = RunConfig::from_settings(&map(&[
        ("POOL_QUEUE_DIR", "/q"),
        ("POOL_QUEUE_URL", "http://127.0.0.1:1/q"),
        ("SESSIONS_DIR", "/s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ]))
    .unwrap_err();
    assert!(both.0.iter().any(|m| m.contains("not both")), "{both:?}");
}

#[test]
fn the_task_api_address_is_a_bare_host_for_the_task_api_only() {
    let pool = [
        ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
        ("SESSIONS_TABLE_NAME", "sessions"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
    ];
    let with = |url: Option<&'static str>, address: &'static str| {
        let mut pairs = pool.to_vec();
        pairs.extend(url.map(|u| ("TASK_API_URL", u)));
        pairs.push(("TASK_API_ADDRESS", address));
        RunConfig::from_settings(&map(&pairs))
    };
    let lb = "internal-wc-tasks-1234.us-east-1.elb.amazonaws.com";
    for (url, address) in [
        ("https://connect.example.com", lb),
        ("https://connect.example.com", "10.0.3.7"),
        ("http://127.0.0.1:8080", "127.0.0.1"),
        ("http://127.0.0.1:8080", "::1"),
    ] {
        let c = with(Some(url), address).unwrap();
        assert_eq!(c.task_api_address.as_deref(), Some(address), "{address}");
    }
    let e = with(None, lb).unwrap_err();
    assert_eq!(
        e.0,
        vec!["TASK_API_ADDRESS is only for TASK_API_URL".to_owned()]
    );
    let bare = "TASK_API_ADDRESS must be a DNS name or an IP address, without scheme, port \
                    or path (the port is TASK_API_URL's)";
    for address in [
        "https://lb.example.com",
        "lb.example.com:443",
        "lb.example.com/v1",
        "[::1]",
        "-lb.example.com",
        "user@lb",
    ] {
        let e = with(Some("https://connect.example.com"), address).unwrap_err();
        assert_eq!(e.0, vec![bare.to_owned()], "{address}");
    }
    let clear = "TASK_API_ADDRESS must be a loopback address with an http:// TASK_API_URL: \
                     the task's identity must not cross a network in clear";
    for address in ["10.0.3.7", "localhost", lb] {
        let e = with(Some("http://127.0.0.1:8080"), address).unwrap_err();
        assert_eq!(e.0, vec![clear.to_owned()], "{address}");
    }
}

#[test]
fn the_task_api_is_for_a_task_on_aws_and_never_in_clear() {
    let pool = [
        ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
        ("SESSIONS_TABLE_NAME", "sessions"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
    ];
    let cold = [
        ("SESSION_ID", "sess_1"),
        ("SESSIONS_TABLE_NAME", "sessions"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
    ];
    let with = |base: &[(&'static str, &'static str)], url: &'static str| {
        let mut pairs = base.to_vec();
        pairs.push(("TASK_API_URL", url));
        RunConfig::from_settings(&map(&pairs))
    };
    for (base, url, want) in [
        (
            &pool,
            "https://api.example.com/v1/",
            "https://api.example.com/v1",
        ),
        (&cold, "https://api.example.com", "https://api.example.com"),
        (
            &pool,
            "http://127.0.0.1:8080/prod",
            "http://127.0.0.1:8080/prod",
        ),
        (&cold, "http://[::1]:8080", "http://[::1]:8080"),
    ] {
        let c = with(base, url).unwrap();
        assert_eq!(c.task_api.as_deref(), Some(want), "{url}");
    }
    assert_eq!(
        RunConfig::from_settings(&map(&pool)).unwrap().task_api,
        None
    );

    let clear = "TASK_API_URL must be an https:// URL (http:// only to a loopback address \
                     such as 127.0.0.1): the task's identity must not cross a network in clear";
    for url in [
        "http://api.example.com",
        "http://10.0.0.1:8080",
        "http://localhost:8080",
        "ftp://127.0.0.1",
        "https://api.example.com/?x=1",
        "https://user@api.example.com",
        "api.example.com",
    ] {
        let e = with(&pool, url).unwrap_err();
        assert_eq!(e.0, vec![clear.to_owned()], "{url}");
    }

    let not_aws = "TASK_API_URL is for a task on AWS: a pool with POOL_QUEUE_URL, or one \
                       session's task with SESSIONS_TABLE_NAME";
    let dir_pool = [
        ("POOL_QUEUE_DIR", "/q"),
        ("SESSIONS_DIR", "/s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
    ];
    let no_table = [
        ("SESSION_ID", "sess_1"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
    ];
    for base in [&dir_pool[..], &no_table[..]] {
        let e = with(base, "https://api.example.com").unwrap_err();
        assert_eq!(e.0, vec![not_aws.to_owned()]);
    }
    let e = with(&pool[..3], "https://api.example.com").unwrap_err();
    assert_eq!(
        e.0,
        vec![
            "TASK_API_URL needs ECS_CONTAINER_METADATA_URI_V4 (set by ECS): the task API \
                 hands a session to the task its ARN names"
                .to_owned()
        ]
    );
}

#[test]
fn a_live_view_grant_is_read_for_one_sessions_controller_only_and_never_quoted() {
    let one = [
        ("SESSION_ID", "sess_1"),
        ("SESSIONS_DIR", "/s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ];
    let with = |base: &[(&'static str, &str)], grant: &str| {
        let mut pairs = base.to_vec();
        pairs.push(("LIVE_VIEW_GRANT", grant));
        RunConfig::from_settings(&map(&pairs))
    };
    let c = with(
        &one,
        r#"{"credential":"c.r.e","expiresAt":9,"base":"http://g:1"}"#,
    )
    .unwrap();
    let lv = c.live_view.expect("the grant");
    assert_eq!(lv.url("http://own:2"), "http://g:1/viewer?t=c.r.e");
    assert_eq!(lv.expires_at, 9);
    let e = with(&one, "secret-not-json").unwrap_err();
    assert_eq!(
        e.0,
        vec![r#"LIVE_VIEW_GRANT must be JSON {"credential","expiresAt","base"?}"#.to_owned()]
    );
    let pool = [
        ("POOL_QUEUE_DIR", "/q"),
        ("SESSIONS_DIR", "/s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ];
    let e = with(&pool, r#"{"credential":"c","expiresAt":9}"#).unwrap_err();
    assert_eq!(
        e.0,
        vec![
            "LIVE_VIEW_GRANT is for one session's controller off the task API: a pool \
                 controller's comes with its claim, a task's from TASK_API_URL"
                .to_owned()
        ]
    );
}

#[test]
fn every_problem_is_listed() {
    let e = RunConfig::from_settings(&map(&[
        ("CDP_PROXY_PORT", "99999"),
        ("JWT_LEEWAY_SECONDS", "soon"),
        ("CONTEXT_ID", "ctx_1"),
        ("LOG_FORMAT", "xml"),
        ("KEEP_ALIVE", "maybe"),
    ]))
    .unwrap_err();
    assert_lists(
        &e,
        &[
            "SESSION_ID is required",
            "a public key is required",
            "CDP_PROXY_PORT must be between",
            "JWT_LEEWAY_SECONDS must be a whole number",
            "missing CONTEXTS_BUCKET_NAME (or CONTEXTS_DIR), CONTEXT_S3_KEY",
            "LOG_FORMAT must be json or text",
            "KEEP_ALIVE must be true or false",
        ],
    );
    assert_eq!(e.0.len(), 7);
}

#[test]
fn a_task_extension_needs_its_projects_key_and_a_place() {
    let key = format!("extensions/proj_1/{}.zip", "a".repeat(64));
    let base = [
        ("SESSION_ID", "s"),
        ("PROJECT_ID", "proj_1"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ];
    let mut m = map(&base);
    m.insert("EXTENSION_S3_KEY", key.clone());
    m.insert("CONTEXTS_BUCKET_NAME", "b".into());
    let c = RunConfig::from_settings(&m).unwrap();
    assert_eq!(
        c.context,
        ContextSource::None,
        "the bucket alone is no context"
    );
    assert_eq!(
        c.extension,
        Some(ExtensionSource {
            key: key.clone(),
            place: ArchivePlace::Bucket("b".into())
        })
    );
    m.remove("CONTEXTS_BUCKET_NAME");
    let e = RunConfig::from_settings(&m).unwrap_err();
    assert_lists(&e, &["EXTENSION_S3_KEY needs CONTEXTS_BUCKET_NAME"]);
    m.insert("CONTEXTS_DIR", "/d".into());
    m.insert("PROJECT_ID", "proj_2".into());
    let e = RunConfig::from_settings(&m).unwrap_err();
    assert_lists(&e, &["EXTENSION_S3_KEY must be extensions/<PROJECT_ID>"]);
}

#[test]
fn session_files_live_where_named_else_with_the_archives() {
    let base = [("SESSION_ID", "s"), ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC)];
    let files = |more: &[(&'static str, &'static str)]| {
        let mut m = map(&base);
        m.extend(map(more));
        RunConfig::from_settings(&m).map(|c| c.files)
    };
    assert_eq!(files(&[]).unwrap(), ArchivePlace::None);
    assert_eq!(
        files(&[("FILES_DIR", "/d")]).unwrap(),
        ArchivePlace::Directory("/d".into())
    );
    assert_eq!(
        files(&[("FILES_BUCKET_NAME", "b")]).unwrap(),
        ArchivePlace::Bucket("b".into())
    );
    let context = [
        ("CONTEXT_ID", "c"),
        ("CONTEXTS_BUCKET_NAME", "ctx"),
        ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
    ];
    assert_eq!(files(&context).unwrap(), ArchivePlace::Bucket("ctx".into()));
    assert!(
        files(&[("FILES_DIR", "/d"), ("FILES_BUCKET_NAME", "b")])
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
}

#[test]
fn context_modes() {
    let base = [
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:x"),
    ];
    let mut m = map(&base);
    m.extend(map(&[
        ("CONTEXT_ID", "c"),
        ("CONTEXTS_BUCKET_NAME", "b"),
        ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
    ]));
    let c = RunConfig::from_settings(&m).unwrap();
    assert_eq!(c.auth.key, KeyConfig::SecretArn("arn:x".into()));
    assert!(matches!(c.context, ContextSource::Bucket { .. }));
    m.insert("CONTEXTS_DIR", "/tmp".into());
    assert!(
        RunConfig::from_settings(&m)
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
    let mut persist_alone = map(&base);
    persist_alone.insert("CONTEXT_PERSIST", "true".into());
    assert!(RunConfig::from_settings(&persist_alone).is_err());
}

#[test]
fn literal_public_key_wins() {
    let c = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:x"),
    ]))
    .unwrap();
    assert_eq!(
        c.auth.key,
        KeyConfig::Literal(VerifyingKey::from_pem(PUBLIC).unwrap())
    );
}

#[test]
fn the_hs256_settings_and_private_keys_are_refused_naming_the_public_key() {
    // A task definition of before EdDSA tokens: each old setting refused with its successor.
    let e = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_SIGNING_KEY", "hunter2"),
        ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "arn:x"),
    ]))
    .unwrap_err();
    assert_lists(
        &e,
        &[
            "WALLCRAWLER_JWT_SIGNING_KEY is no longer read: tokens are EdDSA (Ed25519); set WALLCRAWLER_JWT_PUBLIC_KEY",
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN is no longer read",
            "set WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
        ],
    );
    assert!(!e.to_string().contains("hunter2"));
    // The old setting is refused even beside a good public key.
    let with_both = map(&[
        ("SESSIONS_DIR", "/d"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("WALLCRAWLER_JWT_SIGNING_KEY", "k"),
    ]);
    assert!(GatewayConfig::from_settings(&with_both).is_err());
    // A private key where the public one goes is not a public key (and is not echoed).
    let private = wallcrawler_testkit::keys::signing_key("k").to_pem();
    let e = GatewayConfig::from_settings(&map(&[
        ("SESSIONS_DIR", "/d"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", private.as_str()),
    ]))
    .unwrap_err();
    assert_lists(
        &e,
        &["WALLCRAWLER_JWT_PUBLIC_KEY: the public key is not an Ed25519 key in SPKI PEM"],
    );
    assert!(!e.to_string().contains(&private[40..80]));
    let e = LocalConfig::from_settings(&map(&[("WALLCRAWLER_JWT_SIGNING_KEY", "k")])).unwrap_err();
    assert_lists(&e, &["set WALLCRAWLER_JWT_PRIVATE_KEY_FILE"]);
}

#[test]
fn cdp_keepalive_is_configurable_off_at_zero_and_checked() {
    let proxy_with = |v: &str| {
        ProxyConfig::from_settings(&map(&[
            ("LISTEN", "127.0.0.1:0"),
            ("UPSTREAM", "127.0.0.1:9222"),
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("CDP_KEEPALIVE_SECONDS", v),
        ]))
    };
    let c = proxy_with("4").unwrap();
    assert_eq!(c.tuning.keepalive, Some(Duration::from_secs(4)));
    assert_eq!(
        Limits::from_tuning(&c.tuning).keepalive,
        Some(Duration::from_secs(4))
    );
    assert_eq!(proxy_with("0").unwrap().tuning.keepalive, None);
    for (bad, says) in [
        ("soon", "CDP_KEEPALIVE_SECONDS must be a whole number"),
        ("-1", "CDP_KEEPALIVE_SECONDS must be a whole number"),
        ("3601", "CDP_KEEPALIVE_SECONDS must be between 0 and 3600"),
    ] {
        let e = proxy_with(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn pending_limits_are_configurable_and_checked() {
    let c = ProxyConfig::from_settings(&map(&[
        ("LISTEN", "127.0.0.1:0"),
        ("UPSTREAM", "127.0.0.1:9222"),
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("MAX_PENDING_CONNECTIONS", "16"),
        ("MAX_PENDING_PER_ADDRESS", "4"),
        ("PENDING_MIN_AGE_MS", "250"),
        ("PROXY_HEADER_TIMEOUT_SECONDS", "2"),
    ]))
    .unwrap();
    assert_eq!(
        (
            c.tuning.max_pending,
            c.tuning.max_pending_per_address,
            c.tuning.pending_min_age,
            c.tuning.header_timeout
        ),
        (16, 4, Duration::from_millis(250), Duration::from_secs(2))
    );
    let e = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("MAX_PENDING_CONNECTIONS", "0"),
        ("MAX_PENDING_PER_ADDRESS", "many"),
        ("PENDING_MIN_AGE_MS", "60001"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("MAX_PENDING_CONNECTIONS must be between 1 and"),
        "{e}"
    );
    assert!(
        e.contains("MAX_PENDING_PER_ADDRESS must be a whole number"),
        "{e}"
    );
    assert!(
        e.contains("PENDING_MIN_AGE_MS must be between 0 and 60000"),
        "{e}"
    );
}

#[test]
fn metrics_can_be_turned_off() {
    let c = RunConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ("METRICS_ADDR", ""),
    ]))
    .unwrap();
    assert_eq!(c.tuning.metrics_addr, None);
}

#[test]
fn viewer_frame_ancestors_default_and_refusal() {
    let c = LocalConfig::from_settings(&Settings::new()).unwrap();
    assert_eq!(c.tuning.viewer_frame_ancestors, "'self'");
    let c = LocalConfig::from_settings(&map(&[(
        "VIEWER_FRAME_ANCESTORS",
        "'self' https://app.example.test",
    )]))
    .unwrap();
    let limits = Limits::from_tuning(&c.tuning);
    assert_eq!(
        limits.viewer_frame_ancestors,
        "'self' https://app.example.test"
    );
    let e = LocalConfig::from_settings(&map(&[("VIEWER_FRAME_ANCESTORS", "'self'; script-src *")]))
        .unwrap_err()
        .to_string();
    assert!(
            e.contains("VIEWER_FRAME_ANCESTORS must be CSP source expressions separated by spaces (no ';' or ',')"),
            "{e}"
        );
}

#[test]
fn local_defaults() {
    let c = LocalConfig::from_settings(&Settings::new()).unwrap();
    assert_eq!((c.port, c.token_ttl, c.chrome.debug_port), (9223, 3600, 0));
    assert_eq!(c.tuning.metrics_addr, None);
    assert_eq!(c.tuning.log_format, LogFormat::Text);
}

#[test]
fn proxy_requires_listen_upstream_and_session() {
    let e = ProxyConfig::from_settings(&map(&[("UPSTREAM", "nohost")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--listen ADDR is required"));
    assert!(e.contains("--upstream must be HOST:PORT"));
    assert!(e.contains("SESSION_ID is required"));
}

#[test]
fn token_needs_a_key() {
    let e = TokenConfig::from_settings(&map(&[("SESSION_ID", "s")])).unwrap_err();
    assert_eq!(
        e.0,
        vec!["WALLCRAWLER_JWT_PRIVATE_KEY_FILE is required to sign a token".to_owned()]
    );
}

#[test]
fn token_lifetimes_stop_at_the_longest_session() {
    // The proxy refuses a token whose exp is further ahead than the longest session.
    let file = wallcrawler_testkit::keys::private_key_file("k");
    let file = file.to_str().unwrap();
    let ok = TokenConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", file),
        ("TOKEN_TTL", "21600"),
    ]))
    .unwrap();
    assert_eq!(ok.ttl, 21_600);
    let e = TokenConfig::from_settings(&map(&[
        ("SESSION_ID", "s"),
        ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", file),
        ("TOKEN_TTL", "21601"),
    ]))
    .unwrap_err();
    assert_eq!(
        e.0,
        vec!["TOKEN_TTL must be between 1 and 21600, got 21601".to_owned()]
    );
    let e = LocalConfig::from_settings(&map(&[("TOKEN_TTL", "86400")])).unwrap_err();
    assert_eq!(
        e.0,
        vec!["TOKEN_TTL must be between 1 and 21600, got 86400".to_owned()]
    );
}

#[test]
fn gateway_defaults_and_every_problem() {
    let c = GatewayConfig::from_settings(&map(&[
        ("SESSIONS_DIR", "/s"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
    ]))
    .unwrap();
    assert_eq!(c.listen, "0.0.0.0:9223".parse().unwrap());
    assert_eq!(c.store, SessionStoreConfig::Directory("/s".into()));
    assert_eq!(c.hold, Duration::from_secs(90));
    assert_eq!(
        (c.max_held, c.max_held_per_session),
        (
            gateway::DEFAULT_MAX_HELD,
            gateway::DEFAULT_MAX_HELD_PER_SESSION
        )
    );
    assert_eq!(c.lookup_ttl, Duration::from_millis(250));
    assert_eq!(c.tuning.metrics_addr, None);
    let e = GatewayConfig::from_settings(&map(&[
        ("GATEWAY_LISTEN", "nowhere"),
        ("GATEWAY_HOLD_SECONDS", "0"),
        ("GATEWAY_MAX_HELD_PER_SESSION", "x"),
    ]))
    .unwrap_err();
    assert_lists(
        &e,
        &[
            "GATEWAY_LISTEN must be an address",
            "set SESSIONS_TABLE_NAME (or SESSIONS_DIR)",
            "a public key is required",
            "GATEWAY_HOLD_SECONDS must be between 1 and 3600",
            "GATEWAY_MAX_HELD_PER_SESSION must be a whole number",
        ],
    );
    assert_eq!(e.0.len(), 5);
}

#[test]
fn cli_is_well_formed() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

/// The help states each default the parser applies (the constants, said once).
#[test]
fn help_states_the_defaults_the_parser_uses() {
    use crate::{edge, gateway};
    use clap::CommandFactory;
    let cli = Cli::command();
    let help = |mode: &str, arg: &str| {
        let sub = cli.find_subcommand(mode).unwrap();
        let a = sub.get_arguments().find(|a| a.get_id() == arg).unwrap();
        a.get_help().unwrap().to_string()
    };
    for (mode, arg, default) in [
        (
            "run",
            "max_connections",
            edge::DEFAULT_MAX_CONNECTIONS as u128,
        ),
        (
            "run",
            "max_pending_connections",
            edge::DEFAULT_MAX_PENDING as u128,
        ),
        (
            "run",
            "max_pending_per_address",
            edge::DEFAULT_MAX_PENDING_PER_ADDRESS as u128,
        ),
        (
            "run",
            "pending_min_age_ms",
            edge::DEFAULT_PENDING_MIN_AGE.as_millis(),
        ),
        (
            "run",
            "header_timeout_seconds",
            edge::DEFAULT_HEADER_TIMEOUT.as_secs().into(),
        ),
        (
            "run",
            "cdp_keepalive_seconds",
            edge::DEFAULT_KEEPALIVE.as_secs().into(),
        ),
        (
            "gateway",
            "gateway_hold_seconds",
            gateway::DEFAULT_HOLD.as_secs().into(),
        ),
        (
            "gateway",
            "gateway_max_held",
            gateway::DEFAULT_MAX_HELD as u128,
        ),
        (
            "gateway",
            "gateway_max_held_per_session",
            gateway::DEFAULT_MAX_HELD_PER_SESSION as u128,
        ),
        (
            "gateway",
            "gateway_lookup_ttl_ms",
            gateway::DEFAULT_LOOKUP_TTL.as_millis(),
        ),
    ] {
        let text = help(mode, arg);
        assert!(
            text.contains(&format!("[default: {default}]")),
            "{mode} {arg}: {text}"
        );
    }
}
