#include "apps/serve_command.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "apps/cli_args.hpp"
#include "apps/cluster_flags.hpp"
#include "apps/engine_flags.hpp"
#include "cluster/roles/head.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "server/http_routes.hpp"
#include "server/http_server.hpp"

namespace actorlm {
namespace {

constexpr const char* usage =
    "usage: actorlm serve [--model PATH] [--host 127.0.0.1] [--port 30000] [--api-key KEY | --api-key-file FILE]\n"
    "                     [--threads N] [--kv-tokens N] [--page-size N] [--max-running-requests "
    "N]\n"
    "                     [--max-prefill-tokens N] [--chunked-prefill-size N] [--schedule-policy "
    "lpm|fcfs]\n"
    "                     [--context-length N] [--disable-radix-cache] "
    "[--special-tokens-in-content]\n"
    "                     [--max-step-ms 2000]  (a step's time budget: prefill is cut to fit it; 0: none)\n"
    "                     [--itl-target-ms MS]  (streams' gap between tokens a mixed step's prefill is sized for)\n"
    "                     [--worker-timeout 30]  (seconds without a heartbeat from the worker before it is lost)\n"
    "                     [--stall-timeout 600]  (seconds a request waits while no step at all completes)\n"
    "                     [--speculative-algorithm none|ngram|draft] [--speculative-draft-model-path PATH] [--speculative-num-draft-tokens 4] [--speculative-ngram-capacity 0]  (docs/API.md)\n"
    "                     [--tenants FILE [--tenant-preemption]]  (API keys with their share of the batch and token rates, docs/API.md)\n"
    "                     [--lora NAME=PATH ...] [--lora-dir DIR] [--max-lora-memory-mb 2048]  (LoRA adapters, GGUF:\n"
    "                       a request picks one with \"model\": \"NAME\"; --lora-dir turns on /v1/load_lora_adapter)\n"
    "                     [--enable-priority-scheduling [--schedule-low-priority-values-first]]\n"
    "                     [--priority-scheduling-preemption-threshold 10] [--schedule-max-overtakes 32]\n"
    "                     [--max-queued-requests N] [--queue-timeout S]  (429 / 408; docs/API.md, queueing)\n"
    "                     [--radix-eviction-policy lru|lfu|priority]  (which cached prefixes go first)\n"
    "                     [--device cpu|cuda] [--mem-fraction-static F] [--kv-cache-dtype "
    "auto|f16|bf16]\n"
    "                     [--hicache-size GB] [--hicache-dtype same|f16|q8_0]  (KV the pool lets go kept in RAM)\n"
    "                     [--hicache-write-policy write_through|write_back]\n"
    "                     [--hicache-prefetch-policy best_effort|wait_complete|timeout] "
    "[--hicache-prefetch-timeout-ms 1000]\n"
    "                     [--hicache-storage-dir DIR] [--hicache-storage-gb 16]  (prompt KV kept on disk, "
    "found again after a restart)\n"
    "  limits (docs/SECURITY.md):\n"
    "                     [--max-concurrent-requests 256] [--max-connections 1024] "
    "[--max-body-bytes 8388608]\n"
    "                     [--max-header-bytes 16384] [--header-timeout 10] [--body-timeout 60]\n"
    "                     [--keep-alive-timeout 30] [--write-timeout 30] [--shutdown-timeout 10]\n"
    "                     [--allowed-host NAME ...]  (names a keyless server answers besides "
    "localhost and IPs)\n"
    "                     [--stream-resume-window 0] [--stream-resume-max-mib 4] [--stream-resume-total-mib 256]\n"
    "                     (seconds a stream waits for a client that lost it to come back with Last-Event-ID; "
    "0: off)\n"
    "  as a cluster head (the nodes run the model; see docs/CLUSTER.md):\n"
    "                     --node HOST:PORT [--node HOST:PORT ...] | --remote-worker HOST:PORT | "
    "--topology FILE.json\n"
    "                     [--secret-file FILE] [--tls-cert PEM --tls-key PEM --tls-ca PEM]\n"
    "                     [--allow-plain-remote] [--connect-timeout S] [--failover-attempts N]\n"
    "                     [--rebalance-interval S] [--rebalance-gap 2]  (0: off; move decoding requests with\n"
    "                     their KV from a node running >= gap more requests than another)\n"
    "  --special-tokens-in-content: chat messages may hold control tokens such as <|im_start|>\n"
    "  (by default they are plain text, so a client cannot forge system or assistant turns).\n"
    "  --chat-template-file FILE: a Jinja chat template used instead of the model's own.\n"
    "  --list-routes: print each route as METHOD PATH open|key and exit (what tests/server/auth_matrix_test.py checks).\n";

std::chrono::milliseconds seconds_flag(const cli::Args& args, const char* name, double fallback) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(args.number(name, fallback, 0.1, 86400) * 1000));
}

