#include "executor/cuda_executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <stdexcept>

#include "kernels/cpu/sampler.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/cuda_tensor_ops.cuh"
#include "model/llama_model.hpp"

namespace actorlm::cuda {
namespace {

// Host-pinned staging for one step's inputs: one H2D copy per step.
class Staging {
 public:
  ~Staging() {
    if (host_) cudaFreeHost(host_);
  }
  void reset() { used_ = 0; }
  // Reserves n bytes (16-aligned) and returns their offset.
  size_t take(size_t n) {
    size_t at = used_;
    used_ += (n + 15) / 16 * 16;
    return at;
  }
  // Returns whether the device side moved.
  bool reserve_host() {
    if (used_ <= cap_) return false;
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    cap_ = used_ * 2;
    ACTORLM_CUDA_CHECK(cudaMallocHost(&host_, cap_));
    return device_.grow(cap_);
  }
  char* host(size_t at) { return static_cast<char*>(host_) + at; }
  template <typename T>
  T* device(size_t at) { return reinterpret_cast<T*>(device_.get() + at); }
  void upload(cudaStream_t s) {
    if (used_) ACTORLM_CUDA_CHECK(cudaMemcpyAsync(device_.get(), host_, used_, cudaMemcpyHostToDevice, s));
  }

 private:
  void* host_ = nullptr;
  size_t cap_ = 0, used_ = 0;
  DeviceBuffer<char> device_;
};

}  // namespace

struct CudaExecutor::Impl {
  int device = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  // The layer loop is model/llama_model.cpp's, run over these ops.
  std::unique_ptr<CudaTensorOps> ops;
  std::unique_ptr<LlamaModel> model;
  const ModelConfig& cfg() const { return model->config(); }

  int64_t pool_rows = 0;
  int32_t max_requests = 0, max_context = 0;
  DeviceBuffer<bf16> k_pool, v_pool;  // [layers][pool_rows][kv_dim]
  DeviceBuffer<int32_t> table;        // [max_requests][max_context]

  std::vector<KvLayerView> kv;       // per layer: views of k_pool / v_pool

  // Per-step buffers beside the ops' arena, grown to the largest batch seen.
  DeviceBuffer<float> sample_work, attn_ws, sample_lp;
  DeviceBuffer<int32_t> sample_tok;
  Staging staging, sample_staging;
  const float* logits = nullptr;  // of the latest forward, in the ops' arena
  int32_t logit_rows = 0;         // real rows of `logits` (graph padding rows follow)

  // Decode steps replay CUDA graphs, one per (padded batch size, attention
  // splits, split length): a step of a small model is otherwise dominated by
  // launching ~11 kernels per layer. A graph holds device addresses, so any
  // scratch buffer that moves bumps `generation` and stale graphs are
  // captured again.
  bool use_graphs = true;
  uint64_t generation = 0;
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0, ops_generation = 0;
    const float* logits = nullptr;  // where the captured pass leaves them
  };
  std::map<std::tuple<int32_t, int32_t, int32_t>, Graph> graphs;
  DeviceBuffer<char> blas_workspace;  // cuBLAS must not allocate while a graph is captured
  int64_t graph_replays = 0, graph_captures = 0;

  ~Impl() {
    for (auto& [key, g] : graphs) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
    }
    if (blas) cublasDestroy(blas);
    if (stream) cudaStreamDestroy(stream);
  }

  void init(int dev) {
    device = dev;
    std::string why;
    if (!cuda_device_usable(&why)) throw std::runtime_error("CUDA executor: " + why);
    ACTORLM_CUDA_CHECK(cudaSetDevice(dev));
    ACTORLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    ACTORLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ACTORLM_CUBLAS_CHECK(cublasCreate(&blas));
    ACTORLM_CUBLAS_CHECK(cublasSetStream(blas, stream));
    blas_workspace.grow(size_t{32} << 20);
    ACTORLM_CUBLAS_CHECK(cublasSetWorkspace(blas, blas_workspace.get(), blas_workspace.bytes()));
    const char* env = std::getenv("ACTORLM_CUDA_GRAPHS");
    use_graphs = !(env && std::string(env) == "0");
    ops = std::make_unique<CudaTensorOps>(stream, blas);
  }

  // Grows a scratch buffer; a move invalidates captured graphs.
  template <typename T>
  void scratch(DeviceBuffer<T>& b, size_t n) {
    if (b.grow(n)) ++generation;
  }

};

CudaExecutor::CudaExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaExecutor::~CudaExecutor() {
  if (impl_) cudaSetDevice(impl_->device);
}

