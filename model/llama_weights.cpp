#include "model/llama_weights.hpp"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>

#include "model/architecture.hpp"
#include "model/gguf_file.hpp"
#include "model/safetensors_file.hpp"

namespace actorlm {
namespace fs = std::filesystem;

namespace {

// Rows of `row_size` elements (floats, or a quantized row's bytes).
template <typename T>
std::vector<T> permute_rows(const std::vector<T>& w, int64_t rows, int64_t row_size, int32_t n_heads) {
  if (n_heads <= 0 || rows <= 0 || row_size <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0 ||
      static_cast<int64_t>(w.size()) != rows * row_size) {
    throw ModelError("permute_rope_rows: " + std::to_string(rows) + " x " + std::to_string(row_size) +
                     " rows cannot be split into " + std::to_string(n_heads) + " heads of even size");
  }
  const int64_t head_dim = rows / n_heads;
  const int64_t half = head_dim / 2;
  std::vector<T> out(w.size());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t part = 0; part < 2; ++part) {
        int64_t src = h * head_dim + part * half + i;
        int64_t dst = h * head_dim + 2 * i + part;
        std::copy(w.begin() + src * row_size, w.begin() + (src + 1) * row_size, out.begin() + dst * row_size);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<float> permute_rope_rows(const std::vector<float>& w, int64_t rows, int64_t cols, int32_t n_heads) {
  return permute_rows(w, rows, cols, n_heads);
}

void permute_rope_rows(WeightMatrix& w, int32_t n_heads) {
  const size_t size = static_cast<size_t>(w.rows) * w.row_bytes();
  auto permuted = std::make_shared<const std::vector<uint8_t>>(
      permute_rows(std::vector<uint8_t>(w.bytes.get(), w.bytes.get() + size), w.rows,
                   static_cast<int64_t>(w.row_bytes()), n_heads));
  w.bytes = std::shared_ptr<const uint8_t>(permuted, permuted->data());
}

void WeightMatrix::dequantize_rows(int64_t begin, int64_t end, float* out) const {
  actorlm::dequantize_rows(type, row(begin), out, end - begin, cols);
}

std::vector<float> WeightMatrix::to_float() const {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  dequantize_rows(0, rows, out.data());
  return out;
}

WeightMatrix WeightMatrix::row_range(int64_t begin, int64_t n) const {
  if (begin < 0 || n < 0 || begin + n > rows) {
    throw ModelError("rows [" + std::to_string(begin) + ", " + std::to_string(begin + n) + ") of a " +
                     std::to_string(rows) + "-row matrix");
  }
  return {n, cols, type, std::shared_ptr<const uint8_t>(bytes, row(begin))};
}

WeightMatrix WeightMatrix::from_floats(int64_t rows, int64_t cols, const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != rows * cols) {
    throw ModelError("a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix cannot hold " +
                     std::to_string(values.size()) + " values");
  }
  auto copy = std::make_shared<const std::vector<float>>(values);
  return {rows, cols, GgmlType::F32,
          std::shared_ptr<const uint8_t>(copy, reinterpret_cast<const uint8_t*>(copy->data()))};
}

namespace {

// Counts tensors for the progress callback; total is known before the first.
class Progress {
 public:
  explicit Progress(const LoadProgress& cb) : cb_(cb) {}
  void set_total(int total) { total_ = total; }
  void tick() {
    if (cb_) cb_(++done_, total_);
  }

 private:
  const LoadProgress& cb_;
  int done_ = 0, total_ = 0;
};

int tensor_total(const ModelConfig& c) { return 2 + (c.tied_embeddings ? 0 : 1) + c.n_layers * (9 + (c.attention_bias ? 3 : 0)); }

// ---------------------------------------------------------------- GGUF
// Tensor names as llama.cpp writes them (blk.N.attn_q.weight, ...); shapes in
// ggml order, so [out][in] appears as {in, out}.
class GgufLoader {
 public:
  GgufLoader(const std::string& path, const LoadProgress& progress)
      : file_(GgufFile::open(path)), mapping_(file_.mapping()), progress_(progress) {}

