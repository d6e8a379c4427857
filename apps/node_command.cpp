#include "apps/node_command.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "apps/cluster_flags.hpp"
#include "apps/engine_flags.hpp"
#include "cluster/roles/node.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "cluster/transport/ucx_link.hpp"

namespace actorlm {
namespace {

constexpr const char* usage =
    "usage: actorlm node [--host 127.0.0.1] [--port 7100] (--secret-file FILE | --tls-cert PEM --tls-key PEM --tls-ca PEM)\n"
    "                    [--role engine|worker] [--disaggregation-mode prefill|decode] [--allow-plain-remote] [--max-message-bytes N] [--model PATH] [--threads N] [--kv-tokens N] [--page-size N]\n"
    "                    [--max-running-requests N] [--max-prefill-tokens N] [--chunked-prefill-size N]\n"
    "                    [--schedule-policy lpm|fcfs] [--context-length N] [--disable-radix-cache]\n"
    "                    [--max-step-ms 2000] [--itl-target-ms MS] [--worker-timeout 30]  (docs/API.md: slow steps)\n"
    "                    [--speculative-algorithm none|ngram|draft] [--speculative-draft-model-path PATH] [--speculative-num-draft-tokens 4] [--speculative-ngram-capacity 0]\n"
    "                    [--enable-priority-scheduling [--schedule-low-priority-values-first]] [--priority-scheduling-preemption-threshold 10]\n"
    "                    [--schedule-max-overtakes 32] [--max-queued-requests N] [--queue-timeout S] [--tenant-preemption]\n"
    "                    [--radix-eviction-policy lru|lfu|priority]\n"
    "                    [--device cpu|cuda] [--mem-fraction-static F] [--kv-cache-dtype auto|f16|bf16]\n"
    "                    [--hicache-size GB] [--hicache-dtype same|f16|q8_0] [--hicache-write-policy write_through|write_back]\n"
    "                    [--hicache-storage-dir DIR] [--hicache-storage-gb 16]\n"
    "                    [--hicache-prefetch-policy best_effort|wait_complete|timeout] [--hicache-prefetch-timeout-ms 1000]\n"
    "                    [--kv-data-port 0] [--kv-trusted-fabric] [--kv-transport socket|ucx] [--kv-stream on|off]\n"
    "                    [--lora NAME=PATH ...] [--lora-dir DIR] [--max-lora-memory-mb 2048]\n"
    "                    [--drain] [--drain-timeout 300]\n"
    "A worker node: holds the model, its KV pool and radix cache, and serves the heads\n"
    "(actorlm serve/chat --node HOST:PORT) that join it with the same secret or a certificate\n"
    "from the same CA. Port 0 picks a free port; the line 'listening on HOST:PORT' says which.\n"
    "With a secret the port is a gate that authenticates each connection before CAF reads it; after\n"
    "that, a peer announcing a CAF message over --max-message-bytes (default 65 MiB) is disconnected.\n"
    "--role worker runs only the worker (weights and KV): one head drives it with its own scheduler\n"
    "and managers (actorlm serve/chat --remote-worker HOST:PORT), one ForwardBatch per step.\n"
    "--disaggregation-mode prefill|decode makes an engine node half of a prefill/decode pair: a head\n"
    "with both kinds of node runs each prompt on a prefill node, which sends its KV to a decode node\n"
    "(directly, joined with the same secret or certificates) that generates the rest (docs/CLUSTER.md).\n"
    "--lora NAME=PATH: LoRA adapters a head serves by name; every engine node that runs whole requests\n"
    "must load the same list (docs/CLUSTER.md, LoRA adapters on nodes). --lora-dir DIR: a head's\n"
    "POST /v1/load_lora_adapter loads a file of DIR on every such node (none: refused).\n"
    "With a secret the KV bytes take a data plane beside the middleman: a decode node listens on\n"
    "--kv-data-port of its --host (default 0: a free port, told to prefill nodes when they join; -1:\n"
    "none, the KV goes over the middleman), and frames are sealed with AES-256-GCM under keys from\n"
    "the joined session. --kv-trusted-fabric (both nodes) only checks them: for a network you trust\n"
    "where the cipher would cost more than the wire (docs/SECURITY.md). --kv-transport ucx (both\n"
    "nodes) carries those frames over UCX where it reaches the other node through shared memory or\n"
    "RDMA, still sealed or checked; else, and by default, over the TCP socket (docs/CLUSTER.md).\n"
    "A prefill node sends a long prompt's KV over the data plane while its later chunks are still\n"
    "computed, so the transfer overlaps the prefill; --kv-stream off sends it once all is computed.\n"
    "--drain: on SIGTERM or SIGINT the node first asks its heads to move its running requests, with\n"
    "their KV, to other nodes and to route nothing more to it, and exits once it has none left (or\n"
    "after --drain-timeout seconds, or at a second signal): a rolling restart fails no request\n"
    "(docs/DEPLOY.md).\n";

volatile std::sig_atomic_t signals = 0;
void on_signal(int) { signals = signals + 1; }

}  // namespace

int node_command(int argc, char** argv, int first) {
  cli::Args args(argc, argv, first, with_flags(with_flags(engine_flags, security_flags), {"--host", "--port", "--role", "--disaggregation-mode", "--kv-data-port", "--kv-transport", "--kv-stream", "--drain-timeout", "--lora-dir"}),
                 {disable_radix_switch, priority_scheduling_switch, low_priority_first_switch, tenant_preemption_switch, allow_plain_switch, "--kv-trusted-fabric", "--drain", "--help"}, {{"-m", "--model"}, {"--model-path", "--model"}});
  if (args.has("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  NodeConfig nc;
  nc.engine = engine_from_flags(args);
  nc.host = args.str("--host").value_or("127.0.0.1");
  nc.port = static_cast<uint16_t>(args.integer("--port", 7100, 0, 65535));
  nc.security = security_from_flags(args);
  nc.role = args.str("--role").value_or("engine");
  if (nc.role != "engine" && nc.role != "worker") throw cli::UsageError("--role must be engine or worker");
  nc.disaggregation_mode = args.str("--disaggregation-mode").value_or("");
  if (!nc.disaggregation_mode.empty() && nc.disaggregation_mode != "prefill" && nc.disaggregation_mode != "decode") {
    throw cli::UsageError("--disaggregation-mode must be prefill or decode");
  }
  if (!nc.disaggregation_mode.empty() && nc.role != "engine") throw cli::UsageError("--disaggregation-mode needs --role engine");
  nc.kv_data_port = static_cast<int32_t>(args.integer("--kv-data-port", 0, -1, 65535));
  nc.kv_trusted_fabric = args.has("--kv-trusted-fabric");
  const std::string transport = args.str("--kv-transport").value_or("socket");
  if (transport != "socket" && transport != "ucx") throw cli::UsageError("--kv-transport must be socket or ucx");
  nc.kv_transport = transport == "ucx" ? DataTransport::ucx : DataTransport::socket;
  if (nc.kv_transport == DataTransport::ucx) {
    if (const std::string why = ucx_unavailable(); !why.empty()) throw cli::UsageError("--kv-transport ucx: " + why);
  }
  const std::string stream = args.str("--kv-stream").value_or("on");
  if (stream != "on" && stream != "off") throw cli::UsageError("--kv-stream must be on or off");
  nc.kv_stream = stream == "on";
  nc.lora_dir = args.str("--lora-dir").value_or("");
  const bool drain = args.has("--drain");
  const auto drain_timeout = std::chrono::seconds(args.integer("--drain-timeout", 300, 0, 86400));
  // Tests only: damage one transferred KV chunk (see KvSenderConfig::corrupt_chunk).
  if (const char* n = std::getenv("ACTORLM_TEST_CORRUPT_KV_CHUNK")) nc.corrupt_kv_chunk = std::atoll(n);
  // Benchmarks and tests: KV rows through the worker actor even where the pool
  // could be read and written in place (the path a device pool takes).
  nc.kv_through_worker = std::getenv("ACTORLM_TEST_ONLY_KV_THROUGH_WORKER") != nullptr;
  // Tests only: a slow data plane transfer, to kill a node in the middle of one.
  if (const char* n = std::getenv("ACTORLM_TEST_ONLY_KV_SEND_PAUSE_MS")) {
    nc.kv_send_pause_ms = std::clamp<int64_t>(std::atoll(n), 0, 60000);
  }
  // Benchmarks only: a new data plane connection for every transfer, as
  // before connections were kept (bench/pd_bench.py's A/B).
  nc.kv_fresh_connections = std::getenv("ACTORLM_TEST_ONLY_KV_FRESH_CONNECTIONS") != nullptr;
  if (std::string bad = nc.security.check(nc.host); !bad.empty()) throw cli::UsageError(bad);

  caf::actor_system_config cfg;
  configure_engine_system(cfg);
  configure_remote(cfg, nc.security);
  caf::actor_system system{cfg};
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  {
    Node node(system, nc);
    // Tests and scripts wait for this line (and read the port from it).
    const std::string what = nc.disaggregation_mode.empty() ? nc.role : nc.disaggregation_mode + " " + nc.role;
    std::fprintf(stderr, "actorlm node: %s %s on %s (%s, %lld KV tokens, %s); listening on %s:%u\n",
                 what.c_str(), nc.engine.model_path.c_str(), nc.security.tls() ? "TLS" : "plain TCP", node.device().c_str(),
                 static_cast<long long>(node.kv_tokens()), nc.security.secret.empty() ? "no secret" : "shared secret",
                 nc.host.c_str(), node.port());
    if (node.middleman_port() != node.port()) {
      const std::string bound = nc.security.tls() ? "TLS frames are not metered"
                                                  : "--max-message-bytes " + std::to_string(nc.security.max_message_bytes);
      std::fprintf(stderr, "actorlm node: middleman behind the gate on 127.0.0.1:%u (%s)\n", node.middleman_port(),
                   bound.c_str());
    }
    while (signals == 0) ::usleep(100 * 1000);
    if (drain) {
      // Its heads move what runs here elsewhere; it leaves once nothing does.
      node.leave();
      const auto until = std::chrono::steady_clock::now() + drain_timeout;
      int32_t left = node.in_flight();
      std::fprintf(stderr, "actorlm node: draining: %d request(s) here\n", left);
      while (left > 0 && signals < 2 && std::chrono::steady_clock::now() < until) {
        ::usleep(100 * 1000);
        left = node.in_flight();
      }
      std::fprintf(stderr, "actorlm node: %s\n", left == 0 ? "drained" : ("leaving with " + std::to_string(left) + " request(s) here").c_str());
    }
    std::fprintf(stderr, "actorlm node: stopping\n");
  }
  return 0;
}

}  // namespace actorlm
