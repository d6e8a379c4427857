// Every vocabulary family llama.cpp ships (its vocabulary-only GGUFs, which
// scripts/fetch_vocabularies.sh puts in the cache) tokenized as llama.cpp's
// llama-tokenize does, on a corpus of Unicode, whitespace runs, digits, code,
// emoji and special tokens (tests/fixtures/tokenizer/vocab_families.json,
// made by scripts/reference/tokenizer_families_fixture.py).

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;

namespace {

std::string vocab_dir() {
  if (const char* c = std::getenv("ACTORLM_CACHE"); c && *c) return std::string(c) + "/llama-vocab";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.cache/actorlm/llama-vocab";
}

std::string sha256_of(const std::string& path) {
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  REQUIRE(p);
  char buf[65] = {};
  const size_t n = fread(buf, 1, 64, p);
  pclose(p);
  return std::string(buf, n);
}

// Families whose files actorlm does not tokenize as llama.cpp does, and why.
// The test fails when this list is wrong either way.
const std::map<std::string, std::string> not_supported = {
    {"bert-bge", "WordPiece ('bert'): an embedding model's tokenizer, not a chat model's"},
    {"nomic-bert-moe", "Unigram ('t5'): an embedding model's tokenizer, not a chat model's"},
};

}  // namespace

TEST_CASE("Vocabulary families tokenize as llama.cpp's llama-tokenize does", "[tokenizer][families]") {
  std::ifstream in(test::fixture_path("tokenizer/vocab_families.json"));
  REQUIRE(in);
  const auto fx = nlohmann::json::parse(in);
  const auto& corpus = fx["corpus"];
  std::map<std::string, std::string> problems;
  int families = 0, identical_families = 0;
  for (const auto& [name, f] : fx["families"].items()) {
    ++families;
    const std::string path = vocab_dir() + "/" + f["file"].get<std::string>();
    INFO(name << ": " << path << " (scripts/fetch_vocabularies.sh fetches it)");
    REQUIRE(sha256_of(path) == f["sha256"].get<std::string>());
    if (f["ids"].is_null()) continue;  // llama.cpp refuses it too
    std::string problem;
    int same = 0;
    try {
      const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
      for (size_t i = 0; i < corpus.size(); ++i) {
        const std::string text = corpus[i];
        const auto got = tok.encode(text, tok.add_bos_by_default(), true);
        if (got == f["ids"][i].get<std::vector<int32_t>>()) {
          ++same;
        } else if (problem.empty()) {
          problem = "differs on " + nlohmann::json(text).dump() + ": want " + f["ids"][i].dump() + ", got " +
                    nlohmann::json(got).dump();
        }
      }
    } catch (const std::exception& e) {
      problem = std::string("refused: ") + e.what();
    }
    std::cout << "  " << name << ": " << same << " / " << corpus.size() << " identical\n";
    if (problem.empty()) {
      ++identical_families;
    } else {
      problems[name] = problem;
    }
  }
  std::cout << "vocabulary families: " << identical_families << " / " << families << " identical to llama.cpp\n";
  for (const auto& [name, p] : problems) {
    INFO(name << ": " << p);
    CHECK(not_supported.count(name) == 1);
  }
  for (const auto& [name, why] : not_supported) {
    INFO(name << " is listed as unsupported (" << why << ") but now matches llama.cpp");
    CHECK(problems.count(name) == 1);
  }
}
