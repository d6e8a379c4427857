// Defect 17: a GGUF whose metadata disagrees with its tensors must not load.
// Every mismatch (block_count vs the blk.N tensors, head counts vs q/k/v
// shapes, vocabulary size vs token_embd rows, missing or unused tensors) is
// a ModelError that names the file and the metadata involved.

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "model/gguf_file.hpp"
#include "model/llama_weights.hpp"
#include "tests/model/tiny_llama_gguf.hpp"

using namespace actorlm;
using test::TinyLlamaGguf;
namespace fs = std::filesystem;

namespace {

std::string write(const TinyLlamaGguf& model, const std::string& name) {
  auto path = (fs::temp_directory_path() / ("actorlm_consistency_" + name + ".gguf")).string();
  return model.builder().write(path);
}

// The error loading `model` gives, "" when it loads.
std::string load_error(const TinyLlamaGguf& model, const std::string& name, std::string* path = nullptr) {
  std::string p = write(model, name);
  if (path) *path = p;
  try {
    load_llama_weights(p);
  } catch (const ModelError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("The tiny GGUF whose metadata matches its tensors loads", "[model][weights]") {
  TinyLlamaGguf model;
  auto w = load_llama_weights(write(model, "ok"));
  CHECK(w.config.n_layers == 2);
  CHECK(w.layers.size() == 2);
  CHECK(w.config.vocab_size == 40);
  model.tied = false;
  CHECK(load_error(model, "untied").empty());
}

TEST_CASE("block_count smaller or larger than the layers present is refused", "[model][weights]") {
  TinyLlamaGguf fewer;
  fewer.block_count = 1;  // two layers present: the second would be skipped silently
  std::string path;
  std::string e = load_error(fewer, "fewer", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": "));
  CHECK_THAT(e, Catch::Contains("llama.block_count is 1") && Catch::Contains("2 layers"));

  TinyLlamaGguf more;
  more.block_count = 3;
  e = load_error(more, "more", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": "));
  CHECK_THAT(e, Catch::Contains("llama.block_count is 3") && Catch::Contains("2 layers"));

  TinyLlamaGguf stray;  // a tensor of layer 7 in a two-layer file
  stray.extra_tensors = {"blk.7.attn_norm.weight"};
  CHECK_THAT(load_error(stray, "stray"), Catch::Contains("llama.block_count is 2") && Catch::Contains("8 layers"));
}

TEST_CASE("Head counts that disagree with q/k/v shapes are refused, naming the metadata", "[model][weights]") {
  TinyLlamaGguf kv;
  kv.n_kv_heads = 1;  // k/v hold two heads of 4
  std::string path;
  std::string e = load_error(kv, "kv_heads", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": "));
  CHECK_THAT(e, Catch::Contains("blk.0.attn_k.weight") && Catch::Contains("llama.attention.head_count_kv 1"));

  TinyLlamaGguf q;
  q.q_rows = 32;  // four heads of 8 in the tensors, of 4 in the metadata
  e = load_error(q, "q_heads", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": "));
  CHECK_THAT(e, Catch::Contains("blk.0.attn_q.weight") && Catch::Contains("llama.attention.head_count 4"));
}

TEST_CASE("A vocabulary size that disagrees with token_embd rows is refused", "[model][weights]") {
  TinyLlamaGguf more_rows;
  more_rows.embd_rows = 41;
  std::string path;
  std::string e = load_error(more_rows, "embd_rows", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": "));
  CHECK_THAT(e, Catch::Contains("token_embd.weight") && Catch::Contains("vocabulary size 40"));

  TinyLlamaGguf fewer_rows;
  fewer_rows.embd_rows = 39;
  fewer_rows.tied = false;
  CHECK_THAT(load_error(fewer_rows, "embd_rows_untied"),
             Catch::Contains("token_embd.weight") && Catch::Contains("vocabulary size 40"));
}

TEST_CASE("Missing and unused tensors are refused by name", "[model][weights]") {
  TinyLlamaGguf missing;
  missing.skip_tensors = {"blk.1.ffn_up.weight"};
  std::string path;
  std::string e = load_error(missing, "missing", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": ") && Catch::Contains("blk.1.ffn_up.weight"));

  TinyLlamaGguf unused;
  unused.extra_tensors = {"blk.1.attn_rot_embd.weight"};
  e = load_error(unused, "unused", &path);
  CHECK_THAT(e, Catch::StartsWith(path + ": ") && Catch::Contains("blk.1.attn_rot_embd.weight") &&
                    Catch::Contains("not used"));

  TinyLlamaGguf outside;
  outside.extra_tensors = {"pos_embd.weight"};
  CHECK_THAT(load_error(outside, "outside"), Catch::Contains("pos_embd.weight") && Catch::Contains("not used"));
}
