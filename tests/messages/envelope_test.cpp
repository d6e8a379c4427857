#include "messages/envelope.hpp"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "messages/sampling_conversion.hpp"

namespace fb = actorlm::fb;
namespace msg = actorlm::msg;
using Bytes = std::vector<uint8_t>;

namespace {

// Non-default values in every field, so a field lost in transit shows.
std::unique_ptr<fb::SamplingParamsT> sampling() {
  actorlm::SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = -0.25f;
  p.seed = 0xfeedbeefcafeull;
  p.has_seed = true;
  return msg::to_fb(p);
}

std::unique_ptr<fb::StopConditionsT> stop() {
  auto s = std::make_unique<fb::StopConditionsT>();
  s->max_new_tokens = 77;
  s->stop_strings = {"\n\n", "User:"};
  s->stop_token_ids = {2, 49152};
  s->ignore_eos = true;
  return s;
}

std::unique_ptr<fb::UsageT> usage() {
  auto u = std::make_unique<fb::UsageT>();
  u->prompt_tokens = 12;
  u->completion_tokens = 34;
  u->cached_tokens = 8;
  return u;
}

template <class T>
void check_round_trip(const typename T::NativeTableType& object) {
  Bytes bytes = msg::pack(object);
  std::string error;
  auto back = msg::unpack<T>(bytes, &error);
  INFO(msg::kind_name(static_cast<uint16_t>(msg::KindOf<T>::kind)) << ": " << error);
  REQUIRE(back);
  CHECK(*back == object);
  // A default object differs: the comparison would notice a dropped field.
  CHECK_FALSE(typename T::NativeTableType{} == object);
}

fb::GenerateRequestT generate_request() {
  fb::GenerateRequestT r;
  r.request_id = 42;
  r.client_tag = "chatcmpl-7";
  r.text = "Hello, wörld 你好 🙂";
  auto m = std::make_unique<fb::ChatMessageT>();
  m->role = "user";
  m->content = "hi";
  r.messages.push_back(std::move(m));
  r.input_ids = {1, 2, 3};
  r.sampling = sampling();
  r.stop = stop();
  r.stream = false;
  r.logprobs = true;
  r.top_logprobs = 5;
  return r;
}

fb::ForwardBatchT forward_batch() {
  fb::ForwardBatchT b;
  b.batch_id = 9001;
  b.mode = fb::ForwardMode::Mixed;
  for (int i = 0; i < 2; ++i) {
    auto q = std::make_unique<fb::ForwardReqT>();
    q->request_id = 100u + static_cast<uint64_t>(i);
    q->slot = i;
    q->prefix_len = 16 * i;
    q->extend_len = i == 0 ? 3 : 1;
    q->sampling = sampling();
    q->sample_step = 5;
    q->output_ids = {7, 8};
    q->logprobs = true;
    q->top_logprobs = 2;
    q->sample = false;
    b.reqs.push_back(std::move(q));
  }
  b.token_ids = {10, 11, 12, 13};
  b.positions = {0, 1, 2, 16};
  b.out_cache_loc = {4, 5, 6, 33};
  auto w = std::make_unique<fb::ReqToTokenWriteT>();
  w->slot = 1;
  w->start = 0;
  w->kv_indices = {20, 21, 22};
  b.writes.push_back(std::move(w));
  return b;
}

}  // namespace

