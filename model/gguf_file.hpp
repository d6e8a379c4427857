#pragma once
// Read-only view of a GGUF file (v2 or v3), memory-mapped. Metadata is parsed
// eagerly; tensor data stays in the mapping and is read in place.
//
// Contract: every accessor is const and thread-safe once open() returned. All
// failures (missing file, wrong magic, unsupported version, truncated header or
// tensor data, bad alignment, out-of-range offsets) throw ModelError whose
// message names the file (and the key or tensor where there is one). A
// GgufFile owns its mapping; GgufTensorInfo::data points into it and is valid
// while the GgufFile lives.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ggml_type.hpp"
#include "model/mapped_file.hpp"

namespace actorlm {

// Thrown for any problem with a model file: format, content or shape.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GgufTensorInfo {
  std::string name;
  // ggml order: shape[0] is the fastest-moving (contiguous) dimension. A weight
  // matrix [out_features, in_features] appears as {in_features, out_features}.
  std::vector<uint64_t> shape;
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;        // from the start of the tensor-data section
  uint64_t byte_size = 0;     // bytes of (possibly quantized) data
  const uint8_t* data = nullptr;

  uint64_t element_count() const;
};

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  // Reads a GGUF image that is already in memory (tests, fuzzing). Nothing is
  // copied: `bytes` must outlive the GgufFile, and tensor data points into
  // it. `name` stands in for the path in path() and in error messages.
  static GgufFile from_memory(std::span<const uint8_t> bytes, const std::string& name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const;
  uint32_t version() const;
  // Owns the mapping tensor data points into, so that weights can keep
  // reading it after the GgufFile is gone; null for from_memory images.
  std::shared_ptr<const MappedFile> mapping() const;

  bool has_key(std::string_view key) const;
  // Whether the key holds an array (some keys are a scalar or a list).
  bool is_array(std::string_view key) const;
  // Typed getters return nullopt when the key is absent; a key present with an
  // incompatible type throws ModelError naming the key. Integers of any width
  // and signedness convert to int64_t (a u64 beyond its range throws); f32/f64
  // to double, and get_float also accepts integers. Arrays of arrays are parsed
  // and bounds-checked at open() but no getter returns them (asking for one
  // throws the type error); nesting deeper than three levels is refused.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::vector<std::string> keys() const;

  const std::vector<GgufTensorInfo>& tensors() const;
  // nullptr when absent.
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Throws ModelError naming the file and tensor when absent.
  const GgufTensorInfo& tensor(std::string_view name) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  // Parses the image at [base, base + size) into impl (both entry points).
  static GgufFile parse(std::unique_ptr<Impl> impl, const uint8_t* base, size_t size);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm
