#include "model/model_runner.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/draft_model.hpp"
#include "model/host_executor.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/model/tiny_llama_gguf.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

constexpr int32_t kModelDraftPlaceholder = -1;

ForwardBatch good_batch() {
  ForwardBatch b;
  b.reqs = {{0, 0, 3}};
  b.token_ids = {504, 3575, 282};
  b.out_cache_loc = {1, 2, 3};
  b.writes = {{0, 0, {1, 2, 3}}};
  return b;
}

void expect_rejected(const ForwardBatch& b, const std::string& fragment) {
  try {
    test::default_runner().forward(b);
    FAIL("batch was accepted");
  } catch (const std::invalid_argument& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("The runner reports the model it loaded", "[model]") {
  const ModelConfig& c = test::default_runner().model_config();
  CHECK(c.n_layers == 30);
  CHECK(c.hidden == 576);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.ffn_hidden == 1536);
  CHECK(c.vocab_size == 49152);
  CHECK(c.tied_embeddings);
  CHECK(test::default_runner().forward(good_batch()).rows() == 1);
}

TEST_CASE("Inconsistent batches are rejected with a reason and change nothing", "[model]") {
  ModelRunner& runner = test::default_runner();
  runner.forward(good_batch());
  // A decode after the good prefill reads slot 0's table and KV rows 1..3;
  // its logits show any change a rejected batch left behind.
  ForwardBatch probe;
  probe.reqs = {{0, 3, 1}};
  probe.token_ids = {4649};
  probe.out_cache_loc = {4};
  probe.writes = {{0, 3, {4}}};
  const std::vector<float> before = runner.forward(probe).logits;
  REQUIRE_FALSE(before.empty());

  // Each flaw sits on a batch that, were it run even in part, would repoint
  // slot 0 at rows 11..13 and fill them with other tokens' K/V.
  auto bad = [] {
    ForwardBatch b = good_batch();
    b.token_ids = {100, 200, 300};
    b.out_cache_loc = {11, 12, 13};
    b.writes = {{0, 0, {11, 12, 13}}};
    return b;
  };
  ForwardBatch b = bad();
  b.token_ids[1] = 49152;
  expect_rejected(b, "vocabulary");
  b = bad();
  b.out_cache_loc[2] = 1 << 20;
  expect_rejected(b, "outside the pool");
  b = bad();
  b.token_ids.pop_back();
  expect_rejected(b, "extend lengths");
  b = bad();
  b.reqs[0].slot = 99;
  expect_rejected(b, "slot");
  b = bad();
  b.reqs[0].prefix_len = 1023;
  expect_rejected(b, "context length");
  b = bad();
  b.writes[0].kv = {11, 12, 19};  // the table would not point at row 13
  expect_rejected(b, "does not point at out_cache_loc");
  b = bad();
  b.reqs.clear();
  expect_rejected(b, "no requests");
  // Speculative decoding's fields: a draft count that is not the verify's
  // rows but one, a previous token outside the vocabulary.
  b = bad();
  b.reqs[0].logit_rows = 3;
  b.reqs[0].model_drafts = 1;
  expect_rejected(b, "model_drafts");
  b = bad();
  b.reqs[0].prefix_len = 1;
  b.reqs[0].draft_prev_token = 49152;
  expect_rejected(b, "draft_prev_token");
  // A step whose drafts are for a draft model this runner does not have.
  b = bad();
  b.reqs[0].logit_rows = 3;
  b.reqs[0].model_drafts = 2;
  b.token_ids = {100, kModelDraftPlaceholder, kModelDraftPlaceholder};
  try {
    runner.step(b, std::vector<SampleRequest>(3));
    FAIL("a step with model drafts ran without a draft model");
  } catch (const std::invalid_argument& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("no draft model") != std::string::npos);
  }

  // Same table, same KV: the probe's logits are bit for bit the same.
  CHECK(runner.forward(probe).logits == before);
}

TEST_CASE("KV rows copied out, in, and pointed at in place agree, over runs and scattered rows", "[model]") {
  ModelRunner& runner = test::default_runner();
  // Runs (consecutive rows copy as one piece), single rows, a descending pair.
  const Ids rows = {40, 41, 42, 43, 7, 300, 301, 12, 11, 500};
  const int32_t first = 3, last = 6;
  std::vector<uint8_t> bytes(rows.size() * (last - first) * static_cast<size_t>(runner.kv_token_bytes()));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  runner.write_kv(rows, first, last, bytes);
  CHECK(runner.read_kv(rows, first, last) == bytes);
  // In place: the same bytes in the same order, one span per run, per layer, per K and V.
  std::vector<std::span<uint8_t>> spans;
  REQUIRE(runner.kv_spans(rows, first, last, spans));
  CHECK(spans.size() == size_t{6} * (last - first) * 2);
  std::vector<uint8_t> gathered;
  for (auto s : spans) gathered.insert(gathered.end(), s.begin(), s.end());
  CHECK(gathered == bytes);
  // Written through the spans, read back by read_kv.
  size_t at = 0;
  for (auto s : spans) {
    for (auto& b : s) b = static_cast<uint8_t>(at++ * 17 + 3);
  }
  const std::vector<uint8_t> after = runner.read_kv(rows, first, last);
  for (size_t i = 0; i < after.size(); ++i) REQUIRE(after[i] == static_cast<uint8_t>(i * 17 + 3));
  // Checked as the copies are.
  CHECK_THROWS_AS(runner.kv_spans(Ids{1, 1 << 30}, 0, 1, spans), std::invalid_argument);
  CHECK_THROWS_AS(runner.kv_spans(rows, 0, 31, spans), std::invalid_argument);
}

TEST_CASE("A draft model must share the target's vocabulary, context and pool rows", "[model][draft]") {
  const ModelRunnerConfig rc{.kv_pool_rows = 64, .max_requests = 2, .max_context = 512};
  ModelRunner target(load_llama_weights(default_model_path()), std::make_unique<cpu::CpuBackend>(1), rc);
  auto draft = [&](uint32_t vocab, uint32_t context, ModelRunnerConfig c) {
    test::TinyLlamaGguf tiny;
    tiny.vocab = tiny.embd_rows = vocab;
    tiny.context = context;
    const auto path = (std::filesystem::temp_directory_path() / "actorlm_runner_draft.gguf").string();
    return std::make_unique<DraftModel>(
        std::make_unique<ModelRunner>(load_llama_weights(tiny.builder().write(path)), std::make_unique<cpu::CpuBackend>(1), c));
  };
  auto refused = [&](std::unique_ptr<DraftModel> d, const std::string& fragment) {
    try {
      target.attach_draft(std::move(d));
      FAIL("attached");
    } catch (const std::invalid_argument& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    }
    CHECK_FALSE(target.has_draft());
  };
  refused(draft(40, 2048, rc), "vocabulary");
  refused(draft(49152, 256, rc), "context");
  refused(draft(49152, 2048, {.kv_pool_rows = 32, .max_requests = 2, .max_context = 512}), "rows");
  target.attach_draft(draft(49152, 2048, rc));
  CHECK(target.has_draft());
  CHECK(target.draft_kv_bytes() > 0);
  CHECK(target.draft_kv_bytes() < target.kv_bytes());  // 2 layers of width 16 beside 30 of 576
}

