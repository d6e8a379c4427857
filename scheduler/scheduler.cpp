#include "scheduler/scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace actorlm {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
  }
  return "none";
}

Scheduler::Scheduler(const SchedulerConfig& config, KvService& kv, Worker& worker)
    : config_(config), kv_(kv), worker_(worker), budget_(StepBudgetConfig{.target_seconds = config.max_step_seconds}) {
  if (config_.speculative.active()) {
    if (auto why = config_.speculative.refusal()) throw std::invalid_argument("speculative decoding: " + *why);
    drafter_ = make_drafter(config_.speculative);
    if (config_.speculative.algorithm == SpeculativeAlgorithm::ngram && config_.speculative.ngram_capacity > 0) {
      // Contexts up to kTableContextExtra tokens longer than the request's
      // own lookup takes (draft_for: a long match there beats a short one
      // in the request's text).
      ngram_table_ = std::make_unique<NgramTable>(config_.speculative.ngram_min,
                                                  config_.speculative.ngram_max + kTableContextExtra,
                                                  config_.speculative.ngram_capacity);
    }
  }
  if (config_.tiers && config_.tiers->policy() == HiCacheWritePolicy::write_back) kv_.record_evictions(true);
  adapters_.insert(config_.adapters.begin(), config_.adapters.end());
  for (const auto& [id, lineage] : config_.adapter_lineages) {
    if (lineage != 0) adapter_lineages_[id] = lineage;
  }
}

void Scheduler::add_adapter(int32_t id, uint64_t lineage) {
  adapters_.insert(id);
  if (lineage != 0) adapter_lineages_[id] = lineage;
}

std::optional<uint64_t> Scheduler::tier_lineage(const Request& q) const {
  if (q.adapter == 0) return 0;
  if (!q.shares_kv()) return std::nullopt;
  auto it = adapter_lineages_.find(q.adapter);
  if (it == adapter_lineages_.end()) return std::nullopt;
  return it->second;
}

double Scheduler::now() const {
  if (config_.clock) return config_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Scheduler::extend(std::span<RequestKv* const> kvs, std::span<const std::vector<int32_t>> tokens) {
  const bool ok = kv_.extend(kvs, tokens);
  if (config_.tiers && config_.tiers->policy() == HiCacheWritePolicy::write_back) {
    // Even a refused extend may have evicted. The freed rows are only
    // written once the worker runs, after this copy.
    // An adapter's path goes down under its lineage, its keys back to
    // tokens (the tiers key lineages their own way); one with no lineage
    // (or its own scale: never cached) does not go.
    auto evicted = kv_.take_evicted();
    std::vector<RadixCache::EvictedPath> paths;
    std::vector<uint64_t> lineages;
    for (auto& p : evicted) {
      uint64_t lineage = 0;
      if (!p.tokens.empty() && adapter_key(p.tokens[0])) {
        auto it = adapter_lineages_.find(p.tokens[0] >> kAdapterKeyShift);
        if (it == adapter_lineages_.end()) continue;
        lineage = it->second;
        for (int32_t& t : p.tokens) t &= kAdapterVocabLimit - 1;
      }
      paths.push_back(std::move(p));
      lineages.push_back(lineage);
    }
    if (!paths.empty()) config_.tiers->after_eviction(worker_, paths, lineages);
  }
  return ok;
}

bool Scheduler::adapter_in_use(int32_t id) const {
  auto uses = [id](const Request& q) {
    return q.adapter == id || std::any_of(q.stacked.begin(), q.stacked.end(), [id](const auto& a) { return a.first == id; });
  };
  return std::any_of(waiting_.begin(), waiting_.end(), uses) ||
         std::any_of(running_.begin(), running_.end(), [&](const Running& r) { return uses(r.req); }) ||
         std::any_of(reserved_.begin(), reserved_.end(), [&](const Running& r) { return uses(r.req); }) ||
         std::any_of(held_.begin(), held_.end(), [&](const Running& r) { return uses(r.req); });
}

bool Scheduler::remove_adapter(int32_t id) {
  if (adapter_in_use(id)) return false;
  adapters_.erase(id);
  return true;
}

std::optional<std::string> Scheduler::refusal(const Request& r) const {
  if (r.prompt.empty()) return "the prompt is empty";
  if (static_cast<int64_t>(r.prompt.size()) >= config_.max_context) {
    return "the prompt has " + std::to_string(r.prompt.size()) + " tokens; the context holds " +
           std::to_string(config_.max_context) + " (prompt + output)";
  }
  if (r.stop.max_new_tokens < 1) return "max_new_tokens must be at least 1";
  if (r.stop.min_new_tokens < 0 || r.stop.min_new_tokens > r.stop.max_new_tokens) {
    return "min_new_tokens (" + std::to_string(r.stop.min_new_tokens) + ") must be in [0, max_new_tokens (" +
           std::to_string(r.stop.max_new_tokens) + ")]";
  }
  if (r.stop.min_new_tokens > 0 && config_.vocab_size <= 0) {
    return "min_new_tokens needs the model's vocabulary size, which this engine was not given";
  }
  if (r.stop.max_new_tokens_strict &&
      static_cast<int64_t>(r.prompt.size()) + r.stop.max_new_tokens > config_.max_context) {
    return "the completion length asked for (max_tokens / max_completion_tokens: " +
           std::to_string(r.stop.max_new_tokens) + ") is more than the " +
           std::to_string(config_.max_context - static_cast<int64_t>(r.prompt.size())) + " tokens the context of " +
           std::to_string(config_.max_context) + " leaves after the " + std::to_string(r.prompt.size()) +
           "-token prompt";
  }
  if (auto err = r.sampling.validate()) return *err;
  if (r.priority < -kMaxPriority || r.priority > kMaxPriority) {
    return "priority must be in [" + std::to_string(-kMaxPriority) + ", " + std::to_string(kMaxPriority) + "]";
  }
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
    return "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "]";
  }
  if (r.tenant < 0 || r.tenant > kMaxTenant) return "tenant must be in [0, " + std::to_string(kMaxTenant) + "]";
  if (!(r.tenant_weight >= 0 && r.tenant_weight <= kMaxTenantWeight)) {
    return "a tenant's weight must be in [0, " + std::to_string(static_cast<int>(kMaxTenantWeight)) + "]";
  }
  if (r.tenant_kv_quota < 0 || r.tenant_kv_quota > kMaxTenantKvTokens) {
    return "a tenant's KV quota must be in [0, " + std::to_string(kMaxTenantKvTokens) + "] tokens";
  }
  if (const int64_t quota = r.tenant_kv_quota > 0 ? r.tenant_kv_quota : config_.queue.kv_quota(r.tenant);
      quota > 0 && QueuePolicy::kv_claim(r) > quota) {
    return "the prompt" + std::string(r.output.empty() ? "" : " and the output to resume from") + " (" +
           std::to_string(r.prompt.size() + r.output.size()) + " tokens) leave no room in its tenant's KV quota of " +
           std::to_string(quota) + " tokens (max_kv_tokens) for a token more";
  }
  if (r.max_draft_tokens < -1 || r.max_draft_tokens > kMaxDraftTokens) {
    return "the most draft tokens per step (speculative.n_max) must be in [0, " + std::to_string(kMaxDraftTokens) +
           "]";
  }
  if (r.prediction.size() > static_cast<size_t>(kMaxPredictionTokens)) {
    return "the prediction has " + std::to_string(r.prediction.size()) + " tokens; at most " +
           std::to_string(kMaxPredictionTokens) + " are taken";
  }
  if (r.adapter != 0) {
    if (config_.vocab_size <= 0 || config_.vocab_size > kAdapterVocabLimit) {
      return "LoRA adapters need a vocabulary of at most " + std::to_string(kAdapterVocabLimit) + " tokens";
    }
    if (r.stacked.size() > kMaxStackedAdapters) {
      return "a request runs with at most " + std::to_string(kMaxStackedAdapters + 1) + " adapters";
    }
    std::vector<std::pair<int32_t, float>> all{{r.adapter, r.adapter_scale}};
    all.insert(all.end(), r.stacked.begin(), r.stacked.end());
    for (size_t i = 0; i < all.size(); ++i) {
      const auto [id, scale] = all[i];
      if (id <= 0 || id > kMaxAdapterId || adapters_.count(id) == 0) {
        return "no LoRA adapter with id " + std::to_string(id) + " is loaded";
      }
      if (!std::isfinite(scale) || scale == 0 || std::abs(scale) > kMaxAdapterScale) {
        char range[64];
        std::snprintf(range, sizeof range, "%g", static_cast<double>(kMaxAdapterScale));
        return std::string("an adapter's scale must be non-zero and within [-") + range + ", " + range + "]";
      }
      for (size_t j = 0; j < i; ++j) {
        if (all[j].first == id) return "adapter " + std::to_string(id) + " is named twice";
      }
    }
  } else if (r.adapter_scale != 1.0f || !r.stacked.empty()) {
    return "an adapter scale or further adapters need an adapter";
  }
  if (config_.vocab_size > 0) {
    const int32_t v = config_.vocab_size;
    auto outside = [v](int32_t t) { return t < 0 || t >= v; };
    if (auto t = std::find_if(r.prompt.begin(), r.prompt.end(), outside); t != r.prompt.end()) {
      return "the prompt holds token id " + std::to_string(*t) + ", outside the vocabulary of " + std::to_string(v);
    }
    for (const auto& [t, bias] : r.sampling.logit_bias) {
      if (outside(t)) return "logit_bias names token " + std::to_string(t) + ", outside the vocabulary of " + std::to_string(v);
    }
    if (auto t = std::find_if(r.output.begin(), r.output.end(), outside); t != r.output.end()) {
      return "the output to resume from holds token id " + std::to_string(*t) + ", outside the vocabulary of " +
             std::to_string(v);
    }
    // A draft is fed to the model like any token.
    if (auto t = std::find_if(r.prediction.begin(), r.prediction.end(), outside); t != r.prediction.end()) {
      return "the prediction holds token id " + std::to_string(*t) + ", outside the vocabulary of " + std::to_string(v);
    }
  }
  // A request resumed from another engine (failover) brings the tokens it
  // produced there; it must still have a token to produce.
  if (!r.output.empty()) {
    if (r.hold_after_prefill) return "a request resumed from its output cannot also be held for a KV transfer";
    if (static_cast<int32_t>(r.output.size()) >= r.stop.max_new_tokens ||
        static_cast<int64_t>(r.prompt.size() + r.output.size()) >= config_.max_context) {
      return "the output to resume from (" + std::to_string(r.output.size()) +
             " tokens) leaves nothing to generate within max_new_tokens and the context";
    }
  }
  auto same = [&](uint64_t id) { return id == r.id; };
  auto holds = [&](const std::deque<Running>& q) {
    return std::any_of(q.begin(), q.end(), [&](const Running& x) { return same(x.req.id); });
  };
  if (std::any_of(waiting_.begin(), waiting_.end(), [&](const Request& w) { return same(w.id); }) || holds(running_) ||
      holds(held_) || holds(reserved_)) {
    return "request id " + std::to_string(r.id) + " is already in use";
  }
  return std::nullopt;
}

