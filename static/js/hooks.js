// Parley's page script: the live socket, the server's HTML updates, client-tool hooks and
// progressively enhanced forms. Plain JavaScript, no build step; every page works without it.
//
// Server → page frames (JSON text):
//   {"type":"html","op":"replace|upsert|append|prepend|remove","target":"<id>","parent":"<id>","rev":"…","html":"…"}
//   {"type":"text","target":"<id>","text":"…"}          (coalesced streaming text, appended)
//   {"type":"client_exec","tool_call_id":"…","tool":"…","args":{…},"ask":true}
//     (ask: the person allows the run first, in the card's [data-parley="client-consent"])
//   {"type":"resolved","tool_call_id":"…","ok":true}   or  {…,"ok":false,"kind":"…","message":"…"}
//   {"type":"count","count":2}   (the count-only inbox socket, /inbox/ws?count=1)
// Page → server:
//   {"type":"resolve","tool_call_id":"…","result":{…}}  or  {…,"error":{"message":"…"}}
(function () {
  "use strict";

  const parley = (window.parley = window.parley || {});
  const hooks = new Map();

  // The hook registry: a client tool named `name` runs `fn(args)`, which returns (or resolves
  // to) the tool's result; a throw or a rejection becomes the call's error.
  parley.hooks = {
    register(name, fn) {
      if (typeof name !== "string" || typeof fn !== "function") {
        throw new TypeError("parley.hooks.register(name, fn) needs a name and a function");
      }
      hooks.set(name, fn);
    },
    get(name) {
      return hooks.get(name);
    },
  };

  // HOOK_TIMEOUT_MS bounds every hook, so a call never waits in silence.
  const HOOK_TIMEOUT_MS = 30000;
  const GEO_TIMEOUT_MS = 10000;

  // geolocation is built in: the browser's position, or an error when permission is denied or
  // no position arrives in time (a pending permission prompt never times out by itself, hence
  // the outer timer).
  parley.hooks.register("geolocation", function (args) {
    return new Promise(function (resolve, reject) {
      if (!navigator.geolocation) {
        reject(new Error("geolocation is not available in this browser"));
        return;
      }
      let settled = false;
      const guard = setTimeout(function () {
        if (!settled) {
          settled = true;
          reject(new Error("no position within " + GEO_TIMEOUT_MS / 1000 + " seconds"));
        }
      }, GEO_TIMEOUT_MS + 2000);
      navigator.geolocation.getCurrentPosition(
        function (pos) {
          if (settled) return;
          settled = true;
          clearTimeout(guard);
          resolve({
            latitude: pos.coords.latitude,
            longitude: pos.coords.longitude,
            accuracy: pos.coords.accuracy,
          });
        },
        function (err) {
          if (settled) return;
          settled = true;
          clearTimeout(guard);
          reject(new Error(err && err.message ? err.message : "position unavailable"));
        },
        {
          enableHighAccuracy: Boolean(args && args.high_accuracy),
          timeout: GEO_TIMEOUT_MS,
          maximumAge: 60000,
        }
      );
    });
  });

  function withTimeout(promise, ms, what) {
    return new Promise(function (resolve, reject) {
      const t = setTimeout(function () {
        reject(new Error(what + " did not answer within " + ms / 1000 + " seconds"));
      }, ms);
      promise.then(
        function (v) {
          clearTimeout(t);
          resolve(v);
        },
        function (e) {
          clearTimeout(t);
          reject(e);
        }
      );
    });
  }

  // ---- HTML updates -------------------------------------------------------------------------

  function fragment(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    return tpl.content;
  }

  // replaceKeepingFocus replaces el; when the focus was in it (a card whose button was just
  // pressed), it moves to the new element of the same id, so a keyboard user is not sent back
  // to the top of the page.
  let focusAfter = ""; // the id of the item whose form was submitted from the keyboard or a click

  function replaceKeepingFocus(el, html) {
    const id = el.id;
    const had = el === document.activeElement || el.contains(document.activeElement) || (id !== "" && id === focusAfter);
    el.replaceWith(fragment(html));
    if (had) focusItem(id);
  }

  function focusItem(id) {
    const now = id ? document.getElementById(id) : null;
    if (!now) return;
    if (focusAfter === id) focusAfter = "";
    if (!now.hasAttribute("tabindex")) now.setAttribute("tabindex", "-1");
    now.focus({ preventScroll: true });
  }

  // announce tells a screen reader, once and politely, about a new message or a card that
  // needs the person (streamed words are not announced one by one).
  function announce(node) {
    const region = document.getElementById("announce");
    if (!region || !(node instanceof Element)) return;
    const msg = node.querySelector('[data-parley="message"][data-role="assistant"]');
    let text = "";
    if (msg) text = "Assistant: " + (msg.querySelector(".message-body") || msg).textContent.trim().slice(0, 300);
    else if (node.querySelector('[data-parley="approval"] button, form[data-parley="elicitation"] button')) text = "A card needs your decision.";
    if (text) region.textContent = text;
  }

  function applyHTML(f) {
    const el = f.target ? document.getElementById(f.target) : null;
    switch (f.op) {
      case "replace":
        if (el) replaceKeepingFocus(el, f.html);
        break;
      case "upsert": {
        if (el) {
          if (!f.rev || el.dataset.rev !== f.rev) replaceKeepingFocus(el, f.html);
          break;
        }
        const parent = document.getElementById(f.parent);
        if (parent) {
          const frag = fragment(f.html);
          const node = frag.firstElementChild;
          parent.appendChild(frag);
          announce(node);
        }
        break;
      }
      case "append":
      case "prepend": {
        const parent = document.getElementById(f.parent || f.target);
        if (!parent) break;
        if (f.op === "append") parent.appendChild(fragment(f.html));
        else parent.prepend(fragment(f.html));
        break;
      }
      case "remove":
        if (el) el.remove();
        break;
    }
  }

  function appendText(f) {
    const el = document.getElementById(f.target);
    if (!el) return;
    el.classList.remove("streaming-empty");
    el.appendChild(document.createTextNode(f.text));
  }

  // ---- code blocks ---------------------------------------------------------------------------

  // Every code block the server rendered (highlighted, views/highlight.go) gets a copy button.
  // Copying needs script, so script adds the button: a page without it shows none.
  function codeCopyButtons(scope) {
    within(scope, ".markdown pre.code").forEach(function (pre) {
      const parent = pre.parentElement;
      if (!parent || parent.classList.contains("code-block")) return;
      const box = document.createElement("div");
      box.className = "code-block";
      parent.replaceChild(box, pre);
      const b = document.createElement("button");
      b.type = "button";
      b.className = "copy-code";
      b.setAttribute("data-parley", "copy-code");
      b.setAttribute("aria-label", "Copy the code");
      b.textContent = "Copy";
      box.appendChild(b);
      box.appendChild(pre);
    });
  }

  document.addEventListener("click", function (ev) {
    const button = ev.target instanceof Element ? ev.target.closest('[data-parley="copy-code"]') : null;
    if (!button || !button.parentElement) return;
    const pre = button.parentElement.querySelector("pre");
    if (!pre || !navigator.clipboard) return;
    navigator.clipboard.writeText(pre.textContent || "").then(function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    }, function () {
      button.textContent = "Copy failed";
    });
  });

  // ---- local times ---------------------------------------------------------------------------

  // The server writes times in UTC; the page shows them in the browser's zone.
  function localTimes(scope) {
    within(scope, 'time[data-parley="time"][datetime]').forEach(function (el) {
      const d = new Date(attr(el, "datetime"));
      if (isNaN(d.getTime())) return;
      const today = new Date().toDateString() === d.toDateString();
      el.textContent = today
        ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
        : d.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
      setAttr(el, "title", d.toString());
    });
  }

  // ---- following the conversation -----------------------------------------------------------

  // The page follows new content while the person is at the bottom; once they scroll up it
  // stays where they are and offers "Jump to latest".
  let following = true;

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 96;
  }

  function jumpButton() {
    return document.querySelector('[data-parley="jump"]');
  }

  function toLatest() {
    following = true;
    window.scrollTo(0, document.documentElement.scrollHeight);
    const b = jumpButton();
    if (b) b.hidden = true;
  }

  // followed runs after the page changed: scroll along, or say there is more below.
  function followed() {
    if (!document.querySelector('[data-parley="timeline"]')) return;
    if (following) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    } else if (!atBottom()) {
      const b = jumpButton();
      if (b) b.hidden = false;
    }
  }

  window.addEventListener(
    "scroll",
    function () {
      following = atBottom();
      if (following) {
        const b = jumpButton();
        if (b) b.hidden = true;
      }
    },
    { passive: true }
  );

  document.addEventListener("click", function (ev) {
    if (ev.target instanceof Element && ev.target.closest('[data-parley="jump"]')) toLatest();
  });

  // ---- the socket ---------------------------------------------------------------------------

  const clientRuns = new Map(); // tool_call_id → Promise of the resolve frame
  const consents = new Map(); // tool_call_id → function(allowed) settling the wait for consent
  const answered = new Map(); // tool_call_id → the person's answer given before the server asked
  const refused = new Set(); // tool_call_ids whose result the server refused

  function Live(root) {
    this.url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + root.dataset.ws;
    this.ws = null;
    this.backoff = 500;
    this.outbox = [];
    this.connect();
  }

  Live.prototype.state = function (s) {
    document.documentElement.dataset.parleySocket = s;
    document.querySelectorAll('[data-parley="connection"]').forEach(function (el) {
      el.textContent = s === "open" ? "" : s === "connecting" ? "connecting…" : "reconnecting…";
    });
  };

  Live.prototype.connect = function () {
    const self = this;
    self.state("connecting");
    const ws = new WebSocket(self.url);
    self.ws = ws;
    ws.addEventListener("open", function () {
      self.backoff = 500;
      self.state("open");
      const pending = self.outbox;
      self.outbox = [];
      pending.forEach(function (m) {
        self.send(m);
      });
    });
    ws.addEventListener("message", function (ev) {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      self.handle(f);
    });
    ws.addEventListener("close", function () {
      self.ws = null;
      self.state("closed");
      // Reconnect with exponential backoff and jitter; the server resyncs the page on connect.
      const wait = self.backoff * (0.75 + Math.random() / 2);
      self.backoff = Math.min(self.backoff * 2, 15000);
      setTimeout(function () {
        self.connect();
      }, wait);
    });
  };

  Live.prototype.isOpen = function () {
    return Boolean(this.ws && this.ws.readyState === WebSocket.OPEN);
  };

  Live.prototype.send = function (m) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(m));
    } else {
      this.outbox.push(m);
    }
  };

  Live.prototype.handle = function (f) {
    switch (f.type) {
      case "html":
        applyHTML(f);
        if (f.target === "inbox") {
          const list = document.getElementById("inbox");
          if (list) showPending(Number(list.dataset.count));
        }
        localTimes(document.body);
        codeCopyButtons(document.body);
        followed();
        break;
      case "text":
        appendText(f);
        followed();
        break;
      case "client_exec":
        this.clientExec(f);
        break;
      case "resolved":
        // A result the server refused (it failed the tool's result schema) would leave the call
        // waiting for its timeout: report it as the call's error instead, once.
        if (!f.ok && f.kind === "invalid_args" && clientRuns.has(f.tool_call_id) && !refused.has(f.tool_call_id)) {
          refused.add(f.tool_call_id);
          this.send({ type: "resolve", tool_call_id: f.tool_call_id, error: { message: "the page's result was refused: " + (f.message || "invalid") } });
        }
        document.dispatchEvent(new CustomEvent("parley:resolved", { detail: f }));
        break;
    }
  };

  // clientExec runs a client tool once per call in this page; when the server asks again (after
  // a reconnect) the same answer is sent again rather than running the tool twice.
  Live.prototype.clientExec = function (f) {
    const self = this;
    let run = clientRuns.get(f.tool_call_id);
    if (!run) {
      const fn = hooks.get(f.tool);
      // The hook's time limit starts once the person allowed the run; the wait for them is
      // bounded by the call's own timeout on the server.
      const started = (f.ask ? askConsent(f.tool_call_id) : Promise.resolve(true)).then(function (allowed) {
        if (!allowed) throw new Error("the user did not allow " + f.tool + " to run in the browser");
        if (!fn) throw new Error("this page has no hook for the tool " + f.tool);
        return withTimeout(Promise.resolve().then(function () { return fn(f.args || {}); }), HOOK_TIMEOUT_MS, "the " + f.tool + " hook");
      });
      run = started.then(
        function (result) {
          return { type: "resolve", tool_call_id: f.tool_call_id, result: result === undefined ? null : result };
        },
        function (err) {
          return { type: "resolve", tool_call_id: f.tool_call_id, error: { message: String((err && err.message) || err) } };
        }
      );
      clientRuns.set(f.tool_call_id, run);
    }
    run.then(function (frame) {
      self.send(frame);
    });
  };

  // askConsent resolves with the person's answer to the card's "Allow … to run in this
  // browser?" (true for Allow), given now or before the server asked.
  function askConsent(id) {
    if (answered.has(id)) return Promise.resolve(answered.get(id));
    return new Promise(function (resolve) {
      consents.set(id, resolve);
    });
  }

  // A copy button copies the text of the element its data-copy names (the new API token).
  document.addEventListener("click", function (ev) {
    const button = ev.target instanceof Element ? ev.target.closest('[data-parley="copy"]') : null;
    if (!button) return;
    const source = document.getElementById(attr(button, "data-copy") || "");
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent || "").then(function () {
      button.textContent = "Copied";
    });
  });

  document.addEventListener("click", function (ev) {
    const button = ev.target instanceof Element ? ev.target.closest('[data-parley="client-allow"], [data-parley="client-deny"]') : null;
    if (!button) return;
    const box = button.closest('[data-parley="client-consent"]');
    if (!box) return;
    const id = attr(box, "data-tool-call-id");
    const allowed = attr(button, "data-parley") === "client-allow";
    box.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    const p = box.querySelector("p");
    if (p) p.textContent = allowed ? "Running in your browser…" : "Not allowed.";
    const settle = consents.get(id);
    if (settle) {
      consents.delete(id);
      settle(allowed);
    } else {
      answered.set(id, allowed);
    }
  });

  // ---- forms --------------------------------------------------------------------------------

  // Enhanced forms post over fetch with the same fields (the CSRF token is one of them) and apply
  // the JSON answer; anything unexpected falls back to the plain POST the form was built for.
  //
  // A form's named controls shadow its own properties: the "action" buttons hide the action
  // attribute, and a question form's inputs ("f." + a property name the model chose) could hide
  // others. So form methods and attributes are reached through the prototypes, never as form.x.
  const attr = (el, name) => Element.prototype.getAttribute.call(el, name);
  const setAttr = (el, name, v) => Element.prototype.setAttribute.call(el, name, v);
  const within = (el, sel) => Element.prototype.querySelectorAll.call(el, sel);

  function enhanced(form) {
    const kind = attr(form, "data-parley-form");
    return kind === "resolve" || kind === "stop" || attr(form, "data-parley") === "composer";
  }

  function setButtons(form, disabled) {
    within(form, "button").forEach(function (b) {
      b.disabled = disabled;
    });
  }

  function showNotice(form, text) {
    let n = within(form, '[data-parley="form-notice"]')[0];
    if (!n) {
      n = document.createElement("p");
      n.className = "notice";
      n.setAttribute("data-parley", "form-notice");
      n.setAttribute("role", "status");
      Element.prototype.prepend.call(form, n);
    }
    n.textContent = text;
  }

  // noticeAfter shows a notice just after an item, outside it, so socket updates of the item
  // leave it in place.
  function noticeAfter(id, text) {
    const el = document.getElementById(id);
    let n = el.nextElementSibling;
    if (!n || n.dataset.parleyNoticeFor !== id) {
      n = document.createElement("p");
      n.className = "notice";
      n.setAttribute("data-parley", "notice");
      n.setAttribute("role", "status");
      n.dataset.parleyNoticeFor = id;
      el.after(n);
    }
    n.textContent = text;
  }

  function nativeSubmit(form, submitter) {
    setAttr(form, "data-parley-native", "1");
    setButtons(form, false);
    if (submitter && submitter.form === form) HTMLFormElement.prototype.requestSubmit.call(form, submitter);
    else HTMLFormElement.prototype.requestSubmit.call(form);
  }

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (!(form instanceof HTMLFormElement) || !enhanced(form) || attr(form, "data-parley-native") === "1") return;
    ev.preventDefault();
    const submitter = ev.submitter || null;
    const body = new URLSearchParams(new FormData(form, submitter));
    const csrf = body.get("_csrf") || "";
    const composer = attr(form, "data-parley") === "composer";
    // Disabling the pressed button drops the focus: the card that replaces this one takes it.
    const item = Element.prototype.closest.call(form, "[data-rev]");
    if (item && !composer && item.contains(document.activeElement)) focusAfter = item.id;
    setButtons(form, true);
    fetch(attr(form, "action"), {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-Parley-Fetch": "1", "X-CSRF-Token": csrf },
    })
      .then(function (resp) {
        const type = resp.headers.get("Content-Type") || "";
        if (type.indexOf("application/json") !== 0) throw new Error("unexpected answer");
        return resp.json();
      })
      .then(function (ans) {
        setButtons(form, false);
        // While the socket is live it is the one source of a card's state: a fetch answer may
        // arrive after a newer socket update, so only an invalid answer (the card with its
        // errors, which the socket never sends) replaces the card.
        const live = Boolean(parley.live && parley.live.isOpen());
        if (ans.target && ans.html !== undefined) {
          if (ans.html === "") applyHTML({ op: "remove", target: ans.target });
          else if (!live || (!ans.ok && !ans.notice)) applyHTML({ op: "replace", target: ans.target, html: ans.html });
        }
        // Cleared only when it still holds what was sent: text typed meanwhile stays.
        const box = composer ? within(form, 'textarea[name="text"]')[0] : null;
        if (ans.ok && box && box.value === body.get("text")) {
          box.value = "";
        }
        // Without the socket nothing replaces the card: the focus goes to it now.
        if (focusAfter && (document.activeElement === null || document.activeElement === document.body)) focusItem(focusAfter);
        const notice = ans.notice || (!ans.ok && ans.error && ans.error.message) || "";
        if (notice) {
          if (ans.target && document.getElementById(ans.target)) noticeAfter(ans.target, notice);
          else if (document.body.contains(form)) showNotice(form, notice);
        }
      })
      .catch(function () {
        nativeSubmit(form, submitter);
      });
  });

  // A composer submits on Enter (Shift+Enter for a new line).
  document.addEventListener("keydown", function (ev) {
    const t = ev.target;
    if (ev.key !== "Enter" || ev.shiftKey || ev.isComposing || !(t instanceof HTMLTextAreaElement)) return;
    const form = t.form;
    if (form && attr(form, "data-parley") === "composer") {
      ev.preventDefault();
      HTMLFormElement.prototype.requestSubmit.call(form);
    }
  });

  // The pending-approval count on the Inbox link and in the tab title ("(2) Parley"), for
  // reviewers and admins: the server renders it on every page; a count-only inbox socket keeps
  // it live (frames {"type":"count","count":n}), and on the inbox page the list's data-count.
  function showPending(n) {
    if (typeof n !== "number" || !isFinite(n) || n < 0) return;
    document.querySelectorAll('[data-parley="pending-count"]').forEach(function (el) {
      el.dataset.count = String(n);
      el.hidden = n === 0;
      const num = el.querySelector('[data-parley="pending-number"]');
      if (num) num.textContent = String(n);
    });
    const base = document.title.replace(/^\(\d+\) /, "");
    document.title = n > 0 ? "(" + n + ") " + base : base;
  }

  function pendingSocket(path) {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
    let backoff = 1000;
    function connect() {
      const ws = new WebSocket(url);
      ws.addEventListener("open", function () {
        backoff = 1000;
        document.documentElement.dataset.parleyPending = "open";
      });
      ws.addEventListener("message", function (ev) {
        let f;
        try {
          f = JSON.parse(ev.data);
        } catch {
          return;
        }
        if (f && f.type === "count") showPending(f.count);
      });
      ws.addEventListener("close", function (ev) {
        document.documentElement.dataset.parleyPending = "closed";
        if (ev.code === 1008) return; // no longer a reviewer: the count stays as it was
        const wait = backoff * (0.75 + Math.random() / 2);
        backoff = Math.min(backoff * 2, 30000);
        setTimeout(connect, wait);
      });
    }
    connect();
  }

  function start() {
    localTimes(document.body);
    codeCopyButtons(document.body);
    const root = document.querySelector("[data-ws]");
    if (root) {
      toLatest(); // a conversation opens at its newest message
      parley.live = new Live(root);
    }
    // The inbox page's own socket carries the list, and with it the count.
    const pendingPath = document.body ? document.body.dataset.pendingWs : "";
    if (pendingPath && !(root && root.dataset.ws === "/inbox/ws")) pendingSocket(pendingPath);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
