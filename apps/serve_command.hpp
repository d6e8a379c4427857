#pragma once

namespace actorlm {

// `actorlm serve`: the engine behind an OpenAI-compatible HTTP API.
int serve_command(int argc, char** argv, int first);

}  // namespace actorlm
