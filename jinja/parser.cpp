#include "jinja/parser.hpp"

#include <cstdlib>
#include <initializer_list>

#include "jinja/error.hpp"
#include "jinja/lexer.hpp"

namespace actorlm::jinja {
namespace {

constexpr int max_depth = 256;  // nesting of expressions and blocks

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body document() {
    std::string end;
    Body b = body({}, &end);
    return b;
  }

 private:
  // Depth guard for the recursive descent: a hostile template cannot blow
  // the stack with "((((((...".
  struct Nest {
    explicit Nest(Parser& p) : p(p) {
      if (++p.depth_ > max_depth) throw Error(Error::Kind::limit, "template nests too deeply", p.cur().line);
    }
    ~Nest() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t ahead = 1) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return cur().kind == Token::Kind::op && cur().value == op; }
  bool at_name(std::string_view n) const { return cur().kind == Token::Kind::name && cur().value == n; }
  [[noreturn]] void fail(const std::string& what) const {
    std::string got = cur().kind == Token::Kind::end ? "end of template"
                      : cur().value.empty()           ? "a tag delimiter"
                                                      : "'" + cur().value + "'";
    throw Error(Error::Kind::syntax, what + ", got " + got, cur().line);
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail("expected '" + std::string(op) + "'");
    ++i_;
  }
  void expect_name(std::string_view n) {
    if (!at_name(n)) fail("expected '" + std::string(n) + "'");
    ++i_;
  }
  std::string name() {
    if (cur().kind != Token::Kind::name) fail("expected a name");
    return t_[i_++].value;
  }
  void expect_block_close() {
    if (cur().kind != Token::Kind::block_close) fail("expected '%}'");
    ++i_;
  }

  static ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // Statements until a block tag whose name is in ends (consumed with its
  // name; *which says which) or, with no ends, the end of the template.
  Body body(std::initializer_list<std::string_view> ends, std::string* which) {
    Nest nest(*this);
    Body out;
    for (;;) {
      const Token& tok = cur();
      if (tok.kind == Token::Kind::end) {
        if (ends.size() == 0) return out;
        std::string list;
        for (auto e : ends) list += (list.empty() ? "" : " or ") + std::string(e);
        throw Error(Error::Kind::syntax, "unexpected end of template, expected " + list, tok.line);
      }
      if (tok.kind == Token::Kind::text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->line = tok.line;
        n->text = tok.value;
        out.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (tok.kind == Token::Kind::print_open) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::print;
        n->line = tok.line;
        n->expr = tuple_expr(true);
        if (cur().kind != Token::Kind::print_close) fail("expected '}}'");
        ++i_;
        out.push_back(std::move(n));
        continue;
      }
      if (tok.kind != Token::Kind::block_open) fail("unexpected token");
      ++i_;
      const std::string tag = name();
      for (auto e : ends) {
        if (tag == e) {
          *which = tag;
          return out;
        }
      }
      statement(tag, tok.line, out);
    }
  }

  void statement(const std::string& tag, int line, Body& out) {
    auto n = std::make_unique<Node>();
    n->line = line;
    if (tag == "if") {
      n->kind = Node::Kind::if_;
      std::string which = "elif";
      ExprPtr cond = expression(true);
      for (;;) {
        expect_block_close();
        Body b = body({"elif", "else", "endif"}, &which);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (which == "elif") {
          cond = expression(true);
          continue;
        }
        if (which == "else") {
          expect_block_close();
          n->else_body = body({"endif"}, &which);
        }
        expect_block_close();
        break;
      }
    } else if (tag == "for") {
      n->kind = Node::Kind::for_;
      n->targets.push_back(name());
      while (at_op(",")) {
        ++i_;
        n->targets.push_back(name());
      }
      expect_name("in");
      n->expr = tuple_expr(false);
      if (at_name("if")) {
        ++i_;
        n->condition = expression(true);
      }
      if (at_name("recursive")) throw Error(Error::Kind::unsupported, "recursive for loops are not supported", line);
      expect_block_close();
      std::string which;
      n->body = body({"else", "endfor"}, &which);
      if (which == "else") {
        expect_block_close();
        n->else_body = body({"endfor"}, &which);
      }
      expect_block_close();
    } else if (tag == "set") {
      n->kind = Node::Kind::set;
      n->targets.push_back(name());
      if (at_op(".")) {
        ++i_;
        n->attr = name();
      } else {
        while (at_op(",")) {
          ++i_;
          n->targets.push_back(name());
        }
      }
      if (at_op("=")) {
        ++i_;
        n->expr = tuple_expr(true);
        expect_block_close();
      } else {
        if (at_op("|")) throw Error(Error::Kind::unsupported, "filters on a block set are not supported", line);
        expect_block_close();
        std::string which;
        n->body = body({"endset"}, &which);
        expect_block_close();
      }
    } else if (tag == "macro") {
      n->kind = Node::Kind::macro;
      n->text = name();
      expect_op("(");
      while (!at_op(")")) {
        std::string p = name();
        ExprPtr def;
        if (at_op("=")) {
          ++i_;
          def = expression(true);
        }
        n->params.emplace_back(std::move(p), std::move(def));
        if (!at_op(",")) break;
        ++i_;
      }
      expect_op(")");
      expect_block_close();
      std::string which;
      n->body = body({"endmacro"}, &which);
      if (cur().kind == Token::Kind::name) ++i_;  // {% endmacro name %}
      expect_block_close();
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      expect_block_close();
    } else if (tag == "filter") {
      n->kind = Node::Kind::filter;
      n->expr = filters(nullptr);
      expect_block_close();
      std::string which;
      n->body = body({"endfilter"}, &which);
      expect_block_close();
    } else if (tag == "generation") {
      // Hugging Face marks assistant text for training masks; it renders as is.
      expect_block_close();
      std::string which;
      Body b = body({"endgeneration"}, &which);
      expect_block_close();
      for (auto& child : b) out.push_back(std::move(child));
      return;
    } else {
      throw Error(Error::Kind::unsupported, "the '" + tag + "' tag is not supported", line);
    }
    out.push_back(std::move(n));
  }

