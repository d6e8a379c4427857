// Embedding actorlm in an app that is itself built of CAF actors: one of the
// app's actors sends the engine a GenerateRequest message and receives
// TextDelta messages, all FlatBuffers, like any other actor would.
//
//   ./build/examples/embedded_actors [model.gguf]

#include <caf/all.hpp>
#include <cstdio>

#include "actors/engine.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "messages/sampling_conversion.hpp"
#include "model/default_model.hpp"

namespace {

// The app's own actor: asks one question, prints the streamed answer, quits.
caf::behavior asker(caf::event_based_actor* self, caf::actor engine, std::string question, bool* ok) {
  actorlm::fb::GenerateRequestT req;
  req.request_id = 1;
  auto m = std::make_unique<actorlm::fb::ChatMessageT>();
  m->role = "user";
  m->content = std::move(question);
  req.messages.push_back(std::move(m));
  actorlm::SamplingParams greedy;
  greedy.temperature = 0;
  req.sampling = actorlm::msg::to_fb(greedy);
  req.stop = std::make_unique<actorlm::fb::StopConditionsT>();
  req.stop->max_new_tokens = 32;
  self->send(engine, actorlm::generate_atom::value, actorlm::WireMessage{actorlm::msg::pack(req)},
             caf::actor_cast<caf::actor>(self));
  return {[=](const actorlm::WireMessage& in) {
    auto delta = actorlm::msg::open<actorlm::fb::TextDelta>(in.bytes);
    if (!delta) {
      std::printf("\nbad message: %s\n", delta.error.c_str());
      self->quit();
      return;
    }
    if (delta.message->text()) std::fputs(delta.message->text()->c_str(), stdout);
    std::fflush(stdout);
    if (delta.message->finish_reason() != actorlm::fb::FinishReason::None) {
      *ok = delta.message->finish_reason() == actorlm::fb::FinishReason::Stop ||
            delta.message->finish_reason() == actorlm::fb::FinishReason::Length;
      std::printf("\n");
      self->quit();
    }
  }};
}

}  // namespace

int main(int argc, char** argv) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  actorlm::EngineConfig config;
  config.model_path = argc > 1 ? argv[1] : actorlm::default_model_path();
  config.kv_tokens = 4096;
  actorlm::Engine engine(system, config);
  bool ok = false;
  // Wait for the asker to finish (the engine's actors keep running until the
  // Engine is destroyed, so waiting for all actors would never end).
  caf::scoped_actor self{system};
  auto a = system.spawn(asker, engine.handle(), std::string("Name the capital of France."), &ok);
  self->monitor(a);
  self->receive([](const caf::down_msg&) {});
  return ok ? 0 : 1;
}
