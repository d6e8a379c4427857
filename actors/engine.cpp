#include "actors/engine.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <functional>
#include <mutex>
#include <optional>

#include "actors/actor_kv_service.hpp"
#include "actors/detokenizer_actor.hpp"
#include "actors/engine_core.hpp"
#include "actors/silence.hpp"
#include "actors/stream_messages.hpp"
#include "actors/tokenizer_actor.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "messages/sampling_conversion.hpp"

namespace actorlm {

struct Engine::Impl {
  caf::actor_system& system;
  ModelConfig model;
  std::shared_ptr<const Tokenizer> tok;
  caf::actor scheduler;  // the core's scheduler, or what cluster/ put there
  caf::actor detokenizer, tokenizer;
  std::atomic<uint64_t> next_id{1};
  std::string device;
  int64_t kv_tokens = 0;
  int32_t max_context = 0;
  bool counts_nodes = false;
  bool adapters_fixed = false;  // EngineParts::adapters_fixed
  bool adapters_on_nodes = false;  // EngineParts::adapters_on_nodes
  std::function<std::vector<AdapterInfo>()> live_adapters;  // EngineParts::live_adapters
  ToolFormat tool_format = ToolFormat::generic;
  std::function<void()> stop;
  std::shared_ptr<StatsBoard> board;  // see EngineParts::board
  caf::actor pool, radix;
  std::chrono::milliseconds stall_timeout{600'000};  // EngineConfig::stall_timeout
  std::vector<AdapterInfo> adapters;  // under adapters_mutex: HTTP threads read it
  mutable std::mutex adapters_mutex;
  std::mutex adapter_changes;  // one load or unload at a time
  int32_t next_adapter = 1;
  int64_t max_lora_bytes = 0;
  explicit Impl(caf::actor_system& s) : system(s) {}
};

namespace {

// A local engine's parts: the model loaded here, its own core.
EngineParts local_parts(caf::actor_system& system, const EngineConfig& config) {
  EngineParts p;
  p.tok = load_tokenizer(config.model_path);
  p.detokenizer = spawn_detokenizer(system, p.tok);
  EngineCore core = spawn_engine_core(system, config, *p.tok, p.detokenizer);
  p.model = core.model;
  p.scheduler = core.scheduler;
  p.device = core.device;
  p.kv_tokens = core.kv_tokens;
  p.max_context = core.max_context;
  p.constraints = core.constraints;
  p.board = core.board;
  p.pool = core.pool;
  p.radix = core.radix;
  p.adapters = core.adapters;
  p.stop = [core] { stop_engine_core(core); };
  return p;
}

}  // namespace

Engine::Engine(caf::actor_system& system, EngineConfig config) : Engine(system, config, local_parts(system, config)) {}

Engine::Engine(caf::actor_system& system, const EngineConfig& config, EngineParts parts)
    : impl_(std::make_unique<Impl>(system)) {
  auto& m = *impl_;
  m.model = std::move(parts.model);
  m.tok = std::move(parts.tok);
  m.scheduler = std::move(parts.scheduler);
  m.detokenizer = std::move(parts.detokenizer);
  m.device = std::move(parts.device);
  m.kv_tokens = parts.kv_tokens;
  m.max_context = parts.max_context;
  m.counts_nodes = parts.counts_nodes;
  m.adapters_fixed = parts.adapters_fixed;
  m.adapters_on_nodes = parts.adapters_on_nodes;
  m.live_adapters = std::move(parts.live_adapters);
  m.stop = std::move(parts.stop);
  m.board = std::move(parts.board);
  m.pool = std::move(parts.pool);
  m.radix = std::move(parts.radix);
  m.stall_timeout = config.stall_timeout;
  m.adapters = std::move(parts.adapters);
  for (const AdapterInfo& a : m.adapters) m.next_adapter = std::max(m.next_adapter, a.id + 1);
  m.max_lora_bytes = config.max_lora_bytes;
  caf::anon_send(m.detokenizer, m.scheduler);
  m.tokenizer = spawn_tokenizer(system, m.tok, m.scheduler, m.detokenizer, config.special_tokens_in_content,
                                config.chat_template, std::move(parts.constraints));
  if (m.kv_tokens == 0) m.kv_tokens = stats().kv.capacity;
  m.tool_format = tool_format_for(*m.tok, config.chat_template);
}

Engine::~Engine() {
  auto& m = *impl_;
  if (m.stop) m.stop();
  for (const auto& a : {m.tokenizer, m.detokenizer}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

caf::actor Engine::handle() const { return impl_->tokenizer; }
const ModelConfig& Engine::model_config() const { return impl_->model; }
const std::string& Engine::device() const { return impl_->device; }
int64_t Engine::kv_tokens() const { return impl_->kv_tokens; }
int32_t Engine::max_context() const { return impl_->max_context; }
ToolFormat Engine::tool_format() const { return impl_->tool_format; }
std::vector<AdapterInfo> Engine::adapters() const {
  if (impl_->live_adapters) return impl_->live_adapters();
  std::lock_guard lock(impl_->adapters_mutex);
  return impl_->adapters;
}

bool valid_adapter_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && name != "default" &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
             std::string_view::npos;
}

namespace {

// One AdapterChange through the scheduler (which asks its worker); the
// reply's error, or its bytes and matrices.
fb::AdapterReplyT change_adapter(caf::actor_system& system, const caf::actor& scheduler, fb::AdapterChangeT change) {
  fb::AdapterReplyT out;
  caf::scoped_actor self{system};
  std::vector<uint8_t> bytes;
  self->request(scheduler, std::chrono::minutes(10), adapter_atom::value, WireMessage{msg::pack(change)})
      .receive([&](WireMessage& reply) { bytes = std::move(reply.bytes); },
               [&](const caf::error& err) { out.error = "the scheduler did not answer: " + system.render(err); });
  if (!out.error.empty()) return out;
  std::string err;
  auto r = msg::unpack<fb::AdapterReply>(bytes, &err);
  if (!r) out.error = "unreadable reply: " + err;
  return r ? std::move(*r) : out;
}

}  // namespace

// A head driving a remote worker serves the adapters the worker loaded at
// start; the worker node has no HTTP port to change them on.
constexpr const char* kOnTheNodes =
    "a head driving a worker node serves the LoRA adapters the worker loaded at start (--lora on the node); "
    "restart the worker node with the adapters to change them";

Engine::AdapterFiles Engine::adapter_files() const {
  return impl_->adapters_fixed ? AdapterFiles::fixed : impl_->adapters_on_nodes ? AdapterFiles::on_the_nodes : AdapterFiles::here;
}

std::optional<AdapterRefusal> Engine::load_adapter(const std::string& name, const std::string& path, float scale) {
  auto& m = *impl_;
  using K = AdapterRefusal::Kind;
  if (!valid_adapter_name(name)) {
    return AdapterRefusal{K::invalid, "an adapter name is 1-64 of letters, digits, '.', '_' and '-' (not 'default')"};
  }
  if (!std::isfinite(scale)) return AdapterRefusal{K::invalid, "the adapter's scale must be a finite number"};
  if (m.adapters_fixed) return AdapterRefusal{K::invalid, kOnTheNodes};
  std::lock_guard changes(m.adapter_changes);
  int64_t used = 0;
  for (const AdapterInfo& a : adapters()) {
    if (a.name == name) return AdapterRefusal{K::exists, "an adapter named '" + name + "' is loaded already"};
    used += a.bytes;
  }
  if (!m.live_adapters && m.next_adapter > kMaxAdapterId) {
    return AdapterRefusal{K::failed, "this process has loaded " + std::to_string(kMaxAdapterId) +
                                         " adapters, the most one process may (restart it to load more)"};
  }
  fb::AdapterChangeT change;
  change.load = true;
  change.id = m.live_adapters ? 0 : m.next_adapter++;
  change.name = name;
  change.path = path;
  change.scale = scale;
  change.max_bytes = std::max<int64_t>(m.max_lora_bytes - used, 0);
  const fb::AdapterReplyT r = change_adapter(m.system, m.scheduler, change);
  if (!r.error.empty()) return AdapterRefusal{K::invalid, r.error};
  std::lock_guard lock(m.adapters_mutex);
  if (!m.live_adapters) m.adapters.push_back({name, change.id, path, r.bytes});
  std::fprintf(stderr, "actorlm: LoRA adapter %s loaded: %s, %lld matrices, %.1f MB\n", name.c_str(), path.c_str(),
               static_cast<long long>(r.matrices), double(r.bytes) / 1e6);
  return std::nullopt;
}

std::optional<AdapterRefusal> Engine::unload_adapter(const std::string& name) {
  auto& m = *impl_;
  using K = AdapterRefusal::Kind;
  if (m.adapters_fixed) return AdapterRefusal{K::invalid, kOnTheNodes};
  std::lock_guard changes(m.adapter_changes);
  int32_t id = 0;
  for (const AdapterInfo& a : adapters()) {
    if (a.name == name) id = a.id;
  }
  if (id == 0) return AdapterRefusal{K::unknown, "no LoRA adapter named '" + name + "' is loaded"};
  fb::AdapterChangeT change;
  change.load = false;
  change.id = id;
  const fb::AdapterReplyT r = change_adapter(m.system, m.scheduler, change);
  if (!r.error.empty()) {
    return AdapterRefusal{r.error.find("in use") != std::string::npos ? K::in_use : K::failed, r.error};
  }
  std::lock_guard lock(m.adapters_mutex);
  std::erase_if(m.adapters, [&](const AdapterInfo& a) { return a.id == id; });
  std::fprintf(stderr, "actorlm: LoRA adapter %s unloaded\n", name.c_str());
  return std::nullopt;
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->tok->encode(text, add_special && impl_->tok->add_bos_by_default(), parse_special);
}

std::optional<std::string> Engine::detokenize(std::span<const int32_t> ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= impl_->tok->vocab_size()) return std::nullopt;
  }
  return impl_->tok->decode(ids);
}

namespace {

// A token's logprob with its alternatives, tops[at * per, (at + 1) * per).
TokenLogprobInfo logprob_info(const Tokenizer& tok, int32_t id, float logprob, const std::vector<fb::TokenLogprob>& tops,
                              size_t at, size_t per) {
  TokenLogprobInfo info{id, tok.token_to_piece(id), logprob, {}};
  for (size_t k = 0; per && (at + 1) * per <= tops.size() && k < per; ++k) {
    const fb::TokenLogprob& alt = tops[at * per + k];
    info.top.push_back({alt.token_id(), tok.token_to_piece(alt.token_id()), alt.logprob(), {}});
  }
  return info;
}

}  // namespace

TextDeltaEvent Engine::generate(const GenerateOptions& o, const std::function<void(const TextDeltaEvent&)>& on_delta) {
  caf::scoped_actor self{impl_->system};
  fb::GenerateRequestT g;
  g.request_id = o.request_id != 0 ? o.request_id : impl_->next_id++;
  if (!o.adapter.empty() || !o.stacked_adapters.empty()) {
    // Names to the engine's ids; a name it does not serve (or further
    // adapters without a first) fails the request here.
    const std::vector<AdapterInfo> list = adapters();
    std::optional<std::string> refusal;
    auto id_of = [&](const std::string& name) {
      const auto a = std::find_if(list.begin(), list.end(), [&](const AdapterInfo& x) { return x.name == name; });
      if (a != list.end()) return a->id;
      if (!refusal) refusal = name.empty() ? "further adapters need a first one (GenerateOptions::adapter)"
                                           : "no LoRA adapter named '" + name + "' is loaded";
      return 0;
    };
    g.adapter = id_of(o.adapter);
    for (const auto& [name, scale] : o.stacked_adapters) {
      g.stacked_adapters.push_back(id_of(name));
      g.stacked_scales.push_back(scale);
    }
    if (refusal) {
      TextDeltaEvent refused;
      refused.request_id = g.request_id;
      refused.finish = FinishReason::error;
      refused.error = *refusal;
      refused.error_kind = ErrorKind::invalid_request;
      on_delta(refused);
      return refused;
    }
  }
  if (!o.input_ids.empty()) {
    g.input_ids = o.input_ids;
  } else if (!o.messages.empty() || o.chat) {
    std::vector<ChatMessage> msgs = o.messages;
    if (msgs.empty()) msgs.push_back({"user", o.prompt});
    for (const auto& c : msgs) {
      auto cm = std::make_unique<fb::ChatMessageT>();
      cm->role = c.role;
      cm->content = c.content;
      cm->tool_calls = c.tool_calls;
      cm->tool_call_id = c.tool_call_id;
      g.messages.push_back(std::move(cm));
    }
    g.template_kwargs = o.template_kwargs;
    g.tools = o.tools;
  } else {
    g.text = o.prompt;
  }
  g.sampling = msg::to_fb(o.sampling);
  g.stop = std::make_unique<fb::StopConditionsT>();
  g.stop->max_new_tokens = o.max_new_tokens;
  g.stop->stop_strings = o.stop;
  g.stop->ignore_eos = o.ignore_eos;
  g.stop->max_new_tokens_strict = o.max_new_tokens_strict;
  g.stop->min_new_tokens = o.min_new_tokens;
  g.logprobs = o.logprobs;
  g.top_logprobs = o.logprobs ? o.top_logprobs : 0;
  g.prompt_logprobs = o.logprobs && o.prompt_logprobs;
  g.priority = o.priority;
  g.tenant = o.tenant;
  g.tenant_weight = o.tenant_weight;
  g.tenant_kv_quota = o.tenant_kv_quota;
  g.adapter_scale = o.adapter_scale;
  g.max_draft_tokens = o.max_draft_tokens;
  g.prediction = o.prediction;
  if (o.constraint.active()) {
    g.constraint = std::make_unique<fb::ConstraintT>();
    g.constraint->kind = static_cast<uint8_t>(o.constraint.kind);
    g.constraint->text = o.constraint.text;
    g.constraint->prefix = o.constraint.prefix;
    g.constraint->suffix = o.constraint.suffix;
  }
  self->send(impl_->tokenizer, generate_atom::value, WireMessage{msg::pack(g)}, caf::actor_cast<caf::actor>(self));
  TextDeltaEvent last;
  last.request_id = g.request_id;
  bool done = false;
  // Steps the scheduler has published (see the wait below).
  int64_t steps_seen = impl_->board ? impl_->board->read().publications : -1;
  // On the steady clock (actors/silence.hpp): caf::after runs on the wall
  // clock, so its firing only means "look again".
  Silence quiet(impl_->stall_timeout);
  while (!done) {
    bool looked = false;
    self->receive(
        [&](const WireMessage& in) {
          std::string err;
          auto d = msg::unpack<fb::TextDelta>(in.bytes, &err);
          TextDeltaEvent ev;
          ev.request_id = g.request_id;
          if (!d) {
            ev.finish = FinishReason::error;
            ev.error = "unreadable reply: " + err;
            ev.error_kind = ErrorKind::internal;
          } else {
            ev.text = d->text;
            ev.finish = from_fb(d->finish_reason);
            ev.error = d->error;
            ev.error_kind = from_fb(d->error_kind);
            if (o.logprobs) {
              // Token pieces come from the tokenizer here, so clients need none.
              const auto per = static_cast<size_t>(std::max(d->top_logprobs_per_token, 0));
              for (size_t i = 0; i < d->token_ids.size(); ++i) {
                // The end-of-turn token that stopped the request is not part
                // of the text, so not of its logprobs either (as OpenAI).
                if (d->finish_reason == fb::FinishReason::Stop && i + 1 == d->token_ids.size() &&
                    impl_->tok->is_end_of_generation(d->token_ids[i])) {
                  break;
                }
                ev.logprobs.push_back(logprob_info(*impl_->tok, d->token_ids[i], i < d->logprobs.size() ? d->logprobs[i] : 0.0f,
                                                   d->top_logprobs, i, per));
              }
              // The prompt's first token has no alternatives (see request.fbs).
              const auto prompt_per = static_cast<size_t>(std::max(d->prompt_top_per_token, 0));
              for (size_t i = 0; i < d->prompt_logprobs.size(); ++i) {
                const fb::TokenLogprob& p = d->prompt_logprobs[i];
                ev.prompt_logprobs.push_back(
                    logprob_info(*impl_->tok, p.token_id(), p.logprob(), d->prompt_top_logprobs, i - 1, i == 0 ? 0 : prompt_per));
              }
            }
            if (d->usage) {
              ev.prompt_tokens = d->usage->prompt_tokens;
              ev.completion_tokens = d->usage->completion_tokens;
              ev.cached_tokens = d->usage->cached_tokens;
              ev.draft_tokens = d->usage->draft_tokens;
              ev.accepted_draft_tokens = d->usage->accepted_draft_tokens;
            }
          }
          if (on_delta) on_delta(ev);
          if (ev.finish != FinishReason::none) {
            last = ev;
            done = true;
          }
        },
        caf::after(quiet.left()) >> [&] { looked = true; });
    if (!looked) {
      quiet.heard();
      continue;
    }
    // Waiting is not failing: a request may queue behind others for
    // longer than this while the engine works (issue 32: 4 of 32 long
    // prompts on a 3B model were cut off here after a fixed 10 minutes
    // in the queue). It fails only if the scheduler published no step
    // at all in the whole wait. (A lost worker fails requests by itself.)
    if (impl_->board) {
      const int64_t steps = impl_->board->read().publications;
      if (steps != steps_seen) {
        steps_seen = steps;
        quiet.heard();
        continue;
      }
    }
    if (!quiet.over()) continue;
    abort(g.request_id);
    last.finish = FinishReason::error;
    char why[96];
    std::snprintf(why, sizeof why, "the engine made no progress for %g s (--stall-timeout)",
                  double(impl_->stall_timeout.count()) / 1000.0);
    last.error = why;
    // 503: the server cannot serve now; another may (a client retries).
    last.error_kind = ErrorKind::unavailable;
    // Streamed like any other failure (a stream otherwise ended with
    // [DONE] and no sign of the error).
    if (on_delta) on_delta(last);
    done = true;
  }
  return last;
}

std::string Engine::generate_text(const GenerateOptions& o, TextDeltaEvent* last) {
  std::string text;
  TextDeltaEvent end = generate(o, [&](const TextDeltaEvent& d) { text += d.text; });
  if (last) *last = end;
  return text;
}

uint64_t Engine::new_request_id() { return impl_->next_id++; }

void Engine::abort(uint64_t request_id) {
  fb::AbortT a;
  a.request_ids = {request_id};
  a.reason = "aborted by the client";
  // From an actor, not anonymously: a head's router takes cancellations only
  // from an actor of its own process (actors/local_sender.hpp),
  // and dropped an anonymous one, so a client that left a head went on
  // costing its nodes the whole generation.
  caf::scoped_actor self{impl_->system};
  self->send(impl_->scheduler, abort_atom::value, WireMessage{msg::pack(a)});
}

std::pair<int, int> Engine::nodes_joined() {
  if (!impl_->counts_nodes) return {0, 0};
  std::pair<int, int> out{0, 0};
  caf::scoped_actor self{impl_->system};
  self->request(impl_->scheduler, std::chrono::seconds(5), status_atom::value)
      .receive([&](int32_t up, int32_t total, const std::string&) { out = {up, total}; },
               [](const caf::error&) {});  // no answer: reported as none joined
  return out;
}

std::string Engine::drain_node(const std::string& node, bool on) {
  if (!impl_->counts_nodes) return "error: this server is not a cluster head over engine nodes";
  std::string out = "error: the head's router did not answer";
  caf::scoped_actor self{impl_->system};
  self->request(impl_->scheduler, std::chrono::seconds(5), drain_atom::value, node, on)
      .receive([&](const std::string& state) { out = state; }, [](const caf::error&) {});
  return out;
}

std::string Engine::worker_lost() const { return impl_->board ? impl_->board->read().worker_lost : std::string(); }
bool Engine::counts_nodes() const { return impl_->counts_nodes; }

EngineStatsSnapshot Engine::stats(bool self_check) {
  caf::scoped_actor self{impl_->system};
  EngineStatsSnapshot out;
  if (impl_->board && impl_->pool && impl_->radix && !self_check) {
    const SchedulerFigures f = impl_->board->read();
    out.running = f.running;
    out.waiting = f.waiting;
    out.scheduler = f.stats;
    out.host = f.host;
    out.storage = f.storage;
    out.worker_lost = f.worker_lost;
    out.worker_restarts = f.worker_restarts;
    out.seconds_per_prefill_token = f.seconds_per_prefill_token;
    out.seconds_per_decode_row = f.seconds_per_decode_row;
    // The managers answer between the scheduler's messages: milliseconds,
    // whatever the worker computes.
    try {
      ActorKvService kv(self.ptr(), impl_->pool, impl_->radix, std::chrono::seconds(1));
      out.kv = kv.usage();
    } catch (const std::exception& e) {
      out.invariant_error = std::string("stats unavailable: ") + e.what();
    }
    return out;
  }
  fb::StatsRequestT q;
  q.self_check = self_check;
  self->request(impl_->scheduler, std::chrono::seconds(30), stats_atom::value, WireMessage{msg::pack(q)})
      .receive(
          [&](const WireMessage& in) {
            std::string err;
            auto st = msg::unpack<fb::EngineStats>(in.bytes, &err);
            if (!st) return;
            out = from_message(*st);
          },
          [&](const caf::error& e) { out.invariant_error = "stats unavailable: " + impl_->system.render(e); });
  return out;
}

void Engine::flush_cache() {
  caf::scoped_actor self{impl_->system};
  self->request(impl_->scheduler, std::chrono::seconds(30), flush_atom::value).receive([](int64_t) {}, [](const caf::error&) {});
}

}  // namespace actorlm
