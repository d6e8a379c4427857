// The header checks the HTTP server makes before it reads a body.
#include "server/http_guard.hpp"

#include <catch2/catch.hpp>
#include <string>

using namespace actorlm::http;
using namespace std::string_literals;

TEST_CASE("bearer_matches takes exactly 'Bearer <key>'", "[server]") {
  CHECK(bearer_matches("Bearer s3cret", "s3cret"));
  CHECK_FALSE(bearer_matches("", "s3cret"));
  CHECK_FALSE(bearer_matches("Bearer", "s3cret"));
  CHECK_FALSE(bearer_matches("Bearer s3cre", "s3cret"));          // a prefix of the key
  CHECK_FALSE(bearer_matches("Bearer s3cretX", "s3cret"));        // longer
  CHECK_FALSE(bearer_matches("Bearer s3cret\0junk"s, "s3cret"));  // NUL and more
  CHECK_FALSE(bearer_matches("bearer s3cret", "s3cret"));         // scheme as written
  CHECK_FALSE(bearer_matches("Basic s3cret", "s3cret"));
  CHECK_FALSE(bearer_matches("Bearer  s3cret", "s3cret"));
  CHECK_FALSE(bearer_matches("Bearer t3cret", "s3cret"));  // first byte differs
  CHECK_FALSE(bearer_matches("Bearer s3creu", "s3cret"));  // last byte differs
}

TEST_CASE("host_name parses Host headers", "[server]") {
  CHECK(host_name("LocalHost:8080") == "localhost");
  CHECK(host_name("example.com") == "example.com");
  CHECK(host_name("example.com.") == "example.com");
  CHECK(host_name("[::1]:30000") == "::1");
  CHECK(host_name("[::1]") == "::1");
  CHECK_FALSE(host_name(""));
  CHECK_FALSE(host_name(":80"));
  CHECK_FALSE(host_name("a.com:"));
  CHECK_FALSE(host_name("a.com:80x"));
  CHECK_FALSE(host_name("a.com:1234567"));
  CHECK_FALSE(host_name("[::1"));
  CHECK_FALSE(host_name("[::1]x"));
  CHECK_FALSE(host_name("a b.com"));
  CHECK_FALSE(host_name("a/b"));
  CHECK_FALSE(host_name(std::string(300, 'a')));
}

TEST_CASE("host_allowed refuses names a rebinding page would send", "[server]") {
  const std::vector<std::string> allowed = {"inference.internal"};
  for (const char* ok : {"localhost", "localhost:30000", "LOCALHOST", "app.localhost", "127.0.0.1",
                         "127.0.0.1:1", "10.0.0.7:30000", "[::1]:30000", "[fe80::1]",
                         "inference.internal", "Inference.Internal:443"}) {
    INFO(ok);
    CHECK(host_allowed(ok, allowed));
  }
  for (const char* bad : {"evil.example", "localhost.evil.example", "127.0.0.1.evil.example",
                          "inference.internal.evil", "1.2.3", "1.2.3.4.5", "", "::1"}) {
    INFO(bad);
    CHECK_FALSE(host_allowed(bad, allowed));
  }
  CHECK_FALSE(host_allowed("inference.internal", {}));
}

TEST_CASE("route_path gives one spelling per route", "[server]") {
  CHECK(route_path("/v1/models") == "/v1/models");
  CHECK(route_path("/v1/models?x=1") == "/v1/models");
  CHECK(route_path("/") == "/");
  for (const char* bad :
       {"", "*", "v1/models", "http://host/v1/models", "/v1/chat%2Fcompletions", "/v1/../v1/models",
        "/v1/./models", "/v1/..", "/v1//models", "/v1\\models", "/v1/mo dels",
        "/v1/mo\x7f"
        "dels"}) {
    INFO(bad);
    CHECK_FALSE(route_path(bad));
  }
  CHECK_FALSE(route_path("/a\0b"s));
  CHECK_FALSE(route_path("/" + std::string(3000, 'a')));
}

TEST_CASE("is_json_media_type", "[server]") {
  CHECK(is_json_media_type("application/json"));
  CHECK(is_json_media_type("Application/JSON; charset=utf-8"));
  CHECK(is_json_media_type(" application/json ;charset=utf-8"));
  CHECK_FALSE(is_json_media_type(""));
  CHECK_FALSE(is_json_media_type("text/plain"));
  CHECK_FALSE(is_json_media_type("application/jsonx"));
  CHECK_FALSE(is_json_media_type("application/x-www-form-urlencoded"));
  CHECK_FALSE(is_json_media_type("multipart/form-data; boundary=application/json"));
}