std::optional<std::string> Scheduler::start_constraint(Request& r) const {
  if (!r.constraint_spec.active()) return std::nullopt;
  if (!config_.constraints) return "structured output is not available on this engine";
  try {
    r.constraint = config_.constraints->start(r.constraint_spec);
  } catch (const ConstraintError& e) {
    return std::string("the structured-output constraint does not compile: ") + e.what();
  }
  // A resumed request's constraint walks the output it already has, as the
  // engine that produced it did.
  for (size_t i = 0; i < r.output.size(); ++i) {
    if (r.constraint->complete() || !r.constraint->accept(r.output[i])) {
      return "the output to resume from does not fit the structured-output constraint at token " + std::to_string(i);
    }
  }
  if (!r.output.empty() && r.constraint->complete()) {
    return "the output to resume from already completes the structured-output constraint";
  }
  return std::nullopt;
}

std::optional<std::string> Scheduler::submit(Request r, ErrorKind* kind) {
  if (kind) *kind = ErrorKind::invalid_request;
  if (auto why = refusal(r)) return why;
  if (const int32_t limit = config_.queue.max_queued; limit > 0 && static_cast<int64_t>(waiting_.size()) >= limit) {
    ++stats_.queue_rejections;
    if (kind) *kind = ErrorKind::overloaded;
    return "the server's queue is full (" + std::to_string(limit) + " requests waiting, --max-queued-requests); retry later";
  }
  if (auto why = start_constraint(r)) return why;
  // A tenant's weight from the head of a cluster (this node has no tenants
  // file): into the table, every tenant it has not heard of at weight 1.
  if (r.tenant > 0 && r.tenant_weight > 0) {
    auto& w = config_.queue.tenant_weights;
    if (w.size() <= static_cast<size_t>(r.tenant)) w.resize(static_cast<size_t>(r.tenant) + 1, 1.0);
    w[static_cast<size_t>(r.tenant)] = r.tenant_weight;
  }
  if (r.tenant > 0 && r.tenant_kv_quota > 0) {
    auto& quotas = config_.queue.tenant_kv_quotas;
    if (quotas.size() <= static_cast<size_t>(r.tenant)) quotas.resize(static_cast<size_t>(r.tenant) + 1, 0);
    quotas[static_cast<size_t>(r.tenant)] = r.tenant_kv_quota;
  }
  r.arrival = next_arrival_++;
  r.queued_at = now();
  waiting_.push_back(std::move(r));
  return std::nullopt;
}

std::vector<const RequestKv*> Scheduler::running_kv() const {
  std::vector<const RequestKv*> kvs;
  for (const auto* q : {&running_, &held_, &reserved_}) {
    for (const auto& r : *q) kvs.push_back(&r.req.kv);
  }
  return kvs;
}

FinishReason Scheduler::stop_reason(const Request& q, bool constraint_done) const {
  const int32_t t = q.output.back();
  const bool eos = config_.eos_id && t == *config_.eos_id && !q.stop.ignore_eos;
  const bool stop_id = std::find(q.stop.stop_token_ids.begin(), q.stop.stop_token_ids.end(), t) != q.stop.stop_token_ids.end();
  if (eos || stop_id || constraint_done) return FinishReason::stop;
  if (static_cast<int32_t>(q.output.size()) >= q.stop.max_new_tokens ||
      static_cast<int64_t>(q.prompt.size() + q.output.size()) >= config_.max_context) {
    return FinishReason::length;
  }
  return FinishReason::none;
}

void Scheduler::hold_back_stops(const Request& q, std::vector<uint32_t>& mask) const {
  // A constraint's mask that allows only stop tokens is complete in all but
  // name: taking them away would leave the sampler nothing to pick, so it
  // stays as it was. A mask made here starts from the whole vocabulary.
  std::vector<uint32_t> constraint_mask;
  if (mask.empty()) {
    mask.assign(mask_words(config_.vocab_size), ~0u);
  } else {
    constraint_mask = mask;
  }
  auto clear = [&](int32_t t) {
    if (t >= 0 && static_cast<size_t>(t) / 32 < mask.size()) mask[static_cast<size_t>(t) / 32] &= ~(1u << (t % 32));
  };
  if (config_.eos_id && !q.stop.ignore_eos) clear(*config_.eos_id);
  for (int32_t t : q.stop.stop_token_ids) clear(t);
  if (!constraint_mask.empty() && std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; })) {
    mask = std::move(constraint_mask);
  }
}

const RequestKv* Scheduler::held(uint64_t id) const {
  auto h = std::find_if(held_.begin(), held_.end(), [&](const Running& r) { return r.req.id == id; });
  return h == held_.end() ? nullptr : &h->req.kv;
}

void Scheduler::release(uint64_t id) {
  auto h = std::find_if(held_.begin(), held_.end(), [&](const Running& r) { return r.req.id == id; });
  if (h == held_.end()) return;
  RequestKv* kv[] = {&h->req.kv};
  kv_.finish(kv);  // the prompt (and a migrated request's output) stays cached for later requests
  ++(h->frozen ? stats_.migrated_out : stats_.finished);
  held_.erase(h);
}

Scheduler::Reserved Scheduler::reserve(Request r) {
  Reserved out;
  if (auto why = refusal(r)) {
    out.error = *why;
    return out;
  }
  // A migrated request (one with output) brings its constraint's place; a
  // PD request's first token comes at activation, and its constraint state
  // would have to come with it.
  if (r.output.empty() && r.constraint_spec.active()) {
    out.error = "structured output cannot be combined with a KV transfer";
    return out;
  }
  if (r.adapter != 0) {
    out.error = "a request with a LoRA adapter cannot be combined with a KV transfer";
    return out;
  }
  if (auto why = start_constraint(r)) {
    out.error = *why;
    return out;
  }
  Running run;
  run.req = std::move(r);
  run.req.kv.priority = config_.queue.rank(run.req);
  RequestKv* kv[] = {&run.req.kv};
  // The tokens with KV: the prompt, and a migrated request's output but its
  // last token (fill minus one; admit matches all but the last token too).
  // The prefix this engine's cache holds stays (locked); the transfer writes
  // only the rows after it.
  const std::vector<int32_t> fill = run.req.fill_ids();
  if (kv_.admit(kv, std::span(&fill, 1)) == 0) {
    out.error = "no request slot is free";
    out.no_room = true;
    return out;
  }
  out.cached = run.req.kv.prefix_len;
  const size_t rows = run.req.output.empty() ? fill.size() : fill.size() - 1;
  const std::vector<int32_t> rest(fill.begin() + out.cached, fill.begin() + static_cast<ptrdiff_t>(rows));
  if (!extend(kv, std::span(&rest, 1))) {
    kv_.abort(kv);
    out.error = "the KV pool has no room for " + std::to_string(rest.size()) + " tokens now";
    out.no_room = true;
    return out;
  }
  out.rows = run.req.kv.kv;
  run.req.arrival = next_arrival_++;
  reserved_.push_back(std::move(run));
  return out;
}

bool Scheduler::activate(uint64_t id, int32_t first_token, float first_logprob, int32_t cached_tokens) {
  auto it = std::find_if(reserved_.begin(), reserved_.end(), [&](const Running& r) { return r.req.id == id; });
  if (it == reserved_.end()) return false;
  const bool migrated = !it->req.output.empty();
  if (migrated ? first_token != -1 : (first_token < 0 || (config_.vocab_size > 0 && first_token >= config_.vocab_size))) {
    return false;
  }
  Running r = std::move(*it);
  reserved_.erase(it);
  Request& q = r.req;
  RequestKv* kv[] = {&q.kv};
  r.decoding = true;
  r.table_synced = 0;
  r.prefilled = q.kv.kv.size();
  if (migrated) {
    // It goes on from its last token; its client has everything before it,
    // and its usage counts what the engine it started on found cached.
    q.cached_tokens = std::clamp<int32_t>(cached_tokens, 0, static_cast<int32_t>(q.prompt.size()));
    ++stats_.migrated_in;
    kv_.cache_unfinished(kv);
    running_.push_back(std::move(r));
    return true;
  }
  q.output = {first_token};
  q.cached_tokens = std::clamp<int32_t>(std::max(cached_tokens, q.kv.cached_on_admit), 0,
                                       static_cast<int32_t>(q.prompt.size()));
  stats_.prompt_tokens += static_cast<int64_t>(q.prompt.size());
  ++stats_.generated_tokens;
  TokenEvent e = event_for(q);
  e.token = q.output.front();
  e.logprob = first_logprob;
  e.finish = stop_reason(q, false);
  if (e.finish != FinishReason::none) {
    kv_.finish(kv);
    ++stats_.finished;
  } else {
    kv_.cache_unfinished(kv);  // its prompt becomes matchable here too
    running_.push_back(std::move(r));
  }
  pending_.push_back(std::move(e));
  return true;
}