// Each connection is a file descriptor; the default soft limit (often 1024)
// would make --max-connections a lie.
void raise_fd_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// After the drain deadline: the drain's own close of lingering connections
// (5 s) and the engine's teardown.
constexpr std::chrono::seconds kTeardownMargin{10};

int signal_pipe[2] = {-1, -1};
void on_signal(int sig) {
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = write(signal_pipe[1], &byte, 1);
}

}  // namespace

int serve_command(int argc, char** argv, int first) {
  cli::Args args(
      argc, argv, first,
      with_flags(
          with_flags(engine_flags, {"--host", "--port", "--api-key", "--api-key-file", "--max-concurrent-requests",
                                    "--max-body-bytes", "--max-connections", "--max-header-bytes",
                                    "--header-timeout", "--body-timeout", "--keep-alive-timeout",
                                    "--write-timeout", "--shutdown-timeout", "--allowed-host",
                                    "--stream-resume-window", "--stream-resume-max-mib", "--stream-resume-total-mib", "--lora-dir",
                                    "--tenants",
                                    chat_template_file_flag}),
          with_flags(head_flags, security_flags)),
      {disable_radix_switch, priority_scheduling_switch, low_priority_first_switch, tenant_preemption_switch, special_tokens_in_content_switch, allow_plain_switch, "--help", "--list-routes"},
      {{"-m", "--model"}, {"--model-path", "--model"}});
  if (args.has("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (args.has("--list-routes")) {
    for (const http::Route& r : http::routes()) {
      const auto method = boost::beast::http::to_string(r.method);
      std::printf("%.*s %.*s %s\n", static_cast<int>(method.size()), method.data(), static_cast<int>(r.path.size()),
                  r.path.data(), r.open ? "open" : "key");
    }
    return 0;
  }
  EngineConfig ec = engine_from_flags(args);
  const ClusterConfig cluster = cluster_from_flags(args);
  ec.special_tokens_in_content = args.has(special_tokens_in_content_switch);
  ec.chat_template = chat_template_from_flags(args);

  ServerConfig sc;
  sc.host = args.str("--host").value_or("127.0.0.1");
  sc.port = static_cast<int>(args.integer("--port", 30000, 0, 65535));
  sc.api_key = args.str("--api-key").value_or("");
  // A key in a file stays off the command line (ps, shell history, unit files).
  if (auto path = args.str("--api-key-file")) {
    if (args.has("--api-key")) throw cli::UsageError("give --api-key or --api-key-file, not both");
    try {
      sc.api_key = read_secret_file(*path);
    } catch (const std::exception& e) {
      throw cli::UsageError(std::string("--api-key-file: ") + e.what());
    }
  }
  sc.allowed_hosts = args.all("--allowed-host");
  sc.model_id = std::filesystem::path(ec.model_path).filename().string();
  sc.max_concurrent_requests =
      static_cast<int>(args.integer("--max-concurrent-requests", 256, 1, 1 << 20));
  sc.max_connections = static_cast<int>(args.integer("--max-connections", 1024, 8, 1 << 20));
  sc.max_body_bytes =
      static_cast<size_t>(args.integer("--max-body-bytes", 8 << 20, 1024, int64_t{1} << 30));
  sc.max_header_bytes =
      static_cast<size_t>(args.integer("--max-header-bytes", 16 << 10, 1024, 1 << 20));
  sc.header_timeout = seconds_flag(args, "--header-timeout", 10);
  sc.body_timeout = seconds_flag(args, "--body-timeout", 60);
  sc.keep_alive_timeout = seconds_flag(args, "--keep-alive-timeout", 30);
  sc.write_timeout = seconds_flag(args, "--write-timeout", 30);
  sc.shutdown_timeout = seconds_flag(args, "--shutdown-timeout", 10);
  sc.lora_dir = args.str("--lora-dir").value_or("");
  sc.stream_resume.window =
      std::chrono::milliseconds(static_cast<int64_t>(args.number("--stream-resume-window", 0, 0, 3600) * 1000));
  sc.stream_resume.max_stream_bytes = static_cast<size_t>(args.integer("--stream-resume-max-mib", 4, 1, 1024)) << 20;
  sc.stream_resume.max_total_bytes = static_cast<size_t>(args.integer("--stream-resume-total-mib", 256, 1, 1 << 20))
                                     << 20;
  if (!sc.api_key.empty() &&
      sc.api_key.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
    throw cli::UsageError("the API key must not contain control characters");
  }
  // Tenants: each its own key, a weight for its share of the running batch
  // and a token rate (server/tenants.hpp).
  if (auto path = args.str("--tenants")) {
    try {
      sc.tenants = read_tenants_file(*path);
      const Tenants tenants(sc.api_key, sc.tenants);
      ec.scheduler.queue.tenant_weights = tenants.weights();
      ec.scheduler.queue.tenant_kv_quotas = tenants.kv_quotas();
    } catch (const std::invalid_argument& e) {
      throw cli::UsageError(std::string("--tenants: ") + e.what());
    }
    // On a cluster head the keys, rates and counts are kept here, and each
    // request carries its tenant's weight to the node that queues it.
  } else if (args.has(tenant_preemption_switch)) {
    throw cli::UsageError(std::string(tenant_preemption_switch) + " needs --tenants");
  }
  raise_fd_limit();

  caf::actor_system_config cfg;
  configure_engine_system(cfg);
  if (cluster.remote()) configure_remote(cfg, cluster.security);
  caf::actor_system system{cfg};
  std::unique_ptr<Engine> made = make_engine(system, ec, cluster);
  Engine& engine = *made;
  HttpServer server(engine, sc);
  // The handler only writes the signal to a pipe; a thread reads it and
  // does the work as ordinary code: the first drains the server, a second
  // exits at once. (Masking signals instead would miss threads that
  // libraries start before main.)
  if (pipe(signal_pipe) != 0) throw std::runtime_error("cannot create the signal pipe");
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread([&server, timeout = sc.shutdown_timeout] {
    unsigned char sig = 0;
    if (read(signal_pipe[0], &sig, 1) != 1) return;
    std::fprintf(
        stderr,
        "actorlm serve: signal %d, draining (up to %.1f s); a second signal exits at once\n", sig,
        std::chrono::duration<double>(timeout).count());
    server.shutdown();
    // The backstop: whatever the engine is doing (a step that will not end,
    // a worker that hangs), the process is gone shortly after the drain's
    // deadline. Streams were ended with `abort` at the deadline; the margin
    // lets the ordinary teardown (which waits for the current step, itself
    // bounded by --max-step-ms) finish first.
    std::thread([timeout] {
      std::this_thread::sleep_for(timeout + kTeardownMargin);
      std::fprintf(stderr, "actorlm serve: the engine did not stop within %.1f s of the drain deadline; exiting\n",
                   std::chrono::duration<double>(kTeardownMargin).count());
      std::_Exit(0);
    }).detach();
    if (read(signal_pipe[0], &sig, 1) == 1) {
      std::fprintf(stderr, "actorlm serve: second signal, exiting now\n");
      std::_Exit(0);
    }
  }).detach();
  std::thread announce([&] {
    for (int i = 0; i < 100 && server.bound_port() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::fprintf(stderr, "actorlm serve: model %s on http://%s:%d\n", sc.model_id.c_str(),
                 sc.host.c_str(), server.bound_port());
  });
  bool ok = server.listen();
  announce.join();
  if (!ok) {
    std::fprintf(stderr, "actorlm serve: cannot listen on %s:%d\n", sc.host.c_str(), sc.port);
    return 1;
  }
  std::fprintf(stderr, "actorlm serve: stopped\n");
  return 0;
}

}  // namespace actorlm
