// jobledger dashboard: live updates for the server-rendered pages. No build step.
// Every value from the server is written with textContent (never innerHTML): payloads,
// outputs, errors and metadata are user data and may contain markup.
"use strict";

(function () {
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  const live = document.getElementById("live");

  function setLive(state) {
    if (!live) return;
    live.dataset.state = state;
    live.title = state === "on" ? "live updates" : state === "done" ? "finished" : "reconnecting";
  }

  // Render <time datetime="..."> in the browser's local time zone: the time alone for
  // today, the date too otherwise; the ISO value stays in the tooltip.
  function pad(n) {
    return String(n).padStart(2, "0");
  }

  function localizeTimes(root) {
    const today = new Date().toDateString();
    for (const el of root.querySelectorAll("time[datetime]")) {
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
      const date = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
      el.textContent = d.toDateString() === today ? time : `${date} ${time}`;
      el.title = el.getAttribute("datetime");
    }
  }

  // The throughput chart is drawn on the server in UTC; its labels are re-written in the
  // browser's time zone, like every <time> above.
  function localizeChart(root) {
    const chart = root.querySelector("#throughput-chart");
    if (!chart) return;
    for (const el of chart.querySelectorAll("[data-at]")) {
      const d = new Date(el.getAttribute("data-at"));
      if (isNaN(d.getTime())) continue;
      const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
      if (el.tagName === "title") {
        const g = el.parentNode;
        el.textContent = `${hm}: ${g.dataset.completed} completed, ${g.dataset.failed} failed`;
      } else {
        el.textContent = hm;
      }
    }
    const zone = chart.querySelector("#chart-zone");
    if (zone) zone.textContent = "local";
  }

  function pretty(value) {
    return JSON.stringify(value === undefined ? null : value, null, 2);
  }

  function setTime(el, iso) {
    el.textContent = "";
    if (!iso) {
      const span = document.createElement("span");
      span.className = "muted";
      span.textContent = "—";
      el.appendChild(span);
      return;
    }
    const t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.textContent = iso;
    el.appendChild(t);
    localizeTimes(el);
  }

  // ---- job page: a live progress bar from the server-sent events --------------------

  function jobPage() {
    const id = document.body.dataset.jobId;
    const bar = document.getElementById("progress");
    const barText = document.getElementById("progress-text");
    const detail = document.getElementById("progress-detail");
    const statusEl = document.getElementById("status");

    // The rule of `shown_progress`/`progress_label` in _observe/read_model.py: a completed
    // job shows 100%, others what they last reported, to one decimal.
    function setProgress(status, progress, text) {
      const value = status === "completed" ? 100 : progress == null ? 0 : progress;
      bar.className = `p-${status}`;
      bar.value = value;
      bar.setAttribute("value", String(value));
      barText.textContent = `${Math.round(value * 10) / 10}%`;
      detail.textContent = text || "";
    }

    function setStatus(status) {
      document.body.dataset.status = status;
      statusEl.textContent = "";
      const badge = document.createElement("span");
      badge.className = `badge status-${status}`;
      badge.dataset.status = status;
      badge.textContent = status;
      statusEl.appendChild(badge);
    }

    function field(name) {
      return document.querySelector(`[data-field="${name}"]`);
    }

    function applySnapshot(s) {
      setStatus(s.status);
      setProgress(s.status, s.progress, s.progress_detail);
      field("attempt").textContent = `${s.attempt + 1} of ${s.max_attempts}`;
      field("worker_id").textContent = s.worker_id || "—";
      field("cancel_requested").textContent = s.cancel_requested ? "yes" : "no";
      for (const k of ["scheduled_at", "started_at", "finished_at", "updated_at"]) {
        setTime(field(k), s[k]);
      }
      const errSection = document.getElementById("error-section");
      errSection.hidden = !s.error;
      document.getElementById("error").textContent = pretty(s.error);
      const tb = document.getElementById("error-traceback");
      tb.textContent = (s.error && s.error.traceback) || "";
      tb.hidden = !tb.textContent;
      document.getElementById("error-code").textContent = s.error ? s.error.code : "";
      document.getElementById("error-message").textContent = s.error ? s.error.message : "";
      document.getElementById("output").textContent = pretty(s.output);
      document.getElementById("metadata").textContent = pretty(s.metadata);
    }

    // When an attempt ends, the server-rendered parts that depend on it (the attempt
    // timeline and table, why it waits, its lineage) are fetched again and swapped in:
    // the page is drawn in one place, the templates.
    let shownAttempts = document.querySelectorAll("#attempts tr.attempt").length;
    async function refreshAttempts() {
      const r = await fetch(`/api/jobs/${encodeURIComponent(id)}/attempts`);
      if (!r.ok) return;
      const items = (await r.json()).items;
      if (items.length === shownAttempts) return;
      shownAttempts = items.length;
      await swapFromServer(["attempts-section", "why-section", "lineage"]);
    }

    if (TERMINAL.has(document.body.dataset.status)) {
      setLive("done");
      return;
    }
    const es = new EventSource(`/api/jobs/${encodeURIComponent(id)}/events`);
    es.addEventListener("open", () => setLive("on"));
    es.addEventListener("error", () => setLive(es.readyState === EventSource.CLOSED ? "done" : "off"));
    es.addEventListener("progress", (ev) => {
      const p = JSON.parse(ev.data);
      setProgress(p.status, p.progress, p.progress_detail);
      setTime(field("updated_at"), p.updated_at);
    });
    es.addEventListener("snapshot", (ev) => {
      const s = JSON.parse(ev.data);
      applySnapshot(s);
      refreshAttempts();
      if (TERMINAL.has(s.status)) {
        es.close(); // the server ends the stream; without close() the browser reconnects
        setLive("done");
      }
    });
    es.addEventListener("gone", () => {
      es.close();
      setLive("done");
    });
  }

  // ---- refreshing parts of a page from the server ---------------------------------

  // Fetch this page again and swap in the elements with these ids (DOMParser builds an
  // inert document: nothing in it runs). An id missing on either side is left alone,
  // except that a section gone from the fresh page (why-section once a job runs) goes.
  async function swapFromServer(ids) {
    const res = await fetch(window.location.href, { headers: { accept: "text/html" } });
    if (!res.ok) throw new Error(String(res.status));
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    for (const id of ids) {
      const fresh = doc.getElementById(id);
      const old = document.getElementById(id);
      if (fresh && old) old.replaceWith(document.adoptNode(fresh));
      else if (old && !fresh && old.tagName === "SECTION") old.remove();
      else if (fresh && !old && id === "why-section") {
        const after = document.querySelector("dl.facts");
        if (after) after.after(document.adoptNode(fresh));
      }
    }
    localizeTimes(document);
    localizeChart(document);
    return doc;
  }

  // The overview, jobs, workers and audit pages: every element marked data-refresh is
  // fetched again every 2 s (forms are never marked, so nothing being typed is lost).
  function refreshingPage() {
    const ids = Array.from(document.querySelectorAll("[data-refresh][id]"), (el) => el.id);
    if (!ids.length) return;
    let busy = false;
    async function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      try {
        await swapFromServer(ids);
        setLive("on");
      } catch (e) {
        setLive("off");
      } finally {
        busy = false;
      }
    }
    setLive("on");
    window.setInterval(refresh, 2000);
  }

  // ---- workflow page: the graph, drawn as SVG -----------------------------------------
  // dagre (static/vendor/) gives the positions of nodes and edge points; nothing else
  // of it is used. One node per step (a step of many jobs shows its counts), so a
  // workflow of 10,000 jobs is still a graph of a few nodes.

  const SVG = "http://www.w3.org/2000/svg";
  const NODE_W = 220;
  const NODE_H = 52;
  const STATUS_ORDER = ["pending", "delayed", "running", "completed", "failed", "cancelled", "waiting"];

  function svgEl(name, attrs, parent) {
    const el = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  function clip(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function countsText(counts) {
    return STATUS_ORDER.filter((s) => counts[s]).map((s) => `${counts[s]} ${s}`).join(", ");
  }

  function drawGraph(figure) {
    const steps = JSON.parse(figure.dataset.graph || "[]");
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 20, ranksep: 56, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const s of steps) g.setNode(s.key, { width: NODE_W, height: NODE_H });
    for (const s of steps) {
      for (const up of s.upstream) if (g.hasNode(up)) g.setEdge(up, s.key, { policy: s.policy });
    }
    dagre.layout(g);
    const size = g.graph();
    const svg = svgEl("svg", {
      id: "workflow-svg",
      class: "graph",
      viewBox: `0 0 ${Math.ceil(size.width)} ${Math.ceil(size.height)}`,
      width: Math.ceil(size.width),
      height: Math.ceil(size.height),
      role: "img",
      "aria-label": "workflow graph",
    });
    const defs = svgEl("defs", {}, svg);
    const marker = svgEl("marker", {
      id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse",
    }, defs);
    svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }, marker);
    const edges = svgEl("g", { class: "edges" }, svg);
    for (const e of g.edges()) {
      const info = g.edge(e);
      const d = info.points.map((p, i) => `${i ? "L" : "M"} ${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" ");
      const path = svgEl("path", {
        d, class: `edge${info.policy === "run" ? " policy-run" : ""}`, "marker-end": "url(#arrow)",
      }, edges);
      path.dataset.from = e.v;
      path.dataset.to = e.w;
    }
    const nodes = svgEl("g", { class: "nodes" }, svg);
    for (const s of steps) {
      const n = g.node(s.key);
      const link = svgEl("a", { href: s.href }, nodes);
      const node = svgEl("g", {
        class: `node status-${s.status}${s.outside ? " outside" : ""}`,
        transform: `translate(${(n.x - NODE_W / 2).toFixed(1)} ${(n.y - NODE_H / 2).toFixed(1)})`,
      }, link);
      node.dataset.key = s.key;
      node.dataset.status = s.status;
      node.dataset.jobs = String(s.jobs);
      const summary = s.jobs === 1 ? s.status : countsText(s.counts);
      const title = svgEl("title", {}, node);
      title.textContent = `${s.name}${s.outside ? " (another workflow)" : ""}: ${s.jobs} job(s), ${countsText(s.counts)}`;
      svgEl("rect", { width: NODE_W, height: NODE_H, rx: 6, ry: 6 }, node);
      const head = svgEl("text", { x: 10, y: 20, class: "step-name" }, node);
      head.textContent = clip(s.name + (s.jobs > 1 ? ` ×${s.jobs}` : ""), 28);
      const counts = svgEl("text", { x: 10, y: 40, class: "step-counts" }, node);
      counts.textContent = clip(summary, 34);
    }
    const old = figure.querySelector("svg");
    if (old) old.replaceWith(svg);
    else figure.appendChild(svg);
  }

  function workflowPage() {
    const figure = document.getElementById("workflow-graph");
    if (!figure || typeof dagre === "undefined") return;
    drawGraph(figure);
    if (TERMINAL.has(document.body.dataset.status)) {
      setLive("done");
      return;
    }
    // While it runs: the page again, its graph and tables swapped in place.
    let busy = false;
    async function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      try {
        const res = await fetch(window.location.href, { headers: { accept: "text/html" } });
        if (!res.ok) throw new Error(String(res.status));
        const doc = new DOMParser().parseFromString(await res.text(), "text/html");
        const fresh = doc.getElementById("workflow-graph");
        if (fresh) {
          figure.dataset.graph = fresh.dataset.graph;
          drawGraph(figure);
        }
        for (const id of ["status", "workflow-counts", "steps-table"]) {
          const next = doc.getElementById(id);
          const old = document.getElementById(id);
          if (next && old) old.replaceWith(document.adoptNode(next));
        }
        localizeTimes(document);
        const status = doc.body.dataset.status;
        document.body.dataset.status = status;
        if (TERMINAL.has(status)) {
          window.clearInterval(timer);
          setLive("done");
        } else {
          setLive("on");
        }
      } catch (e) {
        setLive("off");
      } finally {
        busy = false;
      }
    }
    setLive("on");
    const timer = window.setInterval(refresh, 2000);
  }

  // ---- actions (only rendered for a principal who may act) ---------------------------
  // A same-origin fetch, so the browser sends Origin and the cookie; a failure shows
  // the API's error envelope {"error": {"code", "message"}} next to the control.

  function resultSlot(control) {
    const scope = control.closest("form, .confirm, td, .progress-row, section");
    let slot = scope && scope.querySelector(".action-result");
    if (!slot && control.closest(".progress-row")) slot = document.getElementById("action-result");
    if (!slot) {
      slot = document.createElement("span");
      slot.className = "action-result";
      slot.setAttribute("role", "status");
      control.after(slot);
    }
    return slot;
  }

  function showResult(control, text, failed) {
    const slot = resultSlot(control);
    slot.textContent = text;
    slot.classList.toggle("error", Boolean(failed));
    slot.setAttribute("role", failed ? "alert" : "status");
  }

  async function post(url, body) {
    const init = { method: "POST", headers: { accept: "application/json" } };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(url, init);
    let answer = null;
    try {
      answer = await res.json();
    } catch (e) {
      answer = null;
    }
    if (!res.ok) {
      const err = answer && answer.error;
      throw new Error(err ? `${err.code}: ${err.message}` : `HTTP ${res.status}`);
    }
    return answer || {};
  }

  function summary(body) {
    if (typeof body.retried === "number") return `Retried ${body.retried} job${body.retried === 1 ? "" : "s"}.`;
    if (typeof body.cancelled === "number") {
      const asked = body.asked_to_stop ? `; ${body.asked_to_stop} running asked to stop` : "";
      return `Cancelled ${body.cancelled} job${body.cancelled === 1 ? "" : "s"}${asked}.`;
    }
    return body.outcome || (body.enqueued === true ? "enqueued" : body.enqueued === false ? "not enqueued" : "done");
  }

  document.addEventListener("click", async (ev) => {
    const button = ev.target.closest("button[data-action-url]");
    if (!button) return;
    button.disabled = true;
    const label = button.textContent;
    button.textContent = "…";
    try {
      const body = button.dataset.actionBody ? JSON.parse(button.dataset.actionBody) : undefined;
      const answer = await post(button.dataset.actionUrl, body);
      if (button.dataset.actionOpens === "job" && answer.id) {
        // A retry answers with the new job: show it.
        window.location.assign(`/jobs/${encodeURIComponent(answer.id)}`);
        return;
      }
      if (button.dataset.actionReload === "yes") {
        window.location.reload();
        return;
      }
      const text = summary(answer);
      button.textContent = text.length <= 24 ? text : label;
      if (text.length > 24 || button.closest(".confirm")) showResult(button, text, false);
    } catch (e) {
      button.textContent = label;
      button.disabled = false;
      button.title = String(e.message || e);
      button.classList.add("failed");
      showResult(button, String(e.message || e), true);
    }
  });

  // A schedule's trigger form: {"cron", "timezone"?} or {"every": seconds}.
  document.addEventListener("submit", async (ev) => {
    const form = ev.target.closest("form[data-action-url]");
    if (!form) return;
    ev.preventDefault();
    const data = new FormData(form);
    let body;
    if (data.get("kind") === "every") {
      body = { every: Number(data.get("every")) };
    } else {
      body = { cron: String(data.get("cron") || "").trim() };
      const tz = String(data.get("timezone") || "").trim();
      if (tz) body.timezone = tz;
    }
    const submit = form.querySelector("button[type=submit]");
    if (submit) submit.disabled = true;
    try {
      await post(form.dataset.actionUrl, body);
      window.location.reload();
    } catch (e) {
      if (submit) submit.disabled = false;
      showResult(submit || form, String(e.message || e), true);
    }
  });

  localizeTimes(document);
  localizeChart(document);
  const page = document.body.dataset.page;
  if (page === "job") jobPage();
  else if (page === "workflow") workflowPage();
  else refreshingPage();
})();