void Scheduler::cancel_reserved(uint64_t id) {
  auto it = std::find_if(reserved_.begin(), reserved_.end(), [&](const Running& r) { return r.req.id == id; });
  if (it == reserved_.end()) return;
  RequestKv* kv[] = {&it->req.kv};
  kv_.abort(kv);
  reserved_.erase(it);
}

Scheduler::Frozen Scheduler::freeze(uint64_t id) {
  Frozen out;
  if (std::find(aborts_.begin(), aborts_.end(), id) != aborts_.end() ||
      std::find(stops_.begin(), stops_.end(), id) != stops_.end()) {
    return out;  // ending at the next step: nothing to move
  }
  if (auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Request& q) { return q.id == id; });
      w != waiting_.end()) {
    // Waiting requests hold nothing: it starts again elsewhere.
    out.state = Frozen::State::requeued;
    out.output_tokens = static_cast<int32_t>(w->output.size());
    waiting_.erase(w);
    return out;
  }
  auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.req.id == id; });
  if (it == running_.end()) return out;
  if (!it->decoding || it->loading) {
    out.state = Frozen::State::busy;
    return out;
  }
  out.state = Frozen::State::frozen;
  out.rows = it->req.kv.kv;
  out.output_tokens = static_cast<int32_t>(it->req.output.size());
  out.cached_tokens = it->req.cached_tokens;
  it->frozen = true;
  held_.push_back(std::move(*it));
  running_.erase(it);
  return out;
}

bool Scheduler::thaw(uint64_t id) {
  auto h = std::find_if(held_.begin(), held_.end(), [&](const Running& r) { return r.req.id == id && r.frozen; });
  if (h == held_.end()) return false;
  h->frozen = false;
  running_.push_back(std::move(*h));
  held_.erase(h);
  return true;
}

void Scheduler::abort(uint64_t id) { aborts_.push_back(id); }
void Scheduler::stop(uint64_t id) { stops_.push_back(id); }

TokenEvent Scheduler::event_for(const Request& r) const {
  TokenEvent e;
  e.id = r.id;
  e.prompt_tokens = static_cast<int32_t>(r.prompt.size());
  e.completion_tokens = static_cast<int32_t>(r.output.size());
  e.cached_tokens = r.cached_tokens;
  e.draft_tokens = r.draft_tokens;
  e.accepted_draft_tokens = r.accepted_draft_tokens;
  return e;
}

void Scheduler::finish(Running& r, FinishReason reason, std::vector<TokenEvent>& events, const std::string& error,
                       ErrorKind kind) {
  RequestKv* kv[] = {&r.req.kv};
  if (reason == FinishReason::abort || reason == FinishReason::error) {
    kv_.abort(kv);
    ++stats_.aborted;
  } else {
    Request* done[] = {&r.req};
    release_kv(done);
    ++stats_.finished;
    remember(r.req);
  }
  r.req.finish = reason;
  TokenEvent e = event_for(r.req);
  e.finish = reason;
  e.error = error;
  e.error_kind = kind;
  events.push_back(std::move(e));
}

void Scheduler::remember(const Request& q) {
  if (!ngram_table_ || q.output.empty()) return;
  // What it wrote, with the prompt's last words as the first contexts: a
  // long prompt's own n-grams would cost the scheduler's thread time in
  // proportion to the prompt, and drafts continue outputs.
  const size_t lead = std::min(q.prompt.size(), static_cast<size_t>(config_.speculative.ngram_max + kTableContextExtra));
  std::vector<int32_t> text(q.prompt.end() - static_cast<std::ptrdiff_t>(lead), q.prompt.end());
  text.insert(text.end(), q.output.begin(), q.output.end());
  ngram_table_->observe(text, table_space(q));
}

void Scheduler::apply_controls(std::vector<TokenEvent>& events) {
  auto apply = [&](const std::vector<uint64_t>& ids, FinishReason reason) {
    for (uint64_t id : ids) {
      auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Request& r) { return r.id == id; });
      if (w != waiting_.end()) {
        // Waiting requests hold nothing (retracted ones gave everything back).
        TokenEvent e = event_for(*w);
        e.finish = reason;
        events.push_back(std::move(e));
        waiting_.erase(w);
        if (reason == FinishReason::abort) ++stats_.aborted;
        continue;
      }
      for (auto* q : {&running_, &held_, &reserved_}) {
        auto r = std::find_if(q->begin(), q->end(), [&](const Running& x) { return x.req.id == id; });
        if (r == q->end()) continue;
        // A reserved request's rows hold nothing yet: never cache them.
        finish(*r, q == &reserved_ ? FinishReason::abort : reason, events);
        events.back().finish = reason;
        q->erase(r);
        break;
      }
    }
  };
  apply(aborts_, FinishReason::abort);
  apply(stops_, FinishReason::stop);
  aborts_.clear();
  stops_.clear();
}

