#include "server/openai_api.hpp"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <variant>

#include "tests/server/request_test_support.hpp"

using namespace actorlm;
using namespace actorlm::test;

TEST_CASE("the reported deep-nesting body on /generate is a 400, not a crash", "[server][json]") {
  const std::string body = R"({"text":"hi","sampling_params":{"x":)" + nested_arrays(100000) + "}}";
  const ApiError e = refused(Route::generate, body);
  CHECK(e.status == 400);
  CHECK(contains(e.message, "deeper than 64"));
}

TEST_CASE("deep nesting is refused in every field and at the top level", "[server][json]") {
  for (Route route : kRoutes) {
    for (const std::string& deep :
         {nested_arrays(100000), nested_objects(100000), nested_arrays(65)}) {
      for (const char* field : {"messages", "prompt", "input_ids", "text", "model", "stream",
                                "stream_options", "sampling_params", "x"}) {
        // A duplicate key is kept last by nlohmann; the nesting is refused before that matters.
        const ApiError e =
            refused(route, body_of(route, "", std::string("\"") + field + "\": " + deep));
        CHECK(e.status == 400);
        CHECK(contains(e.message, "deeper than 64"));
      }
      for (const char* field : {"temperature", "top_k", "seed", "stop", "n", "max_tokens",
                                "max_new_tokens", "ignore_eos", "logprobs", "y"}) {
        const ApiError e =
            refused(route, body_of(route, std::string("\"") + field + "\": " + deep));
        CHECK(contains(e.message, "deeper than 64"));
      }
      CHECK(contains(refused(route, deep).message, "deeper than 64"));
    }
    const ApiError e =
        refused(route, R"({"messages": [{"role": "user", "content": [{"type": "text", "text": )" +
                           nested_arrays(100000) + "}]}]}");
    CHECK(contains(e.message, "deeper than 64"));
  }
}

TEST_CASE("nesting of exactly 64 levels is accepted and 65 refused", "[server][json]") {
  // The body object is level 1.
  // metadata takes any value (it is ignored on purpose).
  for (Route route : {Route::chat, Route::completion}) {
    accepted(route, body_of(route, "\"metadata\": " + nested_arrays(63)));
    require_400(route, body_of(route, "\"metadata\": " + nested_arrays(64)), "");
  }
  // /generate's sampling_params is level 2.
  accepted(Route::generate, body_of(Route::generate, "\"x\": " + nested_arrays(62)));
  require_400(Route::generate, body_of(Route::generate, "\"x\": " + nested_arrays(63)), "");
}

TEST_CASE("a NUL byte or trailing bytes after the JSON value are refused", "[server][json]") {
  using namespace std::string_literals;
  for (Route route : kRoutes) {
    const std::string ok = body_of(route, "");
    accepted(route, ok);
    for (const std::string& bad : {ok + "\0garbage"s, ok + "\0"s, "\0"s + ok, ok + " x", ok + "{}",
                                   ok + ok, ok.substr(0, 5) + "\0"s + ok.substr(5),
                                   body_of(route, R"("stop": "a)"
                                                  "\0"s
                                                  R"(b")")}) {
      require_400(route, bad, "");
    }
    accepted(route, ok + " \n\t");  // JSON allows whitespace after the value
  }
}

TEST_CASE("content parts of the wrong type are 400s naming the part", "[server][chat]") {
  const std::string head = R"({"messages": [{"role": "user", "content": [{"type": )";
  for (const char* type : {"5", "null", "true", "[]", "{}", R"("image_url")"}) {
    const ApiError e = refused(Route::chat, head + type + R"(, "text": "hi"}]}]})");
    CHECK(e.status == 400);
    CHECK(e.param == "messages[0].content[0].type");
  }
  require_400(Route::chat,
              R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})",
              "messages[0].content[0].text");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": [5]}]})",
              "messages[0].content[0]");
  require_400(Route::chat, R"({"messages": [{"role": 5, "content": "hi"}]})", "messages[0].role");
  require_400(Route::chat, R"({"messages": [{"role": null, "content": "hi"}]})",
              "messages[0].role");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": 5}]})",
              "messages[0].content");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": null}]})",
              "messages[0].content");
  require_400(Route::chat, R"({"messages": ["hi"]})", "messages[0]");
  require_400(Route::chat, R"({"messages": {}})", "messages");
  const ParsedRequest r = accepted(
      Route::chat,
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  REQUIRE(r.options.messages.size() == 1);
  CHECK(r.options.messages[0].content == "ab");
}

