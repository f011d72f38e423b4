//! Session lifecycle statuses: the detailed `internalStatus` and the SDK-visible `status`.

use serde::{Deserialize, Serialize};

/// The longest shutdown budget a controller may have (`SHUTDOWN_BUDGET_SECONDS` is at most
/// this): Fargate's longest stop timeout, after which ECS kills the task. A session's
/// controller is gone by its `expiresAt` plus this, so the control plane counts a writer that
/// has not written `endedAt` by then as dead.
pub const MAX_SHUTDOWN_BUDGET_SECONDS: u64 = 120;

/// Detailed lifecycle status kept in `internalStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InternalStatus {
    /// `CREATING`: the item is written; no task started yet.
    Creating,
    /// `PROVISIONING`: the task is being placed (a pool task claimed, or ECS started).
    Provisioning,
    /// `STARTING`: the controller is preparing the profile and Chrome.
    Starting,
    /// `READY`: Chrome and the proxy answer; `connectUrl` and `publicIP` are set.
    Ready,
    /// `ACTIVE`: a client is connected.
    Active,
    /// `TERMINATING`: the session is ending (saving the profile, closing Chrome).
    Terminating,
    /// `STOPPED`: ended normally (release, `Browser.close`, idle timeout).
    Stopped,
    /// `FAILED`: ended by a failure; `terminationReason` says which.
    Failed,
    /// `TIMED_OUT`: ended at `expiresAt`.
    TimedOut,
}

/// Browserbase's status, kept in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SdkStatus {
    /// `PENDING`: not running yet.
    Pending,
    /// `RUNNING`: the browser is reachable at `connectUrl`.
    Running,
    /// `COMPLETED`: ended normally.
    Completed,
    /// `ERROR`: ended by a failure.
    Error,
    /// `TIMED_OUT`: ended at its expiry.
    TimedOut,
}

impl InternalStatus {
    /// Every internal status, in lifecycle order.
    pub const ALL: [InternalStatus; 9] = [
        Self::Creating,
        Self::Provisioning,
        Self::Starting,
        Self::Ready,
        Self::Active,
        Self::Terminating,
        Self::Stopped,
        Self::Failed,
        Self::TimedOut,
    ];

    /// The SDK-visible status for this internal status.
    pub fn sdk_status(self) -> SdkStatus {
        match self {
            Self::Creating | Self::Provisioning | Self::Starting => SdkStatus::Pending,
            Self::Ready | Self::Active | Self::Terminating => SdkStatus::Running,
            Self::Stopped => SdkStatus::Completed,
            Self::Failed => SdkStatus::Error,
            Self::TimedOut => SdkStatus::TimedOut,
        }
    }

    /// Statuses from which the controller may announce READY.
    pub fn may_become_ready(self) -> bool {
        matches!(self, Self::Creating | Self::Provisioning | Self::Starting)
    }

