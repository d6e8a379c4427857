#include "cluster/transfer/kv_transfer.hpp"

#include <zlib.h>

#include <algorithm>

#include "messages/envelope.hpp"

namespace actorlm {
namespace {

uint32_t crc_of(std::span<const uint8_t> data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes at most 4 GiB per call.
  for (size_t at = 0; at < data.size(); at += 1u << 30) {
    const size_t n = std::min<size_t>(data.size() - at, 1u << 30);
    crc = crc32(crc, data.data() + at, static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::string kv_model_digest(const NodeModel& m) {
  return m.name + "|vocab " + std::to_string(m.vocab_size) + "|layers " + std::to_string(m.n_layers) + "|hidden " +
         std::to_string(m.hidden) + "|tokenizer " + std::to_string(m.tokenizer_digest);
}

KvLayout kv_layout(const ModelRunner& runner, const NodeModel& model) {
  return {kv_model_digest(model), runner.kv_dtype(), runner.model_config().n_layers, runner.kv_token_bytes()};
}

std::vector<KvChunkRange> plan_kv_chunks(int32_t tokens, const KvLayout& layout, int64_t max_bytes) {
  std::vector<KvChunkRange> plan;
  if (tokens <= 0 || layout.n_layers <= 0 || layout.token_bytes <= 0) return plan;
  const int64_t layer_bytes = static_cast<int64_t>(tokens) * layout.token_bytes;
  if (layer_bytes <= max_bytes) {
    const auto per = static_cast<int32_t>(std::max<int64_t>(1, max_bytes / layer_bytes));
    for (int32_t l = 0; l < layout.n_layers; l += per) plan.push_back({l, std::min(l + per, layout.n_layers), 0, tokens});
    return plan;
  }
  const auto per = static_cast<int32_t>(std::max<int64_t>(1, max_bytes / layout.token_bytes));
  for (int32_t l = 0; l < layout.n_layers; ++l) {
    for (int32_t t = 0; t < tokens; t += per) plan.push_back({l, l + 1, t, std::min(t + per, tokens)});
  }
  return plan;
}

std::vector<KvChunkRange> plan_kv_chunks(int32_t first_token, int32_t last_token, const KvLayout& layout, int64_t max_bytes) {
  std::vector<KvChunkRange> plan = plan_kv_chunks(last_token - first_token, layout, max_bytes);
  for (auto& r : plan) {
    r.first_token += first_token;
    r.last_token += first_token;
  }
  return plan;
}

std::vector<uint8_t> encode_kv_chunk(uint64_t request_id, const KvLayout& layout, int32_t tokens,
                                     const KvChunkRange& range, std::span<const uint8_t> data) {
  fb::KvChunkT c;
  c.request_id = request_id;
  c.model_digest = layout.model_digest;
  c.dtype = layout.dtype;
  c.token_bytes = layout.token_bytes;
  c.n_layers = layout.n_layers;
  c.n_tokens = tokens;
  c.first_layer = range.first_layer;
  c.last_layer = range.last_layer;
  c.first_token = range.first_token;
  c.last_token = range.last_token;
  c.data.assign(data.begin(), data.end());
  c.data_crc32 = crc_of(data);
  return msg::pack(c);
}

std::optional<KvChunk> decode_kv_chunk(std::span<const uint8_t> bytes, const KvLayout& mine, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<KvChunk> {
    if (error) *error = why;
    return std::nullopt;
  };
  auto opened = msg::open<fb::KvChunk>(bytes);
  if (!opened) return fail(opened.error);
  const fb::KvChunk& c = *opened.message;
  KvLayout theirs{c.model_digest() ? c.model_digest()->str() : "", c.dtype() ? c.dtype()->str() : "", c.n_layers(),
                  c.token_bytes()};
  if (theirs.model_digest != mine.model_digest) {
    return fail("KV chunk from another model: " + theirs.model_digest + " (this engine: " + mine.model_digest + ")");
  }
  if (theirs != mine) {
    return fail("KV chunk layout " + theirs.dtype + ", " + std::to_string(theirs.n_layers) + " layers, " +
                std::to_string(theirs.token_bytes) + " bytes a token differs from this pool's " + mine.dtype + ", " +
                std::to_string(mine.n_layers) + ", " + std::to_string(mine.token_bytes));
  }
  KvChunk out;
  out.request_id = c.request_id();
  out.tokens = c.n_tokens();
  out.range = {c.first_layer(), c.last_layer(), c.first_token(), c.last_token()};
  const KvChunkRange& r = out.range;
  if (out.tokens <= 0 || r.first_layer < 0 || r.first_layer >= r.last_layer || r.last_layer > mine.n_layers ||
      r.first_token < 0 || r.first_token >= r.last_token || r.last_token > out.tokens) {
    return fail("KV chunk range layers [" + std::to_string(r.first_layer) + ", " + std::to_string(r.last_layer) +
                ") tokens [" + std::to_string(r.first_token) + ", " + std::to_string(r.last_token) +
                ") is outside a transfer of " + std::to_string(out.tokens) + " tokens");
  }
  const size_t size = c.data() ? c.data()->size() : 0;
  if (static_cast<int64_t>(size) != r.bytes(mine)) {
    return fail("KV chunk holds " + std::to_string(size) + " bytes; its range needs " + std::to_string(r.bytes(mine)));
  }
  if (size) out.data.assign(c.data()->begin(), c.data()->end());
  if (crc_of(out.data) != c.data_crc32()) return fail("KV chunk data fails its CRC");
  return out;
}

KvAssembly::KvAssembly(uint64_t request_id, int32_t tokens, int32_t n_layers)
    : request_id_(request_id),
      tokens_(tokens),
      n_layers_(n_layers),
      have_(static_cast<size_t>(tokens) * static_cast<size_t>(n_layers), false),
      missing_(static_cast<int64_t>(tokens) * n_layers) {}

std::optional<std::string> KvAssembly::accept(const KvChunk& c) {
  if (c.request_id != request_id_) return "KV chunk for request " + std::to_string(c.request_id) + ", not this one";
  if (c.tokens != tokens_) {
    return "KV chunk of a " + std::to_string(c.tokens) + "-token transfer; this one has " + std::to_string(tokens_);
  }
  const KvChunkRange& r = c.range;
  if (r.last_layer > n_layers_) return "KV chunk beyond the model's layers";
  auto at = [&](int32_t l, int32_t t) { return static_cast<size_t>(l) * static_cast<size_t>(tokens_) + static_cast<size_t>(t); };
  for (int32_t l = r.first_layer; l < r.last_layer; ++l) {
    for (int32_t t = r.first_token; t < r.last_token; ++t) {
      if (have_[at(l, t)]) return "KV chunk repeats layer " + std::to_string(l) + " token " + std::to_string(t);
    }
  }
  for (int32_t l = r.first_layer; l < r.last_layer; ++l) {
    for (int32_t t = r.first_token; t < r.last_token; ++t) have_[at(l, t)] = true;
  }
  missing_ -= static_cast<int64_t>(r.last_layer - r.first_layer) * (r.last_token - r.first_token);
  return std::nullopt;
}

}  // namespace actorlm
