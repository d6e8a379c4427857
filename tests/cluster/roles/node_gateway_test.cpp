// A worker node's gateway, spoken to directly through CAF messages: the join
// handshake, and what it does with requests that are not from a joined head,
// not sealed by its session, unreadable, or out of range; and that a peer
// that is not the head cannot end the head's requests. Real model, real
// middleman (behind the node's gate on loopback), no head process.

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <catch2/catch.hpp>

#include "actors/wire.hpp"
#include "cluster/roles/node.hpp"
#include "cluster/transport/cluster_atoms.hpp"
#include "cluster/transport/cluster_handshake.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "cluster/transport/request_session.hpp"
#include "messages/envelope.hpp"
#include "model/default_model.hpp"

using namespace actorlm;

namespace {

constexpr auto reply_timeout = std::chrono::seconds(30);

NodeConfig node_config() {
  NodeConfig c;
  c.engine.model_path = default_model_path();
  c.engine.threads = 2;
  c.engine.kv_tokens = 2048;
  c.engine.max_requests = 8;
  c.security.secret = "s3cret";
  return c;
}

WireMessage hello() {
  fb::NodeHelloT h;
  h.protocol = cluster_protocol;
  h.head_name = "test head";
  return {msg::pack(h)};
}

// hello + join with `secret`; the welcome (accepted or not). `session`, when
// given, gets the key that seals this head's requests.
fb::NodeWelcomeT join(caf::scoped_actor& self, const caf::actor& gw, const std::string& secret,
                      RequestSession* session = nullptr) {
  fb::NodeWelcomeT out;
  self->request(gw, reply_timeout, hello_atom::value, hello())
      .receive(
          [&](const WireMessage& reply) {
            auto c = msg::unpack<fb::NodeChallenge>(reply.bytes, nullptr);
            REQUIRE(c);
            REQUIRE(c->nonce.size() == 32);
            fb::NodeJoinT j;
            j.nonce = c->nonce;
            j.proof = join_proof(secret, c->nonce);
            j.head_name = "test head";
            j.head_nonce = make_nonce();
            if (session) *session = RequestSession(session_key(secret, j.nonce, j.head_nonce));
            self->request(gw, reply_timeout, join_atom::value, WireMessage{msg::pack(j)})
                .receive(
                    [&](const WireMessage& w) {
                      auto welcome = msg::unpack<fb::NodeWelcome>(w.bytes, nullptr);
                      REQUIRE(welcome);
                      out = *welcome;
                    },
                    [](const caf::error&) { FAIL("no welcome"); });
          },
          [](const caf::error&) { FAIL("no challenge"); });
  return out;
}

WireMessage tokenized(uint64_t id, std::vector<int32_t> ids, int max_new = 4) {
  fb::TokenizedRequestT t;
  t.request_id = id;
  t.input_ids = std::move(ids);
  t.sampling = std::make_unique<fb::SamplingParamsT>();
  t.sampling->temperature = 0;
  t.stop = std::make_unique<fb::StopConditionsT>();
  t.stop->max_new_tokens = max_new;
  return {msg::pack(t)};
}

// Token stream items for `id` until it finishes (or nothing for `quiet`).
std::vector<fb::TokenStreamItemT> collect(caf::scoped_actor& self, uint64_t id, std::chrono::milliseconds quiet) {
  std::vector<fb::TokenStreamItemT> items;
  bool done = false;
  while (!done) {
    self->receive(
        [&](stream_atom, const WireMessage& in) {
          auto ts = msg::unpack<fb::TokenStream>(in.bytes, nullptr);
          REQUIRE(ts);
          for (auto& item : ts->items) {
            REQUIRE(item->request_id == id);
            done = done || item->finish_reason != fb::FinishReason::None;
            items.push_back(std::move(*item));
          }
        },
        caf::after(quiet) >> [&] { done = true; });
  }
  return items;
}

// The node scheduler's counters, asked through the gateway. A head's messages
// reach the gateway in the order sent and the gateway passes requests and
// stats to the scheduler in that order, so a request sent earlier that had
// been passed on would show here as waiting, running or finished.
// The node's scheduler counters, asked for after whatever the head sent
// before: messages from one sender arrive in order, so these counters
// already show what those messages did (a positive signal, no waiting).
fb::EngineStatsT node_stats(caf::scoped_actor& head, const caf::actor& gw, RequestSession& session) {
  fb::EngineStatsT out;
  head->request(gw, reply_timeout, stats_atom::value,
                WireMessage{session.seal(RequestKind::stats, msg::pack(fb::StatsRequestT{}))})
      .receive(
          [&](const WireMessage& r) {
            auto st = msg::unpack<fb::EngineStats>(r.bytes, nullptr);
            REQUIRE(st);
            out = std::move(*st);
          },
          [](const caf::error&) { FAIL("no stats"); });
  return out;
}

bool nothing_submitted(const fb::EngineStatsT& st) {
  return st.running == 0 && st.waiting == 0 && st.finished_total == 0 && st.prompt_tokens_total == 0;
}

}  // namespace

