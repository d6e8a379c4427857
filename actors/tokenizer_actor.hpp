#pragma once
// The tokenizer actor: takes (generate_atom, WireMessage{GenerateRequest},
// client), renders chat messages through the model's template, encodes, and
// sends the TokenizedRequest both to the detokenizer (registration of the
// client and its stop strings) and to `scheduler` (the local scheduler, or
// the head's router in a cluster). Bad requests get an error TextDelta.

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

caf::actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tok, caf::actor scheduler,
                           caf::actor detokenizer);

}  // namespace actorlm
