//! The task API: how a task on AWS gets its claim and its session's credentials from the
//! control plane, instead of reading the claims queue, the sessions table and the bucket with a
//! role every task shares.
//!
//! A task proves which task it is with a signed STS `GetCallerIdentity` request it does not
//! send ([`SignedIdentity`]): the control plane sends it to STS itself and reads the caller's
//! ARN, `arn:<partition>:sts::<account>:assumed-role/<task role>/<task id>` (ECS names a task
//! role's session by the task's id). The request is signed over [`AUDIENCE_HEADER`], so an
//! identity made for another service is not accepted here, and over the host of the control
//! plane's own STS endpoint, so it cannot be redirected.
//!
//! - [`CLAIMS_PATH`]: a warm pool task waits for a claim. The control plane receives it from
//!   the queue, takes its session for the caller (conditionally: pending, held by no other
//!   live task, and the caller has had no session before), and answers the claim, its SQS
//!   receipt, credentials scoped to that session and the session's control-mode live-view
//!   credential (what the task hands out for a handoff: [`LiveViewGrant`]) ([`ClaimGrant`]);
//!   `204` when none came in
//!   the wait; `409` when the caller has had its session (a pool task serves one, then exits).
//! - [`CREDENTIALS_PATH`]: fresh credentials for the session whose item names the caller's task
//!   (`ecsTaskArn`): a pool task's before they expire, a cold task's (started for one session)
//!   at its start, with the session's live view as a claim's ([`CredentialsGrant`]); `403` for
//!   any other session.
//!
//! The credentials ([`SessionCredentials`]) come from STS `AssumeRole` of the session role with
//! a session policy ([`session_policy`]) naming that session's item, its context's archive, its
//! file prefixes, the claims queue (settling only its own receipt) and the caller's own task
//! (scale-in protection): the role's permissions intersected with it.

use serde::{Deserialize, Serialize};

/// A warm pool task's long poll for a claim (`POST`, JSON [`ClaimRequest`]).
pub const CLAIMS_PATH: &str = "/v1/internal/claims";
/// A task's credentials for its session (`POST`, JSON [`CredentialsRequest`]).
pub const CREDENTIALS_PATH: &str = "/v1/internal/credentials";
/// The request header carrying the task's [`SignedIdentity`] (base64url of its JSON).
pub const IDENTITY_HEADER: &str = "x-wallcrawler-task-identity";
/// The header the identity's STS request is signed over, with the value [`AUDIENCE`].
pub const AUDIENCE_HEADER: &str = "x-wallcrawler-audience";
/// The header carrying an identity's nonce ([`SignedIdentity::nonce`]), signed over: two
/// identities signed in the same second differ, so each can be taken once.
pub const NONCE_HEADER: &str = "x-wallcrawler-nonce";
/// The audience: what the identity is for.
pub const AUDIENCE: &str = "wallcrawler-task-api";
/// The STS request's body, exactly.
pub const STS_BODY: &str = "Action=GetCallerIdentity&Version=2011-06-15";
/// The STS request's `content-type`, exactly.
pub const STS_CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";
/// The headers the STS request is signed over, in SigV4's order: all of them are sent by the
/// control plane with the values above (and the `x-amz-*` of the identity).
pub const SIGNED_HEADERS: &str =
    "content-type;host;x-amz-date;x-amz-security-token;x-wallcrawler-audience;x-wallcrawler-nonce";
/// How long after it was signed an identity is taken (and how far ahead of the control
/// plane's clock its date may be): a task signs each one just before its call. The control
/// plane also takes each identity once (by its signature), so one seen on the way (a log, a
/// proxy) is worth nothing afterwards.
pub const FRESH_SECONDS: u64 = 60;
/// The largest identity header accepted, in bytes (a real one is ~1.5 KiB).
pub const MAX_IDENTITY_BYTES: usize = 8192;
/// The longest claim wait a task may ask for (SQS's longest long poll; API Gateway answers
/// within 29 s).
pub const MAX_WAIT_SECONDS: u64 = 20;

