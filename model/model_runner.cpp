#include "model/model_runner.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/sampler.hpp"
#include "model/draft_model.hpp"
#include "model/host_executor.hpp"

namespace actorlm {

ModelRunner::ModelRunner(LlamaWeights weights, std::unique_ptr<Backend> backend, const ModelRunnerConfig& config)
    : ModelRunner(std::make_unique<HostExecutor>(std::move(weights), std::move(backend)), config) {}

ModelRunner::ModelRunner(std::unique_ptr<ModelExecutor> executor, const ModelRunnerConfig& config)
    : executor_(std::move(executor)), config_(config) {
  const ModelConfig& c = executor_->config();
  max_context_ = config.max_context > 0 ? std::min(config.max_context, c.max_context) : c.max_context;
  if (config.kv_pool_rows < 2 || config.max_requests < 1) {
    throw std::invalid_argument("ModelRunner: kv_pool_rows must be >= 2 and max_requests >= 1");
  }
  req_to_token_.assign(static_cast<size_t>(config.max_requests) * static_cast<size_t>(max_context_), 0);
  executor_->allocate(config.kv_pool_rows, config.max_requests, max_context_);
}

ModelRunner::~ModelRunner() = default;

int64_t ModelRunner::kv_bytes() const { return executor_->kv_bytes(); }

int64_t ModelRunner::draft_kv_bytes() const { return draft_ ? draft_->runner().kv_bytes() : 0; }

void ModelRunner::attach_draft(std::unique_ptr<DraftModel> draft) {
  ModelRunner& d = draft->runner();
  auto fail = [](const std::string& why) { throw std::invalid_argument("draft model: " + why); };
  if (d.model_config().vocab_size != model_config().vocab_size) {
    fail("its vocabulary has " + std::to_string(d.model_config().vocab_size) + " tokens, the target's " +
         std::to_string(model_config().vocab_size));
  }
  if (d.max_context_ != max_context_) {
    fail("its context is " + std::to_string(d.max_context_) + " tokens, the target's " + std::to_string(max_context_) +
         " (pass a shorter --context-length)");
  }
  if (d.config_.kv_pool_rows != config_.kv_pool_rows || d.config_.max_requests != config_.max_requests) {
    fail("its KV pool must have the target's rows and request slots");
  }
  draft_ = std::move(draft);
}

int32_t ModelRunner::table_row(const ForwardBatch& b, int32_t slot, int32_t pos) const {
  for (auto w = b.writes.rbegin(); w != b.writes.rend(); ++w) {
    if (w->slot == slot && pos >= w->start && pos < w->start + static_cast<int32_t>(w->kv.size()))
      return w->kv[static_cast<size_t>(pos - w->start)];
  }
  return req_to_token_[static_cast<size_t>(slot) * static_cast<size_t>(max_context_) + static_cast<size_t>(pos)];
}

std::vector<SampleResult> ModelRunner::step(ForwardBatch batch, std::vector<SampleRequest> sampling) {
  DraftModel::Proposal proposal;
  if (draft_) {
    validate(batch, true);
    proposal = draft_->propose(batch, sampling);
  } else if (std::any_of(batch.reqs.begin(), batch.reqs.end(), [](const ForwardRequest& r) { return r.model_drafts > 0; })) {
    throw std::invalid_argument("invalid forward batch: it asks for model drafts and this worker has no draft model");
  }
  std::vector<SampleResult> results = sample(forward(batch), sampling);
  for (size_t i = 0; i < proposal.row_drafts.size() && i < results.size(); ++i) results[i].draft = proposal.row_drafts[i];
  return results;
}

void ModelRunner::write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv) {
  if (slot < 0 || slot >= config_.max_requests || start < 0 ||
      static_cast<int64_t>(start) + static_cast<int64_t>(kv.size()) > max_context_) {
    throw std::invalid_argument("req_to_token write out of range: slot " + std::to_string(slot) +
                                " positions [" + std::to_string(start) + ", " +
                                std::to_string(start + static_cast<int64_t>(kv.size())) + ")");
  }
  for (int32_t r : kv) {
    if (r < 0 || r >= config_.kv_pool_rows) {
      throw std::invalid_argument("req_to_token write names KV row " + std::to_string(r) + " outside the pool");
    }
  }
  std::copy(kv.begin(), kv.end(), req_to_token_.begin() + static_cast<int64_t>(slot) * max_context_ + start);
  executor_->write_req_to_token(slot, start, kv);
}

