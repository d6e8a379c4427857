#pragma once
// Runs a parsed template (internal to jinja/; Template is the interface).
// Scopes follow Jinja: a for loop's body and a macro's body get their own
// frame, so {% set %} inside them does not leak out (namespace() is how
// templates carry state out of a loop); if-blocks share their parent's.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.hpp"
#include "jinja/template.hpp"

namespace actorlm::jinja {

class Interpreter {
 public:
  Interpreter(const Dict& variables, const Limits& limits, const Clock& clock);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Text run(const Body& body);

  Value eval(const Expr& e);
  Value call(const Value& fn, const CallArgs& args, int line);
  // Counts work against the limit; throws Error::Kind::limit past it.
  void charge(uint64_t units, int line = 0);
  // Charges a value just built: its bytes or elements.
  void charge_for(const Value& built, int line);
  const Clock& clock() const { return clock_; }
  // The value's items as a for loop sees them (dict: its keys; string: its
  // characters); throws Error::Kind::type for what cannot be iterated.
  List iterate(const Value& v, int line);

 private:
  using Frame = std::unordered_map<std::string, Value>;
  enum class Flow { normal, break_, continue_ };

  Flow exec(const Body& body, Text& out);
  Flow exec_for(const Node& n, Text& out);
  void exec_set(const Node& n, Value v);
  void define_macro(const Node& n);
  void emit(Text& out, const Text& t, int line);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  Value binary(const Expr& e);
  // A call's, filter's or test's arguments: args[1..] and the keywords
  // (args[0] is the callee or the input).
  CallArgs arguments(const Expr& e);

  const Dict& variables_;
  Limits limits_;
  const Clock& clock_;
  uint64_t work_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<Frame>> frames_;
  // The only ways a render closes a loop of shared pointers: a macro keeps
  // the frames around its definition, and is itself stored in one of them;
  // a namespace is given an attribute that holds it (or a macro that sees
  // it). Those frames and namespaces are emptied when the render ends, or
  // every template with a macro would leak its frames on every request.
  std::vector<std::weak_ptr<Frame>> captured_frames_;
  std::vector<std::weak_ptr<Dict>> written_namespaces_;
};

}  // namespace actorlm::jinja
