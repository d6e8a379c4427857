#include "cluster/roles/node_adapters.hpp"

#include <algorithm>
#include <exception>

#include "actors/engine.hpp"
#include "model/model_fingerprint.hpp"
#include "scheduler/request.hpp"

namespace actorlm {

std::string NodeAdapters::admit(fb::AdapterChangeT& change) {
  if (busy_) return "another adapter change is still under way on this node";
  auto named = std::find_if(loaded_.begin(), loaded_.end(), [&](const NodeAdapter& a) { return a.name == change.name; });
  auto same_id = std::find_if(loaded_.begin(), loaded_.end(), [&](const NodeAdapter& a) { return a.id == change.id; });
  if (change.id <= 0 || change.id > kMaxAdapterId) return "adapter id " + std::to_string(change.id) + " out of range";
  if (!change.load) {
    if (same_id == loaded_.end()) return "no adapter #" + std::to_string(change.id) + " is loaded on this node";
    busy_ = true;
    return "";
  }
  if (!valid_adapter_name(change.name)) return "an adapter name is 1-64 of letters, digits, '.', '_' and '-' (not 'default')";
  if (named != loaded_.end()) return "an adapter named '" + change.name + "' is loaded on this node already";
  if (same_id != loaded_.end()) return "adapter #" + std::to_string(change.id) + " is another adapter on this node";
  std::string why;
  const auto path = dir_.resolve(change.path, &why);
  if (!path) return why;
  try {
    fingerprint_ = model_fingerprint(*path);
  } catch (const std::exception& e) {
    return std::string("cannot read the adapter file: ") + e.what();
  }
  int64_t used = 0;
  for (const NodeAdapter& a : loaded_) used += a.bytes;
  change.path = *path;
  change.max_bytes = std::max<int64_t>(max_bytes_ - used, 0);
  busy_ = true;
  return "";
}

void NodeAdapters::settle(const fb::AdapterChangeT& change, fb::AdapterReplyT& reply) {
  busy_ = false;
  if (!reply.error.empty()) return;
  if (change.load) {
    loaded_.push_back({change.name, change.id, fingerprint_, reply.bytes});
    reply.fingerprint = fingerprint_;
  } else {
    std::erase_if(loaded_, [&](const NodeAdapter& a) { return a.id == change.id; });
  }
}

void describe_adapters(const std::vector<NodeAdapter>& adapters, fb::NodeWelcomeT& w) {
  w.adapters.clear();
  for (const NodeAdapter& a : adapters) {
    auto na = std::make_unique<fb::NodeAdapterT>();
    na->name = a.name;
    na->id = a.id;
    na->fingerprint = a.fingerprint;
    w.adapters.push_back(std::move(na));
  }
}

fb::AdapterNewsT NodeAdapters::news(const fb::AdapterChangeT& sent, const fb::AdapterReplyT& reply) const {
  fb::AdapterNewsT n;
  n.change = std::make_unique<fb::AdapterChangeT>(sent);
  n.change->max_bytes = 0;  // this node's budget, not the other heads' business
  if (sent.load) n.fingerprint = reply.fingerprint;
  fb::NodeWelcomeT w;
  describe(w);
  n.adapters = std::move(w.adapters);
  return n;
}

}  // namespace actorlm
