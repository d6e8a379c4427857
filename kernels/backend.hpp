#pragma once
// The compute backend over host memory: one interface, a CPU implementation
// (kernels/cpu) and an op-by-op CUDA one for tests (tests/kernels/cuda). The model
// itself calls TensorOps (tensor_ops.hpp), which kernels/host_tensor_ops maps
// onto this interface. Plain pointers and plans only —
// no CUDA types, no model types — so every layer above builds with g++ alone.
//
// Paged-KV contract (shared with kvstore's TokenToKVPoolAllocator):
//   - Each layer has K and V buffers of pool_rows rows, a row being
//     [n_kv_heads][head_dim] floats (or halves, KvLayerView::k16). Row r holds the token whose KV index
//     (out_cache_loc) is r. Rows [0, page_size) are the dummy page.
//   - An attention plan lists, per request, its query rows in the batch, the
//     position of its first query, and its KV rows in position order as a CSR
//     table (kv_indptr / kv_indices, gathered from req_to_token). Query j of
//     a request sits at position prefix_len + j and attends to KV positions
//     [0, prefix_len + j] (causal); all of those rows, including this pass's
//     new tokens, are written by store_kv() before attention runs.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/ggml_type.hpp"
#include "kernels/sampling_params.hpp"

namespace actorlm {

// A row-major weight matrix [rows][cols] (weights are [out][in]) in one of
// ggml's storage formats: float32, f16, bf16 or a block quantization (see
// ggml_type.hpp). Row r is ggml_row_bytes(type, cols) bytes at
// data + r * that. Backends read the format as it is (the CPU one multiplies
// from the blocks directly; nothing is widened to float32 ahead of time). A
// backend must compute a token's product the same way for every row count
// of x, so that its result does not depend on the batch it is in.
struct MatrixView {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  GgmlType type = GgmlType::F32;
  // The same matrix in a layout of the backend's own (Backend::prepare_weights),
  // or null; `data` stays valid and is what every other reader uses.
  const void* packed = nullptr;
};

// What prepare_weights returns: the view to multiply by from then on, and
// whatever keeps its packed copy alive (null when there is none).
struct PreparedMatrix {
  MatrixView view;
  std::shared_ptr<const void> storage;
};

struct KvLayerView {
  float* k = nullptr;
  float* v = nullptr;
  int64_t pool_rows = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  // An f16 cache (the CPU backend's --kv-cache-dtype f16): rows of IEEE
  // half floats here, k and v null. Half the memory and bandwidth; each K/V
  // value rounded to 11 significant bits when stored.
  uint16_t* k16 = nullptr;
  uint16_t* v16 = nullptr;
  // A bf16 cache in device memory (the CUDA executor's), k and v null.
  void* k_device = nullptr;
  void* v_device = nullptr;
};

// Planned on the host before the layer loop; the same plan serves every layer.
struct AttentionPlan {
  std::vector<int32_t> q_start;     // per request: first query row in the batch
  std::vector<int32_t> q_len;       // per request: queries in this pass
  std::vector<int32_t> prefix_len;  // per request: positions with KV before this pass
  std::vector<int32_t> kv_indptr;   // size n_requests + 1
  std::vector<int32_t> kv_indices;  // KV rows, position order, per request
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;               // usually 1/sqrt(head_dim)
};

// What one layer's attention does beyond the plan the layers share.
struct LayerAttention {
  // > 0: a query at position p sees only keys p - sliding_window + 1 .. p
  // (Gemma's local layers). The pool still holds every row.
  int32_t sliding_window = 0;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2).
  float softcap = 0.0f;
};

// A token's share of one expert's output in a mixture-of-experts layer.
struct ExpertChoice {
  int32_t expert = 0;
  float weight = 0.0f;
};

struct RopeTable {
  // inv_freq[i] for rotation pair i (elements 2i, 2i+1 of each head).
  std::vector<float> inv_freq;
  int32_t head_dim = 0;
};

// What the sampler needs to know about one request (see kernels/cpu/sampler.hpp
// for the order of processing and the meaning of each field).
struct SampleRequest {
  SamplingParams params;
  std::span<const int32_t> prompt;  // repetition penalty
  std::span<const int32_t> output;  // all penalties
  uint64_t step = 0;                // tokens the request sampled before (seeded RNG position)
  int top_n = 0;                    // alternatives to report with their logprobs
  // Structured output: the tokens that may be picked, a bitmask over the
  // vocabulary (bit t % 32 of word t / 32); empty: any.
  std::span<const uint32_t> allowed;
};

