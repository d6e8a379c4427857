#include "actors/forward_codec.hpp"

#include <algorithm>

#include "messages/sampling_conversion.hpp"
#include "scheduler/request.hpp"

namespace actorlm {

std::optional<DecodedForward> decode_forward(std::span<const uint8_t> bytes, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<DecodedForward> {
    if (error) *error = why;
    return std::nullopt;
  };
  auto opened = msg::open<fb::ForwardBatch>(bytes);
  if (!opened) return fail(opened.error);
  const fb::ForwardBatch* m = opened.message;
  DecodedForward d;
  d.batch_id = m->batch_id();
  if (!m->reqs() || m->reqs()->size() == 0) return fail("forward batch has no requests");
  auto n = m->reqs()->size();
  d.params.reserve(n);
  auto copy = [](const flatbuffers::Vector<int32_t>* v) {
    return v ? std::vector<int32_t>(v->begin(), v->end()) : std::vector<int32_t>{};
  };
  d.batch.token_ids = copy(m->token_ids());
  // Per request: its params; per sampled row: its output so far, its mask,
  // its id and whether it is sampled.
  size_t rows = 0, tokens = 0;
  for (const fb::ForwardReq* r : *m->reqs()) {
    if (r->prompt_logprobs() && (r->prompt_top_n() < 0 || r->prompt_top_n() > 20)) return fail("prompt_top_n must be in [0, 20]");
    if (r->extend_len() < 1) return fail("extend_len must be at least 1");
    if (r->logit_rows() < 1 || r->logit_rows() > r->extend_len()) return fail("logit_rows must be in [1, extend_len]");
    if (r->logit_rows() > 1 && r->prompt_logprobs()) return fail("logit_rows above 1 cannot be combined with prompt scoring");
    d.batch.reqs.push_back({r->slot(), r->prefix_len(), r->extend_len(), r->prompt_logprobs(), r->prompt_top_n(),
                            r->next_token(), r->logit_rows(), r->model_drafts(), r->draft_prev_token(), r->adapter(),
                            r->adapter_scale()});
    const auto* stacked = r->stacked_adapters();
    const auto* scales = r->stacked_scales();
    const size_t n_stacked = stacked ? stacked->size() : 0;
    if (n_stacked != (scales ? scales->size() : 0) || n_stacked > kMaxStackedAdapters) {
      return fail("stacked_adapters and stacked_scales must be of one length, at most " +
                  std::to_string(kMaxStackedAdapters));
    }
    for (size_t k = 0; k < n_stacked; ++k) d.batch.reqs.back().stacked_adapters.emplace_back(stacked->Get(k), scales->Get(k));
    SamplingParams p = msg::from_fb(r->sampling());
    if (auto err = p.validate()) return fail("request " + std::to_string(r->request_id()) + ": " + *err);
    if (r->top_logprobs() < 0 || r->top_logprobs() > 20) return fail("top_logprobs must be in [0, 20]");
    d.params.push_back(p);
    rows += static_cast<size_t>(r->logit_rows());
    tokens += static_cast<size_t>(r->extend_len());
  }
  // The runner checks the token count against the extend lengths; the rows
  // below read only tokens that exist.
  if (tokens != d.batch.token_ids.size()) return fail("token_ids and the extend lengths disagree");
  d.outputs.reserve(rows);
  d.allowed.reserve(rows);
  size_t at = 0;  // the request's first token in token_ids
  for (size_t i = 0; i < n; ++i) {
    const fb::ForwardReq* r = m->reqs()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const auto k = static_cast<size_t>(r->logit_rows());
    const size_t first = at + static_cast<size_t>(r->extend_len()) - k;  // the first sampled row's token
    std::vector<uint32_t> masks = r->allowed_tokens() ? std::vector<uint32_t>(r->allowed_tokens()->begin(), r->allowed_tokens()->end())
                                                      : std::vector<uint32_t>{};
    if (masks.size() % k != 0) return fail("allowed_tokens does not divide into logit_rows masks");
    const size_t words = masks.size() / k;
    for (size_t j = 0; j < k; ++j) {
      std::vector<int32_t> out = r->output_ids() ? std::vector<int32_t>(r->output_ids()->begin(), r->output_ids()->end())
                                                 : std::vector<int32_t>{};
      out.insert(out.end(), d.batch.token_ids.begin() + static_cast<ptrdiff_t>(first + 1),
                 d.batch.token_ids.begin() + static_cast<ptrdiff_t>(first + 1 + j));
      d.outputs.push_back(std::move(out));
      // Its length is checked against the vocabulary by the sampler.
      d.allowed.emplace_back(masks.begin() + static_cast<ptrdiff_t>(j * words),
                             masks.begin() + static_cast<ptrdiff_t>((j + 1) * words));
      d.request_ids.push_back(r->request_id());
      d.sample.push_back(r->sample());
      d.sampling.push_back({d.params[i], {}, d.outputs.back(), static_cast<uint64_t>(std::max(0, r->sample_step())) + j,
                            r->top_logprobs(), d.allowed.back()});
    }
    at += static_cast<size_t>(r->extend_len());
  }
  d.batch.out_cache_loc = copy(m->out_cache_loc());
  if (m->writes()) {
    for (const fb::ReqToTokenWrite* w : *m->writes()) d.batch.writes.push_back({w->slot(), w->start(), copy(w->kv_indices())});
  }
  d.batch.step = m->step();
  return d;
}

std::vector<uint8_t> encode_forward(uint64_t batch_id, const ForwardBatch& batch,
                                    const std::vector<uint64_t>& request_ids,
                                    const std::vector<SampleRequest>& sampling) {
  fb::ForwardBatchT m;
  m.batch_id = batch_id;
  size_t row = 0;  // sampling holds one entry per sampled row
  for (size_t i = 0; i < batch.reqs.size(); ++i) {
    const ForwardRequest& q = batch.reqs[i];
    const SampleRequest& s = sampling[row];
    auto r = std::make_unique<fb::ForwardReqT>();
    r->request_id = request_ids[i];
    r->slot = q.slot;
    r->prefix_len = q.prefix_len;
    r->extend_len = q.extend_len;
    r->sampling = msg::to_fb(s.params);
    r->sample_step = static_cast<int32_t>(s.step);
    r->output_ids.assign(s.output.begin(), s.output.end());
    r->top_logprobs = s.top_n;
    r->prompt_logprobs = q.prompt_logprobs;
    r->prompt_top_n = q.prompt_top_n;
    r->next_token = q.next_token;
    r->logit_rows = q.logit_rows;
    r->model_drafts = q.model_drafts;
    r->draft_prev_token = q.draft_prev_token;
    r->adapter = q.adapter;
    r->adapter_scale = q.adapter_scale;
    for (const auto& [id, scale] : q.stacked_adapters) {
      r->stacked_adapters.push_back(id);
      r->stacked_scales.push_back(scale);
    }
    // A verifying request's masks back to back; a row without one (any
    // token) gets a full mask of the same width.
    size_t words = 0;
    for (int32_t j = 0; j < q.logit_rows; ++j) words = std::max(words, sampling[row + static_cast<size_t>(j)].allowed.size());
    for (int32_t j = 0; words > 0 && j < q.logit_rows; ++j) {
      const auto& a = sampling[row + static_cast<size_t>(j)].allowed;
      if (a.empty()) {
        r->allowed_tokens.insert(r->allowed_tokens.end(), words, ~0u);
      } else {
        r->allowed_tokens.insert(r->allowed_tokens.end(), a.begin(), a.end());
      }
    }
    row += static_cast<size_t>(q.logit_rows);
    m.reqs.push_back(std::move(r));
  }
  m.token_ids = batch.token_ids;
  m.out_cache_loc = batch.out_cache_loc;
  for (const auto& w : batch.writes) {
    auto t = std::make_unique<fb::ReqToTokenWriteT>();
    t->slot = w.slot;
    t->start = w.start;
    t->kv_indices = w.kv;
    m.writes.push_back(std::move(t));
  }
  m.step = batch.step;
  return msg::pack(m);
}

std::vector<uint8_t> encode_result(uint64_t batch_id, const std::vector<uint64_t>& request_ids,
                                   const std::vector<SampleResult>& results, const std::vector<bool>& sampled,
                                   int64_t forward_us, const std::string& error) {
  fb::BatchResultT m;
  m.batch_id = batch_id;
  m.forward_us = forward_us;
  m.error = error;
  for (size_t i = 0; i < results.size(); ++i) {
    auto t = std::make_unique<fb::TokenResultT>();
    t->request_id = request_ids[i];
    t->next_token_id = i < sampled.size() && !sampled[i] ? -1 : results[i].token;
    t->logprob = results[i].logprob;
    t->draft = results[i].draft;
    for (auto [id, lp] : results[i].top) t->top_logprobs.emplace_back(id, lp);
    for (const SampleResult& p : results[i].prompt) {
      t->prompt.emplace_back(p.token, p.logprob);
      for (auto [id, lp] : p.top) t->prompt_top.emplace_back(id, lp);
      t->prompt_top_per_token = static_cast<int32_t>(p.top.size());
    }
    m.results.push_back(std::move(t));
  }
  return msg::pack(m);
}

std::optional<DecodedResult> decode_result(std::span<const uint8_t> bytes, std::string* error) {
  auto opened = msg::open<fb::BatchResult>(bytes);
  if (!opened) {
    if (error) *error = opened.error;
    return std::nullopt;
  }
  DecodedResult d;
  d.batch_id = opened.message->batch_id();
  if (opened.message->error()) d.error = opened.message->error()->str();
  if (opened.message->results()) {
    for (const fb::TokenResult* t : *opened.message->results()) {
      d.request_ids.push_back(t->request_id());
      SampleResult s;
      s.token = t->next_token_id();
      s.logprob = t->logprob();
      s.draft = t->draft();
      if (t->top_logprobs()) {
        for (const fb::TokenLogprob* lp : *t->top_logprobs()) s.top.emplace_back(lp->token_id(), lp->logprob());
      }
      if (t->prompt()) {
        const auto per = static_cast<size_t>(std::max(t->prompt_top_per_token(), 0));
        const size_t tops = t->prompt_top() ? t->prompt_top()->size() : 0;
        if (tops != per * t->prompt()->size()) {
          if (error) *error = "prompt_top holds " + std::to_string(tops) + " entries for " +
                              std::to_string(t->prompt()->size()) + " tokens of " + std::to_string(per);
          return std::nullopt;
        }
        for (uint32_t j = 0; j < t->prompt()->size(); ++j) {
          const fb::TokenLogprob* p = t->prompt()->Get(j);
          SampleResult& scored = s.prompt.emplace_back();
          scored.token = p->token_id();
          scored.logprob = p->logprob();
          for (size_t k = 0; k < per; ++k) {
            const fb::TokenLogprob* alt = t->prompt_top()->Get(static_cast<uint32_t>(j * per + k));
            scored.top.emplace_back(alt->token_id(), alt->logprob());
          }
        }
      }
      d.results.push_back(std::move(s));
    }
  }
  return d;
}

}  // namespace actorlm
