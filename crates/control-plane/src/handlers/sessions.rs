//! `/v1/sessions…`: create, list, read, update (release), and the debug (live view) answer.

use std::time::Duration;
use tokio::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::Value;
use tracing::{info, warn};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::browser::BrowserSettings;
use wallcrawler_contract::egress::Egress;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::viewer::ViewerClaims;

use super::contexts::own_context;
use super::{ApiResult, PathId, REGIONS, TIMEOUT_RANGE, own_session, parse_body};
use crate::app::App;
use crate::auth::{Caller, Principal, check_body_project};
use crate::error::{ApiError, chain};
use crate::metadata::MetadataQuery;
use crate::model::{ContextRecord, session_create_to_api, session_to_api};
use crate::stores::{Cond, LaunchSpec, PageAt, Terminal};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContextSettings {
    id: Option<String>,
    #[serde(default)]
    persist: bool,
}

/// The `browserSettings` fields the handler reads itself.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BrowserFields {
    context: Option<ContextSettings>,
    /// Browserbase takes the extension at the top level or here.
    extension_id: Option<String>,
    /// Checked by [`crate::egress::session_egress`] (kept as JSON for its exact refusals).
    allowed_domains: Option<Value>,
    // The rest (viewport, fingerprint, blockAds, …) and every field's type:
    // [`crate::browser_settings::read`], from the body as JSON.
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateSession {
    project_id: Option<String>,
    browser_settings: Option<BrowserFields>,
    keep_alive: Option<bool>,
    timeout: Option<Value>,
    region: Option<String>,
    user_metadata: Option<Value>,
    extension_id: Option<String>,
    /// Checked by [`crate::egress::session_egress`] (kept as JSON for its exact refusals).
    proxies: Option<Value>,
}

fn timeout_of(v: &Option<Value>, default: u64) -> Result<u64, ApiError> {
    let Some(v) = v else { return Ok(default) };
    let t = v.as_u64().ok_or_else(|| {
        ApiError::bad_request(format!(
            "timeout must be a whole number of seconds, got {v}"
        ))
    })?;
    if !TIMEOUT_RANGE.contains(&t) {
        return Err(ApiError::bad_request(format!(
            "timeout must be between {} and {} seconds, got {t}",
            TIMEOUT_RANGE.start(),
            TIMEOUT_RANGE.end()
        )));
    }
    Ok(t)
}

/// A new session's `claimDeadline`: the claim wait from `now`, and never before the create's own
/// wait for READY is over (its client is waiting all that time).
fn claim_deadline(settings: &crate::app::Settings, now: u64) -> u64 {
    let create_wait = settings.create_wait.as_secs();
    settings
        .claim_wait
        .at_create(now)
        .max(now.saturating_add(create_wait))
}

/// A validated create request.
struct NewSession {
    timeout: u64,
    region: String,
    keep_alive: bool,
    user_metadata: Option<Value>,
    context: Option<(ContextRecord, bool)>,
    /// The extension's id and archive key.
    extension: Option<(String, String)>,
    /// Proxy routes and allowed domains: for the launch only, never in the item (proxy
    /// passwords are in it).
    egress: Option<Egress>,
    /// The browser asked for (viewport, locales, …): for the launch only.
    browser: Option<BrowserSettings>,
}

impl NewSession {
    /// The session's item (CREATING) for session `id` of `project_id`, created now, with its
    /// claim's deadline ([`claim_deadline`]) and, behind the connect gateway, its base URL. No
    /// token: the API mints it when it answers ([`with_token`]), so neither the item nor the
    /// table's stream ever holds one.
    fn into_doc(self, app: &App, id: &str, project_id: &str) -> SessionDoc {
        let now_ms = app.clock.now_millis();
        let now = wallcrawler_contract::time::iso8601_millis(now_ms);
        let mut doc = SessionDoc {
            claim_deadline: Some(claim_deadline(&app.settings, now_ms / 1000)),
            session_id: id.to_owned(),
            project_id: project_id.to_owned(),
            created_at: now.clone(),
            updated_at: Some(now.clone()),
            started_at: Some(now),
            expires_at: now_ms / 1000 + self.timeout,
            keep_alive: self.keep_alive,
            region: self.region,
            connect_base: app.settings.connect_base.clone(),
            user_metadata: self.user_metadata,
            ..Default::default()
        };
        doc.set_status(InternalStatus::Creating);
        if let Some((c, persist)) = self.context {
            doc.context_id = Some(c.context_id);
            doc.context_persist = Some(persist);
            doc.context_storage_key = Some(c.storage_key);
        }
        if let Some((id, key)) = self.extension {
            doc.extension_id = Some(id);
            doc.extension_key = Some(key);
        }
        doc
    }
}

