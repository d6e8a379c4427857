#pragma once
// Where the default model lives: $ACTORLM_MODEL if set, else
// ${ACTORLM_CACHE:-$HOME/.cache/actorlm}/SmolLM2-135M-Instruct.Q4_1.gguf, which
// scripts/fetch_model.sh puts there (and checks its sha256).

#include <cstdlib>
#include <string>

namespace actorlm {

inline constexpr const char* default_model_file = "SmolLM2-135M-Instruct.Q4_1.gguf";

inline std::string default_model_path() {
  if (const char* m = std::getenv("ACTORLM_MODEL"); m && *m) return m;
  std::string cache;
  if (const char* c = std::getenv("ACTORLM_CACHE"); c && *c) {
    cache = c;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home && *home ? home : "/root") + "/.cache/actorlm";
  }
  return cache + "/" + default_model_file;
}

}  // namespace actorlm
