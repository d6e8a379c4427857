// Each CUDA kernel against the CPU backend on the same random inputs, through
// the Backend interface (tests/kernels/cuda/cuda_backend.hpp). Fresh inputs per
// case, never zeros. Tolerances are relative L2 errors, stated per op:
//   - float32 on both sides (bias, RoPE): 1e-5;
//   - a bf16 output or bf16 operands (norm, SwiGLU, embedding): 4e-3, one
//     bf16 rounding (2^-8 relative at worst, ~2^-9 on average);
//   - GEMM with bf16 operands over K = 1024: 1e-2;
//   - attention over bf16 K/V with a bf16 output: 1e-2 (the CPU reads the
//     same bf16-rounded K/V, so the error is the output rounding plus the
//     order of summation).

#include "tests/kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/sampler.hpp"

using namespace actorlm;
using V = std::vector<float>;

namespace {

V random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  V v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double rel_l2(const V& got, const V& want) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(std::isfinite(got[i]));
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Rounds to the nearest bf16 (ties to even), as the device stores K/V.
float bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

cpu::CpuBackend& cpu_backend() {
  static cpu::CpuBackend b(2);
  return b;
}

cuda::CudaBackend& gpu() {
  static cuda::CudaBackend b;
  return b;
}

}  // namespace

TEST_CASE("CUDA embedding, RMSNorm, bias, RoPE and SwiGLU agree with the CPU backend", "[gpu][cuda]") {
  std::mt19937 rng(11);
  for (int rows : {1, 7, 64, 300}) {
    INFO("rows " << rows);
    const int hidden = 576, vocab = 1000, heads = 9, kv_heads = 3, hd = 64;
    V table = random_vec(static_cast<size_t>(vocab) * hidden, rng);
    std::vector<int32_t> tokens(static_cast<size_t>(rows));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    V a(static_cast<size_t>(rows) * hidden), b(a.size());
    cpu_backend().embed({table.data(), vocab, hidden}, tokens, a.data());
    gpu().embed({table.data(), vocab, hidden}, tokens, b.data());
    CHECK(rel_l2(b, a) < 4e-3);

    V x = random_vec(a.size(), rng, 3.0f), w = random_vec(hidden, rng);
    cpu_backend().rms_norm(x.data(), w.data(), a.data(), rows, hidden, 1e-5f);
    gpu().rms_norm(x.data(), w.data(), b.data(), rows, hidden, 1e-5f);
    CHECK(rel_l2(b, a) < 4e-3);

    V bias = random_vec(hidden, rng), xa = x, xb = x;
    cpu_backend().add_bias(xa.data(), bias.data(), rows, hidden);
    gpu().add_bias(xb.data(), bias.data(), rows, hidden);
    CHECK(rel_l2(xb, xa) < 1e-6);

    V q = random_vec(static_cast<size_t>(rows) * heads * hd, rng), k = random_vec(static_cast<size_t>(rows) * kv_heads * hd, rng);
    V qa = q, ka = k, qb = q, kb = k;
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 32000);
    RopeTable rope;
    rope.head_dim = hd;
    for (int i = 0; i < hd / 2; ++i) rope.inv_freq.push_back(static_cast<float>(std::pow(100000.0, -2.0 * i / hd)));
    cpu_backend().rope(qa.data(), heads, ka.data(), kv_heads, pos, rope);
    gpu().rope(qb.data(), heads, kb.data(), kv_heads, pos, rope);
    CHECK(rel_l2(qb, qa) < 1e-5);
    CHECK(rel_l2(kb, ka) < 1e-5);

    V gate = random_vec(static_cast<size_t>(rows) * 1536, rng, 2.0f), up = random_vec(gate.size(), rng);
    V sa(gate.size()), sb(gate.size());
    cpu_backend().swiglu(gate.data(), up.data(), sa.data(), static_cast<int64_t>(gate.size()));
    gpu().swiglu(gate.data(), up.data(), sb.data(), static_cast<int64_t>(gate.size()));
    CHECK(rel_l2(sb, sa) < 4e-3);
  }
}

