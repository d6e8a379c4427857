#pragma once
// A stateful actor whose mailbox is shut to exit and down messages.
//
// Any peer that can reach the middleman can send either, naming any actor:
// the sender and the `source` field are the peer's claims. CAF acts on them
// before the behavior sees them, and an exit message with exit_reason::kill
// ends an actor whatever its exit handler says. So an actor that peers can
// reach (a head's router, a worker link, a node's gateway) must not rely on
// monitors or links: it learns that a peer left from a functor attached to
// the peer's proxy in this process (caf::actor::attach_functor), and stops
// on a message carrying a token that never leaves the process.
//
// Use: system.spawn<ExitProofActor<State, Args...>>(behavior_fn, args...),
// where behavior_fn is caf::behavior(caf::stateful_actor<State>*, Args...).

#include <caf/mailbox_element.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <cstdio>
#include <tuple>

namespace actorlm {

// True for the messages a peer could use to end or confuse an actor.
inline bool is_exit_or_down(const caf::mailbox_element& m) {
  return m.content().match_elements<caf::exit_msg>() || m.content().match_elements<caf::down_msg>();
}

template <class State, class... Args>
class ExitProofActor : public caf::stateful_actor<State> {
 public:
  using Super = caf::stateful_actor<State>;
  using BehaviorFn = caf::behavior (*)(Super*, Args...);

  ExitProofActor(caf::actor_config& cfg, BehaviorFn fn, Args... args)
      : Super(cfg), fn_(fn), args_(std::move(args)...) {}

  caf::behavior make_behavior() override {
    return std::apply([this](Args&... a) { return fn_(this, std::move(a)...); }, args_);
  }

  using Super::enqueue;
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr && is_exit_or_down(*ptr)) {
      std::fprintf(stderr, "%s: dropped an exit or down message\n", State::name);
      return;
    }
    Super::enqueue(std::move(ptr), eu);
  }

 private:
  BehaviorFn fn_;
  std::tuple<Args...> args_;
};

}  // namespace actorlm
