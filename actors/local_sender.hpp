#pragma once
// Whether the message an actor is handling was sent by an actor of its own
// process. The cluster's actors hand their handles to other nodes (which
// stream replies back to them), so any node can address them; orders meant
// only for this process's own actors (route, cancel, send KV, stop) are
// refused when the sender lives elsewhere.

#include <caf/actor_control_block.hpp>
#include <caf/node_id.hpp>

namespace actorlm {

template <class Self>
bool from_this_process(Self* self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

}  // namespace actorlm
