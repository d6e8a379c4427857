#include "model/draft_model.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/model_runner.hpp"

namespace actorlm {

DraftModel::DraftModel(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {
  if (!runner_) throw std::invalid_argument("draft model: no runner");
}

DraftModel::~DraftModel() = default;

namespace {

// The draft model's greedy pick from each logits row of `out`.
std::vector<int32_t> greedy(ModelRunner& runner, const ForwardOutput& out, size_t rows) {
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<SampleRequest> reqs(rows, SampleRequest{params, {}, {}, 0, 0, {}});
  std::vector<int32_t> picks;
  for (const SampleResult& s : runner.sample(out, reqs)) picks.push_back(s.token);
  return picks;
}

}  // namespace

DraftModel::Proposal DraftModel::propose(ForwardBatch& batch, std::vector<SampleRequest>& sampling) {
  const size_t n = batch.reqs.size();
  std::vector<size_t> at(n);  // each request's first token in batch.token_ids
  for (size_t i = 0, t = 0; i < n; t += static_cast<size_t>(batch.reqs[i].extend_len), ++i) at[i] = t;
  if (sampling.size() != batch.sampled_rows()) {
    throw std::invalid_argument("draft model: " + std::to_string(sampling.size()) + " sampling rows for " +
                                std::to_string(batch.sampled_rows()));
  }

  // A write below the end of a slot's tokens behind changes the rows they
  // belong to (the slot has a new request, or was cut back): they are not
  // that request's any more.
  for (const ReqToTokenWrite& w : batch.writes) {
    const auto b = behind_.find(w.slot);
    if (b != behind_.end() && w.start < b->second.from + static_cast<int32_t>(b->second.tokens.size())) {
      behind_.erase(b);
    }
  }

  // First pass: every token the target knows this step, so the draft's KV
  // follows the target's row for row; a decoding request's previous token
  // again (its KV may be a draft the model proposed but never ran); the
  // logits of each request's last known token propose its first draft. A
  // plain decode (no drafts) is left out and its tokens kept behind, to run
  // before the request's next drafts (or a prefill of its slot's next
  // request drops them: its drafts are then worse, never wrong).
  ForwardBatch first;
  first.writes = batch.writes;
  std::vector<size_t> ran;  // the requests of the first pass, by index
  for (size_t i = 0; i < n; ++i) {
    const ForwardRequest& r = batch.reqs[i];
    const int32_t known = r.extend_len - r.model_drafts;
    int32_t start = r.prefix_len;
    std::vector<int32_t> tokens;
    if (r.draft_prev_token >= 0) {
      start -= 1;
      tokens.push_back(r.draft_prev_token);
    }
    tokens.insert(tokens.end(), batch.token_ids.begin() + static_cast<ptrdiff_t>(at[i]),
                  batch.token_ids.begin() + static_cast<ptrdiff_t>(at[i] + static_cast<size_t>(known)));
    // The tokens behind that this step's first position follows or
    // overlaps (the previous token is sent again each step): those before
    // `start`. None when they do not reach it.
    auto b = behind_.find(r.slot);
    const auto joins = [&](const Behind& x) {
      return x.from <= start && start <= x.from + static_cast<int32_t>(x.tokens.size());
    };
    if (r.model_drafts == 0 && known == 1 && r.logit_rows == 1 && !r.prompt_logprobs) {
      if (b == behind_.end() || !joins(b->second)) b = behind_.insert_or_assign(r.slot, Behind{start, {}}).first;
      b->second.tokens.resize(static_cast<size_t>(start - b->second.from));
      b->second.tokens.insert(b->second.tokens.end(), tokens.begin(), tokens.end());
      // A request that never drafts (a constrained one) is not followed
      // for ever: past this it starts again, its earlier tokens dropped.
      constexpr size_t kMostBehind = 4096;
      if (b->second.tokens.size() > kMostBehind) behind_.erase(b);
      continue;
    }
    if (b != behind_.end()) {
      if (known == 1 && joins(b->second)) {
        tokens.insert(tokens.begin(), b->second.tokens.begin(),
                      b->second.tokens.begin() + static_cast<ptrdiff_t>(start - b->second.from));
        start = b->second.from;
      }
      behind_.erase(b);
    }
    ForwardRequest f;
    f.slot = r.slot;
    f.prefix_len = start;
    f.extend_len = static_cast<int32_t>(tokens.size());
    for (int32_t pos = start; pos < r.prefix_len; ++pos) first.out_cache_loc.push_back(runner_->table_row(batch, r.slot, pos));
    first.out_cache_loc.insert(first.out_cache_loc.end(), batch.out_cache_loc.begin() + static_cast<ptrdiff_t>(at[i]),
                               batch.out_cache_loc.begin() + static_cast<ptrdiff_t>(at[i] + static_cast<size_t>(known)));
    first.token_ids.insert(first.token_ids.end(), tokens.begin(), tokens.end());
    first.reqs.push_back(f);
    ran.push_back(i);
  }
  ForwardOutput out;
  if (!first.reqs.empty()) {
    out = runner_->forward(first);
  } else {
    for (const ReqToTokenWrite& w : batch.writes) runner_->write_req_to_token(w.slot, w.start, w.kv);
  }

  Proposal p;
  p.row_drafts.assign(sampling.size(), -1);
  int32_t longest = 0;
  for (const auto& r : batch.reqs) longest = std::max(longest, r.model_drafts);
  if (longest == 0) return p;

  // drafts[i]: request i's proposals so far.
  std::vector<std::vector<int32_t>> drafts(n);
  const std::vector<int32_t> firsts = greedy(*runner_, out, ran.size());
  for (size_t k = 0; k < ran.size(); ++k) {
    if (batch.reqs[ran[k]].model_drafts > 0) drafts[ran[k]].push_back(firsts[k]);
  }
  // Then one position at a time: each drafting request's newest draft in,
  // its next out. The rows are the ones the target's pass writes them to.
  for (int32_t k = 1; k < longest; ++k) {
    ForwardBatch next;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      const ForwardRequest& r = batch.reqs[i];
      if (r.model_drafts <= k) continue;
      ForwardRequest f;
      f.slot = r.slot;
      f.prefix_len = r.prefix_len + k;
      f.extend_len = 1;
      next.reqs.push_back(f);
      next.token_ids.push_back(drafts[i].back());
      next.out_cache_loc.push_back(batch.out_cache_loc[at[i] + static_cast<size_t>(k)]);
      who.push_back(i);
    }
    const std::vector<int32_t> picks = greedy(*runner_, runner_->forward(next), who.size());
    for (size_t w = 0; w < who.size(); ++w) drafts[who[w]].push_back(picks[w]);
  }

  // Into the target's batch, and into the sampling rows' outputs: row j of
  // a verify samples what follows the last token and drafts 1..j.
  size_t rows_before = 0;
  size_t rebound = 0;
  for (const auto& r : batch.reqs) rebound += static_cast<size_t>(std::max(r.model_drafts, 0));
  p.outputs.reserve(rebound);
  for (size_t i = 0; i < n; ++i) {
    const ForwardRequest& r = batch.reqs[i];
    const auto m = static_cast<size_t>(r.model_drafts);
    for (size_t j = 0; j < m; ++j) {
      batch.token_ids[at[i] + 1 + j] = drafts[i][j];
      p.row_drafts[rows_before + j] = drafts[i][j];
    }
    for (size_t j = 1; j <= m; ++j) {
      SampleRequest& row = sampling[rows_before + j];
      std::vector<int32_t>& o = p.outputs.emplace_back(sampling[rows_before].output.begin(), sampling[rows_before].output.end());
      o.insert(o.end(), drafts[i].begin(), drafts[i].begin() + static_cast<ptrdiff_t>(j));
      row.output = o;
    }
    rows_before += static_cast<size_t>(r.logit_rows);
  }
  return p;
}

}  // namespace actorlm
