#pragma once
// The part of an engine that owns a KV pool: memory-pool and radix-cache
// managers, the worker (weights and KV tensors) and the scheduler over them.
// A local Engine puts a tokenizer and detokenizer in front of it; a cluster
// node puts its gateway there instead (cluster/roles/node_gateway.hpp).

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "actors/actor_worker.hpp"
#include "actors/engine.hpp"
#include "grammar/token_bytes.hpp"
#include "kvstore/kv_store.hpp"
#include "model/model_runner.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {

struct EngineCore {
  ModelConfig model;
  caf::actor pool, radix, worker, scheduler;
  // False when `worker` is a head's link to a worker node: the engine stops
  // that with its own token (cluster/roles/worker_link.hpp).
  bool owns_worker = true;
  std::string device;      // what the worker runs on
  int64_t kv_tokens = 0;   // KV pool capacity
  std::shared_ptr<ConstraintCompiler> constraints;  // the scheduler's
  int32_t max_context = 0;
  // The KV pool's element type and K+V bytes of one token in one layer
  // (what a KV transfer moves, cluster/transfer/kv_transfer.hpp).
  std::string kv_dtype;
  int64_t kv_token_bytes = 0;
  // The pool's rows in place, for the KV data plane's copies; empty when the
  // pool is on a device or in another process (a worker node's).
  KvRowSpans kv_spans;
  // The worker's layer clock (model/kv_layer_clock.hpp) when it runs in
  // this process: a streamed prompt's KV goes as each layer is stored.
  std::shared_ptr<KvLayerClock> kv_clock;
  // The scheduler's figures after each step (scheduler/stats_board.hpp).
  std::shared_ptr<StatsBoard> board;
  std::vector<AdapterInfo> adapters;  // loaded with the model
};

// A worker alone: the weights and KV tensors, sized as `kv` says (a worker
// node runs just this; a head drives it with its own managers).
struct WorkerCore {
  ModelConfig model;
  caf::actor worker;
  std::string device;
  KvStoreConfig kv;
  std::string kv_dtype;
  int64_t kv_token_bytes = 0;
  KvRowSpans kv_spans;  // see EngineCore
  std::shared_ptr<KvLayerClock> kv_clock;  // see EngineCore
  std::vector<AdapterInfo> adapters;  // EngineConfig::lora, loaded (ids 1, 2, ...)
  // Their KV's lineages in the KV tiers, by id (SchedulerConfig::adapter_lineages).
  std::map<int32_t, uint64_t> adapter_lineages;
  // A new worker actor over the same model runner: how an ended one is
  // started again (WorkerLiveness::restart).
  std::function<caf::actor()> respawn;
};

// The tokenizer of a GGUF file or Hugging Face folder (tokenizer.json).
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& model_path);

// Loads the model and spawns the four actors; the scheduler sends its token
// streams to `sink`. `tok` is the model's tokenizer (for its EOS id).
EngineCore spawn_engine_core(caf::actor_system& system, const EngineConfig& config, const Tokenizer& tok,
                             caf::actor sink);

// The scheduler settings `config` asks for, bounded by the model (context)
// and completed from the tokenizer (EOS).
SchedulerConfig scheduler_config(const EngineConfig& config, const ModelConfig& model, const Tokenizer& tok);
// Threads xgrammar may use to compile one structured-output grammar (the
// scheduler that owns the compiler also sets it to work, see its config).
inline constexpr int kConstraintThreads = 2;
// Tokens per block of the KV cache's host and disk tiers: a file of 64
// tokens is ~3 MB of f32 KV on the default model, large enough for
// sequential I/O, small enough that a prompt's last partial block costs
// little to recompute.
inline constexpr int32_t kDiskBlockTokens = 64;

// Loads the model and spawns its worker.
WorkerCore spawn_worker_core(caf::actor_system& system, const EngineConfig& config, const Tokenizer& tok);

// The managers and the scheduler over an existing worker (local or remote)
// whose KV pool `kv` describes. `liveness`: how the scheduler tells a slow
// step from a lost worker; the default suits a link to a worker node,
// which sends no heartbeats and fails forwards itself when the node goes.
EngineCore spawn_managers(caf::actor_system& system, const KvStoreConfig& kv, SchedulerConfig sc, caf::actor worker,
                          caf::actor sink,
                          WorkerLiveness liveness = {.heartbeats = false,
                                                     .silence = std::chrono::milliseconds(0),
                                                     .copy_timeout = std::chrono::milliseconds(120'000),
                                                     .restart = {},
                                                     .max_restarts = 0});

// Stops the four actors (the scheduler finishes its current step first).
void stop_engine_core(const EngineCore& core);

}  // namespace actorlm
