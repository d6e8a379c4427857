#pragma once
// A chat template (Jinja2, as Hugging Face renders them) parsed once and
// rendered many times. The engine is a sandbox: a template sees only the
// variables it is given and a few pure functions (range, namespace, dict,
// raise_exception, strftime_now), can mutate only namespace() objects, and
// runs under limits on work, output size and macro depth, so a hostile
// template fails with Error::Kind::limit instead of hanging or eating memory.
// Thread-safe: render() keeps its state on the stack.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "jinja/ast.hpp"
#include "jinja/error.hpp"
#include "jinja/text.hpp"
#include "jinja/value.hpp"

namespace actorlm::jinja {

struct Limits {
  // Abstract work units: one per expression evaluated or statement run, one
  // per byte of every string or list element built. ~1 s of rendering.
  uint64_t max_work = 50'000'000;
  size_t max_output = size_t{4} << 20;  // bytes of rendered text
  int max_call_depth = 64;              // nested macro calls
};

// Formats the current time for strftime_now(format) (tests pin the clock).
using Clock = std::function<std::string(const std::string& format)>;
// The real clock: local time, C strftime.
std::string strftime_local(const std::string& format);

class Template {
 public:
  // Throws Error (syntax, unsupported) naming the line.
  explicit Template(std::string_view source);

  // Renders with the given variables (messages, add_generation_prompt,
  // bos_token...). The result keeps which bytes came from client strings.
  // Throws Error.
  Text render(const Dict& variables, const Limits& limits = {}, const Clock& clock = strftime_local) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace actorlm::jinja
