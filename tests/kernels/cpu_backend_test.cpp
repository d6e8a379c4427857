// Each CPU kernel against a naive reference written here, element-wise.
// Tolerances: float32 ops with different summation order — 1e-5 relative
// (plus 1e-6 absolute) except GEMM/attention over long reductions (1e-4).

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/half.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace actorlm;
using V = std::vector<float>;

namespace {

V random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  V v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void require_close(const V& got, const V& want, double rel, double abs = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - want[i]) <= abs + rel * std::abs(want[i]));
  }
}

cpu::CpuBackend& backend() {
  static cpu::CpuBackend b(2);
  return b;
}

}  // namespace

TEST_CASE("RMSNorm matches the definition", "[kernels]") {
  std::mt19937 rng(1);
  const int rows = 5, cols = 576;
  V x = random_vec(rows * cols, rng, 3.0f), w = random_vec(cols, rng), out(x.size()), want(x.size());
  backend().rms_norm(x.data(), w.data(), out.data(), rows, cols, 1e-5f);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < cols; ++i) ss += double(x[r * cols + i]) * x[r * cols + i];
    double inv = 1 / std::sqrt(ss / cols + 1e-5);
    for (int i = 0; i < cols; ++i) want[r * cols + i] = float(x[r * cols + i] * inv * w[i]);
  }
  require_close(out, want, 1e-5);
}

TEST_CASE("GEMM against weights transposed matches a naive product", "[kernels]") {
  std::mt19937 rng(2);
  for (int rows : {1, 3, 17}) {
    const int in = 96, out_dim = 40;
    V x = random_vec(rows * in, rng), w = random_vec(out_dim * in, rng), y(rows * out_dim, 0.5f), want(y.size());
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out_dim; ++o) {
        double s = 0.5;  // accumulate onto the existing value
        for (int i = 0; i < in; ++i) s += double(x[r * in + i]) * w[o * in + i];
        want[r * out_dim + o] = float(s);
      }
    }
    backend().matmul(x.data(), rows, {w.data(), out_dim, in}, y.data(), /*accumulate=*/true);
    require_close(y, want, 1e-4, 1e-4);
  }
}

TEST_CASE("RoPE rotates adjacent pairs by position times frequency", "[kernels]") {
  std::mt19937 rng(3);
  const int hd = 64, nh = 3, nkv = 1;
  std::vector<int32_t> pos{0, 1, 7, 4000};
  RopeTable t;
  t.head_dim = hd;
  for (int i = 0; i < hd / 2; ++i) t.inv_freq.push_back(float(std::pow(10000.0, -2.0 * i / hd)));
  V q = random_vec(pos.size() * nh * hd, rng), k = random_vec(pos.size() * nkv * hd, rng);
  V q0 = q, k0 = k;
  backend().rope(q.data(), nh, k.data(), nkv, pos, t);
  auto check = [&](const V& got, const V& orig, int heads) {
    for (size_t p = 0; p < pos.size(); ++p) {
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < hd / 2; ++i) {
          size_t b = (p * heads + h) * hd + 2 * i;
          double th = double(pos[p]) * t.inv_freq[i];
          double x0 = orig[b], x1 = orig[b + 1];
          REQUIRE(got[b] == Approx(x0 * std::cos(th) - x1 * std::sin(th)).margin(2e-4));
          REQUIRE(got[b + 1] == Approx(x0 * std::sin(th) + x1 * std::cos(th)).margin(2e-4));
        }
      }
    }
  };
  check(q, q0, nh);
  check(k, k0, nkv);
  // Position 0 is the identity.
  for (int i = 0; i < nh * hd; ++i) REQUIRE(q[i] == q0[i]);
}

