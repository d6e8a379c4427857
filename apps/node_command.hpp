#pragma once

namespace actorlm {

// `actorlm node`: a cluster worker node (see apps/node_command.cpp's usage).
int node_command(int argc, char** argv, int first);

}  // namespace actorlm
