#include "apps/device_flags.hpp"

namespace actorlm {

void apply_device_flags(const cli::Args& args, EngineConfig& c, int64_t cpu_kv_tokens) {
  c.device = args.str("--device").value_or("cpu");
  if (c.device != "cpu" && c.device != "cuda") throw cli::UsageError("--device must be cpu or cuda");
  c.mem_fraction_static = args.number("--mem-fraction-static", 0.85, 0.05, 0.99);
  c.kv_cache_dtype = args.str("--kv-cache-dtype").value_or("auto");
  if (c.kv_cache_dtype != "auto" && c.kv_cache_dtype != "bf16" && c.kv_cache_dtype != "f16") {
    throw cli::UsageError("--kv-cache-dtype must be auto, f16 (cpu) or bf16 (cuda)");
  }
  c.kv_tokens = args.integer("--kv-tokens", c.device == "cpu" ? cpu_kv_tokens : 0, 0, int64_t{1} << 28);
  if (args.has("--kv-tokens") && c.kv_tokens != 0 && c.kv_tokens < 256) throw cli::UsageError("--kv-tokens must be 0 (auto) or at least 256");
}

std::set<std::string> with_device_flags(std::set<std::string> flags) {
  flags.insert(device_flags.begin(), device_flags.end());
  return flags;
}

}  // namespace actorlm
