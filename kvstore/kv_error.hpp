#pragma once

#include <stdexcept>

namespace actorlm {

// A caller broke a KV-store contract: double free, out-of-range slot, stale
// node id, misaligned insert. These are bugs in the caller, reported loudly
// instead of corrupting the pools.
class KvStoreError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace actorlm
