#pragma once
// Sampling on the device, one block per logits row, so that only token ids
// and their logprobs cross to the host.
//
// Same semantics as the CPU sampler (kernels/cpu/sampler.hpp): repetition,
// frequency and presence penalties, then greedy argmax, or temperature,
// top-k, top-p, min-p and a counter-based draw from (seed, step) with the
// same uniform. Unlike the CPU sampler, which walks candidates by
// probability, the draw walks them in vocabulary order, so a seeded
// non-greedy request is reproducible on one backend but may pick a different
// token on the other. The top-k and top-p cut-offs are found by bisection on
// a threshold instead of a sort: tokens tied with the k-th keep together.

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/ops.cuh"

namespace actorlm::cuda {

struct SampleRowParams {
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t greedy = 0;
  uint64_t seed = 0;
  uint64_t step = 0;
  int32_t hist_begin = 0;  // [begin, end) of this row's history entries
  int32_t hist_end = 0;
};

// One per distinct token the request has seen (prompt or output).
struct HistoryEntry {
  int32_t token = 0;
  int32_t output_count = 0;  // occurrences in the output (0: prompt only)
};

// The row's parameters from a request, its penalty history appended to
// `history` (distinct in-vocabulary tokens, only when a penalty is on).
SampleRowParams plan_sample_row(const SampleRequest& q, int32_t vocab, std::vector<HistoryEntry>& history);

// work: rows * vocab floats of scratch.
void sample_rows(const float* logits, int32_t vocab, int32_t rows, const SampleRowParams* params,
                 const HistoryEntry* history, float* work, int32_t* tokens, float* logprobs, cudaStream_t s);

}  // namespace actorlm::cuda
