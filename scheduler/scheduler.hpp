#pragma once
// Continuous batching. Each step():
//   1. applies aborts and external stops (freeing what those requests held);
//   2. forms a prefill batch from the waiting queue — ordered by longest
//      cached prefix (lpm) or arrival (fcfs), bounded by max_prefill_tokens
//      and max_running_requests, long prompts cut into chunks of
//      chunked_prefill_size — with every decoding request's next token in
//      the same batch (and, while any request decodes, one chunk of prefill
//      in all, so that its gap between tokens stays one chunk's prefill);
//      or, if there is none, decodes every running request
//      one token, retracting the newest requests to the waiting queue when
//      the KV pool runs short (their KV stays in the radix cache, so
//      re-prefill is mostly cache hits);
//   3. runs the worker once;
//   4. appends sampled tokens, checks stop conditions, caches finished
//      requests (cache_finished) and prefilled ones (cache_unfinished, so
//      later requests can share their prefix).
// A step the worker fails (an exception that is not WorkerLost) fails no
// request by itself: its requests give back this step's KV and wait again
// (their outputs kept, so they go on exactly), then run one at a time until
// each has sampled a token alone; one that fails a second time is failed
// alone (a poison request), and everything else goes on.
// The scheduler holds indices only; the pools and the tree live behind
// KvService, the model behind Worker. Single-threaded (the scheduler actor).

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "scheduler/draft_cost.hpp"
#include "scheduler/drafter.hpp"
#include "scheduler/ngram_table.hpp"
#include "scheduler/kv_service.hpp"
#include "scheduler/kv_tiers.hpp"
#include "scheduler/queue_policy.hpp"
#include "scheduler/request.hpp"
#include "scheduler/step_budget.hpp"
#include "scheduler/worker.hpp"

namespace actorlm {

enum class SchedulePolicy { lpm, fcfs };

struct SchedulerConfig {
  SchedulePolicy policy = SchedulePolicy::lpm;
  int32_t max_running_requests = 32;
  int32_t max_prefill_tokens = 2048;   // new tokens per prefill step
  int32_t chunked_prefill_size = 512;  // most tokens of one request per step; 0 = never chunk
  int32_t max_context = 2048;          // prompt + output
  std::optional<int32_t> eos_id;
  int32_t vocab_size = 0;  // > 0: transferred first tokens are checked against it
  // Compiles structured-output constraints over the model's vocabulary;
  // null: requests with a constraint are refused.
  std::shared_ptr<ConstraintCompiler> constraints;
  // The KV cache's tiers below the pool (--hicache-size,
  // --hicache-storage-dir, --hicache-write-policy); null: none. An admitted
  // prompt loads what they have beyond its cached prefix instead of
  // computing it; they are fed as the tiers' write policy says.
  std::shared_ptr<KvTiers> tiers;
  // Whether a waiting request is admitted before its blocks have been read
  // ahead (--hicache-prefetch-policy, --hicache-prefetch-timeout-ms; see
  // HiCachePrefetchPolicy), and for timeout how long it may wait.
  HiCachePrefetchPolicy prefetch_policy = HiCachePrefetchPolicy::best_effort;
  double prefetch_timeout_seconds = 1.0;
  // The time one step should take (--max-step-ms), in seconds; 0: no time
  // budget. A prefill step then carries no more prompt tokens than the
  // measured cost per token says fit (scheduler/step_budget.hpp), so that a
  // slow model never holds the running streams for minutes in one step.
  double max_step_seconds = 0;
  // The gap between a running stream's tokens to keep while prompts
  // prefill beside it (--itl-target-ms), in seconds; 0: none. A mixed
  // step's prefill is then what the measured costs fit in it, instead of
  // one chunked_prefill_size chunk in all (each request's chunk is still
  // at most that).
  double itl_target_seconds = 0;
  // Speculative decoding (--speculative-algorithm, scheduler/drafter.hpp):
  // a decoding request's step carries its last token and up to
  // num_draft_tokens drafted ones, verified in the same forward pass.
  SpeculativeConfig speculative;
  // LoRA adapters loaded before the first request (their worker ids).
  std::vector<int32_t> adapters;
  // Their KV's lineages in the tiers below the pool (kv_adapter_lineage of
  // each file's fingerprint and scale), by id; an adapter without one keeps
  // its KV in the pool only.
  std::map<int32_t, uint64_t> adapter_lineages;
  // Priorities, lpm's starvation bound, the queue's bound and timeout.
  QueuePolicy queue;
  // Seconds on a monotonic clock, for timing steps; null: steady_clock.
  // Tests pass a clock their fake worker advances.
  std::function<double()> clock;
};

// What happened to a request in one step.
struct TokenEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1: no new token (finish without one, e.g. abort)
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  // prompt_logprobs, with the first token only: every prompt token, the
  // first with a NaN logprob (nothing predicts it).
  std::vector<SampleResult> prompt_logprobs;
  FinishReason finish = FinishReason::none;
  std::string error;
  ErrorKind error_kind = ErrorKind::none;
  // hold_after_prefill: the first token is sampled and the prompt's KV is
  // held for a transfer (Scheduler::held); the request goes no further here.
  bool held = false;
  std::vector<int32_t> held_rows;  // held: its prompt's KV rows, one per token
  // Request::stream_held_kv: the KV of more of the prompt's tokens is being
  // computed, by step `held_step` (ForwardBatch::step), in rows that stay
  // where they are until the request is released or aborted, so it may be
  // sent as that step stores it (model/kv_layer_clock.hpp): held_rows are
  // the rows of the tokens after those of the request's earlier reports, in
  // order; no token comes with it. Given to the plan listener before the
  // step runs.
  bool held_progress = false;
  uint64_t held_step = 0;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // Speculative decoding so far: tokens drafted for it and kept.
  int32_t draft_tokens = 0, accepted_draft_tokens = 0;
};