  LlamaWeights load() {
    LlamaWeights w;
    w.file = file_.mapping();
    w.config = config_from_gguf(file_);
    const auto& c = w.config;
    for (const char* extra : {"blk.0.attn_output.bias", "blk.0.ffn_gate.bias", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"}) {
      if (file_.find_tensor(extra)) throw ModelError(file_.path() + ": tensor " + extra + " is not supported");
    }
    check_layer_count(c);
    check_token_count(c);
    describe_sizes(c);
    const bool freq_factors = file_.find_tensor("rope_freqs.weight") != nullptr;
    progress_.set_total(static_cast<int>(file_.tensors().size()));
    w.token_embedding = matrix("token_embd.weight", c.vocab_size, c.hidden, vocab_, hidden_);
    w.output_norm = vector("output_norm.weight", c.hidden, hidden_);
    if (!c.tied_embeddings) w.lm_head = matrix("output.weight", c.vocab_size, c.hidden, vocab_, hidden_);
    if (freq_factors) w.rope_freq_factors = vector("rope_freqs.weight", c.head_dim / 2, "head_dim / 2");
    // llama.cpp permutes Llama q/k at conversion but runs Qwen2, Qwen3,
    // Gemma and Phi-3 with NEOX rotation on unpermuted rows; bring those to
    // the adjacent-pair layout.
    const bool permute = find_architecture(c.architecture)->neox_rope;
    const std::string head_dim = "head_dim " + std::to_string(c.head_dim);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      LayerWeights L;
      L.attn_norm = vector(p + "attn_norm.weight", c.hidden, hidden_);
      if (file_.find_tensor(p + "attn_qkv.weight")) {
        WeightMatrix qkv = matrix(p + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.hidden,
                                  q_dim_ + " + 2 x " + kv_dim_, hidden_);
        L.wq = qkv.row_range(0, c.q_dim());
        L.wk = qkv.row_range(c.q_dim(), c.kv_dim());
        L.wv = qkv.row_range(c.q_dim() + c.kv_dim(), c.kv_dim());
      } else {
        L.wq = matrix(p + "attn_q.weight", c.q_dim(), c.hidden, q_dim_, hidden_);
        L.wk = matrix(p + "attn_k.weight", c.kv_dim(), c.hidden, kv_dim_, hidden_);
        L.wv = matrix(p + "attn_v.weight", c.kv_dim(), c.hidden, kv_dim_, hidden_);
      }
      L.wo = matrix(p + "attn_output.weight", c.hidden, c.q_dim(), hidden_, q_dim_);
      if (c.qk_norm) {
        L.q_norm = vector(p + "attn_q_norm.weight", c.head_dim, head_dim);
        L.k_norm = vector(p + "attn_k_norm.weight", c.head_dim, head_dim);
      }
      if (c.sandwich_norm) L.post_attn_norm = vector(p + "post_attention_norm.weight", c.hidden, hidden_);
      if (c.attention_bias) {
        L.bq = vector(p + "attn_q.bias", c.q_dim(), q_dim_);
        L.bk = vector(p + "attn_k.bias", c.kv_dim(), kv_dim_);
        L.bv = vector(p + "attn_v.bias", c.kv_dim(), kv_dim_);
      }
      if (permute) {
        permute_rope_rows(L.wq, c.n_heads);
        permute_rope_rows(L.wk, c.n_kv_heads);
        if (!L.bq.empty()) L.bq = permute_rope_rows(L.bq, c.q_dim(), 1, c.n_heads);
        if (!L.bk.empty()) L.bk = permute_rope_rows(L.bk, c.kv_dim(), 1, c.n_kv_heads);
        // A norm weight scales element i of every head: it follows the rows.
        if (!L.q_norm.empty()) L.q_norm = permute_rope_rows(L.q_norm, c.head_dim, 1, 1);
        if (!L.k_norm.empty()) L.k_norm = permute_rope_rows(L.k_norm, c.head_dim, 1, 1);
      }
      L.ffn_norm = vector(p + "ffn_norm.weight", c.hidden, hidden_);
      if (c.n_experts > 0) {
        const std::string experts = c.architecture + ".expert_count " + std::to_string(c.n_experts);
        const std::string expert_ffn = "expert width " + std::to_string(c.expert_ffn_hidden);
        L.router = matrix(p + "ffn_gate_inp.weight", c.n_experts, c.hidden, experts, hidden_);
        const WeightMatrix gate = stacked(p + "ffn_gate_exps.weight", c.n_experts, c.expert_ffn_hidden, c.hidden, experts,
                                          expert_ffn, hidden_);
        const WeightMatrix up = stacked(p + "ffn_up_exps.weight", c.n_experts, c.expert_ffn_hidden, c.hidden, experts,
                                        expert_ffn, hidden_);
        const WeightMatrix down = stacked(p + "ffn_down_exps.weight", c.n_experts, c.hidden, c.expert_ffn_hidden, experts,
                                          hidden_, expert_ffn);
        for (int64_t e = 0; e < c.n_experts; ++e) {
          L.experts.push_back({gate.row_range(e * c.expert_ffn_hidden, c.expert_ffn_hidden),
                               up.row_range(e * c.expert_ffn_hidden, c.expert_ffn_hidden),
                               down.row_range(e * c.hidden, c.hidden)});
        }
      } else if (!file_.find_tensor(p + "ffn_gate.weight") && file_.find_tensor(p + "ffn_up.weight")) {
        // Phi-3: one matrix, the gate's rows first.
        WeightMatrix gate_up = matrix(p + "ffn_up.weight", 2 * int64_t{c.ffn_hidden}, c.hidden, "2 x " + ffn_, hidden_);
        L.w_gate = gate_up.row_range(0, c.ffn_hidden);
        L.w_up = gate_up.row_range(c.ffn_hidden, c.ffn_hidden);
      } else {
        L.w_gate = matrix(p + "ffn_gate.weight", c.ffn_hidden, c.hidden, ffn_, hidden_);
        L.w_up = matrix(p + "ffn_up.weight", c.ffn_hidden, c.hidden, ffn_, hidden_);
      }
      if (c.n_experts == 0) L.w_down = matrix(p + "ffn_down.weight", c.hidden, c.ffn_hidden, hidden_, ffn_);
      if (c.sandwich_norm) L.post_ffn_norm = vector(p + "post_ffw_norm.weight", c.hidden, hidden_);
      w.layers.push_back(std::move(L));
    }
    check_all_used(c);
    return w;
  }

