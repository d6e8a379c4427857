#pragma once
// Jinja's filters and tests, Python's str/dict/list methods and the sandbox's
// global functions, as chat templates use them (internal to jinja/). Names
// not listed fail with Error::Kind::unsupported naming them.

#include <string>
#include <unordered_map>

#include "jinja/value.hpp"

namespace actorlm::jinja {

// value | name(args)
Value apply_filter(Interpreter& in, const std::string& name, const Value& value, const CallArgs& args);
// value is name(args)
bool apply_test(Interpreter& in, const std::string& name, const Value& value, const CallArgs& args);
// obj.name as Jinja's getattr (a method bound to obj, a dict item, a
// namespace attribute; undefined when there is none).
Value get_attribute(const Value& obj, const std::string& name);
// obj[key] as Jinja's getitem (item first, then attribute).
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] (null: omitted), by code point for strings.
Value get_slice(const Value& obj, const Value* start, const Value* stop, const Value* step, int line);
// Jinja's escape filter (markupsafe): & < > " ' as HTML entities.
Text html_escape(const Text& t);
// len() in Python's units (code points for strings).
int64_t length(const Value& v, int line);
// range, namespace, dict, raise_exception, strftime_now (built once; the
// functions keep no state).
const std::unordered_map<std::string, Value>& global_functions();

}  // namespace actorlm::jinja
