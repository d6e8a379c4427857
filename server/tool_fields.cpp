#include "server/tool_fields.hpp"

#include <algorithm>

namespace actorlm::api {

using nlohmann::json;

namespace {

constexpr size_t kMaxTools = 128;
constexpr size_t kMaxToolCalls = 64;

bool valid_name(const std::string& n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

std::optional<ApiError> read_tool_choice(const FieldReader& f, ToolRequest& r) {
  const json* tc = f.find("tool_choice");
  r.choice = r.names.empty() ? ToolChoice::none : ToolChoice::automatic;
  if (!tc) return std::nullopt;
  const char* need = "must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (tc->is_string()) {
    const auto& s = tc->get_ref<const std::string&>();
    if (s == "none") r.choice = ToolChoice::none;
    else if (s == "auto") r.choice = ToolChoice::automatic;
    else if (s == "required") r.choice = ToolChoice::required;
    else return f.error("tool_choice", need);
  } else if (tc->is_object()) {
    const FieldReader c(*tc, f.param("tool_choice"));
    std::string type;
    if (auto e = c.string("type", &type)) return e;
    const json* fn = c.find("function");
    if (type != "function" || !fn || !fn->is_object()) return f.error("tool_choice", need);
    if (auto e = FieldReader(*fn, c.param("function")).string("name", &r.named)) return e;
    if (std::find(r.names.begin(), r.names.end(), r.named) == r.names.end())
      return c.error("function", "names " + echo(r.named) + ", which is not in 'tools'");
    r.choice = ToolChoice::named;
  } else {
    return f.error("tool_choice", need);
  }
  if (r.choice != ToolChoice::none && r.names.empty()) return f.error("tool_choice", "needs 'tools'");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_tools(const FieldReader& f, ToolRequest& r) {
  const json* tools = f.find("tools");
  if (tools) {
    if (!tools->is_array() || tools->empty() || tools->size() > kMaxTools)
      return f.error("tools", "must be a non-empty list of at most 128 functions");
    json list = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string path = f.param("tools") + "[" + std::to_string(i) + "]";
      if (!t.is_object()) return bad_request(path, "'" + path + "' must be an object");
      const FieldReader tf(t, path);
      std::string type;
      if (auto e = tf.string("type", &type)) return e;
      if (type != "function") return tf.error("type", "must be 'function'");
      const json* fn = tf.find("function");
      if (!fn || !fn->is_object()) return tf.error("function", "must be an object");
      const FieldReader ff(*fn, tf.param("function"));
      std::string name, description;
      if (auto e = ff.string("name", &name)) return e;
      if (!valid_name(name)) return ff.error("name", "must be 1-64 characters from A-Z, a-z, 0-9, '_' and '-'");
      if (std::find(r.names.begin(), r.names.end(), name) != r.names.end())
        return ff.error("name", "is " + echo(name) + ", which another tool has");
      if (auto e = ff.string("description", &description)) return e;
      bool strict = false;
      if (auto e = ff.boolean("strict", &strict)) return e;
      const json* params = ff.find("parameters");
      if (params && !params->is_object()) return ff.error("parameters", "must be a JSON Schema object");
      json out = {{"type", "function"}, {"function", {{"name", name}}}};
      if (!description.empty()) out["function"]["description"] = description;
      const json schema = params ? *params : json{{"type", "object"}, {"properties", json::object()}};
      out["function"]["parameters"] = schema;
      r.names.push_back(name);
      r.parameters.push_back(schema.dump());
      list.push_back(std::move(out));
    }
    r.tools = list.dump();
  }
  if (auto e = read_tool_choice(f, r)) return e;
  return f.boolean("parallel_tool_calls", &r.parallel);
}

ConstraintSpec tool_call_constraint(const ToolRequest& r, ToolFormat format) {
  const ToolCallFrame frame = tool_call_frame(format);
  // ordered_json: the parameters keep the order the client gave them in.
  using ordered = nlohmann::ordered_json;
  ordered any = ordered::array();
  for (size_t i = 0; i < r.names.size(); ++i) {
    if (r.choice == ToolChoice::named && r.names[i] != r.named) continue;
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", r.names[i]}}}, {frame.arguments_key, ordered::parse(r.parameters[i])}}},
                   {"required", {"name", frame.arguments_key}},
                   {"additionalProperties", false}});
  }
  const ordered schema = any.size() == 1 ? any[0] : ordered{{"anyOf", any}};
  return {ConstraintKind::json_schema, schema.dump(), frame.prefix, frame.suffix};
}

std::optional<ApiError> read_assistant_tool_calls(const FieldReader& m, std::string& out) {
  const json* calls = m.find("tool_calls");
  if (!calls) return std::nullopt;
  const char* need = "must be a list of {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}";
  if (!calls->is_array() || calls->size() > kMaxToolCalls) return m.error("tool_calls", need);
  json list = json::array();
  for (const json& c : *calls) {
    if (!c.is_object()) return m.error("tool_calls", need);
    const FieldReader cf(c, m.param("tool_calls"));
    std::string id, type = "function", name, arguments;
    if (auto e = cf.string("id", &id)) return e;
    if (auto e = cf.string("type", &type)) return e;
    const json* fn = cf.find("function");
    if (type != "function" || !fn || !fn->is_object()) return m.error("tool_calls", need);
    const FieldReader ff(*fn, cf.param("function"));
    if (auto e = ff.string("name", &name)) return e;
    if (auto e = ff.string("arguments", &arguments)) return e;
    list.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
  }
  out = list.dump();
  return std::nullopt;
}

}  // namespace actorlm::api
