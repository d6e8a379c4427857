#pragma once
// A cluster node's LoRA adapters as its heads change them at run time
// (POST /v1/load_lora_adapter on a head, which asks every node that runs
// whole requests: cluster/roles/router_actor.cpp). Plain bookkeeping for the
// node's gateway, no CAF: a head may have the node read only a file in the
// node's own --lora-dir, within the node's own --max-lora-memory-mb, under
// a name and id new on the node; and the node's welcome lists what it holds
// now, so that a head joining later sees the same set.
//
// One change at a time: admit() refuses another until settle() has the
// scheduler's answer to the last.

#include <cstdint>
#include <string>
#include <vector>

#include "messages/envelope.hpp"
#include "model/adapter_dir.hpp"

namespace actorlm {

struct NodeAdapter {
  std::string name;
  int32_t id = 0;
  std::string fingerprint;  // model_fingerprint() of its file
  int64_t bytes = 0;        // as kept (half precision)
};

// `w`'s adapter list becomes `adapters`, in their order.
void describe_adapters(const std::vector<NodeAdapter>& adapters, fb::NodeWelcomeT& w);

class NodeAdapters {
 public:
  NodeAdapters() = default;
  NodeAdapters(AdapterDir dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  // The adapters the node started with (--lora), once they are loaded.
  void started_with(std::vector<NodeAdapter> loaded) { loaded_ = std::move(loaded); }

  // Checks a head's change and readies it for the scheduler: a load's name
  // valid and new here, its id free, its file in --lora-dir (`path` becomes
  // the file's real path) and its budget what --max-lora-memory-mb leaves;
  // an unload's id held here. Empty when the change may go on, else why not.
  std::string admit(fb::AdapterChangeT& change);
  // The scheduler's answer to the admitted change (an error, or done): the
  // list follows a change that was done, and a load's answer gains the
  // file's fingerprint.
  void settle(const fb::AdapterChangeT& change, fb::AdapterReplyT& reply);

  const std::vector<NodeAdapter>& loaded() const { return loaded_; }
  // `w`'s adapter list becomes this one, in the order of the changes.
  void describe(fb::NodeWelcomeT& w) const { describe_adapters(loaded_, w); }
  // What the node's other heads are told of a change that was done: `sent`
  // as the head sent it (before admit() resolved its path), the file's
  // fingerprint for a load, and the list after it.
  fb::AdapterNewsT news(const fb::AdapterChangeT& sent, const fb::AdapterReplyT& reply) const;

 private:
  AdapterDir dir_;
  int64_t max_bytes_ = 0;
  std::vector<NodeAdapter> loaded_;
  bool busy_ = false;
  std::string fingerprint_;  // of the file admit() let through
};

}  // namespace actorlm
