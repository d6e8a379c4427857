#include "apps/engine_flags.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <fstream>
#include <iterator>

#include "apps/device_flags.hpp"
#include "jinja/template.hpp"
#include "model/default_model.hpp"

namespace actorlm {

const std::set<std::string> engine_flags =
    with_device_flags({"--model", "--threads", "--kv-tokens", "--page-size", "--max-running-requests",
                       "--max-prefill-tokens", "--chunked-prefill-size", "--schedule-policy", "--context-length",
                       "--hicache-size", "--hicache-dtype", "--hicache-write-policy", "--hicache-storage-dir",
                       "--hicache-storage-gb", "--hicache-prefetch-policy", "--hicache-prefetch-timeout-ms", "--max-step-ms", "--itl-target-ms", "--worker-timeout", "--stall-timeout",
                       "--speculative-algorithm", "--speculative-num-draft-tokens",
                       "--speculative-ngram-min-match-window-size", "--speculative-ngram-max-match-window-size",
                       "--speculative-ngram-capacity",
                       "--speculative-draft-model-path", "--priority-scheduling-preemption-threshold",
                       "--schedule-max-overtakes", "--max-queued-requests", "--queue-timeout",
                       "--radix-eviction-policy", "--lora", "--max-lora-memory-mb"});

EngineConfig engine_from_flags(const cli::Args& args) {
  EngineConfig ec;
  ec.model_path = args.str("--model").value_or(default_model_path());
  ec.threads = static_cast<int>(args.integer("--threads", 0, 0, 1024));
  apply_device_flags(args, ec, 32768);
  ec.page_size = static_cast<int32_t>(args.integer("--page-size", 1, 1, 256));
  // Eight slots beyond the running limit, so that retracted and finishing
  // requests never starve a new one of a req_to_token row.
  ec.max_requests = static_cast<int32_t>(args.integer("--max-running-requests", 64, 1, 4096)) + 8;
  ec.disable_radix_cache = args.has(disable_radix_switch);
  ec.scheduler.max_running_requests = ec.max_requests - 8;
  ec.scheduler.max_prefill_tokens = static_cast<int32_t>(args.integer("--max-prefill-tokens", 4096, 16, 1 << 20));
  ec.scheduler.chunked_prefill_size = static_cast<int32_t>(args.integer("--chunked-prefill-size", 512, 0, 1 << 20));
  ec.scheduler.max_context = static_cast<int32_t>(args.integer("--context-length", 0, 0, 1 << 22));
  // The time one step should take: prefill is cut to what the measured cost
  // per token fits (0: token limits only). Two seconds keeps a slow model
  // from holding running streams for minutes in one step, and is long
  // enough that a step's fixed costs stay small beside its work.
  ec.scheduler.max_step_seconds = double(args.integer("--max-step-ms", 2000, 0, 3'600'000)) / 1000.0;
  // The gap between running streams' tokens that a mixed step's prefill is
  // sized for (0: one --chunked-prefill-size chunk in all).
  ec.scheduler.itl_target_seconds = double(args.integer("--itl-target-ms", 0, 0, 3'600'000)) / 1000.0;
  // Silence (no heartbeat, no result) after which the worker is lost.
  ec.worker_silence_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.number("--worker-timeout", 30.0, 0.05, 86400) * 1000));
  // Seconds a request waits while the engine publishes no step at all.
  ec.stall_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.number("--stall-timeout", 600.0, 0.05, 86400) * 1000));
  std::string policy = args.str("--schedule-policy").value_or("lpm");
  if (policy != "lpm" && policy != "fcfs") throw cli::UsageError("--schedule-policy must be lpm or fcfs");
  ec.scheduler.policy = policy == "lpm" ? SchedulePolicy::lpm : SchedulePolicy::fcfs;
  // GB of RAM, fractions allowed (0.5 = 512 MB); 0: no host tier.
  ec.hicache_host_bytes = static_cast<int64_t>(args.number("--hicache-size", 0.0, 0.0, 1 << 20) * double(1ll << 30));
  const std::string dtype = args.str("--hicache-dtype").value_or("same");
  if (auto d = kv_host_dtype_from(dtype)) {
    ec.hicache_dtype = *d;
  } else {
    throw cli::UsageError("--hicache-dtype must be same, f16 or q8_0");
  }
  const std::string policy_name = args.str("--hicache-write-policy").value_or("write_through");
  if (auto p = write_policy_from(policy_name)) {
    ec.hicache_write_policy = *p;
  } else {
    throw cli::UsageError("--hicache-write-policy must be write_through or write_back");
  }
  const std::string prefetch = args.str("--hicache-prefetch-policy").value_or("best_effort");
  if (auto p = prefetch_policy_from(prefetch)) {
    ec.scheduler.prefetch_policy = *p;
  } else {
    throw cli::UsageError("--hicache-prefetch-policy must be best_effort, wait_complete or timeout");
  }
  ec.scheduler.prefetch_timeout_seconds = double(args.integer("--hicache-prefetch-timeout-ms", 1000, 1, 600'000)) / 1000.0;
  // Speculative decoding (scheduler/drafter.hpp), SGLang's flag names.
  const std::string spec = args.str("--speculative-algorithm").value_or("none");
  if (auto a = parse_speculative_algorithm(spec)) {
    ec.scheduler.speculative.algorithm = *a;
  } else {
    throw cli::UsageError("--speculative-algorithm must be none, ngram or draft");
  }
  ec.draft_model_path = args.str("--speculative-draft-model-path").value_or("");
  const bool by_model = ec.scheduler.speculative.algorithm == SpeculativeAlgorithm::draft;
  if (by_model && ec.draft_model_path.empty()) {
    throw cli::UsageError("--speculative-algorithm draft needs --speculative-draft-model-path (a GGUF file or "
                          "Hugging Face folder with the model's vocabulary)");
  }
  if (!by_model && !ec.draft_model_path.empty()) {
    throw cli::UsageError("--speculative-draft-model-path is for --speculative-algorithm draft");
  }
  ec.scheduler.speculative.num_draft_tokens =
      static_cast<int32_t>(args.integer("--speculative-num-draft-tokens", 4, 1, kMaxDraftTokens));
  ec.scheduler.speculative.ngram_min =
      static_cast<int32_t>(args.integer("--speculative-ngram-min-match-window-size", 2, 1, 64));
  ec.scheduler.speculative.ngram_max =
      static_cast<int32_t>(args.integer("--speculative-ngram-max-match-window-size", 4, 1, 64));
  // SGLang's name; 0 (here the default): no memory across requests.
  ec.scheduler.speculative.ngram_capacity = args.integer("--speculative-ngram-capacity", 0, 0, kMaxNgramCapacity);
  if (ec.scheduler.speculative.ngram_capacity > 0 &&
      ec.scheduler.speculative.algorithm != SpeculativeAlgorithm::ngram) {
    throw cli::UsageError("--speculative-ngram-capacity is for --speculative-algorithm ngram");
  }
  if (auto why = ec.scheduler.speculative.refusal()) throw cli::UsageError("speculative decoding: " + *why);
  // The waiting queue (scheduler/queue_policy.hpp), SGLang's names where it has them.
  QueuePolicy& q = ec.scheduler.queue;
  q.priorities = args.has(priority_scheduling_switch);
  q.low_values_first = args.has(low_priority_first_switch);
  if (q.low_values_first && !q.priorities) {
    throw cli::UsageError(std::string(low_priority_first_switch) + " needs " + priority_scheduling_switch);
  }
  q.preemption_threshold = static_cast<int32_t>(
      args.integer("--priority-scheduling-preemption-threshold", 10, 1, 2 * int64_t{kMaxPriority}));
  q.max_overtakes = static_cast<int32_t>(args.integer("--schedule-max-overtakes", 32, 0, 1 << 20));
  q.share_preemption = args.has(tenant_preemption_switch);
  q.max_queued = static_cast<int32_t>(args.integer("--max-queued-requests", 0, 0, 1 << 20));
  q.timeout_seconds = args.number("--queue-timeout", 0.0, 0.0, 86400);
  // Which cached prefixes go first when the pool is short (kvstore/radix_cache.hpp).
  const std::string eviction = args.str("--radix-eviction-policy").value_or("lru");
  if (auto e = parse_eviction_policy(eviction)) {
    ec.radix_eviction = *e;
  } else {
    throw cli::UsageError("--radix-eviction-policy must be lru, lfu or priority");
  }
  if (ec.radix_eviction == EvictionPolicy::priority && !q.priorities) {
    // Without it every request ranks the same and the policy is lru's.
    throw cli::UsageError(std::string("--radix-eviction-policy priority needs ") + priority_scheduling_switch);
  }
  ec.max_lora_bytes = args.integer("--max-lora-memory-mb", 2048, 0, int64_t{1} << 30) * 1'000'000;
  // LoRA adapters, llama.cpp's GGUF form: --lora NAME=PATH, repeatable.
  for (const std::string& spec : args.all("--lora")) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || !valid_adapter_name(name) || eq + 1 == spec.size()) {
      throw cli::UsageError("--lora takes NAME=PATH (NAME: 1-64 of letters, digits, '.', '_' and '-', not 'default'), not '" +
                            spec + "'");
    }
    for (const LoraSpec& l : ec.lora) {
      if (l.name == name) throw cli::UsageError("--lora " + name + " is given twice");
    }
    if (ec.lora.size() >= static_cast<size_t>(kMaxAdapterId)) throw cli::UsageError("--lora: too many adapters");
    ec.lora.push_back({name, spec.substr(eq + 1), 1.0f});
  }
  ec.hicache_storage_dir = args.str("--hicache-storage-dir").value_or("");
  ec.hicache_storage_bytes = args.integer("--hicache-storage-gb", 16, 1, 1 << 20) << 30;
  return ec;
}

std::string chat_template_from_flags(const cli::Args& args) {
  const auto path = args.str(chat_template_file_flag);
  if (!path) return {};
  std::ifstream in(*path, std::ios::binary);
  if (!in) throw cli::UsageError(std::string(chat_template_file_flag) + ": cannot read '" + *path + "'");
  std::string source(std::istreambuf_iterator<char>(in), {});
  if (source.empty()) throw cli::UsageError(*path + " is empty");
  try {
    jinja::Template check(source);
  } catch (const jinja::Error& e) {
    throw cli::UsageError(*path + ": " + e.what());
  }
  return source;
}

void configure_engine_system(caf::actor_system_config& cfg) { cfg.set("scheduler.policy", caf::atom("sharing")); }

}  // namespace actorlm