TEST_CASE("every boolean field refuses non-booleans and takes null as absent", "[server][json]") {
  struct Field {
    Route route;
    std::string name, param;
    bool sampling;  // inside sampling_params on /generate
  };
  std::vector<Field> fields;
  for (Route route : kRoutes) {
    fields.push_back({route, "stream", "stream", false});
    fields.push_back({route, "ignore_eos",
                      route == Route::generate ? "sampling_params.ignore_eos" : "ignore_eos",
                      true});
  }
  fields.push_back({Route::chat, "logprobs", "logprobs", true});
  for (const Field& f : fields) {
    for (const char* v : {R"("yes")", "1", "0", R"("true")", "[]", "{}", "[true]"}) {
      const std::string member = "\"" + f.name + "\": " + v;
      require_400(f.route, f.sampling ? body_of(f.route, member) : body_of(f.route, "", member),
                  f.param);
    }
    const std::string null_member = "\"" + f.name + "\": null";
    accepted(f.route,
             f.sampling ? body_of(f.route, null_member) : body_of(f.route, "", null_member));
  }
  for (Route route : {Route::chat, Route::completion}) {
    for (const char* v : {R"("yes")", "1", "[]", "{}"}) {
      require_400(
          route,
          body_of(route,
                  std::string(R"("stream": true, "stream_options": {"include_usage": )") + v + "}"),
          "stream_options.include_usage");
    }
    CHECK(accepted(route,
                   body_of(route, R"("stream": true, "stream_options": {"include_usage": true})"))
              .include_usage);
    CHECK_FALSE(
        accepted(route,
                 body_of(route, R"("stream": true, "stream_options": {"include_usage": null})"))
            .include_usage);
    CHECK(accepted(route, body_of(route, R"("stream": true)")).stream);
  }
}

TEST_CASE("stream_options must be an object and needs stream: true", "[server][json]") {
  for (Route route : {Route::chat, Route::completion}) {
    for (const char* v : {R"("yes")", "5", "true", "[]"}) {
      require_400(route, body_of(route, std::string(R"("stream": true, "stream_options": )") + v),
                  "stream_options");
    }
    for (const char* stream : {R"("stream": false, )", ""}) {
      require_400(
          route,
          body_of(route, std::string(stream) + R"("stream_options": {"include_usage": true})"),
          "stream_options");
      require_400(route, body_of(route, std::string(stream) + R"("stream_options": {})"),
                  "stream_options");
    }
    accepted(route, body_of(route, R"("stream": false, "stream_options": null)"));
  }
}

TEST_CASE("token ids are integers in [0, 2^31 - 1], never wrapped", "[server][json]") {
  struct Where {
    Route route;
    std::string member;  // the token-id list's member, before the list
    std::string param;
  };
  for (const Where& w : {Where{Route::completion, R"("prompt": )", "prompt"},
                         Where{Route::generate, R"("input_ids": )", "input_ids"}}) {
    auto body = [&](const std::string& ids) { return "{" + w.member + ids + "}"; };
    for (const char* ids :
         {"[18446744073709551615]", "[4294967295]", "[2147483648]", "[-1]", "[1e30]", "[5.5]",
          "[5.0]", "[null]", "[]", "5", "{}", "[[-1]]", R"([["5"]])", "[[]]", R"(["5", [1], 5])"}) {
      require_400(w.route, body(ids), w.param);
    }
    // A list of strings or of id lists is a batch of prompts on /v1/completions.
    if (w.route == Route::generate) {
      require_400(w.route, body(R"(["5"])"), w.param);
      require_400(w.route, body("[[1]]"), w.param);
    } else {
      const ParsedRequest batch = accepted(w.route, body(R"(["5", [1, 2]])"));
      REQUIRE(batch.prompts.size() == 2);
      CHECK(batch.prompts[0].text == "5");
      CHECK(batch.prompts[1].ids == std::vector<int32_t>{1, 2});
    }
    const ParsedRequest r = accepted(w.route, body("[0, 1, 2147483647]"));
    CHECK(r.options.input_ids == std::vector<int32_t>{0, 1, 2147483647});
  }
}

