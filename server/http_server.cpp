#include "server/http_server.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "server/chat_page.hpp"
#include "server/latency_histogram.hpp"
#include "server/openai_api.hpp"

namespace actorlm {

using nlohmann::json;

namespace {

// The engine's own failures are 500s and a lost or missing worker node a 503
// (another try may land on a live node); everything else the engine refuses
// is the request's fault.
api::ApiError engine_error(const std::string& err) {
  if (err.rfind("engine failure", 0) == 0) return {500, err, "server_error", ""};
  if (err.rfind("worker node", 0) == 0 || err.rfind("no worker node", 0) == 0) return {503, err, "server_error", ""};
  return {400, err, "invalid_request_error", ""};
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  ServerConfig config;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  int port = 0;
  // Served-request counters for /metrics (the engine reports the rest).
  std::atomic<int64_t> requests_ok{0}, requests_failed{0};
  std::atomic<int> in_flight{0};
  LatencyHistogram ttft{"actorlm_time_to_first_token_seconds", "Time from a request's arrival to its first generated text.",
                        {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  LatencyHistogram itl{"actorlm_inter_token_latency_seconds", "Time between successive deltas of one request.",
                       {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};

  // Holds one of the max_concurrent_requests places for a request's lifetime
  // (for a stream: until its last chunk is written).
  struct Place {
    std::atomic<int>* counter;
    explicit Place(std::atomic<int>* c) : counter(c) {}
    Place(const Place&) = delete;
    ~Place() { --*counter; }
  };
  Impl(Engine& e, ServerConfig c) : engine(e), config(std::move(c)) {}

  void send_error(httplib::Response& res, const api::ApiError& e) {
    res.status = e.status;
    res.set_content(api::dump(e.body()), "application/json");
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + config.api_key) return true;
    send_error(res, {401, "invalid or missing API key", "authentication_error", ""});
    return false;
  }

  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

  // Runs choice `index` of a request; `forward` (may be empty) sees every
  // delta and returns false once the client is gone, which aborts the
  // choice's request so its KV is freed at once. Records TTFT and ITL.
  api::ChoiceResult run_choice(GenerateOptions o, int index, Clock::time_point arrival,
                               const std::function<bool(const TextDeltaEvent&, int)>& forward) {
    if (index > 0 && o.sampling.has_seed) o.sampling.seed += static_cast<uint64_t>(index);
    api::ChoiceResult c;
    bool first = true, gone = false;
    Clock::time_point prev = arrival;
    c.last = engine.generate(o, [&](const TextDeltaEvent& d) {
      const auto now = Clock::now();
      if (!d.text.empty() || !d.logprobs.empty()) {
        (first ? ttft : itl).observe(seconds(prev, now));
        first = false;
        prev = now;
      }
      c.text += d.text;
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (forward && !gone && !forward(d, index)) {
        gone = true;
        engine.abort(d.request_id);
      }
    });
    return c;
  }

  // Choices 1..n-1 on their own threads, choice 0 on the caller's.
  std::vector<api::ChoiceResult> run_choices(const api::ParsedRequest& r, Clock::time_point arrival,
                                             const std::function<bool(const TextDeltaEvent&, int)>& forward) {
    std::vector<api::ChoiceResult> results(static_cast<size_t>(r.n));
    std::vector<std::thread> others;
    for (int i = 1; i < r.n; ++i) {
      others.emplace_back([&, i] { results[static_cast<size_t>(i)] = run_choice(r.options, i, arrival, forward); });
    }
    results[0] = run_choice(r.options, 0, arrival, forward);
    for (auto& t : others) t.join();
    return results;
  }

  // /v1/chat/completions, /v1/completions, and SGLang's /generate (native):
  // each parser reads the client's JSON, so nothing here touches it.
  void generate(const httplib::Request& req, httplib::Response& res, bool chat, bool native = false) {
    const auto arrival = Clock::now();
    if (!authorized(req, res)) return;
    auto parsed = native ? api::parse_generate_request(req.body, config.model_id)
                         : api::parse_request(req.body, chat, config.model_id);
    if (auto* e = std::get_if<api::ApiError>(&parsed)) {
      ++requests_failed;
      return send_error(res, *e);
    }
    auto r = std::get<api::ParsedRequest>(std::move(parsed));
    if (++in_flight > config.max_concurrent_requests) {
      --in_flight;
      ++requests_failed;
      return send_error(res, {503, "the server is at its limit of " + std::to_string(config.max_concurrent_requests) +
                                       " concurrent requests; retry later", "server_error", ""});
    }
    auto place = std::make_shared<Place>(&in_flight);
    ++requests_ok;
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    if (!r.stream) {
      std::vector<api::ChoiceResult> choices = run_choices(r, arrival, {});
      for (const auto& c : choices) {
        if (c.last.finish != FinishReason::error) continue;
        return send_error(res, engine_error(c.last.error));
      }
      res.set_content(api::dump(native ? api::generate_response(choices)
                                       : api::completion_response(id, config.model_id, chat, choices,
                                                                  r.options.logprobs, created)),
                      "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, r, id, created, chat, place, arrival](size_t, httplib::DataSink& sink) {
      std::mutex mu;  // choices write from their own threads
      bool gone = false;
      std::vector<bool> first(static_cast<size_t>(r.n), true);
      std::vector<size_t> offset(static_cast<size_t>(r.n), 0);  // completions' text_offset
      auto forward = [&](const TextDeltaEvent& d, int index) {
        std::lock_guard<std::mutex> lock(mu);
        if (gone) return false;
        const auto i = static_cast<size_t>(index);
        std::string out;
        if (d.finish == FinishReason::error) {
          out = "data: " + api::dump(engine_error(d.error).body()) + "\n\n";
        } else {
          if (!d.text.empty() || first[i] || (r.options.logprobs && !d.logprobs.empty())) {
            nlohmann::json lp = r.options.logprobs ? api::logprobs_json(chat, d.logprobs, offset[i]) : nlohmann::json(nullptr);
            out += api::stream_chunk(id, config.model_id, chat, index, d.text, std::nullopt, created, first[i], lp);
          }
          if (d.finish != FinishReason::none) {
            out += api::stream_chunk(id, config.model_id, chat, index, "", d.finish, created, false, nullptr);
          }
        }
        for (const auto& t : d.logprobs) offset[i] += t.piece.size();
        first[i] = false;
        if (!out.empty() && !sink.write(out.data(), out.size())) gone = true;
        return !gone;
      };
      std::vector<api::ChoiceResult> results = run_choices(r, arrival, forward);
      if (!gone) {
        std::string tail;
        bool failed = false;
        int32_t completion = 0;
        for (const auto& c : results) {
          failed = failed || c.last.finish == FinishReason::error;
          completion += c.last.completion_tokens;
        }
        if (r.include_usage && !failed) {
          tail += api::usage_chunk(id, config.model_id, chat, results[0].last.prompt_tokens, completion, created);
        }
        tail += "data: [DONE]\n\n";
        sink.write(tail.data(), tail.size());
      }
      sink.done();
      return true;
    });
  }
};

HttpServer::HttpServer(Engine& engine, ServerConfig config) : impl_(std::make_unique<Impl>(engine, std::move(config))) {
  auto& m = *impl_;
  m.http.set_payload_max_length(m.config.max_body_bytes);
  m.http.new_task_queue = [n = m.config.threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  // The browser chat page: static, so it needs no key (its API calls do).
  m.http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", chat_page_csp);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(chat_page_html, "text/html; charset=utf-8");
  });
  m.http.Get("/chat.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", chat_page_csp);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(chat_page_js, "application/javascript; charset=utf-8");
  });
  m.http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  m.http.Get("/v1/models", [&m](const httplib::Request& req, httplib::Response& res) {
    if (!m.authorized(req, res)) return;
    json models = {{"object", "list"},
                   {"data", json::array({{{"id", m.config.model_id}, {"object", "model"}, {"owned_by", "actorlm"}, {"created", 0}}})}};
    res.set_content(models.dump(), "application/json");
  });
  m.http.Post("/v1/chat/completions", [&m](const httplib::Request& req, httplib::Response& res) { m.generate(req, res, true); });
  m.http.Post("/v1/completions", [&m](const httplib::Request& req, httplib::Response& res) { m.generate(req, res, false); });
  // SGLang's native API: {"text": ..., "sampling_params": {...}, "stream": bool}.
  m.http.Post("/generate", [&m](const httplib::Request& req, httplib::Response& res) { m.generate(req, res, false, true); });
  // Prometheus text format.
  m.http.Get("/metrics", [&m](const httplib::Request& req, httplib::Response& res) {
    if (!m.authorized(req, res)) return;
    EngineStatsSnapshot st = m.engine.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
             std::to_string(value) + "\n";
    };
    metric("actorlm_requests_total", "counter", "Generation requests accepted.", double(m.requests_ok));
    metric("actorlm_requests_rejected_total", "counter", "Generation requests rejected as invalid.", double(m.requests_failed));
    metric("actorlm_prompt_tokens_total", "counter", "Prompt tokens admitted.", double(st.scheduler.prompt_tokens));
    metric("actorlm_cached_prompt_tokens_total", "counter", "Prompt tokens served from the radix cache.", double(st.scheduler.cached_tokens));
    metric("actorlm_generation_tokens_total", "counter", "Tokens generated.", double(st.scheduler.generated_tokens));
    metric("actorlm_running_requests", "gauge", "Requests being decoded or prefilled.", st.running);
    metric("actorlm_waiting_requests", "gauge", "Requests queued.", st.waiting);
    metric("actorlm_cache_hit_rate", "gauge", "Fraction of prompt tokens served from the radix cache.", st.scheduler.cache_hit_rate());
    metric("actorlm_kv_pool_capacity_tokens", "gauge", "KV pool rows.", double(st.kv.capacity));
    metric("actorlm_kv_pool_free_tokens", "gauge", "KV pool rows free.", double(st.kv.free));
    metric("actorlm_kv_pool_cached_tokens", "gauge", "KV rows held by the radix cache, evictable.", double(st.kv.evictable));
    metric("actorlm_kv_pool_locked_tokens", "gauge", "KV rows held by running requests through the cache.", double(st.kv.protected_));
    metric("actorlm_request_slots_free", "gauge", "Request slots (req_to_token rows) free.", st.kv.free_slots);
    if (!st.nodes.empty()) {
      // A cluster head: one series per worker node, labelled by its address.
      auto per_node = [&](const char* name, const char* type, const char* help, auto value) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        for (const auto& n : st.nodes) out += std::string(name) + "{node=\"" + n.address + "\"} " + std::to_string(value(n)) + "\n";
      };
      per_node("actorlm_node_up", "gauge", "Whether the worker node is joined.", [](const auto& n) { return n.alive ? 1.0 : 0.0; });
      per_node("actorlm_node_routed_requests_total", "counter", "Requests routed to the node.", [](const auto& n) { return double(n.routed); });
      per_node("actorlm_node_in_flight_requests", "gauge", "Requests routed to the node and not finished.", [](const auto& n) { return double(n.in_flight); });
      per_node("actorlm_node_cache_hit_rate", "gauge", "Fraction of the node's prompt tokens served from its radix cache.", [](const auto& n) { return n.cache_hit_rate; });
      per_node("actorlm_node_kv_pool_free_tokens", "gauge", "The node's free KV rows.", [](const auto& n) { return double(n.pool_free); });
    }
    out += m.ttft.exposition();
    out += m.itl.exposition();
    res.set_content(out, "text/plain; version=0.0.4");
  });
  // A cluster head's worker nodes (an empty list for a local engine).
  m.http.Get("/nodes", [&m](const httplib::Request& req, httplib::Response& res) {
    if (!m.authorized(req, res)) return;
    json nodes = json::array();
    for (const auto& n : m.engine.stats().nodes) {
      nodes.push_back({{"address", n.address}, {"alive", n.alive}, {"routed", n.routed}, {"in_flight", n.in_flight},
                       {"running", n.running}, {"waiting", n.waiting}, {"cache_hit_rate", n.cache_hit_rate},
                       {"prompt_tokens", n.prompt_tokens}, {"cached_tokens", n.cached_tokens},
                       {"kv_capacity_tokens", n.pool_capacity}, {"kv_free_tokens", n.pool_free},
                       {"kv_locked_tokens", n.protected_tokens}, {"error", n.error}});
    }
    res.set_content(json{{"nodes", nodes}}.dump(), "application/json");
  });
  m.http.set_error_handler([&m](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = res.status == 404 ? "no such route" : res.status == 413 ? "request body too large" : "bad request";
    res.set_content(api::ApiError{res.status, message, "invalid_request_error", ""}.body().dump(), "application/json");
  });
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::listen() {
  auto& m = *impl_;
  if (m.config.port == 0) {
    m.port = m.http.bind_to_any_port(m.config.host.c_str());
    if (m.port <= 0) return false;
  } else {
    if (!m.http.bind_to_port(m.config.host.c_str(), m.config.port)) return false;
    m.port = m.config.port;
  }
  return m.http.listen_after_bind();
}

void HttpServer::stop() { impl_->http.stop(); }
int HttpServer::bound_port() const { return impl_->port; }

}  // namespace actorlm
