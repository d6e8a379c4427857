#include "server/http_routes.hpp"

#include <algorithm>

namespace actorlm::http {

namespace {

using boost::beast::http::verb;

// Open routes are what a browser or a health probe needs before it has a
// key: the chat page (it asks the user for one) and /health. Everything that
// runs the model or says anything about it needs the key.
constexpr Route kRoutes[] = {
    {"/", verb::get, RouteId::page, true},
    {"/chat.js", verb::get, RouteId::script, true},
    {"/health", verb::get, RouteId::health, true},
    {"/v1/models", verb::get, RouteId::models, false},
    {"/metrics", verb::get, RouteId::metrics, false},
    {"/nodes", verb::get, RouteId::nodes, false},
    {"/v1/chat/completions", verb::post, RouteId::chat, false},
    {"/v1/completions", verb::post, RouteId::completion, false},
    {"/generate", verb::post, RouteId::native, false},
    {"/tokenize", verb::post, RouteId::tokenize, false},
    {"/detokenize", verb::post, RouteId::detokenize, false},
    // A cluster head's operator: drain a node (its requests move elsewhere)
    // or take it back.
    {"/nodes/{id}/drain", verb::post, RouteId::node_drain, false},
    {"/nodes/{id}/undrain", verb::post, RouteId::node_undrain, false},
    // LoRA adapters at run time (vLLM's routes); off unless --lora-dir.
    {"/v1/load_lora_adapter", verb::post, RouteId::lora_load, false},
    {"/v1/unload_lora_adapter", verb::post, RouteId::lora_unload, false},
};

constexpr std::string_view param = "{id}";

// Splits off the first segment of `p` (after its '/').
std::string_view next_segment(std::string_view& p) {
  p.remove_prefix(1);
  const size_t end = std::min(p.find('/'), p.size());
  std::string_view seg = p.substr(0, end);
  p.remove_prefix(end);
  return seg;
}

// Whether `path` fits `pattern`; `value` gets the "{id}" segment.
bool matches(std::string_view pattern, std::string_view path, std::string_view* value) {
  if (pattern.find(param) == std::string_view::npos) return pattern == path;
  while (!pattern.empty() && !path.empty() && pattern.front() == '/' && path.front() == '/') {
    const std::string_view want = next_segment(pattern), got = next_segment(path);
    if (want == param) {
      if (got.empty()) return false;
      if (value) *value = got;
    } else if (want != got) {
      return false;
    }
  }
  return pattern.empty() && path.empty();
}

}  // namespace

std::span<const Route> routes() { return kRoutes; }

const Route* find_route(std::string_view path) {
  for (const auto& r : kRoutes) {
    if (matches(r.path, path, nullptr)) return &r;
  }
  return nullptr;
}

std::string_view route_param(const Route& route, std::string_view path) {
  std::string_view value;
  return matches(route.path, path, &value) ? value : std::string_view();
}

}  // namespace actorlm::http