TEST_CASE("A draft model skips plain decode steps and runs their tokens in one pass before the next drafts: the model drafting for itself keeps them all", "[model][draft]") {
  const ModelRunnerConfig rc{.kv_pool_rows = 128, .max_requests = 2, .max_context = 128};
  const LlamaWeights w = load_llama_weights(default_model_path());
  ModelRunner target(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(2), rc);
  target.attach_draft(std::make_unique<DraftModel>(
      std::make_unique<ModelRunner>(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(2), rc)));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const auto row = [](int32_t pos) { return 100 - pos; };  // rows in descending order: not the positions
  // One step of slot 1: `tokens` from position `at`, the last `drafts` of
  // them placeholders for the draft model; a decode sends the token before
  // again, as the scheduler does.
  Ids seq;  // the tokens at positions 0, 1, ...
  const auto step = [&](int32_t at, Ids tokens, int32_t drafts) {
    seq.resize(static_cast<size_t>(at));
    seq.insert(seq.end(), tokens.begin(), tokens.end() - drafts);
    ForwardBatch b;
    ForwardRequest r;
    r.slot = 1;
    r.prefix_len = at;
    if (at > 0 && tokens.size() - static_cast<size_t>(drafts) == 1) r.draft_prev_token = seq.at(static_cast<size_t>(at - 1));
    r.extend_len = static_cast<int32_t>(tokens.size());
    r.logit_rows = drafts + 1;
    r.model_drafts = drafts;
    b.reqs = {r};
    b.token_ids = std::move(tokens);
    Ids rows;
    for (int32_t i = 0; i < r.extend_len; ++i) rows.push_back(row(at + i));
    b.out_cache_loc = rows;
    b.writes = {{1, at, rows}};
    return target.step(std::move(b), std::vector<SampleRequest>(static_cast<size_t>(drafts + 1), SampleRequest{greedy, {}, {}, 0, 0, {}}));
  };
  const Ids prompt{504, 3575, 282, 253, 1345, 30, 2365, 314};
  auto out = step(0, prompt, 0);
  int32_t at = static_cast<int32_t>(prompt.size());
  // Twelve plain decode steps: the draft model runs none of them.
  for (int i = 0; i < 12; ++i, ++at) out = step(at, Ids{out.at(0).token}, 0);
  // Then three drafts: run over the twelve tokens first, the same weights
  // propose exactly what the target samples.
  out = step(at, Ids{out.at(0).token, kModelDraftPlaceholder, kModelDraftPlaceholder, kModelDraftPlaceholder}, 3);
  REQUIRE(out.size() == 4);
  for (size_t j = 0; j < 3; ++j) {
    INFO("draft " << j);
    CHECK(out[j].draft == out[j].token);
  }
  // A slot taken by another request (its table written from position 0)
  // leaves the earlier request's tokens behind: a prompt and drafts at once
  // run as ever.
  out = step(0, Ids{504, 3575, 282}, 0);
  out = step(3, Ids{out.at(0).token, kModelDraftPlaceholder, kModelDraftPlaceholder}, 2);
  REQUIRE(out.size() == 3);
  CHECK(out[0].draft == out[0].token);
}

TEST_CASE("Runners over copies of one loaded model pack its matrices once and compute alike, and a matrix a copy replaced is its own", "[model]") {
  const LlamaWeights w = load_llama_weights(default_model_path());
  const ModelRunnerConfig small{.kv_pool_rows = 64, .max_requests = 2, .max_context = 64};
  std::vector<float> logits;
  {
    ModelRunner a(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(2), small);
    std::shared_ptr<PreparedWeights> shared = prepared_weights_of(w);
    REQUIRE(shared);
    // q/k/v, o, gate/up and down of 30 layers, and the tied output matrix.
    const size_t packed = shared->size();
    CHECK(packed == 30 * 7 + 1);
    ModelRunner b(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(1), small);
    CHECK(prepared_weights_of(w) == shared);
    CHECK(shared->size() == packed);
    logits = a.forward(good_batch()).logits;
    REQUIRE_FALSE(logits.empty());
    CHECK(b.forward(good_batch()).logits == logits);

    // Layer 0's q projection given layer 1's values in bytes of its own:
    // that matrix is packed for this runner, and the model computes with it.
    LlamaWeights changed = w;
    const WeightMatrix& src = w.layers[1].wq;
    auto copy = std::make_shared<std::vector<uint8_t>>(src.bytes.get(),
                                                       src.bytes.get() + src.row_bytes() * static_cast<size_t>(src.rows));
    changed.layers[0].wq.bytes = std::shared_ptr<const uint8_t>(copy, copy->data());
    ModelRunner c(std::move(changed), std::make_unique<cpu::CpuBackend>(2), small);
    CHECK(shared->size() == packed + 1);
    CHECK(c.forward(good_batch()).logits != logits);
    CHECK(a.forward(good_batch()).logits == logits);
  }
  // With its last runner gone the packed copies go too; a new runner packs
  // again and computes the same.
  CHECK_FALSE(prepared_weights_of(w));
  ModelRunner d(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(2), small);
  CHECK(d.forward(good_batch()).logits == logits);
}