bool cuda_device_usable(std::string* why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) *why = err != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(err) : "no CUDA device";
    cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major < 9) {
    if (why) *why = std::string(prop.name) + " is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                    "; actorlm's CUDA backend is built for sm_90 (H100/H200)";
    return false;
  }
  return true;
}

std::unique_ptr<CudaExecutor> CudaExecutor::create(const LlamaWeights& w, int device) {
  if (const std::string missing = w.config.features_not_on_cuda(); !missing.empty()) {
    throw std::runtime_error("CUDA executor: a " + w.config.architecture + " model needs " + missing +
                             ", which only the CPU backend runs so far (--device cpu)");
  }
  auto impl = std::make_unique<Impl>();
  impl->init(device);
  impl->model = std::make_unique<LlamaModel>(w, *impl->ops);
  return std::unique_ptr<CudaExecutor>(new CudaExecutor(std::move(impl)));
}

std::unique_ptr<CudaExecutor> CudaExecutor::create_random(const ModelConfig& c, uint64_t seed, int device) {
  auto impl = std::make_unique<Impl>();
  impl->init(device);
  impl->model = std::make_unique<LlamaModel>(LlamaModel::random(c, *impl->ops, seed));
  return std::unique_ptr<CudaExecutor>(new CudaExecutor(std::move(impl)));
}

const ModelConfig& CudaExecutor::config() const { return impl_->cfg(); }
int64_t CudaExecutor::weight_bytes() const { return impl_->ops->weight_bytes(); }
std::string CudaExecutor::device_name() const { return impl_->prop.name; }
void CudaExecutor::synchronize() const { ACTORLM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

int64_t CudaExecutor::kv_bytes_per_row() const {
  return static_cast<int64_t>(impl_->cfg().n_layers) * 2 * impl_->cfg().kv_dim() * static_cast<int64_t>(sizeof(bf16));
}

int64_t CudaExecutor::kv_rows_that_fit(double fraction, int32_t max_requests, int32_t max_context) const {
  if (!(fraction > 0.0 && fraction < 1.0)) throw std::invalid_argument("mem_fraction_static must be in (0, 1)");
  ACTORLM_CUDA_CHECK(cudaSetDevice(impl_->device));
  size_t free_b = 0, total_b = 0;
  ACTORLM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double used = static_cast<double>(total_b - free_b);  // weights, context, other processes
  const double table = static_cast<double>(max_requests) * max_context * sizeof(int32_t);
  const double budget = fraction * static_cast<double>(total_b) - used - table;
  return budget > 0 ? static_cast<int64_t>(budget / static_cast<double>(kv_bytes_per_row())) : 0;
}

void CudaExecutor::allocate(int64_t kv_pool_rows, int32_t max_requests, int32_t max_context) {
  Impl& m = *impl_;
  ACTORLM_CUDA_CHECK(cudaSetDevice(m.device));
  const auto n = static_cast<size_t>(m.cfg().n_layers) * static_cast<size_t>(kv_pool_rows) * static_cast<size_t>(m.cfg().kv_dim());
  try {
    m.k_pool.grow(n);
    m.v_pool.grow(n);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("CUDA executor: a KV pool of " + std::to_string(kv_pool_rows) + " rows (" +
                             std::to_string(2 * n * sizeof(bf16) >> 20) + " MiB) does not fit: " + e.what());
  }
  // Rows never written are read only by masked lanes; zero them anyway so a
  // bug reads zeros, not NaN bit patterns.
  ACTORLM_CUDA_CHECK(cudaMemset(m.k_pool.get(), 0, m.k_pool.bytes()));
  ACTORLM_CUDA_CHECK(cudaMemset(m.v_pool.get(), 0, m.v_pool.bytes()));
  // One spare row past the last slot: padding requests of graph-replayed
  // decode steps read it (all zeros: the dummy KV row).
  m.table.grow(static_cast<size_t>(max_requests + 1) * static_cast<size_t>(max_context));
  ACTORLM_CUDA_CHECK(cudaMemset(m.table.get(), 0, m.table.bytes()));
  m.pool_rows = kv_pool_rows;
  m.max_requests = max_requests;
  m.max_context = max_context;
  m.kv.clear();
  const int64_t layer_stride = kv_pool_rows * m.cfg().kv_dim();
  for (int32_t l = 0; l < m.cfg().n_layers; ++l) {
    KvLayerView v{nullptr, nullptr, kv_pool_rows, m.cfg().n_kv_heads, m.cfg().head_dim};
    v.k_device = m.k_pool.get() + l * layer_stride;
    v.v_device = m.v_pool.get() + l * layer_stride;
    m.kv.push_back(v);
  }
}

int64_t CudaExecutor::kv_bytes() const { return static_cast<int64_t>(impl_->k_pool.bytes() + impl_->v_pool.bytes()); }

void CudaExecutor::write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv) {
  Impl& m = *impl_;
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(m.table.get() + static_cast<int64_t>(slot) * m.max_context + start, kv.data(),
                                     kv.size() * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // kv is the caller's memory
}

int64_t CudaExecutor::kv_token_bytes() const { return 2 * impl_->cfg().kv_dim() * static_cast<int64_t>(sizeof(bf16)); }

void CudaExecutor::read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                           std::span<uint8_t> out) const {
  Impl& m = *impl_;
  const auto n = static_cast<int32_t>(rows.size());
  const int64_t kv_dim = m.cfg().kv_dim(), layer_stride = m.pool_rows * kv_dim;
  if (n == 0 || last_layer <= first_layer) return;
  DeviceBuffer<int32_t> d_rows(rows.size());
  DeviceBuffer<bf16> packed(out.size() / sizeof(bf16));
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(d_rows.get(), rows.data(), rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     m.stream));
  bf16* dst = packed.get();
  for (int32_t l = first_layer; l < last_layer; ++l) {
    for (const bf16* pool : {m.k_pool.get(), m.v_pool.get()}) {
      gather_rows(pool + l * layer_stride, static_cast<int32_t>(kv_dim), d_rows.get(), n, dst, m.stream);
      dst += static_cast<int64_t>(n) * kv_dim;
    }
  }
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(out.data(), packed.get(), out.size(), cudaMemcpyDeviceToHost, m.stream));
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // out is the caller's memory; the buffers die here
}

