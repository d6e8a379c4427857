// The route table the server dispatches on and the auth test reads: one
// entry per path and per handler, found by exact path only.

#include "server/http_routes.hpp"

#include <catch2/catch.hpp>
#include <set>
#include <string>

using namespace actorlm;

TEST_CASE("Each route has its own path and handler, and only the page and /health are open", "[server]") {
  std::set<std::string_view> paths;
  std::set<http::RouteId> ids;
  std::set<std::string_view> open;
  for (const http::Route& r : http::routes()) {
    CHECK(paths.insert(r.path).second);
    CHECK(ids.insert(r.id).second);
    CHECK(http::find_route(r.path) == &r);  // "{id}" is a segment like any other
    if (r.open) open.insert(r.path);
  }
  CHECK(ids.size() == static_cast<size_t>(http::RouteId::lora_unload) + 1);
  // A new open route is a security decision: this line and the auth test's
  // list of open routes change with it.
  CHECK(open == std::set<std::string_view>{"/", "/chat.js", "/health"});
}

TEST_CASE("Routes match whole paths only", "[server]") {
  CHECK(http::find_route("/health"));
  CHECK_FALSE(http::find_route("/health/"));
  CHECK_FALSE(http::find_route("/Health"));
  CHECK_FALSE(http::find_route("/health?x=1"));
  CHECK_FALSE(http::find_route(""));
  CHECK_FALSE(http::find_route("/v1/chat/completions/x"));
}

TEST_CASE("A {id} segment takes exactly one non-empty segment", "[server]") {
  const http::Route* drain = http::find_route("/nodes/2/drain");
  REQUIRE(drain);
  CHECK(drain->id == http::RouteId::node_drain);
  CHECK(http::route_param(*drain, "/nodes/2/drain") == "2");
  CHECK(http::route_param(*drain, "/nodes/10.0.0.7:7100/drain") == "10.0.0.7:7100");
  CHECK(http::find_route("/nodes/0/undrain")->id == http::RouteId::node_undrain);
  CHECK(http::find_route("/nodes")->id == http::RouteId::nodes);
  CHECK_FALSE(http::find_route("/nodes//drain"));
  CHECK_FALSE(http::find_route("/nodes/1/2/drain"));
  CHECK_FALSE(http::find_route("/nodes/1/drain/"));
  CHECK_FALSE(http::find_route("/nodes/1"));
  CHECK_FALSE(http::find_route("/nodes/1/drainx"));
  CHECK(http::route_param(*drain, "/nodes/1/undrain").empty());
}
