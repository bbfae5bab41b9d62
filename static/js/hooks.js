// Parley's page script: the live socket, the server's HTML updates, client-tool hooks and
// progressively enhanced forms. Plain JavaScript, no build step; every page works without it.
//
// Server → page frames (JSON text):
//   {"type":"html","op":"replace|upsert|append|prepend|remove","target":"<id>","parent":"<id>","rev":"…","html":"…"}
//   (the streaming answer is an "html" replace of "streaming": its Markdown rendered so far)
//   {"type":"client_exec","tool_call_id":"…","tool":"…","args":{…},"ask":true}
//     (ask: the person allows the run first, in the card's [data-parley="client-consent"])
//   {"type":"resolved","tool_call_id":"…","ok":true}   or  {…,"ok":false,"kind":"…","message":"…"}
//   {"type":"count","count":2}   (the count-only inbox socket, /inbox/ws?count=1; when the count
//     grew, also "tool" and "requester" of the newest approval: all a browser notification says)
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
          // The logged answer takes the streaming bubble's place in the same task, so the page
          // never shows both (nor neither) and nothing jumps.
          if (node instanceof Element && node.querySelector('[data-parley="message"][data-role="assistant"]')) clearStreaming();
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

  function clearStreaming() {
    const el = document.getElementById("streaming");
    if (!el) return;
    el.replaceChildren();
    el.classList.add("streaming-empty");
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

  // Every time on a page is a <time data-parley="time"> (views.When): its text relative to now
  // ("3 min ago", "in 12 min"), its title the exact time. The server writes the title in UTC
  // (and, where its HTML must stay the same from one render to the next, the text too); here
  // the title becomes the viewer's own zone and the text follows this device's clock, in the
  // server's units (views.relativeTime).
  function shortDuration(ms) {
    const s = Math.floor(Math.max(ms, 0) / 1000);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 48 * 3600) return Math.floor(s / 3600) + " h";
    return Math.floor(s / 86400) + " d";
  }

  function relativeTime(ms) {
    if (ms >= 1000) return "in " + shortDuration(ms);
    if (ms > -10000) return "just now";
    return shortDuration(-ms) + " ago";
  }

  function localTimes(scope) {
    const now = Date.now();
    within(scope, 'time[data-parley="time"][datetime]').forEach(function (el) {
      const d = new Date(attr(el, "datetime"));
      if (isNaN(d.getTime())) return;
      const text = relativeTime(d.getTime() - now);
      if (el.textContent !== text) el.textContent = text;
      if (!el.hasAttribute("data-local")) {
        setAttr(el, "title", d.toLocaleString([], { dateStyle: "full", timeStyle: "short" }));
        setAttr(el, "data-local", "");
      }
    });
  }

  // Relative texts follow the clock: every second while a time is less than an hour away
  // (a deadline counts down), else every 30 seconds.
  let lastSweep = 0;
  setInterval(function () {
    const now = Date.now();
    const near = Array.prototype.some.call(document.querySelectorAll('time[data-parley="time"][datetime]'), function (el) {
      return Math.abs(new Date(attr(el, "datetime")).getTime() - now) < 3600 * 1000;
    });
    if (near || now - lastSweep >= 30000) {
      lastSweep = now;
      localTimes(document.body);
    }
  }, 1000);

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
      case "html": {
        const place = f.target === "inbox" ? inboxPlace() : null;
        if (f.target === "inbox") keepBulkChecks(f);
        applyHTML(f);
        if (f.target === "inbox") {
          const list = document.getElementById("inbox");
          if (list) {
            keepInboxPlace(list, place);
            inboxChanged(list);
          }
        }
        localTimes(document.body);
        codeCopyButtons(document.body);
        followed();
        break;
      }
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
  // the JSON answer. A send that did not arrive (no network, the server down or failing: 5xx)
  // stays in the page, its text kept, as "Not sent — Retry": posting the form natively then
  // would leave the app for the browser's error page. Only an answer that is not the app's JSON
  // (the sign-in page after a session expired) falls back to the plain POST the form was built
  // for, which also serves every page without this script.
  //
  // A form's named controls shadow its own properties: the "action" buttons hide the action
  // attribute, and a question form's inputs ("f." + a property name the model chose) could hide
  // others. So form methods and attributes are reached through the prototypes, never as form.x.
  const attr = (el, name) => Element.prototype.getAttribute.call(el, name);
  const setAttr = (el, name, v) => Element.prototype.setAttribute.call(el, name, v);
  const within = (el, sel) => Element.prototype.querySelectorAll.call(el, sel);
  const previousGetter = Object.getOwnPropertyDescriptor(Element.prototype, "previousElementSibling").get;
  const previous = (el) => previousGetter.call(el);

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

  // SendFailed is a send that did not reach the app, or that the app failed (5xx): nothing was
  // done, and the person may send it again.
  class SendFailed extends Error {}

  const retries = new WeakMap(); // the "Not sent" notice → {form, submitter}

  // notSent shows, just before the form, that the send failed, with a Retry button; the
  // composer keeps its text. It is an alert: the person pressed Enter and nothing visible left.
  function notSent(form, submitter, why) {
    let n = previous(form);
    if (!n || n.getAttribute("data-parley") !== "send-failed") {
      n = document.createElement("div");
      n.className = "notice send-failed";
      n.setAttribute("data-parley", "send-failed");
      n.setAttribute("role", "alert");
      const text = document.createElement("span");
      text.setAttribute("data-parley", "send-failed-text");
      const b = document.createElement("button");
      b.type = "button";
      b.setAttribute("data-parley", "retry-send");
      b.textContent = "Retry";
      n.append(text, " ", b);
      Element.prototype.before.call(form, n);
    }
    retries.set(n, { form: form, submitter: submitter });
    n.querySelector('[data-parley="send-failed-text"]').textContent = "Not sent — " + why;
  }

  function clearNotSent(form) {
    const prev = previous(form);
    if (prev && prev.getAttribute("data-parley") === "send-failed") prev.remove();
  }

  document.addEventListener("click", function (ev) {
    const b = ev.target instanceof Element ? ev.target.closest('[data-parley="retry-send"]') : null;
    if (!b) return;
    const n = b.closest('[data-parley="send-failed"]');
    const r = n ? retries.get(n) : null;
    if (!r || !document.body.contains(r.form)) {
      if (n) n.remove();
      return;
    }
    if (r.submitter && r.submitter.form === r.form) HTMLFormElement.prototype.requestSubmit.call(r.form, r.submitter);
    else HTMLFormElement.prototype.requestSubmit.call(r.form);
  });

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
      .then(
        function (resp) {
          const type = resp.headers.get("Content-Type") || "";
          const json = type.indexOf("application/json") === 0;
          if (resp.status >= 500) {
            const fallback = "the server could not do it (" + resp.status + ").";
            if (!json) throw new SendFailed(fallback);
            return resp.json().then(
              function (ans) {
                const msg = ans && ans.error && ans.error.message;
                throw new SendFailed(msg ? sentence(msg) : fallback);
              },
              function () {
                throw new SendFailed(fallback);
              }
            );
          }
          if (!json) throw new Error("unexpected answer");
          return resp.json();
        },
        function () {
          throw new SendFailed("the server could not be reached.");
        }
      )
      .then(function (ans) {
        setButtons(form, false);
        clearNotSent(form);
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
          grow(box);
        }
        if (ans.ok && box) saveDraft(box);
        // Without the socket nothing replaces the card: the focus goes to it now.
        if (focusAfter && (document.activeElement === null || document.activeElement === document.body)) focusItem(focusAfter);
        const notice = ans.notice || (!ans.ok && ans.error && ans.error.message) || "";
        if (notice) {
          if (ans.target && document.getElementById(ans.target)) noticeAfter(ans.target, notice);
          else if (document.body.contains(form)) showNotice(form, notice);
        }
      })
      .catch(function (err) {
        if (err instanceof SendFailed) {
          setButtons(form, false);
          if (document.body.contains(form)) notSent(form, submitter, err.message);
          return;
        }
        nativeSubmit(form, submitter);
      });
  });

  function sentence(s) {
    s = String(s).trim();
    return /[.!?]$/.test(s) ? s : s + ".";
  }

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

  // ---- the composer's draft and height -------------------------------------------------------

  // A composer's text is kept in this browser per conversation (localStorage
  // "parley.draft.<conversation id>") as it is typed, put back when the page loads, and removed
  // once it was sent. Storage may be refused (private mode, quota): the composer works without.
  const draftPrefix = "parley.draft.";

  function draftKey(box) {
    const conv = box.closest("[data-conversation-id]");
    const id = conv ? conv.getAttribute("data-conversation-id") : "";
    return id ? draftPrefix + id : "";
  }

  function saveDraft(box) {
    const key = draftKey(box);
    if (!key) return;
    try {
      if (box.value.trim() === "") localStorage.removeItem(key);
      else localStorage.setItem(key, box.value);
    } catch {
      // storage refused: the draft lives in the page only
    }
  }

  function restoreDraft(box) {
    const key = draftKey(box);
    if (!key || box.value !== "") return;
    try {
      const text = localStorage.getItem(key);
      if (text) box.value = text;
    } catch {
      // storage refused: nothing to restore
    }
  }

  // Signing out forgets every draft, so the next person at this browser does not read them.
  function forgetDrafts() {
    try {
      for (let i = localStorage.length - 1; i >= 0; i--) {
        const k = localStorage.key(i);
        if (k && k.indexOf(draftPrefix) === 0) localStorage.removeItem(k);
      }
    } catch {
      // storage refused: nothing was kept
    }
  }

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (form instanceof HTMLFormElement && attr(form, "action") === "/logout") forgetDrafts();
  });

  // The composer grows with its text up to its CSS max-height (then scrolls). CSS does it where
  // the browser knows field-sizing; elsewhere the height follows the scroll height.
  const cssGrows = Boolean(window.CSS && CSS.supports && CSS.supports("field-sizing", "content"));
  function grow(box) {
    if (cssGrows) return;
    box.style.height = "auto";
    box.style.height = box.scrollHeight + 2 + "px";
  }

  function composerBox(t) {
    return t instanceof HTMLTextAreaElement && t.form && attr(t.form, "data-parley") === "composer" ? t : null;
  }

  document.addEventListener("input", function (ev) {
    const box = composerBox(ev.target);
    if (!box) return;
    saveDraft(box);
    grow(box);
  });

  function composers() {
    document.querySelectorAll('form[data-parley="composer"] textarea[name="text"]').forEach(function (box) {
      restoreDraft(box);
      grow(box);
    });
  }

  // ---- the approval card's plan, refreshed as its arguments are edited ----------------------

  // An edit of an approval form's arguments (a field "arg.…" or the JSON "args") posts the form,
  // PLAN_DEBOUNCE_MS after the last keystroke, to the call's plan route (the form's action with
  // "/plan" for "/resolve"), which answers the card's plan fragment for those arguments. One
  // request per form is in flight; an edit meanwhile sends again once it is back, and an answer
  // older than the latest edit is dropped. An error keeps the plan shown, marked stale.
  const PLAN_DEBOUNCE_MS = 300;
  const PLAN_TIMEOUT_MS = 10000;
  const planState = new WeakMap(); // form → {timer, inflight, gen}

  function planTarget(form) {
    const card = Element.prototype.closest.call(form, '[data-parley="approval"]');
    return card ? card.querySelector('[data-parley="plan"]') : null;
  }

  function markPlanStale(form) {
    const el = planTarget(form);
    if (el) {
      el.setAttribute("data-stale", "");
      el.title = "This plan was not updated for the latest edit.";
    }
  }

  function refreshPlan(form) {
    const st = planState.get(form);
    st.timer = 0;
    if (st.inflight) return; // sent again when the one in flight is back
    if (!document.body.contains(form) || !planTarget(form)) return;
    const url = String(attr(form, "action") || "").replace(/\/resolve$/, "/plan");
    if (!/\/plan$/.test(url)) return;
    const body = new URLSearchParams(new FormData(form));
    const gen = st.gen;
    st.inflight = true;
    withTimeout(
      fetch(url, {
        method: "POST",
        body: body,
        credentials: "same-origin",
        headers: { Accept: "text/html, application/json", "X-CSRF-Token": body.get("_csrf") || "" },
      }).then(function (resp) {
        const type = resp.headers.get("Content-Type") || "";
        if (!resp.ok || type.indexOf("text/html") !== 0) throw new Error("no plan");
        return resp.text();
      }),
      PLAN_TIMEOUT_MS,
      "the plan"
    )
      .then(function (html) {
        if (gen !== st.gen) return; // edited since: the next answer is the one to show
        const next = fragment(html).querySelector('[data-parley="plan"]');
        const el = planTarget(form);
        if (next && el && document.body.contains(form)) el.replaceWith(next);
      })
      .catch(function () {
        if (document.body.contains(form)) markPlanStale(form);
      })
      .finally(function () {
        st.inflight = false;
        if (gen !== st.gen && !st.timer) refreshPlan(form);
      });
  }

  function argsEdited(ev) {
    const t = ev.target;
    if (!(t instanceof HTMLInputElement || t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement)) return;
    const name = t.getAttribute("name") || "";
    if (name !== "args" && name.indexOf("arg.") !== 0) return;
    const form = t.form;
    if (!form || attr(form, "data-parley-form") !== "resolve" || !planTarget(form)) return;
    let st = planState.get(form);
    if (!st) {
      st = { timer: 0, inflight: false, gen: 0 };
      planState.set(form, st);
    }
    st.gen++;
    clearTimeout(st.timer);
    st.timer = setTimeout(function () {
      refreshPlan(form);
    }, PLAN_DEBOUNCE_MS);
  }
  document.addEventListener("input", argsEdited);

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

  // The inbox list changed (a socket frame): the pending count is the whole inbox's (data-total;
  // the list may be filtered), and a new approval at its head is worth a notification.
  let lastInbox = null;
  function inboxChanged(list) {
    const total = Number(list.dataset.total);
    const newest = list.dataset.newest || "";
    if (lastInbox && total > lastInbox.total && newest && newest !== lastInbox.newest) {
      notifyApproval(list.dataset.newestTool, list.dataset.newestRequester);
    }
    lastInbox = { total: total, newest: newest };
    showPending(total);
  }

  // The inbox keeps its place. The socket replaces the whole list, newest first; when the
  // reviewer reads below the list's top, approvals that arrive are held (data-held, not shown)
  // behind an "N new" button instead of pushing down what they read, and the entry they read is
  // put back where it was on the screen. Held entries stay held across later frames until the
  // button shows them.
  const heldInbox = new Set(); // ids of entries held back
  let inboxSeen = null; // ids of the entries the list showed, after the first frame

  function inboxEntries(list) {
    return Array.prototype.filter.call(list.children, function (el) {
      return el.classList.contains("inbox-item") && el.id;
    });
  }

  // inboxPlace is where the reviewer is, before a frame: the entries listed, and the first one
  // on screen with its top, when the list's top is above the screen.
  function inboxPlace() {
    const list = document.getElementById("inbox");
    if (!list) return null;
    const items = inboxEntries(list);
    if (inboxSeen === null) inboxSeen = new Set(items.map(function (el) { return el.id; }));
    if (list.getBoundingClientRect().top >= 0) return { reading: false };
    const anchor = items.find(function (el) {
      return !el.hasAttribute("data-held") && el.getBoundingClientRect().bottom > 0;
    });
    return { reading: true, anchor: anchor ? anchor.id : "", top: anchor ? anchor.getBoundingClientRect().top : 0 };
  }

  function keepInboxPlace(list, place) {
    const items = inboxEntries(list);
    const present = new Set(items.map(function (el) { return el.id; }));
    heldInbox.forEach(function (id) {
      if (!present.has(id)) heldInbox.delete(id);
    });
    items.forEach(function (el) {
      if (place && place.reading && inboxSeen && !inboxSeen.has(el.id)) heldInbox.add(el.id);
      if (heldInbox.has(el.id)) el.setAttribute("data-held", "");
    });
    inboxSeen = present;
    showInboxNew();
    if (place && place.reading && place.anchor) {
      const a = document.getElementById(place.anchor);
      if (a) window.scrollBy(0, a.getBoundingClientRect().top - place.top);
    }
  }

  function showInboxNew() {
    const b = document.querySelector('[data-parley="inbox-new"]');
    if (!b) return;
    b.hidden = heldInbox.size === 0;
    b.textContent = heldInbox.size + " new ↑";
  }

  document.addEventListener("click", function (ev) {
    if (!(ev.target instanceof Element) || !ev.target.closest('[data-parley="inbox-new"]')) return;
    heldInbox.clear();
    const list = document.getElementById("inbox");
    if (!list) return;
    within(list, "[data-held]").forEach(function (el) {
      el.removeAttribute("data-held");
    });
    showInboxNew();
    list.scrollIntoView({ block: "start" });
  });

  // Checked bulk boxes survive the socket replacing the list (by value: conversation and call).
  function keepBulkChecks(f) {
    const checked = new Set();
    document.querySelectorAll('#inbox input[data-parley="bulk-item"]:checked').forEach(function (b) {
      checked.add(b.value);
    });
    if (checked.size === 0) return;
    const frag = fragment(f.html);
    frag.querySelectorAll('input[data-parley="bulk-item"]').forEach(function (b) {
      if (checked.has(b.value)) b.setAttribute("checked", "");
    });
    const box = document.createElement("div");
    box.appendChild(frag);
    f.html = box.innerHTML;
  }

  // Browser notifications of new approvals, for reviewers who turned them on with the inbox's
  // button (an explicit opt-in, remembered in this browser). Shown only while the tab is hidden,
  // and saying only the tool's name and who asked: never arguments or conversation content.
  const notifyKey = "parley.notify";
  function notifyOn() {
    try {
      return "Notification" in window && Notification.permission === "granted" && localStorage.getItem(notifyKey) === "1";
    } catch {
      return false;
    }
  }

  function notifyApproval(tool, requester) {
    if (!document.hidden || !notifyOn()) return;
    const clip = function (s) {
      return String(s || "").slice(0, 80);
    };
    try {
      new Notification("Approval requested", {
        body: clip(tool) + (requester ? " — requested by " + clip(requester) : ""),
        tag: "parley-approval",
      });
    } catch {
      // A browser that refuses to show it (or only shows them from a service worker): the tab
      // title's count still says it.
    }
  }

  function notifyOptIn() {
    const btn = document.querySelector('[data-parley="notify-optin"]');
    if (!btn || !("Notification" in window) || Notification.permission === "denied") return;
    const label = function () {
      const on = notifyOn();
      btn.textContent = on ? "Turn off browser notifications" : "Notify me of new approvals";
      btn.dataset.state = on ? "on" : "off";
    };
    label();
    btn.hidden = false;
    btn.addEventListener("click", function () {
      if (notifyOn()) {
        try {
          localStorage.removeItem(notifyKey);
        } catch {
          // private mode: nothing was stored
        }
        label();
        return;
      }
      Promise.resolve(Notification.requestPermission()).then(function (p) {
        if (p === "granted") {
          try {
            localStorage.setItem(notifyKey, "1");
          } catch {
            // private mode: on for this page only
          }
        }
        label();
        if (p === "denied") btn.hidden = true;
      });
    });
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
        if (f && f.type === "count") {
          if (typeof f.tool === "string" && f.tool) notifyApproval(f.tool, f.requester);
          showPending(f.count);
        }
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
    composers();
    const root = document.querySelector("[data-ws]");
    if (root && document.querySelector('[data-parley="timeline"]')) {
      toLatest(); // a conversation opens at its newest message (the inbox at its top)
    }
    if (root) {
      parley.live = new Live(root);
    }
    // The inbox page's own socket carries the list, and with it the count.
    const pendingPath = document.body ? document.body.dataset.pendingWs : "";
    const onInbox = Boolean(root && root.dataset.ws && root.dataset.ws.indexOf("/inbox/ws") === 0);
    if (pendingPath && !onInbox) pendingSocket(pendingPath);
    if (onInbox) {
      const list = document.getElementById("inbox");
      if (list) lastInbox = { total: Number(list.dataset.total), newest: list.dataset.newest || "" };
    }
    notifyOptIn();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
