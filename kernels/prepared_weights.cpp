#include "kernels/prepared_weights.hpp"

#include <typeinfo>

namespace actorlm {

void PreparedWeights::keep(std::shared_ptr<const void> bytes) {
  if (!bytes) return;
  std::lock_guard lock(mutex_);
  kept_.try_emplace(bytes.get(), std::move(bytes));
}

PreparedMatrix PreparedWeights::prepare(Backend& backend, const MatrixView& w) {
  std::lock_guard lock(mutex_);
  if (!kept_.count(w.data)) return backend.prepare_weights(w);
  // Under the lock: a second runner loading at the same time waits for the
  // first one's copy rather than making its own.
  Key key{w.data, w.rows, w.cols, w.type, std::type_index(typeid(backend))};
  auto it = prepared_.find(key);
  if (it == prepared_.end()) it = prepared_.emplace(key, backend.prepare_weights(w)).first;
  return it->second;
}

size_t PreparedWeights::size() const {
  std::lock_guard lock(mutex_);
  return prepared_.size();
}

}  // namespace actorlm
