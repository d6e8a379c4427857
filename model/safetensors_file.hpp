#pragma once
// Read-only, memory-mapped views of .safetensors files and of a Hugging Face
// checkpoint folder that may split its tensors over several shards.
//
// Contract: open() parses the JSON header and checks every tensor's dtype
// size, shape and data_offsets against the file, so a tensor handed out is
// always wholly inside the mapping. Problems throw ModelError naming the file
// and tensor. Supported dtypes for reading: F32, F16, BF16; a tensor of another
// safetensors dtype (I64, F64, U8, F8_E4M3, ...) opens, its bytes range-checked,
// but read_f32() refuses it, naming the tensor and dtype. A dtype name the
// format does not define fails open(). Objects own their mappings; the pointers they
// hand out are valid while they live. All accessors are const and
// thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;             // as written: "F32", "F16", "BF16", "I64", ...
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
  // In the header's order (nlohmann sorts object keys: alphabetical).
  const std::vector<SafetensorsTensor>& tensors() const;
  // nullptr when absent.
  const SafetensorsTensor* find(std::string_view name) const;

  // The tensor (one of this file's) as float32, row-major. Throws ModelError
  // naming the file, tensor and dtype for unsupported dtypes.
  std::vector<float> read_f32(const SafetensorsTensor& t) const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// All shards of a Hugging Face checkpoint folder. Which files are shards:
// - model.safetensors.index.json present: exactly the files its weight_map
//   names (each must exist, be a plain file name inside the folder, and hold
//   the tensors the map assigns to it);
// - else model.safetensors present: that file alone;
// - else every *.safetensors in the folder, in name order.
// A tensor name held by two shards is an error.
class SafetensorsCheckpoint {
 public:
  struct Entry {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
    explicit operator bool() const { return tensor != nullptr; }
  };

  static SafetensorsCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Both fields null when no shard holds `name`.
  Entry find(std::string_view name) const;
  std::vector<std::string> tensor_names() const;

 private:
  std::string dir_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Entry, std::less<>> index_;
};

// Writes tensors as a .safetensors file (F32, F16 or BF16 storage, values
// rounded to nearest even); used by tests and tools to make small models.
struct SafetensorsWriteEntry {
  std::string name;
  std::string dtype;  // "F32", "F16" or "BF16"
  std::vector<int64_t> shape;
  std::vector<float> values;
};
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteEntry>& tensors);

}  // namespace actorlm
