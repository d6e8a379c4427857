#include "jinja/template.hpp"

#include <ctime>
#include <new>
#include <stdexcept>

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

namespace {

// Only jinja::Error leaves the engine: anything else the standard library
// throws on the way (an allocation refused, a number out of range) becomes
// one too, so callers need one catch.
template <class F>
auto as_jinja_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(Error::Kind::limit, "template needs more memory than there is");
  } catch (const std::exception& e) {
    throw Error(Error::Kind::type, e.what());
  }
}

}  // namespace

Template::Template(std::string_view source) : body_(as_jinja_error([&] { return parse(source); })) {}

Text Template::render(const Dict& variables, const Limits& limits, const Clock& clock) const {
  return as_jinja_error([&] {
    Interpreter in(variables, limits, clock);
    return in.run(*body_);
  });
}

}  // namespace actorlm::jinja
