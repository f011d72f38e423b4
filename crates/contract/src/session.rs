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
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        assert_eq!(InternalStatus::parse("running"), None);
    }

    #[test]
    fn only_pending_states_may_become_ready() {
        let ready: Vec<_> = InternalStatus::ALL.into_iter().filter(|s| s.may_become_ready()).collect();
        assert_eq!(ready, [InternalStatus::Creating, InternalStatus::Provisioning, InternalStatus::Starting]);
    }
}
