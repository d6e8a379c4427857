// KV moved between two engines in chunks: what the receiver decodes from the
// transferred rows is what the sender would have decoded, and nothing damaged,
// foreign or repeated gets in.

#include "cluster/transfer/kv_transfer.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>

#include "messages/envelope.hpp"
#include "model/host_executor.hpp"
#include "tests/model/model_test_support.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const NodeModel kModel{"SmolLM2-135M", 49152, 30, 576, 1234};

std::unique_ptr<ModelRunner> make_runner(bool f16_kv = false) {
  auto executor = std::make_unique<HostExecutor>(load_llama_weights(default_model_path()),
                                                 std::make_unique<cpu::CpuBackend>(0), f16_kv);
  return std::make_unique<ModelRunner>(std::move(executor),
                                       ModelRunnerConfig{.kv_pool_rows = 2048, .max_requests = 4, .max_context = 1024});
}

Ids prompt_of(size_t n) {
  std::mt19937 rng(7);
  Ids p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng() % 40000) + 100;
  return p;
}

// Sends every chunk of rows `from` (on a) to rows `to` (on b), as bytes.
void transfer(const ModelRunner& a, ModelRunner& b, const Ids& from, const Ids& to, int64_t max_bytes) {
  const KvLayout la = kv_layout(a, kModel), lb = kv_layout(b, kModel);
  const auto n = static_cast<int32_t>(from.size());
  KvAssembly assembly(42, n, lb.n_layers);
  for (const KvChunkRange& r : plan_kv_chunks(n, la, max_bytes)) {
    auto span_of = [&](const Ids& rows) {
      return std::span<const int32_t>(rows).subspan(static_cast<size_t>(r.first_token),
                                                    static_cast<size_t>(r.last_token - r.first_token));
    };
    std::vector<uint8_t> data = a.read_kv(span_of(from), r.first_layer, r.last_layer);
    REQUIRE(static_cast<int64_t>(data.size()) <= std::max(max_bytes, la.token_bytes));
    std::vector<uint8_t> wire = encode_kv_chunk(42, la, n, r, data);
    std::string error;
    auto chunk = decode_kv_chunk(wire, lb, &error);
    REQUIRE(chunk);
    REQUIRE_FALSE(assembly.accept(*chunk));
    b.write_kv(span_of(to), chunk->range.first_layer, chunk->range.last_layer, chunk->data);
  }
  REQUIRE(assembly.complete());
}

}  // namespace

TEST_CASE("Chunk plans cover every layer of every token once within the size bound", "[kv_transfer]") {
  const KvLayout layout{"m", "f32", 30, 2 * 192 * 4};
  for (int32_t tokens : {1, 7, 100, 1500}) {
    for (int64_t max_bytes : {int64_t{1}, int64_t{1000}, int64_t{64} << 10, int64_t{4} << 20}) {
      INFO(tokens << " tokens, chunks of " << max_bytes);
      KvAssembly cover(1, tokens, layout.n_layers);
      for (const auto& r : plan_kv_chunks(tokens, layout, max_bytes)) {
        CHECK(r.bytes(layout) <= std::max(max_bytes, layout.token_bytes));
        REQUIRE_FALSE(cover.accept({1, tokens, r, {}}));
      }
      CHECK(cover.complete());
    }
  }
  CHECK(plan_kv_chunks(0, layout, 1000).empty());
  // A streamed transfer plans each ready range on its own: together they
  // still cover everything once, and no chunk leaves its range.
  KvAssembly pieces(1, 1500, layout.n_layers);
  for (auto [from, to] : {std::pair{0, 512}, std::pair{512, 1024}, std::pair{1024, 1500}}) {
    for (const auto& r : plan_kv_chunks(from, to, layout, int64_t{64} << 10)) {
      CHECK((r.first_token >= from && r.last_token <= to));
      REQUIRE_FALSE(pieces.accept({1, 1500, r, {}}));
    }
  }
  CHECK(pieces.complete());
}

