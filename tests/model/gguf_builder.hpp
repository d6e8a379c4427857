#pragma once
// Writes small GGUF files (v2 or v3) for tests: every metadata value type,
// tensors of any type id with raw bytes, chosen alignment. The layout follows
// the GGUF spec: header, metadata, tensor infos, padding to the alignment,
// then each tensor's data at an aligned offset. No trailing padding, so every
// strict prefix of the output is a truncated file.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/ggml_type.hpp"

namespace actorlm::test {

class GgufBuilder {
 public:
  enum Type : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  // Scalars: `bytes` of the value in little-endian order.
  template <class T>
  GgufBuilder& scalar(const std::string& key, Type type, T value) {
    key_(key);
    put<uint32_t>(meta_, type);
    put<T>(meta_, value);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) { return scalar(key, U32, v); }
  GgufBuilder& i32(const std::string& key, int32_t v) { return scalar(key, I32, v); }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return scalar(key, U64, v); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, F32, v); }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    key_(key);
    put<uint32_t>(meta_, STRING);
    string_(meta_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    key_(key);
    put<uint32_t>(meta_, ARRAY);
    put<uint32_t>(meta_, STRING);
    put<uint64_t>(meta_, v.size());
    for (const auto& s : v) string_(meta_, s);
    ++n_kv_;
    return *this;
  }
  template <class T>
  GgufBuilder& array(const std::string& key, Type elem, const std::vector<T>& v) {
    key_(key);
    put<uint32_t>(meta_, ARRAY);
    put<uint32_t>(meta_, elem);
    put<uint64_t>(meta_, v.size());
    for (const T& x : v) put<T>(meta_, x);
    ++n_kv_;
    return *this;
  }
  // An array of `outer` arrays of i32 {0, 1, ..., k}, nested `depth` levels.
  GgufBuilder& nested(const std::string& key, int depth, uint64_t outer) {
    key_(key);
    put<uint32_t>(meta_, ARRAY);
    nested_body_(depth, outer);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& alignment(uint32_t a) {
    alignment_ = a;
    return u32("general.alignment", a);
  }

  // shape in ggml order (fastest dimension first); raw = the tensor's bytes.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> shape, uint32_t type,
                      std::vector<uint8_t> raw) {
    tensors_.push_back({name, std::move(shape), type, std::move(raw)});
    return *this;
  }
  GgufBuilder& f32_tensor(const std::string& name, std::vector<uint64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> raw(v.size() * 4);
    std::memcpy(raw.data(), v.data(), raw.size());
    return tensor(name, std::move(shape), static_cast<uint32_t>(GgmlType::F32), std::move(raw));
  }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
    put<uint32_t>(out, version_);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, n_kv_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      string_(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
      for (uint64_t d : t.shape) put<uint64_t>(out, d);
      put<uint32_t>(out, t.type);
      put<uint64_t>(out, offset);
      offsets.push_back(offset);
      offset = align_(offset + t.raw.size());
    }
    out.resize(align_(out.size()), 0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.resize(data_start + offsets[i], 0);
      out.insert(out.end(), tensors_[i].raw.begin(), tensors_[i].raw.end());
    }
    return out;
  }

  std::string write(const std::string& path) const { return write_bytes(path, bytes()); }

  static std::string write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return path;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> shape;
    uint32_t type;
    std::vector<uint8_t> raw;
  };

  template <class T>
  static void put(std::vector<uint8_t>& out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  static void string_(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void key_(const std::string& key) { string_(meta_, key); }
  void nested_body_(int depth, uint64_t outer) {
    if (depth <= 1) {
      put<uint32_t>(meta_, I32);
      put<uint64_t>(meta_, outer);
      for (uint64_t k = 0; k < outer; ++k) put<int32_t>(meta_, static_cast<int32_t>(k));
      return;
    }
    put<uint32_t>(meta_, ARRAY);
    put<uint64_t>(meta_, outer);
    for (uint64_t k = 0; k < outer; ++k) nested_body_(depth - 1, k + 1);
  }
  uint64_t align_(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint64_t alignment_ = 32;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> meta_;
  std::vector<Tensor> tensors_;
};

}  // namespace actorlm::test