/// The signed parts of a task's STS `GetCallerIdentity` request: the control plane sends the
/// request to its own STS endpoint with [`STS_BODY`], [`STS_CONTENT_TYPE`], [`AUDIENCE`] and
/// these, and STS answers who signed it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignedIdentity {
    /// The `authorization` header (SigV4).
    pub authorization: String,
    /// The `x-amz-date` header.
    pub amz_date: String,
    /// The `x-amz-security-token` header (a task role's credentials always have one).
    pub security_token: String,
    /// The [`NONCE_HEADER`]: 32 lowercase hex digits, random per identity.
    pub nonce: String,
}

impl std::fmt::Debug for SignedIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIdentity")
            .field("amz_date", &self.amz_date)
            .finish_non_exhaustive()
    }
}

/// Why an identity header was refused before it was sent to STS.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// Longer than [`MAX_IDENTITY_BYTES`].
    #[error("the task identity is longer than {MAX_IDENTITY_BYTES} bytes")]
    TooLong,
    /// Not base64url of the JSON of a [`SignedIdentity`].
    #[error("the task identity is not readable")]
    Malformed,
    /// Not a SigV4 signature over exactly [`SIGNED_HEADERS`] for STS.
    #[error("the task identity is not a signature of this API's STS request")]
    NotOurs,
}

impl SignedIdentity {
    /// The header value: base64url (no padding) of the JSON.
    pub fn encode(&self) -> String {
        use base64::Engine as _;
        let json = serde_json::to_vec(self).expect("plain strings serialize");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Reads a header value, bounded, and checks that it signs what the control plane will
    /// send: [`SIGNED_HEADERS`], for the `sts` service. STS checks the signature itself.
    pub fn decode(header: &str) -> Result<Self, IdentityError> {
        use base64::Engine as _;
        if header.len() > MAX_IDENTITY_BYTES {
            return Err(IdentityError::TooLong);
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| IdentityError::Malformed)?;
        let id: Self = serde_json::from_slice(&json).map_err(|_| IdentityError::Malformed)?;
        let ours = id.authorization.starts_with("AWS4-HMAC-SHA256 ")
            && id.authorization.contains("/sts/aws4_request")
            && id
                .authorization
                .contains(&format!("SignedHeaders={SIGNED_HEADERS},"));
        let printable = |s: &str| s.bytes().all(|b| (0x20..0x7f).contains(&b));
        if !ours || !printable(&id.authorization) || !printable(&id.security_token) {
            return Err(IdentityError::NotOurs);
        }
        if id.amz_date.len() != 16 || !printable(&id.amz_date) {
            return Err(IdentityError::NotOurs);
        }
        let hex =
            |s: &str| s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !hex(&id.nonce) {
            return Err(IdentityError::NotOurs);
        }
        Ok(id)
    }

    /// A fresh nonce: 16 random bytes as hex.
    pub fn new_nonce() -> String {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).expect("the OS random source is available");
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// When it was signed (its `x-amz-date`, `YYYYMMDDTHHMMSSZ`), in Unix seconds; `None` for
    /// a date that does not read.
    pub fn signed_at(&self) -> Option<u64> {
        let d = &self.amz_date;
        let n = |r: std::ops::Range<usize>| d.get(r)?.parse::<i16>().ok();
        if d.len() != 16 || d.as_bytes()[8] != b'T' || !d.ends_with('Z') {
            return None;
        }
        let (y, mo, da) = (n(0..4)?, n(4..6)?, n(6..8)?);
        let (h, mi, s) = (n(9..11)?, n(11..13)?, n(13..15)?);
        let dt = jiff::civil::DateTime::new(
            y,
            i8::try_from(mo).ok()?,
            i8::try_from(da).ok()?,
            i8::try_from(h).ok()?,
            i8::try_from(mi).ok()?,
            i8::try_from(s).ok()?,
            0,
        )
        .ok()?;
        let t = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
        u64::try_from(t.as_second()).ok()
    }

    /// Whether it was signed within [`FRESH_SECONDS`] of `now` (Unix seconds), either way.
    pub fn fresh_at(&self, now: u64) -> Result<(), Staleness> {
        let at = self.signed_at().ok_or(Staleness::Unreadable)?;
        if now.saturating_sub(at) > FRESH_SECONDS {
            return Err(Staleness::Old);
        }
        if at.saturating_sub(now) > FRESH_SECONDS {
            return Err(Staleness::Future);
        }
        Ok(())
    }
}

/// Why an identity's date was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Staleness {
    /// Signed more than [`FRESH_SECONDS`] ago.
    #[error("the task identity was signed more than {FRESH_SECONDS} s ago")]
    Old,
    /// Dated more than [`FRESH_SECONDS`] ahead.
    #[error("the task identity is dated more than {FRESH_SECONDS} s ahead")]
    Future,
    /// The date does not read.
    #[error("the task identity's date does not read")]
    Unreadable,
}