TEST_CASE("CUDA GeGLU, per-head RMSNorm, residual add, scale and softcap agree with the CPU backend", "[gpu][cuda]") {
  std::mt19937 rng(12);
  for (int rows : {1, 9, 200}) {
    INFO("rows " << rows);
    const int n = rows * 1536;
    V gate = random_vec(static_cast<size_t>(n), rng, 2.0f), up = random_vec(gate.size(), rng);
    V a(gate.size()), b(gate.size());
    cpu_backend().geglu(gate.data(), up.data(), a.data(), n);
    gpu().geglu(gate.data(), up.data(), b.data(), n);
    CHECK(rel_l2(b, a) < 4e-3);

    // q/k norms: every 128-wide head of a row on its own.
    const int heads = 12, hd = 128;
    V q = random_vec(static_cast<size_t>(rows) * heads * hd, rng, 3.0f), w = random_vec(hd, rng);
    V qa(q.size()), qb(q.size());
    cpu_backend().rms_norm(q.data(), w.data(), qa.data(), rows * heads, hd, 1e-6f);
    gpu().rms_norm(q.data(), w.data(), qb.data(), rows * heads, hd, 1e-6f);
    CHECK(rel_l2(qb, qa) < 4e-3);

    V x = random_vec(static_cast<size_t>(n), rng, 20.0f), y = random_vec(x.size(), rng), xa = x, xb = x;
    cpu_backend().add(xa.data(), y.data(), n);
    gpu().add(xb.data(), y.data(), n);
    CHECK(rel_l2(xb, xa) < 1e-6);
    cpu_backend().scale(xa.data(), n, 4.5f);
    gpu().scale(xb.data(), n, 4.5f);
    CHECK(rel_l2(xb, xa) < 1e-6);
    cpu_backend().softcap(xa.data(), n, 30.0f);
    gpu().softcap(xb.data(), n, 30.0f);
    CHECK(rel_l2(xb, xa) < 1e-5);
  }
}

TEST_CASE("cuBLAS GEMMs (bf16 in, fp32 accumulate) agree with the CPU backend", "[gpu][cuda]") {
  std::mt19937 rng(12);
  for (int rows : {1, 5, 64, 257}) {
    for (bool acc : {false, true}) {
      INFO("rows " << rows << " accumulate " << acc);
      const int in = 1024, out = 384;
      V x = random_vec(static_cast<size_t>(rows) * in, rng), w = random_vec(static_cast<size_t>(out) * in, rng, 0.03f);
      V init = random_vec(static_cast<size_t>(rows) * out, rng), ya = init, yb = init;
      cpu_backend().matmul(x.data(), rows, {w.data(), out, in}, ya.data(), acc);
      gpu().matmul(x.data(), rows, {w.data(), out, in}, yb.data(), acc);
      CHECK(rel_l2(yb, ya) < 1e-2);
    }
  }
}

TEST_CASE("The CUDA KV store writes each token's K and V to its pool row and nothing else", "[gpu][cuda]") {
  std::mt19937 rng(13);
  for (int page : {1, 16}) {
    const int rows = 512, kv_heads = 2, hd = 128, kv_dim = kv_heads * hd, T = 37;
    V kc = random_vec(static_cast<size_t>(rows) * kv_dim, rng), vc = random_vec(kc.size(), rng);
    for (auto& f : kc) f = bf16_round(f);
    for (auto& f : vc) f = bf16_round(f);
    std::vector<int32_t> perm(rows / page - 1);
    std::iota(perm.begin(), perm.end(), 1);  // page 0 is the dummy page
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> loc;
    for (int t = 0; t < T; ++t) loc.push_back(perm[static_cast<size_t>(t / page)] * page + t % page);
    V k = random_vec(static_cast<size_t>(T) * kv_dim, rng), v = random_vec(k.size(), rng);
    V ka = kc, va = vc, kb = kc, vb = vc;
    cpu_backend().store_kv({ka.data(), va.data(), rows, kv_heads, hd}, k.data(), v.data(), loc);
    gpu().store_kv({kb.data(), vb.data(), rows, kv_heads, hd}, k.data(), v.data(), loc);
    CHECK(rel_l2(kb, ka) < 4e-3);
    CHECK(rel_l2(vb, va) < 4e-3);
    std::vector<bool> written(rows, false);
    for (int32_t r : loc) written[static_cast<size_t>(r)] = true;
    for (int r = 0; r < rows; ++r) {
      if (written[static_cast<size_t>(r)]) continue;
      INFO("untouched row " << r);
      REQUIRE(std::equal(kb.begin() + r * kv_dim, kb.begin() + (r + 1) * kv_dim, kc.begin() + r * kv_dim));
    }
  }
}

