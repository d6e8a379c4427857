#include "actors/engine_core.hpp"

#include <caf/all.hpp>
#include <cstdio>
#include <filesystem>

#include "actors/executor_factory.hpp"
#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/wire.hpp"
#include "actors/worker_actor.hpp"
#include "kvstore/kv_block.hpp"
#include "model/draft_model.hpp"
#include "model/gguf_file.hpp"
#include "model/model_fingerprint.hpp"

namespace actorlm {

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(model_path)) {
    return std::make_shared<const Tokenizer>(Tokenizer::from_hf_json((fs::path(model_path) / "tokenizer.json").string()));
  }
  return std::make_shared<const Tokenizer>(Tokenizer::from_gguf(GgufFile::open(model_path)));
}

SchedulerConfig scheduler_config(const EngineConfig& config, const ModelConfig& model, const Tokenizer& tok) {
  SchedulerConfig sc = config.scheduler;
  if (sc.max_context <= 0 || sc.max_context > model.max_context) sc.max_context = model.max_context;
  if (!sc.eos_id) sc.eos_id = tok.eos_id();
  sc.vocab_size = model.vocab_size;
  return sc;
}

namespace {

// The draft model beside the target: the same device and threads, a KV
// pool with the target's rows (its KV is indexed by them).
void attach_draft_model(ModelRunner& runner, const EngineConfig& config, int64_t kv_tokens, int32_t max_context,
                        WorkerCore& core) {
  LlamaWeights weights = load_llama_weights(config.draft_model_path, config.progress);
  if (weights.config.max_context < max_context) {
    throw std::invalid_argument("draft model " + config.draft_model_path + ": its context is " +
                                std::to_string(weights.config.max_context) + " tokens, the target's " +
                                std::to_string(max_context) + " (pass --context-length " +
                                std::to_string(weights.config.max_context) + ")");
  }
  MadeExecutor made = make_executor(std::move(weights),
                                    {config.device, config.threads, config.mem_fraction_static, config.kv_cache_dtype},
                                    kv_tokens, config.page_size, config.max_requests, max_context);
  auto draft = std::make_unique<ModelRunner>(
      std::move(made.executor),
      ModelRunnerConfig{.kv_pool_rows = TokenToKVPoolAllocator(kv_tokens, config.page_size).pool_rows(),
                        .max_requests = config.max_requests,
                        .max_context = max_context});
  const double mb = double(draft->kv_bytes()) / 1e6;
  runner.attach_draft(std::make_unique<DraftModel>(std::move(draft)));
  core.device += ", draft model " + std::filesystem::path(config.draft_model_path).filename().string() + " (" +
                 std::to_string(static_cast<int64_t>(mb)) + " MB KV)";
}

}  // namespace

WorkerCore spawn_worker_core(caf::actor_system& system, const EngineConfig& config, const Tokenizer& tok) {
  WorkerCore core;
  LlamaWeights weights = load_llama_weights(config.model_path, config.progress);
  core.model = weights.config;
  const int32_t max_context = scheduler_config(config, core.model, tok).max_context;
  MadeExecutor made = make_executor(std::move(weights),
                                    {config.device, config.threads, config.mem_fraction_static, config.kv_cache_dtype},
                                    config.kv_tokens, config.page_size, config.max_requests, max_context);
  core.device = made.description;
  core.kv = {made.kv_tokens, config.page_size, config.max_requests, max_context, config.disable_radix_cache,
             config.radix_eviction};
  auto runner = std::make_shared<ModelRunner>(
      std::move(made.executor),
      ModelRunnerConfig{.kv_pool_rows = TokenToKVPoolAllocator(core.kv.capacity_tokens, core.kv.page_size).pool_rows(),
                        .max_requests = core.kv.max_requests,
                        .max_context = max_context});
  if (!config.draft_model_path.empty()) attach_draft_model(*runner, config, made.kv_tokens, max_context, core);
  int64_t lora_bytes = 0;
  for (const LoraSpec& spec : config.lora) {
    const auto id = static_cast<int32_t>(core.adapters.size() + 1);
    const LoraAdapter adapter = load_lora_adapter(spec.path, core.model, spec.scale);
    lora_bytes += adapter.bytes();
    if (lora_bytes > config.max_lora_bytes) {
      throw std::invalid_argument("LoRA adapter " + spec.name + ": the adapters take " + std::to_string(lora_bytes / 1000000) +
                                  " MB, more than --max-lora-memory-mb " + std::to_string(config.max_lora_bytes / 1000000));
    }
    runner->add_adapter(id, adapter);
    core.adapters.push_back({spec.name, id, spec.path, adapter.bytes()});
    core.adapter_lineages[id] = kv_adapter_lineage(model_fingerprint(spec.path), spec.scale);
    std::fprintf(stderr, "actorlm: LoRA adapter %s: %s, %lld matrices, %.1f MB\n", spec.name.c_str(),
                 spec.path.c_str(), static_cast<long long>(adapter.matrices()), double(adapter.bytes()) / 1e6);
  }
  core.kv_dtype = runner->kv_dtype();
  core.kv_token_bytes = runner->kv_token_bytes();
  std::vector<std::span<uint8_t>> probe;
  if (core.kv_token_bytes > 0 && runner->kv_spans({}, 0, 1, probe)) {
    core.kv_spans = [runner](std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                             std::vector<std::span<uint8_t>>& out) { return runner->kv_spans(rows, first_layer, last_layer, out); };
  }
  core.kv_clock = std::make_shared<KvLayerClock>();
  runner->set_kv_clock(core.kv_clock);
  core.worker = spawn_worker(system, runner);
  // A worker actor that ends is started again over this runner (actors/actor_worker.hpp).
  core.respawn = [&system, runner] { return spawn_worker(system, runner); };
  return core;
}