/// The task an STS caller ARN names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerTask {
    /// The ARN partition (`aws`, `aws-cn`, …).
    pub partition: String,
    /// The account.
    pub account: String,
    /// The role's name.
    pub role: String,
    /// The role session's name: an ECS task role's is the task id.
    pub task_id: String,
}

impl CallerTask {
    /// Reads `arn:<partition>:sts::<account>:assumed-role/<role>/<session>`; `None` for any
    /// other caller (a user, a role session with a path, a session name no task id has).
    pub fn from_arn(arn: &str) -> Option<Self> {
        let rest = arn.strip_prefix("arn:")?;
        let (partition, rest) = rest.split_once(":sts::")?;
        let (account, rest) = rest.split_once(":assumed-role/")?;
        let (role, session) = rest.split_once('/')?;
        // ECS task ids are 32 hex digits; moto's are UUIDs (with dashes).
        let id_like = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && !s.starts_with('-')
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        let ok = !partition.is_empty()
            && partition
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'-')
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && !role.is_empty()
            && role
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
            && id_like(session);
        ok.then(|| Self {
            partition: partition.to_owned(),
            account: account.to_owned(),
            role: role.to_owned(),
            task_id: session.to_owned(),
        })
    }

    /// The task's ARN in `cluster` (a name) of `region`, as the task metadata gives it and a
    /// session item's `owner`/`ecsTaskArn` hold it.
    pub fn task_arn(&self, region: &str, cluster: &str) -> String {
        format!(
            "arn:{}:ecs:{region}:{}:task/{cluster}/{}",
            self.partition, self.account, self.task_id
        )
    }
}

/// A warm pool task's wait for a claim.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimRequest {
    /// How long to wait, at most [`MAX_WAIT_SECONDS`].
    pub wait_seconds: u64,
}

/// A task's request for its session's credentials.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialsRequest {
    /// The session.
    pub session_id: String,
}

/// A claim taken for the calling task.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimGrant {
    /// The claim message's body, as sent (the controller parses it as it parses any claim).
    pub claim: String,
    /// Its SQS receipt handle: what settles it (the credentials allow only settling).
    pub receipt: String,
    /// Credentials for its session.
    pub credentials: SessionCredentials,
    /// The session's control-mode live view, for a client's `Wallcrawler.requestHandoff`
    /// (absent from a control plane that mints none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_view: Option<LiveViewGrant>,
}

/// A session's control-mode live-view credential, minted by the control plane (the task holds
/// no signing key) for the task serving it: what it hands out as the URL of a handoff.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LiveViewGrant {
    /// The viewer credential (audience `wallcrawler-viewer`, mode `control`).
    pub credential: String,
    /// When it expires (Unix seconds): the session's `expiresAt`.
    pub expires_at: u64,
    /// The viewer's origin when clients reach the session through a gateway
    /// (`https://<gateway host>`); absent: the task's own announced address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

impl LiveViewGrant {
    /// The viewer URL on `base`, or on `own_base` (the task's own `http://<ip>:<port>`).
    pub fn url(&self, own_base: &str) -> String {
        let base = self.base.as_deref().unwrap_or(own_base);
        format!("{base}/viewer?t={}", self.credential)
    }
}

impl std::fmt::Debug for LiveViewGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveViewGrant")
            .field("expires_at", &self.expires_at)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Credentials answered for a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialsGrant {
    /// Credentials for the session.
    pub credentials: SessionCredentials,
    /// The session's control-mode live view (as in [`ClaimGrant`]): what a cold-started task
    /// hands out for a handoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_view: Option<LiveViewGrant>,
}

