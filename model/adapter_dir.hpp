#pragma once
// The folder adapters may be loaded from at run time (--lora-dir): by POST
// /v1/load_lora_adapter on a server, and on a cluster node by its heads. A
// client names a file in it; nothing outside it is opened, whatever the
// name holds ("..", an absolute path elsewhere, a symbolic link leading
// out). No folder: loading at run time is off.

#include <optional>
#include <string>

namespace actorlm {

class AdapterDir {
 public:
  AdapterDir() = default;
  // Throws std::invalid_argument when `dir` is not a folder.
  explicit AdapterDir(const std::string& dir);

  bool enabled() const { return !root_.empty(); }
  // The file's real path, when it is a regular file inside the folder;
  // otherwise nullopt and *why says what is wrong (without echoing more of
  // the folder than the client gave).
  std::optional<std::string> resolve(const std::string& name, std::string* why) const;

 private:
  std::string root_;  // canonical, without a trailing '/'
};

}  // namespace actorlm