// Which waiting requests to start and how much of each to prefill now.
std::vector<Scheduler::Planned> Scheduler::plan_prefill() {
  std::vector<Planned> plan;
  // With priorities, a request far more urgent (by the preemption
  // threshold) than prompts in progress or waiting has its prefill in a
  // step without them, beside the decodes: they go on a step later rather
  // than lengthen its time to first token. It may be waiting (when it can
  // be admitted now) or part way through its own chunked prefill.
  // After a failed step its requests are admitted one at a time (below).
  const bool suspects = std::any_of(waiting_.begin(), waiting_.end(), [](const Request& q) { return q.step_failures > 0; });
  const Request* urgent = nullptr;
  auto consider = [&](const Request& q) {
    if (!urgent || config_.queue.rank(q) > config_.queue.rank(*urgent)) urgent = &q;
  };
  const bool admits = !memory_short_ && static_cast<int64_t>(running_.size()) < config_.max_running_requests &&
                      !suspect_running() && !suspects;
  if (config_.queue.priorities) {
    for (const auto& r : running_) {
      if (!r.decoding && !r.frozen) consider(r.req);
    }
    if (admits) {
      for (const auto& w : waiting_) {
        if (!awaits_prefetch(w)) consider(w);
      }
    }
  }
  auto waits_for_urgent = [&](const Request& q) { return urgent && config_.queue.may_preempt(*urgent, q); };

  int64_t budget = config_.max_prefill_tokens;
  // Streams decoding ride along in this step (add_decodes), so their gap
  // between tokens is the step's prefill: one chunk in all, not one per
  // request, while any of them runs.
  // With an inter-token latency target, what fits in it at the measured
  // costs instead.
  const auto decoding = std::count_if(running_.begin(), running_.end(), [](const Running& r) { return r.decoding; });
  // Those limits are the streams' due; a prefill by the threshold more
  // urgent than every stream is not cut to keep them (its own chunk size
  // still applies). With no stream, the time budget holds for everyone.
  const bool outranks_streams =
      urgent && decoding > 0 && std::all_of(running_.begin(), running_.end(),
                            [&](const Running& r) { return !r.decoding || config_.queue.may_preempt(*urgent, r.req); });
  if (!outranks_streams) {
    const auto itl_fits = decoding > 0 ? budget_.prefill_tokens(decoding, config_.itl_target_seconds) : std::nullopt;
    if (itl_fits) {
      budget = std::min(budget, *itl_fits);
    } else if (config_.chunked_prefill_size > 0 && decoding > 0) {
      budget = std::min<int64_t>(budget, config_.chunked_prefill_size);
    }
    // The time budget: no more prompt tokens than fit beside the decode
    // rows in --max-step-ms at the measured cost. Chunks are cut smaller,
    // never differently computed, so outputs stay what they would be.
    if (auto fits = budget_.prefill_tokens(decoding)) budget = std::min(budget, *fits);
  }
  auto chunk_of = [&](size_t remaining) {
    size_t n = remaining;
    if (config_.chunked_prefill_size > 0) n = std::min(n, static_cast<size_t>(config_.chunked_prefill_size));
    return std::min<size_t>(n, static_cast<size_t>(std::max<int64_t>(budget, 0)));
  };

  // A request in the middle of a chunked prefill goes first (the more
  // urgent of them before the others); one still loading from the tiers
  // loads more, and computes once that is done.
  std::vector<Running*> in_progress;
  for (auto& r : running_) {
    if (!r.decoding && !waits_for_urgent(r.req)) in_progress.push_back(&r);
  }
  std::stable_sort(in_progress.begin(), in_progress.end(), [&](const Running* a, const Running* b) {
    return config_.queue.rank(a->req) > config_.queue.rank(b->req);
  });
  for (Running* rp : in_progress) {
    Running& r = *rp;
    if (r.loading) {
      load_from_tiers(r);
      if (r.loading) continue;
    }
    auto fill = r.req.fill_ids();
    size_t n = chunk_of(fill.size() - r.prefilled);
    if (n == 0) return plan;
    plan.push_back({&r, std::vector<int32_t>(fill.begin() + static_cast<ptrdiff_t>(r.prefilled),
                                             fill.begin() + static_cast<ptrdiff_t>(r.prefilled + n)),
                    r.prefilled + n == fill.size()});
    budget -= static_cast<int64_t>(n);
  }
  if (waiting_.empty() || budget <= 0 || memory_short_) return plan;
  size_t room = static_cast<size_t>(config_.max_running_requests) - std::min(running_.size(), static_cast<size_t>(config_.max_running_requests));
  if (room == 0) return plan;
  // After a failed step its requests are admitted one at a time, before
  // anything else, each alone until it has sampled a token.
  if (suspect_running()) return plan;
  if (suspects) {
    if (!plan.empty()) return plan;  // a chunk in progress finishes first
    room = 1;
  }

  // Order the queue: longest cached prefix first (lpm) or arrival (fcfs).
  std::vector<std::vector<int32_t>> fills;
  for (const auto& w : waiting_) fills.push_back(w.key_ids());
  std::vector<size_t> order(waiting_.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int32_t> cached(waiting_.size(), 0);
  if (config_.policy == SchedulePolicy::lpm) cached = kv_.match_lengths(fills);
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (waiting_[i].matches_nothing()) cached[i] = 0;  // (see below)
  }
  // Order the queue: priority first (when on), a request lpm has passed
  // over too often, then the longest cached prefix (lpm) or arrival.
  const bool lpm = config_.policy == SchedulePolicy::lpm;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return config_.queue.before(waiting_[a], cached[a], waiting_[b], cached[b], lpm);
  });
  if (config_.queue.fair_share()) {
    std::vector<const Request*> queue;
    for (const auto& w : waiting_) queue.push_back(&w);
    config_.queue.share(queue, places_by_tenant(), order);
  }
  std::vector<size_t> chosen;
  int64_t estimate = budget;
  std::vector<int64_t> claims = kv_claims();
  for (size_t i : order) {
    if (chosen.size() == room || estimate <= 0) break;
    if (suspects && waiting_[i].step_failures == 0) continue;
    if (awaits_prefetch(waiting_[i])) continue;
    if (waits_for_urgent(waiting_[i])) break;  // sorted by rank first: the rest are less urgent still
    // Its tenant's KV quota full: it waits, and other tenants' requests
    // go past it.
    if (!claim_kv(waiting_[i], claims)) continue;
    int64_t need = static_cast<int64_t>(fills[i].size()) - cached[i];
    if (config_.chunked_prefill_size == 0 && need > estimate && !chosen.empty()) break;
    chosen.push_back(i);
    estimate -= need;
  }
  if (chosen.empty()) return plan;

  // Admit (slot + match + lock) in one call; move the admitted to running.
  std::vector<RequestKv> kvs(chosen.size());
  std::vector<RequestKv*> kv_ptrs;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t k = 0; k < chosen.size(); ++k) {
    kvs[k].priority = config_.queue.rank(waiting_[chosen[k]]);
    kv_ptrs.push_back(&kvs[k]);
    // Scoring a prompt needs the logits at each of its positions: match
    // nothing, compute it all.
    prompts.push_back(waiting_[chosen[k]].matches_nothing() ? std::vector<int32_t>{} : fills[chosen[k]]);
  }
  size_t admitted = kv_.admit(kv_ptrs, prompts);
  std::vector<size_t> taken(chosen.begin(), chosen.begin() + static_cast<ptrdiff_t>(admitted));
  std::vector<std::pair<int64_t, int64_t>> went;  // the admitted's arrival and rank
  for (size_t i : taken) went.emplace_back(waiting_[i].arrival, config_.queue.rank(waiting_[i]));
  for (size_t k = 0; k < admitted; ++k) {
    Running r;
    r.req = std::move(waiting_[chosen[k]]);
    r.req.kv = std::move(kvs[k]);
    r.prefilled = static_cast<size_t>(r.req.kv.prefix_len);
    // A resumed request's match may run into its output: cached_tokens
    // counts prompt tokens.
    const int32_t cached = std::min(r.req.kv.prefix_len, static_cast<int32_t>(r.req.prompt.size()));
    if (r.req.retractions == 0) r.req.cached_tokens = cached;
    stats_.prompt_tokens += r.req.retractions == 0 ? static_cast<int64_t>(r.req.prompt.size()) : 0;
    stats_.cached_tokens += r.req.retractions == 0 ? cached : 0;
    running_.push_back(std::move(r));
    Running& back = running_.back();
    if (config_.tiers) {
      back.loading = true;
      load_from_tiers(back);
      if (back.loading) continue;  // more blocks next step; it computes after
    }
    auto fill = back.req.fill_ids();
    size_t n = chunk_of(fill.size() - back.prefilled);
    if (n == 0) continue;  // out of budget: it waits in running for the next step
    plan.push_back({&back, std::vector<int32_t>(fill.begin() + static_cast<ptrdiff_t>(back.prefilled),
                                                fill.begin() + static_cast<ptrdiff_t>(back.prefilled + n)),
                    back.prefilled + n == fill.size()});
    budget -= static_cast<int64_t>(n);
  }
  // Those left waiting count the later arrivals of their own rank that went
  // before them (the starvation bound).
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (std::find(taken.begin(), taken.end(), i) != taken.end()) continue;
    for (const auto& [arrival, rank] : went) {
      if (arrival > waiting_[i].arrival && rank == config_.queue.rank(waiting_[i])) ++waiting_[i].overtaken;
    }
  }
  std::sort(taken.rbegin(), taken.rend());
  for (size_t i : taken) waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
  // Pointers into running_ stay valid: deque::push_back keeps references.
  return plan;
}

int64_t Scheduler::load_budget() const {
  const bool streams = std::any_of(running_.begin(), running_.end(), [](const Running& r) { return r.decoding; });
  if (!streams) return std::numeric_limits<int64_t>::max();
  // Until a copy has been timed: one block this step (load_from_tiers takes
  // at least one whatever the budget).
  if (last_step_seconds_ <= 0 || load_seconds_per_byte_ <= 0) return 0;
  return static_cast<int64_t>(0.1 * last_step_seconds_ / load_seconds_per_byte_);
}

void Scheduler::load_from_tiers(Running& r) {
  KvTiers& tiers = *config_.tiers;
  Request& q = r.req;
  r.loading = false;
  const std::optional<uint64_t> lineage = tier_lineage(q);
  if (q.scores_prompt() || q.retractions > 0 || q.prompt.size() < 2 || !lineage) return;
  const auto b = static_cast<size_t>(tiers.block_tokens());
  // The last prompt token is always computed: its logits give the first token.
  const size_t limit = q.prompt.size() - 1;
  size_t at = r.prefilled;
  int64_t from_host = 0, from_disk = 0;
  bool more = false;  // stopped by the budget with blocks left
  while ((at / b + 1) * b <= limit) {
    // At least one block a step, so a load always ends.
    if (load_budget_ < tiers.layout().block_bytes() && (from_host + from_disk) > 0) {
      more = true;
      break;
    }
    const size_t block = at / b, first = at - block * b, count = b - first;
    auto got = tiers.load(q.prompt, static_cast<int32_t>(block), *lineage);
    if (!got) break;  // no tier has it (or the disk refused it, counted there): compute the rest
    // Keyed as the radix cache keys this request's KV (its adapter's id).
    std::vector<int32_t> tokens = kv_keys(std::span(q.prompt).subspan(at, count), q.adapter);
    RequestKv* kv[] = {&q.kv};
    if (!extend(kv, std::span(&tokens, 1))) break;  // no room now: compute it later instead
    const double started = now();
    const std::vector<uint8_t> bytes = kv_block_slice(got->data, tiers.layout(), first, count);
    worker_.write_kv(std::span(q.kv.kv).last(count), 0, tiers.layout().n_layers, bytes);
    const double per_byte = (now() - started) / static_cast<double>(std::max<size_t>(bytes.size(), 1));
    load_seconds_per_byte_ = load_seconds_per_byte_ > 0 ? 0.8 * load_seconds_per_byte_ + 0.2 * per_byte : per_byte;
    load_budget_ -= static_cast<int64_t>(bytes.size());
    (got->tier == KvTier::host ? from_host : from_disk) += static_cast<int64_t>(count);
    at += count;
  }
  r.loading = more;
  // Loaded what it will: what its read-ahead staged and it did not take is
  // let go.
  if (!more && q.prefetched) tiers.drop_prefetch(q.prompt, *lineage);
  if (at == r.prefilled) return;
  r.prefilled = at;
  q.cached_tokens = static_cast<int32_t>(at);
  stats_.cached_tokens += from_host + from_disk;
  stats_.host_hit_tokens += from_host;
  stats_.disk_hit_tokens += from_disk;
}

bool Scheduler::awaits_prefetch(const Request& q) const {
  if (!config_.tiers || !q.prefetched || config_.prefetch_policy == HiCachePrefetchPolicy::best_effort) return false;
  if (config_.prefetch_policy == HiCachePrefetchPolicy::timeout && now() - q.prefetch_at >= config_.prefetch_timeout_seconds) {
    return false;
  }
  const std::optional<uint64_t> lineage = tier_lineage(q);
  return lineage && config_.tiers->prefetching(q.prompt, *lineage);
}

void Scheduler::prefetch_waiting() {
  std::vector<Request*> fresh;
  std::vector<uint64_t> lineages;
  std::vector<std::vector<int32_t>> keys;
  const auto b = static_cast<size_t>(config_.tiers->block_tokens());
  for (auto& q : waiting_) {
    const std::optional<uint64_t> lineage = tier_lineage(q);
    if (q.prefetched || q.scores_prompt() || q.retractions > 0 || q.prompt.size() <= b || !lineage) continue;
    q.prefetched = true;
    q.prefetch_at = now();
    fresh.push_back(&q);
    lineages.push_back(*lineage);
    keys.push_back(kv_keys(q.prompt, q.adapter));
  }
  if (fresh.empty()) return;
  // From the block the pool's own cache ends in: what the pool holds
  // already is not read from disk.
  const std::vector<int32_t> cached = kv_.match_lengths(keys);
  for (size_t i = 0; i < fresh.size(); ++i) {
    const auto from = static_cast<int32_t>(static_cast<size_t>(i < cached.size() ? cached[i] : 0) / b);
    config_.tiers->prefetch(fresh[i]->prompt, from, lineages[i]);
  }
}