namespace {

struct AttnCase {
  int heads, kv_heads, hd;
};

// A batch of requests with prefixes and new queries over a shuffled paged
// pool; the same bf16-rounded K/V on both backends.
void check_attention(const AttnCase& c, int page, const std::vector<std::pair<int, int>>& prefix_and_q, std::mt19937& rng,
                     LayerAttention layer = {}) {
  int64_t total_kv = 0;
  for (auto [p, q] : prefix_and_q) total_kv += (p + q + page - 1) / page * page;
  const int64_t pool_rows = total_kv + page;  // + the dummy page
  const int kv_dim = c.kv_heads * c.hd;
  V kc = random_vec(static_cast<size_t>(pool_rows) * kv_dim, rng), vc = random_vec(kc.size(), rng);
  for (auto& f : kc) f = bf16_round(f);
  for (auto& f : vc) f = bf16_round(f);
  std::vector<int32_t> pages(static_cast<size_t>(total_kv / page));
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  AttentionPlan plan;
  plan.n_heads = c.heads;
  plan.n_kv_heads = c.kv_heads;
  plan.head_dim = c.hd;
  plan.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  plan.kv_indptr.push_back(0);
  size_t next_page = 0;
  int32_t q_rows = 0;
  for (auto [p, q] : prefix_and_q) {
    plan.q_start.push_back(q_rows);
    plan.q_len.push_back(q);
    plan.prefix_len.push_back(p);
    for (int pos = 0; pos < p + q; ++pos) {
      if (pos % page == 0) ++next_page;
      plan.kv_indices.push_back(pages[next_page - 1] * page + pos % page);
    }
    plan.kv_indptr.push_back(static_cast<int32_t>(plan.kv_indices.size()));
    q_rows += q;
  }
  V q = random_vec(static_cast<size_t>(q_rows) * c.heads * c.hd, rng, 2.0f);
  V a(q.size()), b(q.size(), std::nanf(""));
  KvLayerView view{kc.data(), vc.data(), pool_rows, c.kv_heads, c.hd};
  cpu_backend().attention(q.data(), view, plan, layer, a.data());
  gpu().attention(q.data(), view, plan, layer, b.data());
  CHECK(rel_l2(b, a) < 1e-2);
}

}  // namespace

TEST_CASE("CUDA paged attention agrees with the CPU backend: decode and extend, GQA 1 to 16, head_dim 8 to 256, pages 1 and 16", "[gpu][cuda][attention]") {
  std::mt19937 rng(14);
  // head_dim 8 and 16: the tiny architecture test files (tests/fixtures/architectures).
  const std::vector<AttnCase> cases{{4, 4, 64},   {9, 3, 64},  {14, 2, 64}, {8, 2, 32}, {32, 8, 128},
                                    {32, 2, 128}, {8, 8, 256}, {4, 2, 8},   {6, 2, 16}};
  for (const auto& c : cases) {
    for (int page : {1, 16}) {
      INFO("heads " << c.heads << " kv_heads " << c.kv_heads << " head_dim " << c.hd << " page " << page);
      for (int batch : {1, 8, 64}) {
        INFO("decode batch " << batch);
        std::vector<std::pair<int, int>> reqs;
        for (int i = 0; i < batch; ++i) reqs.push_back({static_cast<int>(rng() % (batch == 1 ? 6000 : 1500)), 1});
        check_attention(c, page, reqs, rng);
      }
      INFO("extend mix");
      check_attention(c, page, {{0, 77}, {130, 1}, {16, 200}, {1000, 33}, {5, 1}}, rng);
      check_attention(c, page, {{0, 1}}, rng);  // a one-token prompt
      // Gemma's local layers and soft-capped scores, alone and together.
      const std::vector<std::pair<int, int>> mix{{0, 77}, {130, 1}, {1000, 33}, {3000, 1}};
      check_attention(c, page, mix, rng, {37, 0.0f});
      check_attention(c, page, mix, rng, {0, 20.0f});
      check_attention(c, page, mix, rng, {512, 30.0f});
    }
  }
}

