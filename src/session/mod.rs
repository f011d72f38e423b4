//! One session's lifecycle, the steps both drivers of `run` take (a single-session task, and
//! a pool controller's claimed session), as methods on the [`Run`] that carries what they
//! share.
//!
//! Start: the session item read (keepAlive, expiry, the token for connectUrl) → the signing
//! keys → the profile restored → the session's extension unpacked ([`extension`]) → Chrome and
//! the proxy started (the proxy answering 503) → the extension loaded → the session cookies
//! put back → downloads followed ([`downloads`]) → clients let through → the public address
//! chosen (with the task API's live view, the handoff URL set and the pending handoff mirrored
//! into the item: [`handoff`]) → conditional READY. A step that ends the run early says how as
//! an [`Outcome`]; its driver hands it to [`Run::settle`], the one place that writes the
//! session item's last fields ([`SessionItem::settle`]), so a step never writes FAILED itself.
//!
//! End (signal, a client's Browser.close, idle, expiry, crash, the item turned terminal by a
//! release whose stop missed the task — [`watch`]), the steps of
//! [`crate::shutdown::Step`] each within its deadline: stop admitting → (persist: session
//! cookies exported over CDP) → Chrome closed through CDP → the finished downloads stored →
//! (persist: tar → gzip → store,
//! atomically; [`crate::profile::persist_profile`]) → terminal status → `proxyBytes` and, last,
//! `endedAt` — all within the shutdown budget. Chrome closing itself cleanly after client
//! traffic (a close the proxy could not inspect) ends the same way, except that the session
//! cookies went with it: the on-disk profile is saved.
//!
//! While serving, the session's uploads are brought to the browser's disk when a client first
//! names them ([`uploads`]); READY carries the directory they go to (`uploadsDir`).

pub(crate) mod downloads;
mod ending;
mod extension;
mod handoff_mirror;
mod ready;
pub(crate) mod uploads;
mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};
use wallcrawler_contract::storage::SESSION_COOKIES_FILE;

pub(crate) use ending::{EXIT_FAILURE, Ending, Outcome, SessionItem};
pub(crate) use extension::{ExtensionDir, load as load_extension};

use crate::auth::{Authenticator, KeySource, StaticKeys};
use crate::browser::{Browser, BrowserOptions, EndReason, IdlePolicy, ProxyOptions};
use crate::cdp;
use crate::chrome::{Chrome, LaunchOptions};
use crate::config::{ContextSource, KeyConfig, RunConfig};
use crate::edge::Limits;
use crate::profile::{self, ArchiveLimits, hydrate, persist_profile};
use crate::secrets::{self, SecretFetcher, SecretKeyCache};
use crate::shutdown::{Shutdown, Step, Steps};
use crate::stores::{
    ArchiveStore, ClaimQueue, NetworkLookup, ServedSessions, SessionRecord, TaskProtection, retry,
};

/// The most the saved session cookies file may hold. Chrome keeps at most 3,300 cookies of
/// at most 4 KiB of name and value each (about 13 MiB); as JSON with their attributes they fit
/// in 16 MiB, so a larger file was not written by us.
pub(crate) const MAX_SESSION_COOKIES_BYTES: u64 = 16 << 20;

/// How long startup reads retry an unavailable service.
pub(crate) const STARTUP_RETRY: Duration = Duration::from_secs(10);

/// The outside services a run uses, each optional.
#[derive(Default, Clone)]
pub(crate) struct Deps {
    /// Where session items live.
    pub sessions: Option<Arc<dyn ServedSessions>>,
    /// Where profile archives live.
    pub archives: Option<Arc<dyn ArchiveStore>>,
    /// Where the session's files live: downloads stored (`files/<projectId>/<sessionId>/downloads/`),
    /// uploads read (`…/uploads/`).
    pub files: Option<Arc<dyn ArchiveStore>>,
    /// Where the public key secret comes from.
    pub secrets: Option<Arc<SecretFetcher>>,
    /// How a private address maps to a public one (direct mode).
    pub network: Option<Arc<dyn NetworkLookup>>,
    /// Pool mode: where claims come from.
    pub claims: Option<Arc<dyn ClaimQueue>>,
    /// Scale-in protection through the ECS API (with `TASK_API_URL`; else the ECS agent's
    /// endpoint, `ECS_AGENT_URI`).
    pub protection: Option<Arc<dyn TaskProtection>>,
    /// A cold task's live view from the task API (a pool task's comes with its claim): what a
    /// client's `Wallcrawler.requestHandoff` is answered with.
    pub live_view: Option<wallcrawler_contract::task_api::LiveViewGrant>,
}