TEST_CASE("A node's gateway joins heads with the secret and checks everything they send", "[actors][cluster]") {
  caf::actor_system_config cfg;
  NodeConfig nc = node_config();
  configure_remote(cfg, nc.security);
  caf::actor_system system{cfg};
  Node node(system, nc);
  REQUIRE(node.port() > 0);
  const caf::actor gw = node.gateway();
  caf::scoped_actor head{system};

  SECTION("a wrong secret is refused, the right one welcomed with what the node serves") {
    fb::NodeWelcomeT refused = join(head, gw, "guess");
    CHECK_FALSE(refused.accepted);
    CHECK(refused.error.find("shared secret does not match") != std::string::npos);
    fb::NodeWelcomeT w = join(head, gw, "s3cret");
    REQUIRE(w.accepted);
    CHECK(w.vocab_size == 49152);
    CHECK(w.n_layers == 30);
    CHECK(w.kv_tokens == 2048);
    CHECK(w.tokenizer_digest != 0);
    CHECK(w.model_name == "SmolLM2-135M-Instruct.Q4_1.gguf");
  }

  SECTION("a join is good once: replaying a recorded proof without a new hello is refused") {
    fb::NodeChallengeT c;
    head->request(gw, reply_timeout, hello_atom::value, hello())
        .receive([&](const WireMessage& r) { c = *msg::unpack<fb::NodeChallenge>(r.bytes, nullptr); },
                 [](const caf::error&) { FAIL("no challenge"); });
    fb::NodeJoinT j;
    j.nonce = c.nonce;
    j.proof = join_proof("s3cret", c.nonce);
    j.head_nonce = make_nonce();
    for (int attempt = 0; attempt < 2; ++attempt) {
      head->request(gw, reply_timeout, join_atom::value, WireMessage{msg::pack(j)})
          .receive([&](const WireMessage& r) { CHECK(msg::unpack<fb::NodeWelcome>(r.bytes, nullptr)->accepted == (attempt == 0)); },
                   [](const caf::error&) { FAIL("no welcome"); });
    }
  }

  SECTION("a peer that has not joined gets nothing run for it") {
    head->send(gw, generate_atom::value, tokenized(1, {1, 2, 3}));
    bool refused = false;
    head->request(gw, reply_timeout, stats_atom::value, WireMessage{msg::pack(fb::StatsRequestT{})})
        .receive([](const WireMessage&) {}, [&](const caf::error&) { refused = true; });
    CHECK(refused);
    // Joined only now: the request before the join never reached the scheduler.
    RequestSession session;
    REQUIRE(join(head, gw, "s3cret", &session).accepted);
    CHECK(nothing_submitted(node_stats(head, gw, session)));
  }

  SECTION("after joining: unsealed, replayed and garbage requests are dropped, bad ids answered, a good request runs") {
    RequestSession session;
    REQUIRE(join(head, gw, "s3cret", &session).accepted);
    auto sealed = [&](RequestKind kind, const WireMessage& m) { return WireMessage{session.seal(kind, m.bytes)}; };
    // Not sealed, sealed under another key, sealed for another operation,
    // or a sealed request sent again: dropped, nothing runs.
    head->send(gw, generate_atom::value, tokenized(1, {1, 2, 3}));
    RequestSession stranger(session_key("s3cret", make_nonce(), make_nonce()));
    head->send(gw, generate_atom::value, WireMessage{stranger.seal(RequestKind::generate, tokenized(1, {1, 2, 3}).bytes)});
    head->send(gw, generate_atom::value, sealed(RequestKind::abort, tokenized(1, {1, 2, 3})));
    CHECK(nothing_submitted(node_stats(head, gw, session)));
    WireMessage once = sealed(RequestKind::generate, tokenized(6, {504, 3458}, 2));
    head->send(gw, generate_atom::value, once);
    auto first = collect(head, 6, std::chrono::seconds(30));
    REQUIRE_FALSE(first.empty());
    CHECK(first.back().finish_reason == fb::FinishReason::Length);
    const fb::EngineStatsT after_once = node_stats(head, gw, session);
    CHECK(after_once.finished_total == 1);
    head->send(gw, generate_atom::value, once);
    // Unreadable buffers: dropped (and logged), nothing runs, the node stays up.
    head->send(gw, generate_atom::value, sealed(RequestKind::generate, WireMessage{{1, 2, 3, 4, 5}}));
    WireMessage flipped = tokenized(2, {1, 2, 3});
    flipped.bytes[flipped.bytes.size() / 2] ^= 0x10;
    head->send(gw, generate_atom::value, sealed(RequestKind::generate, flipped));
    head->send(gw, abort_atom::value, sealed(RequestKind::abort, WireMessage{{9, 9, 9}}));
    const fb::EngineStatsT after_junk = node_stats(head, gw, session);
    CHECK(after_junk.finished_total == after_once.finished_total);
    CHECK(after_junk.prompt_tokens_total == after_once.prompt_tokens_total);
    CHECK(after_junk.running == 0);
    CHECK(after_junk.waiting == 0);
    // Out-of-vocabulary ids: that request ends with an error, under its own id.
    head->send(gw, generate_atom::value, sealed(RequestKind::generate, tokenized(3, {1, 49152, 2})));
    auto bad = collect(head, 3, std::chrono::seconds(30));
    REQUIRE(bad.size() == 1);
    CHECK(bad[0].finish_reason == fb::FinishReason::Error);
    CHECK(bad[0].error.find("outside the vocabulary") != std::string::npos);
    head->send(gw, generate_atom::value, sealed(RequestKind::generate, tokenized(4, {})));
    auto empty = collect(head, 4, std::chrono::seconds(30));
    REQUIRE(empty.size() == 1);
    CHECK(empty[0].error == "the prompt is empty");  // the node's Scheduler::refusal, as for any route
    // A good request streams back under the head's id and finishes at its limit.
    head->send(gw, generate_atom::value, sealed(RequestKind::generate, tokenized(5, {504, 3458, 282, 4649, 314}, 6)));
    auto good = collect(head, 5, std::chrono::seconds(60));
    REQUIRE_FALSE(good.empty());
    CHECK(good.back().finish_reason == fb::FinishReason::Length);
    size_t tokens = 0;
    for (const auto& item : good) tokens += item.token_ids.size();
    CHECK(tokens == 6);
    // Stats pass through to the node's scheduler; its pool is whole again once idle.
    fb::StatsRequestT check;
    check.self_check = true;
    head->request(gw, reply_timeout, stats_atom::value, sealed(RequestKind::stats, WireMessage{msg::pack(check)}))
        .receive(
            [](const WireMessage& r) {
              auto st = msg::unpack<fb::EngineStats>(r.bytes, nullptr);
              REQUIRE(st);
              CHECK(st->finished_total >= 1);
              CHECK(st->invariant_error.empty());
              CHECK(st->protected_tokens == 0);
            },
            [](const caf::error&) { FAIL("no stats"); });
  }
}

