#pragma once
// `actorlm serve`: the OpenAI-compatible HTTP front-end over an Engine.
// Routes: POST /v1/chat/completions, POST /v1/completions (both with SSE
// streaming), GET /v1/models, POST /generate (SGLang's native form),
// GET /metrics (Prometheus text), GET /health. Binds 127.0.0.1 unless told
// otherwise; with an API key every route but /health needs
// "Authorization: Bearer <key>".
// A streaming client that disconnects aborts its request (its KV is freed).

#include <cstdint>
#include <memory>
#include <string>

#include "actors/engine.hpp"

namespace actorlm {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;              // empty: no authentication
  std::string model_id;             // reported by /v1/models
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int max_concurrent_requests = 256;  // generation requests in flight; more get 503
  int threads = 16;                 // concurrent HTTP requests
};

class HttpServer {
 public:
  HttpServer(Engine& engine, ServerConfig config);
  ~HttpServer();
  // Blocks serving until stop(). Returns false when the address cannot be bound.
  bool listen();
  void stop();
  // The port actually bound (useful with port 0).
  int bound_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
