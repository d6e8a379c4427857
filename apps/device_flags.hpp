#pragma once
// The flags that choose where the model runs, shared by run, chat and serve
// (named as SGLang names them): --device cpu|cuda, --mem-fraction-static F,
// --kv-cache-dtype auto|f16|bf16.

#include <set>
#include <string>

#include "actors/engine.hpp"
#include "apps/cli_args.hpp"

namespace actorlm {

inline const std::set<std::string> device_flags{"--device", "--mem-fraction-static", "--kv-cache-dtype"};

// Fills device, mem_fraction_static, kv_cache_dtype and kv_tokens (from
// --kv-tokens, else cpu_kv_tokens on the CPU and "as many as fit" on a GPU).
void apply_device_flags(const cli::Args& args, EngineConfig& config, int64_t cpu_kv_tokens);

// Adds `extra` to a flag set (for the Args constructor).
std::set<std::string> with_device_flags(std::set<std::string> flags);

}  // namespace actorlm
