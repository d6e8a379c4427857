#pragma once

namespace actorlm {

// `actorlm chat`: an interactive multi-turn chat on the engine (all six
// actors), with line editing and history (libedit). argv[first..] are flags.
int chat_command(int argc, char** argv, int first);

}  // namespace actorlm