/// The profile a session starts from and whether it is saved at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContextPlan {
    /// The archive key, when the session has a context.
    pub key: Option<String>,
    /// Whether the profile is saved again at the end.
    pub persist: bool,
}

impl ContextPlan {
    /// A single-session task's plan, from its configuration.
    pub(crate) fn from_config(c: &RunConfig) -> Self {
        let key = match &c.context {
            ContextSource::None => None,
            ContextSource::Bucket { key, .. } | ContextSource::Directory { key, .. } => {
                Some(key.clone())
            }
        };
        Self {
            key,
            persist: c.context_persist,
        }
    }
}

/// What the steps of one run share.
pub(crate) struct Run<'a> {
    /// The configuration of `run`.
    pub c: &'a RunConfig,
    /// The outside services.
    pub deps: &'a Deps,
    /// Where every task of the run is spawned, and its root token.
    pub tasks: &'a Shutdown,
    /// The session item's writes.
    pub item: SessionItem<'a>,
    /// The context's profile, and whether it is saved.
    pub plan: ContextPlan,
    /// Chrome's user-data-dir.
    pub profile: PathBuf,
    /// The session's downloads being captured, from [`Run::capture_downloads`] to the end.
    pub downloads: std::sync::Mutex<Option<downloads::Capture>>,
    /// The session's log being written, from [`Run::start_session_log`] to the end.
    pub session_log: std::sync::Mutex<Option<crate::session_log::Writer>>,
    /// The session's recording, from [`Run::start_recording`] to the end.
    pub recording: std::sync::Mutex<Option<crate::recording::Recording>>,
}

impl Run<'_> {
    /// The session item's last writes for how the run stopped before being served to the end;
    /// the run's ending.
    pub(crate) async fn settle(&self, outcome: Outcome) -> Ending {
        self.item
            .settle(&outcome.ending, outcome.proxy_bytes, None)
            .await;
        outcome.ending
    }

    /// The session item, retried while the table is unavailable. `None` when no table is
    /// configured.
    pub(crate) async fn load_record(&self) -> Result<Option<SessionRecord>, Outcome> {
        let Some(store) = &self.deps.sessions else {
            return Ok(None);
        };
        match retry("reading the session item", STARTUP_RETRY, || {
            store.load(self.item.id)
        })
        .await
        {
            Ok(Some(r)) => Ok(Some(r)),
            Ok(None) => {
                error!("the session item does not exist");
                Err(Ending::Aborted.into())
            }
            Err(e) => {
                error!(error = %e, "the sessions table cannot be read");
                Err(Ending::Aborted.into())
            }
        }
    }

    /// The public keys: the literal key, or the Secrets Manager cache loaded (and refreshed,
    /// on the run's tasks, until the run ends).
    pub(crate) async fn load_keys(&self) -> Result<Arc<dyn KeySource>, Outcome> {
        match &self.c.auth.key {
            KeyConfig::Literal(k) => Ok(Arc::new(StaticKeys::new(k.clone()))),
            KeyConfig::SecretArn(_) => {
                let Some(fetcher) = self.deps.secrets.clone() else {
                    return Err(Ending::failed("no Secrets Manager client").into());
                };
                let cache = SecretKeyCache::new(fetcher, self.tasks.tracker().clone());
                if let Err(e) = cache.load_initial(STARTUP_RETRY).await {
                    error!(error = %e, "loading the public key secret failed");
                    let reason = format!(
                        "the public key secret is unavailable: {} (see the task log)",
                        secrets::summary(&e)
                    );
                    return Err(Ending::failed(reason).into());
                }
                cache.spawn_refresher(self.tasks.token().clone());
                Ok(cache)
            }
        }
    }

    /// Unpacks the context's archive into the profile directory.
    pub(crate) async fn restore_profile(&self) -> Result<(), Outcome> {
        let (Some(key), Some(archives)) = (&self.plan.key, &self.deps.archives) else {
            return Ok(());
        };
        let limits = ArchiveLimits {
            max_bytes: self.c.profile_max_bytes,
            max_entries: self.c.profile_max_entries,
        };
        match hydrate(archives.as_ref(), key, &self.profile, limits, STARTUP_RETRY).await {
            Ok(Some(stats)) => {
                info!(
                    entries = stats.entries,
                    bytes = stats.bytes,
                    "profile restored"
                );
                Ok(())
            }
            Ok(None) => {
                info!("no archive for this context yet; starting with an empty profile");
                Ok(())
            }
            Err(e) => {
                error!(error = %e, "restoring the profile failed");
                let reason = format!("the profile could not be restored: {}", e.reason());
                Err(Ending::failed(reason).into())
            }
        }
    }

    /// The browser session's options from the configuration and the session item.
    pub(crate) fn session_options(
        &self,
        auth: Authenticator,
        launch: LaunchOptions,
        keep_alive: bool,
        expires_at: Option<u64>,
    ) -> BrowserOptions {
        let c = self.c;
        BrowserOptions {
            proxy: ProxyOptions {
                auth,
                listen: std::net::SocketAddr::new(c.proxy_host, c.proxy_port),
                metrics_addr: c.tuning.metrics_addr,
                limits: Limits {
                    files: session_files(&launch.user_data_dir, self.upload_fetcher()),
                    ..Limits::from_tuning(&c.tuning)
                },
            },
            chrome: launch,
            idle: self.idle_policy(keep_alive),
            expires_at,
            shutdown_budget: c.shutdown_budget,
            background_nice: c.background_nice,
            tasks: self.tasks.clone(),
        }
    }

    /// What brings the session's uploads to the browser's disk, when there is a files store:
    /// bound to the session now in a single-session task, at the claim in a pool.
    fn upload_fetcher(&self) -> Option<Arc<dyn crate::file_rules::FetchUpload>> {
        let store = self.deps.files.clone()?;
        let f = uploads::StoreUploads::new(store, tokio::runtime::Handle::current());
        if self.c.pool.is_none()
            && let Some(project) = &self.c.auth.project_id
        {
            crate::file_rules::FetchUpload::bind(&f, project, &self.c.auth.session_id);
        }
        Some(Arc::new(f))
    }

    /// When a session without keepAlive ends for want of clients (`None`: keepAlive, never).
    pub(crate) fn idle_policy(&self, keep_alive: bool) -> Option<IdlePolicy> {
        (!keep_alive).then_some(IdlePolicy {
            before_first_client: self.c.disconnect_timeout,
            after_last_client: self.c.disconnect_grace,
        })
    }

    /// From READY to the end: waits for whatever ends the session — the session's own events,
    /// or its item turned terminal by someone else ([`watch`]) — then runs the end sequence.
    /// The run's ending.
    pub(crate) async fn serve_until_end(&self, session: Browser) -> Ending {
        let reason = tokio::select! {
            reason = session.wait_end(self.tasks.token()) => reason,
            () = watch::until_ended_elsewhere(self.item.store, self.item.id, self.c.item_watch) => {
                EndReason::EndedElsewhere
            }
        };
        self.end_session(session, &reason).await
    }

    /// The end sequence, each step of [`Step::ALL`] within its deadline of
    /// `SHUTDOWN_BUDGET_SECONDS`: stop admitting → session cookies → Chrome closed (relays end
    /// with it) → archive → terminal status → `proxyBytes` and `endedAt`.
    async fn end_session(&self, session: Browser, reason: &EndReason) -> Ending {
        let steps = Steps::start(self.c.shutdown_budget);
        session.stop_admitting();
        let crashed = matches!(reason, EndReason::ChromeCrashed(_));
        let chrome_gone = matches!(reason, EndReason::ChromeExitedCleanly);
        let target = match (&self.plan.key, &self.deps.archives) {
            (Some(key), Some(archives)) if self.plan.persist && !crashed => Some((key, archives)),
            _ => None,
        };
        let mut extra = Vec::new();
        if target.is_some() {
            extra.extend(export_session_cookies(&session, chrome_gone, &steps).await);
        }
        let closed = session
            .close_chrome(crashed, steps.left(Step::ChromeClosed))
            .await;
        let bytes = session.proxy_bytes();
        session.set_egress_notes(None);
        session.finish();
        let capture = self
            .downloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(capture) = capture {
            // Before the profile and the terminal writes: every finished download is stored
            // before `endedAt`.
            capture.finish(steps.left(Step::Archive)).await;
        }
        let log = self
            .session_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(log) = log {
            // Chrome is closed: every relay has ended. The last entries are stored before
            // `endedAt`, so a log read after the end is whole.
            log.finish(steps.left(Step::Archive)).await;
        }
        let recording = self
            .recording
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(recording) = recording {
            // Chrome is closed: every page's screencast has ended. Each page's last segment
            // and its index are stored before `endedAt`.
            recording.finish(steps.left(Step::Archive)).await;
        }
        if crashed {
            info!("the browser crashed; the previous archive is kept");
        } else if let Some((key, archives)) = target {
            if !chrome_gone && closed.as_ref().is_some_and(|o| !o.is_clean()) {
                warn!("chrome did not close cleanly; persisting what it left on disk");
            }
            save_profile(archives.clone(), key, &self.profile, extra, &steps).await;
        }
        let ending = Ending::from(reason);
        self.item.settle(&ending, bytes, Some(&steps)).await;
        ending
    }

    /// Starts capturing the session's downloads (where its files store is configured): on a
    /// CDP connection of its own, into the proxy's downloads directory, stored under the
    /// session's prefix ([`downloads`]). A capture that cannot start is logged; the session is
    /// served without it.
    async fn capture_downloads(&self, session: &Browser, project_id: Option<&str>) {
        let (Some(store), Some(project_id)) = (&self.deps.files, project_id) else {
            return;
        };
        let files = session.files();
        let Some(dir) = files.downloads() else {
            return;
        };
        let sink = downloads::Sink {
            store: store.clone(),
            project_id: project_id.to_owned(),
            session_id: self.item.id.to_owned(),
            log: session.session_log().get(),
        };
        let caps = downloads::Caps {
            max_bytes: self.c.downloads.max_bytes,
            max_files: self.c.downloads.max_files,
        };
        let item = self.deps.sessions.clone().map(|store| downloads::Item {
            store,
            id: self.item.id.to_owned(),
            owner: self.item.owner.to_owned(),
        });
        let url = session.chrome.browser();
        match downloads::Capture::start(&url, dir, sink, caps, item).await {
            Ok(c) => {
                *self.downloads.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
            }
            Err(e) => {
                error!(error = %e, "capturing downloads failed to start; downloads are not stored")
            }
        }
    }

    /// Starts what the session keeps of itself: its log and its downloads. Before READY (no
    /// client knows where to connect yet).
    pub(crate) async fn start_records(
        &self,
        session: &Browser,
        project_id: Option<&str>,
        browser: Option<&wallcrawler_contract::browser::BrowserSettings>,
    ) {
        self.start_session_log(session, project_id, browser);
        self.start_recording(session, project_id, browser);
        self.capture_downloads(session, project_id).await;
    }

    /// Starts the session's log (where its files store is configured and the session did not
    /// ask for none: `logSession: false`): the proxy's CDP clients record through it from now
    /// on ([`crate::session_log`]).
    fn start_session_log(
        &self,
        session: &Browser,
        project_id: Option<&str>,
        browser: Option<&wallcrawler_contract::browser::BrowserSettings>,
    ) {
        if browser.is_some_and(|b| b.no_session_log) {
            info!("the session is not logged (logSession: false)");
            return;
        }
        let (Some(store), Some(project_id)) = (&self.deps.files, project_id) else {
            return;
        };
        let (writer, recorder) =
            crate::session_log::Writer::start(crate::session_log::writer::Sink {
                store: store.clone(),
                project_id: project_id.to_owned(),
                session_id: self.item.id.to_owned(),
            });
        session.set_egress_notes(Some(recorder.clone()));
        writer.watch_pages(session.chrome.browser(), recorder.clone());
        session.session_log().set(Some(recorder));
        *self.session_log.lock().unwrap_or_else(|p| p.into_inner()) = Some(writer);
    }

    /// Starts the session's recording (where its files store is configured and the session
    /// did not ask for none: `recordSession: false`): each page's video stored as it is
    /// made ([`crate::recording`]).
    fn start_recording(
        &self,
        session: &Browser,
        project_id: Option<&str>,
        browser: Option<&wallcrawler_contract::browser::BrowserSettings>,
    ) {
        if browser.is_some_and(|b| b.no_recording) {
            info!("the session is not recorded (recordSession: false)");
            return;
        }
        let (Some(store), Some(project_id)) = (&self.deps.files, project_id) else {
            return;
        };
        let sink = crate::recording::Sink {
            store: store.clone(),
            project_id: project_id.to_owned(),
            session_id: self.item.id.to_owned(),
        };
        let recording = crate::recording::Recording::start(
            session.chrome.browser(),
            session.hubs().clone(),
            sink,
            crate::recording::Limits::from(&self.c.recording),
            session.session_log().get(),
        );
        *self.recording.lock().unwrap_or_else(|p| p.into_inner()) = Some(recording);
    }

    /// Puts back the session cookies a previous session saved (Chrome never writes them to
    /// disk).
    pub(crate) async fn restore_session_cookies(&self, chrome: &Chrome) {
        let Some(data) = read_saved_cookies(&self.profile).await else {
            return;
        };
        let cookies: Vec<serde_json::Value> = match serde_json::from_slice(&data) {
            Ok(v) => v,
            Err(_) => {
                warn!("the saved session cookies are not a JSON array; ignoring them");
                return;
            }
        };
        let n = cookies.len();
        match cdp::set_cookies(&chrome.browser(), cookies, Duration::from_secs(5)).await {
            Ok(()) => info!(session_cookies = n, "session cookies restored"),
            Err(e) => warn!(error = %e, "restoring session cookies failed"),
        }
    }
}

