#pragma once
// Runs the `actorlm` binary (ACTORLM_BINARY) as a user does, through the
// shell: its exit code and what it printed.

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace actorlm::test {

struct CommandResult {
  int code = -1;
  std::string out;
};

// args as typed after `actorlm`; stderr: "2>&1" to read it with stdout,
// "2>/dev/null" for stdout alone.
inline CommandResult run_actorlm(const std::string& args, const std::string& stderr_to) {
  const std::string cmd = std::string(ACTORLM_BINARY) + " " + args + " " + stderr_to;
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace actorlm::test