    /// A session in one of these states is over; nothing brings it back.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Stopped | Self::Failed | Self::TimedOut)
    }

    /// The attribute value (`SCREAMING_SNAKE_CASE`, as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "CREATING",
            Self::Provisioning => "PROVISIONING",
            Self::Starting => "STARTING",
            Self::Ready => "READY",
            Self::Active => "ACTIVE",
            Self::Terminating => "TERMINATING",
            Self::Stopped => "STOPPED",
            Self::Failed => "FAILED",
            Self::TimedOut => "TIMED_OUT",
        }
    }

    /// The status whose attribute value is `s`; `None` for anything else (case matters).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl SdkStatus {
    /// The attribute value (`SCREAMING_SNAKE_CASE`, as serde writes it).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Error => "ERROR",
            Self::TimedOut => "TIMED_OUT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_matches_the_spec_table() {
        use InternalStatus::*;
        for (i, s) in [
            (Creating, SdkStatus::Pending),
            (Provisioning, SdkStatus::Pending),
            (Starting, SdkStatus::Pending),
            (Ready, SdkStatus::Running),
            (Active, SdkStatus::Running),
            (Terminating, SdkStatus::Running),
            (Stopped, SdkStatus::Completed),
            (Failed, SdkStatus::Error),
            (TimedOut, SdkStatus::TimedOut),
        ] {
            assert_eq!(i.sdk_status(), s, "{i:?}");
        }
    }

    #[test]
    fn string_forms_round_trip_and_match_serde() {
        for s in InternalStatus::ALL {
            assert_eq!(InternalStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(InternalStatus::parse("running"), None);
    }

    #[test]
    fn gateway_urls_have_a_path() {
        for base in ["ws://127.0.0.1:9", "ws://127.0.0.1:9/"] {
            assert_eq!(
                gateway_connect_url(base, "t.k.n"),
                "ws://127.0.0.1:9/?signingKey=t.k.n"
            );
        }
    }

    #[test]
    fn direct_urls_have_a_path() {
        assert_eq!(
            connect_url("203.0.113.7", 9223, "t.k.n"),
            "ws://203.0.113.7:9223/?signingKey=t.k.n"
        );
        assert_eq!(
            connect_url("::1", 9223, "t.k.n"),
            "ws://[::1]:9223/?signingKey=t.k.n"
        );
    }

    #[test]
    fn tasks_and_gateways_never_name_the_token() {
        for list in [
            &attr::TASK_READS[..],
            &attr::TASK_WRITES,
            &attr::GATEWAY_READS,
        ] {
            assert!(
                list.contains(&attr::SESSION_ID),
                "the key is named: {list:?}"
            );
            for secret in [attr::SIGNING_KEY, attr::CONNECT_URL] {
                assert!(!list.contains(&secret), "{secret} in {list:?}");
            }
        }
        // What the API wrote for the session stays as it wrote it.
        for api_only in [
            attr::PROJECT_ID,
            attr::CONTEXT_ID,
            attr::CONTEXT_STORAGE_KEY,
            attr::CONTEXT_PERSIST,
            attr::EXPIRES_AT,
            attr::KEEP_ALIVE,
            attr::USER_METADATA,
            attr::CREATED_AT,
            attr::CONNECT_BASE,
        ] {
            assert!(!attr::TASK_WRITES.contains(&api_only), "{api_only}");
        }
    }

    #[test]
    fn only_pending_states_may_become_ready() {
        let ready: Vec<_> = InternalStatus::ALL
            .into_iter()
            .filter(|s| s.may_become_ready())
            .collect();
        assert_eq!(
            ready,
            [
                InternalStatus::Creating,
                InternalStatus::Provisioning,
                InternalStatus::Starting
            ]
        );
    }
}

/// Attribute names of the `wallcrawler-sessions` item (see the DynamoDB schema).
pub mod attr {
    /// `sessionId`: the key, `sess_<uuid>`.
    pub const SESSION_ID: &str = "sessionId";
    /// `status`: the SDK-visible [`SdkStatus`](super::SdkStatus).
    pub const STATUS: &str = "status";
    /// `internalStatus`: the detailed [`InternalStatus`](super::InternalStatus).
    pub const INTERNAL_STATUS: &str = "internalStatus";
    /// `projectId`: the owning project.
    pub const PROJECT_ID: &str = "projectId";
    /// `createdAt`: ISO 8601, when the API created the item.
    pub const CREATED_AT: &str = "createdAt";
    /// `updatedAt`: ISO 8601, the last status write.
    pub const UPDATED_AT: &str = "updatedAt";
    /// `startedAt`: ISO 8601, when the task was started (browser minutes count from here).
    pub const STARTED_AT: &str = "startedAt";
    /// `readyAt`: ISO 8601, when the controller announced READY.
    pub const READY_AT: &str = "readyAt";
    /// `endedAt`: ISO 8601, written last at the end (after any profile upload).
    pub const ENDED_AT: &str = "endedAt";
    /// `expiresAt`: Unix seconds (a number) when the session times out.
    pub const EXPIRES_AT: &str = "expiresAt";
    /// `keepAlive`: `true` when the session survives its clients disconnecting.
    pub const KEEP_ALIVE: &str = "keepAlive";
    /// `region`: the AWS region the session was asked for.
    pub const REGION: &str = "region";
    /// `publicIP`: the address clients connect to.
    pub const PUBLIC_IP: &str = "publicIP";
    /// `privateIP`: the task's own address, where the connect gateway dials its proxy (written
    /// with READY).
    pub const PRIVATE_IP: &str = "privateIP";
    /// `proxyPort`: the task's proxy port behind that address (a number, written with READY).
    pub const PROXY_PORT: &str = "proxyPort";
    /// `uploadsDir`: where on the browser's disk the session's uploads are brought (written
    /// with READY).
    pub const UPLOADS_DIR: &str = "uploadsDir";
    /// `ecsTaskArn`: the ECS task serving the session, when known.
    pub const ECS_TASK_ARN: &str = "ecsTaskArn";
    /// `connectUrl`: a connect URL with its token. Written only by versions before the token
    /// left the item (read for such items; see [`CONNECT_BASE`]).
    pub const CONNECT_URL: &str = "connectUrl";
    /// `connectBase`: the connect gateway's base URL the session was created behind
    /// (`wss://connect.example.com`), no token; the API forms the `connectUrl` from it.
    pub const CONNECT_BASE: &str = "connectBase";
    /// `signingKey`: the session's CDP access token (a JWT). Written only by versions before
    /// the token left the item: the API mints it again when it answers
    /// (`SessionDoc::token_claims`, in the session_doc module).
    pub const SIGNING_KEY: &str = "signingKey";
    /// `contextId`: the context whose profile the session uses.
    pub const CONTEXT_ID: &str = "contextId";
    /// `contextPersist`: `true` when the profile is uploaded again at the end.
    pub const CONTEXT_PERSIST: &str = "contextPersist";
    /// `contextStorageKey`: the archive's S3 key, `<projectId>/<contextId>/profile.tar.gz`.
    pub const CONTEXT_STORAGE_KEY: &str = "contextStorageKey";
    /// `proxyBytes`: bytes the proxy relayed, both directions together.
    pub const PROXY_BYTES: &str = "proxyBytes";
    /// `terminationReason`: why a FAILED session failed.
    pub const TERMINATION_REASON: &str = "terminationReason";
    /// `userMetadata`: the client's free-form JSON, kept as given.
    pub const USER_METADATA: &str = "userMetadata";
    /// `claimDeadline`: Unix seconds (a number) after which no client waits for the session's
    /// browser any more (see `ClaimWait` in the claim module); absent on items older than it.
    pub const CLAIM_DEADLINE: &str = "claimDeadline";

    /// `owner`: the controller that took the session's claim (its ECS task ARN, or its
    /// `POOL_TASK_NAME` locally). Every write a controller makes after taking it (READY, the
    /// terminal status, `proxyBytes`, `endedAt`) is conditional on being the owner, so a claim
    /// delivered twice never gives a session two controllers.
    pub const OWNER: &str = "owner";
    /// `ownerUntil`: Unix seconds (a number), the lease of an owner that has not written READY
    /// yet (kept alive with its claim); once past, another controller may take the session.
    /// Removed by READY: the owner of a READY session is its owner for good.
    pub const OWNER_UNTIL: &str = "ownerUntil";

    /// `handoff`: the pending handoff to a person (a map: `id`, `reason`, `requestedAt`,
    /// `expiresAt`; owner-written, removed when it ends). See
    /// `Handoff` (the session_doc module).
    pub const HANDOFF: &str = "handoff";

    /// `downloadsInProgress`: downloads begun and not yet stored (a number; owner-written).
    pub const DOWNLOADS_IN_PROGRESS: &str = "downloadsInProgress";

    /// Set once the session's usage is in its project's total.
    pub const USAGE_COUNTED: &str = "usageCounted";

    /// What the listing index (`projectId-createdAt-index`) projects besides the keys
    /// (`projectId`, `createdAt`, `sessionId`): what `GET /v1/sessions` shows, never the token
    /// (`signingKey`) or `connectUrl`, which carries it.
    pub const LISTED: [&str; 12] = [
        STATUS,
        INTERNAL_STATUS,
        UPDATED_AT,
        STARTED_AT,
        ENDED_AT,
        EXPIRES_AT,
        KEEP_ALIVE,
        REGION,
        PUBLIC_IP,
        PROXY_BYTES,
        CONTEXT_ID,
        USER_METADATA,
    ];

    /// Every attribute a browser controller reads of a session item: its `GetItem`'s
    /// `ProjectionExpression`, and exactly the `dynamodb:Attributes` the task role may read
    /// (deploy/template.yaml, asserted by deploy/check_template.py). Never the token
    /// (`signingKey`) or `connectUrl`, which carries it: the control plane forms a direct
    /// session's `connectUrl` when it answers, from `publicIP`, `proxyPort` and the token.
    pub const TASK_READS: [&str; 10] = [
        SESSION_ID,
        INTERNAL_STATUS,
        KEEP_ALIVE,
        EXPIRES_AT,
        PROJECT_ID,
        READY_AT,
        ENDED_AT,
        CLAIM_DEADLINE,
        OWNER,
        OWNER_UNTIL,
    ];

    /// Every attribute a browser controller's `UpdateItem` names (key, condition and update
    /// expressions: IAM's `dynamodb:Attributes` counts them all), and exactly the attributes
    /// the task role may write. Not the token, `connectUrl`, `projectId`, `contextId` or any
    /// other attribute the API wrote for the session.
    pub const TASK_WRITES: [&str; 18] = [
        SESSION_ID,
        INTERNAL_STATUS,
        STATUS,
        OWNER,
        OWNER_UNTIL,
        ECS_TASK_ARN,
        PUBLIC_IP,
        PRIVATE_IP,
        PROXY_PORT,
        UPLOADS_DIR,
        READY_AT,
        UPDATED_AT,
        TERMINATION_REASON,
        ENDED_AT,
        PROXY_BYTES,
        DOWNLOADS_IN_PROGRESS,
        CLAIM_DEADLINE,
        HANDOFF,
    ];

    /// Every attribute the connect gateway reads of a session item (where to route, and
    /// whether it may): its `ProjectionExpression` and the gateway role's `dynamodb:Attributes`.
    /// Not the token: the gateway checks the token's signature, never compares it.
    pub const GATEWAY_READS: [&str; 5] = [
        SESSION_ID,
        INTERNAL_STATUS,
        PRIVATE_IP,
        PROXY_PORT,
        ENDED_AT,
    ];
}

/// `<base>/?signingKey=<token>`: a connect URL through the connect gateway, formed at create
/// from its base URL (`ws://127.0.0.1:PORT`, `wss://connect.example.com`). The path is `/`:
/// tungstenite-based clients send a path-less URL's empty path as is, which servers refuse.
pub fn gateway_connect_url(base: &str, signing_key: &str) -> String {
    format!("{}/?signingKey={signing_key}", base.trim_end_matches('/'))
}

/// `ws://<publicIP>:<port>/?signingKey=<token>`, the URL clients connect to (a task's own
/// address, `local`'s). The path is `/`, as in [`gateway_connect_url`].
pub fn connect_url(public_ip: &str, port: u16, signing_key: &str) -> String {
    let host = if public_ip.contains(':') {
        format!("[{public_ip}]")
    } else {
        public_ip.to_owned()
    };
    format!("ws://{host}:{port}/?signingKey={signing_key}")
}
