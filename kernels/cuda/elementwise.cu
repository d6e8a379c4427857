// The small kernels of a layer: everything but GEMMs, attention and sampling.
// All are memory-bound; each thread moves contiguous elements of one row.

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/random.cuh"

namespace actorlm::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  v = threadIdx.x < n_warps ? partial[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  float total = partial[0];
  __syncthreads();  // partial is reused by the next call
  return total;
}

__global__ void embed_kernel(const bf16* table, int64_t hidden, const int32_t* tokens, float* out) {
  const int64_t t = blockIdx.y;
  const bf16* row = table + static_cast<int64_t>(tokens[t]) * hidden;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < hidden; i += gridDim.x * blockDim.x) {
    out[t * hidden + i] = __bfloat162float(row[i]);
  }
}

// One block per (row, group): a group is a whole row, or one head for q/k
// norms. In place is safe: each thread rewrites only what it read.
template <typename Out>
__global__ void rms_norm_kernel(const float* x, int64_t x_ld, const int32_t* rows_idx, const float* w, int64_t group,
                                int32_t groups, Out* out, int64_t out_ld, float eps) {
  const int64_t r = blockIdx.x / groups, g = blockIdx.x % groups;
  const float* in = x + (rows_idx ? static_cast<int64_t>(rows_idx[r]) : r) * x_ld + g * group;
  Out* o = out + r * out_ld + g * group;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) ss += in[i] * in[i];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(group) + eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float y = in[i] * inv * w[i];
    if constexpr (sizeof(Out) == 2) {
      o[i] = __float2bfloat16(y);
    } else {
      o[i] = y;
    }
  }
}

__global__ void add_bias_kernel(float* x, int64_t ld, const float* bias, int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) x[r * ld + i] += bias[i];
}

// One block per token; threads walk the (head, pair) grid of q then k.
__global__ void rope_kernel(float* q, int64_t q_ld, int32_t n_heads, float* k, int64_t k_ld, int32_t n_kv_heads,
                            int32_t head_dim, const int32_t* positions, const float* inv_freq) {
  const int64_t t = blockIdx.x;
  const int32_t pairs = head_dim / 2;
  const double pos = static_cast<double>(positions[t]);
  const int32_t total = (n_heads + n_kv_heads) * pairs;
  for (int32_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int32_t head = j / pairs, i = j % pairs;
    float* base = head < n_heads ? q + t * q_ld + static_cast<int64_t>(head) * head_dim
                                 : k + t * k_ld + static_cast<int64_t>(head - n_heads) * head_dim;
    double sn, cs;
    sincos(pos * static_cast<double>(inv_freq[i]), &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    const float x0 = base[2 * i], x1 = base[2 * i + 1];
    base[2 * i] = x0 * c - x1 * s;
    base[2 * i + 1] = x0 * s + x1 * c;
  }
}

__global__ void store_kv_kernel(const float* k, const float* v, int64_t ld, int32_t kv_dim, const int32_t* loc,
                                bf16* k_cache, bf16* v_cache) {
  const int64_t t = blockIdx.x;
  const int64_t dst = static_cast<int64_t>(loc[t]) * kv_dim;
  for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    k_cache[dst + i] = __float2bfloat16(k[t * ld + i]);
    v_cache[dst + i] = __float2bfloat16(v[t * ld + i]);
  }
}

__global__ void gather_rows_kernel(const bf16* pool, int32_t kv_dim, const int32_t* rows, bf16* out) {
  const int64_t src = static_cast<int64_t>(rows[blockIdx.x]) * kv_dim, dst = static_cast<int64_t>(blockIdx.x) * kv_dim;
  for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) out[dst + i] = pool[src + i];
}

__global__ void scatter_rows_kernel(const bf16* in, int32_t kv_dim, const int32_t* rows, bf16* pool) {
  const int64_t dst = static_cast<int64_t>(rows[blockIdx.x]) * kv_dim, src = static_cast<int64_t>(blockIdx.x) * kv_dim;
  for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) pool[dst + i] = in[src + i];
}

