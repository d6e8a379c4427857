#pragma once
// A model's prepared weight matrices (Backend::prepare_weights: the CPU
// backend's 8-row tiles), shared by the runners that hold the same loaded
// weights at once. A second runner over one model (a draft model that is
// the target's own file, several engines in one process, the engines of a
// test) then takes the first one's copy: the weights are held once, and the
// file is not packed again, which on the CPU also meant reading it from
// disk again, since packing pages the file's copy out.
//
// Entries are keyed by the address of the source bytes, so only bytes this
// object keeps alive itself are cached (keep()): while an entry exists, its
// address cannot be freed and handed to another matrix. Thread-safe.

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <typeindex>

#include "kernels/backend.hpp"

namespace actorlm {

class PreparedWeights {
 public:
  // Makes matrices whose bytes start at bytes.get() cacheable, and holds
  // those bytes as long as this object lives.
  void keep(std::shared_ptr<const void> bytes);

  // backend.prepare_weights(w), prepared once per kept address, shape and
  // kind of backend (a layout is the backend class's own); bytes not kept
  // go straight to the backend every time.
  PreparedMatrix prepare(Backend& backend, const MatrixView& w);

  // How many prepared matrices are held (for tests and reports).
  size_t size() const;

 private:
  using Key = std::tuple<const void*, int64_t, int64_t, GgmlType, std::type_index>;
  mutable std::mutex mutex_;
  std::map<const void*, std::shared_ptr<const void>> kept_;
  std::map<Key, PreparedMatrix> prepared_;
};

}  // namespace actorlm