TEST_CASE("A peer that is not the head cannot make the node abort the head's requests", "[actors][cluster]") {
  caf::actor_system_config cfg;
  NodeConfig nc = node_config();
  configure_remote(cfg, nc.security);
  caf::actor_system system{cfg};
  Node node(system, nc);
  const caf::actor gw = node.gateway();
  caf::scoped_actor head{system};
  RequestSession session;
  REQUIRE(join(head, gw, "s3cret", &session).accepted);

  // Another process (its own actor system) that knows the secret, so it gets
  // through the gate, but is not the head.
  caf::actor_system_config peer_cfg;
  configure_remote(peer_cfg, nc.security);
  caf::actor_system peer_system{peer_cfg};
  auto gate = open_dial_gate(NodeAddress{"127.0.0.1", node.port()}, nc.security);
  auto remote_gw = peer_system.middleman().remote_actor("127.0.0.1", gate->port());
  REQUIRE(remote_gw);
  caf::scoped_actor peer{peer_system};

  head->send(gw, generate_atom::value, WireMessage{session.seal(RequestKind::generate, tokenized(7, {504, 3458, 282}, 40).bytes)});
  // What a "head went away" looks like as a message, naming the head: a down
  // message, an exit message, and the gateway's own notice with guessed tokens.
  const caf::actor_addr head_addr = head->address();
  peer->send(*remote_gw, caf::down_msg{head_addr, caf::exit_reason::remote_link_unreachable});
  peer->send(*remote_gw, caf::exit_msg{head_addr, caf::exit_reason::remote_link_unreachable});
  for (uint64_t guess : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    peer->send(*remote_gw, head_gone_atom::value, guess, caf::make_error(caf::exit_reason::remote_link_unreachable));
  }
  // And an exit message that CAF would act on before any handler: kill.
  peer->send(*remote_gw, caf::exit_msg{remote_gw->address(), caf::exit_reason::kill});
  auto items = collect(head, 7, std::chrono::seconds(60));
  REQUIRE_FALSE(items.empty());
  CHECK(items.back().finish_reason == fb::FinishReason::Length);
  size_t tokens = 0;
  for (const auto& item : items) tokens += item.token_ids.size();
  CHECK(tokens == 40);
}