TEST_CASE("CUDA sampling: greedy and penalties pick the CPU's token, filters keep to their sets", "[gpu][cuda][sampling]") {
  std::mt19937 rng(15);
  const int vocab = 49152;
  for (int rows : {1, 8, 64}) {
    V logits = random_vec(static_cast<size_t>(rows) * vocab, rng, 4.0f);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(rows)), outputs(static_cast<size_t>(rows));
    std::vector<SampleRequest> reqs(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      auto& q = reqs[static_cast<size_t>(r)];
      q.params.temperature = 0.0f;
      if (r % 2) {
        q.params.repetition_penalty = 1.3f;
        q.params.frequency_penalty = 0.5f;
        q.params.presence_penalty = 0.4f;
      }
      // Penalise the row's current top tokens so the penalties decide.
      std::vector<int32_t> idx(vocab);
      std::iota(idx.begin(), idx.end(), 0);
      const float* row = logits.data() + static_cast<size_t>(r) * vocab;
      std::partial_sort(idx.begin(), idx.begin() + 6, idx.end(), [&](int a, int b) { return row[a] > row[b]; });
      prompts[static_cast<size_t>(r)] = {idx[0], idx[3], 17};
      outputs[static_cast<size_t>(r)] = {idx[1], idx[1], idx[2], 99};
      q.prompt = prompts[static_cast<size_t>(r)];
      q.output = outputs[static_cast<size_t>(r)];
    }
    auto want = cpu_backend().sample(logits.data(), vocab, reqs);
    auto got = gpu().sample(logits.data(), vocab, reqs);
    for (int r = 0; r < rows; ++r) {
      INFO("row " << r);
      CHECK(got[static_cast<size_t>(r)].token == want[static_cast<size_t>(r)].token);
      CHECK(got[static_cast<size_t>(r)].logprob == Approx(want[static_cast<size_t>(r)].logprob).margin(1e-4));
    }
  }

  // Distribution checks on one row: 4000 seeded draws. Five clear leaders
  // over a background far below them (negligible mass), so each filter's
  // kept set is known exactly.
  V row = random_vec(vocab, rng, 1.0f);
  for (auto& f : row) f -= 10.0f;
  row[5] = 9.0f;
  row[6] = 8.5f;
  row[7] = 8.0f;
  row[8] = 7.0f;
  row[9] = 6.0f;
  auto draw = [&](SamplingParams p) {
    const int n = 4000;
    V many(static_cast<size_t>(n) * vocab);
    std::vector<SampleRequest> reqs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      std::copy(row.begin(), row.end(), many.begin() + static_cast<int64_t>(i) * vocab);
      reqs[static_cast<size_t>(i)].params = p;
      reqs[static_cast<size_t>(i)].step = static_cast<uint64_t>(i);
    }
    std::map<int32_t, int> counts;
    for (const auto& r : gpu().sample(many.data(), vocab, reqs)) ++counts[r.token];
    return counts;
  };
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.seed = 42;
  p.has_seed = true;
  auto counts = draw(p);
  CHECK(counts.size() == 3);
  CHECK(counts.count(5));
  CHECK(counts.count(6));
  CHECK(counts.count(7));
  // Renormalised over the top 3: e^9, e^8.5, e^8 -> 0.506, 0.307, 0.186.
  CHECK(counts[5] / 4000.0 == Approx(0.506).margin(0.04));
  CHECK(counts[7] / 4000.0 == Approx(0.186).margin(0.04));
  p.top_k = 0;
  p.top_p = 0.5f;  // p(5) = 0.463 < 0.5 <= p(5) + p(6): exactly tokens 5 and 6
  counts = draw(p);
  CHECK(counts.size() == 2);
  CHECK(counts.count(5));
  CHECK(counts.count(6));
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // keeps p >= 0.5 p_max: tokens 5 and 6 (e^-0.5 = 0.61)
  counts = draw(p);
  CHECK(counts.size() == 2);
  CHECK(counts.count(5));
  CHECK(counts.count(6));
  // The same (seed, step) gives the same token whatever else is in the batch.
  p.min_p = 0.0f;
  p.top_k = 50;
  auto again = draw(p), once_more = draw(p);
  CHECK(again == once_more);

  V dead(vocab, -INFINITY);
  std::vector<SampleRequest> one(1);
  CHECK_THROWS_AS(gpu().sample(dead.data(), vocab, one), std::domain_error);
}
