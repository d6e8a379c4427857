#pragma once

namespace actorlm {

// `actorlm run -p PROMPT [...]`: one completion, streamed to stdout. Runs the
// model in-process (no actors). argv[first..] are the flags. Returns an exit code.
int run_command(int argc, char** argv, int first);

}  // namespace actorlm
