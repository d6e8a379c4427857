#include "apps/serve_command.hpp"

#include <caf/all.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "actors/remote_setup.hpp"
#include "apps/cli_args.hpp"
#include "apps/cluster_flags.hpp"
#include "apps/engine_flags.hpp"
#include "server/http_server.hpp"

namespace actorlm {
namespace {

constexpr const char* usage =
    "usage: actorlm serve [--model PATH] [--host 127.0.0.1] [--port 30000] [--api-key KEY]\n"
    "                     [--threads N] [--kv-tokens N] [--page-size N] [--max-running-requests N]\n"
    "                     [--max-prefill-tokens N] [--chunked-prefill-size N] [--schedule-policy lpm|fcfs]\n"
    "                     [--context-length N] [--disable-radix-cache] [--special-tokens-in-content]\n"
    "                     [--max-concurrent-requests N] [--max-body-bytes N]\n"
    "                     [--device cpu|cuda] [--mem-fraction-static F] [--kv-cache-dtype auto|bf16]\n"
    "  as a cluster head (the nodes run the model; see docs/CLUSTER.md):\n"
    "                     --node HOST:PORT [--node HOST:PORT ...] | --remote-worker HOST:PORT | --topology FILE.json\n"
    "                     [--secret-file FILE] [--tls-cert PEM --tls-key PEM --tls-ca PEM]\n"
    "                     [--allow-plain-remote] [--connect-timeout S]\n"
    "  --special-tokens-in-content: chat messages may hold control tokens such as <|im_start|>\n"
    "  (by default they are plain text, so a client cannot forge system or assistant turns).\n";

HttpServer* running_server = nullptr;
void on_signal(int) {
  if (running_server) running_server->stop();
}

}  // namespace

int serve_command(int argc, char** argv, int first) {
  cli::Args args(argc, argv, first,
                 with_flags(with_flags(engine_flags, {"--host", "--port", "--api-key", "--max-concurrent-requests",
                                                      "--max-body-bytes"}),
                            with_flags(head_flags, security_flags)),
                 {disable_radix_switch, special_tokens_in_content_switch, allow_plain_switch, "--help"}, {{"-m", "--model"}, {"--model-path", "--model"}});
  if (args.has("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  EngineConfig ec = engine_from_flags(args);
  ec.cluster = cluster_from_flags(args);
  ec.special_tokens_in_content = args.has(special_tokens_in_content_switch);

  ServerConfig sc;
  sc.host = args.str("--host").value_or("127.0.0.1");
  sc.port = static_cast<int>(args.integer("--port", 30000, 0, 65535));
  sc.api_key = args.str("--api-key").value_or("");
  sc.model_id = std::filesystem::path(ec.model_path).filename().string();
  sc.max_concurrent_requests = static_cast<int>(args.integer("--max-concurrent-requests", 256, 1, 1 << 20));
  sc.max_body_bytes = static_cast<size_t>(args.integer("--max-body-bytes", 8 << 20, 1024, int64_t{1} << 30));
  sc.threads = std::max(16, std::min(sc.max_concurrent_requests + 4, 512));

  caf::actor_system_config cfg;
  if (ec.cluster.remote()) configure_remote(cfg, ec.cluster.security);
  caf::actor_system system{cfg};
  Engine engine(system, ec);
  HttpServer server(engine, sc);
  running_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread announce([&] {
    for (int i = 0; i < 100 && server.bound_port() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::fprintf(stderr, "actorlm serve: model %s on http://%s:%d\n", sc.model_id.c_str(), sc.host.c_str(), server.bound_port());
  });
  bool ok = server.listen();
  announce.join();
  running_server = nullptr;
  if (!ok) {
    std::fprintf(stderr, "actorlm serve: cannot listen on %s:%d\n", sc.host.c_str(), sc.port);
    return 1;
  }
  return 0;
}

}  // namespace actorlm
