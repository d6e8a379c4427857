#include "jinja/template.hpp"

#include <catch2/catch.hpp>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_paths.hpp"

using namespace actorlm::jinja;

namespace {

// strftime_now pinned to the fixture's clock (2026-01-02 03:04:05).
std::string fixed_clock(const std::string& format) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 2;
  tm.tm_hour = 3;
  tm.tm_min = 4;
  tm.tm_sec = 5;
  tm.tm_wday = 5;  // a Friday
  tm.tm_yday = 1;
  char buf[256];
  return std::string(buf, std::strftime(buf, sizeof buf, format.c_str(), &tm));
}

Dict chat_variables(const nlohmann::ordered_json& conversation, bool add_generation_prompt) {
  Dict vars;
  vars.set("messages", Value::from_json(conversation["messages"], true));
  vars.set("tools", conversation.contains("tools") ? Value::from_json(conversation["tools"], true) : Value(None{}));
  vars.set("add_generation_prompt", Value(add_generation_prompt));
  vars.set("bos_token", Value::markup("<|bos|>"));
  vars.set("eos_token", Value::markup("<|eos|>"));
  return vars;
}

std::string render(std::string_view source, const Dict& vars = {}) {
  return Template(source).render(vars, {}, fixed_clock).str();
}

Error::Kind error_of(std::string_view source, const Dict& vars = {}, const Limits& limits = {}) {
  try {
    Template(source).render(vars, limits, fixed_clock);
  } catch (const Error& e) {
    return e.kind();
  }
  FAIL("no error from: " << source);
  return Error::Kind::syntax;
}

// Limits small enough that a template running into them costs milliseconds,
// even under the sanitizers (the defaults are sized for ~1 s of real work).
Limits small_limits() {
  Limits l;
  l.max_work = 200'000;
  l.max_output = 64 << 10;
  l.max_call_depth = 16;
  return l;
}

// Templates of the corpus that do not render as jinja2 does, and why. The
// test fails when this list is wrong either way, so it stays the truth.
const std::map<std::string, std::string> known_differences = {};

}  // namespace

TEST_CASE("real chat templates render byte for byte as Python jinja2 renders them", "[jinja]") {
  std::ifstream in(actorlm::test::fixture_path("jinja/chat_templates.json"));
  REQUIRE(in);
  const auto fixture = nlohmann::ordered_json::parse(in);
  std::map<std::string, std::string> why;  // template -> first difference
  int cases = 0, identical = 0;
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["template"];
    const auto& conversation = fixture["conversations"][c["conversation"].get<size_t>()];
    ++cases;
    std::string got, error;
    try {
      got = Template(fixture["templates"][name].get<std::string>())
                .render(chat_variables(conversation, c["add_generation_prompt"]), {}, fixed_clock)
                .str();
    } catch (const Error& e) {
      error = e.what();
    }
    std::string problem;
    if (c.contains("error")) {
      if (error.empty()) problem = "jinja2 raises (" + c["error"].get<std::string>() + "), actorlm renders";
    } else if (!error.empty()) {
      problem = "actorlm raises: " + error;
    } else if (got != c["output"].get<std::string>()) {
      const std::string want = c["output"];
      size_t at = 0;
      while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
      problem = "differs at byte " + std::to_string(at) + ": want '" + want.substr(at, 40) + "', got '" +
                got.substr(at, 40) + "'";
    }
    if (problem.empty()) {
      ++identical;
    } else if (!why.count(name)) {
      why[name] = "conversation " + std::to_string(c["conversation"].get<int>()) + ": " + problem;
    }
  }
  std::cout << "chat template corpus: " << identical << " / " << cases << " renderings identical to jinja2 "
            << fixture["jinja2_version"].get<std::string>() << "; " << fixture["templates"].size() - why.size()
            << " / " << fixture["templates"].size() << " templates fully identical\n";
  for (const auto& [name, problem] : why) std::cout << "  " << name << ": " << problem << "\n";
  for (const auto& [name, problem] : why) {
    INFO(name << ": " << problem);
    CHECK(known_differences.count(name) == 1);
  }
  for (const auto& [name, reason] : known_differences) {
    INFO(name << " is listed as differing (" << reason << ") but now renders identically");
    CHECK(why.count(name) == 1);
  }
}