/// Whether a new session, its slot taken, is beyond its project's share of the warm pool
/// (`pool_share`): the project then holds more slots than the share. Read after the take and
/// strongly consistently, so of simultaneous creates the k-th reads at least k: at most
/// `share` of them go warm. (Every active session counts, warm or cold: see docs/capacity.md.)
async fn beyond_share(app: &App, project_id: &str) -> Result<bool, ApiError> {
    let Some(share) = app.settings.pool_share else {
        return Ok(false);
    };
    let held = app.slots.held(project_id).await?;
    if held > share {
        info!(project.id = %project_id, held, share, "beyond the project's share of the warm pool; the session gets a controller of its own");
    }
    Ok(held > share)
}

/// Everything between taking the slot and the task's start: the launch choice (warm or cold),
/// the item (CREATING) and the launch. On failure the caller gives slot and lease
/// back.
async fn start_session(
    app: &App,
    p: &Principal,
    mut new: NewSession,
    id: &str,
) -> Result<(SessionDoc, Option<String>), ApiError> {
    let cold = beyond_share(app, p.project_id()).await?;
    let context = new
        .context
        .as_ref()
        .map(|(c, persist)| (c.context_id.clone(), c.storage_key.clone(), *persist));
    let extension = new.extension.as_ref().map(|(_, key)| key.clone());
    let (egress, browser) = (new.egress.take(), new.browser.take());
    crate::egress::check_credentials(egress.as_ref(), app.launcher.carries_secrets(cold))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(e) = &egress {
        info!(session.id = %id, routes = e.routes.len(), proxied = e.proxied(), allowed_domains = e.allowed_domains.len(), "the session has egress settings");
    }
    let doc = new.into_doc(app, id, p.project_id());
    if let Cond::Failed(_) = app.sessions.create(doc.clone()).await? {
        return Err(ApiError::internal("session id collision; retry"));
    }
    let spec = LaunchSpec {
        session_id: id.to_owned(),
        project_id: p.project_id().to_owned(),
        context,
        env: Vec::new(),
        cold,
        extension,
        egress,
        browser,
    };
    match app.launcher.launch(spec).await {
        Ok(arn) => Ok((doc, arn)),
        Err(e) => {
            let reason = format!("the browser task could not be started: {}", chain(&e));
            let to = Terminal {
                status: InternalStatus::Failed,
                reason: Some(&reason),
                ended: true,
            };
            let _ = app.sessions.mark_terminal(id, to, &app.now_iso()).await;
            Err(ApiError::from(e))
        }
    }
}

/// A create request checked: its timeout, region, metadata, context (the caller's own) and
/// egress (managed proxies chosen for session `id`); `browser` is what it asked of the browser.
async fn checked_request(
    app: &App,
    p: &Principal,
    req: CreateSession,
    browser: Option<BrowserSettings>,
    id: &str,
) -> Result<NewSession, ApiError> {
    check_body_project(p, req.project_id.as_deref())?;
    let timeout = timeout_of(
        &req.timeout,
        p.project
            .default_timeout
            .clamp(*TIMEOUT_RANGE.start(), *TIMEOUT_RANGE.end()),
    )?;
    let region = match req.region.as_deref() {
        None | Some("") => app.settings.region.clone(),
        Some(r) if REGIONS.contains(&r) => r.to_owned(),
        Some(r) => {
            return Err(ApiError::bad_request(format!(
                "region must be one of {}, got {r:?}",
                REGIONS.join(", ")
            )));
        }
    };
    if let Some(m) = &req.user_metadata {
        crate::metadata::check(m).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let egress = crate::egress::session_egress(
        req.proxies.as_ref(),
        req.browser_settings
            .as_ref()
            .and_then(|b| b.allowed_domains.as_ref()),
        &app.settings.managed_proxies,
        id,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let extension = session_extension(app, p, &req).await?;
    let context = match req.browser_settings.and_then(|b| b.context) {
        Some(ContextSettings {
            id: Some(id),
            persist,
        }) => Some((own_context(app, p, &id).await?, persist)),
        Some(ContextSettings { id: None, .. }) => {
            return Err(ApiError::bad_request(
                "browserSettings.context.id is required",
            ));
        }
        None => None,
    };
    Ok(NewSession {
        timeout,
        region,
        keep_alive: req.keep_alive.unwrap_or(false),
        user_metadata: req.user_metadata,
        context,
        extension,
        egress,
        browser,
    })
}

/// The create's `extensionId` (top level or in `browserSettings`; both must agree), checked:
/// the caller's project's extension (404 otherwise, never a silent drop), as its id and key.
async fn session_extension(
    app: &App,
    p: &Principal,
    req: &CreateSession,
) -> Result<Option<(String, String)>, ApiError> {
    let inner = req
        .browser_settings
        .as_ref()
        .and_then(|b| b.extension_id.as_deref());
    let id = match (req.extension_id.as_deref(), inner) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request(
                "extensionId and browserSettings.extensionId name different extensions",
            ));
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => return Ok(None),
    };
    if let Some(why) = &app.settings.no_extensions {
        return Err(ApiError::bad_request(format!("extensionId: {why}")));
    }
    let rec = crate::extensions::own_extension(app, p, id).await?;
    let key = rec.archive_key();
    Ok(Some((rec.id, key)))
}

