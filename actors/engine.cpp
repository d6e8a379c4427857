#include "actors/engine.hpp"

#include <caf/all.hpp>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>

#include "actors/actor_kv_service.hpp"
#include "actors/executor_factory.hpp"
#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"
#include "actors/wire.hpp"
#include "actors/worker_actor.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "messages/envelope.hpp"
#include "messages/sampling_conversion.hpp"
#include "model/gguf_file.hpp"
#include "tokenizer/incremental_detokenizer.hpp"

namespace actorlm {
namespace {

fb::FinishReason to_fb(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return fb::FinishReason::Stop;
    case FinishReason::length: return fb::FinishReason::Length;
    case FinishReason::abort: return fb::FinishReason::Abort;
    case FinishReason::error: return fb::FinishReason::Error;
    default: return fb::FinishReason::None;
  }
}

FinishReason from_fb(fb::FinishReason r) {
  switch (r) {
    case fb::FinishReason::Stop: return FinishReason::stop;
    case fb::FinishReason::Length: return FinishReason::length;
    case fb::FinishReason::Abort: return FinishReason::abort;
    case fb::FinishReason::Error: return FinishReason::error;
    default: return FinishReason::none;
  }
}

std::vector<uint8_t> error_delta(uint64_t id, const std::string& error) {
  fb::TextDeltaT d;
  d.request_id = id;
  d.finish_reason = fb::FinishReason::Error;
  d.error = error;
  return msg::pack(d);
}

// ---------------------------------------------------------------- tokenizer
struct TokenizerState {
  std::shared_ptr<const Tokenizer> tok;
  ChatTemplate chat{ChatTemplate::Format::chatml};
  caf::actor scheduler, detokenizer;
  static inline const char* name = "actorlm.tokenizer";
};

caf::behavior tokenizer_actor(caf::stateful_actor<TokenizerState>* self, std::shared_ptr<const Tokenizer> tok,
                              caf::actor scheduler, caf::actor detokenizer) {
  auto& s = self->state;
  s.tok = std::move(tok);
  s.chat = ChatTemplate::from_source(s.tok->chat_template(), nullptr);
  s.scheduler = std::move(scheduler);
  s.detokenizer = std::move(detokenizer);
  return {[self](generate_atom, const WireMessage& in, const caf::actor& client) {
    auto& s = self->state;
    auto opened = msg::open<fb::GenerateRequest>(in.bytes);
    if (!opened) {
      self->send(client, WireMessage{error_delta(0, "rejected request: " + opened.error)});
      return;
    }
    const fb::GenerateRequest& g = *opened.message;
    fb::TokenizedRequestT t;
    t.request_id = g.request_id();
    std::vector<int32_t> end_ids;
    if (g.input_ids() && g.input_ids()->size() > 0) {
      t.input_ids.assign(g.input_ids()->begin(), g.input_ids()->end());
      for (int32_t id : t.input_ids) {
        if (id < 0 || id >= s.tok->vocab_size()) {
          self->send(client, WireMessage{error_delta(g.request_id(), "input_ids holds " + std::to_string(id) +
                                                                         ", outside the vocabulary")});
          return;
        }
      }
    } else if (g.messages() && g.messages()->size() > 0) {
      std::vector<ChatMessage> messages;
      for (const fb::ChatMessage* m : *g.messages()) {
        messages.push_back({m->role() ? m->role()->str() : "", m->content() ? m->content()->str() : ""});
      }
      t.input_ids = s.tok->encode(s.chat.render(messages, true), false, true);
      if (auto eot = s.tok->token_id(s.chat.end_of_turn())) end_ids.push_back(*eot);
    } else {
      std::string text = g.text() ? g.text()->str() : "";
      t.input_ids = s.tok->encode(text, s.tok->add_bos_by_default(), false);
    }
    t.sampling = std::make_unique<fb::SamplingParamsT>();
    if (g.sampling()) g.sampling()->UnPackTo(t.sampling.get());
    t.stop = std::make_unique<fb::StopConditionsT>();
    if (g.stop()) g.stop()->UnPackTo(t.stop.get());
    t.stop->stop_token_ids.insert(t.stop->stop_token_ids.end(), end_ids.begin(), end_ids.end());
    t.logprobs = g.logprobs();
    t.top_logprobs = g.top_logprobs();
    WireMessage tokenized{msg::pack(t)};
    self->send(s.detokenizer, register_atom::value, tokenized, client);
    self->send(s.scheduler, generate_atom::value, std::move(tokenized), client);
  }};
}

// ---------------------------------------------------------------- detokenizer
struct Stream {
  caf::actor client;
  std::unique_ptr<IncrementalDetokenizer> detok;
};

struct DetokenizerState {
  std::shared_ptr<const Tokenizer> tok;
  caf::actor scheduler;
  std::map<uint64_t, Stream> streams;
  std::map<uint64_t, std::vector<std::vector<uint8_t>>> early;  // items that beat their registration
  static inline const char* name = "actorlm.detokenizer";
};

void deliver(caf::stateful_actor<DetokenizerState>* self, const fb::TokenStreamItem& item) {
  auto& s = self->state;
  auto it = s.streams.find(item.request_id());
  if (it == s.streams.end()) return;
  Stream& st = it->second;
  fb::TextDeltaT d;
  d.request_id = item.request_id();
  d.finish_reason = item.finish_reason();
  if (item.error()) d.error = item.error()->str();
  if (item.token_ids()) {
    const int32_t per = item.top_logprobs_per_token();
    for (uint32_t i = 0; i < item.token_ids()->size(); ++i) {
      const int32_t t = item.token_ids()->Get(i);
      if (st.detok->stopped()) break;
      d.token_ids.push_back(t);
      if (item.logprobs() && i < item.logprobs()->size()) d.logprobs.push_back(item.logprobs()->Get(i));
      if (item.top_logprobs() && per > 0 && (i + 1) * static_cast<uint32_t>(per) <= item.top_logprobs()->size()) {
        for (int32_t k = 0; k < per; ++k) d.top_logprobs.push_back(*item.top_logprobs()->Get(i * static_cast<uint32_t>(per) + k));
        d.top_logprobs_per_token = per;
      }
      auto delta = st.detok->push(t);
      d.text += delta.text;
      if (delta.stopped) {
        d.finish_reason = fb::FinishReason::Stop;
        d.matched_stop = delta.matched_stop;
        fb::AbortT stop;
        stop.request_ids = {item.request_id()};
        stop.reason = "stop string";
        self->send(s.scheduler, stop_atom::value, WireMessage{msg::pack(stop)});
      }
    }
  }
  if (d.finish_reason != fb::FinishReason::None) d.text += st.detok->flush();
  if (item.usage()) {
    d.usage = std::make_unique<fb::UsageT>();
    item.usage()->UnPackTo(d.usage.get());
  }
  bool done = d.finish_reason != fb::FinishReason::None;
  self->send(st.client, WireMessage{msg::pack(d)});
  if (done) s.streams.erase(it);
}

caf::behavior detokenizer_actor(caf::stateful_actor<DetokenizerState>* self, std::shared_ptr<const Tokenizer> tok) {
  self->state.tok = std::move(tok);
  return {
      [self](register_atom, const WireMessage& in, const caf::actor& client) {
        auto& s = self->state;
        auto t = msg::open<fb::TokenizedRequest>(in.bytes);
        if (!t) return;
        uint64_t id = t.message->request_id();
        std::vector<std::string> stops;
        if (t.message->stop() && t.message->stop()->stop_strings()) {
          for (const auto* str : *t.message->stop()->stop_strings()) stops.push_back(str->str());
        }
        s.streams[id] = Stream{client, std::make_unique<IncrementalDetokenizer>(*s.tok, stops)};
        auto e = s.early.find(id);
        if (e == s.early.end()) return;
        auto items = std::move(e->second);
        s.early.erase(e);
        for (const auto& bytes : items) {
          auto st = msg::open<fb::TokenStream>(bytes);
          if (st && st.message->items()) {
            for (const fb::TokenStreamItem* item : *st.message->items()) {
              if (item->request_id() == id) deliver(self, *item);
            }
          }
        }
      },
      [self](stream_atom, const WireMessage& in) {
        auto opened = msg::open<fb::TokenStream>(in.bytes);
        if (!opened || !opened.message->items()) return;
        for (const fb::TokenStreamItem* item : *opened.message->items()) {
          if (self->state.streams.count(item->request_id())) {
            deliver(self, *item);
          } else {
            self->state.early[item->request_id()].push_back(in.bytes);
          }
        }
      },
      [self](caf::actor scheduler) { self->state.scheduler = std::move(scheduler); },
  };
}

// ---------------------------------------------------------------- scheduler
std::vector<uint8_t> token_stream(const std::vector<TokenEvent>& events) {
  fb::TokenStreamT ts;
  for (const auto& e : events) {
    auto item = std::make_unique<fb::TokenStreamItemT>();
    item->request_id = e.id;
    if (e.token >= 0) {
      item->token_ids.push_back(e.token);
      item->logprobs.push_back(e.logprob);
      for (const auto& [tok, lp] : e.top) item->top_logprobs.emplace_back(tok, lp);
      item->top_logprobs_per_token = static_cast<int32_t>(e.top.size());
    }
    item->finish_reason = to_fb(e.finish);
    item->error = e.error;
    item->usage = std::make_unique<fb::UsageT>();
    item->usage->prompt_tokens = e.prompt_tokens;
    item->usage->completion_tokens = e.completion_tokens;
    item->usage->cached_tokens = e.cached_tokens;
    ts.items.push_back(std::move(item));
  }
  return msg::pack(ts);
}

void scheduler_actor(caf::blocking_actor* self, SchedulerConfig cfg, caf::actor pool, caf::actor radix,
                     caf::actor worker, caf::actor detokenizer) {
  ActorKvService kv(self, pool, radix);
  ActorWorker w(self, worker);
  Scheduler sched(cfg, kv, w);
  bool running = true;
  std::vector<TokenEvent> rejected;
  auto on_generate = [&](generate_atom, const WireMessage& in, const caf::actor&) {
    auto t = msg::open<fb::TokenizedRequest>(in.bytes);
    if (!t) return;
    const fb::TokenizedRequest& m = *t.message;
    Request r;
    r.id = m.request_id();
    if (m.input_ids()) r.prompt.assign(m.input_ids()->begin(), m.input_ids()->end());
    r.sampling = msg::from_fb(m.sampling());
    if (!r.sampling.has_seed) r.sampling.seed = r.id * 0x9e3779b97f4a7c15ull;
    if (m.stop()) {
      r.stop.max_new_tokens = m.stop()->max_new_tokens();
      if (m.stop()->stop_token_ids()) r.stop.stop_token_ids.assign(m.stop()->stop_token_ids()->begin(), m.stop()->stop_token_ids()->end());
      r.stop.ignore_eos = m.stop()->ignore_eos();
    }
    r.top_logprobs = std::clamp(m.top_logprobs(), 0, 20);
    if (auto err = sched.submit(std::move(r))) {
      TokenEvent e;
      e.id = m.request_id();
      e.finish = FinishReason::error;
      e.error = *err;
      rejected.push_back(e);
    }
  };
  auto ids_of = [](const WireMessage& in) {
    std::vector<uint64_t> ids;
    auto a = msg::open<fb::Abort>(in.bytes);
    if (a && a.message->request_ids()) ids.assign(a.message->request_ids()->begin(), a.message->request_ids()->end());
    return ids;
  };
  auto on_abort = [&](abort_atom, const WireMessage& in) {
    for (uint64_t id : ids_of(in)) sched.abort(id);
  };
  auto on_stop = [&](stop_atom, const WireMessage& in) {
    for (uint64_t id : ids_of(in)) sched.stop(id);
  };
  auto on_stats = [&](stats_atom, const WireMessage& in) -> WireMessage {
    auto q = msg::open<fb::StatsRequest>(in.bytes);
    bool self_check = q && q.message->self_check();
    fb::EngineStatsT st;
    st.running = static_cast<int32_t>(sched.running());
    st.waiting = static_cast<int32_t>(sched.waiting());
    const auto& x = sched.stats();
    st.finished_total = x.finished;
    st.prompt_tokens_total = x.prompt_tokens;
    st.cached_tokens_total = x.cached_tokens;
    st.generated_tokens_total = x.generated_tokens;
    st.cache_hit_rate = x.cache_hit_rate();
    KvUsage u = kv.usage();
    st.pool_capacity_tokens = u.capacity;
    st.pool_free_tokens = u.free;
    st.free_req_slots = u.free_slots;
    st.evictable_tokens = u.evictable;
    st.protected_tokens = u.protected_;
    if (self_check) st.invariant_error = sched.idle() ? kv.check_idle() : "not idle";
    return WireMessage{msg::pack(st)};
  };
  auto on_flush = [&](flush_atom) -> int64_t { return kv.flush_cache(); };
  auto on_shutdown = [&](shutdown_atom) { running = false; };
  while (running) {
    if (sched.idle() && rejected.empty()) {
      self->receive(on_generate, on_abort, on_stop, on_stats, on_flush, on_shutdown);
    }
    for (bool more = true; more && running;) {
      self->receive(on_generate, on_abort, on_stop, on_stats, on_flush, on_shutdown,
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    }
    if (!running) break;
    std::vector<TokenEvent> events = std::move(rejected);
    rejected.clear();
    try {
      auto stepped = sched.step();
      events.insert(events.end(), stepped.begin(), stepped.end());
    } catch (const std::exception& e) {
      // Nothing may hang: every request in flight ends with the error.
      std::fprintf(stderr, "actorlm scheduler: step failed: %s\n", e.what());
      auto failed = sched.fail_all(std::string("engine failure: ") + e.what());
      events.insert(events.end(), failed.begin(), failed.end());
    }
    if (!events.empty()) self->send(detokenizer, stream_atom::value, WireMessage{token_stream(events)});
  }
}

}  // namespace

struct Engine::Impl {
  caf::actor_system& system;
  ModelConfig model;
  std::shared_ptr<const Tokenizer> tok;
  caf::actor pool, radix, worker, scheduler, detokenizer, tokenizer;
  std::atomic<uint64_t> next_id{1};
  std::string device;
  int64_t kv_tokens = 0;
  explicit Impl(caf::actor_system& s) : system(s) {}
};

Engine::Engine(caf::actor_system& system, EngineConfig config) : impl_(std::make_unique<Impl>(system)) {
  auto& m = *impl_;
  LlamaWeights weights = load_llama_weights(config.model_path, config.progress);
  m.model = weights.config;
  namespace fs = std::filesystem;
  m.tok = fs::is_directory(config.model_path)
              ? std::make_shared<const Tokenizer>(Tokenizer::from_hf_json((fs::path(config.model_path) / "tokenizer.json").string()))
              : std::make_shared<const Tokenizer>(Tokenizer::from_gguf(GgufFile::open(config.model_path)));
  SchedulerConfig sc = config.scheduler;
  if (sc.max_context <= 0 || sc.max_context > m.model.max_context) sc.max_context = m.model.max_context;
  if (!sc.eos_id) sc.eos_id = m.tok->eos_id();
  MadeExecutor made = make_executor(std::move(weights),
                                    {config.device, config.threads, config.mem_fraction_static, config.kv_cache_dtype},
                                    config.kv_tokens, config.page_size, config.max_requests, sc.max_context);
  m.device = made.description;
  KvStoreConfig kv{made.kv_tokens, config.page_size, config.max_requests, sc.max_context, config.disable_radix_cache};
  auto runner = std::make_shared<ModelRunner>(
      std::move(made.executor),
      ModelRunnerConfig{.kv_pool_rows = TokenToKVPoolAllocator(kv.capacity_tokens, kv.page_size).pool_rows(),
                        .max_requests = kv.max_requests,
                        .max_context = sc.max_context});
  m.kv_tokens = kv.capacity_tokens;
  m.pool = spawn_pool_manager(system, kv);
  m.radix = spawn_radix_manager(system, kv.page_size, kv.disable_radix_cache);
  m.worker = spawn_worker(system, runner);
  m.detokenizer = system.spawn(detokenizer_actor, m.tok);
  m.scheduler = system.spawn<caf::detached>(scheduler_actor, sc, m.pool, m.radix, m.worker, m.detokenizer);
  caf::anon_send(m.detokenizer, m.scheduler);
  m.tokenizer = system.spawn(tokenizer_actor, m.tok, m.scheduler, m.detokenizer);
}

Engine::~Engine() {
  auto& m = *impl_;
  caf::anon_send(m.scheduler, shutdown_atom::value);
  for (const auto& a : {m.tokenizer, m.detokenizer, m.worker, m.radix, m.pool}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

caf::actor Engine::handle() const { return impl_->tokenizer; }
const ModelConfig& Engine::model_config() const { return impl_->model; }
const std::string& Engine::device() const { return impl_->device; }
int64_t Engine::kv_tokens() const { return impl_->kv_tokens; }

TextDeltaEvent Engine::generate(const GenerateOptions& o, const std::function<void(const TextDeltaEvent&)>& on_delta) {
  caf::scoped_actor self{impl_->system};
  fb::GenerateRequestT g;
  g.request_id = impl_->next_id++;
  if (!o.input_ids.empty()) {
    g.input_ids = o.input_ids;
  } else if (!o.messages.empty() || o.chat) {
    std::vector<ChatMessage> msgs = o.messages;
    if (msgs.empty()) msgs.push_back({"user", o.prompt});
    for (const auto& c : msgs) {
      auto cm = std::make_unique<fb::ChatMessageT>();
      cm->role = c.role;
      cm->content = c.content;
      g.messages.push_back(std::move(cm));
    }
  } else {
    g.text = o.prompt;
  }
  g.sampling = msg::to_fb(o.sampling);
  g.stop = std::make_unique<fb::StopConditionsT>();
  g.stop->max_new_tokens = o.max_new_tokens;
  g.stop->stop_strings = o.stop;
  g.stop->ignore_eos = o.ignore_eos;
  g.logprobs = o.logprobs;
  g.top_logprobs = o.logprobs ? std::clamp(o.top_logprobs, 0, 20) : 0;
  self->send(impl_->tokenizer, generate_atom::value, WireMessage{msg::pack(g)}, caf::actor_cast<caf::actor>(self));
  TextDeltaEvent last;
  last.request_id = g.request_id;
  bool done = false;
  while (!done) {
    self->receive(
        [&](const WireMessage& in) {
          std::string err;
          auto d = msg::unpack<fb::TextDelta>(in.bytes, &err);
          TextDeltaEvent ev;
          ev.request_id = g.request_id;
          if (!d) {
            ev.finish = FinishReason::error;
            ev.error = "unreadable reply: " + err;
          } else {
            ev.text = d->text;
            ev.finish = from_fb(d->finish_reason);
            ev.error = d->error;
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
                TokenLogprobInfo info{d->token_ids[i], impl_->tok->token_to_piece(d->token_ids[i]),
                                      i < d->logprobs.size() ? d->logprobs[i] : 0.0f, {}};
                for (size_t k = 0; per && (i + 1) * per <= d->top_logprobs.size() && k < per; ++k) {
                  const auto& alt = d->top_logprobs[i * per + k];
                  info.top.push_back({alt.token_id(), impl_->tok->token_to_piece(alt.token_id()), alt.logprob(), {}});
                }
                ev.logprobs.push_back(std::move(info));
              }
            }
            if (d->usage) {
              ev.prompt_tokens = d->usage->prompt_tokens;
              ev.completion_tokens = d->usage->completion_tokens;
              ev.cached_tokens = d->usage->cached_tokens;
            }
          }
          if (on_delta) on_delta(ev);
          if (ev.finish != FinishReason::none) {
            last = ev;
            done = true;
          }
        },
        caf::after(std::chrono::minutes(10)) >> [&] {
          abort(g.request_id);
          last.finish = FinishReason::error;
          last.error = "no progress for 10 minutes";
          done = true;
        });
  }
  return last;
}

std::string Engine::generate_text(const GenerateOptions& o, TextDeltaEvent* last) {
  std::string text;
  TextDeltaEvent end = generate(o, [&](const TextDeltaEvent& d) { text += d.text; });
  if (last) *last = end;
  return text;
}

void Engine::abort(uint64_t request_id) {
  fb::AbortT a;
  a.request_ids = {request_id};
  a.reason = "aborted by the client";
  caf::anon_send(impl_->scheduler, abort_atom::value, WireMessage{msg::pack(a)});
}

EngineStatsSnapshot Engine::stats(bool self_check) {
  caf::scoped_actor self{impl_->system};
  EngineStatsSnapshot out;
  fb::StatsRequestT q;
  q.self_check = self_check;
  self->request(impl_->scheduler, std::chrono::seconds(30), stats_atom::value, WireMessage{msg::pack(q)})
      .receive(
          [&](const WireMessage& in) {
            std::string err;
            auto st = msg::unpack<fb::EngineStats>(in.bytes, &err);
            if (!st) return;
            out.running = st->running;
            out.waiting = st->waiting;
            out.scheduler.finished = st->finished_total;
            out.scheduler.prompt_tokens = st->prompt_tokens_total;
            out.scheduler.cached_tokens = st->cached_tokens_total;
            out.scheduler.generated_tokens = st->generated_tokens_total;
            out.kv = {st->pool_capacity_tokens, st->pool_free_tokens, st->evictable_tokens, st->protected_tokens,
                      st->free_req_slots};
            out.invariant_error = st->invariant_error;
          },
          [&](const caf::error& e) { out.invariant_error = "stats unavailable: " + impl_->system.render(e); });
  return out;
}

void Engine::flush_cache() {
  caf::scoped_actor self{impl_->system};
  self->request(impl_->scheduler, std::chrono::seconds(30), flush_atom::value).receive([](int64_t) {}, [](const caf::error&) {});
}

}  // namespace actorlm
