#include "tokenizer/chat_template.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;

TEST_CASE("SmolLM2's template renders as Jinja2 renders the model's own template", "[tokenizer][chat]") {
  GgufFile f = GgufFile::open(default_model_path());
  Tokenizer tok = Tokenizer::from_gguf(f);
  std::string warning;
  ChatTemplate tpl = ChatTemplate::from_source(tok.chat_template(), &warning);
  CHECK(warning.empty());
  CHECK(tpl.format() == ChatTemplate::Format::chatml);
  REQUIRE(tpl.default_system());
  CHECK(*tpl.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");

  std::ifstream in(test::fixture_path("tokenizer/chat_template.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  for (const auto& c : fx["cases"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    std::string rendered = tpl.render(messages, c["add_generation_prompt"]);
    CHECK(rendered == c["rendered"].get<std::string>());
    CHECK(tok.encode(rendered, false, true) == c["ids"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("Llama 3 templates are recognised and unknown ones fall back with a warning", "[tokenizer][chat]") {
  std::string warning;
  auto l3 = ChatTemplate::from_source("{{ '<|start_header_id|>' + message['role'] }}", &warning);
  CHECK(warning.empty());
  REQUIRE(l3.format() == ChatTemplate::Format::llama3);
  std::vector<ChatMessage> m{{"system", "Be brief. "}, {"user", "Hi"}};
  CHECK(l3.render(m, true) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(l3.end_of_turn() == "<|eot_id|>");

  auto unknown = ChatTemplate::from_source("{% for m in messages %}[INST] {{ m.content }}{% endfor %}", &warning);
  CHECK(unknown.format() == ChatTemplate::Format::chatml);
  CHECK_FALSE(warning.empty());
}
