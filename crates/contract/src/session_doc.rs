//! The session item as a document: the same attributes as the `wallcrawler-sessions` DynamoDB
//! item, used by the control plane's API model and — one JSON file per session in a directory —
//! as the local platform's session table, shared by the local API and the controllers it starts
//! (the directory itself is `wallcrawler_local::session_dir::DirStore`).

use serde::{Deserialize, Serialize};

use crate::claim::{ClaimWait, NO_BROWSER_IN_TIME, UNSERVED_STATUS, lapsed};
use crate::session::InternalStatus;

/// A pending handoff (`handoff`, see [`crate::session::attr::HANDOFF`]): a client of the
/// session asked for a person with `Wallcrawler.requestHandoff`; removed when it ends (done,
/// timed out, or its client gone). Shown by `GET /v1/sessions/{id}/debug`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handoff {
    /// `handoffId` (`ho_<hex>`).
    pub id: String,
    /// The client's reason (at most 1000 characters).
    pub reason: String,
    /// ISO 8601, when it was asked for.
    pub requested_at: String,
    /// ISO 8601, when it times out.
    pub expires_at: String,
}

/// One session. Field names are the table's attribute names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDoc {
    /// `sessionId`: `sess_<uuid>`.
    pub session_id: String,
    /// SDK-visible status.
    pub status: String,
    /// `internalStatus`: the detailed lifecycle status.
    pub internal_status: String,
    /// `projectId`: the owning project.
    pub project_id: String,
    /// `createdAt`: ISO 8601.
    pub created_at: String,
    /// `updatedAt`: ISO 8601, the last status write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// `startedAt`: ISO 8601, when the task was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// `readyAt`: ISO 8601, when the controller announced READY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<String>,
    /// `endedAt`: ISO 8601, written last (after any profile upload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Unix seconds.
    #[serde(deserialize_with = "crate::whole::required")]
    pub expires_at: u64,
    /// `keepAlive`: survives its clients disconnecting.
    #[serde(default)]
    pub keep_alive: bool,
    /// `region`: the region the session was asked for.
    #[serde(default)]
    pub region: String,
    /// `publicIP`: the address clients connect to.
    #[serde(rename = "publicIP", default, skip_serializing_if = "Option::is_none")]
    pub public_ip: Option<String>,
    /// `privateIP`: the task's own address, where the connect gateway dials it (READY).
    #[serde(rename = "privateIP", default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    /// `proxyPort`: the task's proxy port at `privateIP` (READY).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_port: Option<u16>,
    /// `uploadsDir`: the directory on the browser's disk the session's uploads are brought
    /// into (READY), so the API can tell a client the path to name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploads_dir: Option<String>,
    /// `ecsTaskArn`: the task serving the session, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecs_task_arn: Option<String>,
    /// `connectUrl`: a connect URL with its token, in items written before the token left the
    /// item (behind the gateway, `<gateway>/?signingKey=<token>`). Never written now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_url: Option<String>,
    /// `connectBase`: behind the connect gateway, its base URL (no token), from the create on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_base: Option<String>,
    /// `signingKey`: the session's CDP access token. Never stored now (the item, and so the
    /// table's stream, holds no token): the API mints it again from [`Self::token_claims`]
    /// when it answers; older items may still hold it, and then it is the one answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key: Option<String>,
    /// `contextId`: the context whose profile the session uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// `contextPersist`: the profile is uploaded again at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_persist: Option<bool>,
    /// `contextStorageKey`: the archive's key, `<projectId>/<contextId>/profile.tar.gz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_storage_key: Option<String>,
    /// `extensionId`: the extension the session was created with (`ext_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_id: Option<String>,
    /// `extensionKey`: that extension's archive, `extensions/<projectId>/<sha256>.zip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_key: Option<String>,
    /// `proxyBytes`: bytes relayed, both directions together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::optional"
    )]
    pub proxy_bytes: Option<u64>,
    /// `terminationReason`: why a FAILED session failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_reason: Option<String>,
    /// `userMetadata`: the client's free-form JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<serde_json::Value>,
    /// `claimDeadline`: Unix seconds after which no client waits for a browser (see
    /// [`crate::claim::ClaimWait`]). Absent (older items), or not a whole number: no deadline.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::lenient"
    )]
    pub claim_deadline: Option<u64>,
    /// `handoff`: the pending handoff to a person, if any (see [`Handoff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
    /// `owner`: the controller that took the session's claim (see
    /// [`crate::session::attr::OWNER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `ownerUntil`: Unix seconds, the lease of an owner that has not written READY yet.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::lenient"
    )]
    pub owner_until: Option<u64>,
    /// `downloadsInProgress`: downloads the session's browser has begun and the controller
    /// has not stored (or dropped) yet; written by the session's owner only. While it is above
    /// zero and the session has not ended, its downloads are not complete.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole::lenient"
    )]
    pub downloads_in_progress: Option<u64>,
    /// `usageCounted`: the session's minutes and bytes are in its project's usage total (set
    /// by the same write that adds them, on condition it was not set: counted once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_counted: Option<bool>,
}

