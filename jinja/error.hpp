#pragma once
// The one exception the template engine throws, with a kind to branch on
// (never the message's text) and the template line it happened at.

#include <stdexcept>
#include <string>

namespace actorlm::jinja {

class Error : public std::runtime_error {
 public:
  enum class Kind {
    syntax,       // the template does not parse
    unsupported,  // valid Jinja this engine does not implement (the message names it)
    undefined,    // an undefined value used where Jinja raises (attribute of undefined...)
    type,         // an operation on values of the wrong type (Python's TypeError)
    raised,       // the template called raise_exception(message)
    limit,        // the render ran past its work, output or depth limit
  };
  Error(Kind kind, const std::string& message, int line = 0)
      : std::runtime_error(line > 0 ? "line " + std::to_string(line) + ": " + message : message),
        kind_(kind),
        line_(line) {}
  Kind kind() const { return kind_; }
  int line() const { return line_; }

 private:
  Kind kind_;
  int line_;
};

}  // namespace actorlm::jinja
