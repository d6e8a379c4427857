#include "server/sampling_fields.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/server/request_test_support.hpp"

// Through the routes, which all read these fields with read_sampling_fields:
// at the top level of the OpenAI bodies, in sampling_params for /generate.

using namespace actorlm;
using namespace actorlm::test;

TEST_CASE("every integer field refuses values beyond its range, fractions, floats and strings",
          "[server][json]") {
  struct Field {
    Route route;
    std::string name, param;
    std::string prefix;  // other members the field needs
  };
  std::vector<Field> fields;
  for (Route route : kRoutes) {
    const std::string sp = route == Route::generate ? "sampling_params." : "";
    for (const char* name : {"top_k", "seed", "n"}) fields.push_back({route, name, sp + name, ""});
  }
  for (Route route : {Route::chat, Route::completion}) {
    fields.push_back({route, "max_tokens", "max_tokens", ""});
    fields.push_back({route, "max_completion_tokens", "max_completion_tokens", ""});
  }
  fields.push_back({Route::generate, "max_new_tokens", "sampling_params.max_new_tokens", ""});
  fields.push_back({Route::chat, "min_tokens", "min_tokens", ""});
  fields.push_back({Route::completion, "min_tokens", "min_tokens", ""});
  fields.push_back({Route::generate, "min_new_tokens", "sampling_params.min_new_tokens", ""});
  fields.push_back({Route::completion, "logprobs", "logprobs", ""});
  fields.push_back({Route::chat, "top_logprobs", "top_logprobs", R"("logprobs": true, )"});
  for (const Field& f : fields) {
    for (const char* v :
         {"18446744073709551615", "18446744073709551616", "-2", "-9223372036854775808", "1e30",
          "5.5", "5.0", "5e0", R"("5")", "true", "[5]", "{}"}) {
      // The largest seed, and negative ones (OpenAI's seed is an int64), are seeds.
      if (f.name == "seed" && (std::string(v) == "18446744073709551615" || v[0] == '-')) continue;
      require_400(f.route, body_of(f.route, f.prefix + "\"" + f.name + "\": " + v), f.param);
    }
    accepted(f.route, body_of(f.route, f.prefix + "\"" + f.name + "\": null"));
  }
}

TEST_CASE("integer fields keep their exact values at the edges of their ranges", "[server][json]") {
  // The sample from the report: this wrapped to top_k = -1 (disabled).
  require_400(Route::chat, body_of(Route::chat, R"("top_k": 18446744073709551615)"), "top_k");
  CHECK(accepted(Route::chat, body_of(Route::chat, R"("top_k": -1)")).options.sampling.top_k == -1);
  CHECK(accepted(Route::chat, body_of(Route::chat, R"("top_k": 1048576)")).options.sampling.top_k ==
        1048576);
  require_400(Route::chat, body_of(Route::chat, R"("top_k": 1048577)"), "top_k");
  for (Route route : kRoutes) {
    const std::string sp = route == Route::generate ? "sampling_params." : "";
    for (const char* seed :
         {"0", "9223372036854775807", "9223372036854775808", "18446744073709551615"}) {
      const ParsedRequest r = accepted(route, body_of(route, std::string(R"("seed": )") + seed));
      CHECK(r.options.sampling.has_seed);
      CHECK(r.options.sampling.seed == std::stoull(seed));
    }
    CHECK_FALSE(accepted(route, body_of(route, "")).options.sampling.has_seed);
    // Negative seeds are their two's complement; one below int64 is refused.
    CHECK(accepted(route, body_of(route, R"("seed": -1)")).options.sampling.seed == 18446744073709551615u);
    CHECK(accepted(route, body_of(route, R"("seed": -9223372036854775808)")).options.sampling.seed ==
          9223372036854775808u);
    require_400(route, body_of(route, R"("seed": -9223372036854775809)"), sp + "seed");
    CHECK(accepted(route, body_of(route, R"("n": 16)")).n == 16);
    require_400(route, body_of(route, R"("n": 17)"), sp + "n");
    require_400(route, body_of(route, R"("n": 0)"), sp + "n");
  }
  CHECK(accepted(Route::chat, body_of(Route::chat, R"("max_tokens": 1048576)"))
            .options.max_new_tokens == 1048576);
  require_400(Route::chat, body_of(Route::chat, R"("max_tokens": 1048577)"), "max_tokens");
  require_400(Route::chat, body_of(Route::chat, R"("max_tokens": 0)"), "max_tokens");
  CHECK(accepted(Route::generate, body_of(Route::generate, R"("max_new_tokens": 7)"))
            .options.max_new_tokens == 7);
  // /generate spells it max_new_tokens; OpenAI's name there is an unknown field.
  CHECK(accepted(Route::generate, body_of(Route::generate, R"("max_tokens": 7)"))
            .options.max_new_tokens == 256);
  CHECK(accepted(Route::completion, body_of(Route::completion, R"("logprobs": 5)"))
            .options.top_logprobs == 5);
  require_400(Route::completion, body_of(Route::completion, R"("logprobs": 6)"), "logprobs");
  CHECK(accepted(Route::chat, body_of(Route::chat, R"("logprobs": true, "top_logprobs": 20)"))
            .options.top_logprobs == 20);
  require_400(Route::chat, body_of(Route::chat, R"("top_logprobs": 2)"), "top_logprobs");
}