impl SessionDoc {
    /// The internal status; `None` when the stored string is none of them.
    pub fn internal(&self) -> Option<InternalStatus> {
        InternalStatus::parse(&self.internal_status)
    }

    /// Sets both status attributes from the internal one.
    pub fn set_status(&mut self, s: InternalStatus) {
        self.internal_status = s.as_str().to_owned();
        self.status = s.sdk_status().as_str().to_owned();
    }

    /// The `connectUrl` a client is given, formed with the token (`signingKey`, filled by the
    /// API when it answers): the connect gateway's (`connectBase`, written at create), else
    /// the serving task's own address (`publicIP`, `proxyPort`, both written with READY). An
    /// older item's stored `connectUrl` wins. Tasks never read the token, so they never write
    /// a `connectUrl`.
    pub fn client_connect_url(&self) -> Option<String> {
        if let Some(url) = &self.connect_url {
            return Some(url.clone());
        }
        let token = self.signing_key.as_deref()?;
        if let Some(base) = &self.connect_base {
            return Some(crate::session::gateway_connect_url(base, token));
        }
        Some(crate::session::connect_url(
            self.public_ip.as_deref()?,
            self.proxy_port?,
            token,
        ))
    }

    /// The claims of the session's token: [`crate::token::Claims::for_session`] from the
    /// item's own `sessionId`, `projectId`, `createdAt` (whole seconds) and `expiresAt`, so
    /// the token minted at create and every one minted again from the item are the same.
    /// `None` when `createdAt` does not parse.
    pub fn token_claims(&self) -> Option<crate::token::Claims> {
        let issued = crate::time::parse_iso8601(&self.created_at)? / 1000;
        Some(crate::token::Claims::for_session(
            &self.session_id,
            &self.project_id,
            issued,
            self.expires_at,
        ))
    }

    /// Whether the session was created behind the connect gateway (its `connectUrl` works
    /// from the create on).
    pub fn behind_gateway(&self) -> bool {
        self.connect_base.is_some() || self.connect_url.is_some()
    }

    /// Whether the session still waits for a browser (CREATING, PROVISIONING, STARTING).
    pub fn pending(&self) -> bool {
        self.internal()
            .is_some_and(InternalStatus::may_become_ready)
    }

    /// The `claimDeadline` a client's poll at `now` (Unix seconds) sets: only while the session
    /// is pending, only on an item that has a deadline, never past `createdAt` + `w.max`;
    /// `None` when it stays as it is.
    pub fn polled_deadline(&self, w: ClaimWait, now: u64) -> Option<u64> {
        if !self.pending() {
            return None;
        }
        let created = crate::time::parse_iso8601(&self.created_at)? / 1000;
        w.on_poll(created, self.claim_deadline?, now)
    }

