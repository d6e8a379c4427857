#include "kernels/cpu/quantized_matmul.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu/float_rows.hpp"
#include "kernels/cpu/quantize_block.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"
#include "kernels/half.hpp"

namespace actorlm::cpu {
namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::avx_vnni: return cpu_has(Isa::avx2) && __builtin_cpu_supports("avxvnni");
    case Isa::avx512_vnni:
      return cpu_has(Isa::avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::portable;
#endif
}

// The widest available ISA, or a narrower one named by ACTORLM_CPU_ISA
// (portable, avx2, avx_vnni, avx512_vnni) for comparisons; a name that is
// unknown or not available here is ignored.
Isa detect() {
  Isa best = Isa::portable;
  for (Isa isa : {Isa::avx2, Isa::avx_vnni, Isa::avx512_vnni}) {
    if (cpu_has(isa)) best = isa;
  }
  if (const char* env = std::getenv("ACTORLM_CPU_ISA")) {
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx_vnni, Isa::avx512_vnni}) {
      if (std::string_view(env) == isa_name(isa) && cpu_has(isa)) return isa;
    }
  }
  return best;
}

// Any type ggml_type.hpp dequantizes: a weight row is widened once and
// multiplied in float with every x row (its int8 copy for the integer types,
// so every ISA computes the same W x~).
void portable_rows(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end,
                   bool accumulate) {
  const size_t row_bytes = ggml_row_bytes(w.type, w.cols);
  const bool integer = x.scheme != ActivationScheme::none;
  const int64_t n_blocks = w.cols / block_values;
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = begin; r < end; ++r) {
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes, row.data(),
                   w.cols);
    if (!integer) {  // f16, bf16: the widened row against every x row at once
      multiply_rows(row.data(), 1, x.x, x.rows, w.cols, out + r, w.rows, accumulate);
      continue;
    }
    for (int64_t t = 0; t < x.rows; ++t) {
      float y = 0.0f;
      const int8_t* q = x.q.data() + t * x.cols;
      const float* d = x.d.data() + t * n_blocks;
      const float* s = x.s.data() + t * n_blocks;
      for (int64_t b = 0; b < n_blocks; ++b) {
        float block = 0.0f;
        int32_t q_sum = 0;
        for (int64_t j = 0; j < block_values; ++j) {
          block += row[static_cast<size_t>(b * block_values + j)] * static_cast<float>(q[b * block_values + j]);
          q_sum += q[b * block_values + j];
        }
        y += d[b] * block;
        if (x.scheme == ActivationScheme::q8_1) {
          // q8_1's f16 block sum is not exactly d * sum q; the SIMD
          // kernels multiply the block's min (the f16 after its scale in
          // Q4_1 and Q5_1) by s itself, and so does this.
          const uint8_t* block_bytes = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes +
                                       static_cast<size_t>(b) * ggml_block_bytes(w.type);
          uint16_t min;
          std::memcpy(&min, block_bytes + 2, sizeof min);
          y += f16_to_f32(min) * (s[b] - d[b] * static_cast<float>(q_sum));
        }
      }
      float& o = out[t * w.rows + r];
      o = accumulate ? o + y : y;
    }
  }
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx_vnni: return "avx_vnni";
    case Isa::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

Isa best_isa() {
  static const Isa isa = detect();
  return isa;
}

bool isa_available(Isa isa) { return cpu_has(isa); }

ActivationScheme activation_scheme(GgmlType weights) {
  switch (weights) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return ActivationScheme::q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return ActivationScheme::q8_1;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return ActivationScheme::q8_K;
    default: return ActivationScheme::none;
  }
}

bool matmul_supported(const MatrixView& w) {
  if (w.data == nullptr || w.cols <= 0 || !ggml_type_supported(static_cast<uint32_t>(w.type))) return false;
  // Float formats take any width; the block types whole blocks (32 or 256
  // values, so their activations quantize per 32 too).
  return w.cols % static_cast<int64_t>(ggml_block_elements(w.type)) == 0 &&
         (activation_scheme(w.type) == ActivationScheme::none || w.cols % block_values == 0);
}

void prepare_activations(const float* x, int64_t rows, int64_t cols, GgmlType weights, Activations& out) {
  out.rows = rows;
  out.cols = cols;
  out.scheme = activation_scheme(weights);
  out.x = x;
  if (out.scheme == ActivationScheme::none) return;
  out.q.resize(static_cast<size_t>(rows * cols));
  out.d.resize(static_cast<size_t>(rows * cols / block_values));
  out.s.resize(static_cast<size_t>(rows * cols / block_values));
  out.sum32.resize(static_cast<size_t>(rows * cols / block_values));
  out.pairs.resize(out.scheme == ActivationScheme::q8_K ? static_cast<size_t>(rows * cols / 256 * 12) : 0);
}

void quantize_rows(int64_t begin, int64_t end, Activations& out) {
  if (out.scheme == ActivationScheme::none) return;
  // The same bytes on every path; the x86 copies are compiled for their ISA
  // whatever the build's flags.
  auto* quantize_32 = &quantize_block_32;
  auto* quantize_k = &quantize_block_256;
#if defined(__x86_64__)
  switch (best_isa()) {
    case Isa::avx512_vnni:
      quantize_32 = &quantize_block_32_avx512;
      quantize_k = &quantize_block_256_avx512;
      break;
    case Isa::avx2:
    case Isa::avx_vnni:
      quantize_32 = &quantize_block_32_avx2;
      quantize_k = &quantize_block_256_avx2;
      break;
    case Isa::portable: break;
  }
#endif
  const int64_t step = out.scheme == ActivationScheme::q8_K ? 256 : block_values;
  for (int64_t at = begin * out.cols; at < end * out.cols; at += step) {
    const auto b = static_cast<size_t>(at / block_values);
    if (step == block_values) {
      out.sum32[b] = quantize_32(out.x + at, out.scheme == ActivationScheme::q8_1, out.q.data() + at, &out.d[b], &out.s[b]);
      continue;
    }
    quantize_k(out.x + at, out.q.data() + at, &out.d[b], &out.s[b], &out.sum32[b], out.pairs.data() + at / 256 * 12);
  }
}

void matmul_rows(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate,
                 Isa isa) {
#if defined(__x86_64__)
  if (w.packed != nullptr && x.scheme != ActivationScheme::none) {
    const auto& packed = *static_cast<const PackedMatrix*>(w.packed);
    if (isa == Isa::avx512_vnni && integer_matmul_avx512_vnni(packed, x, out, begin, end, accumulate)) return;
    if (isa == Isa::avx_vnni && integer_matmul_avx_vnni(packed, x, out, begin, end, accumulate)) return;
    if (isa == Isa::avx2 && integer_matmul_avx2(packed, x, out, begin, end, accumulate)) return;
  }
#endif
  portable_rows(w, x, out, begin, end, accumulate);
}

}  // namespace actorlm::cpu
