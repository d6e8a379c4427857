#pragma once
// A generation request as the scheduler tracks it: what was asked, what has
// been produced, and the KV indices it holds (never tensors).

#include <chrono>
#include <cstdint>
#include <string>
#include <memory>
#include <span>
#include <vector>

#include "grammar/constraint.hpp"
#include "kernels/sampling_params.hpp"
#include "kvstore/kv_store.hpp"

namespace actorlm {

enum class FinishReason { none, stop, length, abort, error };
const char* finish_reason_name(FinishReason r);

// Why a request ended in an error, for callers that map it (an HTTP
// status): the request cannot run as asked, the service cannot serve it now
// (a node is down: retry), a fault on the engine's side, a full queue
// (overloaded: retry later), or a wait past the queue timeout.
enum class ErrorKind { none, invalid_request, unavailable, internal, overloaded, timeout };

struct StopConditions {
  int32_t max_new_tokens = 128;
  // vLLM's min_tokens (SGLang's min_new_tokens): until the output holds this
  // many tokens, EOS and stop_token_ids cannot be sampled and stop strings
  // do not match (the detokenizer's side). 0..max_new_tokens.
  int32_t min_new_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // besides EOS
  bool ignore_eos = false;
  bool max_new_tokens_strict = false;  // prompt + max_new_tokens must fit the context
};

// LoRA adapters share the radix cache with the base model but never a
// prefix: a request with an adapter keys its KV by its tokens with the
// adapter's id in bits 21-30 (vocabularies stay under 2^21 ids, checked at
// submission), so no path of the tree, and no tier block, holds rows of two
// adapters. Ids are never reused within a process (the engine counts them
// up), so a key cannot outlive its adapter and match another.
inline constexpr int kAdapterKeyShift = 21;
inline constexpr int32_t kMaxAdapterId = 1023;
inline constexpr int32_t kAdapterVocabLimit = int32_t{1} << kAdapterKeyShift;
// A request may run its adapter at another scale than it was loaded with
// (llama-server's per-request scale), within this magnitude. Its KV is then
// its own: keys have no room for a scale, so it matches no cached prefix
// and caches nothing (Request::shares_kv).
inline constexpr float kMaxAdapterScale = 16.0f;
// Adapters a request may run with beside its first (llama-server's `lora`
// list applies every adapter it names at its scale). Such a request's KV is
// its own too.
inline constexpr size_t kMaxStackedAdapters = 7;
inline std::vector<int32_t> kv_keys(std::span<const int32_t> tokens, int32_t adapter) {
  std::vector<int32_t> keys(tokens.begin(), tokens.end());
  // A placeholder (-1) stays -1 whatever the adapter.
  if (adapter != 0) {
    for (int32_t& t : keys) t |= adapter << kAdapterKeyShift;
  }
  return keys;
}
// Whether a key carries an adapter's id (write-back tiers keep only the
// base model's blocks: an id means nothing to the next process).
inline bool adapter_key(int32_t key) { return key >= kAdapterVocabLimit; }

// The most tenants one server has (server/tenants.hpp).
inline constexpr int32_t kMaxTenant = 1024;
inline constexpr double kMaxTenantWeight = 1000;
// The largest KV quota a tenant may have, in tokens (QueuePolicy::tenant_kv_quotas).
inline constexpr int64_t kMaxTenantKvTokens = int64_t{1} << 40;

// OpenAI's limit on alternatives per token.
inline constexpr int kMaxTopLogprobs = 20;

struct Request {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConditions stop;
  int top_logprobs = 0;
  // Echo with logprobs: score every prompt token (with top_logprobs
  // alternatives). Such a request matches no cached prefix, since the
  // logits at every prompt position are needed.
  bool prompt_logprobs = false;
  // Prefill/decode disaggregation, prefill side: stop after the first token
  // and hold the prompt's KV (slot, rows, locks) until Scheduler::release.
  bool hold_after_prefill = false;
  // With hold_after_prefill: report the prompt's KV rows as its chunks are
  // planned (TokenEvent::held_progress, with the step that computes them),
  // so that each layer can be sent as soon as it is stored. A transfer may then read its rows at any moment, so
  // nothing but an abort or release ends it: what would end or requeue it
  // parks it, rows and all, in the held requests (Scheduler::park).
  bool stream_held_kv = false;
  // Speculative decoding: the most tokens drafted for it in one step
  // (llama-server's `speculative.n_max`), never more than the engine's
  // num_draft_tokens; 0 keeps it to one token per step, -1 takes the
  // engine's. Its output is the same either way.
  int32_t max_draft_tokens = -1;
  // OpenAI's predicted output, tokenized: text the caller expects much of
  // the output to repeat (the file being edited). Drafts are looked up in it
  // first (PredictionLookup), whatever the engine's algorithm but a draft
  // model's, and with speculation off too. At most kMaxPredictionTokens.
  std::vector<int32_t> prediction;
  // Priority scheduling (scheduler/queue_policy.hpp): how urgent it is, in
  // [-kMaxPriority, kMaxPriority]; ignored while priorities are off.
  int32_t priority = 0;
  // Its tenant (the API key it came with: QueuePolicy::tenant_weights);
  // 0: none. At most kMaxTenant.
  int32_t tenant = 0;
  // That tenant's weight, sent by a cluster's head to nodes that have no
  // tenants file: the scheduler takes it into its table (0: the table's).
  // In [0, kMaxTenantWeight].
  double tenant_weight = 0;
  // Its KV quota in tokens, sent the same way (QueuePolicy::tenant_kv_quotas;
  // 0: the table's). In [0, kMaxTenantKvTokens].
  int64_t tenant_kv_quota = 0;
  // The LoRA adapter it runs with (the worker's id, 1..kMaxAdapterId); 0:
  // the base model. adapter_scale multiplies the adapter's own scale for
  // this request: 0 < |s| <= kMaxAdapterScale, 1 without an adapter.
  int32_t adapter = 0;
  float adapter_scale = 1.0f;
  // Further adapters (id, scale) applied after the first, in this order;
  // only with a first one.
  std::vector<std::pair<int32_t, float>> stacked;
  // Structured output: what the output must match; the scheduler starts
  // `constraint` from it at submission and advances it with every token.
  ConstraintSpec constraint_spec;
  std::shared_ptr<ConstraintState> constraint;

