#include "jinja/interpreter.hpp"

#include <cmath>
#include <limits>

#include "jinja/builtins.hpp"
#include "jinja/error.hpp"

namespace actorlm::jinja {
namespace {

[[noreturn]] void type_error(const std::string& what, int line) { throw Error(Error::Kind::type, what, line); }

[[noreturn]] void undefined_error(const Value& v, int line) {
  throw Error(Error::Kind::undefined,
              v.undefined_name().empty() ? "use of an undefined value" : "'" + v.undefined_name() + "' is undefined",
              line);
}

[[noreturn]] void overflow_error(int line) {
  throw Error(Error::Kind::unsupported, "integer arithmetic past 64 bits", line);
}

// a op b on int64, or the overflow error (Python's ints do not overflow;
// templates never need more than 64 bits).
template <class Op>
int64_t exact(Op op, int64_t a, int64_t b, int line) {
  int64_t r = 0;
  if (op(a, b, &r)) overflow_error(line);
  return r;
}
bool add(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
  if (a.is_undefined()) undefined_error(a, line);
  if (b.is_undefined()) undefined_error(b, line);
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) return Value(exact(add, a.as_int(), b.as_int(), line));
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      const bool safe = a.text().safe() || b.text().safe();
      Text t = safe && !a.text().safe() ? html_escape(a.text()) : a.text();
      t.append(safe && !b.text().safe() ? html_escape(b.text()) : b.text());
      t.set_safe(safe);
      return Value(std::move(t));
    }
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value(std::move(l));
    }
  } else if (op == "-") {
    if (ints) return Value(exact(sub, a.as_int(), b.as_int(), line));
    if (numbers) return Value(a.as_double() - b.as_double());
  } else if (op == "*") {
    if (ints) return Value(exact(mul, a.as_int(), b.as_int(), line));
    if (numbers) return Value(a.as_double() * b.as_double());
  } else if (op == "/") {
    if (numbers) {
      if (b.as_double() == 0.0) type_error("division by zero", line);
      return Value(a.as_double() / b.as_double());
    }
  } else if (op == "//" || op == "%") {
    if (numbers) {
      if (b.as_double() == 0.0) type_error(op == "//" ? "integer division by zero" : "modulo by zero", line);
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow_error(line);
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors
          --q;
          m += y;
        }
        return Value(op == "//" ? q : m);
      }
      const double x = a.as_double(), y = b.as_double();
      if (op == "//") return Value(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    if (op == "%" && a.is_string()) {
      throw Error(Error::Kind::unsupported, "printf-style '%' formatting of strings (use the format filter)", line);
    }
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      // By squaring: squaring overflows only where the result would too
      // (|base| > 1 with exponent bits still to come).
      int64_t base = a.as_int(), acc = 1;
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) acc = exact(mul, acc, base, line);
        if (e > 1) base = exact(mul, base, base, line);
      }
      return Value(acc);
    }
    if (numbers) return Value(std::pow(a.as_double(), b.as_double()));
  }
  type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'", line);
}

bool contains(const Value& container, const Value& item, int line) {
  switch (container.type()) {
    case Value::Type::undefined: return false;
    case Value::Type::string:
      if (!item.is_string()) type_error("'in <string>' requires string as left operand, not " + item.type_name(), line);
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::list:
    case Value::Type::generator:
      for (const Value& e : container.is_list() ? container.list() : container.generated()) {
        if (equals(e, item)) return true;
      }
      return false;
    case Value::Type::dict:
      return container.dict().find(item) != nullptr;
    default: type_error("argument of type '" + container.type_name() + "' is not iterable", line);
  }
}

}  // namespace

Interpreter::Interpreter(const Dict& variables, const Limits& limits, const Clock& clock)
    : variables_(variables), limits_(limits), clock_(clock) {
  frames_.push_back(std::make_shared<Frame>());
}

Interpreter::~Interpreter() {
  // The contents are moved out first and destroyed last, so that what their
  // destruction frees never runs inside a container being emptied.
  std::vector<Frame> frames;
  std::vector<std::vector<std::pair<Value, Value>>> attributes;
  for (const auto& weak : captured_frames_) {
    if (auto f = weak.lock()) {
      frames.push_back(std::move(*f));
      f->clear();
    }
  }
  for (const auto& weak : written_namespaces_) {
    if (auto d = weak.lock()) {
      attributes.push_back(std::move(d->items));
      d->items.clear();
    }
  }
}