/// `POST /v1/sessions`.
pub async fn create_session(
    Caller {
        app,
        principal: p,
        started,
    }: Caller,
    body: Bytes,
) -> ApiResult {
    let deadline = started + app.settings.create_wait;
    // Every field's type first, so a wrong one is refused by name.
    let asked = crate::browser_settings::read(&parse_body(&body)?)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let req: CreateSession = parse_body(&body)?;
    let id = crate::limits::new_session_id();
    let logged = !asked.settings.as_ref().is_some_and(|s| s.no_session_log);
    let new = checked_request(&app, &p, req, asked.settings, &id).await?;

    // The context's lease first (a create waiting for a writer holds no slot meanwhile), then
    // a slot: of simultaneous creates at most `concurrency` go on. Whatever fails after that
    // gives slot and lease back.
    if let Some((ctx, persist)) = &new.context {
        crate::limits::claim_context(&app, ctx, &id, *persist, deadline).await?;
    }
    if let Err(e) = crate::limits::take_slot(&app, &p.project, &id).await {
        if let Some((ctx, true)) = &new.context
            && let Err(re) = app.contexts.release_writer(&ctx.context_id, &id).await
        {
            warn!(session.id = %id, error = %chain(&re), "releasing the context lease failed");
        }
        return Err(e);
    }
    let ctx_id = new.context.as_ref().map(|(c, _)| c.context_id.clone());
    let outcome = start_session(&app, &p, new, &id).await;
    let (doc, task_arn) = match outcome {
        Ok(s) => s,
        Err(e) => {
            let mut holder = SessionDoc {
                session_id: id.clone(),
                project_id: p.project_id().to_owned(),
                ended_at: Some(app.now_iso()),
                ..Default::default()
            };
            holder.context_id = ctx_id;
            crate::limits::give_back(app.slots.as_ref(), app.contexts.as_ref(), &holder).await;
            return Err(e);
        }
    };
    let _ = app
        .sessions
        .mark_provisioning(&id, task_arn.as_deref(), &app.now_iso())
        .await?;
    asked.unsupported.log(&id);
    if logged {
        crate::browser_settings::note_unsupported(&app, p.project_id(), &id, &asked.unsupported)
            .await;
    }
    let mut answer = if app.settings.connect_base.is_some() {
        // Behind the gateway the URL works now: a client that connects before READY is held.
        info!(session.id = %id, project.id = %p.project_id(), "session created; answering with the gateway's connectUrl");
        let mut current = doc;
        current.ecs_task_arn = task_arn;
        (StatusCode::CREATED, Json(answered(&app, current).await?)).into_response()
    } else {
        info!(session.id = %id, project.id = %p.project_id(), "session created; waiting for READY");
        wait_for_ready(&app, &id, doc, started, deadline).await?
    };
    asked.unsupported.name_in(&mut answer);
    Ok(answer)
}

/// Whether `url` can be a connect base URL: `ws://` or `wss://` and an authority, nothing
/// after it but an optional `/`.
pub fn is_connect_base(url: &str) -> bool {
    let rest = url
        .strip_prefix("wss://")
        .or_else(|| url.strip_prefix("ws://"));
    rest.map(|r| r.strip_suffix('/').unwrap_or(r))
        .is_some_and(|a| {
            !a.is_empty()
                && a.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
        })
}