 private:
  // The layer of a "blk.N.*" tensor, -1 for any other name. Indices too long
  // to parse count as huge, so they fail the layer count check.
  static int64_t layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    name.remove_prefix(4);
    size_t digits = 0;
    while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
    if (digits == 0 || digits == name.size() || name[digits] != '.') return -1;
    if (digits > 9) return int64_t{1} << 40;
    return std::stoll(std::string(name.substr(0, digits)));
  }

  // block_count must match the blk.N tensors present: fewer would silently
  // run part of the model, more fails later on the first missing tensor
  // without saying why.
  void check_layer_count(const ModelConfig& c) const {
    if (file_.tensors().empty()) {
      throw ModelError(file_.path() + ": the file has no weights (a vocabulary-only GGUF: `actorlm tokenize` and "
                       "`actorlm template` read it, a model run needs the full file)");
    }
    int64_t layers = 0;
    for (const GgufTensorInfo& t : file_.tensors()) layers = std::max(layers, layer_of(t.name) + 1);
    if (layers != c.n_layers) {
      throw ModelError(file_.path() + ": " + c.architecture + ".block_count is " + std::to_string(c.n_layers) +
                       " but the file has blk.N tensors for " + std::to_string(layers) + " layers" +
                       (layers > 0 ? " (blk.0 to blk." + std::to_string(layers - 1) + ")" : ""));
    }
  }

  // A token id the tokenizer can produce must have an embedding row. (More
  // rows than tokens is fine: some models pad the embedding.)
  void check_token_count(const ModelConfig& c) const {
    auto tokens = file_.get_string_array("tokenizer.ggml.tokens");
    if (tokens && tokens->size() > static_cast<size_t>(c.vocab_size)) {
      throw ModelError(file_.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens->size()) +
                       " entries but the vocabulary size is " + std::to_string(c.vocab_size) + " (" +
                       c.architecture + ".vocab_size)");
    }
  }

