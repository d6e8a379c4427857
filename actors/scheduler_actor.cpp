#include "actors/scheduler_actor.hpp"

#include <caf/all.hpp>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "actors/local_sender.hpp"
#include "actors/actor_kv_service.hpp"
#include "actors/engine_stats.hpp"
#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "kvstore/kv_block.hpp"
#include "messages/sampling_conversion.hpp"

namespace actorlm {
namespace {

// Mixed into the seed of requests that bring none, so that they differ
// between processes too (a server restarted would otherwise replay the same
// draws for its first request).
uint64_t unseeded_salt() {
  static const uint64_t salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) | rd();
  }();
  return salt;
}

// A scheduler Request from the tokenizer's message; an error when a field is
// out of range.
Request request_from(const fb::TokenizedRequest& m, std::optional<std::string>& err) {
  Request r;
  r.id = m.request_id();
  if (m.input_ids()) r.prompt.assign(m.input_ids()->begin(), m.input_ids()->end());
  r.sampling = msg::from_fb(m.sampling());
  if (!r.sampling.has_seed) {
    // A request without a seed gets one of its own, kept with the request (a
    // retracted request resumes the same draws). The samplers read the seed
    // only when has_seed is set, so without the flag every unseeded request,
    // and each of a request's n choices, drew the same numbers.
    r.sampling.seed = (r.id ^ unseeded_salt()) * 0x9e3779b97f4a7c15ull;
    r.sampling.has_seed = true;
  }
  if (m.stop()) {
    r.stop.max_new_tokens = m.stop()->max_new_tokens();
    if (m.stop()->stop_token_ids()) r.stop.stop_token_ids.assign(m.stop()->stop_token_ids()->begin(), m.stop()->stop_token_ids()->end());
    r.stop.ignore_eos = m.stop()->ignore_eos();
    r.stop.max_new_tokens_strict = m.stop()->max_new_tokens_strict();
    r.stop.min_new_tokens = m.stop()->min_new_tokens();
  }
  r.top_logprobs = m.top_logprobs();
  r.prompt_logprobs = m.prompt_logprobs();
  r.priority = m.priority();
  r.adapter = m.adapter();
  r.tenant = m.tenant();
  r.tenant_weight = m.tenant_weight();
  r.tenant_kv_quota = m.tenant_kv_quota();
  r.adapter_scale = m.adapter_scale();
  const size_t n_stacked = m.stacked_adapters() ? m.stacked_adapters()->size() : 0;
  if (n_stacked != (m.stacked_scales() ? m.stacked_scales()->size() : 0)) {
    err = "stacked_adapters and stacked_scales must be of one length";
    return r;
  }
  for (size_t k = 0; k < n_stacked; ++k) r.stacked.emplace_back(m.stacked_adapters()->Get(k), m.stacked_scales()->Get(k));
  r.max_draft_tokens = m.max_draft_tokens();
  if (m.prediction()) r.prediction.assign(m.prediction()->begin(), m.prediction()->end());
  r.hold_after_prefill = m.hold_after_prefill();
  r.stream_held_kv = m.stream_held_kv();
  if (m.resume_output()) r.output.assign(m.resume_output()->begin(), m.resume_output()->end());
  if (const fb::Constraint* c = m.constraint(); c && c->kind() != 0) {
    if (c->kind() > static_cast<uint8_t>(ConstraintKind::ebnf)) {
      err = "unknown structured-output constraint kind " + std::to_string(c->kind());
    }
    auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
    r.constraint_spec = {static_cast<ConstraintKind>(c->kind()), str(c->text()), str(c->prefix()), str(c->suffix())};
  }
  return r;
}