// One matrix's LoRA update over some rows (Backend::low_rank_add), its
// matrices in IEEE half precision (as adapters are shipped: half the bytes
// to read each step).
struct LowRankSlice {
  const uint16_t* a = nullptr;   // [rank][in]
  const uint16_t* bt = nullptr;  // [rank][out]: the adapter's B transposed
  float scale = 1.0f;            // the adapter's alpha / rank times the user's scale
  int32_t rank = 0;
  int64_t row_begin = 0, rows = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // out[t] = table[tokens[t]]; every token id must be < table.rows.
  virtual void embed(MatrixView table, std::span<const int32_t> tokens, float* out) = 0;
  // out[r] = x[r] / rms(x[r]) * weight, for rows x cols.
  virtual void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t cols,
                        float eps) = 0;
  // Called once per weight matrix before products with it (at model load):
  // a backend may copy it into a layout its kernels read faster. The default
  // keeps the view as it is.
  virtual PreparedMatrix prepare_weights(MatrixView w) { return {w, nullptr}; }
  // out[rows][w.rows] = x[rows][w.cols] · wᵀ  (+ out when accumulate). Any
  // view works; one from prepare_weights may be faster.
  virtual void matmul(const float* x, int64_t rows, MatrixView w, float* out, bool accumulate) = 0;
  // out[i][rows][w[i].rows] = x · w[i]ᵀ for several matrices of one input
  // (q/k/v, gate/up). A backend may share work between them; the results are
  // those of one matmul each.
  virtual void matmul_many(const float* x, int64_t rows, std::span<const MatrixView> w, std::span<float* const> out) {
    for (size_t i = 0; i < w.size(); ++i) matmul(x, rows, w[i], out[i], false);
  }
  // Adds bias[cols] to every row.
  virtual void add_bias(float* x, const float* bias, int64_t rows, int64_t cols) = 0;
  // Rotates q [rows][n_heads*hd] and k [rows][n_kv_heads*hd] in place.
  virtual void rope(float* q, int32_t n_heads, float* k, int32_t n_kv_heads,
                    std::span<const int32_t> positions, const RopeTable& table) = 0;
  // Writes k, v [rows][n_kv_heads*hd] to the pool rows out_cache_loc.
  virtual void store_kv(KvLayerView cache, const float* k, const float* v,
                        std::span<const int32_t> out_cache_loc) = 0;
  // out [rows][n_heads*hd] = causal paged attention of q over the cache.
  virtual void attention(const float* q, KvLayerView cache, const AttentionPlan& plan, const LayerAttention& layer,
                         float* out) = 0;
  // out[i] = silu(gate[i]) * up[i].
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // out[i] = gelu(gate[i]) * up[i], GELU in its tanh form (Gemma).
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // x[i] += y[i] (a residual added after a norm: Gemma's sandwich norms).
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // x[i] = cap * tanh(x[i] / cap) (Gemma 2's logits).
  virtual void softcap(float* x, int64_t n, float cap) = 0;
  // x[i] *= s (Gemma's embeddings).
  virtual void scale(float* x, int64_t n, float s) = 0;
  // Mixture-of-experts routing: per row of logits [rows][n_experts], the k
  // experts of highest softmax probability, most probable first, weighted by
  // that probability (renormalized over the k when `normalize`, then times
  // `scale`). Returned to the host (rows * k): the layer loop groups tokens
  // by expert from it.
  virtual std::vector<ExpertChoice> route_experts(const float* logits, int64_t rows, int32_t n_experts, int32_t k,
                                                  bool normalize, float scale) = 0;
  // dst[i] = src[rows[i]], rows of `cols` floats.
  virtual void gather_rows(const float* src, int64_t cols, std::span<const int32_t> rows, float* dst) = 0;
  // dst[rows[i]] += weights[i] * src[i].
  virtual void scatter_add_rows(float* dst, int64_t cols, std::span<const int32_t> rows, std::span<const float> weights,
                                const float* src) = 0;
  // One token per logits row (rows = reqs.size(), each `vocab` wide). On a GPU
  // this runs on the device so only token ids cross to the host.
  virtual std::vector<SampleResult> sample(const float* logits, int32_t vocab, std::span<const SampleRequest> reqs) = 0;
  // LoRA: out[r][0, out_cols) += scale · (x[r] · aᵀ) · bt for each slice's rows r
  // (x rows of `in` floats, ldx apart; out rows ldo apart). A row's sums
  // are the same whatever the other rows (kernels/low_rank.hpp). The
  // default runs on the calling thread.
  virtual void low_rank_add(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                            std::span<const LowRankSlice> slices);
};

}  // namespace actorlm
