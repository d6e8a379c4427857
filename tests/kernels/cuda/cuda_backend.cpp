#include "tests/kernels/cuda/cuda_backend.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_tensor_ops.cuh"
#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/sampling.cuh"

namespace actorlm::cuda {
namespace {

template <typename T>
DeviceBuffer<T> to_device(const T* host, size_t n) {
  DeviceBuffer<T> d(std::max<size_t>(n, 1));
  if (n) ACTORLM_CUDA_CHECK(cudaMemcpy(d.get(), host, n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
void to_host(const DeviceBuffer<T>& d, T* host, size_t n) {
  if (n) ACTORLM_CUDA_CHECK(cudaMemcpy(host, d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
}

DeviceBuffer<bf16> bf16_device(const float* host, size_t n) {
  DeviceBuffer<float> f = to_device(host, n);
  DeviceBuffer<bf16> b(std::max<size_t>(n, 1));
  to_bf16(f.get(), b.get(), static_cast<int64_t>(n), nullptr);
  return b;
}

DeviceBuffer<bf16> bf16_device(const MatrixView& w) {
  DeviceBuffer<bf16> b(static_cast<size_t>(std::max<int64_t>(w.rows * w.cols, 1)));
  upload_bf16(w, b.get());
  return b;
}

void bf16_to_host(const DeviceBuffer<bf16>& b, float* host, size_t n) {
  DeviceBuffer<float> f(std::max<size_t>(n, 1));
  to_f32(b.get(), f.get(), static_cast<int64_t>(n), nullptr);
  to_host(f, host, n);
}

}  // namespace

struct CudaBackend::Impl {
  cublasHandle_t blas = nullptr;
  int sm_count = 0;
  ~Impl() {
    if (blas) cublasDestroy(blas);
  }
};

CudaBackend::CudaBackend() : impl_(std::make_unique<Impl>()) {
  ACTORLM_CUBLAS_CHECK(cublasCreate(&impl_->blas));
  ACTORLM_CUDA_CHECK(cudaDeviceGetAttribute(&impl_->sm_count, cudaDevAttrMultiProcessorCount, 0));
}
CudaBackend::~CudaBackend() = default;

void CudaBackend::embed(MatrixView table, std::span<const int32_t> tokens, float* out) {
  auto t = bf16_device(table);
  auto ids = to_device(tokens.data(), tokens.size());
  DeviceBuffer<float> o(tokens.size() * static_cast<size_t>(table.cols));
  cuda::embed(t.get(), table.cols, ids.get(), static_cast<int32_t>(tokens.size()), o.get(), nullptr);
  to_host(o, out, tokens.size() * static_cast<size_t>(table.cols));
}

void CudaBackend::rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t cols, float eps) {
  auto dx = to_device(x, static_cast<size_t>(rows * cols));
  auto dw = to_device(weight, static_cast<size_t>(cols));
  DeviceBuffer<bf16> o(static_cast<size_t>(rows * cols));
  cuda::rms_norm(dx.get(), cols, nullptr, dw.get(), cols, o.get(), /*out_bf16=*/true, cols, static_cast<int32_t>(rows),
                 cols, eps, nullptr);
  bf16_to_host(o, out, static_cast<size_t>(rows * cols));
}

void CudaBackend::matmul(const float* x, int64_t rows, MatrixView w, float* out, bool accumulate) {
  auto dx = bf16_device(x, static_cast<size_t>(rows * w.cols));
  auto dw = bf16_device(w);
  const auto n = static_cast<size_t>(rows * w.rows);
  DeviceBuffer<float> y = accumulate ? to_device(out, n) : DeviceBuffer<float>(n);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  ACTORLM_CUBLAS_CHECK(cublasGemmEx(impl_->blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows),
                                    static_cast<int>(rows), static_cast<int>(w.cols), &alpha, dw.get(), CUDA_R_16BF,
                                    static_cast<int>(w.cols), dx.get(), CUDA_R_16BF, static_cast<int>(w.cols), &beta,
                                    y.get(), CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  to_host(y, out, n);
}

void CudaBackend::add_bias(float* x, const float* bias, int64_t rows, int64_t cols) {
  auto dx = to_device(x, static_cast<size_t>(rows * cols));
  auto db = to_device(bias, static_cast<size_t>(cols));
  cuda::add_bias(dx.get(), cols, db.get(), static_cast<int32_t>(rows), cols, nullptr);
  to_host(dx, x, static_cast<size_t>(rows * cols));
}

void CudaBackend::rope(float* q, int32_t n_heads, float* k, int32_t n_kv_heads, std::span<const int32_t> positions,
                       const RopeTable& table) {
  const auto T = static_cast<int32_t>(positions.size());
  const int32_t hd = table.head_dim;
  auto pos = to_device(positions.data(), positions.size());
  auto freq = to_device(table.inv_freq.data(), table.inv_freq.size());
  // q and k live in separate host arrays: one launch each, as "q only".
  for (auto [data, heads] : {std::pair{q, n_heads}, std::pair{k, n_kv_heads}}) {
    const auto n = static_cast<size_t>(T) * heads * hd;
    auto d = to_device(data, n);
    cuda::rope(d.get(), static_cast<int64_t>(heads) * hd, heads, nullptr, 0, 0, hd, pos.get(), freq.get(), T, nullptr);
    to_host(d, data, n);
  }
}

namespace {
void require_float_cache(const KvLayerView& cache) {
  if (cache.k == nullptr || cache.v == nullptr) {
    throw std::invalid_argument("the CUDA backend reads a float32 KV cache view (no f16 cache here)");
  }
}

// The operations only Gemma-family layers use have no CUDA kernel yet; the
// CUDA executor refuses those architectures before any of them is reached.
[[noreturn]] void not_on_cuda(const std::string& what) {
  throw std::logic_error(what + " is not on the CUDA backend yet (it runs llama and qwen2 layers)");
}
}  // namespace

void CudaBackend::store_kv(KvLayerView cache, const float* k, const float* v, std::span<const int32_t> loc) {
  require_float_cache(cache);
  const int32_t kv_dim = cache.n_kv_heads * cache.head_dim;
  const auto pool = static_cast<size_t>(cache.pool_rows) * kv_dim;
  auto kc = bf16_device(cache.k, pool);
  auto vc = bf16_device(cache.v, pool);
  const auto T = static_cast<int32_t>(loc.size());
  auto dk = to_device(k, static_cast<size_t>(T) * kv_dim);
  auto dv = to_device(v, static_cast<size_t>(T) * kv_dim);
  auto dl = to_device(loc.data(), loc.size());
  cuda::store_kv(dk.get(), dv.get(), kv_dim, kv_dim, dl.get(), T, kc.get(), vc.get(), nullptr);
  bf16_to_host(kc, cache.k, pool);
  bf16_to_host(vc, cache.v, pool);
}

void CudaBackend::attention(const float* q, KvLayerView cache, const AttentionPlan& plan, const LayerAttention& layer,
                            float* out) {
  require_float_cache(cache);
  const auto n_reqs = static_cast<int32_t>(plan.q_start.size());
  const int32_t hd = plan.head_dim;
  // The plan's CSR rows become a req_to_token table with one slot per request.
  int32_t ld = 1, T = 0;
  std::vector<AttnRequest> reqs;
  for (int32_t r = 0; r < n_reqs; ++r) {
    ld = std::max(ld, plan.kv_indptr[static_cast<size_t>(r) + 1] - plan.kv_indptr[static_cast<size_t>(r)]);
    reqs.push_back({r, plan.q_start[static_cast<size_t>(r)], plan.q_len[static_cast<size_t>(r)],
                    plan.prefix_len[static_cast<size_t>(r)]});
    T = std::max(T, plan.q_start[static_cast<size_t>(r)] + plan.q_len[static_cast<size_t>(r)]);
  }
  std::vector<int32_t> table(static_cast<size_t>(n_reqs) * ld, 0);
  for (int32_t r = 0; r < n_reqs; ++r) {
    std::copy(plan.kv_indices.begin() + plan.kv_indptr[static_cast<size_t>(r)],
              plan.kv_indices.begin() + plan.kv_indptr[static_cast<size_t>(r) + 1], table.begin() + static_cast<int64_t>(r) * ld);
  }
  const auto pool = static_cast<size_t>(cache.pool_rows) * cache.n_kv_heads * hd;
  auto kc = bf16_device(cache.k, pool);
  auto vc = bf16_device(cache.v, pool);
  const int64_t qd = static_cast<int64_t>(plan.n_heads) * hd;
  auto dq = to_device(q, static_cast<size_t>(T * qd));
  auto dt = to_device(table.data(), table.size());
  AttnSchedule sched = plan_attention(reqs, plan.n_heads, plan.n_kv_heads, hd, impl_->sm_count);
  auto dr = to_device(reqs.data(), reqs.size());
  auto di = to_device(sched.items.data(), sched.items.size());
  DeviceBuffer<float> ws(std::max<size_t>(sched.workspace_floats(), 1));
  DeviceBuffer<bf16> o(static_cast<size_t>(T * qd));
  PagedAttentionArgs a = paged_attention_args(
      {.req_to_token = dt.get(), .table_ld = ld, .reqs = dr.get(), .items = di.get(), .workspace = ws.get()},
      plan.n_heads, plan.n_kv_heads, hd, plan.scale);
  a.q = dq.get();
  a.q_ld = qd;
  a.k_cache = kc.get();
  a.v_cache = vc.get();
  a.sliding_window = layer.sliding_window;
  a.softcap = layer.softcap;
  a.out = o.get();
  paged_attention(a, sched, nullptr);
  bf16_to_host(o, out, static_cast<size_t>(T * qd));
}

namespace {

DeviceBuffer<bf16> glu_on_device(const float* gate, const float* up, int64_t n, bool gelu) {
  auto dg = to_device(gate, static_cast<size_t>(n));
  auto du = to_device(up, static_cast<size_t>(n));
  DeviceBuffer<bf16> o(static_cast<size_t>(std::max<int64_t>(n, 1)));
  cuda::glu(dg.get(), du.get(), n, o.get(), 1, n, gelu, nullptr);
  return o;
}

// x = op(x [, y]) for n floats on the device.
template <typename Launch>
void pointwise(float* x, int64_t n, Launch launch) {
  auto dx = to_device(x, static_cast<size_t>(n));
  launch(dx.get());
  to_host(dx, x, static_cast<size_t>(n));
}

}  // namespace

void CudaBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  bf16_to_host(glu_on_device(gate, up, n, false), out, static_cast<size_t>(n));
}

void CudaBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  bf16_to_host(glu_on_device(gate, up, n, true), out, static_cast<size_t>(n));
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  auto dy = to_device(y, static_cast<size_t>(n));
  pointwise(x, n, [&](float* dx) { cuda::add(dx, dy.get(), n, nullptr); });
}

void CudaBackend::softcap(float* x, int64_t n, float cap) {
  pointwise(x, n, [&](float* dx) { cuda::softcap(dx, n, cap, nullptr); });
}

void CudaBackend::scale(float* x, int64_t n, float s) {
  pointwise(x, n, [&](float* dx) { cuda::scale(dx, n, s, nullptr); });
}

std::vector<ExpertChoice> CudaBackend::route_experts(const float*, int64_t, int32_t, int32_t, bool, float) {
  not_on_cuda("expert routing");
}
void CudaBackend::gather_rows(const float*, int64_t, std::span<const int32_t>, float*) { not_on_cuda("gather_rows"); }
void CudaBackend::scatter_add_rows(float*, int64_t, std::span<const int32_t>, std::span<const float>, const float*) {
  not_on_cuda("scatter_add_rows");
}

std::vector<SampleResult> CudaBackend::sample(const float* logits, int32_t vocab, std::span<const SampleRequest> reqs) {
  const auto R = static_cast<int32_t>(reqs.size());
  std::vector<SampleRowParams> params;
  std::vector<HistoryEntry> history;
  for (const SampleRequest& q : reqs) params.push_back(plan_sample_row(q, vocab, history));
  auto dl = to_device(logits, static_cast<size_t>(R) * vocab);
  auto dp = to_device(params.data(), params.size());
  auto dh = to_device(history.data(), history.size());
  DeviceBuffer<float> work(static_cast<size_t>(R) * vocab), lp(static_cast<size_t>(R));
  DeviceBuffer<int32_t> tok(static_cast<size_t>(R));
  sample_rows(dl.get(), vocab, R, dp.get(), dh.get(), work.get(), tok.get(), lp.get(), nullptr);
  std::vector<int32_t> t(static_cast<size_t>(R));
  std::vector<float> l(static_cast<size_t>(R));
  to_host(tok, t.data(), t.size());
  to_host(lp, l.data(), l.size());
  std::vector<SampleResult> out(static_cast<size_t>(R));
  for (int32_t r = 0; r < R; ++r) {
    if (t[static_cast<size_t>(r)] < 0) throw std::domain_error("sampler: every logit is -inf or NaN");
    out[static_cast<size_t>(r)].token = t[static_cast<size_t>(r)];
    out[static_cast<size_t>(r)].logprob = l[static_cast<size_t>(r)];
  }
  return out;
}

}  // namespace actorlm::cuda
