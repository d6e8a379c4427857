#pragma once
// The detokenizer actor: turns TokenStream items into TextDelta messages for
// each request's client (incremental UTF-8, stop strings). A request is
// registered by the tokenizer (register_atom) with its client; items that
// arrive before the registration are kept until it does. A matched stop
// string is reported to the scheduler (stop_atom), which the engine names
// after spawning: the first caf::actor the detokenizer receives.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

caf::actor spawn_detokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tok);

}  // namespace actorlm
