#include "jinja/builtins.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "jinja/error.hpp"
#include "jinja/interpreter.hpp"

namespace actorlm::jinja {
namespace {

[[noreturn]] void type_error(const std::string& what, int line) { throw Error(Error::Kind::type, what, line); }

// ---- strings by code point ----------------------------------------------

int32_t decode_at(const std::string& s, size_t at, size_t* len) {
  utf8proc_int32_t cp = -1;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data()) + at,
                                  static_cast<utf8proc_ssize_t>(s.size() - at), &cp);
  *len = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? cp : static_cast<unsigned char>(s[at]);
}

void encode(std::string& out, int32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Python's str.isspace() for one code point.
bool py_space(int32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0) return true;
  if (cp < 0x1680) return false;
  const auto c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

// Python's strip family: which = 1 left, 2 right, 3 both; chars null means
// whitespace.
Text strip(const Text& t, const Value* chars, int which) {
  const std::string& s = t.str();
  std::vector<int32_t> set;
  const bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (!whitespace) {
    if (!chars->is_string()) type_error("strip arg must be None or str", 0);
    for (size_t i = 0, len; i < chars->str().size(); i += len) set.push_back(decode_at(chars->str(), i, &len));
  }
  auto strippable = [&](int32_t cp) { return whitespace ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end(); };
  size_t b = 0, e = s.size(), len = 0;
  if (which & 1) {
    while (b < e && strippable(decode_at(s, b, &len))) b += len;
  }
  if (which & 2) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (!strippable(decode_at(s, start, &len))) break;
      e = start;
    }
  }
  return t.substr(b, e);
}

// Python's str.split / rsplit (sep null: runs of whitespace).
List split(const Text& t, const Value* sep, int64_t maxsplit, bool from_right) {
  const std::string& s = t.str();
  List out;
  if (!sep || sep->is_none()) {
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0, len = 0;
    while (i < s.size()) {
      while (i < s.size() && py_space(decode_at(s, i, &len))) i += len;
      if (i >= s.size()) break;
      size_t b = i;
      while (i < s.size() && !py_space(decode_at(s, i, &len))) i += len;
      words.emplace_back(b, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      // The last (or first) piece keeps the rest, inner whitespace and all.
      if (!from_right) {
        const size_t keep = static_cast<size_t>(maxsplit);
        words[keep].second = strip(t.substr(words[keep].first, s.size()), nullptr, 2).size() + words[keep].first;
        words.resize(keep + 1);
      } else {
        const size_t drop = words.size() - static_cast<size_t>(maxsplit) - 1;
        words[drop].first = words[0].first;
        words.erase(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(drop));
      }
    }
    for (const auto& [b, e] : words) out.push_back(Value(t.substr(b, e)));
    return out;
  }
  if (!sep->is_string()) type_error("must be str or None, not " + sep->type_name(), 0);
  const std::string& d = sep->str();
  if (d.empty()) type_error("empty separator", 0);
  std::vector<size_t> cuts;  // start of each separator used
  if (!from_right) {
    for (size_t at = s.find(d); at != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit);
         at = s.find(d, at + d.size())) {
      cuts.push_back(at);
    }
  } else {
    size_t end = s.size();
    while (end >= d.size() && (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit)) {
      size_t at = s.rfind(d, end - d.size());
      if (at == std::string::npos) break;
      cuts.push_back(at);
      end = at;
    }
    std::reverse(cuts.begin(), cuts.end());
  }
  size_t b = 0;
  for (size_t c : cuts) {
    out.push_back(Value(t.substr(b, c)));
    b = c + d.size();
  }
  out.push_back(Value(t.substr(b, s.size())));
  return out;
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, len; i < s.size(); i += len) {
    const int32_t cp = decode_at(s, i, &len);
    encode(out, mode ? utf8proc_toupper(cp) : utf8proc_tolower(cp));
  }
  return out;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t len;
  const int32_t first = decode_at(s, 0, &len);
  std::string out;
  encode(out, utf8proc_totitle(first));
  return out + map_case(s.substr(len), 0);
}

