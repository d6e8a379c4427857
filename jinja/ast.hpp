#pragma once
// The parsed template: expressions and statements as plain trees.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.hpp"

namespace actorlm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,    // value
    name,       // name
    list,       // args
    tuple,      // args (evaluates to a list)
    dict,       // args: key, value, key, value...
    attribute,  // args[0].name
    item,       // args[0][args[1]]
    slice,      // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    call,       // args[0](args[1..], kwargs)
    filter,     // args[0] | name(args[1..], kwargs); args[0] null in {% filter %}
    test,       // args[0] is [not: negated] name(args[1..])
    unary,      // name ("-", "+", "not") args[0]
    binary,     // args[0] name args[1]: arithmetic, comparison, in, not in, ~
    logical,    // args[0] and/or args[1] (short-circuit)
    condition,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    text,      // text: template data
    print,     // {{ expr }}
    if_,       // branches (cond, body)...; else_body
    for_,      // targets in expr [if cond]: body; else_body
    set,       // targets (or target.attr) = expr, or {% set x %}body{% endset %}
    macro,     // name(params) body
    break_,
    continue_,
    filter,  // {% filter f %}body{% endfilter %}: expr is the filter with a null input
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;       // print / for iterable / set value / filter
  ExprPtr condition;  // for ... if condition
  std::vector<std::string> targets;  // for/set names; set: a single "ns.attr" target has attr
  std::string attr;                  // set ns.attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters (default may be null)
};

}  // namespace actorlm::jinja