void Interpreter::charge(uint64_t units, int line) {
  // work_ <= max_work always, so this cannot wrap however large units is.
  if (units > limits_.max_work - work_) {
    throw Error(Error::Kind::limit, "template rendering ran past its work limit", line);
  }
  work_ += units;
}

void Interpreter::charge_for(const Value& built, int line) {
  charge(built.is_string() ? built.str().size() : built.is_list() ? built.list().size() : 0, line);
}

Text Interpreter::run(const Body& body) {
  Text out;
  if (exec(body, out) != Flow::normal) throw Error(Error::Kind::syntax, "break or continue outside a loop");
  return out;
}

void Interpreter::emit(Text& out, const Text& t, int line) {
  charge(t.size(), line);
  if (out.size() + t.size() > limits_.max_output) {
    throw Error(Error::Kind::limit, "rendered text past " + std::to_string(limits_.max_output) + " bytes", line);
  }
  out.append(t);
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
    auto it = (*f)->find(name);
    if (it != (*f)->end()) return it->second;
  }
  if (const Value* v = variables_.find(name)) return *v;
  const auto& globals = global_functions();
  auto it = globals.find(name);
  if (it != globals.end()) return it->second;
  return Value(Undefined{name});
}

void Interpreter::assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

Interpreter::Flow Interpreter::exec(const Body& body, Text& out) {
  for (const auto& node : body) {
    const Node& n = *node;
    charge(1, n.line);
    switch (n.kind) {
      case Node::Kind::text: emit(out, Text(n.text), n.line); break;
      case Node::Kind::print: emit(out, eval(*n.expr).to_text(), n.line); break;
      case Node::Kind::if_: {
        const Body* chosen = &n.else_body;
        for (const auto& [cond, b] : n.branches) {
          if (eval(*cond).truthy()) {
            chosen = &b;
            break;
          }
        }
        Flow f = exec(*chosen, out);
        if (f != Flow::normal) return f;
        break;
      }
      case Node::Kind::for_: exec_for(n, out); break;
      case Node::Kind::set:
        if (n.expr) {
          exec_set(n, eval(*n.expr));
        } else {
          Text captured;
          if (exec(n.body, captured) != Flow::normal) throw Error(Error::Kind::syntax, "break inside set", n.line);
          exec_set(n, Value(std::move(captured)));
        }
        break;
      case Node::Kind::macro: define_macro(n); break;
      case Node::Kind::break_: return Flow::break_;
      case Node::Kind::continue_: return Flow::continue_;
      case Node::Kind::filter: {
        Text captured;
        Flow f = exec(n.body, captured);
        // The filter expression's innermost input is null: the block's text.
        std::vector<const Expr*> chain;
        for (const Expr* e = n.expr.get(); e; e = e->args.empty() ? nullptr : e->args[0].get()) chain.push_back(e);
        Value v(std::move(captured));
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) v = apply_filter(*this, (*it)->name, v, arguments(**it));
        emit(out, v.to_text(), n.line);
        if (f != Flow::normal) return f;
        break;
      }
    }
  }
  return Flow::normal;
}

List Interpreter::iterate(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::undefined: return {};
    case Value::Type::list: return v.list();
    case Value::Type::generator: return v.generated();
    case Value::Type::dict: {
      if (v.dict().is_namespace) type_error("'Namespace' object is not iterable", line);
      List keys;
      for (const auto& [k, e] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::string: {
      List chars;
      const std::vector<size_t> at = code_points(v.str());
      for (size_t i = 0; i + 1 < at.size(); ++i) chars.push_back(Value(v.text().substr(at[i], at[i + 1])));
      return chars;
    }
    default: type_error("'" + v.type_name() + "' object is not iterable", line);
  }
}

Interpreter::Flow Interpreter::exec_for(const Node& n, Text& out) {
  List all = iterate(eval(*n.expr), n.line);
  charge(all.size(), n.line);
  auto bind = [&](const Value& item) {
    if (n.targets.size() == 1) {
      assign(n.targets[0], item);
      return;
    }
    List parts = iterate(item, n.line);
    if (parts.size() != n.targets.size()) {
      type_error("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.targets.size()),
                 n.line);
    }
    for (size_t i = 0; i < parts.size(); ++i) assign(n.targets[i], parts[i]);
  };
  List items;
  if (n.condition) {
    for (const Value& item : all) {
      frames_.push_back(std::make_shared<Frame>());
      bind(item);
      const bool keep = eval(*n.condition).truthy();
      frames_.pop_back();
      if (keep) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) return exec(n.else_body, out);
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    frames_.push_back(std::make_shared<Frame>());
    struct Pop {
      ~Pop() { f.pop_back(); }
      std::vector<std::shared_ptr<Frame>>& f;
    } pop{frames_};
    bind(items[static_cast<size_t>(i)]);
    Dict loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(len - i));
    loop.set("revindex0", Value(len - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == len - 1));
    loop.set("length", Value(len));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value(Undefined{"loop.previtem"}));
    loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value(Undefined{"loop.nextitem"}));
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->call = [i](Interpreter&, const CallArgs& a) {
      if (a.positional.empty()) throw Error(Error::Kind::type, "loop.cycle needs at least one item", a.line);
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    };
    loop.set("cycle", Value(std::shared_ptr<const Callable>(std::move(cycle))));
    assign("loop", Value(std::move(loop)));
    if (exec(n.body, out) == Flow::break_) break;
  }
  return Flow::normal;
}