EngineCore spawn_managers(caf::actor_system& system, const KvStoreConfig& kv, SchedulerConfig sc, caf::actor worker,
                          caf::actor sink, WorkerLiveness liveness) {
  EngineCore core;
  core.board = std::make_shared<StatsBoard>(sc.tiers);
  sc.max_context = kv.max_context_len;
  core.max_context = kv.max_context_len;
  core.kv_tokens = kv.capacity_tokens;
  core.constraints = sc.constraints;
  core.pool = spawn_pool_manager(system, kv);
  core.radix = spawn_radix_manager(system, kv.page_size, kv.disable_radix_cache, kv.eviction);
  core.worker = std::move(worker);
  core.scheduler = spawn_scheduler(system, sc, core.pool, core.radix, core.worker, std::move(sink), liveness, core.board);
  return core;
}

namespace {

// The KV cache's host and disk tiers the flags ask for.
std::shared_ptr<KvTiers> make_tiers(const EngineConfig& config, const WorkerCore& w) {
  if (w.kv_token_bytes <= 0) {
    throw std::invalid_argument("--hicache-size and --hicache-storage-dir need KV copies, which the " + w.device +
                                " backend does not do yet");
  }
  // The fingerprint names the weights, not just the shapes: another
  // fine-tune's KV is another model's.
  KvBlockLayout layout{model_fingerprint(config.model_path) + "|" + std::to_string(w.model.n_layers), w.kv_dtype,
                       w.model.n_layers, w.kv_token_bytes, kDiskBlockTokens};
  std::shared_ptr<KvHostStore> host;
  if (config.hicache_host_bytes > 0) {
    host = std::make_shared<KvHostStore>(layout, config.hicache_host_bytes, config.hicache_dtype);
    std::fprintf(stderr, "actorlm: KV host tier: %.1f MB in %s, room for %lld blocks of %d tokens\n",
                 double(config.hicache_host_bytes) / 1e6, kv_host_dtype_name(config.hicache_dtype),
                 static_cast<long long>(config.hicache_host_bytes / host->encoded_block_bytes()), layout.block_tokens);
  }
  std::shared_ptr<KvDiskStore> disk;
  if (!config.hicache_storage_dir.empty()) {
    disk = std::make_shared<KvDiskStore>(config.hicache_storage_dir, layout,
                                         std::max(config.hicache_storage_bytes, layout.block_bytes()));
    const KvDiskStats& d = disk->stats();
    std::fprintf(stderr,
                 "actorlm: KV disk tier %s: %lld blocks of %d tokens (%.1f MB) found, %lld damaged file(s) removed, "
                 "%lld of another model or layout left alone\n",
                 config.hicache_storage_dir.c_str(), static_cast<long long>(d.blocks), layout.block_tokens,
                 double(d.bytes) / 1e6, static_cast<long long>(d.rejected), static_cast<long long>(d.foreign));
  }
  return std::make_shared<KvTiers>(std::move(host), std::move(disk), config.hicache_write_policy);
}

}  // namespace

EngineCore spawn_engine_core(caf::actor_system& system, const EngineConfig& config, const Tokenizer& tok,
                             caf::actor sink) {
  WorkerCore w = spawn_worker_core(system, config, tok);
  SchedulerConfig sc = scheduler_config(config, w.model, tok);
  for (const AdapterInfo& a : w.adapters) sc.adapters.push_back(a.id);
  sc.adapter_lineages = w.adapter_lineages;
  sc.constraints = make_constraint_compiler(tok, w.model.vocab_size, kConstraintThreads);
  if (!config.hicache_storage_dir.empty() || config.hicache_host_bytes > 0) {
    try {
      sc.tiers = make_tiers(config, w);
    } catch (...) {
      caf::anon_send_exit(w.worker, caf::exit_reason::user_shutdown);
      throw;
    }
  }
  // This process's own worker actor: it beats while it computes.
  WorkerLiveness liveness;
  liveness.silence = config.worker_silence_timeout;
  liveness.restart = w.respawn;
  EngineCore core = spawn_managers(system, w.kv, sc, w.worker, std::move(sink), liveness);
  core.model = w.model;
  core.device = w.device;
  core.kv_dtype = w.kv_dtype;
  core.kv_token_bytes = w.kv_token_bytes;
  core.kv_spans = w.kv_spans;
  core.kv_clock = w.kv_clock;
  core.adapters = w.adapters;
  return core;
}

void stop_engine_core(const EngineCore& core) {
  caf::anon_send(core.scheduler, shutdown_atom::value);
  for (const auto& a : {core.radix, core.pool}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  // A remote worker (a head driving a worker node) is not ours to stop.
  if (core.owns_worker && core.worker && core.worker.node() == core.pool.node()) {
    caf::anon_send_exit(core.worker, caf::exit_reason::user_shutdown);
  }
}

}  // namespace actorlm
