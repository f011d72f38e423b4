//! The outside services `run` needs, built once from one SDK configuration (and, on the task
//! API, the session's credentials).

use std::path::PathBuf;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_config::identity::IdentityCache;
use aws_credential_types::provider::SharedCredentialsProvider;
use wallcrawler_aws::secrets::SecretsManagerKeys;
use wallcrawler_contract::claim::DirQueue;

use crate::aws;
use crate::config::{
    ArchivePlace, ContextSource, KeyConfig, PoolConfig, PoolQueue, RunConfig, SessionStoreConfig,
};
use crate::profile::DirectoryArchives;
use crate::session::Deps;
use crate::session_credentials::SessionCredentialsProvider;
use crate::stores::{
    ArchiveStore, ClaimQueue, DirClaims, DirectorySessions, SessionStore, TaskProtection,
};
use crate::task_api::{ApiClaims, TaskApi, TaskApiError};

/// Why the outside services of `run` could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DepsError {
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
}

/// The outside services `c` names, built with one SDK configuration when any is on AWS. On
/// the task API, those of the session (its item, archives, files, claim settling, scale-in
/// protection) sign with the session's credentials; the public key secret and EC2 with the
/// task role's.
pub async fn build(c: &RunConfig) -> Result<Deps, DepsError> {
    let sdk = if needs_aws(c) {
        Some(aws::sdk_config().await)
    } else {
        None
    };
    let sdk = sdk.as_ref();
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
}

impl OnTaskApi {
    /// The pool's claims from the API, settled on its SQS queue.
    fn claims(&self, p: &PoolConfig) -> Option<Arc<dyn ClaimQueue>> {
        let PoolQueue::Sqs(url) = &p.queue else {
            return None;
        };
        let settle = aws::SqsClaims {
            client: aws_sdk_sqs::Client::new(&self.session_sdk),
            queue_url: url.clone(),
            visibility: p.visibility,
        };
        Some(Arc::new(ApiClaims::new(
            self.api.clone(),
            self.credentials.clone(),
            settle,
        )))
    }
}

/// The task API at `url`, called as the task `sdk`'s role names; a single session's task
/// has its session's credentials from it before anything else.
async fn on_task_api(c: &RunConfig, url: &str, sdk: &SdkConfig) -> Result<OnTaskApi, DepsError> {
    let api = TaskApi::new(url.to_owned(), sdk.clone()).map_err(DepsError::HttpClient)?;
    let api = Arc::new(api);
    let credentials = SessionCredentialsProvider::new(api.clone());
    let session_sdk = sdk
        .to_builder()
        .identity_cache(IdentityCache::no_cache())
        .credentials_provider(SharedCredentialsProvider::new(credentials.clone()))
        .build();
    if c.pool.is_none() {
        api.credentials_at_start(&c.auth.session_id, &credentials)
            .await
            .map_err(DepsError::Credentials)?;
    }
    Ok(OnTaskApi {
        api,
        credentials,
        session_sdk,
    })
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

fn sessions(store: &SessionStoreConfig, sdk: Option<&SdkConfig>) -> Option<Arc<dyn SessionStore>> {
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
            Some(Arc::new(DirClaims {
                queue,
                owner: p.task_name.clone(),
            }))
        }
        _ => None,
    })
}
