#include "server/api_error.hpp"

namespace actorlm::api {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"code", status}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  return {{"error", e}};
}

ApiError bad_request(std::string param, std::string message) {
  return {400, std::move(message), "invalid_request_error", std::move(param)};
}

std::string echo(std::string_view client_text) {
  if (client_text.size() <= kEchoBytes) return "'" + std::string(client_text) + "'";
  size_t cut = kEchoBytes;
  // Back up over continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(client_text[cut]) & 0xC0) == 0x80) --cut;
  return "'" + std::string(client_text.substr(0, cut)) + "...'";
}

}  // namespace actorlm::api