    /// The conditional rule of a deadline's extension: `to`, if the session is still pending
    /// and `to` is later than its deadline. Whether it was written.
    pub fn extend_claim(&mut self, to: u64) -> bool {
        let later = self.claim_deadline.is_some_and(|d| d < to);
        if self.pending() && later {
            self.claim_deadline = Some(to);
        }
        self.pending() && later
    }

    /// The conditional rule of ending a session no browser took in time: only while it is
    /// pending and its deadline has passed at `now`; then [`UNSERVED_STATUS`] with
    /// [`NO_BROWSER_IN_TIME`], and `endedAt` (no controller served it: nothing else would
    /// write it). Whether it was written.
    pub fn end_unserved(&mut self, now: u64, at: &str) -> bool {
        if !self.pending() || !lapsed(self.claim_deadline, now) {
            return false;
        }
        self.set_status(UNSERVED_STATUS);
        self.termination_reason = Some(NO_BROWSER_IN_TIME.to_owned());
        self.ended_at = Some(at.to_owned());
        self.updated_at = Some(at.to_owned());
        true
    }

    /// The owner that holds the session at `now` (Unix seconds): one that wrote READY (no
    /// lease) or whose lease has not lapsed; `None` when nobody does.
    pub fn live_owner(&self, now: u64) -> Option<&str> {
        live_owner(self.owner.as_deref(), self.owner_until, now)
    }

    /// The conditional rule of taking a claimed session: only while it is pending and nobody
    /// else holds it (no owner, `me` already, or a lapsed lease); then `me` owns it until
    /// `until`, and `ecsTaskArn` names `task` (so a release stops it even before READY).
    /// Whether it was written.
    pub fn take(&mut self, t: &Take<'_>) -> bool {
        let free = self.live_owner(t.now).is_none_or(|o| o == t.owner);
        if !self.pending() || !free {
            return false;
        }
        self.owner = Some(t.owner.to_owned());
        self.owner_until = Some(t.until);
        if let Some(task) = t.task {
            self.ecs_task_arn = Some(task.to_owned());
        }
        true
    }

    /// Whether `me` owns the session.
    pub fn owned_by(&self, me: &str) -> bool {
        self.owner.as_deref() == Some(me)
    }

    /// The conditional rule of an owner's lease kept alive: only `me`'s, only while pending.
    pub fn keep_owner(&mut self, me: &str, until: u64) -> bool {
        if !self.owned_by(me) || !self.pending() {
            return false;
        }
        self.owner_until = Some(until);
        true
    }

    /// The conditional rule of an owner giving the session up before READY (it is being
    /// stopped and hands the claim back): only `me`, only while pending; the owner, its lease
    /// and the task it named are removed, so the next controller takes it at once.
    pub fn give_up(&mut self, me: &str) -> bool {
        if !self.owned_by(me) || !self.pending() {
            return false;
        }
        self.owner = None;
        self.owner_until = None;
        self.ecs_task_arn = None;
        true
    }

    /// The conditional rule of the downloads counter: written by whoever may write the end
    /// ([`Self::may_end`]).
    pub fn set_downloads_in_progress(&mut self, me: &str, now: u64, count: u64) -> bool {
        if !self.may_end(me, now) {
            return false;
        }
        self.downloads_in_progress = Some(count);
        true
    }

    /// The conditional rule of `handoff`: written (or removed, `None`) by whoever may write
    /// the end ([`Self::may_end`]).
    pub fn set_handoff(&mut self, me: &str, now: u64, handoff: Option<Handoff>) -> bool {
        if !self.may_end(me, now) {
            return false;
        }
        self.handoff = handoff;
        true
    }

    /// Whether a controller `me` may write the session's end (`proxyBytes`, `endedAt`) at
    /// `now`: its owner, or anyone when nobody holds it (a session released before any
    /// controller served it: nobody else would write it).
    pub fn may_end(&self, me: &str, now: u64) -> bool {
        self.owned_by(me) || self.live_owner(now).is_none()
    }
}

/// A controller taking a claimed session ([`SessionDoc::take`]).
#[derive(Debug, Clone, Copy)]
pub struct Take<'a> {
    /// The controller (`owner`).
    pub owner: &'a str,
    /// Its lease, Unix seconds (`ownerUntil`).
    pub until: u64,
    /// The task it runs in, for `ecsTaskArn` (`None`: left as it is).
    pub task: Option<&'a str>,
    /// Now, Unix seconds.
    pub now: u64,
}

/// The owner that holds a session at `now`: one without a lease (it wrote READY) or whose
/// lease has not lapsed.
pub fn live_owner(owner: Option<&str>, until: Option<u64>, now: u64) -> Option<&str> {
    owner.filter(|_| until.is_none_or(|u| u >= now))
}

/// What a claim taken from the queue comes to, judged against its session's item: the rules
/// of a pool controller's judgement (the controller's `modes::pool`), which the control
/// plane's task API applies when it hands claims to tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// Pending and free: take it for the caller, and serve it.
    Serve,
    /// Pending past its claim's deadline: no client waits any more. The session is ended
    /// unserved ([`SessionDoc::end_unserved`]) and the claim deleted.
    Unserved,
    /// Pending, held by another live owner: the claim goes back to the queue, visible again
    /// when that owner's lease (`ownerUntil`; `None`: none known) ends, so that the session is
    /// still served should that owner die first. Never deleted.
    HandBack {
        /// The other owner's lease.
        until: Option<u64>,
    },
    /// Deleted unserved, with the reason for the log; `end`: the session ended before anyone
    /// served it, and whoever drops the claim writes its `endedAt` (nobody else would).
    Discard {
        /// Why, for the log.
        why: String,
        /// Write `endedAt`.
        end: bool,
    },
}

/// What a claim's verdict reads of its session's item: the same few attributes whether the
/// whole document (the control plane's) or the controller's projection of it.
#[derive(Debug, Clone, Copy)]
pub struct ClaimFacts<'a> {
    /// `projectId`.
    pub project_id: Option<&'a str>,
    /// `internalStatus`, when known.
    pub status: Option<InternalStatus>,
    /// `owner` and `ownerUntil`.
    pub owner: Option<&'a str>,
    /// `ownerUntil` (Unix seconds).
    pub owner_until: Option<u64>,
    /// `claimDeadline` (Unix seconds).
    pub claim_deadline: Option<u64>,
    /// `readyAt` is set.
    pub ever_ready: bool,
    /// `endedAt` is set.
    pub ended: bool,
}

impl SessionDoc {
    /// What a claim's verdict reads of this item.
    pub fn claim_facts(&self) -> ClaimFacts<'_> {
        ClaimFacts {
            project_id: Some(&self.project_id),
            status: self.internal(),
            owner: self.owner.as_deref(),
            owner_until: self.owner_until,
            claim_deadline: self.claim_deadline,
            ever_ready: self.ready_at.is_some(),
            ended: self.ended_at.is_some(),
        }
    }
}

