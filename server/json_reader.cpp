#include "server/json_reader.hpp"

#include <cmath>
#include <cstdio>

namespace actorlm::api {

using nlohmann::json;

std::variant<json, ApiError> read_json(const std::string& body) {
  // nlohmann's lexer takes a NUL byte for the end of the input, so
  // `{...}\0garbage` would parse; no JSON text holds a raw NUL (strings must
  // escape it), so refuse any.
  if (body.find('\0') != std::string::npos)
    return bad_request("", "the request body contains a NUL byte");
  bool too_deep = false, too_many = false;
  size_t values = 0;
  // `depth` counts the containers around the event's value. Returning false
  // for a container's start makes the parser skip building it and all it
  // holds (it still scans the rest of the body, with heap stacks, not
  // recursion), so nothing deeper than the bound is ever allocated.
  auto guard = [&](int depth, json::parse_event_t event, json&) {
    if (too_deep || too_many) return false;
    const bool container =
        event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (!container && event != json::parse_event_t::value) return true;
    if (container && depth >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (++values > kMaxJsonValues) {
      too_many = true;
      return false;
    }
    return true;
  };
  json j = json::parse(body, guard, /*allow_exceptions=*/false);
  if (too_deep) {
    return bad_request(
        "", "the request body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  if (too_many) {
    return bad_request(
        "", "the request body holds more than " + std::to_string(kMaxJsonValues) + " JSON values");
  }
  if (j.is_discarded()) return bad_request("", "the request body is not valid JSON");
  return j;
}

FieldReader::FieldReader(const json& object, std::string path)
    : object_(object), path_(std::move(path)) {}

const json* FieldReader::find(std::string_view key) const {
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string FieldReader::param(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

ApiError FieldReader::error(std::string_view key, std::string_view message) const {
  const std::string p = param(key);
  return bad_request(p, "'" + p + "' " + std::string(message));
}

std::optional<ApiError> FieldReader::boolean(std::string_view key, bool* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return error(key, "must be a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> FieldReader::string(std::string_view key, std::string* out) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return error(key, "must be a string");
  *out = v->get_ref<const std::string&>();
  return std::nullopt;
}

namespace {

std::string shortest(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

}  // namespace

std::optional<ApiError> FieldReader::number(std::string_view key, double lo, double hi, float* out,
                                            bool lo_open) const {
  const json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return error(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
    return error(key, "must be a number in " + std::string(lo_open ? "(" : "[") + shortest(lo) +
                          ", " + shortest(hi) + "]");
  }
  *out = static_cast<float>(x);
  return std::nullopt;
}

ApiError FieldReader::integer_error(std::string_view key, const std::string& lo,
                                    const std::string& hi) const {
  return error(key, "must be an integer between " + lo + " and " + hi);
}

}  // namespace actorlm::api
