#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.cuh"

namespace actorlm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kSlots = kAttnMaxSlots;

// Each token is read by HD/8 lanes, 8 bf16 (16 bytes) per lane, so a warp
// covers 256/HD tokens per step with fully coalesced 16-byte loads.
template <int HD>
struct Layout {
  static constexpr int kLanesPerToken = HD / 8;
  static constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  static constexpr int kStates = kWarps * kTokensPerWarp;  // independent softmax states per block
};

__device__ inline void to_f32x8(const uint4& raw, float* out) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// KV rows of the block's positions are staged in shared memory this many at
// a time, so the K/V loads do not wait on a req_to_token load each.
constexpr int kTableChunk = 1024;
// Warp steps whose loads are issued before the first is consumed.
constexpr int kUnroll = 4;

// SLOTS: (query row, head) pairs per item, rounded up (4 or 8); fewer slots
// mean fewer registers and more resident blocks for decode. LOCAL: the
// layer has a sliding window or soft-capped scores (Gemma); a variant of its
// own keeps those checks out of every other layer's inner loop.
template <int HD, int SLOTS, bool LOCAL>
__global__ void __launch_bounds__(kWarps * 32, SLOTS <= 4 ? 4 : 2) attention_kernel(PagedAttentionArgs a, int32_t chunk, int32_t n_splits) {
  using L = Layout<HD>;
  constexpr int LPT = L::kLanesPerToken, TPW = L::kTokensPerWarp;
  __shared__ float sm_acc[L::kStates][SLOTS][HD];
  __shared__ float sm_m[L::kStates][SLOTS];
  __shared__ float sm_l[L::kStates][SLOTS];
  __shared__ int32_t sm_rows[kTableChunk];

  const AttnWorkItem it = a.items[blockIdx.x];
  const AttnRequest rq = a.reqs[it.req];
  const int n_slots = it.n_rows * it.n_qheads;
  const int kv_end = rq.prefix_len + it.row0 + it.n_rows;
  const int begin = blockIdx.y * chunk;
  const int end = min(kv_end, begin + chunk);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / LPT, d0 = (lane % LPT) * 8;
  const float qscale = a.scale * 1.4426950408889634f;  // scores in log2 units: exp2 below
  const float cap2 = a.softcap * 1.4426950408889634f;
  const int window = a.sliding_window;

  float q[SLOTS][8], acc[SLOTS][8], m[SLOTS], l[SLOTS];
  int lim[SLOTS];
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
    m[s] = -INFINITY;
    l[s] = 0.0f;
    lim[s] = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) q[s][i] = acc[s][i] = 0.0f;
    if (s < n_slots) {
      const int row = it.row0 + s / it.n_qheads, head = it.head0 + s % it.n_qheads;
      const float* qp = a.q + static_cast<int64_t>(rq.q_start + row) * a.q_ld + head * HD + d0;
#pragma unroll
      for (int i = 0; i < 8; ++i) q[s][i] = qp[i] * qscale;
      lim[s] = rq.prefix_len + row + 1;  // causal: positions < lim
    }
  }

  const int32_t* table = a.req_to_token + static_cast<int64_t>(rq.slot) * a.table_ld;
  const bf16* kbase = a.k_cache + static_cast<int64_t>(it.kv_head) * HD + d0;
  const bf16* vbase = a.v_cache + static_cast<int64_t>(it.kv_head) * HD + d0;
  const int64_t row_stride = static_cast<int64_t>(a.n_kv_heads) * HD;
  auto consume = [&](int pos, bool valid, const uint4& kraw, const uint4& vraw) {
    float kf[8], vf[8];
    to_f32x8(kraw, kf);
    to_f32x8(vraw, vf);
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      if (s >= n_slots) break;  // uniform across the block
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) dot += q[s][i] * kf[i];
#pragma unroll
      for (int o = LPT / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      // Scores are in log2 units (q carries log2(e)): so is the cap.
      if (LOCAL && cap2 > 0.0f) dot = cap2 * tanhf(dot / cap2);
      if (valid && pos < lim[s] && (!LOCAL || window == 0 || pos >= lim[s] - window)) {
        const float mn = fmaxf(m[s], dot);
        const float corr = exp2f(m[s] - mn), p = exp2f(dot - mn);
        l[s] = l[s] * corr + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[s][i] = acc[s][i] * corr + p * vf[i];
        m[s] = mn;
      }
    }
  };
  constexpr int kStride = kWarps * TPW;  // positions per block step
  for (int c0 = begin; c0 < end; c0 += kTableChunk) {
    const int c1 = min(end, c0 + kTableChunk);
    __syncthreads();  // the previous chunk's rows are no longer read
    for (int i = threadIdx.x; i < c1 - c0; i += blockDim.x) sm_rows[i] = table[c0 + i];
    __syncthreads();
    // `base` is warp-uniform (the shuffles need every lane); kUnroll steps
    // of loads are in flight before the first is consumed.
    for (int base = c0 + warp * TPW; base < c1; base += kUnroll * kStride) {
      uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pos = base + u * kStride + sub;
        if (pos < c1) {
          const int64_t r = static_cast<int64_t>(sm_rows[pos - c0]) * row_stride;
          kr[u] = *reinterpret_cast<const uint4*>(kbase + r);
          vr[u] = *reinterpret_cast<const uint4*>(vbase + r);
        } else {
          kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int pos = base + u * kStride + sub;
        consume(pos, pos < c1, kr[u], vr[u]);
      }
    }
  }

  const int state = warp * TPW + sub;