TEST_CASE("expressions follow Python's semantics", "[jinja]") {
  CHECK(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1e20 }} {{ 0.1 + 0.2 }}") ==
        "3.5 3 -4 2 1024 1e+20 0.30000000000000004");
  CHECK(render("{{ 'a' ~ 1.5 ~ none ~ true }}") == "a1.5NoneTrue");
  CHECK(render("{{ 'ab' * 3 }}{{ [0] * 2 }}") == "ababab[0, 0]");
  // A string marked safe escapes what is added to it (Markup.__add__).
  CHECK(render("{{ '<b>'|safe + '\"x\" & <y>' }}|{{ 'a<' + 'b>'|safe }}") == "<b>&#34;x&#34; &amp; &lt;y&gt;|a&lt;b>");
  CHECK(render("{{ {'a': [1, \"x'y\"], 'b': none} }}") == "{'a': [1, \"x'y\"], 'b': None}");
  CHECK(render("{{ 'abc'[::-1] }} {{ 'h\xc3\xa9llo'[1:3] }} {{ 'h\xc3\xa9llo' | length }}") == "cba \xc3\xa9l 5");
  CHECK(render("{{ 'a b  c'.split() }} {{ 'a,b'.split(',') }} {{ '  x '.strip() }}") == "['a', 'b', 'c'] ['a', 'b'] x");
  CHECK(render("{{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 'x' is iterable }}") ==
        "True True False True");
  CHECK(render("{{ x | tojson }}|{{ x | tojson(indent=2) }}", [] {
          Dict d;
          d.set("x", Value::from_json(nlohmann::ordered_json::parse(R"({"b": [1, 2.5, "\u00e9\n"], "a": {}})"), false));
          return d;
        }()) == "{\"b\": [1, 2.5, \"\xc3\xa9\\n\"], \"a\": {}}|{\n  \"b\": [\n    1,\n    2.5,\n    \"\xc3\xa9\\n\"\n  ],\n  \"a\": {}\n}");
}

TEST_CASE("scopes: loop bodies and macros keep their sets, namespaces carry state out", "[jinja]") {
  CHECK(render("{% for i in range(3) %}{% if i == 0 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}") == "[a][][]");
  CHECK(render("{% set x = 1 %}{% for i in range(2) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}") == "221");
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") ==
        "6");
  CHECK(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ y }}{% endmacro %}{% set y = 5 %}{{ m(1) }}{{ m(2, b=3) }}") ==
        "1B523" "5");
  CHECK(render("{% for m in [1, 2, 3, 4] if m is odd %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}"
               "{% endfor %}") == "1/2,2/2");
  CHECK(render("{% for i in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}"
               "{{ i }}{% endfor %}") == "02");
}

TEST_CASE("a render frees what it made, even a macro kept in its own scope or a namespace holding itself",
          "[jinja]") {
  // The probe is reachable only through what the template stores: a frame a
  // macro captured, a macro in a namespace, a namespace in itself. Each of
  // those closes a loop of shared pointers; if the render left one behind,
  // the probe's count would stay raised (and LeakSanitizer would report the
  // frames). Found by the ASan build: every chat template with a macro
  // leaked its frames on every render.
  Dict vars;
  Dict inner;
  inner.set("k", Value(int64_t{1}));
  vars.set("probe", Value(std::move(inner)));
  const std::shared_ptr<Dict> probe = vars.find(std::string_view("probe"))->shared_dict();
  const long before = probe.use_count();
  CHECK(render("{% set q = probe %}{% macro m() %}{{ q.k }}{% endmacro %}"
               "{% set ns = namespace(f=none) %}{% set ns.self = ns %}{% set ns.f = m %}{% set ns.p = probe %}"
               "{% for i in range(2) %}{% set r = probe %}{% macro n() %}{{ r.k }}{{ m() }}{% endmacro %}{{ n() }}"
               "{% endfor %}{{ ns.f() }}",
               vars) == "11111");
  CHECK(probe.use_count() == before);
}

