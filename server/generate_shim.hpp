#pragma once
// TEMPORARY until the parser branch lands.
#include "server/openai_api.hpp"
namespace actorlm::api {
std::variant<ParsedRequest, ApiError> parse_generate_request(const std::string& body, const std::string& model_id);
nlohmann::json generate_response(const ChoiceResult& c);
}
