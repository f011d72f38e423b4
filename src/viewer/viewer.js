"use strict";
(() => {
  const params = new URLSearchParams(location.search);
  if (params.get("fullscreen") === "1") document.body.classList.add("fullscreen");
  const canvas = document.getElementById("screen");
  const ctx = canvas.getContext("2d");
  const tabsEl = document.getElementById("tabs");
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(proto + "//" + location.host + "/viewer/ws" + location.search);
  let device = { w: 0, h: 0 };
  let pending = null;
  let drawing = false;
  // What a test (or a person at the console) can read: frames drawn, the page's size, and a
  // ping answered once the server has handled everything sent before it.
  const state = { frames: 0, device: null, pongs: [], handoff: null };
  window.viewer = {
    get frames() { return state.frames; },
    get handoff() { return state.handoff; },
    get device() { return state.device; },
    ping: () => new Promise((resolve) => { state.pongs.push(resolve); send({ type: "ping" }); }),
  };
  function draw() {
    if (drawing || !pending) return;
    const f = pending;
    pending = null;
    drawing = true;
    const img = new Image();
    img.onload = () => {
      if (canvas.width !== img.width || canvas.height !== img.height) {
        canvas.width = img.width;
        canvas.height = img.height;
      }
      ctx.drawImage(img, 0, 0);
      device = { w: f.w || img.width, h: f.h || img.height };
      state.frames++;
      state.device = device;
      drawing = false;
      draw();
    };
    img.onerror = () => { drawing = false; draw(); };
    img.src = "data:image/jpeg;base64," + f.data;
  }
  function showTabs(m) {
    tabsEl.textContent = "";
    for (const t of m.tabs) {
      const b = document.createElement("button");
      b.textContent = t.title || t.url || t.id;
      b.title = t.url;
      if (t.id === m.active) b.className = "active";
      b.onclick = () => send({ type: "select", page: t.id });
      tabsEl.appendChild(b);
    }
  }
  // A client asked for a person: the reason (as text, never markup) and, for a control
  // viewer, a Done button that ends the handoff.
  const banner = document.createElement("div");
  banner.id = "handoff";
  banner.hidden = true;
  const reasonEl = document.createElement("span");
  const doneEl = document.createElement("button");
  doneEl.id = "handoff-done";
  doneEl.textContent = "Done";
  doneEl.onclick = () => { if (state.handoff) send({ type: "done", handoff: state.handoff.id }); };
  banner.append(reasonEl, doneEl);
  document.body.insertBefore(banner, canvas);
  function showHandoff(m) {
    state.handoff = m.handoff;
    banner.hidden = !m.handoff;
    document.body.classList.toggle("handoff", !!m.handoff);
    reasonEl.textContent = m.handoff ? m.handoff.reason : "";
    doneEl.hidden = !m.canComplete;
  }
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.type === "frame") { pending = m; draw(); }
    else if (m.type === "tabs") showTabs(m);
    else if (m.type === "handoff") showHandoff(m);
    else if (m.type === "pong") { const r = state.pongs.shift(); if (r) r(); }
  };
  function send(m) { if (ws.readyState === 1) ws.send(JSON.stringify(m)); }
  // Canvas pixels (object-fit: contain) to the page's CSS pixels.
  function point(e) {
    const r = canvas.getBoundingClientRect();
    if (!canvas.width || !canvas.height) return null;
    const scale = Math.min(r.width / canvas.width, r.height / canvas.height);
    const ox = (r.width - canvas.width * scale) / 2, oy = (r.height - canvas.height * scale) / 2;
    const cx = (e.clientX - r.left - ox) / scale, cy = (e.clientY - r.top - oy) / scale;
    return { x: cx * device.w / canvas.width, y: cy * device.h / canvas.height };
  }
  function mods(e) { return (e.altKey ? 1 : 0) | (e.ctrlKey ? 2 : 0) | (e.metaKey ? 4 : 0) | (e.shiftKey ? 8 : 0); }
  const BUTTONS = ["left", "middle", "right"];
  function mouse(kind) {
    return (e) => {
      const p = point(e);
      if (!p) return;
      e.preventDefault();
      if (kind === "mousePressed") canvas.focus();
      send({ type: "mouse", event: kind, x: p.x, y: p.y, modifiers: mods(e),
        button: kind === "mouseMoved" ? "none" : (BUTTONS[e.button] || "none"),
        clickCount: kind === "mouseMoved" ? 0 : Math.min(e.detail || 1, 3) });
    };
  }
  canvas.addEventListener("mousedown", mouse("mousePressed"));
  canvas.addEventListener("mouseup", mouse("mouseReleased"));
  canvas.addEventListener("mousemove", mouse("mouseMoved"));
  canvas.addEventListener("contextmenu", (e) => e.preventDefault());
  canvas.addEventListener("wheel", (e) => {
    const p = point(e);
    if (!p) return;
    e.preventDefault();
    send({ type: "wheel", x: p.x, y: p.y, deltaX: e.deltaX, deltaY: e.deltaY, modifiers: mods(e) });
  }, { passive: false });
  canvas.addEventListener("keydown", (e) => {
    e.preventDefault();
    if (e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) {
      send({ type: "text", text: e.key });
      return;
    }
    send({ type: "key", event: "keyDown", key: e.key, code: e.code, keyCode: e.keyCode, modifiers: mods(e) });
  });
  canvas.addEventListener("keyup", (e) => {
    e.preventDefault();
    if (e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) return;
    send({ type: "key", event: "keyUp", key: e.key, code: e.code, keyCode: e.keyCode, modifiers: mods(e) });
  });
  canvas.addEventListener("paste", (e) => {
    const t = e.clipboardData && e.clipboardData.getData("text");
    if (t) { e.preventDefault(); send({ type: "text", text: t.slice(0, 4096) }); }
  });
})();
