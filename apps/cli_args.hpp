#pragma once
// Minimal flag parsing for the actorlm subcommands: --name value pairs and
// boolean switches, every number range-checked with a message naming the flag.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorlm::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // value_flags take a value; switches do not. Short aliases map to long names.
  Args(int argc, char** argv, int first, const std::set<std::string>& value_flags,
       const std::set<std::string>& switches, const std::map<std::string, std::string>& aliases = {});

  bool has(const std::string& name) const { return values_.count(name) || switches_.count(name); }
  std::optional<std::string> str(const std::string& name) const;  // the last one given
  std::vector<std::string> all(const std::string& name) const;     // every one, in order
  int64_t integer(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double number(const std::string& name, double fallback, double lo, double hi) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> switches_;
};

}  // namespace actorlm::cli
