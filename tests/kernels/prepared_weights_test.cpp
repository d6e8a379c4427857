#include "kernels/prepared_weights.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"
#include "kernels/ggml_type.hpp"

using namespace actorlm;

namespace {

// A Q8_0 matrix of random values (scale 1/64 in every block) in a buffer
// the test shares, as a loaded model's bytes are shared.
std::shared_ptr<std::vector<uint8_t>> q8_0_bytes(int64_t rows, int64_t cols, uint32_t seed) {
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, cols);
  auto bytes = std::make_shared<std::vector<uint8_t>>(row_bytes * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (size_t b = 0; b < bytes->size(); b += 34) {
    const uint16_t scale = 0x2400;  // 1/64 as an IEEE half
    std::memcpy(bytes->data() + b, &scale, 2);
    for (size_t i = 2; i < 34; ++i) (*bytes)[b + i] = static_cast<uint8_t>(rng());
  }
  return bytes;
}

MatrixView view_of(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  return {bytes.data(), rows, cols, GgmlType::Q8_0};
}

std::vector<float> product(cpu::CpuBackend& backend, const MatrixView& w, const std::vector<float>& x, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(rows * w.rows));
  backend.matmul(x.data(), rows, w, out.data(), false);
  return out;
}

}  // namespace

TEST_CASE("A kept matrix is prepared once and handed to every runner, and multiplies as one prepared alone", "[kernels]") {
  cpu::CpuBackend backend(2);
  if (cpu::best_isa() == cpu::Isa::portable) {
    WARN("this CPU's kernels read the file's blocks as they are: nothing is prepared");
    return;
  }
  const int64_t rows = 40, cols = 256;
  auto bytes = q8_0_bytes(rows, cols, 1);
  const MatrixView w = view_of(*bytes, rows, cols);
  PreparedWeights shared;
  shared.keep(std::shared_ptr<const void>(bytes, bytes->data()));

  const PreparedMatrix a = shared.prepare(backend, w);
  cpu::CpuBackend other(1);
  const PreparedMatrix b = shared.prepare(other, w);
  REQUIRE(a.view.packed != nullptr);
  CHECK(b.view.packed == a.view.packed);
  CHECK(b.storage == a.storage);
  CHECK(shared.size() == 1);

  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<size_t>(3 * cols));
  for (float& v : x) v = u(rng);
  const PreparedMatrix alone = backend.prepare_weights(w);
  CHECK(product(other, b.view, x, 3) == product(backend, alone.view, x, 3));

  // The same address with another shape (a matrix's first rows) is another copy.
  const PreparedMatrix head = shared.prepare(backend, view_of(*bytes, 16, cols));
  CHECK(head.view.packed != a.view.packed);
  CHECK(shared.size() == 2);
}

TEST_CASE("Bytes the cache does not keep are prepared anew each time, and kept ones outlive their owner", "[kernels]") {
  cpu::CpuBackend backend(2);
  if (cpu::best_isa() == cpu::Isa::portable) {
    WARN("this CPU's kernels read the file's blocks as they are: nothing is prepared");
    return;
  }
  const int64_t rows = 24, cols = 128;
  PreparedWeights shared;
  auto loose = q8_0_bytes(rows, cols, 3);
  const PreparedMatrix a = shared.prepare(backend, view_of(*loose, rows, cols));
  const PreparedMatrix b = shared.prepare(backend, view_of(*loose, rows, cols));
  REQUIRE(a.view.packed != nullptr);
  CHECK(a.view.packed != b.view.packed);
  CHECK(shared.size() == 0);

  // A kept address cannot be freed and given to other bytes while the cache
  // lives: the cache holds them.
  auto kept = q8_0_bytes(rows, cols, 4);
  std::weak_ptr<std::vector<uint8_t>> watch = kept;
  shared.keep(std::shared_ptr<const void>(kept, kept->data()));
  kept.reset();
  CHECK_FALSE(watch.expired());
}

TEST_CASE("Runners loading at the same time share one prepared copy", "[kernels]") {
  cpu::CpuBackend first(1), second(1);
  if (cpu::best_isa() == cpu::Isa::portable) {
    WARN("this CPU's kernels read the file's blocks as they are: nothing is prepared");
    return;
  }
  const int64_t rows = 512, cols = 1024;  // ~0.5 MB: long enough to overlap
  auto bytes = q8_0_bytes(rows, cols, 5);
  const MatrixView w = view_of(*bytes, rows, cols);
  for (int round = 0; round < 4; ++round) {
    PreparedWeights shared;
    shared.keep(std::shared_ptr<const void>(bytes, bytes->data()));
    PreparedMatrix a, b;
    std::thread t([&] { a = shared.prepare(first, w); });
    b = shared.prepare(second, w);
    t.join();
    CHECK(a.view.packed == b.view.packed);
    CHECK(shared.size() == 1);
  }
}
