#include "model/adapter_dir.hpp"

#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace actorlm {

namespace fs = std::filesystem;

AdapterDir::AdapterDir(const std::string& dir) {
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec || !fs::is_directory(root, ec)) throw std::invalid_argument("--lora-dir " + dir + " is not a folder");
  root_ = root.string();
}

std::optional<std::string> AdapterDir::resolve(const std::string& name, std::string* why) const {
  if (!enabled()) {
    *why = "loading adapters at run time is off here (start it with --lora-dir DIR)";
    return std::nullopt;
  }
  if (name.find('\0') != std::string::npos) {
    *why = "the path holds a NUL byte";
    return std::nullopt;
  }
  std::error_code ec;
  // Relative names are taken from the folder; canonical() follows every
  // link, so what is compared is where the bytes really are.
  const fs::path real = fs::canonical(fs::path(root_) / name, ec);
  const std::string s = real.string();
  if (ec || s.size() <= root_.size() || s.compare(0, root_.size(), root_) != 0 || s[root_.size()] != '/') {
    *why = "no adapter file by that name in --lora-dir";
    return std::nullopt;
  }
  if (!fs::is_regular_file(real, ec)) {
    *why = "not a file";
    return std::nullopt;
  }
  return s;
}

}  // namespace actorlm