  // Where each expected size comes from, for shape errors: a mismatch says
  // which metadata disagrees with the tensor.
  void describe_sizes(const ModelConfig& c) {
    const std::string a = c.architecture + ".";
    const std::string head_dim = "head_dim " + std::to_string(c.head_dim);
    hidden_ = a + "embedding_length " + std::to_string(c.hidden);
    ffn_ = a + "feed_forward_length " + std::to_string(c.ffn_hidden);
    q_dim_ = a + "attention.head_count " + std::to_string(c.n_heads) + " x " + head_dim;
    kv_dim_ = a + "attention.head_count_kv " + std::to_string(c.n_kv_heads) + " x " + head_dim;
    vocab_ = "vocabulary size " + std::to_string(c.vocab_size) + " (" +
             (file_.has_key(a + "vocab_size") ? a + "vocab_size" : std::string("tokenizer.ggml.tokens entries")) + ")";
  }

  // Every tensor in the file is part of the model: one the loader does not
  // read means the metadata describes a different model than the tensors.
  void check_all_used(const ModelConfig& c) const {
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (!used_.count(t.name)) {
        throw ModelError(file_.path() + ": tensor " + t.name + " is not used by a " + c.architecture + " model with " +
                         std::to_string(c.n_layers) + " layers (the metadata and the tensors disagree)");
      }
    }
  }

  // rows_from / cols_from: the metadata that sets each expected size.
  const GgufTensorInfo& get(const std::string& name, int64_t rows, int64_t cols, const std::string& rows_from,
                            const std::string& cols_from) {
    const GgufTensorInfo& t = file_.tensor(name);
    int64_t ne1 = t.shape.size() > 1 ? static_cast<int64_t>(t.shape[1]) : 1;
    if (static_cast<int64_t>(t.shape[0]) != cols || ne1 != rows || t.shape.size() > 2) {
      std::string got;
      for (uint64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw ModelError(file_.path() + ": tensor " + name + " has shape [" + got + "], expected [" +
                       std::to_string(cols) + (rows > 1 ? ", " + std::to_string(rows) : "") +
                       "] (ggml order) from " + cols_from + (rows_from.empty() ? "" : " and " + rows_from));
    }
    used_.insert(name);
    if (!ggml_type_supported(static_cast<uint32_t>(t.type))) {
      throw ModelError(file_.path() + ": tensor " + name + " has unsupported type " + ggml_type_name(t.type));
    }
    return t;
  }
  // An [n][rows][cols] tensor (ggml order {cols, rows, n}) as one matrix
  // of n * rows rows.
  WeightMatrix stacked(const std::string& name, int64_t n, int64_t rows, int64_t cols, const std::string& n_from,
                       const std::string& rows_from, const std::string& cols_from) {
    const GgufTensorInfo& t = file_.tensor(name);
    if (t.shape.size() != 3 || static_cast<int64_t>(t.shape[0]) != cols || static_cast<int64_t>(t.shape[1]) != rows ||
        static_cast<int64_t>(t.shape[2]) != n) {
      std::string got;
      for (uint64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw ModelError(file_.path() + ": tensor " + name + " has shape [" + got + "], expected [" + std::to_string(cols) +
                       ", " + std::to_string(rows) + ", " + std::to_string(n) + "] (ggml order) from " + cols_from + ", " +
                       rows_from + " and " + n_from);
    }
    used_.insert(name);
    if (!ggml_type_supported(static_cast<uint32_t>(t.type))) {
      throw ModelError(file_.path() + ": tensor " + name + " has unsupported type " + ggml_type_name(t.type));
    }
    progress_.tick();
    return {n * rows, cols, t.type, std::shared_ptr<const uint8_t>(mapping_, t.data)};
  }
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols, const std::string& rows_from,
                      const std::string& cols_from) {
    const GgufTensorInfo& t = get(name, rows, cols, rows_from, cols_from);
    // In place: the matrix shares the mapping (see the header).
    WeightMatrix m{rows, cols, t.type, std::shared_ptr<const uint8_t>(mapping_, t.data)};
    progress_.tick();
    return m;
  }
  std::vector<float> vector(const std::string& name, int64_t n, const std::string& n_from) {
    const GgufTensorInfo& t = get(name, 1, n, "", n_from);
    std::vector<float> v(static_cast<size_t>(n));
    dequantize_row(t.type, t.data, v.data(), n);
    progress_.tick();
    return v;
  }

  GgufFile file_;
  std::shared_ptr<const void> mapping_;
  Progress progress_;
  std::set<std::string, std::less<>> used_;  // tensors read so far
  std::string hidden_, ffn_, q_dim_, kv_dim_, vocab_;  // see describe_sizes
};

// ---------------------------------------------------------------- Hugging Face
// Tensor names as transformers writes them (model.layers.N.self_attn.q_proj.weight, ...).
class HfLoader {
 public:
  HfLoader(const std::string& dir, const LoadProgress& progress)
      : dir_(dir), checkpoint_(SafetensorsCheckpoint::open(dir)), progress_(progress) {}

