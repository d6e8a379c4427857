#include "bench/cuda_microbench.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_buffer.cuh"

namespace actorlm::cuda {
namespace {

template <typename F>
double median_ms(int reps, F&& launch) {
  cudaEvent_t a, b;
  ACTORLM_CUDA_CHECK(cudaEventCreate(&a));
  ACTORLM_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    ACTORLM_CUDA_CHECK(cudaEventRecord(a));
    launch();
    ACTORLM_CUDA_CHECK(cudaEventRecord(b));
    ACTORLM_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    ACTORLM_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

KernelTiming time_decode_attention(int batch, int context, int n_heads, int n_kv_heads, int head_dim, int page_size,
                                   int reps) {
  const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
  const int64_t pages_per_req = (context + page_size - 1) / page_size;
  const int64_t pool_rows = (pages_per_req * batch + 1) * page_size;
  DeviceBuffer<bf16> k(static_cast<size_t>(pool_rows * kv_dim)), v(k.size());
  fill_random(k.get(), static_cast<int64_t>(k.size()), 1.0f, 1, nullptr);
  fill_random(v.get(), static_cast<int64_t>(v.size()), 1.0f, 2, nullptr);
  std::vector<int32_t> pages(static_cast<size_t>(pages_per_req * batch));
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
  std::vector<int32_t> table(static_cast<size_t>(batch) * context);
  std::vector<AttnRequest> reqs;
  for (int r = 0; r < batch; ++r) {
    for (int p = 0; p < context; ++p) {
      table[static_cast<size_t>(r) * context + p] =
          pages[static_cast<size_t>(r * pages_per_req + p / page_size)] * page_size + p % page_size;
    }
    reqs.push_back({r, r, 1, context - 1});
  }
  int sms = 0;
  ACTORLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  AttnSchedule sched = plan_attention(reqs, n_heads, n_kv_heads, head_dim, sms);
  DeviceBuffer<int32_t> d_table(table.size());
  ACTORLM_CUDA_CHECK(cudaMemcpy(d_table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  DeviceBuffer<AttnRequest> d_reqs(reqs.size());
  ACTORLM_CUDA_CHECK(cudaMemcpy(d_reqs.get(), reqs.data(), reqs.size() * sizeof(AttnRequest), cudaMemcpyHostToDevice));
  DeviceBuffer<AttnWorkItem> d_items(sched.items.size());
  ACTORLM_CUDA_CHECK(cudaMemcpy(d_items.get(), sched.items.data(), sched.items.size() * sizeof(AttnWorkItem),
                                cudaMemcpyHostToDevice));
  const int64_t qd = static_cast<int64_t>(n_heads) * head_dim;
  DeviceBuffer<float> q(static_cast<size_t>(batch * qd)), ws(std::max<size_t>(sched.workspace_floats(), 1));
  fill_random_f32(q.get(), batch * qd, 1.0f, 0.0f, 3, nullptr);
  DeviceBuffer<bf16> out(static_cast<size_t>(batch * qd));
  PagedAttentionArgs a = paged_attention_args(
      {.req_to_token = d_table.get(), .table_ld = context, .reqs = d_reqs.get(), .items = d_items.get(),
       .workspace = ws.get()},
      n_heads, n_kv_heads, head_dim, 1.0f / std::sqrt(static_cast<float>(head_dim)));
  a.q = q.get();
  a.q_ld = qd;
  a.k_cache = k.get();
  a.v_cache = v.get();
  a.out = out.get();
  KernelTiming t;
  t.ms = median_ms(reps, [&] { paged_attention(a, sched, nullptr); });
  t.bytes = 2.0 * batch * context * kv_dim * 2 + batch * qd * (4 + 2) + static_cast<double>(table.size()) * 4;
  return t;
}

KernelTiming time_device_copy(size_t bytes, int reps) {
  DeviceBuffer<char> a(bytes), b(bytes);
  ACTORLM_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
  KernelTiming t;
  t.ms = median_ms(reps, [&] { ACTORLM_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); });
  t.bytes = 2.0 * static_cast<double>(bytes);
  return t;
}

}  // namespace actorlm::cuda