/// The session as the API answers a create or a read: [`api_view`], then while it is running
/// its `connectUrl` and `signingKey` ([`with_token`]).
async fn answered(app: &App, d: SessionDoc) -> Result<Value, ApiError> {
    Ok(session_create_to_api(
        &with_token(app, api_view(app, d)).await?,
    ))
}

/// `d` with its token while it is running (the only time the API shows it): minted again from
/// the item's own claims ([`SessionDoc::token_claims`]; EdDSA is deterministic, so it is the
/// token of the create, byte for byte, until the key rotates), unless an older item stores one.
async fn with_token(app: &App, mut d: SessionDoc) -> Result<SessionDoc, ApiError> {
    if d.signing_key.is_none() && d.status == InternalStatus::Ready.sdk_status().as_str() {
        let claims = d
            .token_claims()
            .ok_or_else(|| ApiError::internal("the session's createdAt is not a time"))?;
        d.signing_key = Some(app.signer.sign(claims).await?);
    }
    Ok(d)
}

/// The session as the API shows it. Behind the connect gateway a session still starting is
/// shown RUNNING, as Browserbase shows it once created: its `connectUrl` works (the gateway
/// holds a client until the browser is up).
fn api_view(app: &App, d: SessionDoc) -> SessionDoc {
    let has_url = d.behind_gateway();
    shown(app, d, has_url)
}

/// [`api_view`] of a listed session, which the listing index holds without `connectBase`:
/// behind the gateway every session gets one at create.
fn listed_view(app: &App, d: SessionDoc) -> SessionDoc {
    shown(app, d, true)
}

/// The session shown RUNNING while starting behind the gateway with a `connectUrl`.
fn shown(app: &App, mut d: SessionDoc, has_url: bool) -> SessionDoc {
    if app.settings.connect_base.is_some()
        && has_url
        && d.internal().is_some_and(InternalStatus::may_become_ready)
    {
        d.status = InternalStatus::Ready.sdk_status().as_str().to_owned();
    }
    d
}

/// Polls the new session's item until READY, a terminal status (slot and lease given back),
/// or the create budget's end (answered PENDING).
async fn wait_for_ready(
    app: &App,
    id: &str,
    doc: SessionDoc,
    started: Instant,
    deadline: Instant,
) -> ApiResult {
    let mut every = app.settings.poll_first.min(app.settings.poll_every);
    loop {
        let current = app.sessions.get(id).await?.unwrap_or_else(|| doc.clone());
        match current.internal() {
            Some(InternalStatus::Ready | InternalStatus::Active) => {
                let body = answered(app, current).await?;
                return Ok((StatusCode::CREATED, Json(body)).into_response());
            }
            Some(s) if s.is_terminal() => {
                crate::limits::give_back(app.slots.as_ref(), app.contexts.as_ref(), &current).await;
                crate::usage::count(app.sessions.as_ref(), &current).await;
                return Err(ApiError::internal(format!(
                    "the browser failed to start: {}",
                    current
                        .termination_reason
                        .as_deref()
                        .unwrap_or("unknown reason")
                )));
            }
            _ => {}
        }
        if Instant::now() + every >= deadline {
            info!(session.id = %id, "not READY within the create budget; answering PENDING");
            let body = answered(app, current).await?;
            return Ok((StatusCode::CREATED, Json(body)).into_response());
        }
        tokio::time::sleep(every).await;
        // Every `poll_first` for the first 250 ms (a warm pool task is READY within tens of
        // milliseconds), then backing off to `poll_every`.
        if started.elapsed() >= Duration::from_millis(250) {
            every = (every * 2).min(app.settings.poll_every);
        }
    }
}

/// The query of `GET /v1/sessions`: `status`, an SDK-visible status to filter by; `q`,
/// Browserbase's metadata query ([`crate::metadata`]); `limit`, the page size; `cursor`,
/// where a previous page said the next one starts.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    q: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// Sessions per page when the query names no `limit`.
pub const PAGE_DEFAULT: usize = 100;
/// The largest `limit`.
pub const PAGE_MAX: usize = 1000;
/// The response header carrying the next page's cursor (absent on the last page). The body
/// stays the bare array the Browserbase SDK's `sessions.list` returns; its `withResponse()`
/// gives the headers.
pub const NEXT_CURSOR: &str = "x-next-cursor";
/// Index reads one page may take to fill itself when `status` filters sessions out.
const PAGE_READS: usize = 5;

