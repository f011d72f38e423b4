//! The outside services `run` needs, built once from one SDK configuration (and, on the task
//! API, the session's credentials).

use std::path::PathBuf;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_config::identity::IdentityCache;
use aws_credential_types::provider::SharedCredentialsProvider;
use wallcrawler_aws::secrets::SecretsManagerKeys;
use wallcrawler_local::claim_queue::DirQueue;

use crate::aws;
use crate::config::{
    ArchivePlace, ContextSource, KeyConfig, PoolConfig, PoolQueue, RunConfig, SessionStoreConfig,
};
use crate::profile::DirectoryArchives;
use crate::session::Deps;
use crate::session_credentials::SessionCredentialsProvider;
use crate::stores::{
    ArchiveStore, ClaimQueue, DirClaims, DirectorySessions, ServedSessions, TaskProtection,
};
use crate::task_api::{ApiClaims, TaskApi, TaskApiError};

/// Why the outside services of `run` could not be set up.
#[derive(Debug, thiserror::Error)]
pub(super) enum DepsError {
    /// The pool's claims directory could not be made ready.
    #[error("the claims directory {} cannot be used", dir.display())]
    ClaimsDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No HTTPS client for the task API (the system's root certificates).
    #[error("the task API's HTTPS client cannot be set up")]
    HttpClient(#[source] std::io::Error),
    /// The task API granted no credentials for the task's session.
    #[error("the task API granted no credentials for the session")]
    Credentials(#[source] TaskApiError),
    /// The startup self-check: the task role's STS session does not name this task.
    #[error("{0}")]
    SelfCheck(String),
}

/// The outside services `c` names, built with one SDK configuration when any is on AWS. On
/// the task API, those of the session (its item, archives, files, claim settling, scale-in
/// protection) sign with the session's credentials; the public key secret and EC2 with the
/// task role's.
pub(super) async fn build(c: &RunConfig) -> Result<Deps, DepsError> {
    let sdk = if needs_aws(c) {
        Some(aws::sdk_config().await)
    } else {
        None
    };
    build_with(c, sdk.as_ref()).await
}

/// [`build`] with `sdk`, the task role's configuration when any service is on AWS.
async fn build_with(c: &RunConfig, sdk: Option<&SdkConfig>) -> Result<Deps, DepsError> {
    let api = match (&c.task_api, sdk) {
        (Some(url), Some(sdk)) => Some(on_task_api(c, url, sdk).await?),
        _ => None,
    };
    let session_sdk = api.as_ref().map(|a| &a.session_sdk).or(sdk);
    let pool = c.pool.as_ref();
    let claims = match (pool, &api) {
        (Some(p), Some(api)) => api.claims(p),
        (Some(p), None) => claims(p, sdk)?,
        (None, _) => None,
    };
    Ok(Deps {
        // The task API's grant, or the one the local platform gave a controller it started.
        live_view: api
            .as_ref()
            .and_then(|a| a.live_view.clone())
            .or_else(|| c.live_view.clone()),
        sessions: sessions(&c.store, session_sdk),
        // A pool's own archive place, when it has one, over the configured context's.
        archives: pool
            .and_then(|p| archives_at(&p.archives, session_sdk))
            .or_else(|| context_archives(&c.context, session_sdk))
            .or_else(|| {
                c.extension
                    .as_ref()
                    .and_then(|x| archives_at(&x.place, session_sdk))
            }),
        secrets: match (&c.auth.key, sdk) {
            (KeyConfig::SecretArn(arn), Some(sdk)) => Some(Arc::new(aws::SecretsManagerSecret(
                SecretsManagerKeys::public(sdk, arn),
            ))),
            _ => None,
        },
        network: match (needs_ec2(c), sdk) {
            (true, Some(sdk)) => Some(Arc::new(aws::Ec2Network {
                client: aws_sdk_ec2::Client::new(sdk),
            })),
            _ => None,
        },
        claims,
        files: archives_at(&c.files, session_sdk),
        protection: api.map(|a| {
            Arc::new(aws::EcsProtection {
                client: aws_sdk_ecs::Client::new(&a.session_sdk),
            }) as Arc<dyn TaskProtection>
        }),
    })
}

/// A task on the task API: the API, and the SDK configuration of its session's services.
struct OnTaskApi {
    api: Arc<TaskApi>,
    credentials: SessionCredentialsProvider,
    /// The task's configuration with the session's credentials (no SDK identity cache: the
    /// provider is the cache and refreshes them).
    session_sdk: SdkConfig,
    /// A cold task's live view, from its first credentials' grant.
    live_view: Option<wallcrawler_contract::task_api::LiveViewGrant>,
}

impl OnTaskApi {
    /// The pool's claims from the API, settled on its SQS queue.
    fn claims(&self, p: &PoolConfig) -> Option<Arc<dyn ClaimQueue>> {
        let PoolQueue::Sqs(url) = &p.queue else {
            return None;
        };
        let queue = aws::SqsClaims {
            client: aws_sdk_sqs::Client::new(&self.session_sdk),
            queue_url: url.clone(),
            visibility: p.visibility,
        };
        Some(Arc::new(ApiClaims::new(
            self.api.clone(),
            self.credentials.clone(),
            queue,
        )))
    }
}

/// The task API at `url`, called as the task `sdk`'s role names; a single session's task
/// has its session's credentials from it before anything else.
async fn on_task_api(c: &RunConfig, url: &str, sdk: &SdkConfig) -> Result<OnTaskApi, DepsError> {
    if let Some(uri) = c.metadata_uri.as_deref() {
        self_check(uri, sdk).await?;
    }
    let address = c.task_api_address.as_deref();
    let api = TaskApi::new(url.to_owned(), address, sdk.clone()).map_err(DepsError::HttpClient)?;
    let api = Arc::new(api);
    let credentials = SessionCredentialsProvider::new(api.clone());
    let session_sdk = sdk
        .to_builder()
        .identity_cache(IdentityCache::no_cache())
        .credentials_provider(SharedCredentialsProvider::new(credentials.clone()))
        .build();
    let live_view = if c.pool.is_none() {
        api.credentials_at_start(&c.auth.session_id, &credentials)
            .await
            .map_err(DepsError::Credentials)?
    } else {
        None
    };
    Ok(OnTaskApi {
        api,
        credentials,
        session_sdk,
        live_view,
    })
}

/// The task API knows a task by the name of its task role's STS session, which ECS sets to
/// the task's id (aws/amazon-ecs-agent#3498, not a documented promise): checked at start, so
/// that a platform where it does not hold says so once, plainly, instead of every claim
/// being refused. The caller ARN comes from STS (the task's own signed `GetCallerIdentity`),
/// the task ARN from the task metadata.
async fn self_check(metadata_uri: &str, sdk: &SdkConfig) -> Result<(), DepsError> {
    use wallcrawler_aws::task_identity::{IdentityError, Verifier, sign};
    let fail = |why: String| DepsError::SelfCheck(format!("startup self-check failed: {why}"));
    use backon::Retryable as _;
    let task_arn = crate::public_ip::task_metadata_retried(metadata_uri)
        .await
        .and_then(|m| m.task_arn)
        .ok_or_else(|| fail("the ECS task metadata names no task ARN".into()))?;
    let verifier = Verifier::new(sdk).map_err(|e| fail(e.to_string()))?;
    // STS unreachable or throttled is asked again for a while; a refusal is final.
    let caller = (|| async { verifier.caller(&sign(sdk).await?).await })
        .retry(wallcrawler_contract::retry::policy(SELF_CHECK_WITHIN))
        .sleep(tokio::time::sleep)
        .when(|e| matches!(e, IdentityError::Unavailable(_)))
        .await
        .map_err(|e| fail(format!("STS did not say who this task is: {e}")))?;
    session_names_task(&caller, &task_arn).map_err(fail)
}

/// How long the self-check asks STS again while it cannot be reached.
const SELF_CHECK_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether the STS caller `caller_arn` is a role session named by the id of `task_arn`
/// (`arn:…:ecs:<region>:<account>:task/<cluster>/<id>`); else what is wrong, with the two
/// names (neither is a secret).
fn session_names_task(caller_arn: &str, task_arn: &str) -> Result<(), String> {
    use wallcrawler_contract::task_api::CallerTask;
    let id = task_arn
        .split_once(":task/")
        .and_then(|(_, rest)| rest.rsplit('/').next())
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("the task metadata's task ARN {task_arn:?} names no task id"))?;
    let Some(caller) = CallerTask::from_arn(caller_arn) else {
        return Err(format!(
            "STS names this task's caller {caller_arn:?}, not a session of its task role: \
             the task API cannot tell which task it is"
        ));
    };
    if caller.task_id != id {
        return Err(format!(
            "the task role's session is named {:?}, not this task's id {id:?}: the task API \
             takes the session name for the task id (as ECS names it today, \
             aws/amazon-ecs-agent#3498), so no claim or credentials would ever be granted to \
             this task; run it as an ECS task with its task role, or without TASK_API_URL",
            caller.task_id
        ));
    }
    Ok(())
}

/// Whether any service `c` names is on AWS.
fn needs_aws(c: &RunConfig) -> bool {
    matches!(c.store, SessionStoreConfig::Table(_))
        || matches!(c.context, ContextSource::Bucket { .. })
        || c.extension
            .as_ref()
            .is_some_and(|x| matches!(x.place, ArchivePlace::Bucket(_)))
        || c.pool.as_ref().is_some_and(|p| {
            matches!(p.queue, PoolQueue::Sqs(_)) || matches!(p.archives, ArchivePlace::Bucket(_))
        })
        || matches!(c.files, ArchivePlace::Bucket(_))
        || matches!(c.auth.key, KeyConfig::SecretArn(_))
        || needs_ec2(c)
}

/// Only direct mode (`PUBLIC_IP_REQUIRED`) looks its public address up in EC2; behind the
/// connect gateway a task announces its private address and asks EC2 nothing.
fn needs_ec2(c: &RunConfig) -> bool {
    c.public_ip_required && c.public_ip.is_none() && c.metadata_uri.is_some()
}

fn sessions(
    store: &SessionStoreConfig,
    sdk: Option<&SdkConfig>,
) -> Option<Arc<dyn ServedSessions>> {
    match (store, sdk) {
        (SessionStoreConfig::Table(t), Some(sdk)) => {
            Some(Arc::new(aws::DynamoSessions::new(sdk, t.clone())))
        }
        (SessionStoreConfig::Directory(dir), _) => {
            Some(Arc::new(DirectorySessions::new(dir.clone())))
        }
        _ => None,
    }
}

fn context_archives(
    context: &ContextSource,
    sdk: Option<&SdkConfig>,
) -> Option<Arc<dyn ArchiveStore>> {
    match (context, sdk) {
        (ContextSource::Bucket { bucket, .. }, Some(sdk)) => {
            Some(Arc::new(aws::S3Archives::new(sdk, bucket.clone())))
        }
        (ContextSource::Directory { dir, .. }, _) => {
            Some(Arc::new(DirectoryArchives { dir: dir.clone() }))
        }
        _ => None,
    }
}

/// The store at `place` (a pool's archives, a task's extension's, or the session files).
fn archives_at(place: &ArchivePlace, sdk: Option<&SdkConfig>) -> Option<Arc<dyn ArchiveStore>> {
    match (place, sdk) {
        (ArchivePlace::Bucket(bucket), Some(sdk)) => {
            Some(Arc::new(aws::S3Archives::new(sdk, bucket.clone())))
        }
        (ArchivePlace::Directory(dir), _) => Some(Arc::new(DirectoryArchives { dir: dir.clone() })),
        _ => None,
    }
}

fn claims(
    p: &PoolConfig,
    sdk: Option<&SdkConfig>,
) -> Result<Option<Arc<dyn ClaimQueue>>, DepsError> {
    Ok(match (&p.queue, sdk) {
        (PoolQueue::Sqs(url), Some(sdk)) => Some(Arc::new(aws::SqsClaims {
            client: aws_sdk_sqs::Client::new(sdk),
            queue_url: url.clone(),
            visibility: p.visibility,
        })),
        (PoolQueue::Directory(dir), _) => {
            let queue = DirQueue::new(dir.clone());
            queue.init().map_err(|source| DepsError::ClaimsDir {
                dir: dir.clone(),
                source,
            })?;
            Some(Arc::new(DirClaims::new(queue, p.task_name.clone())))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::AsyncWriteExt as _;
    use wallcrawler_aws::keys::FetchMode;

    use super::*;
    use crate::config::Settings;
    use crate::task_api::tests::{answer, read_request, stub_api, task_sdk};

    #[test]
    fn the_self_check_takes_only_a_session_named_by_the_task_id() {
        let task =
            "arn:aws:ecs:eu-west-1:123456789012:task/wallcrawler/0123456789abcdef0123456789abcdef";
        let caller =
            |session: &str| format!("arn:aws:sts::123456789012:assumed-role/wc-task/{session}");
        assert_eq!(
            session_names_task(&caller("0123456789abcdef0123456789abcdef"), task),
            Ok(())
        );
        let other = session_names_task(&caller("i-0abc"), task).unwrap_err();
        assert!(
            other.starts_with(
                "the task role's session is named \"i-0abc\", not this task's id \
                 \"0123456789abcdef0123456789abcdef\""
            ),
            "{other}"
        );
        let user = session_names_task("arn:aws:iam::123456789012:user/alice", task).unwrap_err();
        assert!(user.contains("not a session of its task role"), "{user}");
        let odd =
            session_names_task(&caller("x"), "arn:aws:ecs:eu-west-1:1:cluster/c").unwrap_err();
        assert!(odd.contains("names no task id"), "{odd}");
    }

    /// The task id [`recording_aws`]'s STS names the caller's role session by.
    const TASK_ID: &str = "0123456789abcdef0123456789abcdef";

    /// A stand-in ECS task metadata endpoint naming the task `task_id`; its URI.
    async fn metadata(task_id: &str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body = serde_json::json!({
            "TaskARN": format!("arn:aws:ecs:us-east-1:123456789012:task/wallcrawler/{task_id}"),
            "Containers": [],
        })
        .to_string();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let _ = read_request(&mut conn).await;
                let _ = conn.write_all(answer("200 OK", &body).as_bytes()).await;
            }
        });
        format!("http://{addr}/v4/x")
    }

    /// An AWS endpoint on loopback that answers `{}` (STS's `GetCallerIdentity`: a session of
    /// the task role named [`TASK_ID`]) and records the access key id each request was signed
    /// with (`Credential=<key id>/…`), with the request's target.
    async fn recording_aws() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let signed = Arc::new(Mutex::new(Vec::new()));
        let recorded = signed.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (head, body) = read_request(&mut conn).await;
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default()
                };
                let key = header("authorization")
                    .split_once("Credential=")
                    .and_then(|(_, c)| c.split_once('/'))
                    .map(|(k, _)| k.to_owned())
                    .unwrap_or_default();
                if body.contains("Action=GetCallerIdentity") {
                    recorded
                        .lock()
                        .unwrap()
                        .push(format!("sts.GetCallerIdentity {key}"));
                    let xml = format!(
                        "<GetCallerIdentityResponse><GetCallerIdentityResult><Arn>\
                         arn:aws:sts::123456789012:assumed-role/wc-task/{TASK_ID}\
                         </Arn></GetCallerIdentityResult></GetCallerIdentityResponse>"
                    );
                    let _ = conn.write_all(answer("200 OK", &xml).as_bytes()).await;
                    continue;
                }
                recorded
                    .lock()
                    .unwrap()
                    .push(format!("{} {key}", header("x-amz-target")));
                let _ = conn.write_all(answer("200 OK", "{}").as_bytes()).await;
            }
        });
        (format!("http://{addr}"), signed)
    }

    /// A cold task on the task API: its session's item is read with the credentials the API
    /// granted for that session; the public key secret with the task role's own.
    #[tokio::test]
    async fn a_task_on_the_task_api_reads_its_item_with_the_sessions_credentials_only() {
        let (api, _) = stub_api(vec![answer(
            "200 OK",
            &serde_json::json!({"credentials": {
                "accessKeyId": "ASIASESSION",
                "secretAccessKey": "s",
                "sessionToken": "t",
                "expiration": wallcrawler_contract::time::unix_millis() / 1000 + 3600,
            }})
            .to_string(),
        )])
        .await;
        let (aws, signed) = recording_aws().await;
        let c = on_task_api_config(&api, &metadata(TASK_ID).await);
        let sdk = task_sdk().to_builder().endpoint_url(aws).build();
        let deps = build_with(&c, Some(&sdk)).await.unwrap();

        assert_eq!(deps.sessions.unwrap().load("sess_1").await.unwrap(), None);
        let _ = deps.secrets.unwrap().fetch(FetchMode::Quick).await;
        let signed = signed.lock().unwrap();
        // The self-check first (as the task role), then the session's item.
        assert_eq!(
            signed
                .iter()
                .take(2)
                .map(String::as_str)
                .collect::<Vec<_>>(),
            [
                "sts.GetCallerIdentity AKIDTASK",
                "DynamoDB_20120810.GetItem ASIASESSION"
            ]
        );
        assert!(
            signed
                .iter()
                .skip(2)
                .all(|s| s == "secretsmanager.GetSecretValue AKIDTASK"),
            "{signed:?}"
        );
        assert!(signed.len() > 2, "{signed:?}");
    }

    /// A single session's task on the task API at `api`, its metadata at `metadata`.
    fn on_task_api_config(api: &str, metadata: &str) -> RunConfig {
        let settings: Settings = [
            ("SESSION_ID", "sess_1"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "public-key"),
            ("ECS_CONTAINER_METADATA_URI_V4", metadata),
            ("TASK_API_URL", api),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
        RunConfig::from_settings(&settings).unwrap()
    }

    /// A task whose role session STS names differently from its task id stops before it asks
    /// the task API anything, saying so; one whose metadata does not answer too.
    #[tokio::test]
    async fn the_self_check_stops_a_task_whose_session_is_not_its_id() {
        let (api, asked) = stub_api(vec![answer("500 Internal Server Error", "{}")]).await;
        let (aws, _) = recording_aws().await;
        let sdk = task_sdk().to_builder().endpoint_url(aws).build();
        let other = "fedcba9876543210fedcba9876543210";
        let c = on_task_api_config(&api, &metadata(other).await);
        let Err(e) = build_with(&c, Some(&sdk)).await else {
            panic!("a task named otherwise was set up");
        };
        assert_eq!(
            e.to_string(),
            format!(
                "startup self-check failed: the task role's session is named \"{TASK_ID}\", \
                 not this task's id \"{other}\": the task API takes the session name for the \
                 task id (as ECS names it today, aws/amazon-ecs-agent#3498), so no claim or \
                 credentials would ever be granted to this task; run it as an ECS task with its \
                 task role, or without TASK_API_URL"
            )
        );
        let c = on_task_api_config(&api, "http://127.0.0.1:1/v4/x");
        let Err(e) = build_with(&c, Some(&sdk)).await else {
            panic!("a task without metadata was set up");
        };
        assert_eq!(
            e.to_string(),
            "startup self-check failed: the ECS task metadata names no task ARN"
        );
        assert!(asked.lock().unwrap().is_empty(), "the task API was asked");
    }
}
