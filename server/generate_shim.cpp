#include "server/generate_shim.hpp"
namespace actorlm::api {
std::variant<ParsedRequest, ApiError> parse_generate_request(const std::string& body, const std::string& model_id) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return ApiError{400, "bad", "invalid_request_error", ""};
  nlohmann::json o = j.value("sampling_params", nlohmann::json::object());
  if (o.contains("max_new_tokens")) o["max_tokens"] = o["max_new_tokens"];
  o.erase("max_new_tokens");
  o["prompt"] = j.contains("text") ? j["text"] : j["input_ids"];
  o["stream"] = j.value("stream", false);
  return parse_request(o.dump(), false, model_id);
}
nlohmann::json generate_response(const ChoiceResult& c) {
  return {{"text", c.text}, {"meta_info", {{"finish_reason", finish_reason_text(c.last.finish)}, {"prompt_tokens", c.last.prompt_tokens}, {"completion_tokens", c.last.completion_tokens}}}};
}
}
