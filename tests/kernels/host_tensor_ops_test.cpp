// HostTensorOps against the CPU backend's own calls: what the shared layer
// loop asks of it (several-part products, strided views, per-head norms,
// picked rows, scratch marks) gives what the backend gives directly.

#include "kernels/host_tensor_ops.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"

using namespace actorlm;

namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> copy_of(const Tensor& t) {
  std::vector<float> out;
  for (int64_t r = 0; r < t.rows; ++r) out.insert(out.end(), t.f32() + r * t.ld, t.f32() + r * t.ld + t.cols);
  return out;
}

}  // namespace

TEST_CASE("Host tensor ops multiply a several-part weight into its products, packed or strided, set or added", "[model][tensor_ops]") {
  cpu::CpuBackend backend(1);
  HostTensorOps host(backend);
  TensorOps& ops = host;  // as the layer loop calls it (default arguments live on the interface)
  std::mt19937 rng(5);
  const int64_t rows = 7, cols = 64;
  const std::vector<float> wq = random_values(48 * cols, rng), wk = random_values(16 * cols, rng);
  const MatrixView parts[] = {{wq.data(), 48, cols, GgmlType::F32}, {wk.data(), 16, cols, GgmlType::F32}};
  const WeightId w = ops.add_weights(parts);
  CHECK(ops.weight_bytes() == (48 + 16) * cols * 4);
  ops.begin_pass();
  Tensor x = ops.alloc(rows, cols, Use::matmul_input);
  const std::vector<float> xs = random_values(rows * cols, rng);
  std::copy(xs.begin(), xs.end(), x.f32());

  std::vector<float> q(rows * 48), k(rows * 16);
  backend.matmul(xs.data(), rows, parts[0], q.data(), false);
  backend.matmul(xs.data(), rows, parts[1], k.data(), false);

  const std::vector<Tensor> packed = ops.alloc_products(rows, w);
  REQUIRE(packed.size() == 2);
  CHECK(packed[0].contiguous());
  ops.matmul(x, w, packed);
  CHECK(copy_of(packed[0]) == q);
  CHECK(copy_of(packed[1]) == k);

  // Column views of one wide buffer (the GPU's layout) work too, and
  // accumulate adds to what is there.
  Tensor wide = ops.alloc(rows, 64, Use::state);
  std::fill(wide.f32(), wide.f32() + rows * 64, 1.0f);
  const Tensor views[] = {wide.columns(0, 48), wide.columns(48, 16)};
  ops.matmul(x, w, views, /*accumulate=*/true);
  const std::vector<float> got_q = copy_of(views[0]), got_k = copy_of(views[1]);
  for (size_t i = 0; i < q.size(); ++i) REQUIRE(got_q[i] == q[i] + 1.0f);
  for (size_t i = 0; i < k.size(); ++i) REQUIRE(got_k[i] == k[i] + 1.0f);
}

TEST_CASE("Host tensor ops norm each head when the weight is one head wide, and pick rows for the logits", "[model][tensor_ops]") {
  cpu::CpuBackend backend(1);
  HostTensorOps host(backend);
  TensorOps& ops = host;  // as the layer loop calls it (default arguments live on the interface)
  std::mt19937 rng(6);
  const int64_t rows = 5, heads = 3, hd = 32;
  const std::vector<float> head_w = random_values(hd, rng), row_w = random_values(heads * hd, rng);
  const VectorId per_head = ops.add_vector(head_w), per_row = ops.add_vector(row_w);
  ops.begin_pass();
  Tensor x = ops.alloc(rows, heads * hd, Use::state);
  const std::vector<float> xs = random_values(rows * heads * hd, rng);
  std::copy(xs.begin(), xs.end(), x.f32());

  std::vector<float> want(xs.size());
  backend.rms_norm(xs.data(), head_w.data(), want.data(), rows * heads, hd, 1e-6f);
  Tensor y = ops.alloc(rows, heads * hd, Use::state);
  ops.rms_norm(x, per_head, 1e-6f, y);
  CHECK(copy_of(y) == want);
  ops.rms_norm(x, per_head, 1e-6f, x);  // in place, as q/k norms run
  CHECK(copy_of(x) == want);

  std::copy(xs.begin(), xs.end(), x.f32());
  const std::vector<int32_t> pick{4, 1};
  Tensor picked = ops.alloc(2, heads * hd, Use::matmul_input);
  ops.rms_norm(x, per_row, 1e-6f, picked, pick);
  std::vector<float> row4(heads * hd), row1(heads * hd);
  backend.rms_norm(xs.data() + 4 * heads * hd, row_w.data(), row4.data(), 1, heads * hd, 1e-6f);
  backend.rms_norm(xs.data() + 1 * heads * hd, row_w.data(), row1.data(), 1, heads * hd, 1e-6f);
  const std::vector<float> got = copy_of(picked);
  CHECK(std::vector<float>(got.begin(), got.begin() + heads * hd) == row4);
  CHECK(std::vector<float>(got.begin() + heads * hd, got.end()) == row1);
}

TEST_CASE("Host tensor ops count a tied table once, draw random weights in range and give back marked scratch", "[model][tensor_ops]") {
  cpu::CpuBackend backend(1);
  HostTensorOps host(backend);
  TensorOps& ops = host;  // as the layer loop calls it (default arguments live on the interface)
  std::vector<float> table(100 * 16, 0.5f);
  const MatrixView view{table.data(), 100, 16, GgmlType::F32};
  ops.add_table(view);
  ops.add_weights({&view, 1});
  CHECK(ops.weight_bytes() == 100 * 16 * 4);

  const int64_t part_rows[] = {8, 4};
  const WeightId r = ops.add_random_weights(part_rows, 64, 9, /*cols_scale=*/true);
  ops.begin_pass();
  Tensor one = ops.alloc(1, 64, Use::matmul_input);
  std::fill(one.f32(), one.f32() + 64, 1.0f);
  const std::vector<Tensor> out = ops.alloc_products(1, r);
  ops.matmul(one, r, out);
  // Each product sums 64 draws in ±1/8: nonzero, and at most 8 in size.
  for (const Tensor& t : out) {
    for (int64_t i = 0; i < t.cols; ++i) {
      CHECK(t.f32()[i] != 0.0f);
      CHECK(std::abs(t.f32()[i]) <= 8.0f);
    }
  }

  const size_t mark = ops.mark();
  ops.alloc(1000, 1000, Use::state);
  ops.alloc(10, 10, Use::state);
  CHECK(ops.mark() == mark + 2);
  ops.release(mark);
  CHECK(ops.mark() == mark);
}
