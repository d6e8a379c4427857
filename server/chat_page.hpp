#pragma once
// The browser chat page served at "/" (HTML) and "/chat.js" (its script):
// a multi-turn chat that streams from /v1/chat/completions. Static text, no
// templating; the page inserts model output with textContent only, and the
// server sends it with a Content-Security-Policy that allows no other origin
// and no inline script.

namespace actorlm {

extern const char* const chat_page_html;
extern const char* const chat_page_js;
// The Content-Security-Policy header value for both.
extern const char* const chat_page_csp;

}  // namespace actorlm