TEST_CASE("number fields refuse strings, booleans, and values out of range", "[server][json]") {
  for (Route route : kRoutes) {
    const std::string sp = route == Route::generate ? "sampling_params." : "";
    for (const char* name : {"temperature", "top_p", "min_p", "frequency_penalty",
                             "presence_penalty", "repetition_penalty"}) {
      for (const char* v : {R"("0.5")", "true", "[0.5]", "1e30", "-1e30", "18446744073709551615"}) {
        require_400(route, body_of(route, std::string("\"") + name + "\": " + v), sp + name);
      }
      accepted(route, body_of(route, std::string("\"") + name + "\": null"));
    }
    const ParsedRequest r = accepted(
        route,
        body_of(route, R"("temperature": 0, "top_p": 0.5, "min_p": 0.1, "frequency_penalty": -2,
                                                              "presence_penalty": 2, "repetition_penalty": 1.5, "top_k": 3)"));
    CHECK(r.options.sampling.temperature == 0.0f);
    CHECK(r.options.sampling.top_p == 0.5f);
    CHECK(r.options.sampling.min_p == 0.1f);
    CHECK(r.options.sampling.frequency_penalty == -2.0f);
    CHECK(r.options.sampling.presence_penalty == 2.0f);
    CHECK(r.options.sampling.repetition_penalty == 1.5f);
    CHECK(r.options.sampling.top_k == 3);
    require_400(route, body_of(route, R"("top_p": 0)"), sp + "top_p");
    CHECK(contains(refused(route, body_of(route, R"("top_p": 0)")).message, "must be a number in (0, 1]"));
    CHECK(accepted(route, body_of(route, R"("top_p": 1e-30)")).options.sampling.top_p > 0.0f);
  }
}

TEST_CASE("stop is a string or a list of at most 16 strings", "[server][json]") {
  for (Route route : kRoutes) {
    const std::string sp = route == Route::generate ? "sampling_params." : "";
    for (const char* v : {"5", "true", "{}", R"(["a", 1])", R"([["a"]])", R"([null])"}) {
      require_400(route, body_of(route, std::string(R"("stop": )") + v), sp + "stop");
    }
    std::string seventeen = "[\"s\"";
    for (int i = 1; i < 17; ++i) seventeen += ",\"s\"";
    require_400(route, body_of(route, R"("stop": )" + seventeen + "]"), sp + "stop");
    CHECK(accepted(route, body_of(route, R"("stop": "x")")).options.stop ==
          std::vector<std::string>{"x"});
    CHECK(accepted(route, body_of(route, R"("stop": ["x", "y"])")).options.stop ==
          std::vector<std::string>{"x", "y"});
  }
}
