#pragma once

namespace actorlm {

// Prints a short walk through the KV store (prefix reuse, pool accounting).
// Returns a process exit code.
int run_kv_demo();

}  // namespace actorlm
