#include <algorithm>
#include <catch2/catch.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/vocab.hpp"

using namespace actorlm;

namespace {

std::string load_error(const std::string& name) {
  try {
    Tokenizer::from_gguf(GgufFile::open(test::fixture_path("tokenizer/" + name)));
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("The default model's vocabulary metadata is read as llama.cpp reads it", "[tokenizer][gguf]") {
  VocabData v = vocab_from_gguf(GgufFile::open(default_model_path()));
  CHECK(v.kind == VocabData::Kind::byte_bpe);
  CHECK(v.pre == PreTokenizer::smollm);
  CHECK(v.tokens.size() == 49152);
  CHECK(v.merges.size() == 48900);
  const std::string first_merge = v.merges[0].first + v.merges[0].second;
  CHECK(std::find(v.tokens.begin(), v.tokens.end(), first_merge) != v.tokens.end());
  CHECK_FALSE(v.add_bos);
  CHECK_FALSE(v.ignore_merges);
  CHECK(v.bos == 1);
  CHECK(v.eos == 2);
  CHECK(v.chat_template.find("<|im_start|>") != std::string::npos);
  CHECK(v.warnings.empty());
}

TEST_CASE("SentencePiece GGUF defaults: space prefix and BOS on", "[tokenizer][gguf]") {
  VocabData v = vocab_from_gguf(GgufFile::open(test::fixture_path("tokenizer/spm_tiny.gguf")));
  CHECK(v.kind == VocabData::Kind::spm);
  CHECK(v.add_space_prefix);  // not in the file: llama.cpp's default for "llama"
  CHECK(v.add_bos);
  CHECK(v.merges.empty());
  CHECK(v.scores.size() == v.tokens.size());
}

TEST_CASE("Broken vocabularies give errors naming the file and the key", "[tokenizer][gguf]") {
  std::string e = load_error("bad_model.gguf");
  CHECK(e.find("bad_model.gguf") != std::string::npos);
  CHECK(e.find("'bert'") != std::string::npos);
  CHECK(load_error("bad_no_scores.gguf").find("tokenizer.ggml.scores") != std::string::npos);
  CHECK(load_error("bad_types_length.gguf").find("tokenizer.ggml.token_type has 10 entries") != std::string::npos);
  CHECK(load_error("bad_no_tokens.gguf").find("tokenizer.ggml.tokens") != std::string::npos);
  CHECK(load_error("bad_gpt2_no_merges.gguf").find("tokenizer.ggml.merges") != std::string::npos);
}

TEST_CASE("A special id outside the vocabulary is dropped with a warning", "[tokenizer][gguf]") {
  Tokenizer t = Tokenizer::from_gguf(GgufFile::open(test::fixture_path("tokenizer/bad_bos_range.gguf")));
  CHECK(t.bos_id() == 1);  // the SentencePiece default stays
  REQUIRE_FALSE(t.warnings().empty());
  CHECK(t.warnings()[0].find("tokenizer.ggml.bos_token_id = 100000") != std::string::npos);
}

TEST_CASE("Merge entries split at the first space after the first character", "[tokenizer][gguf]") {
  std::pair<std::string, std::string> m;
  REQUIRE(split_merge("a b", &m));
  CHECK(m == std::pair<std::string, std::string>{"a", "b"});
  REQUIRE(split_merge("  x", &m));  // a left side that is itself a space
  CHECK(m == std::pair<std::string, std::string>{" ", "x"});
  CHECK_FALSE(split_merge("ab", &m));
}