  // Progress.
  std::vector<int32_t> output;
  RequestKv kv;            // rows for tokens prompt ++ output with KV so far
  int64_t arrival = 0;     // admission order (fcfs, retraction victims)
  int32_t cached_tokens = 0;
  int32_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding, for its usage
  int32_t retractions = 0;
  double queued_at = 0;  // when submitted (Scheduler's clock, seconds): the queue timeout
  // Later arrivals of its own rank admitted before it while it waited
  // (lpm's starvation bound, QueuePolicy::max_overtakes).
  int32_t overtaken = 0;
  // Steps that failed with it in the batch (Scheduler::recover): after one
  // it runs alone until it samples a token; a second fails it alone.
  int32_t step_failures = 0;
  bool prefetched = false;  // its tiers' blocks were asked for while it waited
  double prefetch_at = 0;   // when (Scheduler's clock, seconds)
  FinishReason finish = FinishReason::none;
  std::vector<SampleResult> prompt_scores;  // prompt_logprobs: tokens 1.. scored so far

  // Its prompt still has to be scored (before the first output token).
  bool scores_prompt() const { return prompt_logprobs && output.empty(); }
  // Whether its KV may be matched by and cached for others: not at an
  // adapter scale its key cannot tell apart (kMaxAdapterScale).
  bool shares_kv() const { return adapter_scale == 1.0f && stacked.empty(); }
  // It matches no cached prefix: every position computed.
  bool matches_nothing() const { return scores_prompt() || !shares_kv(); }

  // fill_ids() as its KV is keyed in the radix cache (kv_keys).
  std::vector<int32_t> key_ids() const { return kv_keys(fill_ids(), adapter); }

  // All tokens the model has seen or produced, in order.
  std::vector<int32_t> fill_ids() const {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    return all;
  }
};

}  // namespace actorlm
