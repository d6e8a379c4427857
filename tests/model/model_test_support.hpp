#pragma once
// Shared by the model tests: one runner on the default model (loading takes
// a few hundred ms, so tests in a binary share it) and helpers to run a
// request through it with contiguous or scattered KV rows.

#include <memory>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/model_runner.hpp"

namespace actorlm::test {

inline ModelRunner& default_runner() {
  static ModelRunner runner(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(0),
                            {.kv_pool_rows = 4096, .max_requests = 8, .max_context = 1024});
  return runner;
}

inline int32_t argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// One request's pass: tokens at positions [prefix, prefix + tokens.size())
// whose KV rows are rows[prefix...]; rows[0, prefix) must already hold KV.
inline ForwardOutput run_request(ModelRunner& r, int32_t slot, const std::vector<int32_t>& rows, int32_t prefix,
                                 const std::vector<int32_t>& tokens, bool all_logits = false) {
  ForwardBatch b;
  auto n = static_cast<int32_t>(tokens.size());
  b.reqs.push_back({slot, prefix, n});
  b.token_ids = tokens;
  b.out_cache_loc.assign(rows.begin() + prefix, rows.begin() + prefix + n);
  b.writes.push_back({slot, 0, std::vector<int32_t>(rows.begin(), rows.begin() + prefix + n)});
  b.all_logits = all_logits;
  return r.forward(b);
}

// Greedy continuation of prompt, n tokens, KV in rows 1, 2, 3, ...
inline std::vector<int32_t> greedy(ModelRunner& r, const std::vector<int32_t>& prompt, int n, int32_t slot = 0) {
  std::vector<int32_t> rows(prompt.size() + static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 1);
  std::vector<int32_t> out;
  auto logits = run_request(r, slot, rows, 0, prompt);
  auto pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    int32_t t = argmax(logits.row(0), logits.vocab);
    out.push_back(t);
    if (i + 1 == n) break;
    logits = run_request(r, slot, rows, pos++, {t});
  }
  return out;
}

}  // namespace actorlm::test
