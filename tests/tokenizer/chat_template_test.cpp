#include "tokenizer/chat_template.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const Tokenizer& smollm() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

nlohmann::json fixture() {
  std::ifstream in(test::fixture_path("tokenizer/chat_template.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& c) {
  std::vector<ChatMessage> out;
  for (const auto& m : c["messages"]) out.push_back({m["role"], m["content"]});
  return out;
}

}  // namespace

TEST_CASE("SmolLM2's template is ChatML with the template's own default system prompt", "[tokenizer][chat]") {
  std::string warning = "stale";
  ChatTemplate tpl = ChatTemplate::from_source(smollm().chat_template(), &warning);
  CHECK(warning.empty());
  CHECK(tpl.format() == ChatTemplate::Format::chatml);
  REQUIRE(tpl.default_system());
  CHECK(*tpl.default_system() == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST_CASE("Prompts equal the Jinja rendering of the model's template (llama-cpp-python's formatter)", "[tokenizer][chat]") {
  auto fx = fixture();
  size_t checked = 0;
  for (const auto& c : fx["cases"]) {
    const std::string name = c["template"];
    INFO(name << ": " << c["messages"].dump() << " gen=" << c["add_generation_prompt"]);
    std::string warning;
    ChatTemplate tpl = ChatTemplate::from_source(fx["templates"][name], &warning);
    CHECK(warning.empty());
    CHECK(tpl.name() == (name == "llama3" ? "llama3" : "chatml"));
    auto messages = messages_of(c);
    const bool gen = c["add_generation_prompt"];
    std::string rendered = tpl.render(messages, gen);
    CHECK(rendered == c["rendered"].get<std::string>());
    if (c.contains("ids")) {
      CHECK(smollm().encode(rendered, false, true) == c["ids"].get<Ids>());
      CHECK(tpl.encode(smollm(), messages, gen) == c["ids"].get<Ids>());
    }
    ++checked;
  }
  CHECK(checked >= 20);
}

TEST_CASE("llama.cpp's built-in renderer differs only where its docs say it does", "[tokenizer][chat]") {
  // llama_chat_apply_template renders plain ChatML (no default system
  // prompt) and Llama 3 without <|begin_of_text|> (llama.cpp adds BOS while
  // tokenizing).
  auto fx = fixture();
  // Counted so a fixture that lost its llama.cpp renderings cannot pass empty.
  size_t compared_chatml = 0, compared_llama3 = 0;
  for (const auto& c : fx["cases"]) {
    if (c["llamacpp_builtin"].is_null()) continue;
    INFO(c["template"].get<std::string>() << ": " << c["messages"].dump());
    auto messages = messages_of(c);
    const bool gen = c["add_generation_prompt"];
    const std::string builtin = c["llamacpp_builtin"];
    if (c["template"] == "llama3") {
      CHECK("<|begin_of_text|>" + builtin == ChatTemplate(ChatTemplate::Format::llama3).render(messages, gen));
      ++compared_llama3;
    } else {
      CHECK(builtin == ChatTemplate(ChatTemplate::Format::chatml).render(messages, gen));
      ++compared_chatml;
    }
  }
  CHECK(compared_chatml >= 9);
  CHECK(compared_llama3 >= 9);
}

TEST_CASE("A name overrides the model's template, unknown names and templates fall back to ChatML", "[tokenizer][chat]") {
  std::string warning;
  ChatTemplate l3 = ChatTemplate::choose(smollm().chat_template(), "llama3", &warning);
  CHECK(warning.empty());
  CHECK(l3.format() == ChatTemplate::Format::llama3);
  CHECK(l3.end_of_turn() == "<|eot_id|>");
  ChatTemplate own = ChatTemplate::choose(smollm().chat_template(), "", &warning);
  CHECK(own.default_system());

  ChatTemplate bad_name = ChatTemplate::from_name("vicuna", &warning);
  CHECK(bad_name.format() == ChatTemplate::Format::chatml);
  CHECK(warning.find("'vicuna'") != std::string::npos);

  ChatTemplate unknown = ChatTemplate::from_source("{% for m in messages %}[INST] {{ m.content }}{% endfor %}", &warning);
  CHECK(unknown.format() == ChatTemplate::Format::chatml);
  CHECK_FALSE(unknown.default_system());
  CHECK(warning.find("unrecognised") != std::string::npos);
  ChatTemplate none = ChatTemplate::from_source("", &warning);
  CHECK(warning.find("no chat template") != std::string::npos);
  CHECK(none.end_of_turn() == "<|im_end|>");
}

TEST_CASE("A default system prompt written with Jinja expressions is not taken literally", "[tokenizer][chat]") {
  std::string tpl =
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}{% endif %}";
  ChatTemplate t = ChatTemplate::from_source(tpl, nullptr);
  CHECK(t.format() == ChatTemplate::Format::chatml);
  CHECK_FALSE(t.default_system());
}

TEST_CASE("Encoding a chat never doubles BOS", "[tokenizer][chat]") {
  // A byte-level vocabulary that, like Llama 3's, adds BOS by default.
  VocabData d;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(unicode::encode_utf8(unicode::byte_to_char(static_cast<uint8_t>(b))));
  d.types.assign(256, TokenType::normal);
  for (const char* s : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(s);
    d.types.push_back(TokenType::control);
  }
  d.merges = {{d.tokens['a'], d.tokens['b']}};
  d.bos = 256;
  d.add_bos = true;
  Tokenizer tok(std::move(d));
  std::vector<ChatMessage> m{{"user", "hi"}};
  Ids l3 = ChatTemplate(ChatTemplate::Format::llama3).encode(tok, m, true);
  REQUIRE(l3.size() > 2);
  CHECK(l3[0] == 256);
  CHECK(l3[1] == 257);  // <|start_header_id|>, not a second BOS
  Ids chatml = ChatTemplate(ChatTemplate::Format::chatml).encode(tok, m, true);
  CHECK(chatml[0] == 256);  // ChatML has no BOS of its own: the tokenizer's goes first
  CHECK(chatml[1] == 260);  // <|im_start|>
}