struct SchedulerStats {
  int64_t steps = 0, prefill_steps = 0, decode_steps = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  int64_t retractions = 0, finished = 0, aborted = 0;
  // Prompt tokens loaded from the host or disk tier instead of computed.
  int64_t host_hit_tokens = 0, disk_hit_tokens = 0;
  // Live migration: running requests that came here with their KV (none of
  // their tokens computed here) and that left with it.
  int64_t migrated_in = 0, migrated_out = 0;
  // Steps the worker failed (recovered from), and requests failed alone
  // after a second such step.
  int64_t failed_steps = 0, poisoned = 0;
  // Times the worker came back without its KV (WorkerReset), and the
  // running requests computed again after it.
  int64_t worker_resets = 0, reset_requests = 0;
  // Speculative decoding: the drafted tokens and those the target kept;
  // accept_lengths[n]: verifies (steps of a request that carried drafts)
  // that kept n drafts.
  int64_t spec_drafted = 0, spec_accepted = 0;
  // Of spec_drafted, the tokens the shared n-gram table proposed (NgramTable).
  int64_t spec_table_drafted = 0;
  std::array<int64_t, kMaxDraftTokens + 1> spec_accept_lengths{};
  // Priority scheduling: running requests sent back to wait for a more
  // urgent one (counted in retractions too). Admission: submissions refused
  // for a full queue, and requests failed for waiting past the timeout.
  int64_t preemptions = 0, queue_rejections = 0, queue_timeouts = 0;
  // Fair share (--tenant-preemption): running requests sent back so a
  // tenant below its share gets a place (counted in retractions too).
  int64_t share_preemptions = 0;
  // Tenants' KV quotas: running requests sent back to wait because their
  // tenant's claimed more (counted in retractions too), and requests ended
  // because they alone filled it (length; error for one not decoding).
  int64_t kv_quota_retractions = 0, kv_quota_finishes = 0;
  int64_t spec_verifies() const {
    int64_t n = 0;
    for (int64_t v : spec_accept_lengths) n += v;
    return n;
  }
  double cache_hit_rate() const { return prompt_tokens ? double(cached_tokens) / double(prompt_tokens) : 0.0; }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvService& kv, Worker& worker);

  // Queues a request; an error message when it can never run (empty prompt,
  // prompt not shorter than the context, bad sampling parameters, id in use:
  // ErrorKind::invalid_request) or cannot now (the queue holds
  // QueuePolicy::max_queued requests, counted as a rejection:
  // ErrorKind::overloaded). `kind`, when given, is set to which.
  std::optional<std::string> submit(Request request, ErrorKind* kind = nullptr);
  // Why `r` can never run here (empty, too long, bad parameters, a token id
  // outside the vocabulary, id in use). Every check of a request's values
  // that needs no tokenizer is here; the HTTP layer checks only JSON types
  // and the ranges it reports by field name.
  std::optional<std::string> refusal(const Request& r) const;
  // LoRA adapters the worker has loaded (ModelRunner::add_adapter): a
  // request naming any other id is refused at submission. remove_adapter
  // refuses (false) while a request waiting, running or held uses it, so
  // an adapter never leaves mid-request.
  // `lineage`: its KV's in the tiers (SchedulerConfig::adapter_lineages;
  // 0: none, its KV stays out of them).
  void add_adapter(int32_t id, uint64_t lineage = 0);
  bool remove_adapter(int32_t id);
  bool adapter_in_use(int32_t id) const;
  // Takes effect at the start of the next step; unknown ids are ignored.
  void abort(uint64_t id);
  // Finish a running request as stopped (a stop string matched downstream).
  void stop(uint64_t id);

  std::vector<TokenEvent> step();
  // Called during step() with the events that may go out before the
  // worker runs it (held_progress); without a listener they come with
  // step()'s own.
  void set_plan_listener(std::function<void(std::vector<TokenEvent>)> listener) { plan_listener_ = std::move(listener); }

  // Prefill/decode disaggregation. Prefill side: the KV of a held request
  // (see Request::hold_after_prefill), null for an id that is not held;
  // release() caches its prompt and frees the rest once the decode side has
  // it. Decode side: reserve() takes a slot and KV rows for a request whose
  // prompt KV comes from elsewhere (output holds the first token) and
  // returns the rows to write, one per prompt token, or why it cannot (no
  // room now, or a request that can never run); activate() starts its decode
  // once every row is written, from the first token the prefill side sampled
  // (whose event comes with the next step); false for an id not reserved or
  // a token outside the vocabulary. cancel_reserved() gives everything back. abort() ends held and
  // reserved requests too.
  //
  // Live migration (a node drained) uses the same three calls. Source side:
  // freeze() takes a decoding request out of the batch and holds its KV
  // (prompt ++ output but the last token, which has none yet) as a held
  // request's; thaw() puts it back; release() once the target has it. Target
  // side: reserve() a request whose output is the tokens it already has (the
  // rows cover all but the last one; its constraint walks them), and
  // activate() with first_token -1: it decodes on from its last token, with
  // no event for tokens its client already has, and no prompt token counted
  // as computed here.
  const RequestKv* held(uint64_t id) const;
  void release(uint64_t id);
  struct Reserved {
    std::vector<int32_t> rows;  // one per prompt token
    // How many leading rows this engine's radix cache already holds (locked
    // until the request ends): the transfer needs only the rest.
    int32_t cached = 0;
    std::string error;  // set when refused
    bool no_room = false;  // refused only for want of KV now: may be retried
  };
  Reserved reserve(Request request);
  // cached_tokens: how much of the prompt the prefill side found in its
  // cache; the usage reports the larger of that and this engine's own hit
  // (clamped to the prompt).
  bool activate(uint64_t id, int32_t first_token, float first_logprob, int32_t cached_tokens = 0);
  void cancel_reserved(uint64_t id);
  struct Frozen {
    // frozen: held for the copy; requeued: it was only waiting (no KV yet)
    // and is dropped here without an event, to be placed elsewhere afresh;
    // busy: prefilling or loading now, ask again after a step; unknown: not
    // here (finished, aborted, or never was).
    enum class State { frozen, requeued, busy, unknown } state = State::unknown;
    std::vector<int32_t> rows;  // frozen: one per token of prompt ++ output[:-1]
    int32_t output_tokens = 0;  // frozen or requeued: what its client has been sent
    int32_t cached_tokens = 0;  // its usage's cached prompt tokens, carried to the target
  };
  Frozen freeze(uint64_t id);
  bool thaw(uint64_t id);
  size_t held_count() const { return held_.size(); }
  size_t reserved_count() const { return reserved_.size(); }
  // Ends every request with an error (after a step failed): each gets a final
  // event, and what they hold is released as far as the KV service still
  // answers. `kind`: internal for a failed step, unavailable for a worker
  // lost for good (the client may retry elsewhere).
  std::vector<TokenEvent> fail_all(const std::string& error, ErrorKind kind = ErrorKind::internal);
  // The worker's KV is gone (WorkerReset): every running request goes back
  // to wait with its output, to be computed again from its tokens (no token
  // repeated, none lost, the same outputs), and the prefix cache is emptied.
  // Requests held or reserved for a KV transfer fail (unavailable): their
  // rows were the point. Their final events go into `events`.
  void forget_kv(const std::string& why, std::vector<TokenEvent>& events);
  bool idle() const { return waiting_.empty() && running_.empty() && pending_.empty(); }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  const SchedulerStats& stats() const { return stats_; }
  // What the step time budget has measured (empty estimates without one).
  const StepBudget& step_budget() const { return budget_; }
  // The KV of every running request, i.e. of every request holding a slot
  // and locks between steps (held and reserved ones included): what the KV
  // self-check ties the locks to.
  std::vector<const RequestKv*> running_kv() const;

 private:
  struct Running {
    Request req;
    size_t prefilled = 0;      // tokens of fill_ids with KV (prefill progress)
    int32_t table_synced = 0;  // leading req_to_token entries the worker already has
    bool decoding = false;
    bool loading = false;      // its blocks come from the tiers over several steps (load_budget_)
    bool frozen = false;       // held for a live migration (freeze), not for a PD transfer
    int32_t streamed = 0;      // rows reported (held_progress): while > 0 a transfer may be reading them
    DraftPace pace;            // how its drafts fare (speculative decoding)
    size_t prediction_at = 0;  // where its output was last found in its prediction (PredictionLookup)
    bool table_drafted = false;  // its drafts this step came from ngram_table_
  };
  struct Planned {
    Running* run;
    std::vector<int32_t> tokens;  // new tokens this step
    bool sample;                  // false for a prefill chunk that is not the last
    // Speculative decoding: tokens = {last output token} ++ drafts, each
    // position sampled; a constrained request's mask for each of those
    // rows (the constraint walked over the drafts and back).
    std::vector<int32_t> drafts = {};
    std::vector<std::vector<uint32_t>> row_masks = {};
    size_t rows() const { return drafts.size() + 1; }
  };

  // What the worker is given for one step. sampling's spans point into
  // masks and into the requests.
  struct StepInput {
    ForwardBatch batch;
    std::vector<SampleRequest> sampling;
    std::vector<std::vector<uint32_t>> masks;  // structured output / min_new_tokens, per sampled row; empty: none
    std::deque<std::vector<int32_t>> outputs;  // a verifying row's output so far (its drafts before it)
  };

  // The phases of step(). apply_controls: aborts and stop-string stops.
  // schedule: what runs this step (empty: nothing; a prefill that found no
  // KV room may retract or fail a request instead). build_input: the batch
  // and each row's sampling. take_results: the sampled tokens into their
  // requests and events, then caching, holds and finished requests' KV.
  void apply_controls(std::vector<TokenEvent>& events);
  std::vector<Planned> schedule(std::vector<TokenEvent>& events);
  static bool streams_prompt(const Request& q);
  // The held_progress events of this step's streamed prompt chunks, to the
  // plan listener (or `events`).
  void announce_streamed(std::vector<Planned>& plan, uint64_t step, std::vector<TokenEvent>& events);
  StepInput build_input(std::vector<Planned>& plan);
  void take_results(std::vector<Planned>& plan, std::vector<SampleResult>& results, std::vector<TokenEvent>& events);
  // The worker failed this step: every planned request gives back its KV
  // (none of this step's rows is cached) and waits again, or, failed twice,
  // ends with the error.
  void recover(std::vector<Planned>& plan, const std::string& error, std::vector<TokenEvent>& events);
  // A request that was in a failed step and has not sampled a token alone since.
  bool suspect_running() const;
  // One request's sampled token: output, event (prompt scores, constraint,
  // finish reason), write-through to the tiers, whether it is held (PD).
  TokenEvent take_token(Running& r, const SampleResult& s);
  std::vector<Planned> plan_prefill();
  std::vector<Planned> plan_decode(std::vector<TokenEvent>& events);
  // A prefill step carries every decoding request's next token too (a mixed
  // batch), so long prompts arriving never stall the streams already
  // running: their gap between tokens is one step, not the whole backlog.
  void add_decodes(std::vector<Planned>& plan);
  // Every decoding request's next token, and its drafts when it speculates.
  std::vector<Planned> decodes();
  // Speculative decoding: what each planned decode could draft, cut to
  // what the step's rows are worth (draft_cost_), into the plan.
  void add_drafts(std::vector<Planned>& plan);
  // What `r` could draft this step (none when it does not speculate, or
  // nothing fits its limits).
  std::vector<int32_t> draft_for(Running& r);
  // A request that finished (stop or length) into the shared n-gram table.
  void remember(const Request& q);
  // A tenant below its share of the places takes one from the tenant
  // furthest above its own (QueuePolicy::share_victim); one a step.
  void preempt_for_share();
  // A request done or sent back: KV others may use goes into the radix
  // cache, a request's own (Request::shares_kv) is freed.
  void release_kv(std::span<Request* const> reqs);
  // Running requests by tenant as QueuePolicy::share counts them (the last
  // entry: tenants outside the weight table).
  std::vector<int64_t> places_by_tenant() const;
  // Tenants' KV quotas (QueuePolicy::tenant_kv_quotas). kv_claims: what
  // each tenant's running requests claim, by tenant id (the quota table's
  // size). fits_kv_quota: whether `q` may start beside them (a tenant with
  // nothing running always may: keep_kv_quotas holds it to the quota as it
  // grows); claim_kv also adds its claim when it does, and when it does
  // not closes the tenant to later ones in this pass. keep_kv_quotas,
  // before each step's admission: a tenant past its quota sends its least
  // urgent, newest request back to wait, or ends the one that alone fills
  // it (finish reason length).
  std::vector<int64_t> kv_claims() const;
  bool fits_kv_quota(const Request& q, const std::vector<int64_t>& claims) const;
  bool claim_kv(const Request& q, std::vector<int64_t>& claims) const;
  void keep_kv_quotas(std::vector<TokenEvent>& events);
  // Whose text in the n-gram table a request may draft from and adds to:
  // its tenant's (NgramTable's spaces).
  static uint64_t table_space(const Request& q) { return static_cast<uint32_t>(q.tenant); }
  // `drafts` into p, with a constrained request's mask for each row (a
  // draft its constraint refuses ends the draft there).
  void take_drafts(Running& r, Planned& p, std::vector<int32_t> drafts);
  // A draft model's proposals, from the verify's results into the plan and
  // the request's KV tokens (they were placeholders, kModelDraft).
  void take_model_drafts(Request& q, Planned& p, std::span<const SampleResult> rows);
  // Short of KV: the plan's requests go on without drafts (true if any had some).
  static bool drop_drafts(std::vector<Planned>& plan);
  // A verified step's tokens into r: the target's samples up to the first
  // that differs from its draft (that one included) or the first that ends
  // the request; returns how many of the step's KV rows stay valid.
  size_t take_verified(Running& r, const Planned& p, std::span<const SampleResult> rows, std::vector<TokenEvent>& events);
  // Who goes back to wait first: the least urgent running request, then the
  // newest. With `movable_only`, never one held for a migration or copying
  // its blocks in from the tiers, nor `spare`. Empty when none qualifies.
  std::optional<size_t> retraction_victim(bool movable_only = false, const Request* spare = nullptr) const;
  // Priority scheduling: with no place free (the running limit, or the KV
  // pool short), a waiting request far enough above a running one
  // (QueuePolicy::may_preempt) sends that one back to wait.
  void preempt_for_priority();
  // Requests that waited past the queue timeout end with ErrorKind::timeout.
  void expire_waiting(std::vector<TokenEvent>& events);
  void retract(size_t index);
  // Takes a streaming request (Running::streamed) out of the batch with its
  // rows into held_, where only an abort (once its transfer has stopped
  // reading them) or a release lets them go; `e` goes out with the next step.
  void park(size_t index, TokenEvent e);
  TokenEvent streaming_failed(const Request& q, const std::string& why) const;
  // kv_.extend, then (write-back) the evicted KV copied to the tiers below
  // before anything can overwrite it.
  bool extend(std::span<RequestKv* const> kvs, std::span<const std::vector<int32_t>> tokens);
  bool extend(const std::vector<Planned>& plan);  // each planned request's new tokens
  // Loads what the tiers below the pool have of an admitted prompt beyond
  // its cached prefix, as far as this step's load budget goes: r.loading
  // stays set while blocks are left for a later step.
  void load_from_tiers(Running& r);
  // This step's bytes for tier loads: unbounded while nothing decodes; else
  // a tenth of the last step's time at the measured copy speed (at least
  // one block; one until a copy has been timed), so a stream's next token
  // never waits for a whole prompt's KV to be copied into the pool.
  int64_t load_budget() const;
  // Requests left waiting by this step's admission: their disk blocks are
  // read ahead on the tiers' I/O thread (KvTiers::prefetch), once each.
  void prefetch_waiting();
  // The prefetch policy keeps `q` waiting for its read-ahead.
  bool awaits_prefetch(const Request& q) const;
  // The lineage of q's KV in the tiers (kvstore/kv_block.hpp): 0 for the
  // base model, else its adapter's; nullopt when its KV stays out of them
  // (its own scale or stacked adapters: private KV; an adapter with no
  // lineage).
  std::optional<uint64_t> tier_lineage(const Request& q) const;
  void finish(Running& r, FinishReason reason, std::vector<TokenEvent>& events, const std::string& error = {},
              ErrorKind kind = ErrorKind::none);
  TokenEvent event_for(const Request& r) const;
  // How a request ends after its latest output token (none: it goes on). A
  // complete structured output ends it whatever ignore_eos says.
  FinishReason stop_reason(const Request& q, bool constraint_done) const;
  // min_new_tokens not reached yet: takes EOS (unless ignored) and the stop
  // ids out of `mask` (empty: every token of the vocabulary allowed).
  void hold_back_stops(const Request& q, std::vector<uint32_t>& mask) const;

  double now() const;
  // Compiles r's constraint and walks it over the output r already has (a
  // request resumed or migrated from another engine); why not, if it cannot.
  std::optional<std::string> start_constraint(Request& r) const;

  SchedulerConfig config_;
  KvService& kv_;
  Worker& worker_;
  std::unique_ptr<Drafter> drafter_;  // null: no speculation
  // The n-gram drafter's memory across requests; null unless
  // speculative.ngram_capacity > 0. Its contexts run this many tokens
  // longer than the request's own lookup.
  static constexpr int32_t kTableContextExtra = 4;
  std::unique_ptr<NgramTable> ngram_table_;
  // Requests' predicted outputs, looked up whatever drafter_ is but a draft model.
  PredictionLookup prediction_lookup_{config_.speculative.ngram_min, config_.speculative.ngram_max};
  DraftCost draft_cost_;              // what a decode row costs here, measured
  DraftPace engine_pace_{1};          // every request's verifies: the prior of a new one
  StepBudget budget_;
  std::deque<Request> waiting_;
  std::set<int32_t> adapters_;
  // Kept after an adapter is dropped: ids are never reused, and its KV may
  // still be cached (and evicted to the tiers) after it goes.
  std::map<int32_t, uint64_t> adapter_lineages_;
  std::deque<Running> running_;  // stable addresses for Planned pointers within a step
  std::deque<Running> held_, reserved_;  // disaggregation: KV kept for a transfer, or awaiting one
  std::vector<TokenEvent> pending_;      // events of activate(), sent with the next step
  std::function<void(std::vector<TokenEvent>)> plan_listener_;
  uint64_t step_number_ = 0;             // ForwardBatch::step of the last step run
  std::vector<uint64_t> aborts_, stops_;
  int64_t next_arrival_ = 0;
  bool memory_short_ = false;  // the last prefill did not fit: finish what is running first
  int64_t load_budget_ = 0;           // bytes tier loads may still copy in this step
  double last_step_seconds_ = 0;      // the worker's time for the latest step
  double load_seconds_per_byte_ = 0;  // measured tier loads; 0 until the first
  SchedulerStats stats_;
};

}  // namespace actorlm
