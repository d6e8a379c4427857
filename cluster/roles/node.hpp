#pragma once
// A cluster worker node inside an actor system: the engine's KV-owning
// actors (scheduler, radix-cache and memory-pool managers, worker) behind a
// gateway published on host:port. `actorlm node` is this plus a wait for a
// signal; an application can also run a node next to its own actors.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <string>

#include "actors/engine.hpp"
#include "cluster/roles/cluster_config.hpp"
#include "cluster/transport/data_link.hpp"

namespace actorlm {

struct NodeConfig {
  EngineConfig engine;            // model, device, pool and scheduler settings
  std::string host = "127.0.0.1";  // where to listen
  uint16_t port = 0;               // 0: any free port (see Node::port)
  RemoteSecurity security;         // must match configure_remote() on the system
  // "engine": the scheduler, radix and pool managers and the worker run here
  // and heads send requests (data parallelism). "worker": only the worker
  // runs here, driven by one head's own scheduler and managers
  // (EngineConfig::cluster.remote_worker).
  std::string role = "engine";
  // An engine node's part in prefill/decode disaggregation: "" (whole
  // requests), "prefill" or "decode" (NodeWelcome::disaggregation_mode).
  std::string disaggregation_mode;
  // Prefill: tests only, see KvSenderConfig::corrupt_chunk.
  int64_t corrupt_kv_chunk = -1;
  // Prefill: tests only, see KvSenderConfig::pause_per_chunk.
  int64_t kv_send_pause_ms = 0;
  bool kv_fresh_connections = false;  // KvSenderConfig::keep_connections off
  // Benchmarks and tests: the data plane copies rows through the worker
  // actor even where the pool is in this process's memory.
  bool kv_through_worker = false;
  // The KV data plane (cluster/transfer/kv_data_plane.hpp), used when the
  // cluster has a shared secret: an engine node listens on this port of its
  // host (0: any free port, told in its welcome; -1: no data plane, chunks
  // go over the middleman), and a node sending KV (a prefill node, or one a
  // request migrates from) sends over the receiver's. Trusted fabric: frames
  // only checked, not sealed; both ends must agree (docs/SECURITY.md).
  int32_t kv_data_port = 0;
  bool kv_trusted_fabric = false;
  // --kv-transport: UCX under the data plane, where both ends run it
  // (cluster/transport/ucx_link.hpp); else TCP sockets.
  DataTransport kv_transport = DataTransport::socket;
  // A prefill node's prompts send their KV over the data plane while their
  // later chunks compute (KvSenderConfig::stream).
  bool kv_stream = true;
  // Where its heads may have an engine node load LoRA adapters from at run
  // time (their POST /v1/load_lora_adapter); empty: they may not.
  std::string lora_dir;
};

class Node {
 public:
  // Loads the model, spawns the actors and publishes the gateway. Throws
  // std::invalid_argument for an unsafe or incomplete security setup (see
  // RemoteSecurity::check) and std::runtime_error when it cannot listen.
  Node(caf::actor_system& system, NodeConfig config);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  uint16_t port() const;  // the public port: the gate's when there is a secret
  // Where the middleman listens: port() without a secret, else an ephemeral
  // loopback port behind the gate.
  uint16_t middleman_port() const;
  const std::string& device() const;
  int64_t kv_tokens() const;
  caf::actor gateway() const;
  // Drain: asks every head joined here to move this node's running requests
  // elsewhere (with their KV) and to route nothing more here; returns once
  // they have answered (so in_flight() counts all they sent before).
  void leave();
  // Requests the gateway still routes for its heads (-1: no answer).
  int32_t in_flight();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
