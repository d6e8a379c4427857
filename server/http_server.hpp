#pragma once
// `actorlm serve`: the OpenAI-compatible HTTP front-end over an Engine.
// Routes: POST /v1/chat/completions, POST /v1/completions (both with SSE
// streaming), GET /v1/models, POST /generate (SGLang's native form),
// GET /metrics (Prometheus text), GET /nodes, GET /health, and the browser
// chat page (GET / and /chat.js).
//
// Secure by default (docs/SECURITY.md): binds 127.0.0.1; with an API key
// every route but /health and the page needs "Authorization: Bearer <key>",
// checked before the body is read; without one, only requests naming a
// loopback host, the bind address or an --allowed-host are served (a web
// page cannot reach a keyless server through DNS rebinding), and every POST
// must be application/json (no cross-site form posts). Every byte a client
// sends before that is bounded in size and time (http_connection.hpp).
// A client that disconnects aborts its request, streamed or not.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "server/resume_limits.hpp"
#include "server/tenants.hpp"

namespace actorlm {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;                     // empty: no authentication
  std::vector<std::string> allowed_hosts;  // Host names a keyless server also answers
  std::string model_id;                    // reported by /v1/models
  size_t max_body_bytes = 8u << 20;        // larger bodies get 413
  size_t max_header_bytes = 16u << 10;     // request line + headers; more gets 431
  size_t max_header_fields = 100;          // more gets 431
  int max_concurrent_requests = 256;       // generation requests in flight; more get 503
  int max_connections = 1024;  // open sockets; beyond it the slowest unfinished request is dropped
  std::chrono::milliseconds header_timeout{10'000};      // first byte to end of headers
  std::chrono::milliseconds body_timeout{60'000};        // end of headers to end of body
  std::chrono::milliseconds keep_alive_timeout{30'000};  // idle between requests
  std::chrono::milliseconds write_timeout{30'000};       // one write to a client not reading
  std::chrono::milliseconds shutdown_timeout{10'000};    // drain before aborting what runs
  ResumeLimits stream_resume;  // streams a client may come back to (window 0: none)
  // Where POST /v1/load_lora_adapter may read adapters (empty: loading at
  // run time is off; model/adapter_dir.hpp).
  std::string lora_dir;
  // Tenants beside api_key (server/tenants.hpp): each its own key, share and
  // token rate; the engine's scheduler must weigh them (Tenants::weights()).
  std::vector<TenantSpec> tenants;
  int io_threads = 2;
};

class HttpServer {
 public:
  HttpServer(Engine& engine, ServerConfig config);
  ~HttpServer();
  // Binds and serves until shutdown() or stop() has finished. Returns false
  // when the address cannot be bound.
  bool listen();
  // Graceful: stop accepting, close idle connections, let running requests
  // finish for up to shutdown_timeout, then abort the rest (streams end with
  // finish_reason "abort" and [DONE]). Thread-safe; returns at once.
  void shutdown();
  // At once: abort every request and close every connection.
  void stop();
  // The port actually bound (useful with port 0); 0 before listen() binds.
  int bound_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