  // An expression, or several separated by commas (a tuple).
  ExprPtr tuple_expr(bool with_condition) {
    const int line = cur().line;
    ExprPtr first = expression(with_condition);
    if (!at_op(",")) return first;
    auto t = make(Expr::Kind::tuple, line);
    t->args.push_back(std::move(first));
    while (at_op(",")) {
      ++i_;
      if (cur().kind == Token::Kind::block_close || cur().kind == Token::Kind::print_close) break;
      t->args.push_back(expression(with_condition));
    }
    return t;
  }

  ExprPtr expression(bool with_condition) {
    Nest nest(*this);
    ExprPtr e = logical_or();
    if (!with_condition) return e;
    while (at_name("if")) {
      const int line = cur().line;
      ++i_;
      auto c = make(Expr::Kind::condition, line);
      c->args.push_back(std::move(e));
      c->args.push_back(logical_or());
      if (at_name("else")) {
        ++i_;
        c->args.push_back(expression(true));
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(Expr::Kind kind, std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(kind, line);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr logical_or() {
    ExprPtr e = logical_and();
    while (at_name("or")) {
      const int line = cur().line;
      ++i_;
      e = binary(Expr::Kind::logical, "or", std::move(e), logical_and(), line);
    }
    return e;
  }

  ExprPtr logical_and() {
    ExprPtr e = logical_not();
    while (at_name("and")) {
      const int line = cur().line;
      ++i_;
      e = binary(Expr::Kind::logical, "and", std::move(e), logical_not(), line);
    }
    return e;
  }

  ExprPtr logical_not() {
    if (at_name("not")) {
      Nest nest(*this);
      auto u = make(Expr::Kind::unary, cur().line);
      ++i_;
      u->name = "not";
      u->args.push_back(logical_not());
      return u;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      const int line = cur().line;
      if (cur().kind == Token::Kind::op &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
           cur().value == "<=" || cur().value == ">=")) {
        std::string op = t_[i_++].value;
        e = binary(Expr::Kind::binary, op, std::move(e), math1(), line);
      } else if (at_name("in")) {
        ++i_;
        e = binary(Expr::Kind::binary, "in", std::move(e), math1(), line);
      } else if (at_name("not") && peek().kind == Token::Kind::name && peek().value == "in") {
        i_ += 2;
        e = binary(Expr::Kind::binary, "not in", std::move(e), math1(), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (at_op("+") || at_op("-")) {
      const int line = cur().line;
      std::string op = t_[i_++].value;
      e = binary(Expr::Kind::binary, op, std::move(e), concat(), line);
    }
    return e;
  }

  ExprPtr concat() {
    ExprPtr e = math2();
    while (at_op("~")) {
      const int line = cur().line;
      ++i_;
      e = binary(Expr::Kind::binary, "~", std::move(e), math2(), line);
    }
    return e;
  }

  ExprPtr math2() {
    ExprPtr e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const int line = cur().line;
      std::string op = t_[i_++].value;
      e = binary(Expr::Kind::binary, op, std::move(e), power(), line);
    }
    return e;
  }

  ExprPtr power() {
    ExprPtr e = unary(true);
    while (at_op("**")) {
      const int line = cur().line;
      ++i_;
      e = binary(Expr::Kind::binary, "**", std::move(e), unary(true), line);
    }
    return e;
  }

  ExprPtr unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      e = make(Expr::Kind::unary, cur().line);
      e->name = t_[i_++].value;
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& tok = cur();
    const int line = tok.line;
    switch (tok.kind) {
      case Token::Kind::name: {
        ++i_;
        auto lit = [&](Value v) {
          auto e = make(Expr::Kind::literal, line);
          e->value = std::move(v);
          return e;
        };
        if (tok.value == "true" || tok.value == "True") return lit(Value(true));
        if (tok.value == "false" || tok.value == "False") return lit(Value(false));
        if (tok.value == "none" || tok.value == "None") return lit(Value(None{}));
        auto e = make(Expr::Kind::name, line);
        e->name = tok.value;
        return e;
      }
      case Token::Kind::string: {
        std::string s;
        while (cur().kind == Token::Kind::string) s += t_[i_++].value;  // adjacent literals join
        auto e = make(Expr::Kind::literal, line);
        e->value = Value::markup(std::move(s));
        return e;
      }
      case Token::Kind::integer: {
        auto e = make(Expr::Kind::literal, line);
        try {
          e->value = Value(static_cast<int64_t>(std::stoll(tok.value)));
        } catch (const std::out_of_range&) {
          throw Error(Error::Kind::unsupported, "integer literal out of 64-bit range", line);
        }
        ++i_;
        return e;
      }
      case Token::Kind::floating: {
        auto e = make(Expr::Kind::literal, line);
        // strtod, not stod: 1e999 is inf, as in Python, not an exception.
        e->value = Value(std::strtod(tok.value.c_str(), nullptr));
        ++i_;
        return e;
      }
      case Token::Kind::op:
        if (tok.value == "(") {
          ++i_;
          if (at_op(")")) {
            ++i_;
            return make(Expr::Kind::tuple, line);
          }
          ExprPtr first = expression(true);
          if (at_op(")")) {
            ++i_;
            return first;
          }
          auto t = make(Expr::Kind::tuple, line);
          t->args.push_back(std::move(first));
          while (at_op(",")) {
            ++i_;
            if (at_op(")")) break;
            t->args.push_back(expression(true));
          }
          expect_op(")");
          return t;
        }
        if (tok.value == "[") {
          ++i_;
          auto l = make(Expr::Kind::list, line);
          while (!at_op("]")) {
            l->args.push_back(expression(true));
            if (!at_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return l;
        }
        if (tok.value == "{") {
          ++i_;
          auto d = make(Expr::Kind::dict, line);
          while (!at_op("}")) {
            d->args.push_back(expression(true));
            expect_op(":");
            d->args.push_back(expression(true));
            if (!at_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return d;
        }
        break;
      default:
        break;
    }
    fail("expected an expression");
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (at_op(".")) {
        ++i_;
        if (cur().kind == Token::Kind::integer) {  // x.0 is x[0]
          auto it = make(Expr::Kind::item, line);
          it->args.push_back(std::move(e));
          it->args.push_back(primary());
          e = std::move(it);
          continue;
        }
        auto a = make(Expr::Kind::attribute, line);
        a->name = name();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (at_op("[")) {
        ++i_;
        e = subscript(std::move(e), line);
      } else if (at_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    for (;;) {
      if (!at_op(":") && !at_op("]")) parts[n] = expression(true);
      if (at_op(":") && n < 2) {
        ++i_;
        is_slice = true;
        ++n;
        continue;
      }
      break;
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail("expected a subscript");
      auto it = make(Expr::Kind::item, line);
      it->args.push_back(std::move(target));
      it->args.push_back(std::move(parts[0]));
      return it;
    }
    auto s = make(Expr::Kind::slice, line);
    s->args.push_back(std::move(target));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  // "(args)" after a callee (consumed from "(").
  void arguments(Expr& into) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) throw Error(Error::Kind::unsupported, "*args in calls are not supported", cur().line);
      if (cur().kind == Token::Kind::name && peek().kind == Token::Kind::op && peek().value == "=") {
        std::string k = name();
        ++i_;
        into.kwargs.emplace_back(std::move(k), expression(true));
      } else {
        into.args.push_back(expression(true));
      }
      if (!at_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr callee, int line) {
    auto c = make(Expr::Kind::call, line);
    c->args.push_back(std::move(callee));
    arguments(*c);
    return c;
  }

  // Filters, tests and calls after a value (e is null for a filter block:
  // the block's text is the input).
  ExprPtr filters(ExprPtr e) {
    bool first = e == nullptr;
    for (;;) {
      const int line = cur().line;
      if (at_op("|") || first) {
        if (!first) ++i_;
        first = false;
        auto f = make(Expr::Kind::filter, line);
        f->name = name();
        while (at_op(".")) {  // dotted filter names are not in the sandbox's set
          ++i_;
          f->name += "." + name();
        }
        f->args.push_back(std::move(e));
        if (at_op("(")) arguments(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        ++i_;
        auto t = make(Expr::Kind::test, line);
        if (at_name("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = name();
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          arguments(*t);
        } else if ((cur().kind == Token::Kind::name || cur().kind == Token::Kind::string ||
                    cur().kind == Token::Kind::integer || cur().kind == Token::Kind::floating || at_op("(") ||
                    at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
          if (at_name("is")) fail("tests cannot be chained with 'is'");
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Body> parse(std::string_view source) {
  Parser p(tokenize(source));
  return std::make_shared<const Body>(p.document());
}

}  // namespace actorlm::jinja