TEST_CASE("GeGLU is gelu(gate) * up in the tanh form, and add, scale and softcap are elementwise", "[kernels]") {
  std::mt19937 rng(14);
  V g = random_vec(1000, rng, 4.0f), u = random_vec(1000, rng), out(1000), want(1000);
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    want[i] = float(0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i]);
  }
  backend().geglu(g.data(), u.data(), out.data(), 1000);
  require_close(out, want, 1e-5);
  V x = g;
  backend().add(x.data(), u.data(), 1000);
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == g[i] + u[i]);
  backend().scale(x.data(), 1000, 0.5f);
  backend().softcap(x.data(), 1000, 2.0f);
  for (size_t i = 0; i < x.size(); ++i) want[i] = float(2.0 * std::tanh(0.5 * (g[i] + u[i]) / 2.0));
  require_close(x, want, 1e-5);
}

TEST_CASE("SwiGLU is silu(gate) * up", "[kernels]") {
  std::mt19937 rng(4);
  V g = random_vec(1000, rng, 4.0f), u = random_vec(1000, rng), out(1000), want(1000);
  for (size_t i = 0; i < g.size(); ++i) want[i] = float(g[i] / (1 + std::exp(-double(g[i]))) * u[i]);
  backend().swiglu(g.data(), u.data(), out.data(), 1000);
  require_close(out, want, 1e-5);
}

// The vector exp inside SwiGLU is meant to be libm's expf (logits track
// llama.cpp's only as long as it is): silu in float from libm's expf must be
// matched bit for bit but for values a hair from a rounding midpoint, and a
// value's result must not depend on where in the array it sits (batches and
// single sequences give the same bits).
TEST_CASE("SwiGLU's exp is libm's expf and a value's result does not depend on its position", "[kernels]") {
  std::mt19937 rng(11);
  const size_t n = 200003;  // past the pool's threshold, and not a multiple of any vector width
  V g = random_vec(n, rng, 6.0f), u(n, 1.0f), out(n);
  g[0] = 0.0f;
  g[1] = -0.0f;
  g[2] = 88.0f;  // exp(-g) near the smallest normal float
  g[3] = -88.0f;  // exp(-g) near the largest
  g[4] = 200.0f;
  g[5] = -200.0f;  // exp(-g) overflows: silu is -0
  g[6] = INFINITY;
  g[7] = NAN;
  backend().swiglu(g.data(), u.data(), out.data(), static_cast<int64_t>(n));
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = g[i] / (1.0f + std::exp(-g[i]));
    INFO("gate " << g[i] << " silu " << out[i] << " libm " << want);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(out[i]));
    } else if (out[i] != want) {
      ++differ;
      // One ulp of exp moves the quotient by at most a few of its own.
      REQUIRE(std::abs(out[i] - want) <= 4 * (std::nextafter(std::abs(want), INFINITY) - std::abs(want)));
    }
  }
  INFO(differ << " of " << n << " differ");
  CHECK(differ <= n / 1000);  // 46 here; a float polynomial of 1 ulp gave some 10%
  // The same values from other offsets and in shorter arrays.
  for (size_t offset : {1, 3, 7, 13}) {
    V part(n - offset);
    backend().swiglu(g.data() + offset, u.data(), part.data(), static_cast<int64_t>(part.size()));
    REQUIRE(std::memcmp(part.data(), out.data() + offset, part.size() * sizeof(float)) == 0);
    backend().swiglu(g.data() + offset, u.data(), part.data(), 5);
    REQUIRE(std::memcmp(part.data(), out.data() + offset, 5 * sizeof(float)) == 0);
  }
}