/// The verdict on `claim` given its session item's facts (`None`: no such session) at `now`
/// (Unix seconds), for the would-be owner `me`.
pub fn claim_verdict(
    claim: &crate::claim::Claim,
    doc: Option<ClaimFacts<'_>>,
    now: u64,
    me: &str,
) -> ClaimVerdict {
    let Some(doc) = doc else {
        return ClaimVerdict::Discard {
            why: "the session does not exist".into(),
            end: false,
        };
    };
    if doc.project_id != Some(claim.project_id.as_str()) {
        return ClaimVerdict::Discard {
            why: "the claim names another project than the session".into(),
            end: false,
        };
    }
    let held = live_owner(doc.owner, doc.owner_until, now).is_some_and(|o| o != me);
    if doc.status.is_some_and(InternalStatus::may_become_ready) {
        return if held {
            ClaimVerdict::HandBack {
                until: doc.owner_until,
            }
        } else if lapsed(doc.claim_deadline, now) {
            ClaimVerdict::Unserved
        } else {
            ClaimVerdict::Serve
        };
    }
    ClaimVerdict::Discard {
        why: format!(
            "the session is {}, no longer waiting for a browser",
            doc.status
                .map_or("without a status", InternalStatus::as_str)
        ),
        // Only a session nobody served nor holds: one that was served gets `endedAt` from
        // its controller, last, after saving its context.
        end: doc.status.is_some_and(InternalStatus::is_terminal)
            && !doc.ever_ready
            && !doc.ended
            && !held,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc(id: &str) -> SessionDoc {
        let mut d = SessionDoc {
            session_id: id.into(),
            project_id: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 5,
            ..Default::default()
        };
        d.set_status(InternalStatus::Creating);
        d
    }

    #[test]
    fn a_direct_session_s_connect_url_is_formed_from_its_route_and_token() {
        let mut d = doc("sess_1");
        d.signing_key = Some("t.k.n".into());
        assert_eq!(d.client_connect_url(), None, "no route yet");
        d.public_ip = Some("203.0.113.7".into());
        d.proxy_port = Some(9223);
        assert_eq!(
            d.client_connect_url().as_deref(),
            Some("ws://203.0.113.7:9223/?signingKey=t.k.n")
        );
        d.connect_base = Some("wss://gw.example".into());
        assert_eq!(
            d.client_connect_url().as_deref(),
            Some("wss://gw.example/?signingKey=t.k.n"),
            "the gateway's base, written at create, wins"
        );
        d.signing_key = None;
        assert_eq!(d.client_connect_url(), None, "no URL without the token");
        d.connect_url = Some("wss://old.example/?signingKey=o.l.d".into());
        assert_eq!(
            d.client_connect_url().as_deref(),
            Some("wss://old.example/?signingKey=o.l.d"),
            "an older item's stored URL is answered as it is"
        );
    }

    #[test]
    fn the_token_claims_are_the_items_own() {
        let mut d = doc("sess_1");
        d.created_at = "2026-01-01T00:00:10.999Z".into();
        d.expires_at = 1_767_225_910;
        let c = d.token_claims().unwrap();
        assert_eq!(
            c,
            crate::token::Claims::for_session("sess_1", "p", 1_767_225_610, 1_767_225_910)
        );
        d.created_at = "yesterday".into();
        assert_eq!(d.token_claims(), None);
    }

    #[test]
    fn attribute_names_match_the_table() {
        let mut d = doc("sess_1");
        d.public_ip = Some("1.2.3.4".into());
        d.private_ip = Some("10.0.0.5".into());
        d.proxy_port = Some(9223);
        d.proxy_bytes = Some(7);
        let v = serde_json::to_value(&d).unwrap();
        for k in [
            "sessionId",
            "status",
            "internalStatus",
            "projectId",
            "createdAt",
            "expiresAt",
            "keepAlive",
            "publicIP",
            "privateIP",
            "proxyPort",
            "proxyBytes",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["internalStatus"], "CREATING");
        assert_eq!(v["status"], "PENDING");
    }

    #[test]
    fn polls_extend_the_deadline_only_while_pending_and_an_unserved_end_needs_it_past() {
        let w = ClaimWait { wait: 60, max: 600 };
        // createdAt 2026-01-01T00:00:00Z.
        let created = 1_767_225_600;
        let mut d = doc("sess_1");
        d.created_at = "2026-01-01T00:00:00.000Z".into();
        assert_eq!(
            d.polled_deadline(w, created + 10),
            None,
            "no deadline: none made"
        );
        d.claim_deadline = Some(w.at_create(created));
        assert_eq!(d.polled_deadline(w, created + 10), Some(created + 70));
        assert_eq!(
            d.polled_deadline(w, created + 900),
            Some(created + 600),
            "capped"
        );
        assert!(d.extend_claim(created + 70));
        assert!(!d.extend_claim(created + 65), "never backwards");
        assert!(!d.end_unserved(created + 70, "t"), "not past yet");
        d.set_status(InternalStatus::Ready);
        assert_eq!(
            d.polled_deadline(w, created + 20),
            None,
            "READY: no extension"
        );
        assert!(!d.extend_claim(created + 90));
        assert!(
            !d.end_unserved(created + 999, "t"),
            "READY is never ended as unserved"
        );
        d.set_status(InternalStatus::Provisioning);
        assert!(d.end_unserved(created + 71, "2026-01-01T00:01:11.000Z"));
        assert_eq!(d.internal(), Some(InternalStatus::TimedOut));
        assert_eq!(d.status, "TIMED_OUT");
        assert_eq!(d.termination_reason.as_deref(), Some(NO_BROWSER_IN_TIME));
        assert_eq!(d.ended_at.as_deref(), Some("2026-01-01T00:01:11.000Z"));
        assert!(!d.end_unserved(created + 72, "t"), "once");
    }

    #[test]
    fn a_session_has_one_owner_and_only_a_lapsed_lease_passes_it_on() {
        let take = |d: &mut SessionDoc, owner: &str, now: u64| {
            d.take(&Take {
                owner,
                until: now.saturating_add(60),
                task: Some(owner),
                now,
            })
        };
        let mut d = doc("sess_1");
        assert!(take(&mut d, "a", 1_000), "nobody holds it");
        assert_eq!(
            (d.owner.as_deref(), d.owner_until, d.ecs_task_arn.as_deref()),
            (Some("a"), Some(1_060), Some("a"))
        );
        // The same claim delivered twice: the second controller is refused while a's lease runs.
        assert!(!take(&mut d, "b", 1_030));
        assert!(!d.keep_owner("b", 1_090), "only the owner keeps the lease");
        assert!(!d.give_up("b"), "only the owner gives it up");
        assert!(!d.may_end("b", 1_030), "nor writes its end");
        assert!(take(&mut d, "a", 1_030), "the owner again: still its own");
        assert!(d.keep_owner("a", 1_100));
        assert!(
            !take(&mut d, "b", 1_100),
            "a lease is live until its second has passed"
        );
        // a dies before READY: once its lease lapses, b takes the session over.
        assert!(take(&mut d, "b", 1_101));
        assert!(d.owned_by("b") && !d.owned_by("a"));
        assert!(!d.keep_owner("a", 1_200), "a lost it");
        assert!(!d.may_end("a", 1_101));
        // b gives it up (it is being stopped): free at once, for anyone.
        assert!(d.give_up("b"));
        assert_eq!(
            (d.owner.clone(), d.owner_until, d.ecs_task_arn.clone()),
            (None, None, None)
        );
        assert!(
            d.may_end("c", 1_101),
            "a session nobody holds: anyone ends it"
        );
        assert!(take(&mut d, "c", 1_102));
        // READY: the owner holds it for good (no lease), and nobody takes a READY session.
        d.set_status(InternalStatus::Ready);
        d.owner_until = None;
        assert_eq!(d.live_owner(u64::MAX), Some("c"));
        assert!(!take(&mut d, "d", u64::MAX));
        assert!(!d.give_up("c"), "a READY session is never given up");
        assert!(!d.may_end("d", u64::MAX) && d.may_end("c", u64::MAX));
        // A released session nobody took: anyone may write its end.
        let mut released = doc("sess_2");
        released.set_status(InternalStatus::Stopped);
        assert!(!take(&mut released, "a", 1), "never taken once over");
        assert!(released.may_end("a", 1));
    }

    #[test]
    fn owner_attributes_round_trip_under_their_table_names() {
        let mut d = doc("sess_1");
        d.owner = Some("arn:aws:ecs:us-east-1:1:task/c/t".into());
        d.owner_until = Some(1_700_000_060);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v[crate::session::attr::OWNER],
            "arn:aws:ecs:us-east-1:1:task/c/t"
        );
        assert_eq!(v[crate::session::attr::OWNER_UNTIL], 1_700_000_060);
        assert_eq!(serde_json::from_value::<SessionDoc>(v).unwrap(), d);
    }

    #[test]
    fn a_deadline_of_another_shape_reads_as_none() {
        let mut v = serde_json::to_value(doc("sess_1")).unwrap();
        for odd in [json!("soon"), json!(1.5), json!({"x": 1}), json!(null)] {
            v["claimDeadline"] = odd.clone();
            let d: SessionDoc = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(d.claim_deadline, None, "{odd}");
        }
        v["claimDeadline"] = json!(1_700_000_000.0);
        let d: SessionDoc = serde_json::from_value(v).unwrap();
        assert_eq!(d.claim_deadline, Some(1_700_000_000));
    }

    #[test]
    fn a_claim_is_served_only_while_its_session_waits_and_nobody_else_holds_it() {
        use crate::claim::Claim;
        let claim = Claim {
            session_id: "s".into(),
            project_id: "p".into(),
            context: None,
            extension_key: None,
            egress: None,
            browser: None,
        };
        let now = 100;
        let mut d = doc("s");
        d.claim_deadline = Some(now + 10);
        let judge = |d: &SessionDoc| claim_verdict(&claim, Some(d.claim_facts()), now, "me");
        assert_eq!(judge(&d), ClaimVerdict::Serve);
        assert_eq!(
            claim_verdict(&claim, None, now, "me"),
            ClaimVerdict::Discard {
                why: "the session does not exist".into(),
                end: false
            }
        );
        let mut other = d.clone();
        other.project_id = "q".into();
        assert!(matches!(
            judge(&other),
            ClaimVerdict::Discard { end: false, .. }
        ));

        // Held by another live owner: back until its lease ends; a lapsed lease or our own
        // is no hold.
        let mut held = d.clone();
        held.owner = Some("them".into());
        held.owner_until = Some(now + 30);
        assert_eq!(
            judge(&held),
            ClaimVerdict::HandBack {
                until: Some(now + 30)
            }
        );
        held.owner_until = Some(now - 1);
        assert_eq!(judge(&held), ClaimVerdict::Serve);
        held.owner = Some("me".into());
        held.owner_until = Some(now + 30);
        assert_eq!(judge(&held), ClaimVerdict::Serve);

        let mut lapsed = d.clone();
        lapsed.claim_deadline = Some(now - 1);
        assert_eq!(judge(&lapsed), ClaimVerdict::Unserved);

        // Released before anyone served it: dropped, and its `endedAt` written by whoever
        // drops it; served (READY once) or ended already: dropped, nothing written.
        let mut released = d.clone();
        released.set_status(InternalStatus::Stopped);
        assert_eq!(
            judge(&released),
            ClaimVerdict::Discard {
                why: "the session is STOPPED, no longer waiting for a browser".into(),
                end: true
            }
        );
        let mut served = released.clone();
        served.ready_at = Some("2026-01-01T00:00:01.000Z".into());
        assert!(matches!(
            judge(&served),
            ClaimVerdict::Discard { end: false, .. }
        ));
        let mut ended = released;
        ended.ended_at = Some("2026-01-01T00:00:01.000Z".into());
        assert!(matches!(
            judge(&ended),
            ClaimVerdict::Discard { end: false, .. }
        ));
        let mut ready = d;
        ready.set_status(InternalStatus::Ready);
        assert!(matches!(
            judge(&ready),
            ClaimVerdict::Discard { end: false, .. }
        ));
    }
}