void CudaExecutor::write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                            std::span<const uint8_t> in) {
  Impl& m = *impl_;
  const auto n = static_cast<int32_t>(rows.size());
  const int64_t kv_dim = m.cfg().kv_dim(), layer_stride = m.pool_rows * kv_dim;
  if (n == 0 || last_layer <= first_layer) return;
  DeviceBuffer<int32_t> d_rows(rows.size());
  DeviceBuffer<bf16> packed(in.size() / sizeof(bf16));
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(d_rows.get(), rows.data(), rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     m.stream));
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(packed.get(), in.data(), in.size(), cudaMemcpyHostToDevice, m.stream));
  const bf16* src = packed.get();
  for (int32_t l = first_layer; l < last_layer; ++l) {
    for (bf16* pool : {m.k_pool.get(), m.v_pool.get()}) {
      scatter_rows(src, static_cast<int32_t>(kv_dim), d_rows.get(), n, pool + l * layer_stride, m.stream);
      src += static_cast<int64_t>(n) * kv_dim;
    }
  }
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
}

namespace {

// Decode batches are padded up to these sizes so a few graphs serve all.
int32_t graph_bucket(int32_t n) {
  for (int32_t b : {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256}) {
    if (n <= b) return b;
  }
  return 0;  // too large: launched directly
}

}  // namespace

