#pragma once
// The engine's state as Prometheus text (/metrics) and as JSON (/nodes).

#include <nlohmann/json.hpp>
#include <string>

#include "actors/engine.hpp"

namespace actorlm {

std::string metrics_text(const EngineStatsSnapshot& st);
// A cluster head's worker nodes (an empty list for a local engine).
nlohmann::json nodes_json(const EngineStatsSnapshot& st);

}  // namespace actorlm
