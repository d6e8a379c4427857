#include "server/http_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "model/adapter_dir.hpp"
#include "server/chat_page.hpp"
#include "server/completions.hpp"
#include "server/http_connection.hpp"
#include "server/http_guard.hpp"
#include "server/http_routes.hpp"
#include "server/metrics_text.hpp"
#include "server/openai_api.hpp"

namespace actorlm {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using nlohmann::json;

namespace {

http::Response error(int status, const std::string& message,
                     const char* type = "invalid_request_error") {
  return http::Response::json(status, api::dump(api::ApiError{status, message, type, ""}.body()));
}

}  // namespace

struct HttpServer::Impl final : http::RequestHandler {
  Engine& engine;
  ServerConfig config;
  AdapterDir adapter_dir;
  Tenants tenants;
  http::ConnectionLimits limits;
  // Declared before everything that may post to it, so it outlives them.
  asio::io_context ioc;
  asio::ip::tcp::acceptor acceptor{ioc};
  asio::steady_timer drain_timer{ioc}, poll_timer{ioc};
  // /metrics and /nodes ask the engine (a local engine answers from its
  // published figures; a cluster head asks its nodes and may wait).
  asio::thread_pool blocking{2};
  std::atomic<int> port{0};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> connections_dropped{0};
  std::mutex mu;
  std::unordered_map<http::Connection*, std::weak_ptr<http::Connection>> connections;
  Completions completions;  // last: its destructor waits for request threads that post to ioc

  Impl(Engine& e, ServerConfig c)
      : engine(e),
        config(std::move(c)),
        tenants(config.api_key, config.tenants),
        completions(e, config.model_id, config.max_concurrent_requests, config.stream_resume, &tenants) {
    if (!config.lora_dir.empty()) adapter_dir = AdapterDir(config.lora_dir);
    limits.max_header_bytes = config.max_header_bytes;
    limits.max_header_fields = config.max_header_fields;
    limits.max_body_bytes = config.max_body_bytes;
    limits.header_timeout = config.header_timeout;
    limits.body_timeout = config.body_timeout;
    limits.keep_alive_timeout = config.keep_alive_timeout;
    limits.write_timeout = config.write_timeout;
  }

  std::optional<http::Response> screen(const http::RequestHeader& h) override {
    auto path = http::route_path(std::string_view(h.target().data(), h.target().size()));
    if (!path) return error(400, "malformed request target");
    const http::Route* route = http::find_route(*path);
    if (!tenants.keyed()) {
      auto host = h[bhttp::field::host];
      if (host.empty() && h.version() >= 11) return error(400, "the Host header is missing");
      if (!host.empty() &&
          !http::host_allowed(std::string_view(host.data(), host.size()), config.allowed_hosts)) {
        return error(403,
                     "this server has no API key, so it answers only requests for localhost, an IP "
                     "address or a "
                     "name given with --allowed-host",
                     "permission_error");
      }
    } else if (!(route && route->open)) {
      auto auth = h[bhttp::field::authorization];
      if (!tenants.tenant_of(std::string_view(auth.data(), auth.size()))) {
        return error(401, "invalid or missing API key", "authentication_error");
      }
    }
    if (!route) return error(404, "no such route");
    if (h.method() != route->method) return error(405, "method not allowed on this route");
    if (route->method == bhttp::verb::post) {
      auto ct = h[bhttp::field::content_type];
      if (!http::is_json_media_type(std::string_view(ct.data(), ct.size()))) {
        return error(400, "the request body must be sent as Content-Type: application/json");
      }
    }
    return std::nullopt;
  }