ForwardOutput CudaExecutor::forward(const ForwardBatch& b, const StepPlan& plan) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg();
  ACTORLM_CUDA_CHECK(cudaSetDevice(m.device));
  const auto R = static_cast<int32_t>(plan.logit_rows.size());
  const int64_t V = c.vocab_size;

  // A pure decode step (one new token per request, logits kept here) runs as
  // a graph, padded with requests on the spare table row that write their
  // KV to the dummy row 0.
  bool decode = !plan.host_logits && m.use_graphs;
  for (const auto& r : b.reqs) decode = decode && r.extend_len == 1;
  const int32_t bucket = decode ? graph_bucket(static_cast<int32_t>(b.reqs.size())) : 0;
  bool graph = bucket > 0;
  std::vector<int32_t> tokens = b.token_ids, positions = plan.positions, loc = b.out_cache_loc, rows = plan.logit_rows;
  std::vector<AttnRequest> reqs;
  for (size_t r = 0; r < plan.slots.size(); ++r) {
    reqs.push_back({plan.slots[r], plan.attention.q_start[r], plan.attention.q_len[r], plan.attention.prefix_len[r]});
  }
  if (graph) {
    for (auto i = static_cast<int32_t>(reqs.size()); i < bucket; ++i) {
      tokens.push_back(0);
      positions.push_back(0);
      loc.push_back(0);
      rows.push_back(i);
      reqs.push_back({m.max_requests, i, 1, 0});
    }
  }
  std::vector<int32_t> writes, values;
  int32_t max_write = 0;
  for (const auto& w : b.writes) {
    writes.insert(writes.end(), {w.slot, w.start, static_cast<int32_t>(w.kv.size()), static_cast<int32_t>(values.size())});
    values.insert(values.end(), w.kv.begin(), w.kv.end());
    max_write = std::max(max_write, static_cast<int32_t>(w.kv.size()));
  }
  AttnSchedule sched = plan_attention(reqs, c.n_heads, c.n_kv_heads, c.head_dim, m.prop.multiProcessorCount);

  // One upload. What a graph reads comes first, at offsets fixed by the
  // bucket; the req_to_token writes (read before the graph) come last.
  Staging& st = m.staging;
  st.reset();
  std::vector<std::pair<size_t, std::pair<const void*, size_t>>> copies;
  auto add = [&](const void* data, size_t bytes) {
    size_t at = st.take(std::max<size_t>(bytes, 1));
    copies.push_back({at, {data, bytes}});
    return at;
  };
  const size_t o_tok = add(tokens.data(), tokens.size() * 4);
  const size_t o_pos = add(positions.data(), positions.size() * 4);
  const size_t o_loc = add(loc.data(), loc.size() * 4);
  const size_t o_rows = add(rows.data(), rows.size() * 4);
  const size_t o_req = add(reqs.data(), reqs.size() * sizeof(AttnRequest));
  const size_t o_items = add(sched.items.data(), sched.items.size() * sizeof(AttnWorkItem));
  const size_t o_wr = add(writes.data(), writes.size() * 4);
  const size_t o_val = add(values.data(), values.size() * 4);
  if (st.reserve_host()) ++m.generation;
  for (const auto& [at, src] : copies) {
    if (src.second) std::memcpy(st.host(at), src.first, src.second);
  }
  st.upload(m.stream);
  m.scratch(m.attn_ws, std::max<size_t>(sched.workspace_floats(), 1));
  cudaStream_t s = m.stream;

  scatter_table(m.table.get(), m.max_context, st.device<int32_t>(o_wr), static_cast<int32_t>(b.writes.size()),
                st.device<int32_t>(o_val), max_write, s);
  const PagedAttentionArgs attn = paged_attention_args({.req_to_token = m.table.get(),
                                                        .table_ld = m.max_context,
                                                        .reqs = st.device<AttnRequest>(o_req),
                                                        .items = st.device<AttnWorkItem>(o_items),
                                                        .workspace = m.attn_ws.get()},
                                                       c.n_heads, c.n_kv_heads, c.head_dim, plan.attention.scale);
  CudaTensorOps& ops = *m.ops;
  ops.set_attention(attn, sched);
  auto span_at = [&](size_t at, size_t n) { return std::span<const int32_t>(st.device<int32_t>(at), n); };
  const ForwardInputs in{span_at(o_tok, tokens.size()), span_at(o_pos, positions.size()), span_at(o_loc, loc.size()),
                         span_at(o_rows, rows.size()),  m.kv,  &plan.attention, plan.lora};
  ops.begin_pass();
  const float* logits = nullptr;
  if (graph) {
    // The split length follows the longest context, so a long-running server
    // meets new keys as contexts grow: past a bound, start the cache afresh
    // (a capture costs about one direct step).
    constexpr size_t kMaxGraphs = 64;
    const auto key = std::make_tuple(bucket, sched.n_splits, sched.chunk);
    if (m.graphs.size() >= kMaxGraphs && !m.graphs.count(key)) {
      for (auto& [k, old] : m.graphs) {
        if (old.exec) cudaGraphExecDestroy(old.exec);
      }
      m.graphs.clear();
    }
    Impl::Graph& g = m.graphs[key];
    if (!g.exec || g.generation != m.generation || g.ops_generation != ops.generation()) {
      if (g.exec) cudaGraphExecDestroy(g.exec);
      g.exec = nullptr;
      cudaGraph_t captured = nullptr;
      ACTORLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      ops.set_capturing(true);
      try {
        g.logits = m.model->forward(in).f32();
      } catch (...) {
        ops.set_capturing(false);
        cudaStreamEndCapture(s, &captured);  // leave the stream usable
        if (captured) cudaGraphDestroy(captured);
        captured = nullptr;
        try {
          throw;
        } catch (const ArenaFull&) {
          // This shape outgrew the scratch arena, which cannot move during a
          // capture: run the pass directly; the arena grows before the next.
          graph = false;
          ops.begin_pass();
        }
      }
      ops.set_capturing(false);
      if (graph) {
        ACTORLM_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
        cudaError_t err = cudaGraphInstantiate(&g.exec, captured, 0);
        cudaGraphDestroy(captured);
        ACTORLM_CUDA_CHECK(err);
        g.generation = m.generation;
        g.ops_generation = ops.generation();
        ++m.graph_captures;
      }
    }
    if (graph) {
      ACTORLM_CUDA_CHECK(cudaGraphLaunch(g.exec, s));
      ++m.graph_replays;
      logits = g.logits;
    }
  }
  if (!graph) logits = m.model->forward(in).f32();
  m.logits = logits;
  m.logit_rows = R;  // padding rows, if any, come after the real ones

  ForwardOutput out;
  out.vocab = c.vocab_size;
  out.device_rows = static_cast<size_t>(R);
  if (plan.host_logits) {
    out.logits.resize(static_cast<size_t>(R) * V);
    ACTORLM_CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), logits, out.logits.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost, s));
  }
  // The staging buffer is reused by the next step: the upload must be done.
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