void Interpreter::exec_set(const Node& n, Value v) {
  if (!n.attr.empty()) {
    Value ns = lookup(n.targets[0]);
    if (!ns.is_dict() || !ns.dict().is_namespace) {
      throw Error(Error::Kind::type, "can only set attributes of a namespace() object ('" + n.targets[0] + "')", n.line);
    }
    ns.mutable_dict().set(n.attr, std::move(v));
    // A loop usually writes the same namespace every iteration: one entry.
    std::shared_ptr<Dict> d = ns.shared_dict();
    if (written_namespaces_.empty() || written_namespaces_.back().lock() != d) written_namespaces_.push_back(d);
    return;
  }
  if (n.targets.size() == 1) {
    assign(n.targets[0], std::move(v));
    return;
  }
  List parts = iterate(v, n.line);
  if (parts.size() != n.targets.size()) type_error("cannot unpack values in set", n.line);
  for (size_t i = 0; i < parts.size(); ++i) assign(n.targets[i], parts[i]);
}

void Interpreter::define_macro(const Node& n) {
  auto fn = std::make_shared<Callable>();
  fn->name = n.text;
  // The macro sees the frames around its definition as they are when called.
  std::vector<std::shared_ptr<Frame>> scope = frames_;
  captured_frames_.insert(captured_frames_.end(), scope.begin(), scope.end());
  const Node* node = &n;
  fn->call = [node, scope](Interpreter& in, const CallArgs& args) {
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      throw Error(Error::Kind::limit, "macros nest deeper than " + std::to_string(in.limits_.max_call_depth),
                  args.line);
    }
    auto saved = std::move(in.frames_);
    in.frames_ = scope;
    in.frames_.push_back(std::make_shared<Frame>());
    struct Restore {
      ~Restore() {
        in.frames_ = std::move(saved);
        --in.call_depth_;
      }
      Interpreter& in;
      std::vector<std::shared_ptr<Frame>>& saved;
    } restore{in, saved};
    const auto& params = node->params;
    if (args.positional.size() > params.size()) {
      throw Error(Error::Kind::type, "macro '" + node->text + "' takes at most " + std::to_string(params.size()) +
                                         " arguments", args.line);
    }
    for (const auto& [k, v] : args.keyword) {
      bool known = false;
      for (const auto& p : params) known |= p.first == k;
      if (!known) throw Error(Error::Kind::type, "macro '" + node->text + "' has no argument '" + k + "'", args.line);
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Value* given = args.get(i, params[i].first);
      in.assign(params[i].first, given                ? *given
                                 : params[i].second ? in.eval(*params[i].second)
                                                    : Value(Undefined{params[i].first}));
    }
    Text out;
    in.exec(node->body, out);
    return Value(std::move(out));
  };
  assign(n.text, Value(std::shared_ptr<const Callable>(std::move(fn))));
}

Value Interpreter::call(const Value& fn, const CallArgs& args, int line) {
  if (fn.is_undefined()) undefined_error(fn, line);
  if (!fn.is_callable()) type_error("'" + fn.type_name() + "' object is not callable", line);
  return fn.callable().call(*this, args);
}

CallArgs Interpreter::arguments(const Expr& e) {
  CallArgs args;
  args.line = e.line;
  for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
  return args;
}

