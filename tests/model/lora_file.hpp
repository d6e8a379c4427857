#pragma once
// LoRA adapter files for tests: random A and B of the shapes a model's
// matrices need, written as llama.cpp's converter lays an adapter out
// (model/lora_adapter.hpp), float32.

#include <array>
#include <random>
#include <string>
#include <vector>

#include "kernels/half.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_config.hpp"
#include "tests/model/gguf_builder.hpp"

namespace actorlm::test {

// Values a half-precision float holds exactly, as adapters are shipped (the
// host keeps them so: the float32 file then loses nothing).
inline std::vector<float> uniform(size_t n, float bound, std::mt19937& rng) {
  std::uniform_real_distribution<float> draw(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = f16_to_f32(f32_to_f16(draw(rng)));
  return v;
}

// An adapter file for `c` adapting `targets` in every layer (and the output
// head when `output`), rank r, the given alpha; A and B drawn from seed.
inline std::string write_adapter(const std::string& path, const ModelConfig& c, const std::vector<size_t>& targets,
                          int32_t rank, float alpha, uint32_t seed, bool output = false, float bound = 0.3f) {
  std::mt19937 rng(seed);
  test::GgufBuilder g;
  g.str("general.architecture", c.architecture).str("general.type", "adapter").str("adapter.type", "lora");
  g.f32("adapter.lora.alpha", alpha);
  auto pair = [&](const std::string& name, int64_t rows, int64_t cols) {
    g.f32_tensor(name + ".lora_a", {static_cast<uint64_t>(cols), static_cast<uint64_t>(rank)},
                 uniform(static_cast<size_t>(cols * rank), bound, rng));
    g.f32_tensor(name + ".lora_b", {static_cast<uint64_t>(rank), static_cast<uint64_t>(rows)},
                 uniform(static_cast<size_t>(rows * rank), bound, rng));
  };
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (size_t t : targets) {
      const auto [rows, cols] = lora_target_shape(c, static_cast<LoraTarget>(t));
      pair("blk." + std::to_string(l) + "." + kLoraTargetNames[t] + ".weight", rows, cols);
    }
  }
  if (output) pair("output.weight", c.vocab_size, c.hidden);
  return g.write(path);
}

}  // namespace actorlm::test