// act(gate) * up with act SiLU or, for Gemma, GELU in its tanh form.
template <bool Gelu>
__global__ void glu_kernel(const float* gate, const float* up, int64_t ld, bf16* out, int64_t cols) {
  const int64_t r = blockIdx.y;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
    const float g = gate[r * ld + i];
    float a;
    if constexpr (Gelu) {
      a = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
    } else {
      a = g / (1.0f + __expf(-g));
    }
    out[r * cols + i] = __float2bfloat16(a * up[r * ld + i]);
  }
}

enum class Pointwise { add, scale, softcap };

template <Pointwise Op>
__global__ void pointwise_kernel(float* x, const float* y, float a, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (Op == Pointwise::add) {
      x[i] += y[i];
    } else if constexpr (Op == Pointwise::scale) {
      x[i] *= a;
    } else {
      x[i] = a * tanhf(x[i] / a);
    }
  }
}

__global__ void to_bf16_kernel(const float* in, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

__global__ void to_f32_kernel(const bf16* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__global__ void scatter_table_kernel(int32_t* table, int64_t ld, const int32_t* writes, const int32_t* values) {
  const int32_t* w = writes + 4 * blockIdx.x;
  const int32_t slot = w[0], start = w[1], len = w[2], offset = w[3];
  for (int32_t i = blockIdx.y * blockDim.x + threadIdx.x; i < len; i += gridDim.y * blockDim.x)
    table[static_cast<int64_t>(slot) * ld + start + i] = values[offset + i];
}

__device__ float uniform_at(uint64_t seed, int64_t i) {
  return static_cast<float>(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i))) >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_random_kernel(bf16* out, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16((2.0f * uniform_at(seed, i) - 1.0f) * scale);
}

__global__ void fill_random_f32_kernel(float* out, int64_t n, float scale, float offset, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = offset + (2.0f * uniform_at(seed, i) - 1.0f) * scale;
}

int grid_1d(int64_t n) { return static_cast<int>(std::min<int64_t>(blocks_for(n), 65535)); }
int grid_cols(int64_t cols) { return static_cast<int>(std::min<int64_t>(blocks_for(cols), 64)); }

}  // namespace

void embed(const bf16* table, int64_t hidden, const int32_t* tokens, int32_t n_tokens, float* out, cudaStream_t s) {
  if (n_tokens == 0) return;
  embed_kernel<<<dim3(grid_cols(hidden), n_tokens), kThreads, 0, s>>>(table, hidden, tokens, out);
  ACTORLM_CUDA_LAUNCHED();
}

void rms_norm(const float* x, int64_t x_ld, const int32_t* rows_idx, const float* weight, int64_t group, void* out,
              bool out_bf16, int64_t out_ld, int32_t rows, int64_t cols, float eps, cudaStream_t s) {
  if (rows == 0) return;
  const auto groups = static_cast<int32_t>(cols / group);
  const int threads = group >= 1024 ? 512 : group >= 256 ? 256 : group >= 128 ? 128 : group >= 64 ? 64 : 32;
  const int64_t blocks = static_cast<int64_t>(rows) * groups;
  if (out_bf16) {
    rms_norm_kernel<<<blocks, threads, 0, s>>>(x, x_ld, rows_idx, weight, group, groups, static_cast<bf16*>(out),
                                               out_ld, eps);
  } else {
    rms_norm_kernel<<<blocks, threads, 0, s>>>(x, x_ld, rows_idx, weight, group, groups, static_cast<float*>(out),
                                               out_ld, eps);
  }
  ACTORLM_CUDA_LAUNCHED();
}

void add_bias(float* x, int64_t ld, const float* bias, int32_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return;
  add_bias_kernel<<<dim3(grid_cols(cols), rows), kThreads, 0, s>>>(x, ld, bias, cols);
  ACTORLM_CUDA_LAUNCHED();
}

