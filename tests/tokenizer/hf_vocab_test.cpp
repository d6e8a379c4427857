// tokenizer.json loading. No Hugging Face tokenizer file of the default model
// is available offline, so the tests write one from the GGUF's vocabulary in
// the structure SmolLM2's tokenizer.json has (and Llama 3 / Qwen2 style
// variants), and check that it tokenizes exactly as llama.cpp does on the
// GGUF. The SentencePiece case uses the trained fixture vocabulary.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/vocab.hpp"

using namespace actorlm;
using nlohmann::json;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

namespace {

json fixture(const std::string& name) {
  std::ifstream in(test::fixture_path("tokenizer/" + name));
  REQUIRE(in);
  return json::parse(in);
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("actorlm_hf_vocab_test_" + name);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(); }

const char* const llama3_regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const qwen2_regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// The default model's vocabulary as a tokenizer.json with the given
// pre_tokenizer, plus a tokenizer_config.json; returns the tokenizer.json path.
std::string write_smollm_json(const std::string& name, const json& pre_tokenizer, bool ignore_merges) {
  VocabData v = vocab_from_gguf(GgufFile::open(default_model_path()));
  json vocab = json::object(), added = json::array(), merges = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] == TokenType::control) {
      added.push_back({{"id", i}, {"content", v.tokens[i]}, {"special", true}, {"normalized", false}});
    } else {
      vocab[v.tokens[i]] = i;
    }
  }
  for (const auto& [l, r] : v.merges) merges.push_back(l + " " + r);
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", pre_tokenizer},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}},
            {"model",
             {{"type", "BPE"}, {"byte_fallback", false}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
  fs::path dir = temp_dir(name);
  write(dir / "tokenizer.json", j);
  write(dir / "tokenizer_config.json", {{"add_bos_token", false},
                                         {"bos_token", "<|im_start|>"},
                                         {"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
                                         {"chat_template", v.chat_template}});
  return (dir / "tokenizer.json").string();
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

}  // namespace

TEST_CASE("A SmolLM2-style tokenizer.json tokenizes as llama.cpp does on the GGUF", "[tokenizer][hf]") {
  json pre = {{"type", "Sequence"},
              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  Tokenizer t = Tokenizer::from_hf_json(write_smollm_json("smollm", pre, false));
  CHECK(t.warnings().empty());
  CHECK(t.pre_tokenizer() == PreTokenizer::smollm);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK_FALSE(t.add_bos_by_default());
  CHECK(t.chat_template().find("SmolLM") != std::string::npos);
  auto fx = fixture("smollm2_llamacpp.json");
  CHECK(t.end_of_generation_ids() == fx["eog_ids"].get<Ids>());
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(t.encode(text, false, true) == c["ids"].get<Ids>());
    CHECK(t.encode(text, false, false) == c["ids_plain"].get<Ids>());
  }
}

TEST_CASE("Llama 3 and Qwen2 Split regexes are recognised", "[tokenizer][hf]") {
  auto fx = fixture("smollm2_llamacpp.json");
  json l3 = {{"type", "Sequence"}, {"pretokenizers", {split(llama3_regex), byte_level(false)}}};
  json q2 = {{"type", "Sequence"}, {"pretokenizers", {split(qwen2_regex), byte_level(false)}}};
  Tokenizer llama3 = Tokenizer::from_hf_json(write_smollm_json("llama3", l3, true));
  Tokenizer qwen2 = Tokenizer::from_hf_json(write_smollm_json("qwen2", q2, false));
  CHECK(llama3.pre_tokenizer() == PreTokenizer::llama3);
  CHECK(qwen2.pre_tokenizer() == PreTokenizer::qwen2);
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(llama3.encode(text, false, true) == c["ids_llama3"].get<Ids>());
    CHECK(qwen2.encode(text, false, true) == c["ids_qwen2"].get<Ids>());
  }
}

TEST_CASE("A SentencePiece-style tokenizer.json (byte_fallback, merges) matches llama.cpp on the GGUF", "[tokenizer][hf][spm]") {
  Tokenizer t = Tokenizer::from_hf_json(test::fixture_path("tokenizer/spm_tiny/tokenizer.json"));
  CHECK(t.kind() == VocabData::Kind::spm);
  CHECK(t.add_bos_by_default());
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.chat_template().find("[INST]") != std::string::npos);
  auto fx = fixture("spm_tiny_llamacpp.json");
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(t.encode(text, true, true) == c["ids"].get<Ids>());
    CHECK(t.encode(text, true, false) == c["ids_plain"].get<Ids>());
  }
}

TEST_CASE("Bad tokenizer.json files give errors naming the file", "[tokenizer][hf]") {
  fs::path dir = temp_dir("bad");
  auto error_of = [](const std::string& path) -> std::string {
    try {
      Tokenizer::from_hf_json(path);
    } catch (const ModelError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(error_of((dir / "missing.json").string()).find("cannot open") != std::string::npos);
  std::ofstream(dir / "broken.json") << "{\"model\": ";
  CHECK(error_of((dir / "broken.json").string()).find("broken.json") != std::string::npos);
  write(dir / "wordpiece.json", {{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}});
  CHECK(error_of((dir / "wordpiece.json").string()).find("only BPE") != std::string::npos);
  write(dir / "negative.json",
        {{"model", {{"type", "BPE"}, {"vocab", {{"a", -3}}}, {"merges", json::array()}}}, {"decoder", byte_level(true)}});
  CHECK(error_of((dir / "negative.json").string()).find("out of range") != std::string::npos);
}