#pragma unroll
  for (int s = 0; s < SLOTS; ++s) {
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_acc[state][s][d0 + i] = acc[s][i];
    if (d0 == 0) {
      sm_m[state][s] = m[s];
      sm_l[state][s] = l[s];
    }
  }
  __syncthreads();
  float* ws = a.workspace + (static_cast<int64_t>(blockIdx.x) * n_splits + blockIdx.y) * kSlots * (HD + 2);
  for (int j = threadIdx.x; j < n_slots * HD; j += blockDim.x) {
    const int s = j / HD, d = j % HD;
    float mx = -INFINITY;
    for (int st = 0; st < L::kStates; ++st) mx = fmaxf(mx, sm_m[st][s]);
    float sum_l = 0.0f, sum_a = 0.0f;
    if (mx != -INFINITY) {
      for (int st = 0; st < L::kStates; ++st) {
        const float w = exp2f(sm_m[st][s] - mx);
        sum_l += sm_l[st][s] * w;
        sum_a += sm_acc[st][s][d] * w;
      }
    }
    ws[s * (HD + 2) + d] = sum_a;
    if (d == 0) {
      ws[s * (HD + 2) + HD] = mx;
      ws[s * (HD + 2) + HD + 1] = sum_l;
    }
  }
}

// One block per item, one thread per (slot, dim): merges the splits.
template <int HD>
__global__ void merge_kernel(PagedAttentionArgs a, int32_t n_splits) {
  const AttnWorkItem it = a.items[blockIdx.x];
  const AttnRequest rq = a.reqs[it.req];
  const int n_slots = it.n_rows * it.n_qheads;
  const float* ws = a.workspace + static_cast<int64_t>(blockIdx.x) * n_splits * kSlots * (HD + 2);
  for (int j = threadIdx.x; j < n_slots * HD; j += blockDim.x) {
    const int s = j / HD, d = j % HD;
    float mx = -INFINITY;
    for (int sp = 0; sp < n_splits; ++sp) mx = fmaxf(mx, ws[(sp * kSlots + s) * (HD + 2) + HD]);
    float sum_l = 0.0f, sum_a = 0.0f;
    for (int sp = 0; sp < n_splits; ++sp) {
      const float* st = ws + (sp * kSlots + s) * (HD + 2);
      if (st[HD] == -INFINITY) continue;
      const float w = exp2f(st[HD] - mx);
      sum_l += st[HD + 1] * w;
      sum_a += st[d] * w;
    }
    const int row = it.row0 + s / it.n_qheads, head = it.head0 + s % it.n_qheads;
    a.out[static_cast<int64_t>(rq.q_start + row) * a.n_heads * HD + head * HD + d] = __float2bfloat16(sum_a / sum_l);
  }
}