// Jinja's title filter: each piece after a run of -, whitespace or opening
// brackets is capitalized.
std::string title(const std::string& s) {
  std::string out;
  bool start = true;
  for (size_t i = 0, len; i < s.size(); i += len) {
    const int32_t cp = decode_at(s, i, &len);
    const bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_space(cp);
    if (sep) {
      out.append(s, i, len);
      start = true;
    } else {
      encode(out, start ? utf8proc_totitle(cp) : utf8proc_tolower(cp));
      start = false;
    }
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    std::vector<size_t> at = code_points(s);
    int64_t n = 0;
    for (size_t i = 0; i + 1 < at.size(); ++i) {
      if (count < 0 || n++ < count) out += to;
      out.append(s, at[i], at[i + 1] - at[i]);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  for (size_t at = s.find(from); at != std::string::npos && (count < 0 || n < count); at = s.find(from, b)) {
    out.append(s, b, at - b);
    out += to;
    b = at + from.size();
    ++n;
  }
  out.append(s, b, std::string::npos);
  return out;
}

// s.replace(from, to, count), charged before the result is built (a short
// template could otherwise ask for terabytes: 'aaaa'.replace('a', s * 1000)).
Value replaced(Interpreter& in, const Text& t, const std::string& from, const Text& to, int64_t count, int line) {
  const std::string& s = t.str();
  uint64_t hits = 0;
  if (from.empty()) {
    hits = code_points(s).size();
  } else {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + from.size())) ++hits;
  }
  if (count >= 0) hits = std::min<uint64_t>(hits, static_cast<uint64_t>(count));
  in.charge(s.size() + hits * to.size(), line);
  std::string r = replace_all(s, from, to.str(), count);
  return Value(t.has_client() || to.has_client() ? Text::client(std::move(r)) : Text(std::move(r)));
}

// ---- argument helpers ----------------------------------------------------

const Value* arg(const CallArgs& a, size_t n, std::string_view name) { return a.get(n, name); }

int64_t int_arg(const CallArgs& a, size_t n, std::string_view name, int64_t fallback) {
  const Value* v = arg(a, n, name);
  if (!v || v->is_none() || v->is_undefined()) return fallback;
  if (!v->is_number() || v->is_float()) type_error("'" + std::string(name) + "' must be an integer", a.line);
  return v->as_int();
}

bool bool_arg(const CallArgs& a, size_t n, std::string_view name, bool fallback) {
  const Value* v = arg(a, n, name);
  return v ? v->truthy() : fallback;
}

const Text& string_arg(const CallArgs& a, size_t n, std::string_view name) {
  const Value* v = arg(a, n, name);
  if (!v || !v->is_string()) type_error("'" + std::string(name) + "' must be a string", a.line);
  return v->text();
}

Value bound(std::string name, std::function<Value(Interpreter&, const CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->call = std::move(fn);
  return Value(std::shared_ptr<const Callable>(std::move(c)));
}

// A method the immutable sandbox refuses (it would mutate a list or dict).
Value unsafe(const Value& obj, const std::string& name) {
  const std::string type = obj.type_name();
  return bound(name, [type, name](Interpreter&, const CallArgs& a) -> Value {
    throw Error(Error::Kind::unsupported, "access to attribute '" + name + "' of '" + type + "' object is unsafe",
                a.line);
  });
}

// obj's attribute along a dotted path ("a.b"), as Jinja's attribute= args.
Value attribute_path(const Value& obj, const std::string& path) {
  Value v = obj;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    const std::string part = path.substr(b, e - b);
    if (v.is_undefined()) return v;
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(v, Value::markup(part));
    b = e + 1;
  }
  return v;
}

// Sort key comparison as Jinja's sort/dictsort/unique: strings compared
// lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::markup(map_case(v.str(), 0));
  return v;
}

CallArgs shifted(const CallArgs& a, size_t from) {
  CallArgs r;
  r.line = a.line;
  for (size_t i = from; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
Text format_method(const Text& fmt, const CallArgs& a) {
  const std::string& s = fmt.str();
  Text out;
  bool client = fmt.has_client();
  size_t auto_index = 0;
  std::string plain;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      plain += '{';
      ++i;
      continue;
    }
    if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      plain += '}';
      ++i;
      continue;
    }
    if (s[i] != '{') {
      plain += s[i];
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) type_error("Single '{' encountered in format string", a.line);
    const std::string field = s.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      throw Error(Error::Kind::unsupported, "format specs in str.format ('{" + field + "}')", a.line);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t k = std::stoul(field);
      v = k < a.positional.size() ? &a.positional[k] : nullptr;
    } else {
      for (const auto& [k, kv] : a.keyword) {
        if (k == field) v = &kv;
      }
    }
    if (!v) type_error("format field '{" + field + "}' has no argument", a.line);
    Text piece = v->to_text();
    client |= piece.has_client();
    plain += piece.str();
    i = close;
  }
  return client ? Text::client(std::move(plain)) : Text(std::move(plain));
}

