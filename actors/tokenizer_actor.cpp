#include "actors/tokenizer_actor.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <variant>

#include "actors/stream_messages.hpp"
#include "actors/wire.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tool_calls.hpp"

namespace actorlm {
namespace {

// chat_template_kwargs as template variables: a JSON object of at most 64
// variables and 4,096 keys in all, nested at most 16 deep, that does not
// replace the conversation itself. Else why not. (Parsed as nlohmann::json
// and bounded before the copy to ordered_json, which looks keys up linearly:
// quadratic on a hostile object.)
std::variant<nlohmann::ordered_json, std::string> template_kwargs(const std::string& text) {
  constexpr int max_depth = 16;
  constexpr size_t max_variables = 64, max_keys = 4096;
  nlohmann::json j;
  try {
    size_t keys = 0;
    j = nlohmann::json::parse(text, [&keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
      if (depth > max_depth) throw std::invalid_argument("nested deeper than 16");
      if (event == nlohmann::json::parse_event_t::key && ++keys > max_keys) {
        throw std::invalid_argument("more than 4096 keys");
      }
      return true;
    });
  } catch (const std::exception& e) {
    return std::string("chat_template_kwargs is not usable JSON: ") + e.what();
  }
  if (!j.is_object()) return std::string("chat_template_kwargs must be a JSON object");
  if (j.size() > max_variables) return std::string("chat_template_kwargs has more than 64 variables");
  for (const char* reserved : {"messages", "bos_token", "eos_token"}) {
    if (j.contains(reserved)) return std::string("chat_template_kwargs may not set '") + reserved + "'";
  }
  return nlohmann::ordered_json(j);
}

struct TokenizerState {
  std::shared_ptr<const Tokenizer> tok;
  // Null when the model's template cannot be used (chat_error says why):
  // chat requests are then refused, text and token requests still served.
  std::shared_ptr<const ChatTemplate> chat;
  std::string chat_error;
  caf::actor scheduler, detokenizer;
  bool special_tokens_in_content = false;
  ToolFormat tool_format = ToolFormat::generic;
  std::shared_ptr<ConstraintCompiler> constraints;
  static inline const char* name = "actorlm.tokenizer";
};

caf::behavior tokenizer_actor(caf::stateful_actor<TokenizerState>* self, std::shared_ptr<const Tokenizer> tok,
                              caf::actor scheduler, caf::actor detokenizer, bool special_tokens_in_content,
                              const std::string& chat_template, std::shared_ptr<ConstraintCompiler> constraints) {
  auto& s = self->state;
  s.tok = std::move(tok);
  s.constraints = std::move(constraints);
  try {
    s.chat = std::make_shared<const ChatTemplate>(ChatTemplate::for_model(*s.tok, nullptr, chat_template));
  } catch (const jinja::Error& e) {
    s.chat_error = std::string("engine failure: the chat template cannot be used: ") + e.what();
  }
  s.tool_format = tool_format_for(*s.tok, chat_template);
  s.scheduler = std::move(scheduler);
  s.detokenizer = std::move(detokenizer);
  s.special_tokens_in_content = special_tokens_in_content;
  return {[self](generate_atom, const WireMessage& in, const caf::actor& client) {
    auto& s = self->state;
    auto opened = msg::open<fb::GenerateRequest>(in.bytes);
    if (!opened) {
      self->send(client, WireMessage{error_delta(0, ErrorKind::invalid_request, "rejected request: " + opened.error)});
      return;
    }
    const fb::GenerateRequest& g = *opened.message;
    fb::TokenizedRequestT t;
    t.request_id = g.request_id();
    std::vector<int32_t> end_ids;
    if (g.input_ids() && g.input_ids()->size() > 0) {
      // Ids outside the vocabulary are refused by Scheduler::refusal.
      t.input_ids.assign(g.input_ids()->begin(), g.input_ids()->end());
    } else if (g.messages() && g.messages()->size() > 0) {
      if (!s.chat) {
        self->send(client, WireMessage{error_delta(g.request_id(), ErrorKind::internal, s.chat_error)});
        return;
      }
      std::vector<ChatMessage> messages;
      for (const fb::ChatMessage* m : *g.messages()) {
        auto str = [](const flatbuffers::String* x) { return x ? x->str() : std::string(); };
        messages.push_back({str(m->role()), str(m->content()), str(m->tool_calls()), str(m->tool_call_id())});
      }
      ChatRenderOptions options{.special_tokens_in_content = s.special_tokens_in_content};
      if (g.tools() && g.tools()->size() > 0) {
        auto tools = nlohmann::ordered_json::parse(g.tools()->str(), nullptr, false);
        if (!tools.is_array()) {
          self->send(client, WireMessage{error_delta(g.request_id(), ErrorKind::invalid_request, "tools must be a JSON list")});
          return;
        }
        if (s.tool_format != ToolFormat::generic) {
          options.tools = std::move(tools);
        } else if (!messages.empty() && messages.front().role == "system") {
          // The template has no place for tools: they go in the system turn.
          messages.front().content += "\n\n" + tool_system_prompt(tools);
        } else {
          messages.insert(messages.begin(), ChatMessage{"system", tool_system_prompt(tools)});
        }
      }
      if (g.template_kwargs() && g.template_kwargs()->size() > 0) {
        auto kwargs = template_kwargs(g.template_kwargs()->str());
        if (const auto* err = std::get_if<std::string>(&kwargs)) {
          self->send(client, WireMessage{error_delta(g.request_id(), ErrorKind::invalid_request, *err)});
          return;
        }
        options.extra = std::move(std::get<nlohmann::ordered_json>(kwargs));
      }
      try {
        t.input_ids = s.chat->encode(*s.tok, messages, options);
      } catch (const jinja::Error& e) {
        // The template refused the conversation (raise_exception) or ran
        // past its limits: the request's fault, said in the template's words.
        self->send(client, WireMessage{error_delta(g.request_id(), ErrorKind::invalid_request, std::string("chat template: ") + e.what())});
        return;
      }
      // A chat ends at any end-of-generation token (end of turn, EOS...).
      end_ids = s.tok->end_of_generation_ids();
    } else {
      std::string text = g.text() ? g.text()->str() : "";
      t.input_ids = s.tok->encode(text, s.tok->add_bos_by_default(), false);
    }
    t.sampling = std::make_unique<fb::SamplingParamsT>();
    if (g.sampling()) g.sampling()->UnPackTo(t.sampling.get());
    t.stop = std::make_unique<fb::StopConditionsT>();
    if (g.stop()) g.stop()->UnPackTo(t.stop.get());
    t.stop->stop_token_ids.insert(t.stop->stop_token_ids.end(), end_ids.begin(), end_ids.end());
    t.logprobs = g.logprobs();
    t.top_logprobs = g.top_logprobs();
    t.prompt_logprobs = g.prompt_logprobs();
    t.priority = g.priority();
    t.adapter = g.adapter();
    t.tenant = g.tenant();
    t.tenant_weight = g.tenant_weight();
    t.tenant_kv_quota = g.tenant_kv_quota();
    t.adapter_scale = g.adapter_scale();
    if (g.stacked_adapters()) t.stacked_adapters.assign(g.stacked_adapters()->begin(), g.stacked_adapters()->end());
    if (g.stacked_scales()) t.stacked_scales.assign(g.stacked_scales()->begin(), g.stacked_scales()->end());
    t.max_draft_tokens = g.max_draft_tokens();
    // Drafts continue the output: no BOS, and special tokens' text read as
    // plain text, as a completion prompt's is.
    if (g.prediction() && g.prediction()->size() > 0) {
      t.prediction = s.tok->encode(g.prediction()->str(), false, false);
    }
    if (g.constraint()) {
      t.constraint = std::make_unique<fb::ConstraintT>();
      g.constraint()->UnPackTo(t.constraint.get());
      const fb::ConstraintT& c = *t.constraint;
      if (s.constraints && c.kind > 0 && c.kind <= static_cast<uint8_t>(ConstraintKind::ebnf)) {
        try {
          s.constraints->prepare({static_cast<ConstraintKind>(c.kind), c.text, c.prefix, c.suffix});
        } catch (const ConstraintError& e) {
          self->send(client, WireMessage{error_delta(g.request_id(), ErrorKind::invalid_request,
                                                     std::string("the structured-output constraint does not compile: ") +
                                                         e.what())});
          return;
        }
      }
    }
    WireMessage tokenized{msg::pack(t)};
    self->send(s.detokenizer, register_atom::value, tokenized, client);
    self->send(s.scheduler, generate_atom::value, std::move(tokenized), client);
  }};
}

}  // namespace

caf::actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tok, caf::actor scheduler,
                           caf::actor detokenizer, bool special_tokens_in_content, std::string chat_template,
                           std::shared_ptr<ConstraintCompiler> constraints) {
  return system.spawn(tokenizer_actor, std::move(tok), std::move(scheduler), std::move(detokenizer),
                      special_tokens_in_content, std::move(chat_template), std::move(constraints));
}

}  // namespace actorlm