template <int HD, bool LOCAL>
void launch_attention(const PagedAttentionArgs& a, const AttnSchedule& sc, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(sc.items.size()), static_cast<unsigned>(sc.n_splits));
  if (sc.max_slots <= 4) {
    attention_kernel<HD, 4, LOCAL><<<grid, kWarps * 32, 0, s>>>(a, sc.chunk, sc.n_splits);
  } else {
    attention_kernel<HD, 8, LOCAL><<<grid, kWarps * 32, 0, s>>>(a, sc.chunk, sc.n_splits);
  }
}

template <int HD>
void launch(const PagedAttentionArgs& a, const AttnSchedule& sc, cudaStream_t s) {
  const auto n_items = static_cast<unsigned>(sc.items.size());
  if (a.sliding_window > 0 || a.softcap > 0.0f) {
    launch_attention<HD, true>(a, sc, s);
  } else {
    launch_attention<HD, false>(a, sc, s);
  }
  ACTORLM_CUDA_LAUNCHED();
  merge_kernel<HD><<<n_items, 256, 0, s>>>(a, sc.n_splits);
  ACTORLM_CUDA_LAUNCHED();
}

}  // namespace

size_t AttnSchedule::workspace_floats() const {
  return items.size() * static_cast<size_t>(n_splits) * kSlots * static_cast<size_t>(head_dim + 2);
}

AttnSchedule plan_attention(const std::vector<AttnRequest>& reqs, int32_t n_heads, int32_t n_kv_heads,
                            int32_t head_dim, int32_t sm_count) {
  AttnSchedule sc;
  sc.head_dim = head_dim;
  const int32_t group = n_heads / n_kv_heads;
  const int32_t heads_per_item = std::min(group, kSlots);
  const int32_t rows_per_item = std::max(1, kSlots / heads_per_item);
  int32_t max_kv = 1;
  for (int32_t r = 0; r < static_cast<int32_t>(reqs.size()); ++r) {
    const AttnRequest& rq = reqs[static_cast<size_t>(r)];
    max_kv = std::max(max_kv, rq.prefix_len + rq.q_len);
    for (int32_t kvh = 0; kvh < n_kv_heads; ++kvh) {
      for (int32_t h = 0; h < group; h += heads_per_item) {
        for (int32_t row = 0; row < rq.q_len; row += rows_per_item) {
          const AttnWorkItem item{r, kvh, row, std::min(rows_per_item, rq.q_len - row), kvh * group + h,
                                  std::min(heads_per_item, group - h)};
          sc.max_slots = std::max(sc.max_slots, item.n_rows * item.n_qheads);
          sc.items.push_back(item);
        }
      }
    }
  }
  // Split the sequence only when the items alone leave SMs idle: aim for
  // four blocks per SM, never splits shorter than 128 positions (the merge
  // and the partial states cost more than they save below that).
  const auto n_items = static_cast<int64_t>(sc.items.size());
  const int64_t want = 4LL * sm_count;
  int64_t splits = n_items >= want ? 1 : (want + n_items - 1) / n_items;
  int64_t chunk = (max_kv + splits - 1) / splits;
  chunk = std::max<int64_t>(128, (chunk + 63) / 64 * 64);
  sc.chunk = static_cast<int32_t>(chunk);
  sc.n_splits = static_cast<int32_t>((max_kv + chunk - 1) / chunk);
  return sc;
}

void paged_attention(const PagedAttentionArgs& a, const AttnSchedule& sc, cudaStream_t s) {
  if (sc.items.empty()) return;
  if (a.n_heads % a.n_kv_heads != 0) throw std::invalid_argument("paged_attention: n_heads must be a multiple of n_kv_heads");
  switch (a.head_dim) {
    case 8: launch<8>(a, sc, s); break;  // tiny test models
    case 16: launch<16>(a, sc, s); break;
    case 32: launch<32>(a, sc, s); break;
    case 64: launch<64>(a, sc, s); break;
    case 128: launch<128>(a, sc, s); break;
    case 256: launch<256>(a, sc, s); break;
    default:
      throw std::invalid_argument("CUDA paged attention supports head_dim 8, 16, 32, 64, 128 and 256, not " +
                                  std::to_string(a.head_dim));
  }
}

}  // namespace actorlm::cuda