// printf-style, for the format filter: %s, %d, %i, %r and %% only.
Text printf_format(const Text& fmt, const CallArgs& a) {
  const std::string& s = fmt.str();
  std::string out;
  bool client = fmt.has_client();
  size_t next = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (++i >= s.size()) type_error("incomplete format", a.line);
    if (s[i] == '%') {
      out += '%';
      continue;
    }
    if (next >= a.positional.size()) type_error("not enough arguments for format string", a.line);
    const Value& v = a.positional[next++];
    if (s[i] == 's') {
      Text t = v.to_text();
      client |= t.has_client();
      out += t.str();
    } else if (s[i] == 'r') {
      out += v.repr();
      client |= v.is_string() && v.text().has_client();
    } else if (s[i] == 'd' || s[i] == 'i') {
      if (!v.is_number()) type_error("%d format: a number is required", a.line);
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int());
    } else {
      throw Error(Error::Kind::unsupported, std::string("format conversion '%") + s[i] + "'", a.line);
    }
  }
  return client ? Text::client(std::move(out)) : Text(std::move(out));
}

// Jinja's indent filter.
Text indent(Interpreter& in, const Text& t, const Value* width, bool first, bool blank, int line) {
  std::string pad = "    ";
  if (width && width->is_string()) {
    pad = width->str();
  } else if (width && width->is_number()) {
    const auto n = static_cast<uint64_t>(std::max<int64_t>(0, width->as_int()));
    // Every line gets the padding: charged before any of it is built.
    const uint64_t lines = static_cast<uint64_t>(std::count(t.str().begin(), t.str().end(), '\n')) + 2;
    in.charge(n > UINT64_MAX / lines ? UINT64_MAX : n * lines, line);
    pad = std::string(static_cast<size_t>(n), ' ');
  }
  std::vector<std::string> lines;
  {
    // Python's splitlines on s + "\n" (the filter's own quirk), \n only.
    std::string s = t.str() + "\n";
    size_t b = 0;
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', b)) {
      lines.push_back(s.substr(b, at - b));
      b = at + 1;
    }
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + pad : "") + lines[i];
  } else {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  if (first) rv = pad + rv;
  return t.derived(std::move(rv));
}

