#include "tokenizer/pre_tokenizer.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_paths.hpp"

using namespace actorlm;

// The hand-written split rules against the original regular expressions run
// by Python's `regex` package (scripts/reference/pretokenizer_fixture.py).
TEST_CASE("Split rules match the original regexes on 250+ strings", "[tokenizer]") {
  std::ifstream in(test::fixture_path("tokenizer/pretokenizer_regex.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  std::pair<const char*, PreTokenizer> kinds[] = {
      {"gpt2", PreTokenizer::gpt2}, {"llama3", PreTokenizer::llama3}, {"qwen2", PreTokenizer::qwen2}};
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    for (auto [name, kind] : kinds) {
      INFO(name << ": " << text);
      std::vector<std::string> got;
      for (auto piece : pre_tokenize(kind, text)) got.emplace_back(piece);
      CHECK(got == c[name].get<std::vector<std::string>>());
    }
  }
}

TEST_CASE("SmolLM splits every digit before the GPT-2 rules", "[tokenizer]") {
  std::vector<std::string> got;
  for (auto p : pre_tokenize(PreTokenizer::smollm, "ab 123 x4")) got.emplace_back(p);
  CHECK(got == std::vector<std::string>{"ab", " ", "1", "2", "3", " x", "4"});
  bool known = true;
  CHECK(pre_tokenizer_from_name("smollm", &known) == PreTokenizer::smollm);
  CHECK(known);
  pre_tokenizer_from_name("no-such-rules", &known);
  CHECK_FALSE(known);
}