  void handle(const std::shared_ptr<http::Connection>& c, http::Request request) override {
    auto path =
        http::route_path(std::string_view(request.target().data(), request.target().size()));
    const http::Route* route = path ? http::find_route(*path) : nullptr;
    if (!route)
      return c->respond(error(404, "no such route"));  // screened already; kept for safety
    const std::vector<std::pair<std::string, std::string>> page_headers = {
        {"Content-Security-Policy", chat_page_csp}, {"X-Content-Type-Options", "nosniff"}};
    switch (route->id) {
      case http::RouteId::page:
        return c->respond({200, "text/html; charset=utf-8", chat_page_html, page_headers});
      case http::RouteId::script:
        return c->respond(
            {200, "application/javascript; charset=utf-8", chat_page_js, page_headers});
      case http::RouteId::health:
        if (draining) return c->respond(http::Response::json(503, R"({"status":"shutting down"})"));
        // A worker lost for good fails every request: a supervisor should
        // restart this process.
        if (auto lost = engine.worker_lost(); !lost.empty()) {
          return c->respond(http::Response::json(503, json{{"status", "worker lost: " + lost}}.dump()));
        }
        // Answered here, never behind anything that waits for the engine
        // (/metrics on the blocking pool): a probe must not time out because
        // a long prompt is being prefilled.
        if (!engine.counts_nodes()) return c->respond(http::Response::json(200, R"({"status":"ok"})"));
        // A cluster head with no node joined cannot serve anything: a load
        // balancer in front should see that.
        return asio::post(blocking, [this, c] {
          auto [joined, total] = engine.nodes_joined();
          if (total > 0 && joined == 0) {
            json body = {{"status", "no worker node is available"}, {"nodes_joined", 0}, {"nodes", total}};
            c->respond(http::Response::json(503, body.dump()));
          } else {
            c->respond(http::Response::json(200, R"({"status":"ok"})"));
          }
        });
      case http::RouteId::models: {
        json list = json::array({{{"id", config.model_id},
                                  {"object", "model"},
                                  {"owned_by", "actorlm"},
                                  {"created", 0},
                                  {"context_length", engine.max_context()},
                                  {"max_model_len", engine.max_context()}}});
        // LoRA adapters as vLLM lists them: a model of their own whose
        // parent is the base model.
        for (const AdapterInfo& a : engine.adapters()) {
          list.push_back({{"id", a.name},
                          {"object", "model"},
                          {"owned_by", "actorlm"},
                          {"created", 0},
                          {"parent", config.model_id},
                          {"root", a.path},
                          {"context_length", engine.max_context()},
                          {"max_model_len", engine.max_context()}});
        }
        json models = {{"object", "list"}, {"data", list}};
        return c->respond(http::Response::json(200, models.dump()));
      }
      case http::RouteId::metrics:
        return asio::post(blocking, [this, c] {
          std::string text =
              metrics_text(engine.stats()) + completions.exposition() + connection_metrics() + adapter_metrics() +
              tenants.exposition();
          c->respond({200, "text/plain; version=0.0.4", std::move(text), {}});
        });
      case http::RouteId::nodes:
        return asio::post(blocking, [this, c] {
          c->respond(http::Response::json(200, nodes_json(engine.stats()).dump()));
        });
      case http::RouteId::node_drain:
      case http::RouteId::node_undrain: {
        if (!engine.counts_nodes()) {
          return c->respond(error(400, "this server is not a cluster head over engine nodes (actorlm serve --node)"));
        }
        const bool on = route->id == http::RouteId::node_drain;
        return asio::post(blocking, [this, c, on, node = std::string(http::route_param(*route, *path))] {
          std::string state = engine.drain_node(node, on);
          if (state.starts_with("error: ")) return c->respond(error(404, state.substr(7)));
          c->respond(http::Response::json(200, state));
        });
      }
      case http::RouteId::lora_load:
      case http::RouteId::lora_unload: {
        const bool load = route->id == http::RouteId::lora_load;
        // Off the I/O threads: the worker reads the file between two steps.
        return asio::post(blocking, [this, c, load, body = std::move(request.body())] {
          auto parsed = api::parse_lora_request(body, load);
          if (auto* e = std::get_if<api::ApiError>(&parsed)) {
            return c->respond(http::Response::json(e->status, api::dump(e->body())));
          }
          const auto& r = std::get<api::LoraRequest>(parsed);
          std::optional<AdapterRefusal> refused;
          if (load && engine.adapter_files() != Engine::AdapterFiles::here) {
            // A head: each node reads the file from its own --lora-dir (or
            // the engine says why its adapters cannot change).
            refused = engine.load_adapter(r.name, r.path, r.scale);
          } else if (load) {
            std::string why;
            const std::optional<std::string> path = adapter_dir.resolve(r.path, &why);
            if (!path) return c->respond(error(adapter_dir.enabled() ? 404 : 403, why));
            refused = engine.load_adapter(r.name, *path, r.scale);
          } else {
            refused = engine.unload_adapter(r.name);
          }
          if (refused) {
            using K = AdapterRefusal::Kind;
            const int status = refused->kind == K::unknown                               ? 404
                               : refused->kind == K::exists || refused->kind == K::in_use ? 409
                               : refused->kind == K::invalid                             ? 400
                                                                                          : 500;
            return c->respond(error(status, refused->message));
          }
          c->respond(http::Response::json(
              200, api::dump(json{{"object", "lora_adapter"}, {"id", r.name}, {"status", load ? "loaded" : "unloaded"}})));
        });
      }
      case http::RouteId::tokenize:
        // Off the I/O threads: a body of megabytes takes a while to tokenize.
        return asio::post(blocking, [this, c, body = std::move(request.body())] {
          auto parsed = api::parse_tokenize_request(body);
          if (auto* e = std::get_if<api::ApiError>(&parsed)) {
            return c->respond(http::Response::json(e->status, api::dump(e->body())));
          }
          const auto& r = std::get<api::TokenizeRequest>(parsed);
          const std::vector<int32_t> ids = engine.tokenize(r.text, r.add_special, /*parse_special=*/false);
          json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine.max_context()}};
          c->respond(http::Response::json(200, out.dump()));
        });
      case http::RouteId::detokenize:
        return asio::post(blocking, [this, c, body = std::move(request.body())] {
          auto parsed = api::parse_detokenize_request(body);
          if (auto* e = std::get_if<api::ApiError>(&parsed)) {
            return c->respond(http::Response::json(e->status, api::dump(e->body())));
          }
          auto text = engine.detokenize(std::get<std::vector<int32_t>>(parsed));
          if (!text) return c->respond(error(400, "'tokens' holds an id outside the vocabulary"));
          c->respond(http::Response::json(200, api::dump(json{{"text", *text}})));
        });
      case http::RouteId::chat:
      case http::RouteId::completion:
      case http::RouteId::native:
        if (draining) return c->respond(error(503, "the server is shutting down", "server_error"));
        return completions.start(c,
                                 route->id == http::RouteId::chat         ? Completions::Route::chat
                                 : route->id == http::RouteId::completion ? Completions::Route::completion
                                                                    : Completions::Route::native,
                                 std::move(request.body()), std::string(request["Last-Event-ID"]), tenant_of(request));
    }
  }

  // The tenant an admitted request's key names (screen() refused any other).
  int32_t tenant_of(const http::Request& request) const {
    auto auth = request[bhttp::field::authorization];
    return tenants.tenant_of(std::string_view(auth.data(), auth.size())).value_or(0);
  }

  void closed(http::Connection& c) override {
    std::lock_guard<std::mutex> lock(mu);
    connections.erase(&c);
  }

  std::string adapter_metrics() const {
    int64_t bytes = 0;
    const std::vector<AdapterInfo> adapters = engine.adapters();
    for (const AdapterInfo& a : adapters) bytes += a.bytes;
    return "# HELP actorlm_lora_adapters LoRA adapters loaded.\n# TYPE actorlm_lora_adapters gauge\n"
           "actorlm_lora_adapters " + std::to_string(adapters.size()) +
           "\n# HELP actorlm_lora_bytes Bytes the loaded adapters' matrices take (--max-lora-memory-mb caps it).\n"
           "# TYPE actorlm_lora_bytes gauge\nactorlm_lora_bytes " + std::to_string(bytes) + "\n";
  }

  std::string connection_metrics() {
    size_t open = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      open = connections.size();
    }
    return "# HELP actorlm_http_connections Open client connections.\n# TYPE "
           "actorlm_http_connections gauge\n"
           "actorlm_http_connections " +
           std::to_string(open) +
           "\n# HELP actorlm_http_connections_dropped_total Connections closed to make room for "
           "new ones.\n"
           "# TYPE actorlm_http_connections_dropped_total "
           "counter\nactorlm_http_connections_dropped_total " +
           std::to_string(connections_dropped.load()) + "\n";
  }

  // At the connection cap, the connection that has waited longest without
  // sending a whole request makes room (slow or idle clients cannot starve
  // new ones); when every connection has a request running, the new one is
  // turned away instead.
  bool make_room() {
    std::shared_ptr<http::Connection> victim;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (connections.size() < static_cast<size_t>(config.max_connections)) return true;
      for (auto& [raw, weak] : connections) {
        auto c = weak.lock();
        if (!c) continue;
        const auto phase = c->phase();
        if (phase != http::Connection::Phase::idle && phase != http::Connection::Phase::receiving)
          continue;
        if (!victim || c->phase_since() < victim->phase_since()) victim = c;
      }
      // Forgotten now, not when its handlers have wound down (closed()
      // comes later, on its strand): otherwise the new connection would
      // briefly make the count cap + 1.
      if (victim) connections.erase(victim.get());
    }
    ++connections_dropped;
    if (!victim) return false;
    victim->close();
    return true;
  }

  void accept() {
    acceptor.async_accept(
        asio::make_strand(ioc), [this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
          if (!acceptor.is_open()) return;
          if (ec) {
            // Out of file descriptors or similar: try again shortly rather than spin.
            poll_timer.expires_after(std::chrono::milliseconds(50));
            poll_timer.async_wait([this](boost::system::error_code e) {
              if (!e) accept();
            });
            return;
          }
          if (make_room()) {
            auto c = std::make_shared<http::Connection>(std::move(socket), limits, *this);
            {
              std::lock_guard<std::mutex> lock(mu);
              connections[c.get()] = c;
            }
            c->start();
          }
          accept();
        });
  }

  std::vector<std::shared_ptr<http::Connection>> all_connections() {
    std::vector<std::shared_ptr<http::Connection>> out;
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [raw, weak] : connections) {
      if (auto c = weak.lock()) out.push_back(c);
    }
    return out;
  }

  // Runs on the io_context. Ends listen() once no connection and no request
  // is left; past the drain deadline running requests are aborted, and a
  // few seconds later every connection is closed whatever it is doing.
  void begin_drain(std::chrono::milliseconds deadline) {
    if (!draining.exchange(true)) {
      boost::system::error_code ignored;
      acceptor.close(ignored);
      for (auto& c : all_connections()) c->drain();
    }
    // Polled from now on, not from the deadline: an idle server (or one
    // whose last request ends early) exits at once rather than after the
    // whole --shutdown-timeout.
    poll_drain(std::chrono::steady_clock::now() + deadline);
  }

  void poll_drain(std::chrono::steady_clock::time_point abort_at) {
    const auto now = std::chrono::steady_clock::now();
    bool empty;
    {
      std::lock_guard<std::mutex> lock(mu);
      empty = connections.empty();
    }
    if (empty && completions.active() == 0) return ioc.stop();
    if (now >= abort_at) {
      // Repeated: an abort can reach the scheduler before its request does.
      completions.abort_all();
      if (now >= abort_at + std::chrono::seconds(5)) {
        for (auto& c : all_connections()) c->close();
      }
    }
    drain_timer.expires_after(std::chrono::milliseconds(now >= abort_at ? 200 : 50));
    drain_timer.async_wait([this, abort_at](boost::system::error_code ec) {
      if (!ec) poll_drain(abort_at);
    });
  }
};

