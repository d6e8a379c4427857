// The worker actor in a real CAF actor system: FlatBuffers in, FlatBuffers out.

#include "actors/worker_actor.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <numeric>

#include "actors/forward_codec.hpp"
#include "actors/wire.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

WireMessage call(caf::scoped_actor& self, const caf::actor& worker, const WireMessage& in) {
  WireMessage out;
  self->request(worker, std::chrono::seconds(60), forward_atom::value, in)
      .receive([&](const WireMessage& reply) { out = reply; },
               [&](const caf::error& err) { FAIL("worker request failed: " << self->system().render(err)); });
  return out;
}

// The default model's worker actor in an actor system of its own: 256 KV
// rows, 4 slots of 128 positions.
struct Rig {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  std::shared_ptr<ModelRunner> runner =
      std::make_shared<ModelRunner>(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(2),
                                    ModelRunnerConfig{.kv_pool_rows = 256, .max_requests = 4, .max_context = 128});
  caf::actor worker = spawn_worker(system, runner);
  caf::scoped_actor self{system};
};

}  // namespace

TEST_CASE("The worker actor runs a forward batch sent as a message", "[actors]") {
  Rig rig;
  auto& runner = rig.runner;
  auto& worker = rig.worker;
  auto& self = rig.self;

  // "The capital of France is" -> " Paris" (7042) greedily.
  ForwardBatch b;
  b.reqs = {{0, 0, 5}};
  b.token_ids = {504, 3575, 282, 4649, 314};
  b.out_cache_loc = {1, 2, 3, 4, 5};
  b.writes = {{0, 0, {1, 2, 3, 4, 5}}};
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<SampleRequest> sampling{{greedy, {}, {}, 0, 3, {}}};
  WireMessage reply = call(self, worker, {encode_forward(77, b, {9}, sampling)});
  std::string error;
  auto result = decode_result(reply.bytes, &error);
  REQUIRE(result);
  CHECK(result->error.empty());
  CHECK(result->batch_id == 77);
  REQUIRE(result->results.size() == 1);
  CHECK(result->request_ids[0] == 9);
  CHECK(result->results[0].token == 7042);
  CHECK(result->results[0].top.size() == 3);
  CHECK(result->results[0].logprob < 0.0f);

  // The next step, " Paris" at position 5, reads the slot's table and KV rows
  // 1..5: whatever a refused message changed would change its answer.
  ForwardBatch next;
  next.reqs = {{0, 5, 1}};
  next.token_ids = {7042};
  next.out_cache_loc = {6};
  next.writes = {{0, 5, {6}}};
  auto decode_next = [&] {
    auto r = decode_result(call(self, worker, {encode_forward(90, next, {9}, sampling)}).bytes, &error);
    REQUIRE(r);
    REQUIRE(r->error.empty());
    REQUIRE(r->results.size() == 1);
    return r->results[0];
  };
  const auto want = decode_next();
  // A batch that would, if run at all, repoint the slot at rows 11..15 and
  // fill them with other tokens' K/V.
  ForwardBatch other = b;
  other.token_ids = {100, 200, 300, 400, 500};
  other.out_cache_loc = {11, 12, 13, 14, 15};
  other.writes = {{0, 0, {11, 12, 13, 14, 15}}};

  SECTION("a damaged message gets an error reply and changes nothing") {
    auto bytes = encode_forward(78, other, {9}, sampling);
    bytes[bytes.size() / 2] ^= 0x10;
    auto bad = decode_result(call(self, worker, {bytes}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("checksum") != std::string::npos);
    auto got = decode_next();
    CHECK(got.token == want.token);
    CHECK(got.logprob == want.logprob);
  }
  SECTION("an inconsistent batch is refused by the runner with its reason, and changes nothing") {
    ForwardBatch wrong = other;
    wrong.out_cache_loc[4] = 100000;
    wrong.writes[0].kv[4] = 100000;
    auto bad = decode_result(call(self, worker, {encode_forward(79, wrong, {9}, sampling)}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("outside the pool") != std::string::npos);
    auto got = decode_next();
    CHECK(got.token == want.token);
    CHECK(got.logprob == want.logprob);
  }
  SECTION("out-of-range sampling parameters from a message are refused") {
    std::vector<SampleRequest> hot{{greedy, {}, {}, 0, 0, {}}};
    hot[0].params.temperature = 1000;
    auto bad = decode_result(call(self, worker, {encode_forward(80, b, {9}, hot)}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("temperature") != std::string::npos);
  }
  SECTION("an allowed-token mask travels with the batch and the sampler keeps to it") {
    // Only token 11 may follow: greedy must pick it although " Paris"
    // scores higher.
    const int32_t vocab = runner->model_config().vocab_size;
    std::vector<uint32_t> mask((static_cast<size_t>(vocab) + 31) / 32, 0);
    mask[0] = 1u << 11;
    std::vector<SampleRequest> masked{{greedy, {}, {}, 0, 0, mask}};
    auto r = decode_result(call(self, worker, {encode_forward(81, b, {9}, masked)}).bytes, &error);
    REQUIRE(r);
    REQUIRE(r->error.empty());
    CHECK(r->results[0].token == 11);
    // A mask of the wrong size is an error reply, never a read past its end.
    std::vector<uint32_t> short_mask(3, ~0u);
    std::vector<SampleRequest> wrong{{greedy, {}, {}, 0, 0, short_mask}};
    auto bad = decode_result(call(self, worker, {encode_forward(82, b, {9}, wrong)}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("mask") != std::string::npos);
  }
  SECTION("prompt scores travel both ways: asked for in the batch, returned with the sampled token") {
    // The first three tokens, scored against " of" (282) as the token after
    // the pass: rows 0 and 1 score 3575 and 282 within it, row 2 scores 282.
    ForwardBatch chunk;
    chunk.reqs = {{1, 0, 3}};
    chunk.reqs[0].prompt_logprobs = true;
    chunk.reqs[0].prompt_top_n = 2;
    chunk.reqs[0].next_token = 4649;
    chunk.token_ids = {504, 3575, 282};
    chunk.out_cache_loc = {21, 22, 23};
    chunk.writes = {{1, 0, {21, 22, 23}}};
    std::vector<SampleRequest> s1{{greedy, {}, {}, 0, 0, {}}};
    auto r = decode_result(call(self, worker, {encode_forward(83, chunk, {10}, s1)}).bytes, &error);
    REQUIRE(r);
    REQUIRE(r->error.empty());
    REQUIRE(r->results[0].prompt.size() == 3);
    const Ids want_tokens{3575, 282, 4649};
    for (size_t j = 0; j < 3; ++j) {
      CHECK(r->results[0].prompt[j].token == want_tokens[j]);
      CHECK(r->results[0].prompt[j].logprob < 0.0f);
      CHECK(r->results[0].prompt[j].top.size() == 2);
    }
    // A pass that asks for no scores gets none.
    auto plain = decode_result(call(self, worker, {encode_forward(84, b, {9}, sampling)}).bytes, &error);
    REQUIRE(plain);
    CHECK(plain->results[0].prompt.empty());
    // A top count out of range is refused before anything runs.
    chunk.reqs[0].prompt_top_n = 21;
    auto bad = decode_result(call(self, worker, {encode_forward(85, chunk, {10}, s1)}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("prompt_top_n") != std::string::npos);
    chunk.reqs[0].prompt_top_n = 0;
    chunk.reqs[0].next_token = 1 << 30;
    bad = decode_result(call(self, worker, {encode_forward(86, chunk, {10}, s1)}).bytes, &error);
    REQUIRE(bad);
    CHECK(bad->error.find("next_token") != std::string::npos);
  }
}

TEST_CASE("A verify batch samples each of its last logit_rows positions as one-token steps would", "[actors][speculative]") {
  Rig rig;
  auto& runner = rig.runner;
  auto& worker = rig.worker;
  auto& self = rig.self;
  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.frequency_penalty = 0.5f;
  seeded.seed = 5;
  seeded.has_seed = true;
  std::string error;
  auto run = [&](const ForwardBatch& b, const std::vector<SampleRequest>& s) {
    auto r = decode_result(call(self, worker, {encode_forward(1, b, {9}, s)}).bytes, &error);
    REQUIRE(r);
    REQUIRE(r->error.empty());
    return r->results;
  };
  // "The capital of France is", then one token at a time: three steps.
  const Ids prompt{504, 3575, 282, 4649, 314};
  ForwardBatch b;
  b.reqs = {{0, 0, 5}};
  b.token_ids = prompt;
  b.out_cache_loc = {1, 2, 3, 4, 5};
  b.writes = {{0, 0, {1, 2, 3, 4, 5}}};
  Ids out{run(b, {{seeded, {}, {}, 0, 0, {}}})[0].token};
  for (int32_t pos = 5; pos < 8; ++pos) {
    ForwardBatch d;
    d.reqs = {{0, pos, 1}};
    d.token_ids = {out.back()};
    d.out_cache_loc = {pos + 1};
    d.writes = {{0, pos, {pos + 1}}};
    out.push_back(run(d, {{seeded, {}, out, out.size(), 0, {}}})[0].token);
  }
  // The same three positions in one pass over rows 11.., drafts = what the
  // steps produced: each row sees the drafts before it as output.
  ForwardBatch v;
  v.reqs = {{0, 5, 3}};
  v.reqs[0].logit_rows = 3;
  v.token_ids = {out[0], out[1], out[2]};
  v.out_cache_loc = {11, 12, 13};
  v.writes = {{0, 5, {11, 12, 13}}};
  std::vector<Ids> row_out{{out[0]}, {out[0], out[1]}, {out[0], out[1], out[2]}};
  std::vector<SampleRequest> rows;
  for (size_t j = 0; j < 3; ++j) rows.push_back({seeded, {}, row_out[j], row_out[j].size(), 0, {}});
  const auto got = run(v, rows);
  REQUIRE(got.size() == 3);
  for (size_t j = 0; j < 3; ++j) CHECK(got[j].token == out[j + 1]);
  // Masks travel per row: a row whose mask allows one token samples it.
  std::vector<uint32_t> only(static_cast<size_t>(runner->model_config().vocab_size + 31) / 32, 0u);
  only[7042 / 32] = 1u << (7042 % 32);
  rows[1].allowed = only;
  const auto masked = run(v, rows);
  CHECK(masked[0].token == out[1]);
  CHECK(masked[1].token == 7042);
  // Out of range: more rows than tokens.
  v.reqs[0].logit_rows = 4;
  rows.push_back(rows.back());
  auto r = decode_result(call(self, worker, {encode_forward(2, v, {9}, rows)}).bytes, &error);
  REQUIRE(r);
  CHECK(r->error.find("logit_rows") != std::string::npos);
  anon_send_exit(worker, caf::exit_reason::user_shutdown);
}
