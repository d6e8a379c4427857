#pragma once
// Launchers for actorlm's own CUDA kernels. Everything takes device pointers
// and a stream and returns at once; launch errors throw (cuda_check.cuh).
//
// Types: the residual stream, projections' outputs (q/k/v, gate/up) and
// logits are float32; anything that feeds a cuBLAS GEMM (normed activations,
// attention output, SwiGLU output) is bf16, as are weights and the KV pool.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace actorlm::cuda {

using bf16 = __nv_bfloat16;

// out[t][:] = table[tokens[t]][:] as float32.
void embed(const bf16* table, int64_t hidden, const int32_t* tokens, int32_t n_tokens, float* out, cudaStream_t s);

// out[r] = x[src_row(r)] / rms * weight for every `group` columns of a row
// (the whole row, or one head: q/k norms), out float32 or bf16, in place
// allowed; src_row(r) is rows_idx[r] when rows_idx is not null (the rows
// that need logits), else r. Row strides x_ld and out_ld.
void rms_norm(const float* x, int64_t x_ld, const int32_t* rows_idx, const float* weight, int64_t group, void* out,
              bool out_bf16, int64_t out_ld, int32_t rows, int64_t cols, float eps, cudaStream_t s);

// x[r][c] += bias[c] for a row-major [rows][cols] block with row stride ld.
void add_bias(float* x, int64_t ld, const float* bias, int32_t rows, int64_t cols, cudaStream_t s);

// Adjacent-pair RoPE (see model/llama_weights.hpp) in place on q and k
// (rows of stride q_ld / k_ld; heads from column 0). The angle is taken in
// double, as the CPU backend does. k may be null (n_kv_heads 0).
void rope(float* q, int64_t q_ld, int32_t n_heads, float* k, int64_t k_ld, int32_t n_kv_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq, int32_t n_tokens, cudaStream_t s);

// k_cache[loc[t]] = k[t], v_cache[loc[t]] = v[t] (kv_dim values, to bf16);
// k/v rows have stride ld.
void store_kv(const float* k, const float* v, int64_t ld, int32_t kv_dim, const int32_t* loc, int32_t n_tokens,
              bf16* k_cache, bf16* v_cache, cudaStream_t s);

// KV row copies between a pool layer ([pool rows][kv_dim]) and a packed
// [n_rows][kv_dim] buffer: out[i] = pool[rows[i]], and pool[rows[i]] = in[i].
// For moving KV to a tier below the pool or to another engine.
void gather_rows(const bf16* pool, int32_t kv_dim, const int32_t* rows, int32_t n_rows, bf16* out, cudaStream_t s);
void scatter_rows(const bf16* in, int32_t kv_dim, const int32_t* rows, int32_t n_rows, bf16* pool, cudaStream_t s);

// out[r][i] = act(gate[r*ld+i]) * up[r*ld+i] as bf16 (out is [rows][cols]);
// act is SiLU, or GELU (tanh form) when gelu.
void glu(const float* gate, const float* up, int64_t ld, bf16* out, int32_t rows, int64_t cols, bool gelu,
         cudaStream_t s);

// Element-wise on n float32 values: x += y; x *= factor; x = cap * tanh(x / cap).
void add(float* x, const float* y, int64_t n, cudaStream_t s);
void scale(float* x, int64_t n, float factor, cudaStream_t s);
void softcap(float* x, int64_t n, float cap, cudaStream_t s);

void to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t s);
void to_f32(const bf16* in, float* out, int64_t n, cudaStream_t s);

// Applies packed req_to_token writes: for write w, table[slot*ld + start + i]
// = values[offset + i] for i < len. `writes` holds 4 ints per write
// (slot, start, len, offset).
void scatter_table(int32_t* table, int64_t ld, const int32_t* writes, int32_t n_writes, const int32_t* values,
                   int32_t max_len, cudaStream_t s);

// Fills n bf16 values with uniform noise in [-scale, scale) from a seed
// (random weights for benchmarks and device tests).
void fill_random(bf16* out, int64_t n, float scale, uint64_t seed, cudaStream_t s);
void fill_random_f32(float* out, int64_t n, float scale, float offset, uint64_t seed, cudaStream_t s);

}  // namespace actorlm::cuda
