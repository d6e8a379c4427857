#pragma once
// Causal attention of a batch's queries over the paged KV cache (the
// contract of backend.hpp), for prefill, prefix-extend and decode alike.
//
// Per query: online softmax over its visible keys in blocks of 64, in float32
// (with a sliding window, only the last `window` positions are visible;
// chunks wholly before them contribute nothing).
// Keys are cut into chunks of 512 positions at fixed offsets from position 0;
// each chunk gives a partial (max, sum, weighted V sum) and the partials are
// folded left in position order. A task covers a tile of up to 8 query
// positions of one request with the query heads that share one KV head (so a
// K/V block, loaded once, serves all of them) and a range of chunks; when a
// batch has fewer tiles than threads (one long decode), each chunk is a task
// of its own and the fold happens after. A query's arithmetic depends only
// on its position and its keys, never on the tiling or the batch around it,
// so its result is bit for bit the same alone, in any batch, and with its
// prefix cached or computed in the same pass.

#include "kernels/backend.hpp"
#include "kernels/cpu/quantized_matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace actorlm::cpu {

// Throws std::out_of_range when the plan names a KV row outside the pool.
// `isa` avx2, avx_vnni or avx512_vnni takes the register-blocked kernels
// (attention_block.hpp; 256-bit vectors for the first two, 512-bit for the
// last), portable the per-query ones: the same bits every way.
void paged_attention(const float* q, const KvLayerView& cache, const AttentionPlan& plan, const LayerAttention& layer,
                     float* out, ThreadPool& pool, Isa isa = best_isa());

}  // namespace actorlm::cpu
