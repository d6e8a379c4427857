#pragma once
// The whole engine inside an application's caf::actor_system:
//
//   client ─GenerateRequest─► tokenizer ─TokenizedRequest─► scheduler ◄─► radix / pool / worker
//                               │ register (stops, client)      │ TokenStream
//                               ▼                               ▼
//                           detokenizer ────────TextDelta──────► client
//
// Apps that speak CAF send (generate_atom, WireMessage{GenerateRequest},
// client) to handle() and receive (WireMessage{TextDelta}) until a delta
// carries a finish reason. Apps that do not can use generate() below, which
// does exactly that on their behalf.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/engine_stats.hpp"
#include "grammar/constraint.hpp"
#include "kernels/sampling_params.hpp"
#include "model/llama_weights.hpp"
#include "scheduler/scheduler.hpp"
#include "scheduler/stats_board.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/tool_calls.hpp"

namespace actorlm {

// A LoRA adapter to load with the model (--lora NAME=PATH): requests pick
// it by name (GenerateOptions::adapter). scale multiplies its alpha / rank.
struct LoraSpec {
  std::string name;
  std::string path;
  float scale = 1.0f;
};

// The adapters an engine serves: name, worker id, file, bytes (half precision, as kept).
struct AdapterInfo {
  std::string name;
  int32_t id = 0;
  std::string path;
  int64_t bytes = 0;
};

// An adapter name requests can carry: 1-64 of letters, digits, '.', '_'
// and '-', and not "default" (the base model's other name).
bool valid_adapter_name(std::string_view name);

// Why an adapter could not be loaded or unloaded (an HTTP status's worth).
struct AdapterRefusal {
  enum class Kind { invalid, exists, unknown, in_use, failed } kind = Kind::failed;
  std::string message;
};

struct EngineConfig {
  std::string model_path;          // GGUF file or Hugging Face folder
  std::vector<LoraSpec> lora;      // LoRA adapters (model/lora_adapter.hpp), CPU backend
  // The most the adapters' matrices (half precision) may take together (loaded at
  // start or at run time).
  int64_t max_lora_bytes = int64_t{2} << 30;
  // Speculative decoding's draft model (scheduler.speculative.algorithm ==
  // draft): a GGUF file or Hugging Face folder with the same vocabulary,
  // run on the same device beside the target (model/draft_model.hpp).
  std::string draft_model_path;
  int threads = 0;                 // CPU backend threads; 0 = all
  int64_t kv_tokens = 16384;       // KV pool rows; 0 = as many as the device holds (cpu: 16384)
  std::string device = "cpu";      // "cpu" or "cuda"
  double mem_fraction_static = 0.85;    // cuda, kv_tokens 0: weights + KV share of GPU memory
  std::string kv_cache_dtype = "auto";  // auto (float32), f16 (cpu) or bf16 (cuda)
  int32_t page_size = 1;
  int32_t max_requests = 64;       // request slots
  bool disable_radix_cache = false;
  EvictionPolicy radix_eviction = EvictionPolicy::lru;  // --radix-eviction-policy
  SchedulerConfig scheduler;       // max_context 0 = the model's
  LoadProgress progress;
  // Chat messages: special-token text in a role or content becomes special
  // tokens (as every peer does) instead of plain text. Lets message text
  // open and close turns, so only for callers that trust every client.
  bool special_tokens_in_content = false;
  // Jinja source of a chat template to use instead of the model's own
  // (--chat-template-file); empty: the model's.
  std::string chat_template;
  // The KV cache's tiers below the pool (scheduler/kv_tiers.hpp). The host
  // tier: bytes of RAM (0: none), and the element type it keeps KV in. The
  // disk tier: files here, found again after a restart (empty: none).
  int64_t hicache_host_bytes = 0;
  KvHostDtype hicache_dtype = KvHostDtype::same;
  HiCacheWritePolicy hicache_write_policy = HiCacheWritePolicy::write_through;
  std::string hicache_storage_dir;
  int64_t hicache_storage_bytes = 16ll << 30;
  // How long the worker may go without a heartbeat or a result before it is
  // lost and its requests fail (--worker-timeout). Never how long a step
  // takes: the worker beats every quarter of this while it computes.
  std::chrono::milliseconds worker_silence_timeout{30'000};
  // How long a request waits while the scheduler publishes no step at all
  // before it fails (--stall-timeout). Queueing behind other work is not a
  // stall: any step published in the wait starts it again. Catches an
  // engine that is alive but stuck (a worker that beats but never returns).
  std::chrono::milliseconds stall_timeout{600'000};
};

struct GenerateOptions {
  std::vector<int32_t> input_ids;     // token ids; when set, prompt and messages are ignored
  std::string prompt;                 // used when messages is empty
  std::vector<ChatMessage> messages;  // rendered through the model's chat template
  bool chat = true;                   // prompt as one user message through the template
  // Chat: a JSON object of extra template variables (chat_template_kwargs);
  // empty: none.
  std::string template_kwargs;
  // Chat: OpenAI's tools list as JSON text (empty: none), shown to the model
  // through its template, or in a system message when the template has no
  // place for tools (ToolFormat::generic).
  std::string tools;
  SamplingParams sampling;
  int32_t max_new_tokens = 256;
  // The caller asked for max_new_tokens (OpenAI's max_tokens): a prompt that
  // leaves the context less room is refused, not cut short at the context.
  bool max_new_tokens_strict = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // vLLM's min_tokens: no EOS, stop token or stop string ends the output
  // before it has this many tokens (0..max_new_tokens).
  int32_t min_new_tokens = 0;
  // Structured output: the output must match this (a JSON schema, any JSON
  // object, a regex or an EBNF grammar); a spec that does not compile fails
  // the request with the compiler's message.
  ConstraintSpec constraint;
  bool logprobs = false;   // report each token's logprob (TextDeltaEvent::logprobs)
  int top_logprobs = 0;    // and this many alternatives, 0..20
  // Completions' echo with logprobs: the prompt's tokens too
  // (TextDeltaEvent::prompt_logprobs). The prompt then matches no cached
  // prefix: every position's logits are computed.
  bool prompt_logprobs = false;
  // How urgent it is, in [-kMaxPriority, kMaxPriority]: used where the engine
  // schedules by priority (SchedulerConfig::queue), ignored elsewhere.
  int32_t priority = 0;
  // The LoRA adapter to run with, by name (Engine::adapters()); empty: the
  // base model. A name the engine does not serve fails the request.
  // adapter_scale multiplies the scale the adapter was loaded with, for this
  // request only (0 < |s| <= kMaxAdapterScale); at any value but 1 the
  // request shares no cached prefix (Request::shares_kv).
  std::string adapter;
  float adapter_scale = 1.0f;
  // Further adapters by name with their scales, applied after the first in
  // this order (llama-server's `lora` list naming several).
  std::vector<std::pair<std::string, float>> stacked_adapters;
  // Its tenant (scheduler QueuePolicy::tenant_weights; 0: none), and that
  // tenant's weight where the engine may not know it (a cluster's nodes);
  // 0: the engine's own table.
  int32_t tenant = 0;
  double tenant_weight = 0;
  // The same for its KV quota in tokens (QueuePolicy::tenant_kv_quotas).
  int64_t tenant_kv_quota = 0;
  // Speculative decoding: the most tokens drafted per step (llama-server's
  // speculative.n_max; -1: the engine's, 0: none, never more than the
  // engine's), and OpenAI's predicted output: text the output is expected
  // to repeat, where drafts are looked up first (Request::prediction).
  int32_t max_draft_tokens = -1;
  std::string prediction;
  // 0: the engine numbers the request. A caller that must be able to abort
  // a request before its first delta arrives takes one from
  // Engine::new_request_id() and passes it here.
  uint64_t request_id = 0;
};

// One generated token as OpenAI's logprobs report it. `top` holds the most
// likely alternatives (their own `top` empty).
struct TokenLogprobInfo {
  int32_t token_id = 0;
  std::string piece;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;  // NaN for a prompt's first token, which nothing predicts
  std::vector<TokenLogprobInfo> top;
};

struct TextDeltaEvent {
  uint64_t request_id = 0;
  std::string text;
  FinishReason finish = FinishReason::none;
  std::string error;
  ErrorKind error_kind = ErrorKind::none;  // with an error: whose fault, for an HTTP status
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int32_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding
  std::vector<TokenLogprobInfo> logprobs;  // the tokens behind `text`, when asked for
  std::vector<TokenLogprobInfo> prompt_logprobs;  // every prompt token, once, when asked for
};

// What an Engine puts its tokenizer and detokenizer in front of when it does
// not build its own core: cluster/ makes these for a head over engine nodes
// or over a remote worker (cluster/roles/head.hpp).
struct EngineParts {
  ModelConfig model;
  std::shared_ptr<const Tokenizer> tok;
  // Answers what a local scheduler does (generate, abort, stop, stats,
  // flush), and status_atom when counts_nodes.
  caf::actor scheduler;
  caf::actor detokenizer;  // the engine tells it `scheduler`
  std::string device;
  int64_t kv_tokens = 0;   // 0: read from the scheduler's stats
  int32_t max_context = 0;
  bool counts_nodes = false;
  // The scheduler's structured-output compiler when it runs in this process
  // (grammars are then compiled before requests reach it); may be null.
  std::shared_ptr<ConstraintCompiler> constraints;
  std::function<void()> stop;  // stops what the parts own; called once, by ~Engine
  // A scheduler of this process: its published figures and its KV managers,
  // so that stats() never waits for a step. Null: stats() asks `scheduler`.
  std::shared_ptr<StatsBoard> board;
  caf::actor pool, radix;
  std::vector<AdapterInfo> adapters;  // LoRA adapters the scheduler's worker holds
  // The adapters are a remote worker's, loaded at its start: run-time
  // loads and unloads are refused.
  bool adapters_fixed = false;
  // The adapters are the nodes' (a head over nodes): a run-time load names
  // a file in each node's own --lora-dir, and goes to every node through
  // `scheduler` (the router).
  bool adapters_on_nodes = false;
  // Where the adapters are kept elsewhere, asked at each use instead of
  // `adapters` (a head over nodes: the router's set, which other heads
  // sharing the nodes change too). A load through this engine then leaves
  // the adapter's id to `scheduler` (AdapterChange::id 0).
  std::function<std::vector<AdapterInfo>()> live_adapters;
};

class Engine {
 public:
  // A local engine: loads the model and spawns its own core.
  Engine(caf::actor_system& system, EngineConfig config);
  // An engine in front of parts another layer built (cluster/roles/head.hpp).
  Engine(caf::actor_system& system, const EngineConfig& config, EngineParts parts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  caf::actor handle() const;
  const ModelConfig& model_config() const;
  // What the worker runs on ("cpu", "cuda: <device name>", or a head's description)
  // and its KV pool size in tokens (a head: its joined nodes' total).
  const std::string& device() const;
  int64_t kv_tokens() const;
  // Prompt + output tokens one request may hold.
  int32_t max_context() const;
  // How this model is shown tools and writes its calls (its chat template's
  // convention).
  ToolFormat tool_format() const;
  // The LoRA adapters requests may name (GenerateOptions::adapter).
  std::vector<AdapterInfo> adapters() const;
  // Where a loaded adapter's file is read: here (`path` is the file's
  // path), on each node of a head (`path` names a file in each node's own
  // --lora-dir, which the nodes resolve), or nowhere (a remote worker's
  // adapters are fixed: loads and unloads are refused).
  enum class AdapterFiles { here, on_the_nodes, fixed };
  AdapterFiles adapter_files() const;
  // LoRA adapters at run time (vLLM's /v1/load_lora_adapter and
  // /v1/unload_lora_adapter): the worker reads the file between two steps,
  // then requests may name it; an adapter a request still uses stays.
  // Each load takes a new id (ids are never reused: see scheduler/request.hpp),
  // so a process loads at most kMaxAdapterId adapters in its life.
  std::optional<AdapterRefusal> load_adapter(const std::string& name, const std::string& path, float scale = 1.0f);
  std::optional<AdapterRefusal> unload_adapter(const std::string& name);
  // The model's tokenizer, as a request's text is tokenized (add_special:
  // the beginning-of-sequence token where the model adds one; parse_special:
  // control-token text becomes those tokens).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // nullopt when an id is outside the vocabulary.
  std::optional<std::string> detokenize(std::span<const int32_t> ids) const;

  // Streams one request; blocks until it finishes. Thread-safe: many threads
  // may call it at once (they are batched together). Returns the last delta.
  TextDeltaEvent generate(const GenerateOptions& options, const std::function<void(const TextDeltaEvent&)>& on_delta);
  // Blocking convenience: the whole text (and the final delta in *last).
  std::string generate_text(const GenerateOptions& options, TextDeltaEvent* last = nullptr);
  // A fresh request id for GenerateOptions::request_id.
  uint64_t new_request_id();
  // Ends a request with FinishReason::abort (its KV is freed). An id the
  // scheduler does not know (yet) is ignored.
  void abort(uint64_t request_id);
  // self_check: also verify the KV pool invariant (meaningful when idle).
  // Without self_check a local engine answers from the figures its
  // scheduler published after its last step and from the KV managers,
  // within a second whatever the worker is computing; with it (and for a
  // cluster head) the scheduler answers between steps.
  EngineStatsSnapshot stats(bool self_check = false);
  // Why the worker is gone for good ("" while it serves, or when this
  // process does not run the scheduler). Never waits.
  std::string worker_lost() const;
  // Whether this engine counts cluster nodes (nodes_joined() asks a router).
  bool counts_nodes() const;
  // A head over engine nodes: how many nodes are joined now, of how many.
  // Asks the head's router only (no node is asked, so a hung node cannot
  // slow it down). {0, 0} unless the parts count nodes.
  std::pair<int, int> nodes_joined();
  // A head over engine nodes: drains the node (by its index in --node order
  // or its host:port; on = false takes it back): no new request goes there
  // and its running requests move to other nodes with their KV. The node's
  // state as JSON, or an error starting with "error: ".
  std::string drain_node(const std::string& node, bool on);
  // Frees every unlocked cached row.
  void flush_cache();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