std::vector<SampleResult> CudaExecutor::sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) {
  Impl& m = *impl_;
  ACTORLM_CUDA_CHECK(cudaSetDevice(m.device));
  const auto R = static_cast<int32_t>(reqs.size());
  if (R != m.logit_rows || static_cast<int32_t>(out.rows()) != R) {
    throw std::invalid_argument("CUDA sample: " + std::to_string(R) + " requests for " + std::to_string(m.logit_rows) +
                                " logits rows of the latest forward");
  }
  const int32_t V = m.cfg().vocab_size;
  std::vector<SampleRowParams> params;
  std::vector<HistoryEntry> history;
  for (const SampleRequest& q : reqs) params.push_back(plan_sample_row(q, V, history));
  Staging& st = m.sample_staging;
  st.reset();
  const size_t o_p = st.take(params.size() * sizeof(SampleRowParams));
  const size_t o_h = st.take(std::max<size_t>(history.size() * sizeof(HistoryEntry), 1));
  st.reserve_host();
  std::memcpy(st.host(o_p), params.data(), params.size() * sizeof(SampleRowParams));
  if (!history.empty()) std::memcpy(st.host(o_h), history.data(), history.size() * sizeof(HistoryEntry));
  st.upload(m.stream);
  m.sample_work.grow(static_cast<size_t>(R) * V);
  m.sample_tok.grow(static_cast<size_t>(R));
  m.sample_lp.grow(static_cast<size_t>(R));
  sample_rows(m.logits, V, R, st.device<SampleRowParams>(o_p), st.device<HistoryEntry>(o_h), m.sample_work.get(),
              m.sample_tok.get(), m.sample_lp.get(), m.stream);
  std::vector<int32_t> tok(static_cast<size_t>(R));
  std::vector<float> lp(static_cast<size_t>(R));
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(tok.data(), m.sample_tok.get(), tok.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  ACTORLM_CUDA_CHECK(cudaMemcpyAsync(lp.data(), m.sample_lp.get(), lp.size() * 4, cudaMemcpyDeviceToHost, m.stream));
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(m.stream));

  std::vector<SampleResult> results(static_cast<size_t>(R));
  for (int32_t r = 0; r < R; ++r) {
    const SampleRequest& q = reqs[static_cast<size_t>(r)];
    SampleResult& res = results[static_cast<size_t>(r)];
    if (tok[static_cast<size_t>(r)] < 0) throw std::domain_error("sampler: every logit is -inf or NaN");
    res.token = tok[static_cast<size_t>(r)];
    res.logprob = lp[static_cast<size_t>(r)];
    if (!q.params.logit_bias.empty() || !q.allowed.empty()) {
      // logit_bias and structured output are rare: such a row is sampled on
      // the host by the CPU sampler, which applies them (same counter-based
      // draws as the CPU backend), replacing the device's pick.
      std::vector<float> row(static_cast<size_t>(V));
      ACTORLM_CUDA_CHECK(cudaMemcpy(row.data(), m.logits + static_cast<int64_t>(r) * V, row.size() * 4,
                                    cudaMemcpyDeviceToHost));
      res = sample_token(row, q.params, q.prompt, q.output, q.step, q.top_n, q.allowed);
      continue;
    }
    if (q.top_n > 0) {
      // Alternatives are rare and small: the row comes to the host and the
      // CPU sampler ranks them (the token stays the device's pick).
      std::vector<float> row(static_cast<size_t>(V));
      ACTORLM_CUDA_CHECK(cudaMemcpy(row.data(), m.logits + static_cast<int64_t>(r) * V, row.size() * 4,
                                    cudaMemcpyDeviceToHost));
      SamplingParams greedy;
      greedy.temperature = 0.0f;
      res.top = sample_token(row, greedy, {}, {}, 0, q.top_n).top;
    }
  }
  return results;
}

}  // namespace actorlm::cuda
