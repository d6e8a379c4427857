#pragma once
// A tiny Llama GGUF for loader tests (and the fuzz seeds): metadata as
// llama.cpp's converter writes it, float32 tensors named as in llama.cpp
// (blk.N.attn_q.weight, ...), a 40-token gpt2 vocabulary. Every size can be
// changed on its own, so a test can make the metadata and the tensors
// disagree.

#include <cstdint>
#include <string>
#include <vector>

#include "tests/model/gguf_builder.hpp"

namespace actorlm::test {

struct TinyLlamaGguf {
  // What the metadata says.
  uint32_t block_count = 2;
  uint32_t hidden = 16;
  uint32_t n_heads = 4;
  uint32_t n_kv_heads = 2;
  uint32_t ffn = 24;
  uint32_t vocab = 40;  // tokenizer.ggml.tokens entries
  uint32_t context = 64;
  // What the tensors are: layers present and the shapes' sizes (defaults:
  // as the metadata says).
  uint32_t layers_present = 2;
  uint32_t embd_rows = 40;
  uint32_t q_rows = 16;   // n_heads * head_dim
  uint32_t kv_rows = 8;   // n_kv_heads * head_dim
  bool tied = true;
  // Extra tensors to write as they are named, with one f32 element each.
  std::vector<std::string> extra_tensors;
  // Tensors to leave out.
  std::vector<std::string> skip_tensors;

  GgufBuilder builder() const {
    GgufBuilder b;
    b.str("general.architecture", "llama")
        .u32("llama.block_count", block_count)
        .u32("llama.embedding_length", hidden)
        .u32("llama.attention.head_count", n_heads)
        .u32("llama.attention.head_count_kv", n_kv_heads)
        .u32("llama.feed_forward_length", ffn)
        .u32("llama.context_length", context)
        .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
        .str("tokenizer.ggml.model", "gpt2");
    std::vector<std::string> tokens;
    for (uint32_t i = 0; i < vocab; ++i) {
      tokens.push_back(i < 26 ? std::string(1, char('a' + i)) : i == 26 ? "ab" : "t" + std::to_string(i));
    }
    b.strings("tokenizer.ggml.tokens", tokens).strings("tokenizer.ggml.merges", {"a b"});
    auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
      for (const auto& s : skip_tensors) {
        if (s == name) return;
      }
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      std::vector<float> v(n);
      for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919) % 13) * 0.01f - 0.06f;
      b.f32_tensor(name, std::move(shape), v);
    };
    add("token_embd.weight", {hidden, embd_rows});
    add("output_norm.weight", {hidden});
    if (!tied) add("output.weight", {hidden, embd_rows});
    for (uint32_t l = 0; l < layers_present; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", {hidden});
      add(p + "attn_q.weight", {hidden, q_rows});
      add(p + "attn_k.weight", {hidden, kv_rows});
      add(p + "attn_v.weight", {hidden, kv_rows});
      add(p + "attn_output.weight", {q_rows, hidden});
      add(p + "ffn_norm.weight", {hidden});
      add(p + "ffn_gate.weight", {hidden, ffn});
      add(p + "ffn_up.weight", {hidden, ffn});
      add(p + "ffn_down.weight", {ffn, hidden});
    }
    for (const auto& name : extra_tensors) b.f32_tensor(name, {1}, {0.5f});
    return b;
  }
};

}  // namespace actorlm::test