// Paged attention over scattered pool rows equals dense causal attention over
// the K/V it was given (prefix rows and store_kv inputs) in position order,
// with a float32 cache and with an f16 one (against the K/V as rounded to
// f16, which is what such a cache holds); with a sliding window (Gemma's
// local layers) only the last `window` positions are attended to, and a
// softcap bends every scaled score.
TEST_CASE("Paged attention equals dense attention on gathered K/V", "[kernels][attention]") {
  struct Shape {
    int heads, kv_heads;
  };
  int page = GENERATE(1, 16);
  Shape shape = GENERATE(Shape{3, 3}, Shape{9, 3}, Shape{8, 2});
  const int hd = GENERATE(64, 128);
  const bool f16 = GENERATE(false, true);
  // No window; one inside a 512-key chunk; one across chunks, with a cap.
  const LayerAttention layer = GENERATE(LayerAttention{}, LayerAttention{100, 0.0f}, LayerAttention{600, 5.0f});
  INFO((f16 ? "f16" : "float32") << " cache, page " << page << ", heads " << shape.heads << "/" << shape.kv_heads
                                 << ", head_dim " << hd << ", window " << layer.sliding_window << ", softcap "
                                 << layer.softcap);
  std::mt19937 rng(5 + static_cast<unsigned>(page * 10 + shape.heads + hd));
  // A long prefill on a cached prefix, a fresh prefill, decodes at contexts
  // around the kernel's 64-key blocks and 512-key chunks, and an extend that
  // crosses a chunk boundary.
  std::vector<int> prefix{37, 0, 250, 63, 511, 1500, 500}, qlen{20, 9, 1, 1, 2, 1, 30};
  const int64_t pool_rows = 4096 + page;
  const int64_t kv_row = int64_t(shape.kv_heads) * hd;
  V kbuf(pool_rows * kv_row, 0.0f), vbuf(pool_rows * kv_row, 0.0f);
  std::vector<uint16_t> k16(f16 ? pool_rows * kv_row : 0), v16(k16.size());
  KvLayerView cache{kbuf.data(), vbuf.data(), pool_rows, shape.kv_heads, hd};
  if (f16) cache = {nullptr, nullptr, pool_rows, shape.kv_heads, hd, k16.data(), v16.data()};
  // What the cache holds for a value.
  auto stored = [&](float x) { return f16 ? f16_to_f32(f32_to_f16(x)) : x; };
  auto put = [&](V& buf32, std::vector<uint16_t>& buf16, int64_t at, const V& row) {
    for (int64_t e = 0; e < kv_row; ++e) {
      buf32[at + e] = row[e];
      if (f16) buf16[at + e] = f32_to_f16(row[e]);
    }
  };

  // Hand out whole pages in shuffled order, position-consistent within a page.
  std::vector<int32_t> pages((pool_rows / page) - 1);
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  size_t next_page = 0;
  AttentionPlan plan;
  plan.n_heads = shape.heads;
  plan.n_kv_heads = shape.kv_heads;
  plan.head_dim = hd;
  plan.scale = 1.0f / std::sqrt(float(hd));
  plan.kv_indptr.push_back(0);
  std::vector<int32_t> new_rows;
  // K/V of every request by position, kept apart from the pool so the
  // reference never reads what store_kv wrote: a misplaced store must show.
  std::vector<V> k_at(prefix.size()), v_at(prefix.size());
  int q_start = 0;
  for (size_t r = 0; r < prefix.size(); ++r) {
    int len = prefix[r] + qlen[r];
    std::vector<int32_t> rows(static_cast<size_t>(len));
    for (int p = 0; p < len; ++p) {
      if (p % page == 0) ++next_page;
      rows[static_cast<size_t>(p)] = pages[next_page - 1] * page + p % page;
    }
    plan.q_start.push_back(q_start);
    plan.q_len.push_back(qlen[r]);
    plan.prefix_len.push_back(prefix[r]);
    plan.kv_indices.insert(plan.kv_indices.end(), rows.begin(), rows.end());
    plan.kv_indptr.push_back(static_cast<int32_t>(plan.kv_indices.size()));
    // Prefix K/V already in the pool; new tokens' K/V stored by store_kv.
    for (int p = 0; p < prefix[r]; ++p) {
      V kr = random_vec(kv_row, rng), vr = random_vec(kv_row, rng);
      put(kbuf, k16, rows[p] * kv_row, kr);
      put(vbuf, v16, rows[p] * kv_row, vr);
      for (float x : kr) k_at[r].push_back(stored(x));
      for (float x : vr) v_at[r].push_back(stored(x));
    }
    new_rows.insert(new_rows.end(), rows.begin() + prefix[r], rows.end());
    q_start += qlen[r];
  }
  const int T = q_start;
  V knew = random_vec(T * kv_row, rng), vnew = random_vec(T * kv_row, rng);
  backend().store_kv(cache, knew.data(), vnew.data(), new_rows);
  for (size_t r = 0; r < prefix.size(); ++r) {
    const auto from = static_cast<ptrdiff_t>(plan.q_start[r] * kv_row), to = from + qlen[r] * kv_row;
    for (auto i = from; i < to; ++i) {
      k_at[r].push_back(stored(knew[static_cast<size_t>(i)]));
      v_at[r].push_back(stored(vnew[static_cast<size_t>(i)]));
    }
  }
  V q = random_vec(T * shape.heads * hd, rng), out(q.size()), want(q.size());
  backend().attention(q.data(), cache, plan, layer, out.data());

  const int group = shape.heads / shape.kv_heads;
  for (size_t r = 0; r < prefix.size(); ++r) {
    for (int j = 0; j < qlen[r]; ++j) {
      int qi = plan.q_start[r] + j;
      int visible = prefix[r] + j + 1;
      int first = layer.sliding_window > 0 ? std::max(0, visible - layer.sliding_window) : 0;
      for (int h = 0; h < shape.heads; ++h) {
        int kvh = h / group;
        std::vector<double> s(static_cast<size_t>(visible));
        double mx = -1e300;
        for (int p = first; p < visible; ++p) {
          double d = 0;
          for (int e = 0; e < hd; ++e) d += double(q[(qi * shape.heads + h) * hd + e]) * k_at[r][p * kv_row + kvh * hd + e];
          s[p] = d * plan.scale;
          if (layer.softcap > 0) s[p] = layer.softcap * std::tanh(s[p] / layer.softcap);
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (int p = first; p < visible; ++p) sum += (s[p] = std::exp(s[p] - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int p = first; p < visible; ++p) acc += s[p] * v_at[r][p * kv_row + kvh * hd + e];
          want[(qi * shape.heads + h) * hd + e] = float(acc / sum);
        }
      }
    }
  }
  require_close(out, want, 1e-4, 1e-5);

  // Batch invariance: each request alone gives bit for bit what it got in
  // the batch (alone, a long decode is split over the KV sequence across
  // threads; in the batch it is not).
  for (size_t r = 0; r < prefix.size(); ++r) {
    INFO("request " << r << " alone");
    AttentionPlan one = plan;
    one.q_start = {0};
    one.q_len = {qlen[r]};
    one.prefix_len = {prefix[r]};
    one.kv_indices.assign(plan.kv_indices.begin() + plan.kv_indptr[r], plan.kv_indices.begin() + plan.kv_indptr[r + 1]);
    one.kv_indptr = {0, static_cast<int32_t>(one.kv_indices.size())};
    const int64_t row = int64_t(shape.heads) * hd;
    V q_one(q.begin() + plan.q_start[r] * row, q.begin() + (plan.q_start[r] + qlen[r]) * row);
    V alone(q_one.size());
    backend().attention(q_one.data(), cache, one, layer, alone.data());
    REQUIRE(std::equal(alone.begin(), alone.end(), out.begin() + plan.q_start[r] * row));
  }
}

TEST_CASE("Out-of-range token ids and KV rows are errors, not memory corruption", "[kernels]") {
  V table(4 * 8, 1.0f), out(8);
  std::vector<int32_t> bad{4};
  CHECK_THROWS_AS(backend().embed({table.data(), 4, 8}, bad, out.data()), std::out_of_range);
  V kb(16 * 64), vb(16 * 64), k(64), v(64);
  KvLayerView cache{kb.data(), vb.data(), 16, 1, 64};
  std::vector<int32_t> row{16};
  CHECK_THROWS_AS(backend().store_kv(cache, k.data(), v.data(), row), std::out_of_range);
}
