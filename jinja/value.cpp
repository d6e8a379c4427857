#include "jinja/value.hpp"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/error.hpp"

namespace actorlm::jinja {
namespace {

// Python's str.isprintable() for one code point: everything but the Other
// (Cc, Cf, Cs, Co, Cn) and Separator (Zl, Zp, Zs) categories, space excepted.
bool printable(int32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string hex_escape(int32_t cp) {
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02x", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08x", cp);
  }
  return buf;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t at = 0, n = static_cast<utf8proc_ssize_t>(s.size());
  while (at < n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t len = utf8proc_iterate(p + at, n - at, &cp);
    if (len <= 0) {  // not UTF-8: Python strings cannot hold it; show the byte
      out += hex_escape(p[at]);
      ++at;
      continue;
    }
    if (cp == quote || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      out += hex_escape(cp);
    } else {
      out.append(s, static_cast<size_t>(at), static_cast<size_t>(len));
    }
    at += len;
  }
  out += quote;
  return out;
}

std::string json_string(const std::string& s, bool ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (ascii && c >= 0x80) {
      // \uXXXX, lower-case hex, astral code points as surrogate pairs.
      utf8proc_int32_t cp;
      const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + i,
                                      static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
      if (n <= 0) cp = 0xFFFD;
      auto unit = [&](unsigned u) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", u);
        out += buf;
      };
      if (cp >= 0x10000) {
        unit(0xD800 + ((static_cast<unsigned>(cp) - 0x10000) >> 10));
        unit(0xDC00 + ((static_cast<unsigned>(cp) - 0x10000) & 0x3FF));
      } else {
        unit(static_cast<unsigned>(cp));
      }
      i += n > 0 ? static_cast<size_t>(n) - 1 : 0;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void json_into(const Value& v, int indent, bool ascii, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.type()) {
    case Value::Type::undefined:
      throw Error(Error::Kind::undefined, "tojson of an undefined value" +
                                              (v.undefined_name().empty() ? "" : " ('" + v.undefined_name() + "')"));
    case Value::Type::callable:
    case Value::Type::generator:
      throw Error(Error::Kind::type, "Object of type " + v.type_name() + " is not JSON serializable");
    case Value::Type::none: out += "null"; return;
    case Value::Type::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::integer: out += std::to_string(v.as_int()); return;
    case Value::Type::floating: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Type::string: out += json_string(v.str(), ascii); return;
    case Value::Type::list: {
      const List& l = v.list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_into(l[i], indent, ascii, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Type::dict: {
      const auto& items = v.dict().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        // json.dumps writes non-string keys as their JSON text, quoted.
        const Value& k = items[i].first;
        out += json_string(k.is_string() ? k.str() : k.is_none() ? "null" : k.is_bool() ? (k.as_bool() ? "true" : "false") : k.repr(), ascii);
        out += ": ";
        json_into(items[i].second, indent, ascii, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
  }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value v) { set_key(Value::markup(key), std::move(v)); }

void Dict::set_key(Value key, Value v) {
  for (auto& [k, old] : items) {
    if (equals(k, key)) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(v));
}

const Value* CallArgs::get(size_t n, std::string_view name) const {
  if (n < positional.size()) return &positional[n];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j, bool client) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<int64_t>(u)) : Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      std::string s = j.get<std::string>();
      return Value(client ? Text::client(std::move(s)) : Text(std::move(s)));
    }
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e, client));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      // A JSON object's keys are already distinct: appended, not looked up
      // (set() is linear per key; a client's 100,000-key object must not be
      // quadratic).
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) d.items.emplace_back(Value::markup(k), from_json(e, client));
      return Value(std::move(d));
    }
    default: return Value(None{});  // binary, discarded: not produced by JSON text
  }
}

bool Value::truthy() const {
  switch (type()) {
    case Type::undefined:
    case Type::none: return false;
    case Type::boolean: return as_bool();
    case Type::integer: return as_int() != 0;
    case Type::floating: return as_double() != 0.0;
    case Type::string: return !str().empty();
    case Type::list: return !list().empty();
    case Type::dict: return dict().is_namespace || !dict().items.empty();
    case Type::callable:
    case Type::generator: return true;
  }
  return false;
}

Text Value::to_text() const {
  switch (type()) {
    case Type::undefined: return Text();
    case Type::string: return text();
    case Type::list:
    case Type::dict: {
      // Python's repr of a container; client strings inside make it client text.
      bool client = false;
      std::function<void(const Value&)> scan = [&](const Value& v) {
        if (v.is_string()) client |= v.text().has_client();
        if (v.is_list()) for (const Value& e : v.list()) scan(e);
        if (v.is_dict()) for (const auto& [k, e] : v.dict().items) scan(e);
      };
      scan(*this);
      return client ? Text::client(repr()) : Text(repr());
    }
    default: return Text(repr());
  }
}

std::string Value::repr() const {
  switch (type()) {
    case Type::undefined: return "";
    case Type::none: return "None";
    case Type::boolean: return as_bool() ? "True" : "False";
    case Type::integer: return std::to_string(as_int());
    case Type::floating: return float_repr(as_double());
    case Type::string: return string_repr(str());
    case Type::list: {
      std::string out = "[";
      for (size_t i = 0; i < list().size(); ++i) {
        if (i) out += ", ";
        out += list()[i].repr();
      }
      return out + "]";
    }
    case Type::dict: {
      std::string out = dict().is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict().items.size(); ++i) {
        if (i) out += ", ";
        out += dict().items[i].first.repr() + ": " + dict().items[i].second.repr();
      }
      return out + (dict().is_namespace ? "}>" : "}");
    }
    case Type::callable: return "<function " + callable().name + ">";
    case Type::generator: return "<generator object>";
  }
  return "";
}

std::string Value::to_json(int indent, bool ensure_ascii) const {
  std::string out;
  json_into(*this, indent, ensure_ascii, 0, out);
  return out;
}

std::string Value::type_name() const {
  switch (type()) {
    case Type::undefined: return "Undefined";
    case Type::none: return "NoneType";
    case Type::boolean: return "bool";
    case Type::integer: return "int";
    case Type::floating: return "float";
    case Type::string: return "str";
    case Type::list: return "list";
    case Type::dict: return dict().is_namespace ? "Namespace" : "dict";
    case Type::callable: return "function";
    case Type::generator: return "generator";
  }
  return "object";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::undefined:
    case Value::Type::none: return true;
    case Value::Type::string: return a.str() == b.str();
    case Value::Type::list: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Type::dict: {
      if (&a.dict() == &b.dict()) return true;
      if (a.dict().is_namespace || b.dict().is_namespace) return false;
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* o = b.dict().find(Value(k));
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Value::Type::callable: return &a.callable() == &b.callable();
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw Error(Error::Kind::type,
              "'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  (void)ec;  // 64 bytes always hold a double
  std::string sci(buf, end);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_at = sci.find('e');
  std::string digits = sci.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e_at + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mant + ebuf;
}

}  // namespace actorlm::jinja