TEST_CASE("client text echoed in an error is cut short and stays valid UTF-8", "[server][json]") {
  CHECK(api::echo("abc") == "'abc'");
  CHECK(api::echo(std::string(64, 'a')) == "'" + std::string(64, 'a') + "'");
  CHECK(api::echo(std::string(65, 'a')) == "'" + std::string(64, 'a') + "...'");
  // A two-byte character across the cut is dropped whole.
  CHECK(api::echo(std::string(63, 'a') + "\xC3\xA9" + "z") == "'" + std::string(63, 'a') + "...'");
  // Four-byte characters: 64 bytes is 16 of them exactly.
  std::string emoji;
  for (int i = 0; i < 40; ++i) emoji += "\xF0\x9F\x98\x80";
  CHECK(api::echo(emoji) == "'" + emoji.substr(0, 64) + "...'");

  const std::string huge(1 << 20, 'm');
  for (Route route : kRoutes) {
    const ApiError e = refused(route, body_of(route, "", R"("model": ")" + huge + "\""));
    CHECK(e.status == 404);
    CHECK(e.param == "model");
    CHECK(e.message.size() < 200);
    CHECK(contains(e.message, std::string(64, 'm') + "..."));
    std::string accents;
    for (int i = 0; i < 100000; ++i) accents += "\xC3\xA9";
    const ApiError u = refused(route, body_of(route, "", R"("model": "x)" + accents + "\""));
    CHECK(u.message.size() < 200);
    CHECK_NOTHROW(nlohmann::json::parse(u.body().dump()));
    accepted(route, body_of(route, "", R"("model": "smollm2")"));
    accepted(route, body_of(route, "", R"("model": "default")"));
    require_400(route, body_of(route, "", R"("model": 5)"), "model");
  }
  const ApiError role =
      refused(Route::chat, R"({"messages": [{"role": ")" + huge + R"(", "content": "hi"}]})");
  CHECK(role.message.size() < 200);
  CHECK(role.param == "messages[0].role");
  const ApiError part =
      refused(Route::chat, R"({"messages": [{"role": "user", "content": [{"type": ")" + huge +
                               R"(", "text": "hi"}]}]})");
  CHECK(part.message.size() < 200);
}

TEST_CASE("/generate takes exactly one of text and input_ids, and sampling_params as an object",
          "[server][generate]") {
  require_400(Route::generate, R"({"sampling_params": {}})", "text");
  require_400(Route::generate, R"({"text": "hi", "input_ids": [1]})", "text");
  require_400(Route::generate, R"({"input": "hi"})", "text");
  require_400(Route::generate, R"({"text": 5})", "text");
  require_400(Route::generate, R"({"text": ["a", "b"]})", "text");
  require_400(Route::generate, R"({"text": "hi", "sampling_params": 5})", "sampling_params");
  require_400(Route::generate, R"({"text": "hi", "sampling_params": []})", "sampling_params");
  require_400(Route::generate, R"({"text": "hi", "stream": "yes"})", "stream");
  require_400(Route::generate, "[]", "");
  const ParsedRequest t =
      accepted(Route::generate, R"({"text": "hi", "input_ids": null, "unknown": {"a": 1}})");
  CHECK(t.options.prompt == "hi");
  CHECK_FALSE(t.options.chat);
  CHECK_FALSE(t.chat);
  CHECK(t.options.max_new_tokens == 256);
  const ParsedRequest ids = accepted(
      Route::generate,
      R"({"input_ids": [1, 2], "stream": true, "sampling_params": {"max_new_tokens": 8, "temperature": 0.5, "ignore_eos": true,
          "stop": ["\n"], "seed": 3, "n": 2}})");
  CHECK(ids.options.input_ids == std::vector<int32_t>{1, 2});
  CHECK(ids.stream);
  CHECK(ids.n == 2);
  CHECK(ids.options.max_new_tokens == 8);
  CHECK(ids.options.sampling.temperature == 0.5f);
  CHECK(ids.options.ignore_eos);
  CHECK(ids.options.stop == std::vector<std::string>{"\n"});
  CHECK(ids.options.sampling.seed == 3);
}

