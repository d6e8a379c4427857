#pragma once
// LoRA updates on the host: out[r] += s · (x[r] · aᵀ) · bᵀ for the rows of
// each slice (Backend::low_rank_add), a and b in half precision, b kept
// transposed so the second product is a run of axpys over the output row.
// Each row's sums are taken in one fixed order (16 running dot products,
// then k = 0 .. rank-1), so a row's result does not depend on its batch, on
// the thread that computes it or on the other slices.

#include <cstdint>
#include <span>

#include "kernels/backend.hpp"

namespace actorlm {

// Rows [begin, end) of the slices' rows counted one slice after another.
void low_rank_add_rows(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                       std::span<const LowRankSlice> slices, int64_t begin, int64_t end);

// The slices' rows in all.
int64_t low_rank_rows(std::span<const LowRankSlice> slices);

}  // namespace actorlm