std::optional<size_t> Scheduler::retraction_victim(bool movable_only, const Request* spare) const {
  std::optional<size_t> victim;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Running& r = running_[i];
    if (movable_only && (r.frozen || r.loading || r.streamed > 0 || &r.req == spare)) continue;
    // One whose KV streams out goes last: it cannot go back, it fails (park).
    const bool streams = r.streamed > 0;
    if (!victim || (running_[*victim].streamed > 0 && !streams) ||
        ((running_[*victim].streamed > 0) == streams && config_.queue.goes_back_before(r.req, running_[*victim].req))) {
      victim = i;
    }
  }
  return victim;
}

void Scheduler::preempt_for_priority() {
  if (!config_.queue.priorities || running_.empty() || suspect_running()) return;
  // Who wants a place. The pool short: the most urgent admitted request
  // still waiting for rows to prefill into. The running limit reached: the
  // most urgent waiting request.
  const Request* urgent = nullptr;
  auto consider = [&](const Request& q) {
    if (!urgent || config_.queue.rank(q) > config_.queue.rank(*urgent)) urgent = &q;
  };
  if (memory_short_) {
    for (const auto& r : running_) {
      if (!r.decoding && !r.frozen && !r.loading) consider(r.req);
    }
  }
  if (!urgent && static_cast<int64_t>(running_.size()) >= config_.max_running_requests) {
    // Not one its tenant's KV quota holds back: a place freed for it
    // would go to nobody.
    const std::vector<int64_t> claims = kv_claims();
    for (const auto& w : waiting_) {
      if (fits_kv_quota(w, claims)) consider(w);
    }
  }
  if (!urgent) return;
  // The least urgent running request that is free to go back.
  const std::optional<size_t> victim = retraction_victim(true, urgent);
  if (!victim || !config_.queue.may_preempt(*urgent, running_[*victim].req)) return;
  // One a step. Its place goes to the most urgent waiting request in this
  // step's admission; its rows (cached, unlocked) to the prefill that wanted
  // them, as admission stays shut while memory is short.
  retract(*victim);
  ++stats_.preemptions;
}

std::vector<int64_t> Scheduler::places_by_tenant() const {
  const size_t tenants = config_.queue.tenant_weights.size();
  std::vector<int64_t> held(tenants + 1, 0);
  for (const auto& r : running_) {
    const int32_t t = r.req.tenant;
    ++held[t >= 0 && static_cast<size_t>(t) < tenants ? static_cast<size_t>(t) : tenants];
  }
  return held;
}

void Scheduler::preempt_for_share() {
  const QueuePolicy& q = config_.queue;
  if (!q.share_preemption || !q.fair_share() || waiting_.empty() || suspect_running() ||
      static_cast<int64_t>(running_.size()) < config_.max_running_requests) {
    return;
  }
  // The request the queue admits next, as plan_prefill orders it (the
  // prefix match aside, which does not move places between tenants).
  std::vector<const Request*> queue;
  for (const auto& w : waiting_) queue.push_back(&w);
  std::vector<size_t> order(queue.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return q.before(*queue[a], 0, *queue[b], 0, false); });
  std::vector<const Request*> running;
  std::vector<bool> movable;
  for (const auto& r : running_) {
    running.push_back(&r.req);
    movable.push_back(!r.frozen && !r.loading && r.streamed == 0);
  }
  q.share(queue, places_by_tenant(), order);
  if (!fits_kv_quota(*queue[order.front()], kv_claims())) return;  // its own quota holds it back
  const std::optional<size_t> victim = q.share_victim(*queue[order.front()], running, movable);
  if (!victim) return;
  retract(*victim);
  ++stats_.share_preemptions;
}

std::vector<int64_t> Scheduler::kv_claims() const {
  const size_t tenants = config_.queue.tenant_kv_quotas.size();
  std::vector<int64_t> claims(tenants, 0);
  for (const auto& r : running_) {
    const int32_t t = r.req.tenant;
    if (t >= 0 && static_cast<size_t>(t) < tenants) claims[static_cast<size_t>(t)] += QueuePolicy::kv_claim(r.req);
  }
  return claims;
}

bool Scheduler::fits_kv_quota(const Request& q, const std::vector<int64_t>& claims) const {
  const int64_t quota = config_.queue.kv_quota(q.tenant);
  if (quota <= 0) return true;
  const int64_t held = claims[static_cast<size_t>(q.tenant)];
  return held == 0 || QueuePolicy::kv_claim(q) <= quota - held;
}

bool Scheduler::claim_kv(const Request& q, std::vector<int64_t>& claims) const {
  const int64_t quota = config_.queue.kv_quota(q.tenant);
  if (quota <= 0) return true;
  int64_t& held = claims[static_cast<size_t>(q.tenant)];
  // One that does not fit holds back its tenant's later ones too: a
  // tenant's requests start in the queue's order, so a small newcomer never
  // keeps a retracted one (its client part way through) waiting.
  held = fits_kv_quota(q, claims) ? held + QueuePolicy::kv_claim(q) : std::numeric_limits<int64_t>::max();
  return held != std::numeric_limits<int64_t>::max();
}

void Scheduler::keep_kv_quotas(std::vector<TokenEvent>& events) {
  const QueuePolicy& policy = config_.queue;
  if (policy.tenant_kv_quotas.empty()) return;
  std::vector<bool> stuck(policy.tenant_kv_quotas.size(), false);
  for (;;) {
    // A tenant whose running requests claim more than its quota: each
    // decode grew them by a token (drafts never take them past it:
    // add_drafts).
    const std::vector<int64_t> claims = kv_claims();
    size_t t = 0;
    while (t < claims.size() && (stuck[t] || policy.tenant_kv_quotas[t] <= 0 || claims[t] <= policy.tenant_kv_quotas[t])) ++t;
    if (t == claims.size()) return;
    const int64_t quota = policy.tenant_kv_quotas[t];
    // Its least urgent, newest request free to go back, as under a short pool.
    std::optional<size_t> victim;
    size_t mine = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      const Running& r = running_[i];
      if (static_cast<size_t>(r.req.tenant) != t || r.req.tenant < 0) continue;
      ++mine;
      if (r.frozen || r.loading || r.streamed > 0) continue;
      if (!victim || policy.goes_back_before(r.req, running_[*victim].req)) victim = i;
    }
    if (!victim) {
      stuck[t] = true;  // nothing of it may move now: it waits for its requests to end
      continue;
    }
    Running& r = running_[*victim];
    if (mine > 1 && QueuePolicy::kv_claim(r.req) <= quota) {
      // Back to wait, its output kept: it goes on when the tenant's other
      // requests have made room.
      retract(*victim);
      ++stats_.kv_quota_retractions;
      continue;
    }
    // It could not run again within the quota even alone: the quota bounds
    // its length as the context does.
    if (r.decoding) {
      finish(r, FinishReason::length, events);
    } else {
      finish(r, FinishReason::error, events,
             "its " + std::to_string(r.req.prompt.size() + r.req.output.size()) +
                 " tokens leave no room in its tenant's KV quota of " + std::to_string(quota) + " tokens",
             ErrorKind::invalid_request);
    }
    running_.erase(running_.begin() + static_cast<ptrdiff_t>(*victim));
    ++stats_.kv_quota_finishes;
  }
}

void Scheduler::expire_waiting(std::vector<TokenEvent>& events) {
  const double limit = config_.queue.timeout_seconds;
  if (limit <= 0 || waiting_.empty()) return;
  const double t = now();
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    // A retracted request has run (its client may have tokens): it waits on.
    if (w->retractions > 0 || t - w->queued_at < limit) {
      ++w;
      continue;
    }
    TokenEvent e = event_for(*w);
    e.finish = FinishReason::error;
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", t - w->queued_at);
    e.error = std::string("the request waited ") + waited + " s in the queue, past the server's --queue-timeout; retry later";
    e.error_kind = ErrorKind::timeout;
    events.push_back(std::move(e));
    ++stats_.queue_timeouts;
    ++stats_.aborted;
    w = waiting_.erase(w);
  }
}

void Scheduler::release_kv(std::span<Request* const> reqs) {
  std::vector<RequestKv*> shared, own;
  for (Request* q : reqs) (q->shares_kv() ? shared : own).push_back(&q->kv);
  if (!shared.empty()) kv_.finish(shared);
  if (!own.empty()) kv_.abort(own);  // its own KV: nobody else can use it
}

void Scheduler::park(size_t index, TokenEvent e) {
  held_.push_back(std::move(running_[index]));
  running_.erase(running_.begin() + static_cast<ptrdiff_t>(index));
  pending_.push_back(std::move(e));
}

TokenEvent Scheduler::streaming_failed(const Request& q, const std::string& why) const {
  TokenEvent e = event_for(q);
  e.finish = FinishReason::error;
  e.error = why + " while its KV streamed to the decode node; try it again";
  e.error_kind = ErrorKind::unavailable;
  return e;
}

void Scheduler::retract(size_t index) {
  if (running_[index].streamed > 0) {
    return park(index, streaming_failed(running_[index].req, "it was preempted"));
  }
  Running r = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<ptrdiff_t>(index));
  Request* back[] = {&r.req};
  release_kv(back);  // its KV stays in the radix cache for a cheap re-prefill
  r.req.kv = RequestKv{};
  ++r.req.retractions;
  ++stats_.retractions;
  if (r.req.scores_prompt()) r.req.prompt_scores.clear();  // scored again from the start
  waiting_.push_front(std::move(r.req));
}

