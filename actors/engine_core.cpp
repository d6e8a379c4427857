#include "actors/engine_core.hpp"

#include <caf/all.hpp>
#include <filesystem>

#include "actors/executor_factory.hpp"
#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"
#include "actors/scheduler_actor.hpp"
#include "actors/wire.hpp"
#include "actors/worker_actor.hpp"
#include "model/gguf_file.hpp"

namespace actorlm {

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(model_path)) {
    return std::make_shared<const Tokenizer>(Tokenizer::from_hf_json((fs::path(model_path) / "tokenizer.json").string()));
  }
  return std::make_shared<const Tokenizer>(Tokenizer::from_gguf(GgufFile::open(model_path)));
}

EngineCore spawn_engine_core(caf::actor_system& system, const EngineConfig& config, const Tokenizer& tok,
                             caf::actor sink) {
  EngineCore core;
  LlamaWeights weights = load_llama_weights(config.model_path, config.progress);
  core.model = weights.config;
  SchedulerConfig sc = config.scheduler;
  if (sc.max_context <= 0 || sc.max_context > core.model.max_context) sc.max_context = core.model.max_context;
  if (!sc.eos_id) sc.eos_id = tok.eos_id();
  core.max_context = sc.max_context;
  MadeExecutor made = make_executor(std::move(weights),
                                    {config.device, config.threads, config.mem_fraction_static, config.kv_cache_dtype},
                                    config.kv_tokens, config.page_size, config.max_requests, sc.max_context);
  core.device = made.description;
  KvStoreConfig kv{made.kv_tokens, config.page_size, config.max_requests, sc.max_context, config.disable_radix_cache};
  auto runner = std::make_shared<ModelRunner>(
      std::move(made.executor),
      ModelRunnerConfig{.kv_pool_rows = TokenToKVPoolAllocator(kv.capacity_tokens, kv.page_size).pool_rows(),
                        .max_requests = kv.max_requests,
                        .max_context = sc.max_context});
  core.kv_tokens = kv.capacity_tokens;
  core.pool = spawn_pool_manager(system, kv);
  core.radix = spawn_radix_manager(system, kv.page_size, kv.disable_radix_cache);
  core.worker = spawn_worker(system, runner);
  core.scheduler = spawn_scheduler(system, sc, core.pool, core.radix, core.worker, std::move(sink));
  return core;
}

void stop_engine_core(const EngineCore& core) {
  caf::anon_send(core.scheduler, shutdown_atom::value);
  for (const auto& a : {core.worker, core.radix, core.pool}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

}  // namespace actorlm
