#include "apps/cli_args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace actorlm::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& value_flags,
           const std::set<std::string>& switches, const std::map<std::string, std::string>& aliases) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (auto it = aliases.find(a); it != aliases.end()) a = it->second;
    if (value_flags.count(a)) {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      values_[a].push_back(argv[++i]);
    } else if (switches.count(a)) {
      switches_.insert(a);
    } else {
      throw UsageError("unknown argument '" + a + "'");
    }
  }
}

std::optional<std::string> Args::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  auto v = str(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno != 0 || end == v->c_str() || *end != '\0' || x < lo || x > hi) {
    throw UsageError(name + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                     *v + "'");
  }
  return x;
}

double Args::number(const std::string& name, double fallback, double lo, double hi) const {
  auto v = str(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v->c_str(), &end);
  if (errno != 0 || end == v->c_str() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi) {
    throw UsageError(name + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                     *v + "'");
  }
  return x;
}

}  // namespace actorlm::cli
