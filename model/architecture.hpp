#pragma once
// The GGUF architectures actorlm runs (general.architecture), each as the
// ModelConfig features it turns on and the metadata keys of its own. The
// keys every architecture shares (block_count, embedding_length, heads,
// RoPE base, norm epsilon, ...) are read by config_from_gguf before an
// architecture's configure() runs; tensor names are llama.cpp's and are the
// loader's business (llama_weights.cpp), which reads the optional ones
// (q/k norms, post norms, fused q/k/v or gate/up) when the features say so.
//
// Adding an architecture whose layers are built from the features already
// here is one entry in architecture.cpp.

#include <string>
#include <string_view>

#include "model/model_config.hpp"

namespace actorlm {

class GgufFile;

struct Architecture {
  std::string_view name;  // general.architecture
  // llama.cpp rotates this architecture's q/k with NEOX pairing (element i
  // with i + head_dim/2): the loader reorders those rows into the adjacent
  // pairs the one RoPE kernel uses (llama_weights.hpp).
  bool neox_rope = false;
  // Reads the architecture's own keys and sets its features. `prefix` is
  // "<name>."; errors are ModelErrors.
  void (*configure)(const GgufFile& file, const std::string& prefix, ModelConfig& c) = nullptr;
};

// Null when actorlm does not run `name`.
const Architecture* find_architecture(std::string_view name);
// "gemma, gemma2, ..." for error messages.
std::string supported_architectures();

}  // namespace actorlm
