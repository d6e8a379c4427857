#include "server/json_reader.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

using namespace actorlm;
using nlohmann::json;

namespace {

bool read_ok(const std::string& body) {
  std::variant<json, api::ApiError> r;
  REQUIRE_NOTHROW(r = api::read_json(body));
  return std::holds_alternative<json>(r);
}

std::string nested_arrays(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

}  // namespace

TEST_CASE("read_json takes 64 levels of nesting and refuses 65, of arrays, objects or both",
          "[server][json]") {
  CHECK(read_ok(nested_arrays(64)));
  CHECK_FALSE(read_ok(nested_arrays(65)));
  CHECK_FALSE(read_ok(nested_arrays(100000)));
  std::string objects, mixed;
  for (int i = 0; i < 64; ++i) objects += R"({"a":)";
  CHECK(read_ok(objects + "1" + std::string(64, '}')));
  CHECK_FALSE(read_ok(R"({"a":)" + objects + "1" + std::string(65, '}')));
  std::string close;
  for (int i = 0; i < 32; ++i) {
    mixed += R"({"a":[)";
    close += "]}";
  }
  CHECK(read_ok(mixed + "1" + close));
  CHECK_FALSE(read_ok("[" + mixed + "1" + close + "]"));
  // Refused even when the deep part is not well formed.
  CHECK_FALSE(read_ok(std::string(100000, '[')));
  const auto e = std::get<api::ApiError>(api::read_json(nested_arrays(65)));
  CHECK(e.status == 400);
  CHECK(e.message.find("deeper than 64") != std::string::npos);
}

TEST_CASE("read_json refuses more values than kMaxJsonValues", "[server][json]") {
  std::string zeros = "0";
  for (size_t i = 1; i < api::kMaxJsonValues - 1; ++i) zeros += ",0";
  CHECK(read_ok("[" + zeros + "]"));          // the array and its elements: exactly the bound
  CHECK_FALSE(read_ok("[" + zeros + ",0]"));  // one more
}

TEST_CASE("read_json refuses a NUL byte anywhere and bytes after the value", "[server][json]") {
  using namespace std::string_literals;
  for (const std::string& body : {"{}\0"s, "{}\0garbage"s, "\0{}"s, "{\0}"s,
                                  R"({"a": "x)"
                                  "\0"s
                                  R"(y"})",
                                  "{} x"s, "{}{}"s, "{} //"s, ""s, "   "s, "{"s}) {
    CHECK_FALSE(read_ok(body));
  }
  CHECK(read_ok("  {} \r\n\t"));
  CHECK(read_ok(R"({"a": "x\u0000y"})"));  // an escaped NUL is fine
}

TEST_CASE("integer_in compares in the type nlohmann holds, so nothing wraps", "[server][json]") {
  const auto u64_max = std::numeric_limits<uint64_t>::max();
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("18446744073709551615"), -1, 100));
  CHECK_FALSE(api::integer_in<int64_t>(json::parse("18446744073709551615"), INT64_MIN, INT64_MAX));
  CHECK(api::integer_in<uint64_t>(json::parse("18446744073709551615"), 0, u64_max) == u64_max);
  CHECK_FALSE(api::integer_in<uint64_t>(json::parse("-1"), 0, u64_max));
  CHECK(api::integer_in<int64_t>(json::parse("-9223372036854775808"), INT64_MIN, 0) == INT64_MIN);
  CHECK(api::integer_in<int32_t>(json::parse("-1"), -1, 5) == -1);
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("2147483648"), 0, INT32_MAX));
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("5.0"), 0, 10));
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("5e0"), 0, 10));
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("\"5\""), 0, 10));
  CHECK_FALSE(api::integer_in<int32_t>(json::parse("true"), 0, 10));
}

TEST_CASE("FieldReader treats null as absent and names nested fields by path", "[server][json]") {
  const json j = json::parse(R"({"a": null, "b": true, "c": "x", "d": 2.5, "e": 7})");
  const api::FieldReader f(j, "sampling_params");
  bool b = false;
  std::string s = "unchanged";
  float x = -1;
  int n = -1;
  CHECK_FALSE(f.boolean("a", &b));
  CHECK_FALSE(f.string("a", &s));
  CHECK_FALSE(f.number("missing", 0, 1, &x));
  CHECK(s == "unchanged");
  CHECK(x == -1);
  CHECK_FALSE(f.boolean("b", &b));
  CHECK(b);
  const auto e = f.boolean("c", &b);
  REQUIRE(e);
  CHECK(e->param == "sampling_params.c");
  CHECK(e->message == "'sampling_params.c' must be a boolean");
  CHECK(f.number("d", 0, 2, &x));
  CHECK_FALSE(f.number("d", 0, 3, &x));
  CHECK(x == 2.5f);
  CHECK(f.integer<int>("d", 0, 10, &n));
  CHECK_FALSE(f.integer<int>("e", 0, 10, &n));
  CHECK(n == 7);
  CHECK(api::FieldReader(j, "").param("e") == "e");
}
