// Embedding actorlm without writing CAF code: the app owns an actor system,
// the Engine lives in it, and plain function calls stream answers back.
//
//   ./build/examples/embedded_facade [model.gguf]

#include <caf/all.hpp>
#include <cstdio>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "model/default_model.hpp"

int main(int argc, char** argv) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};

  actorlm::EngineConfig config;
  config.model_path = argc > 1 ? argv[1] : actorlm::default_model_path();
  config.kv_tokens = 8192;
  actorlm::Engine engine(system, config);

  // Streaming: text arrives piece by piece.
  actorlm::GenerateOptions ask;
  ask.prompt = "Name the capital of France.";
  ask.sampling.temperature = 0;
  ask.max_new_tokens = 32;
  std::printf("streamed: ");
  actorlm::TextDeltaEvent end = engine.generate(ask, [](const actorlm::TextDeltaEvent& d) {
    std::fputs(d.text.c_str(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n(%d prompt tokens, %d generated, finish %s)\n", end.prompt_tokens, end.completion_tokens,
              actorlm::finish_reason_name(end.finish));

  // Several threads at once: the scheduler batches them together.
  std::vector<std::string> answers(3);
  std::vector<std::thread> threads;
  const char* questions[] = {"Name a color.", "Name a fruit.", "Name a planet."};
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      actorlm::GenerateOptions o;
      o.prompt = questions[i];
      o.sampling.temperature = 0;
      o.max_new_tokens = 16;
      answers[static_cast<size_t>(i)] = engine.generate_text(o);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) std::printf("%s -> %s\n", questions[i], answers[static_cast<size_t>(i)].c_str());

  auto stats = engine.stats();
  std::printf("prompt tokens %lld, %.0f%% from the radix cache\n",
              static_cast<long long>(stats.scheduler.prompt_tokens), 100 * stats.scheduler.cache_hit_rate());
  return end.finish == actorlm::FinishReason::stop || end.finish == actorlm::FinishReason::length ? 0 : 1;
}