  LlamaWeights load() {
    LlamaWeights w;
    w.config = config_from_hf_json((fs::path(dir_) / "config.json").string());
    auto& c = w.config;
    for (const char* extra : {"model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.gate_proj.bias",
                              "model.layers.0.mlp.up_proj.bias", "model.layers.0.mlp.down_proj.bias"}) {
      if (checkpoint_.find(extra)) throw ModelError(dir_ + ": tensor " + extra + " is not supported");
    }
    // Checkpoints saved with tied weights often omit lm_head whatever the config says.
    if (!checkpoint_.find("lm_head.weight")) c.tied_embeddings = true;
    progress_.set_total(tensor_total(c));
    w.token_embedding = matrix("model.embed_tokens.weight", c.vocab_size, c.hidden);
    w.output_norm = vector("model.norm.weight", c.hidden);
    if (!c.tied_embeddings) w.lm_head = matrix("lm_head.weight", c.vocab_size, c.hidden);
    for (int32_t l = 0; l < c.n_layers; ++l) {
      std::string p = "model.layers." + std::to_string(l) + ".";
      LayerWeights L;
      L.attn_norm = vector(p + "input_layernorm.weight", c.hidden);
      L.wq = matrix(p + "self_attn.q_proj.weight", c.q_dim(), c.hidden);
      L.wk = matrix(p + "self_attn.k_proj.weight", c.kv_dim(), c.hidden);
      L.wv = matrix(p + "self_attn.v_proj.weight", c.kv_dim(), c.hidden);
      L.wo = matrix(p + "self_attn.o_proj.weight", c.hidden, c.q_dim());
      // rotate_half order -> adjacent pairs (see the header).
      permute_rope_rows(L.wq, c.n_heads);
      permute_rope_rows(L.wk, c.n_kv_heads);
      if (c.attention_bias) {
        L.bq = permute_rope_rows(vector(p + "self_attn.q_proj.bias", c.q_dim()), c.q_dim(), 1, c.n_heads);
        L.bk = permute_rope_rows(vector(p + "self_attn.k_proj.bias", c.kv_dim()), c.kv_dim(), 1, c.n_kv_heads);
        L.bv = vector(p + "self_attn.v_proj.bias", c.kv_dim());
      }
      L.ffn_norm = vector(p + "post_attention_layernorm.weight", c.hidden);
      L.w_gate = matrix(p + "mlp.gate_proj.weight", c.ffn_hidden, c.hidden);
      L.w_up = matrix(p + "mlp.up_proj.weight", c.ffn_hidden, c.hidden);
      L.w_down = matrix(p + "mlp.down_proj.weight", c.hidden, c.ffn_hidden);
      w.layers.push_back(std::move(L));
    }
    return w;
  }

 private:
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    auto e = checkpoint_.find(name);
    if (!e) throw ModelError(dir_ + ": missing tensor " + name);
    if (e.tensor->shape != shape) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string out;
        for (int64_t d : s) out += (out.empty() ? "" : ", ") + std::to_string(d);
        return "[" + out + "]";
      };
      throw ModelError(e.file->path() + ": tensor " + name + " has shape " + str(e.tensor->shape) + ", expected " +
                       str(shape));
    }
    auto v = e.file->read_f32(*e.tensor);
    progress_.tick();
    return v;
  }
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    return WeightMatrix::from_floats(rows, cols, read(name, {rows, cols}));
  }
  std::vector<float> vector(const std::string& name, int64_t n) { return read(name, {n}); }

  std::string dir_;
  SafetensorsCheckpoint checkpoint_;
  Progress progress_;
};

}  // namespace

LlamaWeights load_llama_weights(const std::string& path, const LoadProgress& progress) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return HfLoader(path, progress).load();
  if (!fs::exists(path, ec)) throw ModelError(path + ": no such model file or folder");
  return GgufLoader(path, progress).load();
}

}  // namespace actorlm