int64_t to_int(const Value& v, int64_t fallback) {
  if (v.is_number()) return v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
  if (v.is_string()) {
    const std::string s = strip(v.text(), nullptr, 3).str();
    try {
      size_t used = 0;
      const long long i = std::stoll(s, &used, 10);
      if (used == s.size()) return i;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return static_cast<int64_t>(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

double to_float(const Value& v, double fallback) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = strip(v.text(), nullptr, 3).str();
      const double d = std::stod(s, &used);
      if (used == s.size()) return d;
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

List sorted(Interpreter& in, List items, bool reverse, bool case_sensitive, const std::string& attribute, int line) {
  in.charge(items.size() * 4, line);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) {
    Value k = attribute.empty() ? v : attribute_path(v, attribute);
    keyed.emplace_back(sort_key(k, case_sensitive), std::move(v));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  List out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

}  // namespace

Text html_escape(const Text& t) {
  std::string r = replace_all(t.str(), "&", "&amp;", -1);
  r = replace_all(r, "<", "&lt;", -1);
  r = replace_all(r, ">", "&gt;", -1);
  r = replace_all(r, "\"", "&#34;", -1);
  r = replace_all(r, "'", "&#39;", -1);
  return t.derived(std::move(r));
}

int64_t length(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::undefined: return 0;
    case Value::Type::string: return static_cast<int64_t>(code_points(v.str()).size() - 1);
    case Value::Type::list: return static_cast<int64_t>(v.list().size());
    case Value::Type::dict: return static_cast<int64_t>(v.dict().items.size());
    default: type_error("object of type '" + v.type_name() + "' has no len()", line);
  }
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    const Dict& d = obj.dict();
    if (d.is_namespace) {
      const Value* v = d.find(name);
      return v ? *v : Value(Undefined{name});
    }
    if (name == "get") {
      return bound(name, [obj](Interpreter&, const CallArgs& a) {
        const Value* k = arg(a, 0, "key");
        if (!k) type_error("get expected at least 1 argument", a.line);
        const Value* v = obj.dict().find(*k);
        if (v) return *v;
        const Value* def = arg(a, 1, "default");
        return def ? *def : Value(None{});
      });
    }
    if (name == "items" || name == "keys" || name == "values") {
      return bound(name, [obj, name](Interpreter&, const CallArgs&) {
        List out;
        for (const auto& [k, v] : obj.dict().items) {
          if (name == "items") out.push_back(Value(List{k, v}));
          else if (name == "keys") out.push_back(k);
          else out.push_back(v);
        }
        return Value(std::move(out));
      });
    }
    if (name == "copy" || name == "pop" || name == "update" || name == "setdefault" || name == "clear" ||
        name == "popitem") {
      return unsafe(obj, name);
    }
    const Value* v = d.find(name);
    return v ? *v : Value(Undefined{name});
  }
  if (obj.is_list()) {
    if (name == "append" || name == "pop" || name == "extend" || name == "insert" || name == "remove" ||
        name == "sort" || name == "reverse" || name == "clear") {
      return unsafe(obj, name);
    }
    if (name == "index" || name == "count") {
      return bound(name, [obj, name](Interpreter&, const CallArgs& a) {
        const Value* x = arg(a, 0, "value");
        if (!x) type_error(name + " expected 1 argument", a.line);
        int64_t n = 0;
        for (size_t i = 0; i < obj.list().size(); ++i) {
          if (!equals(obj.list()[i], *x)) continue;
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
        if (name == "index") type_error("value is not in list", a.line);
        return Value(n);
      });
    }
    return Value(Undefined{name});
  }
  if (!obj.is_string()) return Value(Undefined{name});
  const Text t = obj.text();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const int which = name == "strip" ? 3 : name == "lstrip" ? 1 : 2;
    return bound(name, [t, which](Interpreter&, const CallArgs& a) { return Value(strip(t, arg(a, 0, "chars"), which)); });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bound(name, [t, right](Interpreter& in, const CallArgs& a) {
      in.charge(t.size(), a.line);
      return Value(split(t, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), right));
    });
  }
  if (name == "splitlines") {
    return bound(name, [t](Interpreter&, const CallArgs&) {
      List out;
      const std::string& s = t.str();
      size_t b = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.push_back(Value(t.substr(b, i)));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          b = i + 1;
        }
      }
      if (b < s.size()) out.push_back(Value(t.substr(b, s.size())));
      return Value(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bound(name, [t, starts](Interpreter&, const CallArgs& a) {
      const Value* p = arg(a, 0, "prefix");
      if (!p) type_error("startswith/endswith need an argument", a.line);
      auto test = [&](const Value& v) {
        if (!v.is_string()) type_error("startswith/endswith arg must be str or a tuple of str", a.line);
        const std::string& s = t.str();
        const std::string& x = v.str();
        return s.size() >= x.size() && (starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
      };
      if (p->is_list()) {
        for (const Value& v : p->list()) {
          if (test(v)) return Value(true);
        }
        return Value(false);
      }
      return Value(test(*p));
    });
  }
  if (name == "upper" || name == "lower") {
    const int mode = name == "upper";
    return bound(name, [t, mode](Interpreter&, const CallArgs&) { return Value(t.derived(map_case(t.str(), mode))); });
  }
  if (name == "capitalize") return bound(name, [t](Interpreter&, const CallArgs&) { return Value(t.derived(capitalize(t.str()))); });
  if (name == "title") return bound(name, [t](Interpreter&, const CallArgs&) { return Value(t.derived(title(t.str()))); });
  if (name == "replace") {
    return bound(name, [t](Interpreter& in, const CallArgs& a) {
      return replaced(in, t, string_arg(a, 0, "old").str(), string_arg(a, 1, "new"), int_arg(a, 2, "count", -1),
                      a.line);
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return bound(name, [t, name](Interpreter&, const CallArgs& a) {
      const std::string& s = t.str();
      const std::string& x = string_arg(a, 0, "sub").str();
      auto cp_index = [&](size_t byte) {
        return static_cast<int64_t>(code_points(s.substr(0, byte)).size() - 1);
      };
      if (name == "count") {
        if (x.empty()) return Value(static_cast<int64_t>(code_points(s).size()));
        int64_t n = 0;
        for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
        return Value(n);
      }
      const size_t at = name == "find" ? s.find(x) : s.rfind(x);
      return Value(at == std::string::npos ? int64_t{-1} : cp_index(at));
    });
  }
  if (name == "format") {
    return bound(name, [t](Interpreter& in, const CallArgs& a) {
      Text r = format_method(t, a);
      in.charge(r.size(), a.line);
      return Value(std::move(r));
    });
  }
  if (name == "join") {
    return bound(name, [t](Interpreter& in, const CallArgs& a) {
      const Value* items = arg(a, 0, "iterable");
      if (!items) type_error("join expected 1 argument", a.line);
      Text out;
      bool firstp = true;
      for (const Value& v : in.iterate(*items, a.line)) {
        if (!v.is_string()) type_error("sequence item: expected str instance, " + v.type_name() + " found", a.line);
        if (!firstp) out.append(t);
        firstp = false;
        out.append(v.text());
      }
      in.charge(out.size(), a.line);
      return Value(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" ||
      name == "islower") {
    return bound(name, [t, name](Interpreter&, const CallArgs&) {
      const std::string& s = t.str();
      if (s.empty()) return Value(false);
      bool cased = false;
      for (size_t i = 0, len; i < s.size(); i += len) {
        const int32_t cp = decode_at(s, i, &len);
        const auto c = utf8proc_category(cp);
        const bool digit = c == UTF8PROC_CATEGORY_ND;
        const bool alpha = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        if (name == "isdigit" && !digit) return Value(false);
        if (name == "isalpha" && !alpha) return Value(false);
        if (name == "isalnum" && !alpha && !digit) return Value(false);
        if (name == "isspace" && !py_space(cp)) return Value(false);
        if (name == "isupper" || name == "islower") {
          const bool up = utf8proc_tolower(cp) != cp, low = utf8proc_toupper(cp) != cp;
          if ((name == "isupper" && low) || (name == "islower" && up)) return Value(false);
          cased |= up || low;
        }
      }
      return Value(name == "isupper" || name == "islower" ? cased : true);
    });
  }
  return Value(Undefined{name});
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    const Value* v = obj.dict().find(key);
    if (v) return *v;
    if (!key.is_string()) return Value(Undefined{});
    return obj.dict().is_namespace ? Value(Undefined{key.str()}) : get_attribute(obj, key.str());
  }
  if ((obj.is_list() || obj.is_string()) && key.is_number() && !key.is_float()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.list()[static_cast<size_t>(i)] : Value(Undefined{});
    }
    std::vector<size_t> at = code_points(obj.str());
    const auto n = static_cast<int64_t>(at.size()) - 1;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value(Undefined{});
    return Value(obj.text().substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1]));
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  return Value(Undefined{});
}

Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step, int line) {
  auto bound_of = [&](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_number() || v->is_float()) type_error("slice indices must be integers or None", line);
    return v->as_int();
  };
  const int64_t st = bound_of(step).value_or(1);
  if (st == 0) type_error("slice step cannot be zero", line);
  std::vector<size_t> at;
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else if (obj.is_string()) {
    at = code_points(obj.str());
    n = static_cast<int64_t>(at.size()) - 1;
  } else {
    type_error("'" + obj.type_name() + "' object is not subscriptable", line);
  }
  // Python's slice index adjustment.
  auto adjust = [&](std::optional<int64_t> v, int64_t def_pos, int64_t def_neg) {
    if (!v) return st > 0 ? def_pos : def_neg;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t b = adjust(bound_of(start), 0, n - 1), e = adjust(bound_of(stop), n, -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  if (obj.is_list()) {
    List out;
    for (int64_t i : idx) out.push_back(obj.list()[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  if (st == 1) return Value(obj.text().substr(at[static_cast<size_t>(std::min(b, n))], at[static_cast<size_t>(std::max(std::min(e, n), b))]));
  Text out;
  for (int64_t i : idx) out.append(obj.text().substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1]));
  return Value(std::move(out));
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  auto other = [&]() -> const Value& {
    const Value* o = arg(a, 0, "other");
    if (!o) type_error("test '" + name + "' needs an argument", a.line);
    return *o;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
  if (name == "iterable") return v.is_list() || v.is_generator() || v.is_string() || (v.is_dict() && !v.dict().is_namespace) || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.dict().is_namespace);
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!v.is_number() || v.is_float()) type_error("odd/even need an integer", a.line);
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& o = other();
    if (!v.is_number() || !o.is_number() || o.as_int() == 0) type_error("divisibleby needs nonzero numbers", a.line);
    return v.as_int() % o.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(other(), v);
  if (name == "le" || name == "<=") return !less(other(), v);
  if (name == "ge" || name == ">=") return !less(v, other());
  if (name == "in") {
    const Value& o = other();
    if (o.is_string()) return v.is_string() && o.str().find(v.str()) != std::string::npos;
    for (const Value& e : in.iterate(o, a.line)) {
      if (equals(e, v)) return true;
    }
    return false;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return map_case(v.str(), name == "upper") == v.str();
  }
  if (name == "sameas") {
    const Value& o = other();
    if (v.is_none() || v.is_bool()) return v.type() == o.type() && equals(v, o);
    return v.type() == o.type() && (v.is_dict() ? &v.dict() == &o.dict() : false);
  }
  if (name == "escaped") return false;
  throw Error(Error::Kind::unsupported, "no test named '" + name + "'", a.line);
}

namespace {

// ---- filters: one function each, found by name in filter_table() ---------
// Each takes the name it was called by, so aliases and pairs (upper/lower,
// first/last, min/max, select/reject...) share one body.

using FilterFn = Value (*)(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a);

Value filter_default(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value* d = arg(a, 0, "default_value");
    return d ? *d : Value::markup("");
  }
  return v;
}

Value filter_length(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  return Value(length(v, a.line));
}

Value filter_string(Interpreter&, const std::string&, const Value& v, const CallArgs&) { return Value(v.to_text()); }

Value filter_safe(Interpreter&, const std::string&, const Value& v, const CallArgs&) {
  Text t = v.to_text();
  t.set_safe(true);
  return Value(std::move(t));
}

Value filter_trim(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  return Value(strip(v.to_text(), arg(a, 0, "chars"), 3));
}

Value filter_case(Interpreter&, const std::string& name, const Value& v, const CallArgs&) {
  Text t = v.to_text();
  return Value(t.derived(map_case(t.str(), name == "upper")));
}

Value filter_capitalize(Interpreter&, const std::string&, const Value& v, const CallArgs&) {
  Text t = v.to_text();
  return Value(t.derived(capitalize(t.str())));
}

Value filter_title(Interpreter&, const std::string&, const Value& v, const CallArgs&) {
  Text t = v.to_text();
  return Value(t.derived(title(t.str())));
}

Value filter_escape(Interpreter&, const std::string&, const Value& v, const CallArgs&) {
  Text t = v.to_text();
  if (t.safe()) return Value(std::move(t));
  Text r = html_escape(t);
  r.set_safe(true);
  return Value(std::move(r));
}

Value filter_replace(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  const Value* from = arg(a, 0, "old");
  const Value* to = arg(a, 1, "new");
  if (!from || !to) type_error("replace needs old and new", a.line);
  return replaced(in, v.to_text(), from->to_text().str(), to->to_text(), int_arg(a, 2, "count", -1), a.line);
}

Value filter_tojson(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  int indent_width = -1;
  if (const Value* i = arg(a, 0, "indent"); i && !i->is_none()) {
    if (!i->is_number()) type_error("tojson indent must be an integer", a.line);
    indent_width = static_cast<int>(std::clamp<int64_t>(i->as_int(), 0, 64));
  }
  bool ascii = false;
  for (const auto& [k, kv] : a.keyword) {
    if (k == "ensure_ascii") {
      ascii = kv.truthy();
    } else if (k != "indent" && (k != "sort_keys" || kv.truthy())) {
      throw Error(Error::Kind::unsupported, "tojson argument '" + k + "'", a.line);
    }
  }
  std::string j = v.to_json(indent_width, ascii);
  in.charge(j.size(), a.line);
  bool client = false;
  std::function<void(const Value&)> scan = [&](const Value& x) {
    if (x.is_string()) client |= x.text().has_client();
    if (x.is_list()) for (const Value& e : x.list()) scan(e);
    if (x.is_dict()) for (const auto& [k, e] : x.dict().items) scan(e);
  };
  scan(v);
  return Value(client ? Text::client(std::move(j)) : Text(std::move(j)));
}

Value filter_list(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  return Value(in.iterate(v, a.line));
}

Value filter_first_last(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "last" && v.is_generator()) type_error("'generator' object is not reversible", a.line);
  List items = in.iterate(v, a.line);
  if (items.empty()) return Value(Undefined{"first"});
  return name == "first" ? items.front() : items.back();
}

Value filter_reverse(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  if (v.is_string()) {
    std::vector<size_t> at = code_points(v.str());
    Text out;
    for (size_t i = at.size() - 1; i > 0; --i) out.append(v.text().substr(at[i - 1], at[i]));
    return Value(std::move(out));
  }
  List items = in.iterate(v, a.line);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

Value filter_join(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attr = arg(a, 1, "attribute");
  Text out;
  const Text sep_text = sep ? sep->to_text() : Text();
  bool firstp = true;
  for (const Value& e : in.iterate(v, a.line)) {
    if (!firstp) out.append(sep_text);
    firstp = false;
    out.append((attr ? attribute_path(e, attr->to_text().str()) : e).to_text());
    in.charge(1, a.line);
  }
  in.charge(out.size(), a.line);
  return Value(std::move(out));
}

Value filter_items(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  if (v.is_undefined()) return Value(Generator{});
  if (!v.is_dict()) type_error("items filter needs a mapping, got " + v.type_name(), a.line);
  List out;
  for (const auto& [k, e] : v.dict().items) out.push_back(Value(List{k, e}));
  return Value(Generator{std::move(out)});
}

Value filter_dictsort(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  if (!v.is_dict()) type_error("dictsort needs a mapping", a.line);
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* by = arg(a, 1, "by");
  const bool by_value = by && by->is_string() && by->str() == "value";
  const bool rev = bool_arg(a, 2, "reverse", false);
  List pairs;
  for (const auto& [k, e] : v.dict().items) pairs.push_back(Value(List{k, e}));
  return Value(sorted(in, std::move(pairs), rev, cs, by_value ? "1" : "0", a.line));
}

Value filter_sort(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  const Value* attr = arg(a, 2, "attribute");
  return Value(sorted(in, in.iterate(v, a.line), bool_arg(a, 0, "reverse", false),
                      bool_arg(a, 1, "case_sensitive", false), attr ? attr->to_text().str() : "", a.line));
}

Value filter_unique(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = arg(a, 1, "attribute");
  List out, keys;
  for (const Value& e : in.iterate(v, a.line)) {
    Value k = sort_key(attr ? attribute_path(e, attr->to_text().str()) : e, cs);
    bool seen = false;
    for (const Value& s : keys) seen |= equals(s, k);
    in.charge(keys.size(), a.line);
    if (!seen) {
      keys.push_back(k);
      out.push_back(e);
    }
  }
  return Value(Generator{std::move(out)});
}

Value filter_map(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  List out;
  if (!v.truthy()) return Value(Generator{});  // Jinja maps nothing over a false value
  const Value* attr = nullptr;
  for (const auto& [k, kv] : a.keyword) {
    if (k == "attribute") attr = &kv;
  }
  for (const Value& e : in.iterate(v, a.line)) {
    if (attr) {
      Value r = attribute_path(e, attr->to_text().str());
      if (r.is_undefined()) {
        for (const auto& [k, kv] : a.keyword) {
          if (k == "default") r = kv;
        }
      }
      out.push_back(r);
    } else {
      if (a.positional.empty() || !a.positional[0].is_string()) type_error("map needs a filter name or attribute=", a.line);
      out.push_back(apply_filter(in, a.positional[0].str(), e, shifted(a, 1)));
    }
  }
  return Value(Generator{std::move(out)});
}

// select, reject, selectattr, rejectattr.
Value filter_select(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  const bool attr_form = name == "selectattr" || name == "rejectattr";
  const bool keep_when = name == "select" || name == "selectattr";
  size_t at = 0;
  std::string attr;
  if (attr_form) {
    if (a.positional.empty() || !a.positional[0].is_string()) type_error(name + " needs an attribute name", a.line);
    attr = a.positional[0].str();
    at = 1;
  }
  const bool has_test = a.positional.size() > at;
  if (has_test && !a.positional[at].is_string()) type_error(name + " needs a test name", a.line);
  const std::string test = has_test ? a.positional[at].str() : "";
  CallArgs test_args = shifted(a, at + 1);
  List out;
  if (!v.truthy()) return Value(Generator{});  // as Jinja: a false value selects nothing
  for (const Value& e : in.iterate(v, a.line)) {
    Value subject = attr_form ? attribute_path(e, attr) : e;
    const bool pass = has_test ? apply_test(in, test, subject, test_args) : subject.truthy();
    if (pass == keep_when) out.push_back(e);
  }
  return Value(Generator{std::move(out)});
}

Value filter_int(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  return Value(to_int(v, d ? to_int(*d, 0) : 0));
}

Value filter_float(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  return Value(to_float(v, d ? to_float(*d, 0.0) : 0.0));
}

Value filter_abs(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  if (!v.is_number()) type_error("bad operand type for abs()", a.line);
  return v.is_float() ? Value(std::fabs(v.as_double())) : Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
}

Value filter_round(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  if (!v.is_number()) type_error("round needs a number", a.line);
  const int64_t precision = int_arg(a, 0, "precision", 0);
  const Value* method = arg(a, 1, "method");
  const std::string m = method && method->is_string() ? method->str() : "common";
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::round(x);
  return Value(r / scale);
}

Value filter_sum(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  const Value* attr = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value acc = start ? *start : Value(int64_t{0});
  for (const Value& e : in.iterate(v, a.line)) {
    Value x = attr ? attribute_path(e, attr->to_text().str()) : e;
    if (!x.is_number() || !acc.is_number()) type_error("sum needs numbers", a.line);
    acc = acc.is_float() || x.is_float() ? Value(acc.as_double() + x.as_double()) : Value(acc.as_int() + x.as_int());
  }
  return acc;
}

Value filter_min_max(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  List items = in.iterate(v, a.line);
  if (items.empty()) return Value(Undefined{name});
  const bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = arg(a, 1, "attribute");
  size_t best = 0;
  auto key = [&](size_t i) { return sort_key(attr ? attribute_path(items[i], attr->to_text().str()) : items[i], cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    if (name == "min" ? less(key(i), key(best)) : less(key(best), key(i))) best = i;
  }
  return items[best];
}

Value filter_indent(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  return Value(indent(in, v.to_text(), arg(a, 0, "width"), bool_arg(a, 1, "first", false), bool_arg(a, 2, "blank", false),
                      a.line));
}

Value filter_format(Interpreter&, const std::string&, const Value& v, const CallArgs& a) {
  return Value(printf_format(v.to_text(), a));
}

Value filter_wordcount(Interpreter&, const std::string&, const Value& v, const CallArgs&) {
  return Value(static_cast<int64_t>(split(v.to_text(), nullptr, -1, false).size()));
}

Value filter_center(Interpreter& in, const std::string&, const Value& v, const CallArgs& a) {
  Text t = v.to_text();
  const int64_t width = int_arg(a, 0, "width", 80);
  const int64_t n = length(Value(t), a.line);
  if (n >= width) return Value(t);
  const int64_t total = width - n, left = total / 2 + (total & width & 1);
  in.charge(static_cast<uint64_t>(width), a.line);
  return Value(t.derived(std::string(static_cast<size_t>(left), ' ') + t.str() +
                         std::string(static_cast<size_t>(total - left), ' ')));
}

struct Filter {
  FilterFn fn;
  // Whether an undefined value may pass through it (Jinja's lenient
  // Undefined: these print or count it as empty); the others fail with
  // Error::Kind::undefined naming the variable.
  bool takes_undefined;
};

const std::unordered_map<std::string, Filter>& filter_table() {
  static const std::unordered_map<std::string, Filter> table = {
      {"default", {filter_default, true}},   {"d", {filter_default, true}},
      {"length", {filter_length, true}},     {"count", {filter_length, true}},
      {"string", {filter_string, true}},     {"safe", {filter_safe, true}},
      {"trim", {filter_trim, true}},         {"upper", {filter_case, true}},
      {"lower", {filter_case, true}},        {"capitalize", {filter_capitalize, false}},
      {"title", {filter_title, false}},      {"escape", {filter_escape, true}},
      {"e", {filter_escape, true}},          {"replace", {filter_replace, false}},
      {"tojson", {filter_tojson, false}},    {"list", {filter_list, true}},
      {"first", {filter_first_last, true}},  {"last", {filter_first_last, true}},
      {"reverse", {filter_reverse, false}},  {"join", {filter_join, true}},
      {"items", {filter_items, true}},       {"dictsort", {filter_dictsort, false}},
      {"sort", {filter_sort, false}},        {"unique", {filter_unique, false}},
      {"map", {filter_map, false}},          {"select", {filter_select, false}},
      {"reject", {filter_select, false}},    {"selectattr", {filter_select, false}},
      {"rejectattr", {filter_select, false}}, {"int", {filter_int, true}},
      {"float", {filter_float, true}},       {"abs", {filter_abs, false}},
      {"round", {filter_round, false}},      {"sum", {filter_sum, false}},
      {"min", {filter_min_max, false}},      {"max", {filter_min_max, false}},
      {"indent", {filter_indent, false}},    {"format", {filter_format, false}},
      {"wordcount", {filter_wordcount, false}}, {"center", {filter_center, false}},
  };
  return table;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  const auto it = filter_table().find(name);
  if (it == filter_table().end()) throw Error(Error::Kind::unsupported, "no filter named '" + name + "'", a.line);
  if (v.is_undefined() && !it->second.takes_undefined) {
    throw Error(Error::Kind::undefined,
                (v.undefined_name().empty() ? std::string("an undefined value") : "'" + v.undefined_name() + "'") +
                    " passed to filter '" + name + "'",
                a.line);
  }
  return it->second.fn(in, name, v, a);
}

const std::unordered_map<std::string, Value>& global_functions() {
  static const std::unordered_map<std::string, Value> globals = [] {
  std::unordered_map<std::string, Value> g;
  g.emplace("range", bound("range", [](Interpreter& in, const CallArgs& a) {
              if (a.positional.empty() || a.positional.size() > 3) type_error("range expected 1 to 3 arguments", a.line);
              for (const Value& v : a.positional) {
                if (!v.is_number() || v.is_float()) type_error("range arguments must be integers", a.line);
              }
              int64_t start = 0, stop = 0, step = 1;
              if (a.positional.size() == 1) {
                stop = a.positional[0].as_int();
              } else {
                start = a.positional[0].as_int();
                stop = a.positional[1].as_int();
                if (a.positional.size() == 3) step = a.positional[2].as_int();
              }
              if (step == 0) type_error("range() arg 3 must not be zero", a.line);
              const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                                            static_cast<double>(step)));
              in.charge(static_cast<uint64_t>(std::min(count, 1e18)), a.line);
              List out;
              for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value(i));
              return Value(std::move(out));
            }));
  auto make_dict = [](bool ns) {
    return [ns](Interpreter&, const CallArgs& a) {
      Dict d;
      d.is_namespace = ns;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) type_error("expected a mapping argument", a.line);
        for (const auto& [k, v] : p.dict().items) d.set_key(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.set(k, v);
      return Value(std::move(d));
    };
  };
  g.emplace("namespace", bound("namespace", make_dict(true)));
  g.emplace("dict", bound("dict", make_dict(false)));
  g.emplace("raise_exception", bound("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
              const Value* m = arg(a, 0, "message");
              throw Error(Error::Kind::raised, m ? m->to_text().str() : "raise_exception", a.line);
            }));
  g.emplace("strftime_now", bound("strftime_now", [](Interpreter& in, const CallArgs& a) {
              return Value::markup(in.clock()(string_arg(a, 0, "format").str()));
            }));
  return g;
  }();
  return globals;
}

}  // namespace actorlm::jinja