std::vector<Scheduler::Planned> Scheduler::plan_decode(std::vector<TokenEvent>& events) {
  for (;;) {
    std::vector<Planned> plan = decodes();
    if (plan.empty() || extend(plan)) return plan;
    // Drafts never cost a request its place: without them first.
    if (drop_drafts(plan) && extend(plan)) return plan;
    // Short of KV rows: send the newest request back to wait. Alone, the
    // pool cannot hold it at all.
    if (running_.size() == 1) {
      finish(running_.front(), FinishReason::error, events, "the KV pool is too small for this request",
             ErrorKind::invalid_request);
      running_.clear();
      return {};
    }
    retract(*retraction_victim());
  }
}

std::vector<Scheduler::Planned> Scheduler::decodes() {
  std::vector<Planned> plan;
  for (auto& r : running_) {
    if (r.decoding) plan.push_back({&r, {r.req.output.back()}, true});
  }
  const bool predicted = std::any_of(plan.begin(), plan.end(), [](const Planned& p) { return !p.run->req.prediction.empty(); });
  if (drafter_ || predicted) add_drafts(plan);
  return plan;
}

void Scheduler::add_drafts(std::vector<Planned>& plan) {
  // What each request could draft, then how much of it this step's rows
  // are worth (DraftCost), then the constraint's masks for what stays.
  std::vector<std::vector<int32_t>> drafts;
  std::vector<int32_t> available;
  std::vector<double> rate;
  const double prior = engine_pace_.rate(0.5);
  for (auto& p : plan) {
    drafts.push_back(draft_for(*p.run));
    available.push_back(static_cast<int32_t>(drafts.back().size()));
    rate.push_back(p.run->pace.rate(prior));
  }
  const std::vector<int32_t> keep = draft_cost_.allot(available, rate, static_cast<int64_t>(plan.size()));
  // Accepted drafts are output: no more of them than the tenant's KV quota
  // has room for beside what its requests claim already.
  std::vector<int64_t> room = kv_claims();
  for (size_t t = 0; t < room.size(); ++t) room[t] = config_.queue.tenant_kv_quotas[t] - room[t];
  for (size_t i = 0; i < plan.size(); ++i) {
    int64_t n = keep[i];
    const int32_t t = plan[i].run->req.tenant;
    const bool quota = config_.queue.kv_quota(t) > 0;
    if (quota) {
      n = std::clamp<int64_t>(room[static_cast<size_t>(t)], 0, n);
      room[static_cast<size_t>(t)] -= n;
    }
    drafts[i].resize(static_cast<size_t>(n));
    if (!drafts[i].empty()) take_drafts(*plan[i].run, plan[i], std::move(drafts[i]));
  }
}

std::vector<int32_t> Scheduler::draft_for(Running& r) {
  Request& q = r.req;
  r.table_drafted = false;
  const int32_t limit = q.max_draft_tokens < 0 ? config_.speculative.num_draft_tokens
                                               : std::min(q.max_draft_tokens, config_.speculative.num_draft_tokens);
  if (limit <= 0) return {};
  const bool by_model = config_.speculative.algorithm == SpeculativeAlgorithm::draft;
  // The draft model proposes in the worker, after the scheduler has sent
  // each row's mask: a constrained request's rows could not be masked
  // over drafts nobody knows yet, so it decodes plainly.
  if (by_model && q.constraint) return {};
  if (!r.pace.started()) r.pace = DraftPace(limit);
  // Never past max_new_tokens (a verify yields up to drafts + 1 tokens) or
  // the context (the KV after this step covers fill_ids ++ drafts).
  const auto fill = static_cast<int64_t>(q.prompt.size() + q.output.size());
  const int64_t room = std::min<int64_t>(q.stop.max_new_tokens - static_cast<int64_t>(q.output.size()) - 1,
                                         config_.max_context - fill);
  if (room <= 0) return {};
  const int32_t want = std::min<int32_t>(r.pace.want(), static_cast<int32_t>(room));
  if (want <= 0) return {};
  // A prediction's start or its match of the longest tail (the caller's
  // word on what comes), then the engine's drafter, then the prediction's
  // shorter matches: a short match there is no better evidence than one in
  // the request's own text. A draft model's proposals are made in the
  // worker, so its requests cannot take a prediction's instead.
  const int32_t own_longest = config_.speculative.ngram_max;
  const bool predicted = !by_model && !q.prediction.empty();
  if (predicted) {
    auto d = prediction_lookup_.draft(q.prediction, q.prompt, q.output, want, r.prediction_at,
                                      drafter_ ? own_longest : 0);
    if (!d.empty() || !drafter_) return d;
  }
  if (!drafter_) return {};
  // What other requests wrote after the same words, where more of them
  // match than the request's own text can (a question asked again, a
  // template's fixed phrases); then its own text; then the table's shorter
  // matches.
  if (ngram_table_) {
    auto d = ngram_table_->draft(q.prompt, q.output, want, own_longest + 1, table_space(q));
    if (!d.empty()) {
      r.table_drafted = true;
      return d;
    }
  }
  auto d = drafter_->draft(q.prompt, q.output, want);
  if (d.empty() && predicted) d = prediction_lookup_.draft(q.prediction, q.prompt, q.output, want, r.prediction_at);
  if (d.empty() && ngram_table_) {
    d = ngram_table_->draft(q.prompt, q.output, want, 0, table_space(q));
    r.table_drafted = !d.empty();
  }
  return d;
}

void Scheduler::take_drafts(Running& r, Planned& p, std::vector<int32_t> drafts) {
  Request& q = r.req;
  if (q.constraint) {
    // Each row's mask is the constraint after the drafts before it; a
    // draft the constraint refuses ends the draft there. The state is
    // walked back, so the tokens kept after verification advance it as
    // any sampled token does.
    const size_t words = mask_words(config_.constraints->vocab_size());
    int accepted = 0;
    for (size_t j = 0;; ++j) {
      // A draft that completes the output (its stop token) would be the
      // request's last token: it goes, so no row follows a finished output
      // (a finished constraint has no mask to give).
      if (j > 0 && q.constraint->complete()) {
        drafts.resize(j - 1);
        break;
      }
      std::vector<uint32_t>& mask = p.row_masks.emplace_back(words);
      q.constraint->allowed(mask);
      if (j == drafts.size()) break;
      if (!mask_allows(mask, drafts[j]) || !q.constraint->accept(drafts[j])) {
        drafts.resize(j);
        break;
      }
      ++accepted;
    }
    q.constraint->rollback(accepted);
    p.row_masks.resize(drafts.size() + 1);
    if (drafts.empty()) {
      p.row_masks.clear();
      return;
    }
  }
  p.tokens.insert(p.tokens.end(), drafts.begin(), drafts.end());
  p.drafts = std::move(drafts);
}

bool Scheduler::drop_drafts(std::vector<Planned>& plan) {
  bool any = false;
  for (auto& p : plan) {
    if (p.drafts.empty()) continue;
    any = true;
    p.tokens.resize(1);
    p.drafts.clear();
    p.row_masks.clear();
  }
  return any;
}

bool Scheduler::extend(const std::vector<Planned>& plan) {
  std::vector<RequestKv*> kvs;
  std::vector<std::vector<int32_t>> toks;
  for (const auto& p : plan) {
    kvs.push_back(&p.run->req.kv);
    toks.push_back(kv_keys(p.tokens, p.run->req.adapter));
  }
  return extend(kvs, toks);
}

void Scheduler::add_decodes(std::vector<Planned>& plan) {
  std::vector<Planned> more = decodes();
  // Short of rows: they wait for a decode step, which retracts if it must.
  if (more.empty()) return;
  if (!extend(more) && !(drop_drafts(more) && extend(more))) return;
  plan.insert(plan.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

void Scheduler::forget_kv(const std::string& why, std::vector<TokenEvent>& events) {
  ++stats_.worker_resets;
  for (auto* q : {&held_, &reserved_}) {
    for (auto& r : *q) {
      RequestKv* kv[] = {&r.req.kv};
      kv_.abort(kv);
      TokenEvent e = event_for(r.req);
      e.finish = FinishReason::error;
      e.error = "its KV was lost with the worker (" + why + ")";
      e.error_kind = ErrorKind::unavailable;
      events.push_back(std::move(e));
      ++stats_.aborted;
    }
    q->clear();
  }
  // A request whose KV was streaming has nothing left to send.
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->streamed == 0) {
      ++it;
      continue;
    }
    RequestKv* kv[] = {&it->req.kv};
    kv_.abort(kv);
    events.push_back(streaming_failed(it->req, "its KV was lost with the worker (" + why + ")"));
    ++stats_.aborted;
    it = running_.erase(it);
  }
  // Back to the queue in their order of arrival, ahead of what waited:
  // as a retraction, but no row of theirs may enter the cache.
  std::stable_sort(running_.begin(), running_.end(),
                   [](const Running& a, const Running& b) { return a.req.arrival < b.req.arrival; });
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    Request q = std::move(it->req);
    RequestKv* kv[] = {&q.kv};
    kv_.abort(kv);
    q.kv = RequestKv{};
    ++q.retractions;
    if (q.scores_prompt()) q.prompt_scores.clear();
    waiting_.push_front(std::move(q));
    ++stats_.reset_requests;
  }
  running_.clear();
  kv_.flush_cache();
  memory_short_ = false;
}

std::vector<TokenEvent> Scheduler::fail_all(const std::string& error, ErrorKind kind) {
  std::vector<TokenEvent> events;
  for (auto& r : held_) running_.push_back(std::move(r));
  for (auto& r : reserved_) running_.push_back(std::move(r));
  held_.clear();
  reserved_.clear();
  pending_.clear();
  for (auto& r : running_) {
    try {
      RequestKv* kv[] = {&r.req.kv};
      kv_.abort(kv);
    } catch (const std::exception&) {
      // The KV service itself is failing; the request still gets its answer.
    }
    TokenEvent e = event_for(r.req);
    e.finish = FinishReason::error;
    e.error = error;
    e.error_kind = kind;
    events.push_back(std::move(e));
  }
  for (const auto& w : waiting_) {
    TokenEvent e = event_for(w);
    e.finish = FinishReason::error;
    e.error = error;
    e.error_kind = kind;
    events.push_back(std::move(e));
  }
  stats_.aborted += static_cast<int64_t>(events.size());
  running_.clear();
  waiting_.clear();
  return events;
}

