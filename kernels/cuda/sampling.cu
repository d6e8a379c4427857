#include <cfloat>
#include <climits>
#include <unordered_map>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/random.cuh"
#include "kernels/cuda/sampling.cuh"

namespace actorlm::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBisections = 32;

__device__ float clean(float v) { return v != v ? -INFINITY : v; }

// The CPU sampler's uniform (kernels/cpu/sampler.cpp), bit for bit.
__device__ double uniform(uint64_t seed, uint64_t step) {
  uint64_t bits = splitmix64(splitmix64(seed) ^ (step * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = scratch[lane];  // kThreads / 32 == 32 partials
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  T out = scratch[0];
  __syncthreads();
  return out;
}

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int32_t vocab, const SampleRowParams* params,
                                                          const HistoryEntry* history, float* work, int32_t* tokens,
                                                          float* logprobs) {
  __shared__ float scratch[32];
  __shared__ int32_t pick;
  __shared__ float chunk_mass[kThreads];
  const int64_t row = blockIdx.x;
  const float* in = logits + row * vocab;
  float* x = work + row * vocab;
  const SampleRowParams p = params[row];

  // The raw distribution's log-sum-exp, for the logprob.
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, clean(in[i]));
  const float raw_max = block_reduce(mx, Max{}, scratch);
  float se = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) se += __expf(clean(in[i]) - raw_max);
  const float raw_lse = raw_max + logf(block_reduce(se, Sum{}, scratch));

  for (int i = threadIdx.x; i < vocab; i += kThreads) x[i] = clean(in[i]);
  __syncthreads();
  // History entries are distinct tokens, so no two threads touch one logit.
  for (int j = p.hist_begin + threadIdx.x; j < p.hist_end; j += kThreads) {
    const HistoryEntry h = history[j];
    float v = x[h.token];
    if (p.repetition_penalty != 1.0f) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    if (h.output_count > 0) v -= p.frequency_penalty * static_cast<float>(h.output_count) + p.presence_penalty;
    x[h.token] = v;
  }
  __syncthreads();

  if (threadIdx.x == 0) pick = INT_MAX;
  float best = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) best = fmaxf(best, x[i]);
  const float top = block_reduce(best, Max{}, scratch);
  if (top == -INFINITY) {
    if (threadIdx.x == 0) {
      tokens[row] = -1;  // the host reports it: every logit was -inf or NaN
      logprobs[row] = -INFINITY;
    }
    return;
  }
  if (p.greedy) {
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      if (x[i] == top) atomicMin(&pick, i);  // lowest index among equal maxima, as the CPU sampler
    }
    __syncthreads();
  } else {
    const float inv_t = 1.0f / p.temperature;
    const float m = top * inv_t;
    // top-k: the largest threshold v (in scaled-logit space) with at least k
    // values >= v. Below m - 80 a probability is < 1e-34: treated as zero.
    float k_cut = m - 80.0f;
    if (p.top_k > 0 && p.top_k < vocab) {
      float lo = k_cut, hi = m;
      for (int it = 0; it < kBisections; ++it) {
        const float mid = 0.5f * (lo + hi);
        float c = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += kThreads) c += x[i] * inv_t >= mid ? 1.0f : 0.0f;
        if (block_reduce(c, Sum{}, scratch) >= static_cast<float>(p.top_k)) lo = mid; else hi = mid;
      }
      k_cut = lo;
    }
    auto prob = [&](int i) {
      const float v = x[i] * inv_t;
      return v >= k_cut ? __expf(v - m) : 0.0f;
    };
    float z = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += kThreads) z += prob(i);
    z = block_reduce(z, Sum{}, scratch);
    // top-p: the largest probability threshold whose kept mass is >= top_p.
    float p_cut = 0.0f;
    if (p.top_p < 1.0f) {
      float lo = 0.0f, hi = 1.0f;
      for (int it = 0; it < kBisections; ++it) {
        const float mid = 0.5f * (lo + hi);
        float mass = 0.0f;
        for (int i = threadIdx.x; i < vocab; i += kThreads) {
          const float q = prob(i);
          mass += q >= mid ? q : 0.0f;
        }
        if (block_reduce(mass, Sum{}, scratch) >= p.top_p * z) lo = mid; else hi = mid;
      }
      p_cut = lo;
    }
    const float cut = fmaxf(p_cut, p.min_p);  // min-p: p >= min_p * p_max, and p_max is 1 here
    // Each thread owns a contiguous chunk; chunk masses, a scan, then the
    // chunk holding the draw walks its tokens.
    const int per = (vocab + kThreads - 1) / kThreads;
    const int lo_i = threadIdx.x * per, hi_i = min(vocab, lo_i + per);
    float mine = 0.0f;
    for (int i = lo_i; i < hi_i; ++i) {
      const float q = prob(i);
      mine += q >= cut ? q : 0.0f;
    }
    chunk_mass[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int t = 0; t < kThreads; ++t) total += chunk_mass[t];
      double u = uniform(p.seed, p.step) * total;
      int owner = -1;
      for (int t = 0; t < kThreads; ++t) {
        if (chunk_mass[t] <= 0.0f) continue;
        owner = t;
        if (u < chunk_mass[t]) break;
        u -= chunk_mass[t];
      }
      // Rounding can leave u just past the last kept token: it takes that one.
      int chosen = -1;
      const int a = owner * per, b = min(vocab, a + per);
      for (int i = a; i < b; ++i) {
        const float q = prob(i);
        if (q < cut || q <= 0.0f) continue;
        chosen = i;
        if (u < q) break;
        u -= q;
      }
      pick = chosen;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    tokens[row] = pick;
    logprobs[row] = clean(in[pick]) - raw_lse;
  }
}

}  // namespace

SampleRowParams plan_sample_row(const SampleRequest& q, int32_t vocab, std::vector<HistoryEntry>& history) {
  SampleRowParams p;
  p.temperature = q.params.temperature;
  p.top_p = q.params.top_p;
  p.min_p = q.params.min_p;
  p.repetition_penalty = q.params.repetition_penalty;
  p.frequency_penalty = q.params.frequency_penalty;
  p.presence_penalty = q.params.presence_penalty;
  p.top_k = q.params.top_k;
  p.greedy = q.params.greedy() ? 1 : 0;
  p.seed = q.params.has_seed ? q.params.seed : 0;
  p.step = q.step;
  p.hist_begin = p.hist_end = static_cast<int32_t>(history.size());
  const bool rep = q.params.repetition_penalty != 1.0f;
  const bool occ = q.params.frequency_penalty != 0.0f || q.params.presence_penalty != 0.0f;
  if (!rep && !occ) return p;
  std::unordered_map<int32_t, int32_t> seen;  // token -> occurrences in the output
  if (rep) {
    for (int32_t t : q.prompt) {
      if (t >= 0 && t < vocab) seen.emplace(t, 0);
    }
  }
  for (int32_t t : q.output) {
    if (t >= 0 && t < vocab) ++seen[t];
  }
  for (auto [t, n] : seen) history.push_back({t, occ ? n : 0});
  p.hist_end = static_cast<int32_t>(history.size());
  return p;
}

void sample_rows(const float* logits, int32_t vocab, int32_t rows, const SampleRowParams* params,
                 const HistoryEntry* history, float* work, int32_t* tokens, float* logprobs, cudaStream_t s) {
  if (rows == 0) return;
  sample_kernel<<<rows, kThreads, 0, s>>>(logits, vocab, params, history, work, tokens, logprobs);
  ACTORLM_CUDA_LAUNCHED();
}

}  // namespace actorlm::cuda
