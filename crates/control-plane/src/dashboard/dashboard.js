"use strict";
// The dashboard: the project's sessions through this server's /v1 routes, the API key in the
// x-bb-api-key header. The key lives in this tab only (sessionStorage) and never in a URL.
// Every string from the API reaches the page through textContent or an attribute, never as
// markup: session metadata is the client's own text.
(() => {
  const KEY_SLOT = "wallcrawler.dashboard.apiKey";
  const MAX_LOG_ENTRIES = 5000;
  const POLL_MS = 2000;
  const RECORDING_WAIT_MS = 10 * 60 * 1000;
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  let apiKey = sessionStorage.getItem(KEY_SLOT) || "";
  let listed = [];
  let cursor = null;
  // The latest list request: an earlier one answering later is not shown.
  let listSeq = 0;
  // The open session: its id and what it runs (streams, polls, object URLs), ended by close().
  let current = null;

  /** An element with `text` as its text and `attrs` as attributes. */
  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }

  function say(target, text, state) {
    const box = typeof target === "string" ? $(target) : target;
    box.replaceChildren(el("p", text, { class: "state" }));
    if (state !== undefined) box.dataset.state = state;
  }

  /** A request to this server's API (relative to the page, so a stage prefix is kept). */
  function api(path, init) {
    const opts = init || {};
    const headers = new Headers(opts.headers || {});
    headers.set("x-bb-api-key", apiKey);
    return fetch(new URL(path, document.baseURI), {
      ...opts,
      headers,
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  }

  async function bodyOf(res) {
    try {
      return await res.json();
    } catch {
      return null;
    }
  }

  /** The API's error message (Browserbase's `{message}`), else the status. */
  async function problem(res) {
    const b = await bodyOf(res);
    const m = b && typeof b.message === "string" ? b.message : "";
    return `${res.status}${m ? ": " + m : ""}`;
  }

  /** A URL from the API, kept only when it is http(s). */
  function safeUrl(u) {
    try {
      const url = new URL(String(u), document.baseURI);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch {
      return null;
    }
  }

  const text = (v) => (v === null || v === undefined ? "" : String(v));
  const metadataText = (m) => (m && typeof m === "object" ? JSON.stringify(m) : text(m));

  // ---- The key ------------------------------------------------------------------------------

  async function useKey() {
    const k = $("key").value.trim();
    if (!k) return;
    apiKey = k;
    $("key").value = "";
    $("login-error").textContent = "";
    if (await loadSessions(true)) {
      sessionStorage.setItem(KEY_SLOT, k);
      showMain();
    }
  }

  function forget() {
    close();
    apiKey = "";
    sessionStorage.removeItem(KEY_SLOT);
    listed = [];
    $("sessions").tBodies[0].replaceChildren();
    $("main").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    $("project").textContent = "";
  }

  function showMain() {
    $("login").hidden = true;
    $("main").hidden = false;
    $("forget").hidden = false;
  }

  // ---- The list -----------------------------------------------------------------------------

  /** Reads the first page (`reset`) or the next one; false when the key was refused. */
  async function loadSessions(reset) {
    const q = new URLSearchParams({ limit: "100" });
    const status = $("status-filter").value;
    if (status) q.set("status", status);
    if (!reset && cursor) q.set("cursor", cursor);
    $("list-state").textContent = "Loading…";
    const seq = ++listSeq;
    let res;
    try {
      res = await api(`v1/sessions?${q}`);
      if (seq !== listSeq) return true;
    } catch (e) {
      $("list-state").textContent = `The API could not be reached (${e.message}).`;
      return !reset;
    }
    if (res.status === 401 || res.status === 403) {
      const why = await problem(res);
      $("login-error").textContent = `The key was refused (${why}).`;
      if (reset) apiKey = "";
      return false;
    }
    if (!res.ok) {
      $("list-state").textContent = `The sessions could not be listed (${await problem(res)}).`;
      return true;
    }
    const page = await bodyOf(res);
    if (seq !== listSeq) return true;
    cursor = res.headers.get("x-next-cursor");
    listed = (reset ? [] : listed).concat(Array.isArray(page) ? page : []);
    const first = listed[0];
    if (first && first.projectId) $("project").textContent = `Project ${first.projectId}`;
    renderList();
    return true;
  }

  function matches(s, needle) {
    if (!needle) return true;
    const hay = [s.id, s.status, s.contextId, metadataText(s.userMetadata)].map(text).join(" ");
    return hay.toLowerCase().includes(needle);
  }

  function renderList() {
    const needle = $("text-filter").value.trim().toLowerCase();
    const rows = listed.filter((s) => matches(s, needle)).map((s) => {
      const tr = el("tr", null, { "data-id": text(s.id) });
      const open = el("button", s.id, { type: "button", class: "open", "data-id": text(s.id) });
      open.addEventListener("click", () => openSession(text(s.id)));
      const idCell = el("td");
      idCell.append(open);
      tr.append(
        idCell,
        el("td", s.status, { class: `status status-${text(s.status)}` }),
        el("td", s.createdAt, { class: "created" }),
        el("td", s.endedAt || "", { class: "ended" }),
        el("td", metadataText(s.userMetadata), { class: "metadata" }),
      );
      return tr;
    });
    $("sessions").tBodies[0].replaceChildren(...rows);
    const shown = rows.length === listed.length ? `${rows.length}` : `${rows.length} of ${listed.length}`;
    $("list-state").textContent = `${shown} session${listed.length === 1 ? "" : "s"}${cursor ? " (more to load)" : ""}.`;
    $("more").hidden = !cursor;
  }

  // ---- One session --------------------------------------------------------------------------

  /** Stops what the open session runs. */
  function close() {
    if (!current) return;
    current.abort.abort();
    for (const u of current.objectUrls) URL.revokeObjectURL(u);
    current = null;
  }

  function back() {
    close();
    $("detail").hidden = true;
    $("list").hidden = false;
    loadSessions(true);
  }

  /** Waits `ms` unless `signal` aborts first (then rejects). */
  function pause(ms, signal) {
    return new Promise((resolve, reject) => {
      const stop = () => {
        clearTimeout(t);
        reject(new DOMException("closed", "AbortError"));
      };
      const t = setTimeout(() => {
        signal.removeEventListener("abort", stop);
        resolve();
      }, ms);
      if (signal.aborted) stop();
      else signal.addEventListener("abort", stop, { once: true });
    });
  }

  async function openSession(id) {
    close();
    const abort = new AbortController();
    current = { id, abort, objectUrls: [] };
    const signal = abort.signal;
    $("list").hidden = true;
    $("detail").hidden = false;
    $("detail").dataset.id = id;
    $("detail-title").textContent = id;
    $("detail-fields").replaceChildren();
    $("logs").replaceChildren();
    $("logs").dataset.source = "";
    for (const box of ["live", "recording", "downloads"]) say(box, "Loading…", "loading");
    const s = await fields(id, signal).catch((e) => {
      if (e.name !== "AbortError") $("detail-title").textContent = `${id}: could not be read (${e.message})`;
      return null;
    });
    if (!s) return;
    const running = s.status === "RUNNING";
    // Each part says its own failure (a refused or blocked request: on AWS the downloads'
    // zip is a redirect to the bucket, which this page's policy does not fetch).
    const parts = [
      ["live", liveView(id, running, signal)],
      ["logs-state", running ? streamLogs(id, signal) : readLogs(id, signal)],
      ["recording", recording(id, running, signal)],
      ["downloads", downloads(id, signal)],
    ];
    for (const [box, p] of parts) {
      p.catch((e) => {
        if (!e || e.name === "AbortError") return;
        const why = `Could not be read here (${e.message || e}).`;
        if (box === "logs-state") $(box).textContent = why;
        else say(box, why, "error");
      });
    }
  }

  /** Shows the session's fields; the session, or null when it could not be read. */
  async function fields(id, signal) {
    const res = await api(`v1/sessions/${enc(id)}`, { signal });
    if (!res.ok) {
      const why = await problem(res);
      $("detail-fields").replaceChildren(el("dt", "error"), el("dd", why));
      for (const box of ["live", "recording", "downloads"]) say(box, "", "error");
      return null;
    }
    const s = (await bodyOf(res)) || {};
    const rows = [];
    for (const name of ["status", "createdAt", "startedAt", "endedAt", "expiresAt", "region",
      "contextId", "keepAlive", "proxyBytes"]) {
      rows.push(el("dt", name), el("dd", text(s[name]), { "data-field": name }));
    }
    rows.push(el("dt", "userMetadata"), el("dd", metadataText(s.userMetadata), { "data-field": "userMetadata" }));
    $("detail-fields").replaceChildren(...rows);
    return s;
  }

  // ---- Live view ----------------------------------------------------------------------------

  async function liveView(id, running, signal) {
    const box = $("live");
    if (!running) return say(box, "The session is not running: no live view.", "none");
    const res = await api(`v1/sessions/${enc(id)}/debug?mode=view`, { signal });
    if (!res.ok) return say(box, `No live view (${await problem(res)}).`, "error");
    const urls = (await bodyOf(res)) || {};
    const src = safeUrl(urls.debuggerUrl);
    if (!src) return say(box, "No live view was offered.", "none");
    const frame = el("iframe", null, {
      class: "live",
      title: "Live view",
      sandbox: "allow-scripts allow-same-origin",
      referrerpolicy: "no-referrer",
    });
    frame.src = src;
    const link = el("a", "Open the live view in a new tab", { target: "_blank", rel: "noopener noreferrer" });
    link.href = src;
    const under = el("p");
    under.append(link);
    // Direct mode: no viewer origin may be framed (the policy's frame-src); the link stays.
    const refused = (e) => {
      if (e.effectiveDirective !== "frame-src" || !box.contains(frame)) return;
      document.removeEventListener("securitypolicyviolation", refused);
      frame.remove();
      box.prepend(el("p", "The live view cannot be shown inside this page here.", { class: "state" }));
      box.dataset.state = "link";
    };
    document.addEventListener("securitypolicyviolation", refused);
    signal.addEventListener("abort", () => document.removeEventListener("securitypolicyviolation", refused));
    box.replaceChildren(frame, under);
    box.dataset.state = "live";
  }

  // ---- Log ----------------------------------------------------------------------------------

  function timeOf(ms) {
    return typeof ms === "number" && Number.isFinite(ms) ? new Date(ms).toISOString().slice(11, 23) : "";
  }

  /** What an entry says at a glance: a navigation's URL, else its parameters (cut). */
  function summary(e) {
    const params = e.request && e.request.params;
    if (params && typeof params.url === "string") return params.url;
    const s = params ? JSON.stringify(params) : "";
    return s.length > 200 ? s.slice(0, 200) + "…" : s;
  }

  function addEntry(e, id) {
    const list = $("logs");
    if (list.childElementCount >= MAX_LOG_ENTRIES) {
      $("logs-state").textContent = `Showing the first ${MAX_LOG_ENTRIES} entries.`;
      return;
    }
    const li = el("li", null, { "data-method": text(e.method) });
    if (id !== undefined) li.dataset.id = id;
    const details = el("details");
    const head = el("summary");
    head.append(
      el("span", timeOf(e.timestamp), { class: "time" }),
      el("span", `page ${text(e.pageId)}`, { class: "page" }),
      el("span", e.method, { class: "method" }),
      el("span", summary(e), { class: "summary" }),
    );
    details.append(head, el("pre", JSON.stringify(e, null, 2)));
    li.append(details);
    list.append(li);
  }

  async function readLogs(id, signal) {
    const res = await api(`v1/sessions/${enc(id)}/logs`, { signal });
    if (!res.ok) {
      $("logs-state").textContent = `The log could not be read (${await problem(res)}).`;
      return;
    }
    const entries = await bodyOf(res);
    $("logs").dataset.source = "list";
    const all = Array.isArray(entries) ? entries : [];
    all.forEach((e, i) => addEntry(e, String(i)));
    const cut = res.headers.get("x-wallcrawler-logs-truncated") === "true" ? " (cut: the log is longer)" : "";
    $("logs-state").textContent = all.length ? `${all.length} entries${cut}.` : "The log is empty.";
  }

  /**
   * The live log: GET …/logs/stream read with fetch (EventSource cannot send the key's
   * header), its `id:`/`event:`/`data:` lines parsed here, and on a dropped connection read
   * again from after the last id seen (`Last-Event-ID`) until `event: end`. Where the stream
   * cannot be had (a front door that buffers answers, such as API Gateway with Lambda), the
   * log is polled instead.
   */
  async function streamLogs(id, signal) {
    let lastId = null;
    let delay = 500;
    let failures = 0;
    $("logs").dataset.source = "stream";
    for (;;) {
      const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
      let outcome;
      try {
        const res = await api(`v1/sessions/${enc(id)}/logs/stream`, { headers, signal });
        if (!res.ok) {
          outcome = { kind: "refused", message: await problem(res) };
        } else {
          $("logs-state").textContent = "Following the log while the session runs…";
          outcome = await readEvents(res.body, signal, (ev) => {
            if (ev.id !== null) lastId = ev.id;
            delay = 500;
            failures = 0;
          });
        }
      } catch (e) {
        if (signal.aborted) throw e;
        outcome = { kind: "dropped" };
      }
      if (outcome.kind === "end") return ended(id, signal);
      if (outcome.kind === "error") {
        $("logs-state").textContent = `The log could not be read (${outcome.message}).`;
        return;
      }
      failures += 1;
      if (failures >= 3 || outcome.kind === "refused") return pollLogs(id, signal);
      $("logs-state").textContent = "The log's connection dropped; reconnecting…";
      await pause(delay, signal);
      delay = Math.min(delay * 2, 10000);
    }
  }

  /** The live log by polling GET …/logs: entries past those shown, until the session ends. */
  async function pollLogs(id, signal) {
    $("logs").dataset.source = "poll";
    $("logs-state").textContent = "Reading the log every few seconds while the session runs…";
    for (;;) {
      const s = await api(`v1/sessions/${enc(id)}`, { signal });
      const running = s.ok && ((await bodyOf(s)) || {}).status === "RUNNING";
      const res = await api(`v1/sessions/${enc(id)}/logs`, { signal });
      if (!res.ok) {
        $("logs-state").textContent = `The log could not be read (${await problem(res)}).`;
        return;
      }
      const entries = await bodyOf(res);
      const all = Array.isArray(entries) ? entries : [];
      for (let i = $("logs").childElementCount; i < all.length; i++) addEntry(all[i], String(i));
      if (!running) return ended(id, signal);
      await pause(POLL_MS, signal);
    }
  }

  /** The session ended while its log was followed. */
  async function ended(id, signal) {
    $("logs-state").textContent = `The session ended: ${$("logs").childElementCount} entries.`;
    say("live", "The session ended: no live view.", "none");
    await fields(id, signal);
  }

  /** Reads Server-Sent Events from `body` until it ends; `{kind: end|error|dropped}`. */
  async function readEvents(body, signal, onEvent) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    signal.addEventListener("abort", () => reader.cancel().catch(() => {}), { once: true });
    let buf = "";
    let ev = { id: null, event: "", data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return { kind: "dropped" };
      buf += value;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        let line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        if (line === "") {
          const stop = dispatch(ev, onEvent);
          if (stop) return stop;
          ev = { id: null, event: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? "" : line.slice(colon + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "id") ev.id = v;
        else if (field === "event") ev.event = v;
        else if (field === "data") ev.data.push(v);
      }
    }
  }

  /** One event: an entry, the end, or the server's error; the stream's end when it is one. */
  function dispatch(ev, onEvent) {
    if (ev.data.length === 0 && ev.id === null) return null;
    const data = ev.data.join("\n");
    if (ev.event === "end") return { kind: "end" };
    if (ev.event === "error") {
      let message = "the server failed";
      try {
        message = text(JSON.parse(data).message) || message;
      } catch {}
      return { kind: "error", message };
    }
    let entry = null;
    try {
      entry = JSON.parse(data);
    } catch {}
    if (entry && typeof entry === "object") addEntry(entry, ev.id === null ? undefined : ev.id);
    onEvent(ev);
    return null;
  }

  // ---- Recording ----------------------------------------------------------------------------

  /** How often a running session's recording is looked for while it has no page. */
  const RECORDING_POLL_MS = 2000;

  const RECORDING_WORDS = {
    NOT_REQUESTED: "The video has not been asked for yet.",
    PENDING: "The video is being made…",
    COMPLETED: "",
    FAILED: "The video could not be made.",
  };

  /** The session's recorded pages; while it runs (`running`), looked for again until one is. */
  async function recordedPages(id, running, signal) {
    const box = $("recording");
    for (;;) {
      const res = await api(`v1/sessions/${enc(id)}/replays`, { signal });
      if (res.status === 404 || res.status === 501) {
        say(box, "No recording: this platform keeps none for this session.", "none");
        return null;
      }
      if (!res.ok) {
        say(box, `The recording could not be read (${await problem(res)}).`, "error");
        return null;
      }
      const replays = (await bodyOf(res)) || {};
      const pages = Array.isArray(replays.pages) ? replays.pages : [];
      if (pages.length > 0) return pages;
      if (!running) {
        say(box, "Recording was off, or no page was recorded.", "off");
        return null;
      }
      say(box, "No page recorded yet: the video appears here as the session runs.", "waiting");
      await pause(RECORDING_POLL_MS, signal);
    }
  }

  async function recording(id, running, signal) {
    const box = $("recording");
    const pages = await recordedPages(id, running, signal);
    if (!pages) return;
    const figures = new Map();
    box.replaceChildren();
    for (const p of pages) {
      const fig = el("figure", null, { "data-page": text(p.pageId) });
      const caption = el("figcaption", `${text(p.url)} (${timeOf(p.startTimeMs)}–${timeOf(p.endTimeMs)})`);
      const state = el("p", "Asking for the video…", { class: "state" });
      fig.append(caption, state);
      box.append(fig);
      figures.set(text(p.pageId), { fig, state, video: null });
    }
    if (running) {
      // An MP4 is made of a whole recording: asked for once the session has ended.
      for (const { state } of figures.values()) {
        state.textContent = "Being recorded: the video can be watched once the session ends.";
      }
      box.dataset.state = "recording";
      return;
    }
    box.dataset.state = "pending";
    await videos(id, figures, signal);
  }

  /** Asks for the pages' MP4s (once), then polls until every one is made or failed. */
  async function videos(id, figures, signal) {
    const box = $("recording");
    const path = `v1/sessions/${enc(id)}/recording/downloads`;
    let asked = false;
    const deadline = Date.now() + RECORDING_WAIT_MS;
    for (;;) {
      const res = await api(path, { signal });
      if (!res.ok) return say(box, `The videos could not be listed (${await problem(res)}).`, "error");
      let list = ((await bodyOf(res)) || {}).downloads;
      list = Array.isArray(list) ? list : [];
      // Asked once each time the session is opened: the API builds what is not built, what
      // failed, and what was built before the recording grew (a running session's).
      if (!asked && list.length > 0) {
        asked = true;
        const made = await api(path, { method: "POST", signal });
        if (!made.ok) return say(box, `The videos could not be asked for (${await problem(made)}).`, "error");
        continue;
      }
      let waiting = false;
      for (const d of list) {
        const f = figures.get(text(d.pageId));
        if (!f) continue;
        f.fig.dataset.state = text(d.status);
        if (d.status === "COMPLETED" && !f.video) {
          const src = safeUrl(d.downloadUrl);
          if (!src) {
            f.state.textContent = "The video has no usable address.";
            continue;
          }
          f.video = el("video", null, { controls: "", preload: "metadata", class: "replay" });
          f.video.src = src;
          f.state.textContent = "";
          f.fig.append(f.video);
        } else if (d.status !== "COMPLETED") {
          f.state.textContent = RECORDING_WORDS[d.status] || `Unknown state ${text(d.status)}.`;
          if (d.status === "PENDING" || d.status === "NOT_REQUESTED") waiting = true;
        }
      }
      const states = list.map((d) => d.status);
      if (!waiting) {
        box.dataset.state = states.includes("COMPLETED") ? "ready" : "failed";
        return;
      }
      if (Date.now() > deadline) return say(box, "The videos took too long to make.", "failed");
      await pause(POLL_MS, signal);
    }
  }

  // ---- Downloads ----------------------------------------------------------------------------

  /** The file names in a zip's central directory (empty when it is not one we can read). */
  function zipNames(bytes) {
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let end = -1;
    for (let i = bytes.length - 22; i >= Math.max(0, bytes.length - 22 - 65535); i--) {
      if (v.getUint32(i, true) === 0x06054b50) {
        end = i;
        break;
      }
    }
    if (end < 0) return [];
    const count = v.getUint16(end + 10, true);
    let at = v.getUint32(end + 16, true);
    const names = [];
    const utf8 = new TextDecoder();
    for (let n = 0; n < count && at + 46 <= bytes.length; n++) {
      if (v.getUint32(at, true) !== 0x02014b50) break;
      const nameLen = v.getUint16(at + 28, true);
      const extra = v.getUint16(at + 30, true);
      const comment = v.getUint16(at + 32, true);
      names.push(utf8.decode(bytes.subarray(at + 46, at + 46 + nameLen)));
      at += 46 + nameLen + extra + comment;
    }
    return names;
  }

  async function downloads(id, signal) {
    const box = $("downloads");
    const res = await api(`v1/sessions/${enc(id)}/downloads`, { signal });
    if (res.status === 202) return say(box, "Files are still being saved: look again in a moment.", "pending");
    if (!res.ok) return say(box, `The downloads could not be read (${await problem(res)}).`, "error");
    const blob = await res.blob();
    const names = zipNames(new Uint8Array(await blob.arrayBuffer()));
    if (names.length === 0) return say(box, "The browser downloaded no files.", "empty");
    const url = URL.createObjectURL(blob);
    current && current.objectUrls.push(url);
    const list = el("ul");
    for (const n of names) list.append(el("li", n));
    const link = el("a", `Save the ${names.length} file${names.length === 1 ? "" : "s"} (zip, ${Math.ceil(blob.size / 1024)} KiB)`);
    link.href = url;
    link.download = `${id}-downloads.zip`;
    box.replaceChildren(list, link);
    box.dataset.state = "files";
  }

  // ---- Wiring -------------------------------------------------------------------------------

  $("use-key").addEventListener("click", useKey);
  $("key").addEventListener("keydown", (e) => {
    if (e.key === "Enter") useKey();
  });
  $("forget").addEventListener("click", forget);
  $("refresh").addEventListener("click", () => loadSessions(true));
  $("more").addEventListener("click", () => loadSessions(false));
  $("status-filter").addEventListener("change", () => loadSessions(true));
  $("text-filter").addEventListener("input", renderList);
  $("back").addEventListener("click", back);

  if (apiKey) {
    loadSessions(true).then((ok) => (ok ? showMain() : forget()));
  }
})();
