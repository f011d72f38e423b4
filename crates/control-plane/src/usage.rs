//! Usage as a running total: `GET /v1/projects/{id}/usage` reads one item per project, never
//! the project's history. A session's minutes (`endedAt` − `startedAt`, rounded up) and proxy
//! bytes are added once, when the API learns that it ended — the ECS task-state handler, the
//! local launcher when its controller exits, a create reclaiming its slot, a failed start —
//! by one write that adds to the total and marks the session counted (`usageCounted`), on
//! condition that it was not ([`SessionStore::count_usage`]). Two paths learning it at once
//! count it once. Sessions still running, or whose end the API has not learned yet, are not in
//! the figure.

use tracing::warn;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::time::parse_iso8601;

use crate::stores::{SessionStore, Usage};

/// What an ended session used; `None` while it has not ended (no `endedAt`).
pub fn of_session(d: &SessionDoc) -> Option<Usage> {
    let end = parse_iso8601(d.ended_at.as_deref()?)?;
    let start = d
        .started_at
        .as_deref()
        .and_then(parse_iso8601)
        .or_else(|| parse_iso8601(&d.created_at))
        .unwrap_or(end);
    Some(Usage {
        browser_minutes: end.saturating_sub(start).div_ceil(60_000),
        proxy_bytes: d.proxy_bytes.unwrap_or(0),
    })
}

/// Adds an ended session's usage to its project's total, unless it is counted already or has
/// not ended. A failure is logged: the session stays uncounted, and the next path that learns
/// of its end counts it.
pub async fn count(sessions: &dyn SessionStore, d: &SessionDoc) {
    let Some(used) = of_session(d) else { return };
    if d.usage_counted == Some(true) {
        return;
    }
    if let Err(e) = sessions
        .count_usage(&d.session_id, &d.project_id, used)
        .await
    {
        warn!(session.id = %d.session_id, error = %crate::error::chain(&e), "adding the session's usage to its project's total failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_session_uses_its_minutes_rounded_up_and_its_bytes() {
        let mut d = SessionDoc {
            created_at: "2026-01-01T00:00:00.000Z".into(),
            started_at: Some("2026-01-01T00:00:30.000Z".into()),
            proxy_bytes: Some(7),
            ..Default::default()
        };
        assert_eq!(of_session(&d), None, "not ended");
        d.ended_at = Some("2026-01-01T00:02:30.001Z".into());
        assert_eq!(
            of_session(&d),
            Some(Usage {
                browser_minutes: 3,
                proxy_bytes: 7
            })
        );
        d.started_at = None;
        d.ended_at = Some("2026-01-01T00:00:00.000Z".into());
        assert_eq!(of_session(&d).unwrap().browser_minutes, 0);
    }
}
