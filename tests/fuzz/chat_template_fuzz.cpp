// Fuzzes the chat template: recognising a template source, rendering
// arbitrary conversations in each format, and encoding them with the default
// model's tokenizer (loaded once; $ACTORLM_MODEL overrides the path).
// Contract under test: any roles and contents (any bytes) render without
// error, every message's content appears in the prompt (trimmed, for Llama 3),
// and the encoded prompt holds only ids inside the vocabulary.
//
// Input: byte 0 holds flags (bit 0: Llama 3, bit 1: a ChatML default system
// message, bit 2: add the generation prompt). The rest, split at NUL bytes,
// is role, content, role, content, ...; the whole input is also offered to
// ChatTemplate::from_source as a template.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/fuzz/default_vocabulary.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using namespace actorlm;

const Tokenizer& tokenizer() { return fuzz::default_tokenizer("chat_template_fuzz"); }

std::vector<ChatMessage> messages_of(std::string_view rest) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find('\0', start);
    if (end == std::string_view::npos) end = rest.size();
    fields.emplace_back(rest.substr(start, end - start));
    start = end + 1;
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) messages.push_back({fields[i], fields[i + 1]});
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string warning;
  auto recognised = ChatTemplate::from_source(std::string(all), &warning);
  if (recognised.format() == ChatTemplate::Format::chatml && recognised.default_system()) {
    if (recognised.default_system()->find_first_of("{}'\"") != std::string::npos) std::abort();
  }
  (void)ChatTemplate::from_name(all, &warning);

  const uint8_t flags = data[0];
  const bool llama3 = flags & 1;
  const bool generation_prompt = flags & 4;
  std::optional<std::string> system;
  if (!llama3 && (flags & 2)) system = "You are a helpful assistant.";
  ChatTemplate tmpl(llama3 ? ChatTemplate::Format::llama3 : ChatTemplate::Format::chatml, system);

  auto messages = messages_of(all.substr(1));
  std::string prompt = tmpl.render(messages, generation_prompt);
  for (const ChatMessage& m : messages) {
    if (prompt.find(m.role) == std::string::npos) std::abort();
    if (!llama3 && prompt.find(m.content) == std::string::npos) std::abort();
  }
  if (generation_prompt && prompt.find("assistant") == std::string::npos) std::abort();

  const Tokenizer& tok = tokenizer();
  for (int32_t id : tmpl.encode(tok, messages, generation_prompt)) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  }
  return 0;
}