void scheduler_actor(caf::blocking_actor* self, SchedulerConfig cfg, caf::actor pool, caf::actor radix,
                     caf::actor worker, caf::actor sink, WorkerLiveness liveness, std::shared_ptr<StatsBoard> board) {
  ActorKvService kv(self, pool, radix);
  ActorWorker w(self, worker, liveness);
  Scheduler sched(cfg, kv, w);
  // Streamed prompts' rows go out before their step runs: the gateway's
  // transfer sends each layer as the worker stores it.
  sched.set_plan_listener([&](std::vector<TokenEvent> early) {
    self->send(sink, stream_atom::value, WireMessage{token_stream(early)});
  });
  bool running = true;
  std::vector<TokenEvent> rejected;
  auto on_generate = [&](generate_atom, const WireMessage& in, const caf::actor&) {
    auto t = msg::open<fb::TokenizedRequest>(in.bytes);
    if (!t) return;
    const fb::TokenizedRequest& m = *t.message;
    std::optional<std::string> err;
    Request r = request_from(m, err);
    ErrorKind kind = ErrorKind::invalid_request;
    if (!err) err = sched.submit(std::move(r), &kind);
    if (err) {
      TokenEvent e;
      e.id = m.request_id();
      e.finish = FinishReason::error;
      e.error = *err;
      e.error_kind = kind;
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
    EngineStatsSnapshot st;
    st.running = static_cast<int32_t>(sched.running());
    st.waiting = static_cast<int32_t>(sched.waiting());
    st.scheduler = sched.stats();
    if (cfg.tiers) {
      st.host = cfg.tiers->host_stats().value_or(KvHostStats{});
      st.storage = cfg.tiers->disk_stats().value_or(KvDiskStats{});
    }
    st.kv = kv.usage();
    if (self_check) st.invariant_error = sched.idle() ? kv.check_idle() : "not idle";
    if (self_check && cfg.tiers && st.invariant_error.empty()) st.invariant_error = cfg.tiers->check();
    return WireMessage{msg::pack(to_message(st))};
  };
  auto on_flush = [&](flush_atom) -> int64_t { return kv.flush_cache(); };
  // Disaggregation (Scheduler::reserve and friends).
  auto on_reserve = [&](kv_reserve_atom, const WireMessage& in) -> WireMessage {
    fb::KvReserveReplyT reply;
    auto t = msg::open<fb::TokenizedRequest>(in.bytes);
    if (!t) {
      reply.error = "rejected reservation: " + t.error;
      return WireMessage{msg::pack(reply)};
    }
    std::optional<std::string> err;
    Request r = request_from(*t.message, err);
    reply.request_id = r.id;
    if (err) {
      reply.error = *err;
      return WireMessage{msg::pack(reply)};
    }
    Scheduler::Reserved res = sched.reserve(std::move(r));
    reply.rows = std::move(res.rows);
    reply.cached_tokens = res.cached;
    reply.error = std::move(res.error);
    reply.no_room = res.no_room;
    return WireMessage{msg::pack(reply)};
  };
  auto handoff_id = [](const WireMessage& in) -> std::optional<uint64_t> {
    auto h = msg::open<fb::KvHandoff>(in.bytes);
    if (!h) return std::nullopt;
    return h.message->request_id();
  };
  auto on_activate = [&](kv_activate_atom, const WireMessage& in) -> bool {
    auto h = msg::open<fb::KvHandoff>(in.bytes);
    return h && sched.activate(h.message->request_id(), h.message->first_token(), h.message->first_logprob(),
                              h.message->cached_tokens());
  };
  auto on_cancel = [&](kv_cancel_atom, const WireMessage& in) {
    if (auto id = handoff_id(in)) sched.cancel_reserved(*id);
  };
  auto on_release = [&](kv_release_atom, const WireMessage& in) {
    if (auto id = handoff_id(in)) sched.release(*id);
  };
  // Live migration (Scheduler::freeze and thaw; kv_release lets it go).
  auto move_id = [](const WireMessage& in) -> std::optional<uint64_t> {
    auto m = msg::open<fb::KvMove>(in.bytes);
    if (!m) return std::nullopt;
    return m.message->request_id();
  };
  auto on_freeze = [&](kv_freeze_atom, const WireMessage& in) -> WireMessage {
    fb::KvFreezeReplyT reply;
    reply.state = static_cast<int8_t>(Scheduler::Frozen::State::unknown);
    if (auto id = move_id(in)) {
      Scheduler::Frozen f = sched.freeze(*id);
      reply.state = static_cast<int8_t>(f.state);
      reply.rows = std::move(f.rows);
      reply.output_tokens = f.output_tokens;
      reply.cached_tokens = f.cached_tokens;
    }
    return WireMessage{msg::pack(reply)};
  };
  auto on_thaw = [&](kv_thaw_atom, const WireMessage& in) {
    if (auto id = move_id(in)) sched.thaw(*id);
  };
  // A LoRA adapter comes (the worker loads it, then requests may name it)
  // or goes (refused while a request uses it); only from this process.
  auto on_adapter = [&](adapter_atom, WireMessage& in) -> WireMessage {
    fb::AdapterReplyT reply;
    auto change = msg::open<fb::AdapterChange>(in.bytes);
    if (!from_this_process(self)) {
      reply.error = "adapters are changed only by the engine's own process";
    } else if (!change) {
      reply.error = "rejected adapter change: " + change.error;
    } else if (change.message->id() <= 0 || change.message->id() > kMaxAdapterId) {
      reply.error = "adapter id " + std::to_string(change.message->id()) + " out of range";
    } else if (change.message->load()) {
      const int32_t id = change.message->id();
      const float scale = change.message->scale();  // read before its bytes move on
      std::vector<uint8_t> answer = w.change_adapter(std::move(in.bytes));
      auto r = msg::open<fb::AdapterReply>(answer);
      if (r && (!r.message->error() || r.message->error()->size() == 0)) {
        // Its KV goes to the tiers under its file's lineage (none without a
        // fingerprint: it stays in the pool).
        const auto* fingerprint = r.message->fingerprint();
        sched.add_adapter(id, fingerprint && fingerprint->size() > 0
                                  ? kv_adapter_lineage(fingerprint->string_view(), scale)
                                  : 0);
      }
      return WireMessage{std::move(answer)};
    } else if (!sched.remove_adapter(change.message->id())) {
      reply.error = "the adapter is in use by a request";
    } else {
      return WireMessage{w.change_adapter(std::move(in.bytes))};
    }
    return WireMessage{msg::pack(reply)};
  };
  auto on_shutdown = [&](shutdown_atom) { running = false; };
  // Between steps: the worker's down message (it is lost: the next step
  // fails at once), and what belongs to a step already given up on.
  auto on_down = [&](caf::down_msg& d) { w.on_down(d); };
  auto on_late_done = [](step_done_atom, uint64_t, WireMessage&) {};
  auto on_late_failure = [](step_failed_atom, uint64_t, caf::error&) {};
  auto on_late_beat = [](heartbeat_atom, uint64_t) {};
  auto publish = [&] {
    if (board) board->publish(figures_of(sched, cfg, w.lost(), w.restarts()));
  };
  publish();
  while (running) {
    if (sched.idle() && rejected.empty()) {
      self->receive(on_generate, on_abort, on_stop, on_stats, on_flush, on_shutdown, on_reserve, on_activate, on_cancel,
                    on_release, on_freeze, on_thaw, on_adapter, on_down, on_late_done, on_late_failure, on_late_beat);
    }
    for (bool more = true; more && running;) {
      self->receive(on_generate, on_abort, on_stop, on_stats, on_flush, on_shutdown, on_reserve, on_activate,
                    on_cancel, on_release, on_freeze, on_thaw, on_adapter, on_down, on_late_done, on_late_failure,
                    on_late_beat,
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    }
    if (!running) break;
    std::vector<TokenEvent> events = std::move(rejected);
    rejected.clear();
    auto fail_all = [&](const std::string& why, ErrorKind kind) {
      auto failed = sched.fail_all("engine failure: " + why, kind);
      events.insert(events.end(), failed.begin(), failed.end());
    };
    try {
      if (!w.lost().empty()) {
        // Nothing can run: every request is answered now, not after a wait.
        fail_all("worker lost: " + w.lost(), ErrorKind::unavailable);
      } else {
        auto stepped = sched.step();
        events.insert(events.end(), stepped.begin(), stepped.end());
      }
    } catch (const WorkerLost& e) {
      std::fprintf(stderr, "actorlm scheduler: %s; every request fails from now on\n", e.what());
      fail_all(e.what(), ErrorKind::unavailable);
    } catch (const std::exception& e) {
      // Nothing may hang: every request in flight ends with the error.
      std::fprintf(stderr, "actorlm scheduler: step failed: %s\n", e.what());
      fail_all(e.what(), ErrorKind::internal);
    }
    // Published before the events go out, so a client that has its answer
    // reads figures that include it.
    publish();
    if (!events.empty()) self->send(sink, stream_atom::value, WireMessage{token_stream(events)});
  }
}

}  // namespace

caf::actor spawn_scheduler(caf::actor_system& system, SchedulerConfig config, caf::actor pool, caf::actor radix,
                           caf::actor worker, caf::actor sink, WorkerLiveness liveness,
                           std::shared_ptr<StatsBoard> board) {
  return system.spawn<caf::detached>(scheduler_actor, config, std::move(pool), std::move(radix), std::move(worker),
                                     std::move(sink), liveness, std::move(board));
}

}  // namespace actorlm
