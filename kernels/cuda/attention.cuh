#pragma once
// Paged attention over the KV pool for a batch that mixes decode and extend
// (prefill on top of a cached prefix) requests, one kernel for both.
//
// Work is cut into items: one KV head of one request, with up to kMaxSlots
// (query row, query head) pairs that share it — the GQA group of a decode
// token, or several consecutive rows of an extend — so each K/V row is read
// once per item, not once per query head. Long contexts are also cut into
// splits along the sequence (flash-decoding) when there are too few items to
// fill the GPU; a second kernel merges the splits' partial softmax states.
// KV rows are found through req_to_token, never a gathered copy.

#include <cstdint>
#include <vector>

#include "kernels/cuda/ops.cuh"

namespace actorlm::cuda {

constexpr int kAttnMaxSlots = 8;

struct AttnRequest {
  int32_t slot = 0;        // row of req_to_token
  int32_t q_start = 0;     // first query row in the batch
  int32_t q_len = 0;       // queries in this pass
  int32_t prefix_len = 0;  // positions cached before this pass
};

struct AttnWorkItem {
  int32_t req = 0;
  int32_t kv_head = 0;
  int32_t row0 = 0;      // first query row of the request in this item
  int32_t n_rows = 0;
  int32_t head0 = 0;     // first query head in this item
  int32_t n_qheads = 0;  // n_rows * n_qheads <= kAttnMaxSlots
};

struct AttnSchedule {
  std::vector<AttnWorkItem> items;
  int32_t n_splits = 1;
  int32_t chunk = 0;  // KV positions per split
  int32_t max_slots = 1;  // most (row, head) pairs in one item
  size_t workspace_floats() const;
  int32_t head_dim = 0;
};

// Cuts a batch into items and splits (host side, from host copies of reqs).
AttnSchedule plan_attention(const std::vector<AttnRequest>& reqs, int32_t n_heads, int32_t n_kv_heads,
                            int32_t head_dim, int32_t sm_count);

struct PagedAttentionArgs {
  const float* q = nullptr;  // [tokens][q_ld]; head h at column h * head_dim
  int64_t q_ld = 0;
  const bf16* k_cache = nullptr;  // [pool_rows][n_kv_heads][head_dim]
  const bf16* v_cache = nullptr;
  const int32_t* req_to_token = nullptr;  // [slots][table_ld]
  int64_t table_ld = 0;
  const AttnRequest* reqs = nullptr;    // device
  const AttnWorkItem* items = nullptr;  // device, schedule.items
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  // > 0: query at position p sees keys p - sliding_window + 1 .. p only.
  int32_t sliding_window = 0;
  // > 0: each scaled score s becomes softcap * tanh(s / softcap).
  float softcap = 0.0f;
  float* workspace = nullptr;  // schedule.workspace_floats()
  bf16* out = nullptr;         // [tokens][n_heads * head_dim]
};

// A batch's device copies that every launch over it reads: the block table,
// the requests and the schedule's work items, and the workspace the
// schedule sized.
struct AttnBatch {
  const int32_t* req_to_token = nullptr;  // [slots][table_ld]
  int64_t table_ld = 0;
  const AttnRequest* reqs = nullptr;
  const AttnWorkItem* items = nullptr;
  float* workspace = nullptr;
};

// The arguments shared by every layer's launch over `batch` (the model
// executor, the kernel test and the microbenchmark all start here); each
// launch then names its query, caches, output and the layer's own options.
inline PagedAttentionArgs paged_attention_args(const AttnBatch& batch, int32_t n_heads, int32_t n_kv_heads,
                                               int32_t head_dim, float scale) {
  PagedAttentionArgs a;
  a.req_to_token = batch.req_to_token;
  a.table_ld = batch.table_ld;
  a.reqs = batch.reqs;
  a.items = batch.items;
  a.workspace = batch.workspace;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.scale = scale;
  return a;
}

// head_dim must be 8, 16, 32, 64, 128 or 256 (throws otherwise).
void paged_attention(const PagedAttentionArgs& args, const AttnSchedule& schedule, cudaStream_t s);

}  // namespace actorlm::cuda
