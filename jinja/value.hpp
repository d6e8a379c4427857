#pragma once
// The values a template computes with, with Python's semantics where Jinja
// borrows them (truthiness, equality, str(), repr(), int/float arithmetic)
// and Jinja's default Undefined (prints as nothing, is false, iterates as
// empty; using its attributes is an error).
//
// Lists and strings are immutable and shared; dicts are immutable too except
// a namespace() object, whose attributes {% set ns.x = ... %} assigns (the
// only mutation a sandboxed template can do).

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "jinja/text.hpp"

namespace actorlm::jinja {

class Value;
class Interpreter;

using List = std::vector<Value>;

// Insertion-ordered (as Python's dict and JSON objects read in order).
// Keys are usually strings; numbers, booleans and None work too (a few
// templates use {0: ..., 512: ...} tables), compared as Python hashes them
// (1, 1.0 and True are one key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  const Value* find(const Value& key) const;
  void set(const std::string& key, Value v);
  void set_key(Value key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
  // The n-th positional argument, else the keyword argument called name,
  // else nullptr.
  const Value* get(size_t n, std::string_view name) const;
};

// A macro, a global function (range, namespace...) or a bound method.
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, const CallArgs&)> call;
};

// What Jinja's map/select/reject/selectattr/rejectattr/unique/items filters
// return: iterable (for, join, list, in), but with no len(), no index, not
// JSON-serializable, and always true, as a Python generator.
struct Generator {
  List items;
};

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

class Value {
 public:
  enum class Type { undefined, none, boolean, integer, floating, string, list, dict, callable, generator };

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(const char*) = delete;  // not a bool: use Value::markup
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(Text t) : v_(std::make_shared<const Text>(std::move(t))) {}
  Value(std::shared_ptr<const Text> t) : v_(std::move(t)) {}
  Value(List l) : v_(std::make_shared<const List>(std::move(l))) {}
  Value(std::shared_ptr<const List> l) : v_(std::move(l)) {}
  Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}
  Value(Generator g) : v_(std::make_shared<const Generator>(std::move(g))) {}
  static Value markup(std::string s) { return Value(Text(std::move(s))); }

  // Strings as client text (message contents, tools...) or markup.
  static Value from_json(const nlohmann::ordered_json& j, bool client);

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::undefined; }
  bool is_none() const { return type() == Type::none; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::integer; }
  bool is_float() const { return type() == Type::floating; }
  // Python's numbers.Number: bools count (bool is a subclass of int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::string; }
  bool is_list() const { return type() == Type::list; }
  bool is_dict() const { return type() == Type::dict; }
  bool is_callable() const { return type() == Type::callable; }
  bool is_generator() const { return type() == Type::generator; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const Text& text() const { return *std::get<std::shared_ptr<const Text>>(v_); }
  const std::string& str() const { return text().str(); }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(v_); }
  const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  std::shared_ptr<Dict> shared_dict() const { return std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const List& generated() const { return std::get<std::shared_ptr<const Generator>>(v_)->items; }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's bool().
  bool truthy() const;
  // Python's str() (strings keep their client marks; undefined is empty).
  Text to_text() const;
  // Python's repr() (lists and dicts print their items this way).
  std::string repr() const;
  // Python's json.dumps(v, ensure_ascii=ensure_ascii, indent=indent) as
  // Hugging Face's tojson filter calls it (indent < 0: none). Throws on
  // undefined, callables and generators.
  std::string to_json(int indent = -1, bool ensure_ascii = false) const;
  // The type's name as Python says it, for errors.
  std::string type_name() const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const Text>, std::shared_ptr<const List>,
               std::shared_ptr<Dict>, std::shared_ptr<const Callable>, std::shared_ptr<const Generator>>
      v_;
};

// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <, for numbers with numbers, strings with strings, lists
// element-wise; anything else throws Error::Kind::type.
bool less(const Value& a, const Value& b);
// Python's repr of a float ("1.0", "0.1", "1e-05", "inf").
std::string float_repr(double d);

}  // namespace actorlm::jinja