void rope(float* q, int64_t q_ld, int32_t n_heads, float* k, int64_t k_ld, int32_t n_kv_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq, int32_t n_tokens, cudaStream_t s) {
  if (n_tokens == 0) return;
  rope_kernel<<<n_tokens, kThreads, 0, s>>>(q, q_ld, n_heads, k, k_ld, n_kv_heads, head_dim, positions, inv_freq);
  ACTORLM_CUDA_LAUNCHED();
}

void store_kv(const float* k, const float* v, int64_t ld, int32_t kv_dim, const int32_t* loc, int32_t n_tokens,
              bf16* k_cache, bf16* v_cache, cudaStream_t s) {
  if (n_tokens == 0) return;
  store_kv_kernel<<<n_tokens, kThreads, 0, s>>>(k, v, ld, kv_dim, loc, k_cache, v_cache);
  ACTORLM_CUDA_LAUNCHED();
}

void gather_rows(const bf16* pool, int32_t kv_dim, const int32_t* rows, int32_t n_rows, bf16* out, cudaStream_t s) {
  if (n_rows == 0) return;
  gather_rows_kernel<<<n_rows, kThreads, 0, s>>>(pool, kv_dim, rows, out);
  ACTORLM_CUDA_LAUNCHED();
}

void scatter_rows(const bf16* in, int32_t kv_dim, const int32_t* rows, int32_t n_rows, bf16* pool, cudaStream_t s) {
  if (n_rows == 0) return;
  scatter_rows_kernel<<<n_rows, kThreads, 0, s>>>(in, kv_dim, rows, pool);
  ACTORLM_CUDA_LAUNCHED();
}

void glu(const float* gate, const float* up, int64_t ld, bf16* out, int32_t rows, int64_t cols, bool gelu,
         cudaStream_t s) {
  if (rows == 0) return;
  const dim3 grid(grid_cols(cols), rows);
  if (gelu) {
    glu_kernel<true><<<grid, kThreads, 0, s>>>(gate, up, ld, out, cols);
  } else {
    glu_kernel<false><<<grid, kThreads, 0, s>>>(gate, up, ld, out, cols);
  }
  ACTORLM_CUDA_LAUNCHED();
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  pointwise_kernel<Pointwise::add><<<grid_1d(n), kThreads, 0, s>>>(x, y, 0.0f, n);
  ACTORLM_CUDA_LAUNCHED();
}

void scale(float* x, int64_t n, float factor, cudaStream_t s) {
  if (n == 0) return;
  pointwise_kernel<Pointwise::scale><<<grid_1d(n), kThreads, 0, s>>>(x, nullptr, factor, n);
  ACTORLM_CUDA_LAUNCHED();
}

void softcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return;
  pointwise_kernel<Pointwise::softcap><<<grid_1d(n), kThreads, 0, s>>>(x, nullptr, cap, n);
  ACTORLM_CUDA_LAUNCHED();
}

void to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_1d(n), kThreads, 0, s>>>(in, out, n);
  ACTORLM_CUDA_LAUNCHED();
}

void to_f32(const bf16* in, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_f32_kernel<<<grid_1d(n), kThreads, 0, s>>>(in, out, n);
  ACTORLM_CUDA_LAUNCHED();
}

void scatter_table(int32_t* table, int64_t ld, const int32_t* writes, int32_t n_writes, const int32_t* values,
                   int32_t max_len, cudaStream_t s) {
  if (n_writes == 0) return;
  const int y = std::max(1, std::min(64, (max_len + kThreads - 1) / kThreads));
  scatter_table_kernel<<<dim3(n_writes, y), kThreads, 0, s>>>(table, ld, writes, values);
  ACTORLM_CUDA_LAUNCHED();
}

void fill_random(bf16* out, int64_t n, float scale, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_random_kernel<<<grid_1d(n), kThreads, 0, s>>>(out, n, scale, seed);
  ACTORLM_CUDA_LAUNCHED();
}

void fill_random_f32(float* out, int64_t n, float scale, float offset, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_random_f32_kernel<<<grid_1d(n), kThreads, 0, s>>>(out, n, scale, offset, seed);
  ACTORLM_CUDA_LAUNCHED();
}

}  // namespace actorlm::cuda