size_t ModelRunner::kv_copy_bytes(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) const {
  if (first_layer < 0 || last_layer > executor_->config().n_layers || first_layer >= last_layer) {
    throw std::invalid_argument("KV copy: layers [" + std::to_string(first_layer) + ", " + std::to_string(last_layer) +
                                ") outside the model's " + std::to_string(executor_->config().n_layers));
  }
  for (int32_t r : rows) {
    if (r < 0 || r >= config_.kv_pool_rows) throw std::invalid_argument("KV copy: row " + std::to_string(r) + " outside the pool");
  }
  if (executor_->kv_token_bytes() <= 0) throw std::logic_error("this executor cannot copy KV rows");
  return rows.size() * static_cast<size_t>(last_layer - first_layer) * static_cast<size_t>(executor_->kv_token_bytes());
}

std::vector<uint8_t> ModelRunner::read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) const {
  std::vector<uint8_t> out(kv_copy_bytes(rows, first_layer, last_layer));
  executor_->read_kv(rows, first_layer, last_layer, out);
  return out;
}

bool ModelRunner::kv_spans(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                           std::vector<std::span<uint8_t>>& out) {
  kv_copy_bytes(rows, first_layer, last_layer);
  return executor_->kv_spans(rows, first_layer, last_layer, out);
}

void ModelRunner::write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                           std::span<const uint8_t> bytes) {
  const size_t want = kv_copy_bytes(rows, first_layer, last_layer);
  if (bytes.size() != want) {
    throw std::invalid_argument("KV copy: " + std::to_string(bytes.size()) + " bytes for " + std::to_string(rows.size()) +
                                " rows of " + std::to_string(last_layer - first_layer) + " layers, which hold " +
                                std::to_string(want));
  }
  executor_->write_kv(rows, first_layer, last_layer, bytes);
}

void ModelRunner::add_adapter(int32_t id, const LoraAdapter& adapter) {
  if (id <= 0 || has_adapter(id)) {
    throw std::invalid_argument("LoRA adapter id " + std::to_string(id) + " is in use or not positive");
  }
  executor_->add_adapter(id, adapter);
}

void ModelRunner::drop_adapter(int32_t id) {
  if (!has_adapter(id)) throw std::invalid_argument("no LoRA adapter " + std::to_string(id) + " is loaded");
  executor_->drop_adapter(id);
}

bool ModelRunner::has_adapter(int32_t id) const { return executor_->has_adapter(id); }

int64_t ModelRunner::adapter_bytes() const { return executor_->adapter_bytes(); }