HttpServer::HttpServer(Engine& engine, ServerConfig config)
    : impl_(std::make_unique<Impl>(engine, std::move(config))) {}

HttpServer::~HttpServer() {
  stop();
  impl_->ioc.stop();
}

bool HttpServer::listen() {
  auto& m = *impl_;
  boost::system::error_code ec;
  auto address = asio::ip::make_address(m.config.host, ec);
  if (ec) {
    // A name rather than an address: resolve it once.
    asio::ip::tcp::resolver resolver(m.ioc);
    auto results = resolver.resolve(m.config.host, std::to_string(m.config.port), ec);
    if (ec || results.empty()) return false;
    address = results.begin()->endpoint().address();
  }
  asio::ip::tcp::endpoint endpoint(address, static_cast<unsigned short>(m.config.port));
  m.acceptor.open(endpoint.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(endpoint, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return false;
  m.port = m.acceptor.local_endpoint().port();
  m.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < m.config.io_threads; ++i) threads.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : threads) t.join();
  return true;
}

void HttpServer::shutdown() {
  asio::post(impl_->ioc, [m = impl_.get()] { m->begin_drain(m->config.shutdown_timeout); });
}

void HttpServer::stop() {
  asio::post(impl_->ioc, [m = impl_.get()] { m->begin_drain(std::chrono::milliseconds(0)); });
}

int HttpServer::bound_port() const {
  return impl_->port;
}

}  // namespace actorlm