// One step, as four phases: schedule (what runs: a prefill batch with the
// decodes beside it, or decodes alone), build the worker's input, run it,
// and take each sampled token into its request.
std::vector<TokenEvent> Scheduler::step() {
  std::vector<TokenEvent> events = std::move(pending_);
  pending_.clear();
  apply_controls(events);
  expire_waiting(events);
  // "Finish what is running first" means nothing once nothing runs (an
  // abort may have ended the requests it waited for): without this reset
  // the queue would wait forever.
  if (running_.empty()) memory_short_ = false;
  if (idle()) return events;
  ++stats_.steps;

  std::vector<Planned> plan = schedule(events);
  if (plan.empty()) return events;
  StepInput in = build_input(plan);
  in.batch.step = ++step_number_;
  announce_streamed(plan, in.batch.step, events);
  int64_t prefill_tokens = 0, decode_rows = 0;
  for (const auto& p : plan) (p.run->decoding ? decode_rows : prefill_tokens) += static_cast<int64_t>(p.tokens.size());
  const double started = now();
  std::vector<SampleResult> results;
  try {
    results = worker_.run(in.batch, in.sampling);
    if (results.size() != in.sampling.size()) {
      throw std::runtime_error("the worker answered " + std::to_string(results.size()) + " samples for " +
                               std::to_string(in.sampling.size()) + " rows");
    }
  } catch (const WorkerLost&) {
    throw;  // no later step can run either: the caller fails everything
  } catch (const WorkerReset& e) {
    forget_kv(e.what(), events);
    return events;
  } catch (const std::exception& e) {
    recover(plan, e.what(), events);
    return events;
  }
  last_step_seconds_ = now() - started;
  budget_.observe(prefill_tokens, decode_rows, last_step_seconds_);
  // Every decode step, speculating or not: a prediction may come any time.
  if (prefill_tokens == 0) draft_cost_.observe(decode_rows, last_step_seconds_);
  take_results(plan, results, events);
  return events;
}

bool Scheduler::suspect_running() const {
  return std::any_of(running_.begin(), running_.end(), [](const Running& r) { return r.req.step_failures > 0; });
}

void Scheduler::recover(std::vector<Planned>& plan, const std::string& error, std::vector<TokenEvent>& events) {
  ++stats_.failed_steps;
  std::vector<uint64_t> ids;
  for (const auto& p : plan) ids.push_back(p.run->req.id);
  // Back to the queue in their order, the first in front.
  for (auto id = ids.rbegin(); id != ids.rend(); ++id) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.req.id == *id; });
    if (it == running_.end()) continue;
    if (it->streamed > 0) {
      park(static_cast<size_t>(it - running_.begin()), streaming_failed(it->req, "a step computing its prompt failed (" + error + ")"));
      continue;
    }
    Request q = std::move(it->req);
    running_.erase(it);
    // The rows this step allocated were never written (or half written):
    // none of them may enter the cache. What earlier steps cached stays.
    RequestKv* kv[] = {&q.kv};
    kv_.abort(kv);
    q.kv = RequestKv{};
    ++q.retractions;  // its usage counts its first admission only
    if (q.scores_prompt()) q.prompt_scores.clear();
    if (++q.step_failures >= 2) {
      ++stats_.poisoned;
      TokenEvent e = event_for(q);
      e.finish = FinishReason::error;
      e.error = "the engine failed on this request twice, the second time with it alone (" + error +
                "); it is failed alone and the other requests go on";
      e.error_kind = ErrorKind::internal;
      events.push_back(std::move(e));
      continue;
    }
    waiting_.push_front(std::move(q));
  }
}

std::vector<Scheduler::Planned> Scheduler::schedule(std::vector<TokenEvent>& events) {
  // A policy that waits for the read-ahead asks for it before admission, so
  // a request that arrives to an idle engine has its blocks read on the
  // tiers' thread too; best effort asks only for those left waiting.
  const bool waits = config_.tiers && config_.prefetch_policy != HiCachePrefetchPolicy::best_effort;
  if (waits) prefetch_waiting();
  if (config_.tiers) load_budget_ = load_budget();
  keep_kv_quotas(events);
  const int64_t preempted = stats_.preemptions;
  preempt_for_priority();
  if (stats_.preemptions == preempted) preempt_for_share();  // one a step
  std::vector<Planned> plan = plan_prefill();
  if (config_.tiers) prefetch_waiting();
  // Nothing runs and what waits, waits for its blocks: sleep until one
  // read-ahead ends (or briefly) rather than spin through empty steps.
  if (waits && plan.empty() && running_.empty() && !waiting_.empty()) config_.tiers->wait_prefetch(std::chrono::milliseconds(20));
  if (!plan.empty() && extend(plan)) {
    memory_short_ = false;
    // A suspect (see recover) runs alone: if it fails again, it alone is to blame.
    if (!suspect_running()) add_decodes(plan);
    ++stats_.prefill_steps;
    return plan;
  }
  if (!plan.empty()) {
    // Not enough KV even after eviction. With requests decoding, decode
    // instead (finishing requests frees memory) and retry next step. With
    // only prefills, send the newest back to wait; a lone request that
    // cannot fit is an error rather than a livelock.
    memory_short_ = true;
    if (std::none_of(running_.begin(), running_.end(), [](const Running& r) { return r.decoding; })) {
      if (running_.size() == 1 && running_.front().streamed > 0) {
        TokenEvent e = event_for(running_.front().req);
        e.finish = FinishReason::error;
        e.error = "the KV pool is too small for this request";
        e.error_kind = ErrorKind::invalid_request;
        park(0, std::move(e));
      } else if (running_.size() == 1) {
        finish(running_.front(), FinishReason::error, events, "the KV pool is too small for this request",
               ErrorKind::invalid_request);
        running_.clear();
      } else {
        retract(*retraction_victim());
      }
      return {};
    }
  }
  plan = plan_decode(events);
  if (plan.empty()) return plan;
  if (std::all_of(running_.begin(), running_.end(), [](const Running& r) { return r.decoding; })) {
    memory_short_ = false;  // nothing half-prefilled is waiting for room: admit again
  }
  ++stats_.decode_steps;
  return plan;
}

// A streamed prompt's rows go out while the step that writes them runs,
// and stay where they are until the request is released or aborted:
// caching them now could swap a row for the tree's copy and free it under
// the transfer. Its prompt is cached when it is released (KvStore::finish).
bool Scheduler::streams_prompt(const Request& q) { return q.hold_after_prefill && q.stream_held_kv; }

void Scheduler::announce_streamed(std::vector<Planned>& plan, uint64_t step, std::vector<TokenEvent>& events) {
  std::vector<TokenEvent> early;
  for (auto& p : plan) {
    Running& r = *p.run;
    const Request& q = r.req;
    const auto end = static_cast<int32_t>(std::min(q.kv.kv.size(), q.prompt.size()));
    if (r.decoding || !streams_prompt(q) || end <= r.streamed) continue;
    TokenEvent e = event_for(q);
    e.held_progress = true;
    e.held_step = step;
    e.held_rows.assign(q.kv.kv.begin() + r.streamed, q.kv.kv.begin() + end);
    early.push_back(std::move(e));
    r.streamed = end;
  }
  if (early.empty()) return;
  if (plan_listener_) {
    plan_listener_(std::move(early));
  } else {
    events.insert(events.end(), std::make_move_iterator(early.begin()), std::make_move_iterator(early.end()));
  }
}

Scheduler::StepInput Scheduler::build_input(std::vector<Planned>& plan) {
  // The new rows of req_to_token plus any the worker has not seen (after
  // admission or a cache_unfinished rewrite).
  StepInput in;
  size_t rows = 0;
  for (const auto& p : plan) rows += p.rows();
  in.masks.resize(rows);  // never resized again: the sampling rows' spans point into it
  for (auto& p : plan) {
    Request& q = p.run->req;
    auto n = static_cast<int32_t>(p.tokens.size());
    auto len = static_cast<int32_t>(q.kv.kv.size());
    in.batch.reqs.push_back({q.kv.slot, len - n, n});
    if (q.scores_prompt()) {
      ForwardRequest& f = in.batch.reqs.back();
      f.prompt_logprobs = true;
      f.prompt_top_n = q.top_logprobs;
      const size_t after = p.run->prefilled + p.tokens.size();
      f.next_token = p.sample ? -1 : q.prompt[after];
    }
    in.batch.reqs.back().logit_rows = static_cast<int32_t>(p.rows());
    in.batch.reqs.back().adapter = q.adapter;
    in.batch.reqs.back().adapter_scale = q.adapter_scale;
    in.batch.reqs.back().stacked_adapters = q.stacked;
    if (config_.speculative.algorithm == SpeculativeAlgorithm::draft) {
      ForwardRequest& f = in.batch.reqs.back();
      f.model_drafts = static_cast<int32_t>(p.drafts.size());
      // The token before this step's: its draft KV may be a draft the model
      // proposed last step and never ran (the worker runs it again).
      if (p.run->decoding && len - n >= 1) {
        const auto pos = static_cast<size_t>(len - n - 1);
        f.draft_prev_token = pos < q.prompt.size() ? q.prompt[pos] : q.output[pos - q.prompt.size()];
      }
    }
    in.batch.token_ids.insert(in.batch.token_ids.end(), p.tokens.begin(), p.tokens.end());
    in.batch.out_cache_loc.insert(in.batch.out_cache_loc.end(), q.kv.kv.end() - n, q.kv.kv.end());
    int32_t from = std::min(p.run->table_synced, len - n);
    in.batch.writes.push_back({q.kv.slot, from, std::vector<int32_t>(q.kv.kv.begin() + from, q.kv.kv.end())});
    p.run->table_synced = len;
    // One sampling row per position sampled: row j of a verify sees the
    // drafts before it as output (penalties), draws at counter
    // output.size() + j and takes its own mask, exactly as plain decoding
    // would at that position.
    for (size_t j = 0; j < p.rows(); ++j) {
      std::span<const int32_t> output = q.output;
      if (j > 0) {
        std::vector<int32_t>& o = in.outputs.emplace_back(q.output);
        o.insert(o.end(), p.drafts.begin(), p.drafts.begin() + static_cast<ptrdiff_t>(j));
        output = o;
      }
      in.sampling.push_back({q.sampling, q.prompt, output, static_cast<uint64_t>(output.size()), q.top_logprobs, {}});
      const bool constrained = q.constraint && p.sample;
      const bool too_early = p.sample && static_cast<int32_t>(output.size()) < q.stop.min_new_tokens;
      if (constrained || too_early) {
        auto& mask = in.masks[in.sampling.size() - 1];
        if (constrained && !p.row_masks.empty()) {
          mask = std::move(p.row_masks[j]);
        } else if (constrained) {
          mask.resize(mask_words(config_.constraints->vocab_size()));
          q.constraint->allowed(mask);
        }
        if (too_early) hold_back_stops(q, mask);
        in.sampling.back().allowed = mask;
      }
    }
  }
  return in;
}