/// The `status` filter, checked.
fn status_filter(s: Option<&str>) -> Result<Option<String>, ApiError> {
    match s {
        None | Some("") => Ok(None),
        Some(s @ ("RUNNING" | "ERROR" | "TIMED_OUT" | "COMPLETED" | "PENDING")) => {
            Ok(Some(s.to_owned()))
        }
        Some(s) => Err(ApiError::bad_request(format!(
            "status must be one of RUNNING, ERROR, TIMED_OUT, COMPLETED, PENDING, got {s:?}"
        ))),
    }
}

/// The page size, checked.
fn page_size(s: Option<&str>) -> Result<usize, ApiError> {
    let Some(s) = s.filter(|s| !s.is_empty()) else {
        return Ok(PAGE_DEFAULT);
    };
    s.parse()
        .ok()
        .filter(|n| (1..=PAGE_MAX).contains(n))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "limit must be a whole number from 1 to {PAGE_MAX}, got {s:?}"
            ))
        })
}

/// The `q` filter, parsed.
fn metadata_filter(q: Option<&str>) -> Result<Option<MetadataQuery>, ApiError> {
    q.filter(|q| !q.is_empty())
        .map(MetadataQuery::parse)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `GET /v1/sessions[?status=…][&q=…][&limit=…][&cursor=…]`: one page, oldest first; the
/// [`NEXT_CURSOR`] header says where the next starts. Reads the listing index page by page
/// (never the project's whole history), filling the page from at most [`PAGE_READS`] reads;
/// `status` and `q` filter what the reads find (the index projects `userMetadata`).
pub async fn list_sessions(
    caller: Caller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let (app, p) = caller.into_parts();
    // axum's own rejection is plain text; answer in Browserbase's error shape instead.
    let Query(q) = query
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {}", e.body_text())))?;
    let status = status_filter(q.status.as_deref())?;
    let query = metadata_filter(q.q.as_deref())?;
    let limit = page_size(q.limit.as_deref())?;
    let mut after = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => Some(crate::cursor::open(app.signer.as_ref(), p.project_id(), c).await?),
        None => None,
    };
    let mut list: Vec<Value> = Vec::new();
    for _ in 0..PAGE_READS {
        let at = PageAt {
            after: after.take(),
            limit: limit - list.len(),
        };
        let page = app.sessions.list_project(p.project_id(), at).await?;
        list.extend(
            page.sessions
                .into_iter()
                .filter(|s| {
                    query
                        .as_ref()
                        .is_none_or(|q| q.matches(s.user_metadata.as_ref()))
                })
                .map(|s| listed_view(&app, s))
                .filter(|s| status.as_ref().is_none_or(|want| &s.status == want))
                .map(|s| session_to_api(&s)),
        );
        after = page.next;
        if after.is_none() || list.len() == limit {
            break;
        }
    }
    let mut r = Json(list).into_response();
    if let Some(pos) = after {
        let cursor = crate::cursor::seal(app.signer.as_ref(), p.project_id(), &pos).await?;
        let value = axum::http::HeaderValue::try_from(cursor)
            .map_err(|_| ApiError::internal("a cursor is not a header value"))?;
        r.headers_mut().insert(NEXT_CURSOR, value);
    }
    Ok(r)
}

/// `GET /v1/sessions/{id}`: includes `connectUrl` and `signingKey` while running, so a client
/// that got PENDING can poll for them.
pub async fn get_session(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = polled(&app, own_session(&app, &p, &id).await?).await?;
    Ok(Json(answered(&app, s).await?).into_response())
}