void ModelRunner::validate(const ForwardBatch& b, bool drafts_pending) const {
  auto fail = [](const std::string& why) { throw std::invalid_argument("invalid forward batch: " + why); };
  if (b.reqs.empty()) fail("no requests");
  int64_t total = 0;
  for (const auto& r : b.reqs) {
    if (r.slot < 0 || r.slot >= config_.max_requests) fail("slot " + std::to_string(r.slot) + " out of range");
    if (r.extend_len < 1 || r.prefix_len < 0) fail("extend_len must be >= 1 and prefix_len >= 0");
    if (static_cast<int64_t>(r.prefix_len) + r.extend_len > max_context_) {
      fail("request in slot " + std::to_string(r.slot) + " exceeds the context length " + std::to_string(max_context_));
    }
    total += r.extend_len;
  }
  if (static_cast<int64_t>(b.token_ids.size()) != total) fail("token_ids has " + std::to_string(b.token_ids.size()) + " entries, extend lengths sum to " + std::to_string(total));
  if (b.out_cache_loc.size() != b.token_ids.size()) fail("out_cache_loc and token_ids differ in length");
  for (int32_t r : b.out_cache_loc) {
    if (r < 0 || r >= config_.kv_pool_rows) fail("out_cache_loc row " + std::to_string(r) + " outside the pool");
  }
  const int32_t vocab = executor_->config().vocab_size;
  size_t at = 0;
  for (const auto& r : b.reqs) {
    // A model draft is a placeholder until the draft model proposes it.
    const auto known = static_cast<size_t>(r.extend_len - (drafts_pending ? std::max(r.model_drafts, 0) : 0));
    for (size_t j = 0; j < known; ++j) {
      const int32_t t = b.token_ids[at + j];
      if (t < 0 || t >= vocab) fail("token id " + std::to_string(t) + " outside the vocabulary");
    }
    at += static_cast<size_t>(r.extend_len);
  }
  for (const auto& r : b.reqs) {
    if (r.logit_rows < 1 || r.logit_rows > r.extend_len) fail("logit_rows must be in [1, extend_len]");
    if (r.model_drafts < 0 || (r.model_drafts > 0 && (r.model_drafts != r.logit_rows - 1 || r.extend_len != r.logit_rows))) {
      fail("model_drafts must be 0, or logit_rows - 1 of a request whose every token is sampled");
    }
    if (r.draft_prev_token < -1 || r.draft_prev_token >= vocab || (r.draft_prev_token >= 0 && r.prefix_len < 1)) {
      fail("draft_prev_token must be -1 or a token of the vocabulary at a position after the first");
    }
    if (r.logit_rows > 1 && (r.prompt_logprobs || b.all_logits)) fail("logit_rows above 1 cannot be combined with prompt scoring");
    if (r.adapter != 0 && !has_adapter(r.adapter)) fail("no LoRA adapter " + std::to_string(r.adapter) + " is loaded");
    if (!std::isfinite(r.adapter_scale)) fail("adapter_scale must be a finite number");
    if (!r.stacked_adapters.empty() && r.adapter == 0) fail("stacked adapters need a first adapter");
    for (const auto& [id, scale] : r.stacked_adapters) {
      if (!has_adapter(id)) fail("no LoRA adapter " + std::to_string(id) + " is loaded");
      if (!std::isfinite(scale)) fail("a stacked adapter's scale must be a finite number");
    }
    if (!r.prompt_logprobs) continue;
    if (r.prompt_top_n < 0 || r.prompt_top_n > 20) fail("prompt_top_n must be in [0, 20]");
    if (r.next_token < -1 || r.next_token >= vocab) fail("next_token " + std::to_string(r.next_token) + " outside the vocabulary");
  }
  for (const auto& w : b.writes) {
    if (w.slot < 0 || w.slot >= config_.max_requests || w.start < 0 ||
        static_cast<int64_t>(w.start) + static_cast<int64_t>(w.kv.size()) > max_context_) {
      fail("req_to_token write out of range");
    }
    for (int32_t r : w.kv) {
      if (r < 0 || r >= config_.kv_pool_rows) fail("req_to_token write names a row outside the pool");
    }
  }
  // Each new token's row in req_to_token (as the writes will leave it) must
  // be where this pass stores its K/V, or attention would read stale rows.
  size_t t = 0;
  for (const auto& r : b.reqs) {
    for (int32_t j = 0; j < r.extend_len; ++j, ++t) {
      if (table_row(b, r.slot, r.prefix_len + j) != b.out_cache_loc[t]) {
        fail("req_to_token of slot " + std::to_string(r.slot) + " does not point at out_cache_loc for position " +
             std::to_string(r.prefix_len + j));
      }
    }
  }
}

std::vector<SampleResult> ModelRunner::sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) {
  if (reqs.size() != out.rows()) {
    throw std::invalid_argument("sample: " + std::to_string(reqs.size()) + " requests for " +
                                std::to_string(out.rows()) + " logits rows");
  }
  std::vector<SampleResult> results;
  if (out.sample_on_host) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      const SampleRequest& q = reqs[i];
      results.push_back(sample_token({out.row(i), static_cast<size_t>(out.vocab)}, q.params, q.prompt, q.output, q.step,
                                     q.top_n, q.allowed));
    }
  } else {
    results = executor_->sample(out, reqs);
  }
  for (size_t i = 0; i < out.prompt.size() && i < results.size(); ++i) results[i].prompt = out.prompt[i];
  return results;
}