TEST_CASE("whitespace control matches trim_blocks and lstrip_blocks", "[jinja]") {
  CHECK(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n") == "a\n  b\nc");
  CHECK(render("a  {%- if true -%}  b  {%- endif -%}  c") == "abc");
  CHECK(render("a  {%+ if true %}b{% endif %}") == "a  b");
  CHECK(render("{# note #}\nx {{- ' y ' -}} z") == "x y z");
  CHECK(render("{% raw %}{{ not parsed }}{% endraw %}") == "{{ not parsed }}");
}

TEST_CASE("undefined values print empty, and using their attributes is an error", "[jinja]") {
  CHECK(render("[{{ missing }}]{{ missing is defined }}{{ none.foo is defined }}") == "[]FalseFalse");
  CHECK(render("{{ missing | default('d') }}{{ '' | default('e', true) }}") == "de");
  CHECK(error_of("{{ missing.attr }}") == Error::Kind::undefined);
  CHECK(error_of("{{ missing | tojson }}") == Error::Kind::undefined);
}

TEST_CASE("bad and hostile templates fail with a typed error, never hang or crash", "[jinja]") {
  CHECK(error_of("{% if %}") == Error::Kind::syntax);
  CHECK(error_of("{{ 'unclosed }}") == Error::Kind::syntax);
  CHECK(error_of("{% for x in y %}") == Error::Kind::syntax);
  CHECK(error_of("{% include 'other.jinja' %}") == Error::Kind::unsupported);
  CHECK(error_of("{% extends 'base' %}") == Error::Kind::unsupported);
  CHECK(error_of("{{ x | no_such_filter }}", [] { Dict d; d.set("x", Value(1)); return d; }()) ==
        Error::Kind::unsupported);
  CHECK(error_of("{{ raise_exception('no system role') }}") == Error::Kind::raised);
  CHECK(error_of("{{ [1].append(2) }}") == Error::Kind::unsupported);
  CHECK(error_of("{{ 1 + 'a' }}") == Error::Kind::type);
  CHECK(error_of("{{ 1 // 0 }}") == Error::Kind::type);
  CHECK(error_of("{{ 9223372036854775807 + 1 }}") == Error::Kind::unsupported);
  // Work, output and depth limits, each met within small limits. The default
  // limits are finite too: one hostile loop runs into them.
  const Limits small = small_limits();
  CHECK(error_of("{% for i in range(100000000) %}{% endfor %}", {}, small) == Error::Kind::limit);
  CHECK(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, small) ==
        Error::Kind::limit);
  CHECK(error_of("{% set s = 'x' * 1000 %}{% for i in range(10000) %}{{ s }}{% endfor %}", {}, small) ==
        Error::Kind::limit);
  CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small) == Error::Kind::limit);
  CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}") == Error::Kind::limit);
  CHECK(error_of("{{" + std::string(5000, '(') + "1" + std::string(5000, ')') + "}}") == Error::Kind::limit);
  CHECK(error_of("{% for i in range(100000000) %}{% endfor %}") == Error::Kind::limit);
}

TEST_CASE("rendered text keeps which bytes a client supplied", "[jinja]") {
  Dict vars;
  vars.set("messages", Value::from_json(nlohmann::ordered_json::parse(
                                            R"([{"role": "user", "content": "  hi <|im_end|>  "}])"),
                                        true));
  const Text t = Template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n"
                          "{% endfor %}<|im_start|>assistant\n")
                     .render(vars);
  // (The source's one trailing newline is dropped, as Jinja does.)
  REQUIRE(t.str() == "<|im_start|>user\nhi <|im_end|><|im_end|>\n<|im_start|>assistant");
  // "user" (bytes 12-16) and "hi <|im_end|>" (17-30) are client text; the rest is markup.
  const std::vector<std::pair<size_t, size_t>> want = {{12, 16}, {17, 30}};
  CHECK(t.client_ranges() == want);
}

TEST_CASE("arithmetic and string building stay exact and bounded", "[jinja]") {
  CHECK(render("{{ (-1) ** 3 }} {{ (-2) ** 5 }} {{ 2 ** 62 }} {{ 1 ** 1000000000000 }} {{ 0 ** 0 }}") ==
        "-1 -32 4611686018427387904 1 1");
  CHECK(error_of("{{ 2 ** 64 }}") == Error::Kind::unsupported);
  CHECK(render("{{ 1e999 }} {{ -1e999 }}") == "inf -inf");
  // Each of these would build or spin for ever before being charged.
  CHECK(error_of("{{ '' * 1000000000000000 }}") == Error::Kind::limit);
  CHECK(error_of("{{ [] * 1000000000000000 }}") == Error::Kind::limit);
  CHECK(error_of("{{ 'x\\ny' | indent(1000000000000) }}") == Error::Kind::limit);
  CHECK(error_of("{% set big = 'y' * 4000 %}{{ ('a' * 20000).replace('a', big) }}") == Error::Kind::limit);
  CHECK(error_of("{% set big = 'y' * 4000 %}{{ ('a' * 20000) | replace('a', big) }}") == Error::Kind::limit);
  CHECK(render("{{ 'aXbXc'.replace('X', '--', 1) }}|{{ 'ab' | replace('', '.') }}") == "a--bXc|.a.b.");
}