/// A client polls a session not yet READY: it is still waiting, so the claim's deadline moves
/// (conditionally: never once READY, never backwards, never past the cap). The session as it
/// is after that.
async fn polled(app: &App, s: SessionDoc) -> Result<SessionDoc, ApiError> {
    let Some(to) = s.polled_deadline(app.settings.claim_wait, app.now_secs()) else {
        return Ok(s);
    };
    Ok(match app.sessions.extend_claim(&s.session_id, to).await? {
        Cond::Done(d) => d,
        // READY or ended meanwhile, or another poll moved it further.
        Cond::Failed(current) => current.unwrap_or(s),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateSession {
    status: Option<String>,
    project_id: Option<String>,
}

/// `POST /v1/sessions/{id}` with `{"status":"REQUEST_RELEASE"}`.
pub async fn update_session(caller: Caller, PathId(id): PathId, body: Bytes) -> ApiResult {
    let (app, p) = caller.into_parts();
    let req: UpdateSession = parse_body(&body)?;
    check_body_project(&p, req.project_id.as_deref())?;
    match req.status.as_deref() {
        Some("REQUEST_RELEASE") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "status must be REQUEST_RELEASE, got {other:?}"
            )));
        }
        None => {
            return Err(ApiError::bad_request(
                "status is required (REQUEST_RELEASE)",
            ));
        }
    }
    let s = own_session(&app, &p, &id).await?;
    let after = match app
        .sessions
        .mark_terminal(
            &id,
            Terminal::status(InternalStatus::Stopped),
            &app.now_iso(),
        )
        .await?
    {
        Cond::Done(d) => d,
        Cond::Failed(current) => current.unwrap_or(s.clone()),
    };
    // The slot now (a released session is not active); the context lease only once the
    // controller has written `endedAt` after saving it.
    crate::limits::give_back(app.slots.as_ref(), app.contexts.as_ref(), &after).await;
    let task_arn = task_to_stop(&app, &after).await;
    if let Err(e) = app.launcher.stop(&id, task_arn.as_deref()).await {
        warn!(session.id = %id, error = %chain(&e), "stopping the task failed; it ends itself once it reads its item terminal (ITEM_WATCH_SECONDS)");
    }
    info!(session.id = %id, "session released");
    Ok(Json(session_to_api(&after)).into_response())
}

/// The task a release stops: the one the item names as it is after the release's own write,
/// not as it was read before it (a controller may have written READY with its ARN in between;
/// stopping the ARN read before would stop nothing, and the browser would serve until expiry).
/// When that names none, the item is read again, consistently, once. A task still unnamed then
/// is not stopped here: its controller sees the item terminal at its next watch and ends itself.
async fn task_to_stop(app: &App, after: &SessionDoc) -> Option<String> {
    if let Some(arn) = &after.ecs_task_arn {
        return Some(arn.clone());
    }
    match app.sessions.get(&after.session_id).await {
        Ok(d) => d.and_then(|d| d.ecs_task_arn),
        Err(e) => {
            warn!(session.id = %after.session_id, error = %chain(&e), "re-reading the released session failed");
            None
        }
    }
}

/// `GET /v1/sessions/{id}/debug[?mode=view|control][&expiresIn=…]`: the live page list from
/// the running browser, and the live view's URLs on the connect host, each with a viewer
/// credential of the mode asked (`control` by default) that expires with the session, or
/// `expiresIn` seconds from now when that is sooner ([`crate::debug::live_urls`]).
pub async fn debug_session(
    caller: Caller,
    PathId(id): PathId,
    query: Result<Query<crate::debug::DebugQuery>, QueryRejection>,
) -> ApiResult {
    let (app, p) = caller.into_parts();
    let Query(q) = query
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {}", e.body_text())))?;
    let bad = |e: crate::debug::QueryError| ApiError::bad_request(e.to_string());
    let (mode, expires_in) = (q.mode().map_err(bad)?, q.expires_in().map_err(bad)?);
    let s = with_token(&app, own_session(&app, &p, &id).await?).await?;
    let now = app.now_secs();
    let (Some(url), Some(token), true, true) = (
        s.client_connect_url(),
        s.signing_key.as_deref(),
        s.status == "RUNNING",
        s.expires_at > now,
    ) else {
        return Err(ApiError::conflict(format!("session {id} is not running")));
    };
    let base = crate::debug::viewer_base(&url)
        .ok_or_else(|| ApiError::internal("the session's connectUrl names no host"))?;
    let extra_ca = app.settings.connect_ca.as_deref();
    let pages = crate::debug::page_list(&url, token, extra_ca)
        .await
        .map_err(|e| {
            warn!(session.id = %id, error = %e, "reading the browser's page list failed");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "the session's browser did not answer",
            )
        })?;
    let ttl = (s.expires_at - now).min(expires_in.unwrap_or(u64::MAX));
    let claims = ViewerClaims::new(&id, &s.project_id, mode, now, ttl);
    let mut live =
        crate::debug::live_urls(app.signer.as_ref(), &claims, &base, &url, pages).await?;
    // Our extension: a client's pending request for a person, as its controller wrote it.
    if let Some(h) = &s.handoff {
        live["handoff"] = serde_json::to_value(h).map_err(|e| ApiError::internal(e.to_string()))?;
    }
    Ok(Json(live).into_response())
}