/// The session cookies file a previous session left in `profile`, read and removed.
async fn read_saved_cookies(profile: &Path) -> Option<Vec<u8>> {
    let file = profile.join(SESSION_COOKIES_FILE);
    let read = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || {
            profile::read_own_file(&file, MAX_SESSION_COOKIES_BYTES)
        })
        .await
    };
    // Removing a link removes the link, never what it points at.
    let _ = tokio::fs::remove_file(&file).await;
    match read {
        Ok(Ok(data)) => data,
        Ok(Err(e)) => {
            warn!(error = %e, "the saved session cookies were not read");
            None
        }
        Err(e) => {
            warn!(error = %e, "reading the saved session cookies stopped");
            None
        }
    }
}

/// The session cookies as the archive's extra root file (Chrome never writes them to disk);
/// none when Chrome is gone already or the export fails (the profile is saved without them).
async fn export_session_cookies(
    session: &Browser,
    chrome_gone: bool,
    steps: &Steps,
) -> Option<(String, Vec<u8>)> {
    if chrome_gone {
        warn!(
            "the browser closed itself; its profile on disk is saved, but its session cookies \
             cannot be exported any more"
        );
        return None;
    }
    let url = session.chrome.browser();
    match cdp::all_cookies(&url, steps.left(Step::Cookies)).await {
        Ok(all) => {
            let params = cdp::session_cookie_params(&all);
            info!(session_cookies = params.len(), "session cookies exported");
            let json = serde_json::to_vec(&params).unwrap_or_default();
            Some((SESSION_COOKIES_FILE.to_owned(), json))
        }
        Err(e) => {
            warn!(error = %e, "exporting session cookies failed; persisting without them");
            None
        }
    }
}

