#pragma once
// The device-neutral operations a model's layer loop is written against. The
// loop exists once (model/llama_model.cpp); each device implements these:
// kernels/host_tensor_ops over any Backend (the CPU one), and kernels/cuda's
// CudaTensorOps, whose calls a CUDA executor records into graphs.
//
// A Tensor is a view into the implementation's own memory, host or device:
// the model never reads through it, it only hands it back. Each
// implementation picks element types (a matmul's input is bf16 on the GPU,
// float32 on the host) and layouts (q|k|v products side by side in one
// buffer on the GPU: one GEMM) behind alloc() and alloc_products(), and
// accepts any view it handed out, fast path or not.
//
// Plain C++: no CUDA types.

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.hpp"

namespace actorlm {

enum class DType : uint8_t { f32, bf16 };

struct Tensor {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // elements from one row to the next
  DType dtype = DType::f32;

  bool contiguous() const { return ld == cols; }
  size_t element_bytes() const { return dtype == DType::f32 ? 4 : 2; }
  // Columns [begin, begin + n) of every row, sharing the memory.
  Tensor columns(int64_t begin, int64_t n) const {
    return {static_cast<char*>(data) + begin * static_cast<int64_t>(element_bytes()), rows, n, ld, dtype};
  }
  float* f32() const { return static_cast<float*>(data); }
};

// Handles to what an implementation holds from load time on.
struct WeightId {  // one or more matrices multiplied by the same input (q/k/v, gate/up)
  int32_t index = -1;
};
struct VectorId {  // a norm weight or a bias
  int32_t index = -1;
};
struct RopeId {
  int32_t index = -1;
};
struct LoraId {  // one matrix's low-rank update (a LoRA adapter's A and B)
  int32_t index = -1;
  bool valid() const { return index >= 0; }
};
// Rows [row_begin, row_begin + rows) of a pass that take update `id`.
struct LoraSlice {
  LoraId id;
  int64_t row_begin = 0, rows = 0;
  float scale = 1.0f;  // times the update's own scale (a request's choice)
};

// What a scratch tensor is for; it decides the element type on a device.
enum class Use : uint8_t {
  state,         // float32 everywhere: the residual stream, products, logits
  matmul_input,  // read only by matmul (normed activations, attention output, GLU output)
};

// The gated FFN's activation: out = act(gate) * up.
enum class Glu : uint8_t { silu, gelu_tanh };

class TensorOps {
 public:
  virtual ~TensorOps() = default;

  // --- Load time. The views' bytes must stay valid while this object
  // lives (a device implementation copies them and needs them no longer).
  // parts: matrices of the same column count, multiplied together.
  virtual WeightId add_weights(std::span<const MatrixView> parts) = 0;
  // A matrix only looked up by row (embed): kept as it is, never repacked.
  virtual WeightId add_table(MatrixView table) = 0;
  // Uniform noise in ±1/sqrt(cols) (±1 for an embedding table: cols_scale
  // false), drawn where the weights live: benchmarks of models too large to
  // build on the host.
  virtual WeightId add_random_weights(std::span<const int64_t> part_rows, int64_t cols, uint64_t seed,
                                      bool cols_scale = true) = 0;
  virtual VectorId add_vector(std::span<const float> values) = 0;
  virtual RopeId add_rope(const RopeTable& table) = 0;
  // Bytes the weights take where they are kept.
  virtual int64_t weight_bytes() const = 0;

  // --- One forward pass. Scratch lives until the next begin_pass().
  virtual void begin_pass() = 0;
  virtual Tensor alloc(int64_t rows, int64_t cols, Use use) = 0;
  // Where matmul(x of `rows` rows, w) writes fastest: one float32 tensor
  // per part of w.
  virtual std::vector<Tensor> alloc_products(int64_t rows, WeightId w) = 0;
  // Scratch taken after a mark is given back by release(mark): a loop of
  // passing tensors (one per expert) stays within the largest one.
  virtual size_t mark() const = 0;
  virtual void release(size_t mark) = 0;

  // Index arrays (tokens, positions, out_cache_loc, logit rows) of a pass are
  // in the implementation's memory: its executor put them there. Those of
  // mixture-of-experts routing are host arrays (route_experts returns them
  // to the host).

  // out[t] = table[tokens[t]] (table: a single-part weight).
  virtual void embed(WeightId table, std::span<const int32_t> tokens, Tensor out) = 0;
  // out = x / rms(x) * w for every group of w.size() columns of a row (the
  // whole row, or one head: q/k norms). out may be x. rows, when given: out
  // row r is made of x row rows[r] (the rows that need logits).
  virtual void rms_norm(Tensor x, VectorId w, float eps, Tensor out, std::span<const int32_t> rows = {}) = 0;
  // out[i] = x · w.part(i)ᵀ, or += with accumulate (the residual add).
  virtual void matmul(Tensor x, WeightId w, std::span<const Tensor> out, bool accumulate = false) = 0;
  virtual void add_bias(Tensor x, VectorId bias) = 0;
  // Rotates q [rows][n_heads * head_dim] and k in place.
  virtual void rope(Tensor q, int32_t n_heads, Tensor k, int32_t n_kv_heads, std::span<const int32_t> positions,
                    RopeId table) = 0;
  virtual void store_kv(const KvLayerView& cache, Tensor k, Tensor v, std::span<const int32_t> out_cache_loc) = 0;
  // Causal paged attention. `plan` is the host plan; a device implementation
  // reads the step's schedule its executor prepared from the same plan.
  virtual void attention(Tensor q, const KvLayerView& cache, const AttentionPlan& plan, const LayerAttention& layer,
                         Tensor out) = 0;
  virtual void glu(Glu act, Tensor gate, Tensor up, Tensor out) = 0;
  virtual void add(Tensor x, Tensor y) = 0;  // x += y
  virtual void scale(Tensor x, float s) = 0;
  virtual void softcap(Tensor x, float cap) = 0;  // x = cap * tanh(x / cap)

  // --- LoRA adapters: out += scale · (x · aᵀ) · bᵀ on some rows, a low-rank
  // update of one matrix's products. a is [rank][in], b [out][rank], given
  // as float32 (kept as the device likes: half precision on the host, as
  // adapters are shipped). Adapters come and go while the
  // model runs (between passes). Each row's sums are taken in the same
  // order whatever the other rows are, so a request's outputs do not
  // depend on its batch. A device that does not run adapters throws
  // std::invalid_argument from add_lora (the defaults below).
  virtual LoraId add_lora(std::span<const float> a, std::span<const float> b, int32_t rank, int64_t in,
                          int64_t out, float scale);
  virtual void drop_lora(LoraId id);
  // Each slice's rows of out (x's rows of the same index) get its update;
  // the updates of one call are of matrices of the same shape.
  virtual void lora(Tensor x, std::span<const LoraSlice> slices, Tensor out);
  // Bytes the adapters' matrices take.
  virtual int64_t lora_bytes() const { return 0; }

  // Mixture of experts (Backend::route_experts, gather_rows, scatter_add_rows).
  virtual std::vector<ExpertChoice> route_experts(Tensor logits, int32_t k, bool normalize, float scale) = 0;
  virtual void gather_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) = 0;
  virtual void scatter_add_rows(Tensor dst, std::span<const int32_t> rows, std::span<const float> weights,
                                Tensor src) = 0;
};

}  // namespace actorlm