TEST_CASE("Every message kind survives a round trip", "[messages]") {
  check_round_trip<fb::GenerateRequest>(generate_request());
  {
    fb::TokenizedRequestT t;
    t.request_id = 3;
    t.input_ids = {5, 6, 7};
    t.sampling = sampling();
    t.stop = stop();
    t.stream = false;
    t.logprobs = true;
    t.top_logprobs = 3;
    check_round_trip<fb::TokenizedRequest>(t);
  }
  {
    fb::AbortT a;
    a.request_ids = {1, 2, 99};
    a.reason = "client disconnected";
    check_round_trip<fb::Abort>(a);
  }
  {
    fb::TokenStreamT s;
    auto item = std::make_unique<fb::TokenStreamItemT>();
    item->request_id = 8;
    item->token_ids = {44, 45};
    item->logprobs = {-0.5f, -1.25f};
    item->top_logprobs = {fb::TokenLogprob(44, -0.5f), fb::TokenLogprob(9, -2.0f)};
    item->top_logprobs_per_token = 1;
    item->finish_reason = fb::FinishReason::Length;
    item->usage = usage();
    item->error = "none";
    s.items.push_back(std::move(item));
    check_round_trip<fb::TokenStream>(s);
  }
  {
    fb::TextDeltaT d;
    d.request_id = 8;
    d.text = "partial 🙂";
    d.token_ids = {44};
    d.logprobs = {-0.5f};
    d.top_logprobs = {fb::TokenLogprob(44, -0.5f)};
    d.top_logprobs_per_token = 1;
    d.finish_reason = fb::FinishReason::Stop;
    d.matched_stop = "\n\n";
    d.usage = usage();
    d.error = "x";
    check_round_trip<fb::TextDelta>(d);
  }
  {
    fb::MatchPrefixT m;
    auto q = std::make_unique<fb::PrefixQueryT>();
    q->request_id = 1;
    q->tokens = {1, 2, 3, 4};
    q->lock = true;
    m.queries.push_back(std::move(q));
    check_round_trip<fb::MatchPrefix>(m);
    fb::MatchPrefixReplyT r;
    auto pm = std::make_unique<fb::PrefixMatchT>();
    pm->request_id = 1;
    pm->indices = {16, 17};
    pm->last_node = (7ull << 32) | 3;
    r.matches.push_back(std::move(pm));
    r.evictable_size = 100;
    r.protected_size = 2;
    r.error = "e";
    check_round_trip<fb::MatchPrefixReply>(r);
  }
  {
    fb::InsertT i;
    auto e = std::make_unique<fb::InsertEntryT>();
    e->tokens = {1, 2};
    e->values = {30, 31};
    i.entries.push_back(std::move(e));
    check_round_trip<fb::Insert>(i);
    fb::InsertReplyT r;
    r.cached_lens = {0, 2};
    r.error = "e";
    check_round_trip<fb::InsertReply>(r);
  }
  {
    fb::LockRefT l;
    l.inc_nodes = {1, 2};
    l.dec_nodes = {3};
    check_round_trip<fb::LockRef>(l);
    fb::LockRefReplyT r;
    r.evictable_delta = -5;
    r.evictable_size = 10;
    r.protected_size = 20;
    r.error = "e";
    check_round_trip<fb::LockRefReply>(r);
  }
  {
    fb::EvictT e;
    e.num_tokens = 64;
    check_round_trip<fb::Evict>(e);
    fb::EvictReplyT r;
    r.freed = {16, 17, 18};
    r.evictable_size = 3;
    check_round_trip<fb::EvictReply>(r);
  }
  {
    fb::CacheReqsT c;
    auto q = std::make_unique<fb::CacheReqT>();
    q->request_id = 5;
    q->mode = fb::CacheMode::Unfinished;
    q->tokens = {1, 2, 3};
    q->kv_indices = {16, 17, 18};
    q->prefix_len = 2;
    q->last_node = 12;
    c.reqs.push_back(std::move(q));
    check_round_trip<fb::CacheReqs>(c);
    fb::CacheReqsReplyT r;
    auto res = std::make_unique<fb::CacheReqResultT>();
    res->request_id = 5;
    res->new_prefix_len = 2;
    res->new_prefix_indices = {16, 17};
    res->new_last_node = 13;
    r.results.push_back(std::move(res));
    r.to_free = {40};
    r.error = "e";
    check_round_trip<fb::CacheReqsReply>(r);
  }
  {
    fb::AllocReqSlotsT a;
    a.count = 4;
    check_round_trip<fb::AllocReqSlots>(a);
    fb::AllocReqSlotsReplyT r;
    r.slots = {0, 1, 2, 3};
    r.free_slots = 60;
    r.error = "e";
    check_round_trip<fb::AllocReqSlotsReply>(r);
  }
  {
    fb::AllocTokensT a;
    a.mode = fb::AllocMode::Decode;
    auto q = std::make_unique<fb::TokenAllocT>();
    q->request_id = 1;
    q->slot = 2;
    q->prefix_len = 17;
    q->seq_len = 18;
    q->last_loc = 40;
    a.reqs.push_back(std::move(q));
    check_round_trip<fb::AllocTokens>(a);
    fb::AllocTokensReplyT r;
    r.ok = true;
    r.out_cache_loc = {41};
    r.free_tokens = 1000;
    r.shortfall_tokens = 3;
    r.error = "e";
    check_round_trip<fb::AllocTokensReply>(r);
  }
  {
    fb::FreeT f;
    f.req_slots = {3};
    f.kv_indices = {16, 17};
    check_round_trip<fb::Free>(f);
    fb::FreeReplyT r;
    r.free_tokens = 5;
    r.free_req_slots = 6;
    r.error = "e";
    check_round_trip<fb::FreeReply>(r);
  }
  {
    fb::PoolStatsRequestT q;
    q.check_integrity = true;
    check_round_trip<fb::PoolStatsRequest>(q);
    fb::PoolStatsT s;
    s.capacity_tokens = 4096;
    s.free_tokens = 100;
    s.page_size = 16;
    s.req_slots = 64;
    s.free_req_slots = 60;
    s.integrity_error = "e";
    check_round_trip<fb::PoolStats>(s);
  }
  check_round_trip<fb::ForwardBatch>(forward_batch());
  {
    fb::BatchResultT r;
    r.batch_id = 9001;
    auto t = std::make_unique<fb::TokenResultT>();
    t->request_id = 100;
    t->next_token_id = 321;
    t->logprob = -0.125f;
    t->top_logprobs = {fb::TokenLogprob(321, -0.125f)};
    r.results.push_back(std::move(t));
    r.forward_us = 1234;
    r.error = "e";
    check_round_trip<fb::BatchResult>(r);
  }
  {
    fb::StatsRequestT q;
    q.self_check = true;
    check_round_trip<fb::StatsRequest>(q);
    fb::EngineStatsT s;
    s.running = 3;
    s.waiting = 4;
    s.finished_total = 5;
    s.prompt_tokens_total = 6;
    s.cached_tokens_total = 7;
    s.generated_tokens_total = 8;
    s.cache_hit_rate = 0.5;
    s.pool_capacity_tokens = 9;
    s.pool_free_tokens = 10;
    s.evictable_tokens = 11;
    s.protected_tokens = 12;
    s.decode_tokens_per_s = 13.5;
    s.invariant_error = "e";
    auto n = std::make_unique<fb::NodeStatsT>();
    n->address = "10.0.0.2:7100";
    n->alive = true;
    n->routed_total = 14;
    n->cache_hit_rate = 0.25;
    n->error = "lost";
    s.nodes.push_back(std::move(n));
    check_round_trip<fb::EngineStats>(s);
  }
  {
    fb::NodeHelloT h;
    h.protocol = 1;
    h.head_name = "head";
    check_round_trip<fb::NodeHello>(h);
    fb::NodeChallengeT c;
    c.protocol = 1;
    c.nonce = {1, 2, 3};
    check_round_trip<fb::NodeChallenge>(c);
    fb::NodeJoinT j;
    j.nonce = {1, 2, 3};
    j.proof = {4, 5};
    j.head_name = "head";
    check_round_trip<fb::NodeJoin>(j);
    fb::NodeWelcomeT w;
    w.accepted = true;
    w.model_name = "m";
    w.vocab_size = 49152;
    w.tokenizer_digest = 0x1234567890abcdefull;
    w.kv_tokens = 16384;
    w.device = "cpu";
    check_round_trip<fb::NodeWelcome>(w);
  }
}