/// Packs and uploads the profile within the archive step; on any failure the previous
/// archive stays the context's.
async fn save_profile(
    archives: Arc<dyn ArchiveStore>,
    key: &str,
    profile: &Path,
    extra: Vec<(String, Vec<u8>)>,
    steps: &Steps,
) {
    let started = Instant::now();
    let saved = steps
        .run(
            Step::Archive,
            persist_profile(archives, key, profile, extra),
        )
        .await;
    match saved {
        Some(Ok(bytes)) => info!(
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "profile saved"
        ),
        Some(Err(e)) => {
            error!(error = %e, "saving the profile failed; the previous archive is kept")
        }
        None => {
            error!("saving the profile ran out of shutdown budget; the previous archive is kept")
        }
    }
}

/// The directories a session's clients may name files in: `<profile>-files/uploads` (its
/// uploads fetched by `fetcher` when named) and `<profile>-files/downloads` (see
/// [`crate::proxy::guard`]). If they cannot be made, none:
/// every path a client names is refused, which fails closed.
pub(crate) fn session_files(
    user_data_dir: &std::path::Path,
    fetcher: Option<Arc<dyn crate::file_rules::FetchUpload>>,
) -> std::sync::Arc<crate::file_rules::FileRules> {
    match crate::file_rules::FileRules::beside_profile(user_data_dir) {
        Ok(rules) => std::sync::Arc::new(match fetcher {
            Some(f) => rules.fetching(f),
            None => rules,
        }),
        Err(e) => {
            tracing::error!(error = %e, "could not create the session's uploads and downloads directories; every file path a client names is refused");
            std::sync::Arc::default()
        }
    }
}
