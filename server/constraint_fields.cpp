#include "server/constraint_fields.hpp"

#include <string>

namespace actorlm::api {

using nlohmann::json;

namespace {

std::optional<ApiError> too_long(const FieldReader& f, const char* key) {
  return f.error(key, "is longer than " + std::to_string(kMaxConstraintBytes / 1024) + " KiB");
}

}  // namespace

std::optional<ApiError> read_response_format(const FieldReader& body, ConstraintSpec& out) {
  const json* rf = body.find("response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return body.error("response_format", "must be an object with a 'type'");
  const FieldReader f(*rf, body.param("response_format"));
  const json* type = f.find("type");
  if (!type || !type->is_string()) return f.error("type", "must be 'text', 'json_object' or 'json_schema'");
  const auto& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out = {ConstraintKind::json_object, ""};
    return std::nullopt;
  }
  if (t != "json_schema") return f.error("type", "is " + echo(t) + "; use 'text', 'json_object' or 'json_schema'");
  const json* js = f.find("json_schema");
  if (!js || !js->is_object()) return f.error("json_schema", "must be an object holding the 'schema'");
  const FieldReader s(*js, f.param("json_schema"));
  std::string ignored;
  if (auto e = s.string("name", &ignored)) return e;
  if (auto e = s.string("description", &ignored)) return e;
  bool strict = true;
  if (auto e = s.boolean("strict", &strict)) return e;
  const json* schema = s.find("schema");
  if (!schema) {
    out = {ConstraintKind::json_object, ""};
    return std::nullopt;
  }
  if (!schema->is_object() && !schema->is_boolean()) return s.error("schema", "must be a JSON Schema object");
  std::string text = schema->dump();
  if (text.size() > kMaxConstraintBytes) return too_long(s, "schema");
  out = {ConstraintKind::json_schema, std::move(text)};
  return std::nullopt;
}

std::optional<ApiError> read_sglang_constraint(const FieldReader& f, ConstraintSpec& out) {
  struct Key {
    const char* name;
    ConstraintKind kind;
  };
  const char* chosen = nullptr;
  for (const Key k : {Key{"regex", ConstraintKind::regex}, Key{"ebnf", ConstraintKind::ebnf},
                      Key{"json_schema", ConstraintKind::json_schema}}) {
    if (!f.find(k.name)) continue;
    if (chosen) return f.error(k.name, std::string("cannot be combined with '") + chosen + "'");
    chosen = k.name;
    std::string text;
    if (auto e = f.string(k.name, &text)) return e;
    if (text.size() > kMaxConstraintBytes) return too_long(f, k.name);
    if (text.empty()) return f.error(k.name, "is empty");
    out = {k.kind, std::move(text)};
  }
  return std::nullopt;
}

}  // namespace actorlm::api