TokenEvent Scheduler::take_token(Running& r, const SampleResult& s) {
  Request& q = r.req;
  const bool scored = q.scores_prompt();
  q.output.push_back(s.token);
  ++stats_.generated_tokens;
  TokenEvent e = event_for(q);
  e.token = s.token;
  e.logprob = s.logprob;
  e.top = s.top;
  if (scored) {
    SampleResult first;
    first.token = q.prompt.front();
    first.logprob = std::numeric_limits<float>::quiet_NaN();
    e.prompt_logprobs.push_back(std::move(first));
    e.prompt_logprobs.insert(e.prompt_logprobs.end(), std::make_move_iterator(q.prompt_scores.begin()),
                             std::make_move_iterator(q.prompt_scores.end()));
    q.prompt_scores.clear();
  }
  // The sampler kept to the mask, so the constraint accepts the token; a
  // complete output ends the request whatever ignore_eos says.
  const bool broke_constraint = q.constraint && !q.constraint->accept(s.token);
  const bool constraint_done = q.constraint && !broke_constraint && q.constraint->complete();
  if (scored && e.prompt_logprobs.size() != q.prompt.size()) {
    e.finish = FinishReason::error;
    e.error = "the worker scored " + std::to_string(e.prompt_logprobs.size() - 1) + " of the prompt's " +
              std::to_string(q.prompt.size() - 1) + " tokens";
    e.error_kind = ErrorKind::internal;
  } else if (broke_constraint) {
    e.finish = FinishReason::error;
    e.error = "the sampled token does not fit the structured-output constraint";
    e.error_kind = ErrorKind::internal;
  } else {
    e.finish = stop_reason(q, constraint_done);
  }
  if (config_.tiers && config_.tiers->policy() == HiCacheWritePolicy::write_through && !r.decoding &&
      q.retractions == 0) {
    if (const std::optional<uint64_t> lineage = tier_lineage(q)) config_.tiers->after_prefill(worker_, q.prompt, q.kv.kv, *lineage);
  }
  e.held = e.finish == FinishReason::none && !r.decoding && q.hold_after_prefill;
  return e;
}

size_t Scheduler::take_verified(Running& r, const Planned& p, std::span<const SampleResult> rows,
                                std::vector<TokenEvent>& events) {
  size_t kept = 0;  // drafts the target sampled too
  const size_t first_event = events.size();
  for (size_t j = 0; j < rows.size(); ++j) {
    events.push_back(take_token(r, rows[j]));
    const bool matches = j < p.drafts.size() && rows[j].token == p.drafts[j];
    if (matches) ++kept;
    if (events.back().finish != FinishReason::none || !matches) break;
  }
  const auto drafted = static_cast<int32_t>(p.drafts.size());
  // The request's usage counts them, this step's events included.
  r.req.draft_tokens += drafted;
  r.req.accepted_draft_tokens += static_cast<int32_t>(kept);
  for (size_t e = first_event; e < events.size(); ++e) {
    events[e].draft_tokens = r.req.draft_tokens;
    events[e].accepted_draft_tokens = r.req.accepted_draft_tokens;
  }
  stats_.spec_drafted += drafted;
  if (r.table_drafted) stats_.spec_table_drafted += drafted;
  stats_.spec_accepted += static_cast<int64_t>(kept);
  ++stats_.spec_accept_lengths[kept];
  r.pace.observe(drafted, static_cast<int32_t>(kept));
  engine_pace_.observe(drafted, static_cast<int32_t>(kept));
  // This step wrote KV for the last token and every draft; what stays valid
  // is the last token's and the kept drafts' (the newest output token has
  // none yet, as after any decode step).
  return 1 + kept;
}

void Scheduler::take_model_drafts(Request& q, Planned& p, std::span<const SampleResult> rows) {
  // Row j's draft is the token at the position after the last token + j
  // drafts; its KV entry held a placeholder until now. A row without one
  // (a worker that did not draft) matches no sample.
  const size_t first = q.kv.tokens.size() - p.tokens.size() + 1;
  for (size_t j = 0; j < p.drafts.size(); ++j) {
    p.drafts[j] = j < rows.size() ? rows[j].draft : kModelDraft;
    q.kv.tokens[first + j] = kv_keys(std::span(&p.drafts[j], 1), q.adapter)[0];
  }
}

void Scheduler::take_results(std::vector<Planned>& plan, std::vector<SampleResult>& results,
                             std::vector<TokenEvent>& events) {
  std::vector<RequestKv*> to_cache;
  std::vector<uint64_t> done, hold;
  std::vector<RequestKv*> cut;
  std::vector<size_t> cut_to;
  size_t row = 0;  // results hold one entry per sampled row
  for (size_t i = 0; i < plan.size(); ++i) {
    Running& r = *plan[i].run;
    Request& q = r.req;
    const SampleResult& first = results[row];
    const std::span<const SampleResult> rows(results.data() + row, plan[i].rows());
    row += plan[i].rows();
    if (!r.decoding) r.prefilled += plan[i].tokens.size();
    if (q.scores_prompt()) q.prompt_scores.insert(q.prompt_scores.end(), first.prompt.begin(), first.prompt.end());
    if (!plan[i].sample) {  // a chunk that is not the last: share it, sample nothing
      if (!streams_prompt(q)) to_cache.push_back(&q.kv);
      continue;
    }
    if (!plan[i].drafts.empty()) {
      if (config_.speculative.algorithm == SpeculativeAlgorithm::draft) take_model_drafts(q, plan[i], rows);
      const size_t valid = take_verified(r, plan[i], rows, events);
      const size_t length = q.kv.kv.size() - plan[i].tokens.size() + valid;
      if (length < q.kv.kv.size()) {
        cut.push_back(&q.kv);
        cut_to.push_back(length);
        r.table_synced = std::min(r.table_synced, static_cast<int32_t>(length));
      }
    } else {
      events.push_back(take_token(r, first));
    }
    q.step_failures = 0;  // it sampled a token: whatever failed before was not this request alone
    if (events.back().held) hold.push_back(q.id);
    if (events.back().finish != FinishReason::none) {
      done.push_back(q.id);
    } else if (!r.decoding) {
      r.decoding = true;
      if (q.shares_kv() && !streams_prompt(q)) to_cache.push_back(&q.kv);  // its prompt becomes matchable by others
    }
  }
  // Rejected drafts' rows go back before anything is cached or finished:
  // the tree only ever takes KV of tokens the request kept.
  if (!cut.empty()) kv_.truncate(cut, cut_to);
  if (!to_cache.empty()) {
    // cache_unfinished may point req_to_token [prefix_len, new prefix_len)
    // at the tree's rows instead of duplicates: the worker must be resent
    // that range.
    for (auto& p : plan) {
      if (std::find(to_cache.begin(), to_cache.end(), &p.run->req.kv) != to_cache.end()) {
        p.run->table_synced = std::min(p.run->table_synced, p.run->req.kv.prefix_len);
      }
    }
    kv_.cache_unfinished(to_cache);
  }
  // One that ended with its first token (max_tokens 1, a stop) keeps its
  // rows for the gateway's abort, as any streaming request does.
  for (uint64_t id : done) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.req.id == id; });
    if (it == running_.end() || it->streamed == 0) continue;
    held_.push_back(std::move(*it));
    running_.erase(it);
  }
  for (uint64_t id : hold) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.req.id == id; });
    // The rows as caching left them (shared rows replace duplicates).
    auto e = std::find_if(events.begin(), events.end(), [&](const TokenEvent& x) { return x.id == id && x.held; });
    e->held_rows = it->req.kv.kv;
    held_.push_back(std::move(*it));
    running_.erase(it);
  }
  if (!done.empty()) {
    std::vector<Request*> finished;
    for (auto& r : running_) {
      if (std::find(done.begin(), done.end(), r.req.id) != done.end()) {
        finished.push_back(&r.req);
        remember(r.req);
      }
    }
    release_kv(finished);
    stats_.finished += static_cast<int64_t>(finished.size());
    std::erase_if(running_, [&](const Running& r) { return std::find(done.begin(), done.end(), r.req.id) != done.end(); });
  }
}

}  // namespace actorlm
