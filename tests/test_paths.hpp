#pragma once
// Paths tests need: the source tree (fixtures) and the default model, which
// scripts/setup.sh fetches before the suite runs.

#include <cstdlib>
#include <string>

namespace actorlm::test {

inline std::string source_dir() { return ACTORLM_SOURCE_DIR; }

inline std::string fixture_path(const std::string& relative) {
  return source_dir() + "/tests/fixtures/" + relative;
}

}  // namespace actorlm::test