ForwardOutput ModelRunner::forward(const ForwardBatch& b) {
  // The step ends for its readers however this returns, a refused batch
  // included: nobody waits on it forever.
  struct Ticking {
    KvLayerClock* clock;
    uint64_t step;
    ~Ticking() {
      if (clock) clock->end(step);
    }
  } ticking{b.step != 0 ? clock_.get() : nullptr, b.step};
  if (ticking.clock) ticking.clock->begin(b.step);
  validate(b);
  // The mirror only: the executor applies b.writes to its own table.
  for (const auto& w : b.writes) {
    std::copy(w.kv.begin(), w.kv.end(), req_to_token_.begin() + static_cast<int64_t>(w.slot) * max_context_ + w.start);
  }
  const ModelConfig& c = executor_->config();
  const bool want_rows = executor_->wants_kv_indices();

  StepPlan step;
  AttentionPlan& plan = step.attention;
  plan.n_heads = c.n_heads;
  plan.n_kv_heads = c.n_kv_heads;
  plan.head_dim = c.head_dim;
  plan.scale = c.score_scale();
  plan.kv_indptr.push_back(0);
  int32_t q_start = 0;
  int64_t kv_total = 0;
  const bool scoring = std::any_of(b.reqs.begin(), b.reqs.end(), [](const ForwardRequest& r) { return r.prompt_logprobs; });
  step.host_logits = b.all_logits || scoring;
  for (const auto& r : b.reqs) {
    step.slots.push_back(r.slot);
    plan.q_start.push_back(q_start);
    plan.q_len.push_back(r.extend_len);
    plan.prefix_len.push_back(r.prefix_len);
    kv_total += r.prefix_len + r.extend_len;
    if (want_rows) {
      const int32_t* row = req_to_token_.data() + static_cast<int64_t>(r.slot) * max_context_;
      plan.kv_indices.insert(plan.kv_indices.end(), row, row + r.prefix_len + r.extend_len);
    }
    plan.kv_indptr.push_back(static_cast<int32_t>(kv_total));
    const bool every_row = b.all_logits || r.prompt_logprobs;
    const auto logit_begin = static_cast<int32_t>(step.logit_rows.size());
    for (int32_t j = 0; j < r.extend_len; ++j) {
      step.positions.push_back(r.prefix_len + j);
      if (every_row) step.logit_rows.push_back(q_start + j);
    }
    if (!every_row) {
      for (int32_t j = r.extend_len - r.logit_rows; j < r.extend_len; ++j) step.logit_rows.push_back(q_start + j);
    }
    if (r.adapter != 0) {
      const auto logit_count = static_cast<int32_t>(step.logit_rows.size()) - logit_begin;
      // Neighbours with the same first adapter at the same scale run as one
      // segment (not after one with stacked adapters: its last is a later pass).
      if (!step.lora.empty() && step.lora.back().pass == 0 && step.lora.back().adapter == r.adapter &&
          step.lora.back().scale == r.adapter_scale && step.lora.back().row_begin + step.lora.back().rows == q_start) {
        step.lora.back().rows += r.extend_len;
        step.lora.back().logit_count += logit_count;
      } else {
        step.lora.push_back({r.adapter, q_start, r.extend_len, logit_begin, logit_count, r.adapter_scale});
      }
      for (size_t k = 0; k < r.stacked_adapters.size(); ++k) {
        const auto [id, scale] = r.stacked_adapters[k];
        step.lora.push_back({id, q_start, r.extend_len, logit_begin, logit_count, scale, static_cast<int32_t>(k + 1)});
      }
    }
    q_start += r.extend_len;
  }
  // A pass with stacked adapters stores a layer's KV more than once (its
  // later passes); its readers wait for the end.
  const bool one_pass = std::none_of(step.lora.begin(), step.lora.end(), [](const LoraRows& r) { return r.pass > 0; });
  if (one_pass) step.clock = ticking.clock;
  ForwardOutput out = executor_->forward(b, step);
  // Every layer is stored: its readers need not wait for the scoring.
  if (ticking.clock) ticking.clock->end(b.step);
  ticking.clock = nullptr;
  if (scoring) score_prompts(b, out);
  return out;
}

// Scores the prompt rows of the requests that asked, then keeps one row per
// request (its last) unless the batch wants every row.
void ModelRunner::score_prompts(const ForwardBatch& b, ForwardOutput& out) const {
  const auto V = static_cast<size_t>(out.vocab);
  // A device executor also holds its own copy of every row; it can no
  // longer sample from it (its rows are not one per request).
  const bool device_copy = out.device_rows > 0;
  // Indexed by sampled row (ForwardOutput::prompt), which is the request's
  // index unless a verifying request comes before it.
  out.prompt.resize(b.sampled_rows());
  std::vector<float> kept;
  size_t row = 0, t = 0, sampled_row = 0;
  for (size_t i = 0; i < b.reqs.size(); ++i) {
    const ForwardRequest& r = b.reqs[i];
    const auto n = static_cast<size_t>(r.extend_len);
    if (r.prompt_logprobs) {
      for (size_t j = 0; j < n; ++j) {
        const int32_t next = j + 1 < n ? b.token_ids[t + j + 1] : r.next_token;
        if (next < 0) break;
        out.prompt[sampled_row].push_back(score_token({out.row(row + j), V}, next, r.prompt_top_n));
      }
    }
    sampled_row += static_cast<size_t>(r.logit_rows);
    // The rows it is sampled from: its last, or a verifying request's last
    // logit_rows (then it has no others).
    const size_t rows = r.prompt_logprobs || b.all_logits ? n : static_cast<size_t>(r.logit_rows);
    const size_t sampled = r.prompt_logprobs || b.all_logits ? 1 : rows;
    if (!b.all_logits) kept.insert(kept.end(), out.row(row + rows - sampled), out.row(row + rows));
    row += rows;
    t += n;
  }
  if (!b.all_logits) {
    out.logits = std::move(kept);
    if (device_copy) out.device_rows = b.sampled_rows();
  }
  out.sample_on_host = device_copy;
}

}  // namespace actorlm
