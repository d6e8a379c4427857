#pragma once
// The only way a client's request body becomes JSON, and typed readers for its
// fields that answer a wrong type or an out-of-range value with an ApiError
// instead of an exception.
//
// Contract for everything built on these: client JSON is read in place
// through const references. It is never copied, compared or dumped, because
// nlohmann's copy, operator== and dump() recurse once per nesting level.

#include <concepts>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "server/api_error.hpp"

namespace actorlm::api {

// A container (object or array) nested in kMaxJsonDepth others is refused:
// the body's top-level object is depth 1, so `{"a": [1]}` has depth 2.
inline constexpr int kMaxJsonDepth = 64;
// Values in one body (containers and scalars alike). A prompt of 2^20 token
// ids fits; a body of a few MB of `[0,0,...]` does not.
inline constexpr size_t kMaxJsonValues = size_t{1} << 21;

// Parses a whole body. Refused (400): invalid JSON or UTF-8, any byte after
// the value (trailing garbage or a NUL byte anywhere), nesting deeper than
// kMaxJsonDepth, more than kMaxJsonValues values. The refusal happens during
// the parse, so the returned DOM (or a partial one) never holds a node deeper
// than kMaxJsonDepth.
std::variant<nlohmann::json, ApiError> read_json(const std::string& body);

// `v` as a T when it is a JSON integer in [lo, hi]. A number written with a
// fraction or an exponent (5.0, 5e0) is not an integer, and neither is "5".
template <std::integral T>
std::optional<T> integer_in(const nlohmann::json& v, T lo, T hi) {
  // nlohmann keeps non-negative literals as uint64 and negative ones as
  // int64; compare in the type it holds so nothing wraps.
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (std::cmp_less(u, lo) || std::cmp_greater(u, hi)) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const auto s = v.get<int64_t>();
    if (std::cmp_less(s, lo) || std::cmp_greater(s, hi)) return std::nullopt;
    return static_cast<T>(s);
  }
  return std::nullopt;
}

// Reads the fields of one JSON object of a request. Every reader treats an
// absent field and an explicit null alike (OpenAI's optional fields are
// nullable): it leaves *out as it was and returns nullopt. Otherwise it
// checks type and range, stores the value, or returns a 400 whose param is
// the field's dotted path.
class FieldReader {
 public:
  // `object` must be a JSON object and outlive the reader; `path` names it in
  // errors ("" for the body itself, "sampling_params", "stream_options").
  FieldReader(const nlohmann::json& object, std::string path);

  // The field's value, or nullptr when it is absent or null.
  const nlohmann::json* find(std::string_view key) const;
  // "key" or "path.key".
  std::string param(std::string_view key) const;
  ApiError error(std::string_view key, std::string_view message) const;

  std::optional<ApiError> boolean(std::string_view key, bool* out) const;
  std::optional<ApiError> string(std::string_view key, std::string* out) const;
  // A finite number in [lo, hi], or in (lo, hi] when lo_open; integers are
  // numbers too.
  std::optional<ApiError> number(std::string_view key, double lo, double hi, float* out,
                                 bool lo_open = false) const;
  template <std::integral T>
  std::optional<ApiError> integer(std::string_view key, T lo, T hi, T* out) const {
    const nlohmann::json* v = find(key);
    if (!v) return std::nullopt;
    const std::optional<T> x = integer_in(*v, lo, hi);
    if (!x) return integer_error(key, std::to_string(lo), std::to_string(hi));
    *out = *x;
    return std::nullopt;
  }

 private:
  ApiError integer_error(std::string_view key, const std::string& lo, const std::string& hi) const;
  const nlohmann::json& object_;
  std::string path_;
};

}  // namespace actorlm::api
