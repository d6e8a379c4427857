// Fuzzes chat templates: the Jinja engine on arbitrary template sources, and
// ChatML rendering and encoding of arbitrary conversations with the default
// model's tokenizer (loaded once; $ACTORLM_MODEL overrides the path).
// Contract under test: any template source either parses or fails with
// jinja::Error, and renders within its limits or fails with jinja::Error (no
// other exception, no crash, no hang); any roles and contents (any bytes)
// render through ChatML with every content in the prompt, marked as client
// text, and encode to ids inside the vocabulary.
//
// Input: byte 0 holds flags (bit 0: add the generation prompt). The rest, up
// to the first NUL, is a template source; what follows, split at NUL bytes,
// is role, content, role, content, ...

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/template.hpp"
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

std::string fixed_clock(const std::string&) { return "02 Jan 2026"; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const bool generation_prompt = data[0] & 1;
  const size_t nul = all.find('\0', 1);
  const std::string_view source = all.substr(1, nul == std::string_view::npos ? std::string_view::npos : nul - 1);
  const auto messages = messages_of(nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1));

  // Small limits keep each run short; the engine must stop itself.
  jinja::Limits limits;
  limits.max_work = 200'000;
  limits.max_output = 64 << 10;
  try {
    jinja::Template t(source);
    jinja::Dict vars;
    vars.set("messages", jinja::Value::from_json(messages_json(messages), true));
    vars.set("add_generation_prompt", jinja::Value(generation_prompt));
    vars.set("bos_token", jinja::Value::markup("<s>"));
    const jinja::Text out = t.render(vars, limits, fixed_clock);
    if (out.size() > limits.max_output) std::abort();
    size_t last = 0;
    for (const auto& [b, e] : out.client_ranges()) {
      if (b < last || e <= b || e > out.size()) std::abort();
      last = e;
    }
  } catch (const jinja::Error&) {
  }

  ChatTemplate chatml(ChatTemplate::chatml_source(), "", "");
  const auto segments = chatml.render_segments(messages, {.add_generation_prompt = generation_prompt});
  std::string prompt;
  for (const PromptSegment& s : segments) prompt += s.text;
  for (const ChatMessage& m : messages) {
    if (prompt.find(m.role) == std::string::npos || prompt.find(m.content) == std::string::npos) std::abort();
  }
  // Client text is exactly the roles and contents: the markup alone is what
  // ChatML prints for the same conversation with every field empty.
  std::string markup, blank_prompt;
  for (const PromptSegment& s : segments) {
    if (s.parse_special) markup += s.text;
  }
  std::vector<ChatMessage> blank(messages.size());
  for (const PromptSegment& s : chatml.render_segments(blank, {.add_generation_prompt = generation_prompt})) {
    blank_prompt += s.text;
  }
  if (markup != blank_prompt) std::abort();
  const Tokenizer& tok = tokenizer();
  for (int32_t id : chatml.encode(tok, messages, {.add_generation_prompt = generation_prompt})) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  }
  return 0;
}