TEST_CASE("/generate's reply: one object per choice, a list for n > 1", "[server][generate]") {
  api::ChoiceResult c;
  c.text = "hello";
  c.last.finish = FinishReason::length;
  c.last.prompt_tokens = 3;
  c.last.completion_tokens = 2;
  const nlohmann::json one = api::generate_response(c);
  CHECK(one ==
        nlohmann::json{
            {"text", "hello"},
            {"meta_info",
             {{"finish_reason", "length"}, {"prompt_tokens", 3}, {"completion_tokens", 2}}}});
  CHECK(api::generate_response(std::vector<api::ChoiceResult>{c}) == one);
  const nlohmann::json two = api::generate_response(std::vector<api::ChoiceResult>{c, c});
  REQUIRE(two.is_array());
  CHECK(two.size() == 2);
  CHECK(two[1] == one);
}

TEST_CASE("a full chat request reads into the engine's options", "[server][chat]") {
  const ParsedRequest r =
      accepted(Route::chat, R"({"model": "smollm2", "messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": "u"}], "max_tokens": 9, "stream": true, "stream_options": {"include_usage": true},
      "logprobs": true, "top_logprobs": 2, "n": 3, "seed": 7, "ignore_eos": true, "min_tokens": 4, "user": "ignored"})");
  CHECK(r.chat);
  CHECK(r.options.chat);
  REQUIRE(r.options.messages.size() == 2);
  CHECK(r.options.messages[1].role == "user");
  CHECK(r.options.messages[1].content == "u");
  CHECK(r.options.max_new_tokens == 9);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.options.logprobs);
  CHECK(r.options.top_logprobs == 2);
  CHECK(r.n == 3);
  CHECK(r.options.sampling.seed == 7);
  CHECK(r.options.ignore_eos);
  CHECK(r.options.min_new_tokens == 4);
  // min_tokens fits in the output length, whichever of them comes first.
  require_400(Route::chat, R"({"min_tokens": 10, "messages": [{"role": "user", "content": "u"}], "max_tokens": 9})",
              "min_tokens");
  CHECK(accepted(Route::chat, R"({"messages": [{"role": "user", "content": "u"}], "min_tokens": 256})")
            .options.min_new_tokens == 256);
  require_400(Route::generate, R"({"text": "hi", "sampling_params": {"min_new_tokens": 257}})",
              "sampling_params.min_new_tokens");
  const ParsedRequest c = accepted(Route::completion, R"({"prompt": [1, 2, 3]})");
  CHECK(c.options.input_ids == std::vector<int32_t>{1, 2, 3});
  CHECK_FALSE(c.options.chat);
  require_400(Route::completion, R"({"prompt": {"a": 1}})", "prompt");
  require_400(Route::chat, "{not json", "");
  require_400(Route::chat, "", "");
  require_400(Route::chat, "null", "");
}

