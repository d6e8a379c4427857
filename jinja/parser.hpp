#pragma once
// Tokens to the statement tree, with Jinja's operator precedence (lowest
// first): "x if c else y", or, and, not, comparisons and in, + -, ~, * / //
// %, **, unary - +, then postfix (.attr, [item], [a:b:c], call), filters
// (|f) and tests (is t) binding tightest.
//
// Supported tags: if/elif/else, for (with "if" filter, else, loop.*), set
// (names, tuples, namespace attributes, block set), macro, break/continue,
// filter blocks, raw, and Hugging Face's generation tag. Anything else
// (include, import, extends, block, call, with...) is Error::unsupported
// naming the tag: a template cannot reach files or other templates.

#include <memory>
#include <string_view>

#include "jinja/ast.hpp"

namespace actorlm::jinja {

// Throws Error (syntax, unsupported, limit: nesting deeper than 256).
std::shared_ptr<const Body> parse(std::string_view source);

}  // namespace actorlm::jinja