TEST_CASE("A prompt's KV moved to another engine decodes exactly as on the engine that computed it", "[kv_transfer]") {
  const bool f16 = GENERATE(false, true);
  INFO((f16 ? "f16" : "f32") << " KV pools");
  auto a = make_runner(f16), b = make_runner(f16);
  REQUIRE(a->kv_dtype() == (f16 ? "f16" : "f32"));
  const Ids prompt = prompt_of(300);
  Ids rows_a(prompt.size() + 1), rows_b(prompt.size() + 1);
  std::iota(rows_a.begin(), rows_a.end(), 1);
  std::iota(rows_b.begin(), rows_b.end(), 700);  // other rows on the other engine
  ForwardOutput first = test::run_request(*a, 0, rows_a, 0, prompt);
  const int32_t next = test::argmax(first.row(0), first.vocab);

  const Ids from(rows_a.begin(), rows_a.end() - 1), to(rows_b.begin(), rows_b.end() - 1);
  for (int64_t max_bytes : {int64_t{4} << 20, int64_t{50000}, int64_t{1000}}) {
    INFO("chunks of at most " << max_bytes << " bytes");
    transfer(*a, *b, from, to, max_bytes);
    // The next token decodes from the transferred rows on B as from the
    // computed ones on A: the same logits, bit for bit.
    ForwardOutput on_a = test::run_request(*a, 1, rows_a, static_cast<int32_t>(prompt.size()), {next});
    ForwardOutput on_b = test::run_request(*b, 1, rows_b, static_cast<int32_t>(prompt.size()), {next});
    REQUIRE(on_a.logits.size() == on_b.logits.size());
    CHECK(std::memcmp(on_a.logits.data(), on_b.logits.data(), on_a.logits.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("Damaged, foreign, misfitting and repeated KV chunks are refused", "[kv_transfer]") {
  auto a = make_runner();
  const KvLayout layout = kv_layout(*a, kModel);
  const Ids rows{1, 2, 3, 4};
  const KvChunkRange range{0, 2, 0, 4};
  std::vector<uint8_t> data = a->read_kv(rows, 0, 2);
  const std::vector<uint8_t> good = encode_kv_chunk(9, layout, 4, range, data);
  std::string error;
  REQUIRE(decode_kv_chunk(good, layout, &error));

  SECTION("a flipped byte anywhere") {
    for (size_t at : {size_t{3}, size_t{20}, good.size() / 2, good.size() - 1}) {
      auto bad = good;
      bad[at] ^= 0x10;
      CHECK_FALSE(decode_kv_chunk(bad, layout, &error));
    }
  }
  SECTION("data whose CRC does not match, inside an intact envelope") {
    auto wrong = data;
    wrong[5] ^= 1;
    fb::KvChunkT c;
    msg::open<fb::KvChunk>(good).message->UnPackTo(&c);
    c.data = wrong;  // the CRC still says what the sender read
    CHECK_FALSE(decode_kv_chunk(msg::pack(c), layout, &error));
    CHECK(error.find("CRC") != std::string::npos);
  }
  SECTION("another model, dtype or shape") {
    KvLayout other = layout;
    other.model_digest = kv_model_digest({"other", 49152, 30, 576, 1234});
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, other, 4, range, data), layout, &error));
    CHECK(error.find("another model") != std::string::npos);
    other = layout;
    other.dtype = "f16";
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, other, 4, range, data), layout, &error));
    other = layout;
    other.token_bytes /= 2;
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, other, 4, range, data), layout, &error));
  }
  SECTION("a range outside the transfer or data of the wrong size") {
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, layout, 4, {0, 31, 0, 4}, data), layout, &error));
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, layout, 3, range, data), layout, &error));
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, layout, 4, {0, 2, 2, 1}, data), layout, &error));
    CHECK_FALSE(decode_kv_chunk(encode_kv_chunk(9, layout, 4, {0, 1, 0, 4}, data), layout, &error));
    CHECK(error.find("bytes") != std::string::npos);
  }
  SECTION("a chunk twice, or for another request") {
    KvAssembly assembly(9, 4, layout.n_layers);
    auto chunk = decode_kv_chunk(good, layout, &error);
    CHECK_FALSE(assembly.accept(*chunk));
    CHECK(assembly.accept(*chunk));
    KvAssembly other(10, 4, layout.n_layers);
    CHECK(other.accept(*chunk));
    CHECK(assembly.missing() == 4 * (layout.n_layers - 2));
  }
  SECTION("the pool refuses rows or sizes that do not fit it") {
    CHECK_THROWS_AS(a->write_kv(rows, 0, 2, std::span<const uint8_t>(data).first(data.size() - 1)), std::invalid_argument);
    CHECK_THROWS_AS(a->write_kv(Ids{1, 2, 3, 5000}, 0, 2, data), std::invalid_argument);
    CHECK_THROWS_AS(a->read_kv(rows, 0, 31), std::invalid_argument);
  }
}