/// Temporary AWS credentials scoped to one session.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token.
    pub session_token: String,
    /// When they expire (Unix seconds).
    pub expiration: u64,
}

impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

/// What one session's credentials reach: the names its session policy is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionScope {
    /// The ARN partition (`aws`, `aws-cn`, …).
    pub partition: String,
    /// The sessions table's ARN.
    pub sessions_table_arn: String,
    /// The contexts bucket's name (profile archives, session files, extensions).
    pub bucket: String,
    /// The claims queue's ARN.
    pub queue_arn: String,
    /// The serving task's ARN: the one task it may protect from scale-in.
    pub task_arn: String,
    /// The session's project.
    pub project_id: String,
    /// The session.
    pub session_id: String,
    /// Its context's archive key (`<projectId>/<contextId>/profile.tar.gz`), if it has one.
    pub context_key: Option<String>,
    /// Its extension's archive key (`extensions/<projectId>/<sha256>.zip`), if it has one.
    pub extension_key: Option<String>,
}

/// STS's limit on an `AssumeRole` session policy's plain text, in bytes.
pub const MAX_SESSION_POLICY_BYTES: usize = 2048;

/// The DynamoDB actions a controller makes on its session's item.
pub const SESSION_ITEM_ACTIONS: [&str; 2] = ["dynamodb:GetItem", "dynamodb:UpdateItem"];

/// The S3 actions a controller makes on its session's objects and the bucket.
pub const SESSION_OBJECT_ACTIONS: [&str; 5] = [
    "s3:GetObject",
    "s3:PutObject",
    // A log chunk is written with its expiry tag (`session_log::RECORD_TAGGING`).
    "s3:PutObjectTagging",
    "s3:AbortMultipartUpload",
    "s3:ListBucket",
];

