#include "jinja/template.hpp"

#include <ctime>

#include "jinja/interpreter.hpp"
#include "jinja/parser.hpp"

namespace actorlm::jinja {

std::string strftime_local(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return std::string(buf, n);
}

Template::Template(std::string_view source) : body_(parse(source)) {}

Text Template::render(const Dict& variables, const Limits& limits, const Clock& clock) const {
  Interpreter in(variables, limits, clock);
  return in.run(*body_);
}

}  // namespace actorlm::jinja