TEST_CASE("SamplingParams convert both ways", "[messages]") {
  auto t = sampling();
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(fb::SamplingParams::Pack(fbb, t.get()));
  auto p = msg::from_fb(flatbuffers::GetRoot<fb::SamplingParams>(fbb.GetBufferPointer()));
  CHECK(p.temperature == 0.7f);
  CHECK(p.top_k == 40);
  CHECK(p.seed == 0xfeedbeefcafeull);
  CHECK(p.has_seed);
  CHECK_FALSE(p.validate());
  CHECK(msg::from_fb(nullptr).temperature == 1.0f);  // absent table: defaults
}

TEST_CASE("Every truncation of a message is rejected", "[messages]") {
  Bytes full = msg::pack(forward_batch());
  for (size_t len = 0; len < full.size(); ++len) {
    Bytes cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    auto opened = msg::open<fb::ForwardBatch>(cut);
    INFO("length " << len);
    CHECK_FALSE(opened);
    CHECK_FALSE(opened.error.empty());
  }
}

TEST_CASE("Every single-bit flip of a message is rejected", "[messages]") {
  Bytes full = msg::pack(generate_request());
  REQUIRE(msg::open<fb::GenerateRequest>(full));
  for (size_t bit = 0; bit < full.size() * 8; ++bit) {
    Bytes damaged = full;
    damaged[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto opened = msg::open<fb::GenerateRequest>(damaged);
    INFO("bit " << bit);
    REQUIRE_FALSE(opened);
    CHECK_FALSE(opened.error.empty());
  }
}

TEST_CASE("A message of one kind is not read as another", "[messages]") {
  Bytes abort = msg::pack(fb::AbortT{});
  auto as_batch = msg::open<fb::ForwardBatch>(abort);
  REQUIRE_FALSE(as_batch);
  CHECK(as_batch.error == "expected a ForwardBatch message, got Abort");
  std::string error;
  CHECK(msg::peek_kind(abort, &error) == msg::Kind::Abort);
}

TEST_CASE("Garbage, empty and inconsistent envelopes are rejected with a reason", "[messages]") {
  std::string error;
  CHECK_FALSE(msg::peek_kind({}, &error));
  CHECK(error.find("too short") != std::string::npos);

  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    Bytes junk(static_cast<size_t>(rng() % 300));
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    CHECK_FALSE(msg::open<fb::TokenStream>(junk));
  }

  Bytes good = msg::pack(generate_request());
  Bytes longer = good;  // length field says more than arrived
  longer[8] = static_cast<uint8_t>(longer[8] + 1);
  CHECK_FALSE(msg::peek_kind(longer, &error));
  CHECK(error.find("length") != std::string::npos);

  Bytes extra = good;  // trailing bytes the length does not cover
  extra.push_back(0);
  CHECK_FALSE(msg::peek_kind(extra, &error));

  // A well-formed envelope around a payload that is not a valid FlatBuffer:
  // checksum right, structure wrong; the verifier must refuse it.
  Bytes payload(64, 0xff);
  Bytes forged = msg::detail::seal_bytes(msg::Kind::GenerateRequest, payload);
  auto opened = msg::open<fb::GenerateRequest>(forged);
  CHECK_FALSE(opened);
  CHECK(opened.error.find("verification failed") != std::string::npos);
}

TEST_CASE("A FlatBuffer whose vector length points past the end is refused", "[messages]") {
  // Build a valid message, then corrupt a vector length inside the payload
  // and re-seal it so the checksum matches: only the verifier stands between
  // this buffer and an out-of-bounds read.
  fb::AbortT a;
  a.request_ids = {1, 2, 3};
  Bytes good = msg::pack(a);
  Bytes payload(good.begin() + msg::envelope_size, good.end());
  bool patched = false;
  for (size_t i = 0; i + 4 <= payload.size(); i += 4) {
    if (payload[i] == 3 && payload[i + 1] == 0 && payload[i + 2] == 0 && payload[i + 3] == 0) {
      payload[i + 3] = 0x7f;  // length 0x7f000003
      patched = true;
      break;
    }
  }
  REQUIRE(patched);
  Bytes forged = msg::detail::seal_bytes(msg::Kind::Abort, payload);
  auto opened = msg::open<fb::Abort>(forged);
  CHECK_FALSE(opened);
}
