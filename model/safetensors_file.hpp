#pragma once
// Read-only, memory-mapped view of one .safetensors file. Every tensor's
// offsets are checked against the file at open(); problems throw ModelError
// naming the file and tensor. Supported dtypes: F32, F16, BF16.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;             // "F32", "F16", "BF16" (others are rejected at read)
  std::vector<int64_t> shape;    // row-major, outermost first
  const uint8_t* data = nullptr;
  uint64_t byte_size = 0;

  int64_t element_count() const;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const;
  const std::vector<SafetensorsTensor>& tensors() const;
  const SafetensorsTensor* find(std::string_view name) const;

  // The tensor as float32, row-major. Throws ModelError for unsupported dtypes.
  std::vector<float> read_f32(const SafetensorsTensor& t) const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes tensors as a .safetensors file (F32 or F16 or BF16 storage); used by
// tests and tools to make small models.
struct SafetensorsWriteEntry {
  std::string name;
  std::string dtype;  // "F32", "F16" or "BF16"
  std::vector<int64_t> shape;
  std::vector<float> values;
};
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors);

}  // namespace actorlm