TEST_CASE("a predicted output and a per-request draft limit read into the options, and malformed ones are 400s", "[server][speculative]") {
  const ParsedRequest r = accepted(
      Route::chat, R"({"messages": [{"role": "user", "content": "u"}], "speculative.n_max": 0,
      "prediction": {"type": "content", "content": "def f():\n    return 1\n"}})");
  CHECK(r.options.max_draft_tokens == 0);
  CHECK(r.options.prediction == "def f():\n    return 1\n");
  const ParsedRequest parts = accepted(
      Route::completion, R"({"prompt": "p", "speculative.n_max": 16, "prediction": {"type": "content",
      "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}})");
  CHECK(parts.options.max_draft_tokens == 16);
  CHECK(parts.options.prediction == "ab");
  // Absent: the server's settings.
  const ParsedRequest plain = accepted(Route::completion, R"({"prompt": "p"})");
  CHECK(plain.options.max_draft_tokens == -1);
  CHECK(plain.options.prediction.empty());
  require_400(Route::completion, R"({"prompt": "p", "speculative.n_max": 17})", "speculative.n_max");
  require_400(Route::completion, R"({"prompt": "p", "speculative.n_max": -1})", "speculative.n_max");
  require_400(Route::completion, R"({"prompt": "p", "speculative.n_max": "4"})", "speculative.n_max");
  require_400(Route::completion, R"({"prompt": "p", "prediction": "text"})", "prediction");
  require_400(Route::completion, R"({"prompt": "p", "prediction": {"type": "text", "content": "x"}})", "prediction");
  require_400(Route::completion, R"({"prompt": "p", "prediction": {"type": "content"}})", "prediction");
  require_400(Route::completion, R"({"prompt": "p", "prediction": {"type": "content", "content": "x", "extra": 1}})",
              "prediction");
  require_400(Route::completion, R"({"prompt": "p", "prediction": {"type": "content", "content": 5}})",
              "prediction.content");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": "u"}],
              "prediction": {"type": "content", "content": [{"type": "text", "text": 5}]}})", "prediction.content");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": "u"}],
              "prediction": {"type": "content", "content": [{"type": "image_url", "text": "x"}]}})", "prediction.content");
  require_400(Route::chat, R"({"messages": [{"role": "user", "content": "u"}],
              "prediction": {"type": "content", "content": ["x"]}})", "prediction.content");
}

TEST_CASE("mutated bodies never throw out of the parsers", "[server][json]") {
  // Valid bodies with bytes dropped, duplicated or replaced by JSON tokens
  // that have broken the parser before; fixed seed, so a failure repeats.
  const std::string pieces[] = {"null", "18446744073709551615",
                                "-1",   "1e30",
                                "5.5",  "\"x\"",
                                "[",    "]",
                                "{",    "}",
                                ",",    ":",
                                "true", std::string(1, '\0'),
                                "[[[[", "\"\\u0000\""};
  const std::string seeds[] = {
      body_of(
          Route::chat,
          R"("stream": true, "stream_options": {"include_usage": true}, "top_k": 5, "seed": 1)"),
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "logprobs": true,
          "top_logprobs": 2, "stop": ["a", "b"], "n": 2})",
      R"({"prompt": [1, 2, 3], "logprobs": 3, "max_tokens": 4, "model": "smollm2"})",
      R"({"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0.5, "stop": "x"}, "stream": true})",
      R"({"input_ids": [1, 2], "sampling_params": {"ignore_eos": true, "seed": 18446744073709551615}})"};
  std::mt19937 rng(13);
  size_t refused_count = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string body = seeds[rng() % std::size(seeds)];
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      const size_t at = rng() % (body.size() + 1);
      switch (rng() % 3) {
        case 0:
          body.erase(at, 1 + rng() % 8);
          break;
        case 1:
          body.insert(at, pieces[rng() % std::size(pieces)]);
          break;
        default:
          body.insert(at, body.substr(at, rng() % 16));
          break;
      }
    }
    for (Route route : kRoutes) {
      INFO(body);
      std::variant<ParsedRequest, ApiError> r;
      REQUIRE_NOTHROW(r = parse(route, body));
      if (const auto* e = std::get_if<ApiError>(&r)) {
        ++refused_count;
        CHECK((e->status == 400 || e->status == 404));
        REQUIRE_NOTHROW(e->body().dump());
      }
    }
  }
  CHECK(refused_count > 0);
}