Value Interpreter::binary(const Expr& e) {
  const std::string& op = e.name;
  Value a = eval(*e.args[0]);
  Value b = eval(*e.args[1]);
  if (op == "*" && (a.is_string() || a.is_list()) && b.is_number() && !b.is_float()) {
    // Repetition, charged before it is built (a template cannot ask for a
    // terabyte).
    // Every round costs one unit besides what it copies ('' * 10**15 must
    // not spin either).
    const auto n = static_cast<uint64_t>(std::max<int64_t>(0, b.as_int()));
    const uint64_t unit = (a.is_string() ? a.str().size() : a.list().size()) + 1;
    charge(n > UINT64_MAX / unit ? UINT64_MAX : n * unit, e.line);
    if (a.is_list()) {
      List l;
      for (uint64_t i = 0; i < n; ++i) l.insert(l.end(), a.list().begin(), a.list().end());
      return Value(std::move(l));
    }
    Text t;
    for (uint64_t i = 0; i < n; ++i) t.append(a.text());
    return Value(std::move(t));
  }
  if (op == "==") return Value(equals(a, b));
  if (op == "!=") return Value(!equals(a, b));
  if (op == "<") return Value(less(a, b));
  if (op == ">") return Value(less(b, a));
  if (op == "<=") return Value(!less(b, a));
  if (op == ">=") return Value(!less(a, b));
  if (op == "in") return Value(contains(b, a, e.line));
  if (op == "not in") return Value(!contains(b, a, e.line));
  if (op == "~") {
    Text t = a.to_text();
    t.append(b.to_text());
    charge(t.size(), e.line);
    return Value(std::move(t));
  }
  Value r = arithmetic(op, a, b, e.line);
  charge_for(r, e.line);
  return r;
}

Value Interpreter::eval(const Expr& e) {
  charge(1, e.line);
  switch (e.kind) {
    case Expr::Kind::literal: return e.value;
    case Expr::Kind::name: return lookup(e.name);
    case Expr::Kind::list:
    case Expr::Kind::tuple: {
      List l;
      for (const auto& a : e.args) l.push_back(eval(*a));
      return Value(std::move(l));
    }
    case Expr::Kind::dict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i]);
        if (!k.is_string() && !k.is_number() && !k.is_none()) {
          type_error("unhashable type: '" + k.type_name() + "'", e.line);
        }
        d.set_key(std::move(k), eval(*e.args[i + 1]));
      }
      return Value(std::move(d));
    }
    case Expr::Kind::attribute: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj, e.line);
      return get_attribute(obj, e.name);
    }
    case Expr::Kind::item: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj, e.line);
      return get_item(obj, eval(*e.args[1]));
    }
    case Expr::Kind::slice: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) undefined_error(obj, e.line);
      Value parts[3];
      const Value* ptr[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i) + 1]) {
          parts[i] = eval(*e.args[static_cast<size_t>(i) + 1]);
          ptr[i] = &parts[i];
        }
      }
      Value r = get_slice(obj, ptr[0], ptr[1], ptr[2], e.line);
      charge_for(r, e.line);
      return r;
    }
    case Expr::Kind::call: {
      Value fn = eval(*e.args[0]);
      return call(fn, arguments(e), e.line);
    }
    case Expr::Kind::filter: {
      Value v = eval(*e.args[0]);
      Value r = apply_filter(*this, e.name, v, arguments(e));
      charge_for(r, e.line);
      return r;
    }
    case Expr::Kind::test: {
      Value v = eval(*e.args[0]);
      return Value(apply_test(*this, e.name, v, arguments(e)) != e.negated);
    }
    case Expr::Kind::unary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) undefined_error(v, e.line);
      if (!v.is_number()) type_error("bad operand type for unary " + e.name + ": '" + v.type_name() + "'", e.line);
      if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
      if (v.is_float()) return Value(-v.as_double());
      if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow_error(e.line);
      return Value(-v.as_int());
    }
    case Expr::Kind::binary: return binary(e);
    case Expr::Kind::logical: {
      Value a = eval(*e.args[0]);
      if (e.name == "and") return a.truthy() ? eval(*e.args[1]) : a;
      return a.truthy() ? a : eval(*e.args[1]);
    }
    case Expr::Kind::condition:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value(Undefined{});
  }
  return Value();
}

}  // namespace actorlm::jinja
