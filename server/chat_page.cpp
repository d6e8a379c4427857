#include "server/chat_page.hpp"

namespace actorlm {

const char* const chat_page_csp =
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

const char* const chat_page_html = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>actorlm chat</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 46rem; margin: 0 auto; padding: 1rem; background: #fafafa; }
  header { display: flex; gap: .5rem; align-items: center; justify-content: space-between; }
  #log { display: flex; flex-direction: column; gap: .6rem; margin: 1rem 0; }
  .msg { white-space: pre-wrap; padding: .6rem .8rem; border-radius: .6rem; line-height: 1.4; }
  .user { align-self: flex-end; background: #dbeafe; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #e5e7eb; }
  .error { align-self: stretch; background: #fee2e2; }
  form { display: flex; gap: .5rem; }
  textarea { flex: 1; min-height: 3rem; font: inherit; padding: .5rem; }
  #stats { color: #6b7280; font-size: .85rem; }
</style>
</head>
<body>
<header>
  <strong>actorlm</strong>
  <span>
    <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
    <input id="key" type="password" placeholder="API key (if any)" autocomplete="off">
    <button id="reset" type="button">New chat</button>
  </span>
</header>
<div id="log" aria-live="polite"></div>
<form id="form">
  <textarea id="input" placeholder="Ask something… (Enter sends, Shift+Enter adds a line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<div id="stats"></div>
<script src="/chat.js"></script>
</body>
</html>
)html";

const char* const chat_page_js = R"js("use strict";
// Multi-turn chat over /v1/chat/completions with streaming. Model text goes
// into the page through textContent only.
const log = document.getElementById("log");
const form = document.getElementById("form");
const input = document.getElementById("input");
const send = document.getElementById("send");
const stop = document.getElementById("stop");
const stats = document.getElementById("stats");
const key = document.getElementById("key");
const temp = document.getElementById("temp");
const params = new URLSearchParams(location.search);
if (params.has("t")) temp.value = params.get("t");
key.value = localStorage.getItem("actorlm-key") || "";
key.addEventListener("change", () => localStorage.setItem("actorlm-key", key.value));
let history = [];
let controller = null;

function bubble(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  log.appendChild(div);
  div.scrollIntoView({block: "end"});
  return div;
}

async function ask(question) {
  history.push({role: "user", content: question});
  bubble("user", question);
  const out = bubble("assistant", "");
  document.body.dataset.state = "streaming";
  send.disabled = true;
  stop.disabled = false;
  controller = new AbortController();
  const headers = {"Content-Type": "application/json"};
  if (key.value) headers["Authorization"] = "Bearer " + key.value;
  const t0 = performance.now();
  let first = 0, tokens = 0, answer = "";
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers, signal: controller.signal,
      body: JSON.stringify({messages: history, stream: true, stream_options: {include_usage: true},
                            temperature: Number(temp.value), max_tokens: 512}),
    });
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || ("HTTP " + res.status));
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at);
        buffer = buffer.slice(at + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) tokens = chunk.usage.completion_tokens;
        for (const c of chunk.choices || []) {
          const piece = (c.delta && c.delta.content) || "";
          if (piece && !first) first = performance.now();
          answer += piece;
          out.textContent = answer;
        }
      }
    }
    history.push({role: "assistant", content: answer});
    const secs = (performance.now() - t0) / 1000;
    stats.textContent = tokens + " tokens in " + secs.toFixed(2) + " s, first after " +
        ((first - t0) / 1000).toFixed(2) + " s";
  } catch (e) {
    if (e.name === "AbortError") {
      history.push({role: "assistant", content: answer});
      stats.textContent = "stopped";
    } else {
      history.pop();
      bubble("error", String(e.message || e));
    }
  } finally {
    controller = null;
    send.disabled = false;
    stop.disabled = true;
    document.body.dataset.state = "done";
  }
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  const q = input.value.trim();
  if (!q || controller) return;
  input.value = "";
  ask(q);
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    form.requestSubmit();
  }
});
stop.addEventListener("click", () => controller && controller.abort());
document.getElementById("reset").addEventListener("click", () => {
  history = [];
  log.textContent = "";
  stats.textContent = "";
});
// ?q=... asks at once, ?t=... sets the temperature (links, and the headless
// browser test).
const q = params.get("q");
if (q) ask(q);
)js";

}  // namespace actorlm
