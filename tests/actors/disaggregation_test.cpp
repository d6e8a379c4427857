// Prefill/decode disaggregation through the actors' messages: one engine
// core prefills and holds, its worker hands out the prompt's KV rows, a
// second core reserves rows, its worker takes them in, and it decodes the
// rest. Everything crosses as FlatBuffers messages, as it would between
// nodes.

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>

#include "actors/engine_core.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "model/default_model.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

constexpr auto kWait = std::chrono::seconds(120);

EngineConfig core_config() {
  EngineConfig c;
  c.model_path = default_model_path();
  c.threads = 2;
  c.kv_tokens = 4096;
  c.page_size = 4;
  c.max_requests = 8;
  c.scheduler.max_context = 1024;
  return c;
}

WireMessage tokenized(uint64_t id, const Ids& prompt, int max_new, bool hold) {
  fb::TokenizedRequestT t;
  t.request_id = id;
  t.input_ids = prompt;
  t.sampling = std::make_unique<fb::SamplingParamsT>();
  t.sampling->temperature = 0;
  t.stop = std::make_unique<fb::StopConditionsT>();
  t.stop->max_new_tokens = max_new;
  t.hold_after_prefill = hold;
  return {msg::pack(t)};
}

WireMessage handoff(uint64_t id, int32_t first_token = -1) {
  fb::KvHandoffT h;
  h.request_id = id;
  h.first_token = first_token;
  return {msg::pack(h)};
}

// Every TokenStream item for `id` that reaches `sink`, until one finishes it
// (or, with until_held, holds it).
std::vector<fb::TokenStreamItemT> collect(caf::scoped_actor& sink, uint64_t id, bool until_held) {
  std::vector<fb::TokenStreamItemT> items;
  for (bool done = false; !done;) {
    sink->receive(
        [&](stream_atom, const WireMessage& in) {
          auto ts = msg::unpack<fb::TokenStream>(in.bytes, nullptr);
          REQUIRE(ts);
          for (auto& item : ts->items) {
            if (item->request_id != id) continue;
            done = done || item->finish_reason != fb::FinishReason::None || (until_held && item->held);
            items.push_back(std::move(*item));
          }
        },
        caf::after(kWait) >> [&] { FAIL("no token stream within the wait"); });
  }
  return items;
}

template <class Reply>
Reply ask(caf::scoped_actor& self, const caf::actor& to, auto atom, const WireMessage& m) {
  Reply out;
  self->request(to, kWait, atom, m)
      .receive([&](const WireMessage& r) { REQUIRE(msg::unpack<typename Reply::TableType>(r.bytes, nullptr)); out = *msg::unpack<typename Reply::TableType>(r.bytes, nullptr); },
               [&](const caf::error& e) { FAIL(self->system().render(e)); });
  return out;
}

}  // namespace

TEST_CASE("A request prefilled and held on one core, its KV rows moved by message, decodes on another as on one", "[actors]") {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  auto tok = load_tokenizer(default_model_path());
  caf::scoped_actor sink_a{system}, sink_b{system}, self{system};
  EngineCore a = spawn_engine_core(system, core_config(), *tok, caf::actor_cast<caf::actor>(sink_a));
  EngineCore b = spawn_engine_core(system, core_config(), *tok, caf::actor_cast<caf::actor>(sink_b));
  const Ids prompt = tok->encode("The history of the printing press begins with movable type, which", true, false);

  // Reference: the same request on core A alone.
  self->send(a.scheduler, generate_atom::value, tokenized(1, prompt, 12, false), caf::actor_cast<caf::actor>(self));
  Ids want;
  for (const auto& item : collect(sink_a, 1, false)) want.insert(want.end(), item.token_ids.begin(), item.token_ids.end());
  REQUIRE(want.size() == 12);
  caf::anon_send(a.scheduler, flush_atom::value);  // the transfer must not lean on A's cache of request 1

  // Prefill on A, held.
  self->send(a.scheduler, generate_atom::value, tokenized(2, prompt, 12, true), caf::actor_cast<caf::actor>(self));
  auto held = collect(sink_a, 2, true);
  REQUIRE(held.size() == 1);
  REQUIRE(held[0].held);
  REQUIRE(held[0].token_ids.size() == 1);
  REQUIRE(held[0].held_rows.size() == prompt.size());
  CHECK(held[0].token_ids[0] == want[0]);

  // Reserve on B; copy the rows; release A; activate B.
  auto reserved = ask<fb::KvReserveReplyT>(self, b.scheduler, kv_reserve_atom::value,
                                           tokenized(2, prompt, 12, false));
  REQUIRE(reserved.error.empty());
  REQUIRE(reserved.rows.size() == prompt.size());
  const int32_t layers = a.model.n_layers;
  fb::KvRowsRequestT read;
  read.rows = held[0].held_rows;
  read.first_layer = 0;
  read.last_layer = layers;
  auto rows = ask<fb::KvRowsReplyT>(self, a.worker, kv_read_atom::value, {msg::pack(read)});
  REQUIRE(rows.error.empty());
  fb::KvRowsRequestT write;
  write.rows = reserved.rows;
  write.first_layer = 0;
  write.last_layer = layers;
  write.data = rows.data;
  auto written = ask<fb::KvRowsReplyT>(self, b.worker, kv_write_atom::value, {msg::pack(write)});
  REQUIRE(written.error.empty());
  self->send(a.scheduler, kv_release_atom::value, handoff(2));
  bool activated = false;
  self->request(b.scheduler, kWait, kv_activate_atom::value, handoff(2, held[0].token_ids[0]))
      .receive([&](bool ok) { activated = ok; }, [&](const caf::error& e) { FAIL(system.render(e)); });
  REQUIRE(activated);

  Ids got;
  for (const auto& item : collect(sink_b, 2, false)) got.insert(got.end(), item.token_ids.begin(), item.token_ids.end());
  CHECK(got == want);

  SECTION("bad requests are answered, not obeyed") {
    // Rows outside B's pool; a request id already in use; activating an
    // unknown request, or with a first token outside the vocabulary.
    write.rows.back() = 1 << 30;
    CHECK_FALSE(ask<fb::KvRowsReplyT>(self, b.worker, kv_write_atom::value, {msg::pack(write)}).error.empty());
    auto again = ask<fb::KvReserveReplyT>(self, b.scheduler, kv_reserve_atom::value, tokenized(3, prompt, 4, false));
    REQUIRE(again.error.empty());
    CHECK_FALSE(ask<fb::KvReserveReplyT>(self, b.scheduler, kv_reserve_atom::value, tokenized(3, prompt, 4, false))
                    .error.empty());
    for (auto [id, token] : {std::pair{99, 5}, std::pair{3, 1 << 30}}) {
      bool ok = true;
      self->request(b.scheduler, kWait, kv_activate_atom::value, handoff(static_cast<uint64_t>(id), token))
          .receive([&](bool r) { ok = r; }, [](const caf::error&) {});
      CHECK_FALSE(ok);
    }
    self->send(b.scheduler, kv_cancel_atom::value, handoff(3));
  }

  // Both cores whole: nothing held, reserved or leaked.
  for (const EngineCore* c : {&a, &b}) {
    fb::StatsRequestT q;
    q.self_check = true;
    auto st = ask<fb::EngineStatsT>(self, c->scheduler, stats_atom::value, {msg::pack(q)});
    CHECK(st.invariant_error.empty());
    CHECK(st.protected_tokens == 0);
  }
  stop_engine_core(a);
  stop_engine_core(b);
}
