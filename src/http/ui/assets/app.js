// cairn dashboard: the little JavaScript the pages need. Rendering stays on the server:
// - Live regions: the page's Server-Sent Events stream (body[data-live]) says that
//   something changed; the page is fetched again and every [data-region] is swapped in,
//   keeping open <details>, an open dialog and the focused field as they were. EventSource
//   reconnects by itself and sends Last-Event-ID, so nothing is missed.
// - Forms with data-api post JSON to the API (see formRequest for the field names).
// - <time data-age> shows "3m ago", kept current against the server's clock.
// - The Model stream panel (#model-stream[data-stream]) follows the run's model stream
//   from the offset the server drew up to, appending each part to its call's block.

(() => {
  const body = document.body;
  const serverOffset = Number(body.dataset.now || Date.now()) - Date.now();
  const serverNow = () => Date.now() + serverOffset;

  // ---- relative times ----

  function relative(ms) {
    const d = serverNow() - ms;
    const a = Math.abs(d);
    if (a < 1000) return "just now";
    const unit =
      a < 60e3
        ? `${Math.floor(a / 1e3)}s`
        : a < 3600e3
          ? `${Math.floor(a / 60e3)}m`
          : a < 86400e3
            ? `${Math.floor(a / 3600e3)}h`
            : `${Math.floor(a / 86400e3)}d`;
    return d >= 0 ? `${unit} ago` : `in ${unit}`;
  }

  function refreshTimes(root) {
    for (const t of root.querySelectorAll("time[data-age]")) {
      const ms = Date.parse(t.getAttribute("datetime"));
      if (!Number.isNaN(ms)) t.textContent = relative(ms);
    }
    for (const t of root.querySelectorAll("time[data-local]")) {
      const ms = Date.parse(t.getAttribute("datetime"));
      if (!Number.isNaN(ms)) t.textContent = new Date(ms).toLocaleString();
    }
    // A run's "held" tag and words go once its hold has run out, and the words for a hold
    // that ran out come (held.ts).
    for (const t of root.querySelectorAll("[data-held-until]")) {
      const ms = Date.parse(t.dataset.heldUntil);
      if (!Number.isNaN(ms) && serverNow() >= ms) t.remove();
    }
    for (const t of root.querySelectorAll("[data-held-after][hidden]")) {
      const ms = Date.parse(t.dataset.heldAfter);
      if (!Number.isNaN(ms) && serverNow() >= ms) t.hidden = false;
    }
  }

  // ---- toast ----

  let toastTimer;
  function toast(text) {
    const el = document.getElementById("toast");
    if (!el) return;
    el.textContent = text;
    el.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => {
      el.hidden = true;
    }, 3500);
  }

  // ---- live regions ----

  let refreshing = false;
  let again = false;
  let refreshTimer;

  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 120);
  }

  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    try {
      const res = await fetch(location.href, {
        // x-cairn-refresh: only the live regions are wanted (the server skips the rest).
        headers: { accept: "text/html", "x-cairn-refresh": "1" },
        credentials: "same-origin",
      });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      for (const fresh of doc.querySelectorAll("[data-region]")) {
        const current = document.getElementById(fresh.id);
        if (!current) continue;
        if (current.querySelector("dialog[open]")) continue;
        const focused = document.activeElement;
        if (focused && current.contains(focused) && focused.matches("input, textarea, select")) {
          continue;
        }
        const open = new Set();
        for (const d of current.querySelectorAll("details[open]")) {
          open.add(d.dataset.key || d.querySelector("summary")?.textContent || "");
        }
        const before = new Map();
        for (const tr of current.querySelectorAll("tr[data-sig]")) {
          before.set(tr.dataset.run, tr.dataset.sig);
        }
        current.replaceWith(fresh);
        for (const d of fresh.querySelectorAll("details")) {
          const key = d.dataset.key || d.querySelector("summary")?.textContent || "";
          if (open.has(key)) d.open = true;
        }
        for (const tr of fresh.querySelectorAll("tr[data-sig]")) {
          if (before.size > 0 && before.get(tr.dataset.run) !== tr.dataset.sig) {
            tr.classList.add("flash");
          }
        }
        refreshTimes(fresh);
      }
      body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
    } catch {
      // The stream's own state shows a broken connection; the next event retries.
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        scheduleRefresh();
      }
    }
  }

  function setLive(state, label) {
    const el = document.getElementById("live-status");
    if (!el) return;
    el.dataset.state = state;
    const text = el.querySelector(".live-text");
    if (text) text.textContent = label;
  }

  function connect(url) {
    const source = new EventSource(url, { withCredentials: true });
    // Every message means "changed" — the first (the state when the stream opened) too,
    // in case something changed between rendering this page and subscribing.
    const onChange = () => {
      setLive("live", "live");
      scheduleRefresh();
    };
    for (const type of ["snapshot", "run", "step", "run-event", "leave", "workers"]) {
      source.addEventListener(type, onChange);
    }
    source.addEventListener("problem", (e) => {
      let data = {};
      try {
        data = JSON.parse(e.data);
      } catch {}
      if (data.ok) setLive("live", "live");
      else setLive("problem", "store unavailable");
    });
    source.onopen = () => setLive("live", "live");
    source.onerror = () => setLive("reconnecting", "reconnecting");
    window.addEventListener("pagehide", () => source.close());
  }

  // ---- model stream ----

  function followStream(panel) {
    const calls = panel.querySelector(".mcalls");
    const state = panel.querySelector("[data-stream-state]");
    const url = `${panel.dataset.stream}?from=${encodeURIComponent(panel.dataset.from || "0")}`;
    const source = new EventSource(url, { withCredentials: true });
    // A call's later execution (a higher attempt, or a higher generation after a resume,
    // where attempts start again at 1) replaces what an earlier one showed.
    const later = (g, a, h, b) => (g !== h ? g > h : a > b);
    const shown = (block) => [
      Number(block.dataset.generation || "0"),
      Number(block.dataset.attempt),
    ];
    const blockFor = (c) => {
      const generation = typeof c.generation === "number" ? c.generation : 0;
      let block = [...calls.querySelectorAll(".mcall")].find((b) => b.dataset.call === c.call);
      if (!block || later(generation, c.attempt, ...shown(block))) {
        const fresh = document.createElement("div");
        fresh.className = "mcall";
        fresh.dataset.call = c.call;
        fresh.dataset.generation = String(generation);
        fresh.dataset.attempt = String(c.attempt);
        const head = document.createElement("div");
        head.className = "mhead";
        const name = document.createElement("code");
        name.textContent = c.name;
        const attempt = document.createElement("span");
        attempt.className = "muted";
        attempt.dataset.role = "attempt";
        attempt.textContent = c.attempt > 1 ? `attempt ${c.attempt}` : "";
        const notes = document.createElement("span");
        notes.className = "muted";
        notes.dataset.role = "notes";
        head.append(name, " ", attempt, " ", notes);
        const reasoning = document.createElement("pre");
        reasoning.className = "mreason";
        reasoning.dataset.role = "reasoning";
        reasoning.hidden = true;
        const text = document.createElement("pre");
        text.className = "mtext";
        text.dataset.role = "text";
        fresh.append(head, reasoning, text);
        if (block) block.replaceWith(fresh);
        else calls.append(fresh);
        block = fresh;
      }
      return later(...shown(block), generation, c.attempt) ? undefined : block;
    };
    source.addEventListener("chunk", (e) => {
      let c;
      try {
        c = JSON.parse(e.data);
      } catch {
        return;
      }
      panel.hidden = false;
      const block = blockFor(c);
      if (!block) return;
      const part = c.part || {};
      const role = (r) => block.querySelector(`[data-role="${r}"]`);
      if (part.type === "text-delta") role("text").textContent += part.delta || "";
      else if (part.type === "reasoning-delta") {
        role("reasoning").hidden = false;
        role("reasoning").textContent += part.delta || "";
      } else if (part.type === "tool-call" || part.type === "error" || part.type === "finish") {
        const note =
          part.type === "tool-call"
            ? `tool call: ${part.toolName}`
            : part.type === "error"
              ? "error"
              : "finished";
        const notes = role("notes");
        notes.textContent = notes.textContent ? `${notes.textContent} · ${note}` : note;
      }
      panel.dataset.from = String(c.offset + 1);
    });
    source.addEventListener("end", () => {
      source.close();
      if (state) state.textContent = "done";
    });
    source.onerror = () => {
      if (state && source.readyState !== 2) state.textContent = "reconnecting";
    };
    source.onopen = () => {
      if (state) state.textContent = "live";
    };
    window.addEventListener("pagehide", () => source.close());
  }

  // ---- forms ----

  /** As run-id-segment.ts: runs "." and ".." are named "%20." and "%20.." in a URL. */
  function runIdSegment(id) {
    return id === "." || id === ".." ? `%20${id}` : encodeURIComponent(id);
  }

  function parseAmounts(text, into) {
    for (const part of text.split(",")) {
      if (part.trim() === "") continue;
      const eq = part.indexOf("=");
      const name = part.slice(0, eq).trim();
      const value = Number(part.slice(eq + 1).trim());
      if (eq < 0 || name === "" || !Number.isFinite(value) || value < 0) {
        throw new Error(
          `Budget: write name=amount pairs, e.g. usd=5, tokens=100000 ("${part.trim()}")`,
        );
      }
      into[name] = value;
    }
  }

  /** Field names: "body" (the whole JSON body), "body.<prop>", "path.<param>" (fills
   *  {param} in data-api), "header.<name>". data-json parses JSON, data-number a number,
   *  data-amounts "usd=5, tokens=10" into an object, data-key sets one key of an object
   *  field, data-with-version splits "name@version" into workflow and version. */
  function formRequest(form) {
    let url = form.dataset.api;
    let bodyValue;
    let hasBody = false;
    const props = {};
    const headers = {};
    for (const el of form.elements) {
      if (!el.name || el.disabled) continue;
      const raw = el.value;
      if (raw.trim() === "") continue;
      const [where, prop] = [el.name.split(".")[0], el.name.slice(el.name.indexOf(".") + 1)];
      let value = raw;
      if ("json" in el.dataset) {
        try {
          value = JSON.parse(raw);
        } catch {
          throw new Error(
            `${el.closest("label")?.firstChild?.textContent?.trim() || el.name}: not valid JSON`,
          );
        }
      } else if ("number" in el.dataset) {
        value = Number(raw);
      }
      if (where === "path") {
        url = url.replace(`{${prop}}`, encodeURIComponent(raw));
      } else if (where === "header") {
        // As the API's rule: a header's text must be printable ASCII (fetch would refuse
        // most of the rest as "could not reach the server").
        if (!/^[\x20-\x7e]*$/.test(raw)) {
          throw new Error(
            `${el.closest("label")?.firstChild?.textContent?.trim() || prop}: use printable ASCII characters (it travels in an HTTP header)`,
          );
        }
        headers[prop] = raw;
      } else if (el.name === "body") {
        bodyValue = value;
        hasBody = true;
      } else if ("amounts" in el.dataset) {
        props[prop] = props[prop] || {};
        parseAmounts(raw, props[prop]);
      } else if (el.dataset.key !== undefined) {
        props[prop] = props[prop] || {};
        props[prop][el.dataset.key] = value;
      } else if ("withVersion" in el.dataset) {
        const at = raw.lastIndexOf("@");
        props[prop] = raw.slice(0, at);
        props.version = raw.slice(at + 1);
      } else {
        props[prop] = value;
      }
    }
    if (!hasBody && Object.keys(props).length > 0) {
      bodyValue = props;
      hasBody = true;
    }
    if (hasBody) headers["content-type"] = "application/json";
    return {
      url,
      init: {
        method: "POST",
        credentials: "same-origin",
        headers,
        body: hasBody ? JSON.stringify(bodyValue) : undefined,
      },
    };
  }

  async function submit(form) {
    const error = form.querySelector(".form-error");
    const button = form.querySelector('button[type="submit"]');
    if (error) error.hidden = true;
    let request;
    try {
      request = formRequest(form);
    } catch (err) {
      if (error) {
        error.textContent = err.message;
        error.hidden = false;
      }
      return;
    }
    if (button) button.disabled = true;
    try {
      const res = await fetch(request.url, request.init);
      const text = await res.text();
      let data = {};
      try {
        data = JSON.parse(text);
      } catch {}
      if (!res.ok) {
        const message = data.error ? `${data.error.message}` : `The server answered ${res.status}`;
        if (error) {
          error.textContent = message;
          error.hidden = false;
        }
        return;
      }
      form.closest("dialog")?.close();
      form.reset();
      if (form.dataset.then === "open-run" && data.run) {
        location.href = `${body.dataset.base}/runs/${runIdSegment(data.run.id)}`;
        return;
      }
      // An answer that says what happened in words (a cancel of a run canceled already) is
      // shown as it says it.
      toast(
        typeof data.message === "string"
          ? data.message
          : data.duplicate
            ? "Already sent (same idempotency key)"
            : "Done",
      );
      scheduleRefresh();
    } catch (err) {
      if (error) {
        error.textContent = `Could not reach the server: ${err.message}`;
        error.hidden = false;
      }
    } finally {
      if (button) button.disabled = false;
    }
  }

  // ---- wiring ----

  document.addEventListener("click", (e) => {
    const opener = e.target.closest("[data-open]");
    if (opener) {
      const dialog = document.getElementById(opener.dataset.open);
      if (dialog && typeof dialog.showModal === "function") {
        const error = dialog.querySelector(".form-error");
        if (error) error.hidden = true;
        dialog.showModal();
      }
      return;
    }
    const closer = e.target.closest("[data-close]");
    if (closer) closer.closest("dialog")?.close();
  });

  document.addEventListener("submit", (e) => {
    const form = e.target;
    if (!(form instanceof HTMLFormElement) || form.dataset.api === undefined) return;
    e.preventDefault();
    void submit(form);
  });

  refreshTimes(document);
  setInterval(() => refreshTimes(document), 1000);
  if (body.dataset.live) connect(body.dataset.live);
  const streamPanel = document.getElementById("model-stream");
  if (streamPanel?.dataset.stream) followStream(streamPanel);
})();
