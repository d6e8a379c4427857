#include "cluster/roles/head.hpp"

#include <caf/all.hpp>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "actors/detokenizer_actor.hpp"
#include "actors/engine_core.hpp"
#include "actors/wire.hpp"
#include "cluster/roles/router_actor.hpp"
#include "cluster/roles/worker_link.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "grammar/token_bytes.hpp"
#include "messages/envelope.hpp"
#include "model/gguf_file.hpp"

namespace actorlm {
namespace {

// What both kinds of head do first: check the remote setup, load the
// model's config and tokenizer (not its weights), spawn the detokenizer.
// Returns the head's name for the nodes' logs.
std::string prepare_head(caf::actor_system& system, const EngineConfig& config, const ClusterConfig& cluster,
                         EngineParts& parts) {
  if (!system.has_middleman()) {
    throw std::invalid_argument("a cluster head needs the middleman: call configure_remote() on the actor system config");
  }
  if (cluster.security.tls() && !system.has_openssl_manager()) {
    throw std::invalid_argument("TLS is configured but the actor system has no OpenSSL module (configure_remote())");
  }
  std::vector<NodeAddress> peers = cluster.nodes;
  if (!cluster.remote_worker.host.empty()) peers.push_back(cluster.remote_worker);
  for (const auto& n : peers) {
    if (std::string bad = cluster.security.check(n.host); !bad.empty()) throw std::invalid_argument(n.str() + ": " + bad);
  }
  namespace fs = std::filesystem;
  parts.model = fs::is_directory(config.model_path)
                    ? config_from_hf_json((fs::path(config.model_path) / "config.json").string())
                    : config_from_gguf(GgufFile::open(config.model_path));
  parts.tok = load_tokenizer(config.model_path);
  parts.max_context = scheduler_config(config, parts.model, *parts.tok).max_context;
  parts.detokenizer = spawn_detokenizer(system, parts.tok);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + " pid " + std::to_string(::getpid());
}

// A head over engine nodes: joins them, waiting up to connect_timeout_s for
// all of them (the rest keep being dialled).
EngineParts start_head(caf::actor_system& system, const EngineConfig& config, const ClusterConfig& cluster) {
  EngineParts parts;
  std::string head_name = prepare_head(system, config, cluster, parts);
  // Stops the router; nodes hold its handle, so a plain shutdown or exit
  // message from a peer must not be able to.
  const uint64_t stop_token = random_token();
  auto served = std::make_shared<ServedAdapters>();
  caf::actor router = spawn_router(system, cluster, describe_model(config.model_path, parts.model, *parts.tok),
                                   parts.detokenizer, head_name, stop_token, served);
  caf::scoped_actor self{system};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cluster.connect_timeout_s);
  int32_t up = 0, total = 0;
  std::string errors;
  for (;;) {
    self->request(router, std::chrono::seconds(10), status_atom::value)
        .receive([&](int32_t u, int32_t t, const std::string& e) { up = u, total = t, errors = e; },
                 [&](const caf::error& e) { errors = system.render(e); });
    if (up == total || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (up == 0) {
    caf::anon_send(router, shutdown_atom::value, stop_token);
    caf::anon_send_exit(parts.detokenizer, caf::exit_reason::user_shutdown);
    throw std::runtime_error("no worker node could be joined within " + std::to_string(cluster.connect_timeout_s) +
                             " s" + (errors.empty() ? std::string() : ": " + errors));
  }
  parts.scheduler = router;
  parts.device = "cluster: " + std::to_string(up) + " of " + std::to_string(total) + " nodes joined";
  parts.counts_nodes = true;
  parts.adapters_on_nodes = true;
  // Other heads sharing the nodes change the set too: the router's copy is
  // read at each use.
  parts.live_adapters = [served] {
    std::vector<AdapterInfo> out;
    for (auto& [name, id] : served->get()) out.push_back({std::move(name), id, "(on the nodes)", 0});
    return out;
  };
  parts.stop = [router, stop_token] { caf::anon_send(router, shutdown_atom::value, stop_token); };
  return parts;
}

// A head that drives one worker node: the scheduler and managers run here,
// sized as the node's KV pool is, and every step's ForwardBatch crosses the
// network. A lost worker node is dialled again; back within the connect
// timeout, its running requests are computed again there from their tokens
// (the same outputs); not back, they fail.
EngineParts start_remote_worker(caf::actor_system& system, const EngineConfig& config, const ClusterConfig& cluster) {
  EngineParts parts;
  std::string head_name = prepare_head(system, config, cluster, parts);
  const uint64_t stop_token = random_token();  // stops the link (see start_head)
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(1000, static_cast<int64_t>(cluster.connect_timeout_s * 1000)));
  caf::actor link = spawn_worker_link(system, cluster.remote_worker, cluster.security, head_name, timeout, stop_token);
  fb::NodeWelcomeT w;
  std::string why;
  caf::scoped_actor self{system};
  self->request(link, timeout * 4 + std::chrono::seconds(5), join_atom::value)
      .receive(
          [&](const WireMessage& welcome) {
            auto opened = msg::unpack<fb::NodeWelcome>(welcome.bytes, &why);
            if (opened) w = std::move(*opened);
          },
          [&](const caf::error& e) { why = system.render(e); });
  if (why.empty() && w.role != "worker") why = cluster.remote_worker.str() + " is an engine node: use --node for it";
  if (why.empty()) {
    why = model_mismatch(describe_model(config.model_path, parts.model, *parts.tok),
                         {w.model_name, w.vocab_size, w.n_layers, w.hidden, w.tokenizer_digest});
  }
  if (!why.empty()) {
    caf::anon_send(link, shutdown_atom::value, stop_token);
    caf::anon_send_exit(parts.detokenizer, caf::exit_reason::user_shutdown);
    throw std::runtime_error(why);
  }
  KvStoreConfig kv{w.kv_tokens, w.page_size, w.max_requests, w.max_context, config.disable_radix_cache,
                   config.radix_eviction};
  SchedulerConfig sc = scheduler_config(config, parts.model, *parts.tok);
  sc.constraints = make_constraint_compiler(*parts.tok, parts.model.vocab_size, kConstraintThreads);
  // The worker node's adapters (--lora on it), by the ids its runner holds.
  for (const auto& a : w.adapters) {
    sc.adapters.push_back(a->id);
    parts.adapters.push_back({a->name, a->id, "(on the worker node)", 0});
  }
  parts.adapters_fixed = true;
  sc.max_running_requests = std::min(sc.max_running_requests, kv.max_requests);
  // A lost worker node is dialled again (the link); a step waits up to the
  // connect timeout for it, then its requests are computed again there from
  // their tokens (Scheduler::forget_kv), or, if it stays away, fail.
  EngineCore core = spawn_managers(system, kv, sc, link, parts.detokenizer,
                                   WorkerLiveness{.heartbeats = false,
                                                  .silence = std::chrono::milliseconds(0),
                                                  .copy_timeout = std::chrono::milliseconds(120'000),
                                                  .restart = {},
                                                  .max_restarts = 0,
                                                  .rejoin_wait = timeout});
  core.owns_worker = false;
  core.model = parts.model;
  parts.scheduler = core.scheduler;
  parts.device = "remote worker " + cluster.remote_worker.str() + " (" + w.device + ")";
  parts.kv_tokens = kv.capacity_tokens;
  parts.constraints = core.constraints;
  parts.stop = [core, link, stop_token] {
    stop_engine_core(core);
    caf::anon_send(link, shutdown_atom::value, stop_token);
  };
  return parts;
}

}  // namespace

std::unique_ptr<Engine> make_engine(caf::actor_system& system, const EngineConfig& config,
                                    const ClusterConfig& cluster) {
  if (!cluster.nodes.empty()) return std::make_unique<Engine>(system, config, start_head(system, config, cluster));
  if (!cluster.remote_worker.host.empty()) {
    return std::make_unique<Engine>(system, config, start_remote_worker(system, config, cluster));
  }
  return std::make_unique<Engine>(system, config);
}

}  // namespace actorlm
