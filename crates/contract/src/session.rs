//! Session lifecycle statuses: the detailed `internalStatus` and the SDK-visible `status`.

use serde::{Deserialize, Serialize};

/// Detailed lifecycle status kept in `internalStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum InternalStatus {
    Creating,
    Provisioning,
    Starting,
    Ready,
    Active,
    Terminating,
    Stopped,
    Failed,
    TimedOut,
}

/// Browserbase's status, kept in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SdkStatus {
    Pending,
    Running,
    Completed,
    Error,
    TimedOut,
}

impl InternalStatus {
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

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl SdkStatus {
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
    pub const SESSION_ID: &str = "sessionId";
    pub const STATUS: &str = "status";
    pub const INTERNAL_STATUS: &str = "internalStatus";
    pub const PROJECT_ID: &str = "projectId";
    pub const CREATED_AT: &str = "createdAt";
    pub const UPDATED_AT: &str = "updatedAt";
    pub const STARTED_AT: &str = "startedAt";
    pub const READY_AT: &str = "readyAt";
    pub const ENDED_AT: &str = "endedAt";
    pub const EXPIRES_AT: &str = "expiresAt";
    pub const KEEP_ALIVE: &str = "keepAlive";
    pub const REGION: &str = "region";
    pub const PUBLIC_IP: &str = "publicIP";
    pub const ECS_TASK_ARN: &str = "ecsTaskArn";
    pub const CONNECT_URL: &str = "connectUrl";
    pub const SIGNING_KEY: &str = "signingKey";
    pub const CONTEXT_ID: &str = "contextId";
    pub const CONTEXT_PERSIST: &str = "contextPersist";
    pub const CONTEXT_STORAGE_KEY: &str = "contextStorageKey";
    pub const PROXY_BYTES: &str = "proxyBytes";
    pub const TERMINATION_REASON: &str = "terminationReason";
    pub const USER_METADATA: &str = "userMetadata";
}

/// `ws://<publicIP>:<port>?signingKey=<token>`, the URL clients connect to.
pub fn connect_url(public_ip: &str, port: u16, signing_key: &str) -> String {
    let host = if public_ip.contains(':') {
        format!("[{public_ip}]")
    } else {
        public_ip.to_owned()
    };
    format!("ws://{host}:{port}?signingKey={signing_key}")
}
