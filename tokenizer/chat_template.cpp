#include "tokenizer/chat_template.hpp"

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

ChatTemplate::ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token)
    : template_(std::make_shared<const jinja::Template>(source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

std::string_view ChatTemplate::chatml_source() {
  return "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
         "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

ChatTemplate ChatTemplate::for_model(const Tokenizer& tokenizer, std::string* warning,
                                     std::string_view source_override) {
  if (warning) warning->clear();
  auto text_of = [&](std::optional<int32_t> id) { return id ? tokenizer.token_text(*id) : std::string(); };
  std::string_view source = source_override.empty() ? std::string_view(tokenizer.chat_template()) : source_override;
  if (source.empty()) {
    if (warning) *warning = "the model has no chat template; using ChatML";
    source = chatml_source();
  }
  return ChatTemplate(source, text_of(tokenizer.bos_id()), text_of(tokenizer.eos_id()));
}

nlohmann::ordered_json messages_json(std::span<const ChatMessage> messages) {
  auto out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
      auto calls = nlohmann::ordered_json::parse(m.tool_calls, nullptr, false);
      if (calls.is_array()) {
        // Hugging Face templates read arguments as a mapping (`| tojson`,
        // `.items()`); OpenAI sends them as a JSON string.
        for (auto& c : calls) {
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
          auto& f = c["function"];
          if (f.contains("arguments") && f["arguments"].is_string()) {
            auto args = nlohmann::ordered_json::parse(f["arguments"].get<std::string>(), nullptr, false);
            if (!args.is_discarded()) f["arguments"] = std::move(args);
          }
        }
        j["tool_calls"] = std::move(calls);
      }
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<PromptSegment> ChatTemplate::render_segments(const nlohmann::ordered_json& messages,
                                                         const ChatRenderOptions& options) const {
  using jinja::Value;
  jinja::Dict vars;
  // Everything the request brought is client text; only the model's own
  // token texts are markup.
  vars.set("messages", Value::from_json(messages, true));
  vars.set("tools", options.tools.is_null() ? Value(jinja::None{}) : Value::from_json(options.tools, true));
  vars.set("add_generation_prompt", Value(options.add_generation_prompt));
  vars.set("bos_token", Value::markup(bos_));
  vars.set("eos_token", Value::markup(eos_));
  if (options.extra.is_object()) {
    for (const auto& [k, v] : options.extra.items()) vars.set(k, Value::from_json(v, true));
  }
  const jinja::Text text =
      template_->render(vars, {}, options.clock ? options.clock : jinja::Clock(jinja::strftime_local));
  std::vector<PromptSegment> out;
  const std::string& s = text.str();
  size_t at = 0;
  for (const auto& [b, e] : text.client_ranges()) {
    if (b > at) out.push_back({s.substr(at, b - at), true});
    out.push_back({s.substr(b, e - b), options.special_tokens_in_content});
    at = e;
  }
  if (at < s.size()) out.push_back({s.substr(at), true});
  return out;
}

std::vector<PromptSegment> ChatTemplate::render_segments(std::span<const ChatMessage> messages,
                                                         const ChatRenderOptions& options) const {
  return render_segments(messages_json(messages), options);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, const ChatRenderOptions& options) const {
  std::string out;
  for (const PromptSegment& s : render_segments(messages, options)) out += s.text;
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          const ChatRenderOptions& options) const {
  std::vector<int32_t> ids = tokenizer.encode(render_segments(messages, options), false);
  auto bos = tokenizer.bos_id();
  if (tokenizer.add_bos_by_default() && bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

}  // namespace actorlm
