#pragma once
// The generation routes (/v1/chat/completions, /v1/completions, /generate)
// over an Engine: parse, run every choice, answer whole or as server-sent
// events on the client's connection. Also the counters and histograms those
// requests feed into /metrics.
//
// Each request runs on a thread of its own (Engine::generate blocks), at
// most max_concurrent of them; the connection's strand only ever sees
// posted writes.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "actors/engine.hpp"
#include "server/completion_stream.hpp"
#include "server/http_connection.hpp"
#include "server/latency_histogram.hpp"
#include "server/tenants.hpp"

namespace actorlm {

class Completions {
 public:
  enum class Route { chat, completion, native };

  // tenants: whose token rates to keep and count (may be null: one tenant).
  Completions(Engine& engine, std::string model_id, int max_concurrent, ResumeLimits resume = {},
              Tenants* tenants = nullptr);
  ~Completions();

  // Takes one of the max_concurrent places and runs the request on its own
  // thread; answers 503 at once when all are taken. With `last_event_id`
  // (the Last-Event-ID header), the client comes back to a stream it lost
  // instead: the events after that one, then the rest (stream_journal.hpp).
  // `tenant` (the key's: server/tenants.hpp) past its token rate gets 429.
  void start(const std::shared_ptr<http::Connection>& connection, Route route, std::string body,
             const std::string& last_event_id = {}, int32_t tenant = 0);

  // Server shutdown: every running request ends now with finish reason
  // "abort" (streams get their last event and [DONE]).
  void abort_all();
  // Requests running (their threads not yet finished).
  int active() const { return active_; }
  // Waits until no request thread is left, up to `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout);

  // Prometheus text for the server's own counters and latency histograms.
  std::string exposition() const;
  // The streams kept for clients to come back to.
  const StreamJournals& journals() const { return journals_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Hands choice `index`'s delta to the client; false: abort that choice.
  using Forward = std::function<bool(const TextDeltaEvent&, int)>;

  // Parse, run every choice (each on a thread of its own but the first),
  // answer whole or finish the stream.
  void run(const std::shared_ptr<http::Connection>& connection, Route route,
           const std::string& body, int32_t tenant);
  // The LoRA adapters a request's "model" may name.
  std::vector<std::string> adapter_names() const;
  // The response's id, creation time and what shapes its choices.
  ResponseShape shape_of(Route route, const api::ParsedRequest& r);
  // One choice to its end, feeding the latency histograms.
  api::ChoiceResult generate_choice(const GenerateOptions& o, int index, const Forward& forward,
                                    Clock::time_point arrival);

  Engine& engine_;
  Tenants* tenants_ = nullptr;
  std::string model_id_;
  int max_concurrent_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<int64_t> accepted_{0}, rejected_{0}, resumed_{0};
  std::atomic<int> active_{0};
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::set<uint64_t> running_ids_;  // engine request ids, for abort_all
  LatencyHistogram ttft_, itl_;
  StreamJournals journals_;
};

}  // namespace actorlm
