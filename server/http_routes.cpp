#include "server/http_routes.hpp"

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
};

}  // namespace

std::span<const Route> routes() { return kRoutes; }

const Route* find_route(std::string_view path) {
  for (const auto& r : kRoutes) {
    if (r.path == path) return &r;
  }
  return nullptr;
}

}  // namespace actorlm::http