/// The session policy of one session's credentials (STS is sent its compact JSON), naming
/// that session's resources: its item as the only leading key; its context's archive, its
/// files (`files/<projectId>/<sessionId>/*`), its extension and the bucket itself; the claims
/// queue, for settling; the serving task, for scale-in protection.
///
/// The session role's own policy (deploy/template.yaml) says what may be done to each kind of
/// resource: the item only through [`crate::session::attr::TASK_READS`] and
/// [`crate::session::attr::TASK_WRITES`] (never the token), archives read and written,
/// downloads only written, uploads and extensions only read, `s3:ListBucket` so that a missing
/// archive is a 404. Credentials get the intersection of the two, so this policy need not
/// repeat the role's conditions: repeated, they would not fit STS's 2048 bytes with long
/// names (measured: ~2.6 KB), and the intersection is the same.
pub fn session_policy(s: &SessionScope) -> serde_json::Value {
    use serde_json::json;
    let bucket = format!("arn:{}:s3:::{}", s.partition, s.bucket);
    let object = |key: &str| format!("{bucket}/{key}");
    let files = crate::storage::session_files_prefix(&s.project_id, &s.session_id);
    let mut objects = vec![bucket.clone(), object(&format!("{files}*"))];
    objects.extend(s.context_key.as_deref().map(object));
    objects.extend(s.extension_key.as_deref().map(object));
    json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": SESSION_ITEM_ACTIONS, "Resource": s.sessions_table_arn,
            "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [s.session_id]}}},
        {"Effect": "Allow", "Action": SESSION_OBJECT_ACTIONS, "Resource": objects},
        {"Effect": "Allow", "Action": ["sqs:DeleteMessage", "sqs:ChangeMessageVisibility"],
            "Resource": s.queue_arn},
        {"Effect": "Allow", "Action": "ecs:UpdateTaskProtection", "Resource": s.task_arn},
    ]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_grant_reads_with_or_without_its_live_view_and_never_shows_the_credential() {
        let creds =
            r#"{"accessKeyId":"A","secretAccessKey":"S","sessionToken":"T","expiration":9}"#;
        let old = format!(r#"{{"claim":"{{}}","receipt":"r","credentials":{creds}}}"#);
        let g: ClaimGrant = serde_json::from_str(&old).unwrap();
        assert_eq!(g.live_view, None);
        assert_eq!(serde_json::to_string(&g).unwrap(), old);
        let new = format!(
            r#"{{"claim":"{{}}","receipt":"r","credentials":{creds},"liveView":{{"credential":"c.r.e","expiresAt":99}}}}"#
        );
        let g: ClaimGrant = serde_json::from_str(&new).unwrap();
        let lv = g.live_view.clone().unwrap();
        assert_eq!(
            lv.url("http://1.2.3.4:9222"),
            "http://1.2.3.4:9222/viewer?t=c.r.e"
        );
        let gw = LiveViewGrant {
            base: Some("https://gw.test".into()),
            ..lv
        };
        assert_eq!(
            gw.url("http://1.2.3.4:9222"),
            "https://gw.test/viewer?t=c.r.e"
        );
        assert!(!format!("{g:?}").contains("c.r.e"));
    }

    fn identity() -> SignedIdentity {
        SignedIdentity {
            authorization: format!(
                "AWS4-HMAC-SHA256 Credential=ASIAX/20261126/eu-west-1/sts/aws4_request, \
                 SignedHeaders={SIGNED_HEADERS}, Signature=abc"
            ),
            amz_date: "20261126T101010Z".into(),
            security_token: "token".into(),
            nonce: SignedIdentity::new_nonce(),
        }
    }

    #[test]
    fn an_identity_is_fresh_for_a_minute_either_way_and_its_nonce_is_checked() {
        let id = identity();
        let at = id.signed_at().unwrap();
        // 2026-11-26T10:10:10Z
        assert_eq!(at, 1_795_687_810);
        assert_eq!(id.fresh_at(at), Ok(()));
        assert_eq!(id.fresh_at(at + FRESH_SECONDS), Ok(()));
        assert_eq!(id.fresh_at(at + FRESH_SECONDS + 1), Err(Staleness::Old));
        assert_eq!(id.fresh_at(at - FRESH_SECONDS), Ok(()));
        assert_eq!(id.fresh_at(at - FRESH_SECONDS - 1), Err(Staleness::Future));
        for bad in [
            "20261326T101010Z",
            "20261126X101010Z",
            "2026112aT101010Z",
            "20261126T101010+",
        ] {
            let odd = SignedIdentity {
                amz_date: bad.into(),
                ..id.clone()
            };
            assert_eq!(odd.fresh_at(at), Err(Staleness::Unreadable), "{bad}");
        }
        assert_ne!(SignedIdentity::new_nonce(), id.nonce);
        for nonce in ["", "ABCDEF0123456789abcdef0123456789", "0123"] {
            let odd = SignedIdentity {
                nonce: nonce.into(),
                ..id.clone()
            };
            assert_eq!(
                SignedIdentity::decode(&odd.encode()),
                Err(IdentityError::NotOurs),
                "{nonce}"
            );
        }
    }

    #[test]
    fn an_identity_round_trips_and_a_foreign_one_is_refused() {
        let id = identity();
        assert_eq!(SignedIdentity::decode(&id.encode()), Ok(id.clone()));
        assert!(!format!("{id:?}").contains("token"));
        let mut s3 = id.clone();
        s3.authorization = s3.authorization.replace("/sts/", "/s3/");
        assert_eq!(
            SignedIdentity::decode(&s3.encode()),
            Err(IdentityError::NotOurs)
        );
        let mut unsigned_audience = id;
        unsigned_audience.authorization = unsigned_audience
            .authorization
            .replace(";x-wallcrawler-audience", "");
        assert_eq!(
            SignedIdentity::decode(&unsigned_audience.encode()),
            Err(IdentityError::NotOurs)
        );
        assert_eq!(
            SignedIdentity::decode(&"A".repeat(MAX_IDENTITY_BYTES + 1)),
            Err(IdentityError::TooLong)
        );
        assert_eq!(
            SignedIdentity::decode("not base64!"),
            Err(IdentityError::Malformed)
        );
    }

    #[test]
    fn only_an_assumed_role_session_named_like_a_task_is_a_task() {
        let t = CallerTask::from_arn(
            "arn:aws:sts::123456789012:assumed-role/wc-task/0123456789abcdef0123456789abcdef",
        )
        .unwrap();
        assert_eq!(t.role, "wc-task");
        assert_eq!(
            t.task_arn("eu-west-1", "wc"),
            "arn:aws:ecs:eu-west-1:123456789012:task/wc/0123456789abcdef0123456789abcdef"
        );
        for arn in [
            "arn:aws:iam::123456789012:user/moto",
            "arn:aws:sts::123456789012:assumed-role/wc-task/../x",
            "arn:aws:sts::123456789012:assumed-role/wc-task/a/b",
            "arn:aws:sts::12345678901:assumed-role/wc-task/abc",
            "arn:aws:sts::123456789012:assumed-role/wc-task/",
            "arn:aws:sts::123456789012:assumed-role/wc-task/-x",
            "arn:aws:sts::123456789012:assumed-role/wc-task/a@b",
        ] {
            assert_eq!(CallerTask::from_arn(arn), None, "{arn}");
        }
    }

    /// The longest names the template and the API make: a 31-character `NamePrefix`, a
    /// 63-character bucket, 128-character project and context ids.
    fn long_scope() -> SessionScope {
        let prefix = "w".repeat(31);
        let project = format!("proj_{}", "p".repeat(123));
        let context = format!("ctx_{}", "c".repeat(124));
        SessionScope {
            partition: "aws-us-gov".into(),
            sessions_table_arn: format!(
                "arn:aws-us-gov:dynamodb:us-gov-west-1:123456789012:table/{prefix}-sessions"
            ),
            bucket: "b".repeat(63),
            queue_arn: format!("arn:aws-us-gov:sqs:us-gov-west-1:123456789012:{prefix}-claims"),
            task_arn: format!(
                "arn:aws-us-gov:ecs:us-gov-west-1:123456789012:task/{prefix}/{}",
                "0".repeat(32)
            ),
            context_key: Some(crate::storage::profile_key(&project, &context)),
            extension_key: Some(crate::storage::extension_key(&project, &"a".repeat(64))),
            session_id: format!("sess_{}", uuid_like()),
            project_id: project,
        }
    }

    fn uuid_like() -> String {
        "01234567-89ab-cdef-0123-456789abcdef".into()
    }

    #[test]
    fn a_session_policy_names_one_session_and_fits_sts_limit() {
        let scope = long_scope();
        let policy = session_policy(&scope);
        let text = serde_json::to_string(&policy).unwrap();
        assert!(
            text.len() <= MAX_SESSION_POLICY_BYTES,
            "{} bytes: {text}",
            text.len()
        );
        let bucket = format!("arn:aws-us-gov:s3:::{}", scope.bucket);
        let files = format!("{bucket}/files/{}/{}/*", scope.project_id, scope.session_id);
        let expected = serde_json::json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
                "Resource": scope.sessions_table_arn,
                "Condition": {"ForAllValues:StringEquals":
                    {"dynamodb:LeadingKeys": [scope.session_id]}}},
            {"Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:PutObjectTagging",
                    "s3:AbortMultipartUpload", "s3:ListBucket"],
                "Resource": [
                    bucket,
                    files,
                    format!("{bucket}/{}", scope.context_key.as_deref().unwrap()),
                    format!("{bucket}/{}", scope.extension_key.as_deref().unwrap()),
                ]},
            {"Effect": "Allow", "Action": ["sqs:DeleteMessage", "sqs:ChangeMessageVisibility"],
                "Resource": scope.queue_arn},
            {"Effect": "Allow", "Action": "ecs:UpdateTaskProtection", "Resource": scope.task_arn},
        ]});
        assert_eq!(policy, expected);
        assert!(!text.contains("\"*\""), "no wildcard resource: {text}");

        // Without a context or an extension: the bucket and the session's files only.
        let bare = SessionScope {
            context_key: None,
            extension_key: None,
            ..scope
        };
        let resources = &session_policy(&bare)["Statement"][1]["Resource"];
        assert_eq!(resources, &serde_json::json!([bucket, files]));
    }
}
