// Time to render each chat template of the corpus (tests/fixtures/jinja/
// chat_templates.json: llama.cpp's 70 real templates) for one request: the
// tools conversation (system, user, assistant tool call, tool result, one
// tool), after the template was parsed once, as the tokenizer actor does.
// Prints the mean and the slowest template.
//
//   build/bench/chat_template_bench [repeats]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "jinja/template.hpp"

using namespace actorlm::jinja;

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  std::ifstream in(std::string(ACTORLM_SOURCE_DIR) + "/tests/fixtures/jinja/chat_templates.json");
  if (!in) {
    std::fprintf(stderr, "cannot read the template corpus\n");
    return 1;
  }
  const auto fx = nlohmann::ordered_json::parse(in);
  const auto& conv = fx["conversations"][4];
  Dict vars;
  vars.set("messages", Value::from_json(conv["messages"], true));
  vars.set("tools", Value::from_json(conv["tools"], true));
  vars.set("add_generation_prompt", Value(true));
  vars.set("bos_token", Value::markup("<s>"));
  vars.set("eos_token", Value::markup("</s>"));
  std::vector<std::pair<double, std::string>> times;
  for (const auto& [name, source] : fx["templates"].items()) {
    const Template t(source.get<std::string>());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) {
      try {
        (void)t.render(vars);
      } catch (const Error&) {  // a template that refuses this conversation is timed up to its refusal
      }
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    times.emplace_back(us / repeats, name);
  }
  std::sort(times.begin(), times.end());
  double total = 0;
  for (const auto& [us, name] : times) total += us;
  std::printf("templates %zu, render per request: mean %.1f us, median %.1f us, slowest %.1f us (%s)\n", times.size(),
              total / static_cast<double>(times.size()), times[times.size() / 2].first, times.back().first,
              times.back().second.c_str());
  return 0;
}
