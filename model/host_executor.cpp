#include "model/host_executor.hpp"

#include <cstring>
#include <functional>
#include <map>
#include <mutex>

namespace actorlm {

namespace {

// One PreparedWeights per mapped file while any runner over it is alive
// (the map holds neither: a file, or its packed copies, go with their last
// runner). owner_less compares control blocks, so a file mapped after
// another one went, at the same address, is a new key.
struct Registry {
  std::mutex mutex;
  std::map<std::weak_ptr<const MappedFile>, std::weak_ptr<PreparedWeights>, std::owner_less<>> by_file;
};

Registry& registry() {
  static Registry r;
  return r;
}

void each_matrix(const LlamaWeights& w, const std::function<void(const WeightMatrix&)>& f) {
  auto visit = [&](const WeightMatrix& m) {
    if (!m.empty()) f(m);
  };
  visit(w.token_embedding);
  visit(w.lm_head);
  for (const LayerWeights& L : w.layers) {
    for (const WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router}) visit(*m);
    for (const LayerWeights::Expert& e : L.experts) {
      visit(e.gate);
      visit(e.up);
      visit(e.down);
    }
  }
}

// The prepared copies this runner shares with the others over its file,
// keeping every matrix's bytes, so that each is packed once whichever
// runner comes first; null (nothing to share) for weights that are not a
// mapped file.
std::shared_ptr<PreparedWeights> shared_preparation(const LlamaWeights& w) {
  if (!w.file) return nullptr;
  std::shared_ptr<PreparedWeights> shared;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    std::erase_if(r.by_file, [](const auto& e) { return e.first.expired() || e.second.expired(); });
    std::weak_ptr<PreparedWeights>& slot = r.by_file[w.file];
    shared = slot.lock();
    if (!shared) slot = shared = std::make_shared<PreparedWeights>();
  }
  each_matrix(w, [&](const WeightMatrix& m) { shared->keep(m.bytes); });
  return shared;
}

}  // namespace

std::shared_ptr<PreparedWeights> prepared_weights_of(const LlamaWeights& w) {
  if (!w.file) return nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_file.find(w.file);
  return it == r.by_file.end() ? nullptr : it->second.lock();
}

HostExecutor::HostExecutor(LlamaWeights weights, std::unique_ptr<Backend> backend, bool f16_kv)
    : backend_(std::move(backend)),
      weights_(std::move(weights)),
      ops_(*backend_, shared_preparation(weights_)),
      model_(weights_, ops_),
      f16_kv_(f16_kv) {}

void HostExecutor::allocate(int64_t kv_pool_rows, int32_t, int32_t) {
  const ModelConfig& c = model_.config();
  pool_rows_ = kv_pool_rows;
  auto per_layer = static_cast<size_t>(kv_pool_rows) * static_cast<size_t>(c.kv_dim());
  const size_t total = per_layer * static_cast<size_t>(c.n_layers);
  if (f16_kv_) {
    k16_.assign(total, 0);
    v16_.assign(total, 0);
  } else {
    k_cache_.assign(total, 0.0f);
    v_cache_.assign(total, 0.0f);
  }
}

int64_t HostExecutor::kv_token_bytes() const {
  return 2 * model_.config().kv_dim() * static_cast<int64_t>(f16_kv_ ? sizeof(uint16_t) : sizeof(float));
}

int64_t HostExecutor::row_at(int32_t layer, int32_t row) const {
  return (static_cast<int64_t>(layer) * pool_rows_ + row) * model_.config().kv_dim();
}

namespace {

// Calls f(first row, count) for each run of consecutive rows. A prompt's
// rows mostly come from the allocator in order, and one copy of a run moves
// several times the bytes per second of a copy per row (a row is a few
// hundred bytes: 768 on the default model).
template <class F>
void for_each_run(std::span<const int32_t> rows, F&& f) {
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    f(rows[i], j - i);
    i = j;
  }
}

}  // namespace

void HostExecutor::read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                           std::span<uint8_t> out) const {
  const auto half = static_cast<size_t>(kv_token_bytes() / 2);
  uint8_t* dst = out.data();
  auto copy = [&](const auto& k, const auto& v) {
    for (int32_t l = first_layer; l < last_layer; ++l) {
      for (const auto* pool : {&k, &v}) {
        for_each_run(rows, [&](int32_t first, size_t n) {
          std::memcpy(dst, pool->data() + row_at(l, first), half * n);
          dst += half * n;
        });
      }
    }
  };
  f16_kv_ ? copy(k16_, v16_) : copy(k_cache_, v_cache_);
}

void HostExecutor::write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                            std::span<const uint8_t> in) {
  const auto half = static_cast<size_t>(kv_token_bytes() / 2);
  const uint8_t* src = in.data();
  auto copy = [&](auto& k, auto& v) {
    for (int32_t l = first_layer; l < last_layer; ++l) {
      for (auto* pool : {&k, &v}) {
        for_each_run(rows, [&](int32_t first, size_t n) {
          std::memcpy(pool->data() + row_at(l, first), src, half * n);
          src += half * n;
        });
      }
    }
  };
  f16_kv_ ? copy(k16_, v16_) : copy(k_cache_, v_cache_);
}

bool HostExecutor::kv_spans(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                            std::vector<std::span<uint8_t>>& out) {
  const auto half = static_cast<size_t>(kv_token_bytes() / 2);
  out.clear();
  auto point = [&](auto& k, auto& v) {
    for (int32_t l = first_layer; l < last_layer; ++l) {
      for (auto* pool : {&k, &v}) {
        for_each_run(rows, [&](int32_t first, size_t n) {
          out.emplace_back(reinterpret_cast<uint8_t*>(pool->data() + row_at(l, first)), half * n);
        });
      }
    }
  };
  f16_kv_ ? point(k16_, v16_) : point(k_cache_, v_cache_);
  return true;
}

int64_t HostExecutor::kv_bytes() const {
  return static_cast<int64_t>((k_cache_.size() + v_cache_.size()) * sizeof(float) +
                              (k16_.size() + v16_.size()) * sizeof(uint16_t));
}

ForwardOutput HostExecutor::forward(const ForwardBatch& b, const StepPlan& plan) {
  const ModelConfig& c = model_.config();
  std::vector<KvLayerView> views;
  auto per_layer = pool_rows_ * c.kv_dim();
  for (int32_t l = 0; l < c.n_layers; ++l) {
    KvLayerView view{nullptr, nullptr, pool_rows_, c.n_kv_heads, c.head_dim};
    if (f16_kv_) {
      view.k16 = k16_.data() + l * per_layer;
      view.v16 = v16_.data() + l * per_layer;
    } else {
      view.k = k_cache_.data() + l * per_layer;
      view.v = v_cache_.data() + l * per_layer;
    }
    views.push_back(view);
  }
  ops_.begin_pass();
  const Tensor logits =
      model_.forward({b.token_ids, plan.positions, b.out_cache_loc, plan.logit_rows, views, &plan.attention, plan.lora, plan.clock});
  ForwardOutput out;
  out.vocab = c.vocab_size;
  out.logits = ops_.take(logits);
  return out;
}

std::vector<SampleResult> HostExecutor::sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) {
  return backend_->sample(out.logits.data(), out.vocab, reqs);
}

}  // namespace actorlm
